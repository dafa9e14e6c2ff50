"""The estimator :class:`SparseVMFMixture` (MAP l1-penalised vMF mixture, [1]_).

It drives the batch EM of :mod:`bayesvmf.models.sparse._em` (``fit``), the stepwise EM of
:mod:`bayesvmf.models.sparse._online` (``partial_fit``) and the beta path of Algorithm 3
(``path``, returning a :class:`~bayesvmf.models.sparse.SparsePath`).

References
----------
.. [1] Rossi and Barbaro, sparse vMF mixture (in full: :mod:`bayesvmf.models.sparse`).
.. [2] Banerjee, Dhillon, Ghosh and Sra, JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import numbers
import warnings
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

from bayesvmf import _arviz, _blocks, _guards, _mixture, _parallel, _seeding, criteria
from bayesvmf._base import STREAM_CONSTRAINTS, StreamingMixin
from bayesvmf._mixture import Status
from bayesvmf.models.sparse import _em
from bayesvmf.models.sparse import _online as _stepwise

if TYPE_CHECKING:
    from bayesvmf.models.sparse._path import SparsePath

__all__ = ["SparseVMFMixture"]

#: Constraints of the arguments of :meth:`SparseVMFMixture.path`.
_PATH_CONSTRAINTS = {
    "max_steps": [Interval(numbers.Integral, 1, None, closed="left"), None],
    "min_rel_increase": [Interval(numbers.Real, 0.0, None, closed="left")],
    "eps": [Interval(numbers.Real, 0.0, None, closed="left")],
}


class SparseVMFMixture(StreamingMixin, _mixture.BaseVMFMixture):
    """l1-penalised (sparse) mixture of von Mises-Fisher distributions (Rossi & Barbaro).

    Maximises eq. (11) of [1]_ by the EM of Algorithm 2; ``beta = 0`` is the classical vMF
    mixture of Banerjee et al. [2]_. Input may be dense or scipy.sparse; sparse input stays
    sparse on the device (memory O(nnz + K d)).

    Parameters
    ----------
    n_components : int, default 1
        K.
    beta : float, default 0.0
        The l1 penalty beta >= 0 of eq. (11).
    shared_kappa : bool, default False
        One concentration for all components (sec. 3.2.3, eqs. (27)-(29)); recommended when
        n is not much larger than d (the paper's CSTR experiments).
    n_init : int, default 1
        Number of restarts, run side by side (vectorised), each with its own key; among the
        non-degenerate ones, the first whose penalised log-likelihood per row is within
        ``tol`` of the best is kept (:func:`bayesvmf._mixture.best_run`: near-ties are one
        optimum, often with permuted labels, and the choice must not hang on rounding).
        One greedy k-means++ start is scikit-learn's ``KMeans`` default too
        (``n_init="auto"``); earlier versions used 10 random starts
        (benchmarks/results/vs_sklearn.md compares).
    max_iter : int, default 1000
        Maximal number of EM iterations per run.
    tol : float, default 1e-6
        Absolute convergence threshold on the change of the penalised log-likelihood per
        row: a run has converged when the change is at most
        ``tol + rtol * |bound - log C_d(0)|``.
    rtol : float, default 1e-5
        Relative part of that threshold (:func:`bayesvmf.models.sparse.settled`): relative
        to the gain per row over the uniform distribution, ``|bound - log C_d(0)|``, which
        grows with the concentrations (about 64 for d = 256, kappa 150-400), where EM's last
        iterations creep without changing the partition; ``rtol=0`` is the absolute test of
        earlier versions.
    init : str or array of int of shape (n_samples,), default "greedy-spherical-kmeans++"
        "random" is Algorithm 4 of [1]_ (K distinct rows, crisp assignment; the default of
        earlier versions); "spherical-kmeans++" seeds by k-means++ on the cosine
        dissimilarity; "greedy-spherical-kmeans++" keeps the best of 2 + floor(ln K)
        candidates per seed (the seeding of scikit-learn's KMeans;
        benchmarks/results/scale.md compares them). On data of more than
        max(4096, 128 K) rows (dense, or sparse on one CPU device) every method draws from a
        uniform subsample of that many rows (:func:`bayesvmf._seeding.seeding_sample`).
        An array of labels in ``[0, K)`` (every component used) starts EM from that
        partition (its M-step, see :func:`init_state_from_labels`), so that several
        estimators can start from the same assignments; ``n_init`` is then ignored (one
        run).
    kmeans_iter : int, default 20
        Hard spherical k-means passes (Lloyd's iterations on the cosine) that refine each
        restart's seeds before EM (:func:`bayesvmf.models.sparse.spherical_kmeans`; they
        stop early once the partition has settled), then split-and-merge moves
        (:func:`bayesvmf.models.sparse.split_merge`: two directions that share a cluster are
        merged and the direction that covers two clusters is split, each move kept only if
        it raises the spherical k-means objective), which leave the local optima an unlucky
        seeding falls into (benchmarks/results/vs_sklearn.md); EM then starts from the
        M-step of the final partition; on data seeded from a subsample the seeds get the
        same refinement there first, and on all rows only the hard passes follow (the
        moves are made once: :func:`bayesvmf._parallel.refine`). 0 starts EM at the seeds
        (Algorithm 4 of [1]_, the behaviour of earlier versions on data of at most
        max(4096, 128 K) rows). Ignored when ``init`` is an array of labels.
    kappa_max : float, default 1e6
        Concentration cap (appendix B of [1]_); reaching it marks the run as collapsed.
    normalize : bool, default True
        Rescale rows to unit norm; with False, non-unit rows raise a ValueError.
    dtype : {"mixed", "float64"}, default "mixed"
        "mixed" runs the two data products in float32 (docs/design.md section 5: BLAS
        products of dense input, SciPy's of sparse input, at half the memory traffic), and
        everything else (log-normalisers, kappa solves, likelihood sums, responsibilities) in
        float64; "float64" (the default of earlier versions) runs the products in float64
        too.
    random_state : None, int, numpy RandomState or Generator, or jax key, default None
        Seed of the restarts' initialisations: an int (reproducible), a NumPy
        ``RandomState`` / ``Generator`` (a seed is drawn from it at each fit), a JAX key,
        or None (a fresh seed). ``sample`` uses it too when called without one.
    verbose : int, default 0
        scikit-learn's verbosity level: 0 is silent, 1 or more shows a progress bar of the
        EM iterations (and of :meth:`path`).
    devices : None, int or list of jax devices, default None
        Data-parallel fits (docs/design.md section 6): the rows of X are split into one equal
        block per device (``jax.sharding``; padding rows carry weight 0), every device
        computes the E-step statistics of its rows (counts, resultants, log-likelihood),
        which are summed with ``psum``; the M-step runs replicated. The result equals the
        one-device fit to floating-point accuracy (except the seeds of sparse data of more
        than max(4096, 128 K) rows: one CPU device draws them from a subsample, row blocks
        from all rows; docs/design.md section 6). An int n means the first n of
        ``jax.devices()``; None is the default device. ``fit``, ``fit_predict`` and
        ``partial_fit`` shard; ``predict``, ``score`` etc. run on the default device.
    learning_decay : float in (0.5, 1], default 0.7
        The exponent a of the step sizes rho_t = (t + tau)^(-a) of :meth:`partial_fit`
        (:class:`bayesvmf._base.StreamingMixin`).
    learning_offset : float >= 0, default 1.0
        The offset tau of those step sizes (a larger tau damps the first steps).

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,)
    mean_directions_ : ndarray of shape (n_components, n_features)
    concentrations_ : ndarray of shape (n_components,)
        Equal entries when ``shared_kappa``.
    n_iter_ : int
    converged_ : bool
    lower_bound_ : float
        Penalised log-likelihood per row (eq. (11) / n) at the fitted parameters.
    log_likelihood_ : float
        Total unpenalised log-likelihood (eq. (9)) on the training data.
    sparsity_ : float
        Fraction of zero coordinates of the mean directions.
    status_ : int
        :class:`bayesvmf._mixture.Status` of the kept run (0 = healthy).
    run_statuses_, run_lower_bounds_, run_n_iter_ : ndarray of shape (n_init,)
        Status, penalised bound and number of EM iterations of every restart.
    n_occupied_components_ : int
        Components of the kept run with at least one row's weight.
    largest_share_ : float
        Largest fraction of the data held by one component of the kept run.
    degenerate_components_ : ndarray of int
        Components of the kept run that :func:`bayesvmf._guards.diagnose` finds degenerate
        (empty, at ``kappa_max``, carried by one vector, a near-uniform background, or
        coinciding with an earlier component: then a
        :class:`~bayesvmf.exceptions.DegenerateRunWarning` names them).
    n_degenerate_restarts_ : int
        Restarts that degenerated (a :class:`~bayesvmf._mixture.Status` or a degenerate
        component), kept or not; the kept run is one of them only when all are.
    labels_ : ndarray of shape (n_samples,)
        After :meth:`fit`: the component of each training row (``fit_predict``'s result).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The column names of a DataFrame X given to ``fit`` (only then).
    n_samples_seen_, n_steps_ : int
        After :meth:`partial_fit`: rows received and online steps done after the first call.
        There, ``n_iter_`` counts the EM iterations of the first call plus one per call,
        ``converged_`` is that of the first call's batch fit, and ``log_likelihood_`` and
        ``lower_bound_`` are those of the last chunk at the parameters it was given.

    Notes
    -----
    Memory of a batch fit of sparse input on CPU (measured in benchmarks/results/scale.md).
    Besides the caller's X, a fit holds: nothing more of the data when X is a
    unit-normalised float64 CSR matrix (:func:`bayesvmf.data.check_directional` with
    ``copy=False`` shares its arrays read-only, and the "scipy" kernel keeps them on the
    host: the device holds one handle per row block), else a normalised copy; with
    ``dtype="mixed"`` a float32 copy of the values; per restart O(K d) for the directions,
    resultants and the M-step's new directions, and O(n K) for the log-likelihoods and
    responsibilities. Transient: each product hands its dense operand and result across the
    host callback (JAX copies callback operands). glibc keeps such freed blocks per thread
    for reuse, so the resident set grows above the live memory over the first iterations;
    ``MALLOC_MMAP_THRESHOLD_=262144`` in the environment returns them at once, at some
    cost in speed. Dense input on one device: once those O(n K) arrays pass 32 MiB
    (counted as four float64 values per row, component and restart), the EM iterations
    take them over chunks of rows of about 8 MiB of work each
    (``bayesvmf._data.DenseData.map_sums``); the seeding and the predictions still hold
    them over all rows.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.models import SparseVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal([5, 0, 0], 1, (30, 3)), rng.normal([0, 5, 0], 1, (30, 3))])
    >>> model = SparseVMFMixture(2, random_state=0).fit(X)
    >>> sorted(np.bincount(model.predict(X)).tolist())
    [30, 30]
    """

    _parameter_constraints = {
        **_mixture.BaseVMFMixture._parameter_constraints,
        "beta": [Interval(numbers.Real, 0.0, None, closed="left")],
        "shared_kappa": ["boolean"],
        # a seeding method, or labels (checked against the data in fit)
        "init": [StrOptions(set(_seeding.INIT_METHODS)), "array-like"],
        "kappa_max": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "dtype": [StrOptions({"float64", "mixed"})],
        "rtol": [Interval(numbers.Real, 0.0, None, closed="left")],
        "kmeans_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "devices": _blocks.DevicesOption(),
        **STREAM_CONSTRAINTS,
    }
    #: what the running statistics of partial_fit are shaped by (StreamingMixin)
    _stream_params = ("n_components", "shared_kappa")

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "log_likelihood_",
        "sparsity_",
        "status_",
        "run_statuses_",
        "run_lower_bounds_",
        "run_n_iter_",
    )

    def __init__(
        self,
        n_components: int = 1,
        *,
        beta: float = 0.0,
        shared_kappa: bool = False,
        n_init: int = 1,
        max_iter: int = 1000,
        tol: float = 1e-6,
        rtol: float = 1e-5,
        init: str = "greedy-spherical-kmeans++",
        kmeans_iter: int = 20,
        kappa_max: float = _mixture.KAPPA_MAX,
        normalize: bool = True,
        dtype: str = "mixed",
        random_state=None,
        verbose: int = 0,
        devices=None,
        learning_decay: float = 0.7,
        learning_offset: float = 1.0,
    ):
        self.n_components = n_components
        self.beta = beta
        self.shared_kappa = shared_kappa
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.rtol = rtol
        self.init = init
        self.kmeans_iter = kmeans_iter
        self.kappa_max = kappa_max
        self.normalize = normalize
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.devices = devices
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset

    # ---- fitting ------------------------------------------------------------------------

    def _run(self, state, data, beta, progress=None) -> _em.EMState:
        return _em.run_em(
            state,
            data,
            beta=float(beta),
            kappa_max=float(self.kappa_max),
            tol=float(self.tol),
            rtol=float(self.rtol),
            max_iter=int(self.max_iter),
            shared_kappa=bool(self.shared_kappa),
            progress=progress,
        )

    def _fit(self, data, rng_key, beta: float | None = None, with_labels: bool = True) -> None:
        if isinstance(self.init, str):
            state = _em.init_state(
                rng_key,
                data,
                n_components=self.n_components,
                n_init=self.n_init,
                init=self.init,
                shared_kappa=self.shared_kappa,
                kappa_max=float(self.kappa_max),
                hard_iter=int(self.kmeans_iter),
            )
        else:
            labels = _em._check_init_labels(self.init, data.shape[0], self.n_components)
            state = _em.init_state_from_labels(
                data,
                labels,
                n_components=self.n_components,
                shared_kappa=self.shared_kappa,
                kappa_max=float(self.kappa_max),
            )
        progress = self._progress(self.max_iter, f"EM ({state.mu.shape[0]} restarts)")
        try:
            state = self._run(state, data, self.beta if beta is None else beta, progress)
        finally:
            if progress is not None:
                progress.close()
        self._set_from_batch(state, data, with_labels=with_labels)

    def _row_blocks(self, Xc, bucket: bool = False) -> _blocks.RowBlocks:
        """Return checked data as row blocks: one per device of ``devices``, padded."""
        if not isinstance(self.init, str):
            raise ValueError(
                "init as an array of labels cannot be combined with devices= or partial_fit; "
                "use init='random', 'spherical-kmeans++' or 'greedy-spherical-kmeans++' there."
            )
        return _blocks.device_data(Xc, self._product_dtype(), devices=self.devices, bucket=bucket)

    def _training_data(self, Xc):
        """Return the training data: on the default device, or sharded with ``devices``."""
        self._stream_forget()  # a batch fit forgets any earlier partial_fit stream
        if self.devices is None:
            return _blocks.device_data(Xc, self._product_dtype())
        return self._row_blocks(Xc)

    def _training_labels(self, data) -> np.ndarray:
        """Return the component of each training row (on the devices of the fit)."""
        labels = self.__dict__.pop("_fit_labels", None)  # computed by _set_from_batch
        if labels is not None:
            return labels
        return np.argmax(self._training_weighted_log_prob(data), axis=1)

    def _training_weighted_log_prob(self, data) -> np.ndarray:
        """Return log alpha_k + log f_k(x_i) of the training rows at the kept run."""
        if not data.is_sharded:
            # one device: the program prediction compiles, at the fitted attributes
            return np.asarray(self._estimate_weighted_log_prob(data))
        run = self._best_state
        return _parallel.weighted_log_prob(data, run.log_weights[0], run.mu[0], run.kappa[0])

    def partial_fit(self, X, y=None, *, n_samples: int | None = None) -> SparseVMFMixture:
        """Update the model with one chunk of rows: stepwise (online) EM.

        Online EM of Cappé & Moulines [3]_, as the stepwise EM of Liang & Klein [4]_: the
        chunk's E-step statistics, averaged per row, move running statistics by a step
        rho_t = (t + ``learning_offset``)^(-``learning_decay``) for the t-th update
        (a in (0.5, 1] makes sum rho_t infinite and sum rho_t^2 finite, the conditions of
        the convergence proof), and the parameters are the batch M-step (eqs. (20)-(22) of
        [1]_, the same function, any beta >= 0) of the running statistics; see
        :func:`online_em_step`. The first call initialises from the first chunk: a batch fit
        of it (``n_init`` restarts, ``max_iter``, ``tol``; it needs at least
        ``n_components`` rows; its penalty is beta m / n for the m rows of the chunk standing
        for n rows), whose statistics start the running averages (rho = 1). Every call
        validates the parameters (``set_params`` may change them between calls); changing
        ``n_components`` or ``shared_kappa`` during a stream is an error, and a call that
        raises leaves the model as it was. ``fit`` forgets the stream and its counters (the
        next call starts a new one).

        Chunks are padded to a few bucket sizes (rows and nnz, at most 41% padding, weight
        0), so a stream of similar chunks compiles a few programs and then none. With
        ``devices`` each chunk is sharded over the devices. :func:`bayesvmf.streaming.fit_streaming`
        feeds the chunks of a corpus stored as ``.npz`` files.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_chunk, n_features)
        y : ignored
        n_samples : int or None, default None
            Number of rows the l1 penalty is weighed against (eq. (11) penalises the sum
            over n rows): the size of the corpus the chunks come from, as
            :func:`bayesvmf.streaming.fit_streaming` passes it. None uses the rows seen so
            far, ``n_samples_seen_`` (an endless stream). Irrelevant when beta = 0.

        Returns
        -------
        self

        References
        ----------
        .. [3] O. Cappé and E. Moulines, "On-line expectation-maximization algorithm for
           latent data models", J. R. Stat. Soc. B 71 (2009) 593-613.
        .. [4] P. Liang and D. Klein, "Online EM for unsupervised models", NAACL-HLT 2009.
        """
        first, n_samples = self._stream_begin(n_samples)
        Xc = self._check_input(X, reset=first)
        if first:
            # the clusters of an earlier fit's rows do not describe the streamed model
            self.__dict__.pop("labels_", None)
        step = self._stream_step(first, Xc.shape[0], n_samples)
        with jax.enable_x64(True):
            data = self._row_blocks(Xc, bucket=True)
            if first:
                # the chunk's rows stand for n_total rows: scale the penalty accordingly
                chunk_beta = self.beta * Xc.shape[0] / step.n_total
                # (no pass for the chunk's labels and their diagnosis: not kept)
                self._fit(data, self._make_key(), beta=chunk_beta, with_labels=False)
                run = self._best_state
                k, d = run.mu.shape[1:]
                online = _stepwise._OnlineState(
                    _stepwise.OnlineStats(
                        jnp.zeros(k, jnp.float64), jnp.zeros((k, d), jnp.float64)
                    ),
                    jnp.asarray(run.log_weights[0]),
                    jnp.asarray(run.mu[0]),
                    jnp.asarray(run.kappa[0]),
                )
            else:
                online = self._online
            stats, log_weights, mu, kappa, status, log_likelihood = _stepwise.online_em_step(
                *online,
                data,
                np.float64(step.step_size),
                np.float64(step.n_total),
                np.float64(self.beta),
                np.float64(self.kappa_max),
                shared_kappa=bool(self.shared_kappa),
            )
            self._stream_commit(
                _stepwise._OnlineState(stats, log_weights, mu, kappa), step.n_seen, step.n_steps
            )
            mu_host = np.asarray(mu)
        weights = np.exp(np.asarray(log_weights))
        self.weights_ = weights / weights.sum()
        self.mean_directions_ = mu_host
        self.concentrations_ = np.asarray(kappa)
        self.status_ = int(status)
        self.sparsity_ = float(np.mean(mu_host == 0))
        # of this chunk, at the parameters before the update
        self.log_likelihood_ = float(log_likelihood)
        self.lower_bound_ = (
            self.log_likelihood_ - self.beta * float(np.abs(np.asarray(online.mu)).sum())
        ) / Xc.shape[0]
        self.n_iter_ += 1
        # the guard attributes describe the running model (its status bits warn below)
        _guards.report(
            self,
            _guards.diagnose(
                self.weights_,
                n_rows=float(step.n_total),
                kappa=self.concentrations_,
                kappa_max=float(self.kappa_max),
                mean_directions=mu_host,
            ),
        )
        if self.status_ != Status.OK:
            warnings.warn(
                f"{type(self).__name__}.partial_fit: the M-step of this chunk degenerated ("
                f"{_mixture.describe_status(self.status_)}); the previous parameters are kept. "
                "Try larger chunks, a smaller beta"
                + ("." if self.shared_kappa else " or shared_kappa=True."),
                _mixture.DegenerateRunWarning,
                stacklevel=2,
            )
        return self

    def _set_from_batch(self, state: _em.EMState, data=None, with_labels: bool = True) -> int:
        """Keep the best healthy run; set the fitted attributes; warn once about degeneracy.

        A run is degenerate when its EM stopped on a :class:`~bayesvmf._mixture.Status`
        (appendix B of [1]_) or when :func:`bayesvmf._guards.diagnose` finds a degenerate
        component in its final state (empty, at ``kappa_max``, a near-uniform background);
        :func:`bayesvmf._guards.select_run` keeps the best of the others. With the training
        ``data`` and ``with_labels``, the kept run is diagnosed again with the effective number of
        rows of each component (one vector carrying it), from the responsibilities of the
        pass that also gives ``labels_``. One warning at most: the runs' statuses
        (:func:`bayesvmf._mixture.warn_degenerate`) when every run stopped on one, else the
        kept state's degenerate components (:func:`bayesvmf._guards.warn_components`), else
        the discarded runs' statuses.
        """
        state = _em.EMState(*(np.asarray(a) for a in state))
        statuses, bound = state.status, state.bound
        n_runs = len(statuses)
        n_rows = data.n_samples if data is not None else None

        def diagnosis(i, effective_rows=None):
            weights = np.exp(state.log_weights[i])
            return _guards.diagnose(
                weights / weights.sum(),
                # without data, weights alone: only a component below a millionth is empty
                n_rows=n_rows if n_rows is not None else 1.0 / _mixture.EMPTY_RESP_SUM,
                kappa=state.kappa[i],
                kappa_max=float(self.kappa_max),
                effective_rows=effective_rows,
                mean_directions=state.mu[i],
            )

        diagnoses = [diagnosis(i) for i in range(n_runs)]
        healthy = statuses == Status.OK
        runs = np.flatnonzero(healthy) if healthy.any() else np.arange(n_runs)
        best = int(
            runs[_guards.select_run(bound[runs], [diagnoses[i] for i in runs], float(self.tol))]
        )
        run = _em._take(state, best)
        self._best_state = run
        weights = np.exp(np.asarray(run.log_weights[0]))
        self.weights_ = weights / weights.sum()
        self.mean_directions_ = np.asarray(run.mu[0])
        self.concentrations_ = np.asarray(run.kappa[0])
        self.n_iter_ = int(run.n_iter[0])
        self.converged_ = bool(run.converged[0])
        self.status_ = int(run.status[0])
        self.lower_bound_ = float(bound[best])
        self.log_likelihood_ = float(state.log_likelihood[best])
        self.sparsity_ = float(np.mean(self.mean_directions_ == 0))
        self.run_statuses_ = np.asarray(statuses)
        self.run_lower_bounds_ = np.asarray(bound)
        self.run_n_iter_ = np.asarray(state.n_iter)
        if data is not None and with_labels:
            wlp = self._training_weighted_log_prob(data)
            self._fit_labels = np.argmax(wlp, axis=1)
            # normalised in NumPy: scipy.special.logsumexp took 18 ms of a 0.4 s fit here
            # (16,000 x 20), against 6 ms
            resp = np.exp(wlp - wlp.max(axis=1, keepdims=True))
            resp /= resp.sum(axis=1, keepdims=True)
            diagnoses[best] = diagnosis(best, _guards.effective_counts(resp))
        kept = diagnoses[best]
        n_degenerate = int(sum(s != Status.OK or d.degenerate for s, d in zip(statuses, diagnoses)))
        _guards.report(self, kept, n_degenerate)
        if self.status_ == Status.OK and kept.degenerate:
            _guards.warn_components(
                kept,
                type(self).__name__,
                "Try "
                + ("" if self.shared_kappa else "shared_kappa=True, ")
                + "fewer components or more restarts (n_init).",
                n_runs=n_runs,
                n_degenerate_runs=n_degenerate,
                stacklevel=6,
            )
        else:
            _mixture.warn_degenerate(
                statuses, type(self).__name__, stacklevel=6, shared_kappa=bool(self.shared_kappa)
            )
        if self.status_ == Status.OK and not self.converged_ and self.max_iter > 0:
            warnings.warn(
                f"{type(self).__name__}: the best of {n_runs} runs did not converge "
                f"within max_iter={self.max_iter} iterations (tol={self.tol}, "
                f"rtol={self.rtol}); increase max_iter, tol or rtol.",
                _mixture.ConvergenceWarning,
                stacklevel=5,
            )
        return best

    def _n_parameters(self) -> int:
        """Count the free parameters, eqs. (33)-(34) of [1]_ (shared-kappa variant too)."""
        self._check_is_fitted()
        return criteria.n_parameters(self.mean_directions_, self.shared_kappa)

    def to_arviz(self):
        """Return the fitted MAP point as an ``arviz.InferenceData`` (one chain, one draw).

        The ``posterior`` group holds ``mu`` (dims ``component``, ``feature``), ``kappa`` and
        ``weights`` (dim ``component``); ``sample_stats`` holds ``lp`` (the penalised
        log-likelihood of eq. (11) of [1]_) and ``n_occupied`` (components with weight > 0).

        Returns
        -------
        arviz.InferenceData
        """
        self._check_is_fitted()
        return _arviz.inference_data(
            {
                "mu": self.mean_directions_[None, None],
                "kappa": self.concentrations_[None, None],
                "weights": self.weights_[None, None],
            },
            {"mu": ["component", "feature"], "kappa": ["component"], "weights": ["component"]},
            sample_stats={
                "lp": np.array([[self.lower_bound_]]),
                "n_occupied": np.array([[int(np.sum(self.weights_ > 0))]]),
            },
            attrs={"beta": float(self.beta), "shared_kappa": bool(self.shared_kappa)},
        )

    # ---- path following -----------------------------------------------------------------

    def path(
        self,
        X,
        max_steps: int | None = None,
        min_rel_increase: float = 1e-2,
        eps: float = 1e-10,
    ) -> SparsePath:
        r"""Follow the beta path of Algorithm 3 of [1]_, from the dense model at beta = 0.

        The dense fit uses this estimator's settings (``n_init`` restarts) with beta = 0. Each
        next value is the smallest beta that zeroes one more coordinate in the first EM
        iteration (eq. (31)),

        .. math::

            \beta_p = \min_{k, j:\ \mu_{kj} \neq 0} \kappa_k |r_{kj}|,

        raised to at least (1 + ``min_rel_increase``) beta_{p-1}; EM restarts from the
        previous solution (warm start), then coordinates with |mu_kj| < ``eps`` are set to
        zero (and the row renormalised). Only means with at least two nonzero coordinates
        provide candidates, so the path can run until one nonzero per mean is left (sec. 3.3).
        The path stops there, after ``max_steps`` points, or at the first degenerate EM run
        (appendix B), which is not recorded. An interrupted path (Ctrl-C) returns the points
        it finished, with a warning.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        max_steps : int or None, default None
            Maximal number of points, the dense one included (P of Algorithm 3).
        min_rel_increase : float, default 1e-2
            Minimal relative increase of beta between steps (the paper uses 1e-3 and 1e-2).
        eps : float, default 1e-10
            Coordinates of mu below this magnitude are set to zero (epsilon of Algorithm 3).

        Returns
        -------
        SparsePath
        """
        validate_parameter_constraints(
            _PATH_CONSTRAINTS,
            {"max_steps": max_steps, "min_rel_increase": min_rel_increase, "eps": eps},
            caller_name=f"{type(self).__name__}.path",
        )
        dense = type(self)(**{**self.get_params(), "beta": 0.0})
        dense._validate_params()
        Xc = dense._check_input(X, reset=True)
        records: list[dict[str, Any]] = []
        stop_reason = "max_steps"
        with jax.enable_x64(True):
            data = _blocks.device_data(Xc, dense._product_dtype())
            del Xc  # the device copy serves the whole path
            n, d = data.shape
            dense._fit(data, self._make_key())
            state = dense._best_state
            beta = 0.0
            records.append(self._record(state, beta))
            progress = self._progress(max_steps, "beta path")
            try:
                while max_steps is None or len(records) < max_steps:
                    # eq. (31): kappa_k |r_kj| at the converged point of the previous beta
                    scores = np.asarray(state.kappa[0])[:, None] * np.abs(
                        np.asarray(state.resultant[0])
                    )
                    nonzero = np.asarray(state.mu[0]) != 0
                    eligible = nonzero & (nonzero.sum(axis=1, keepdims=True) > 1)
                    if not eligible.any():
                        stop_reason = "max_sparsity"
                        break
                    new_beta = max(float(np.min(scores[eligible])), beta * (1 + min_rel_increase))
                    if not new_beta > beta:
                        new_beta = float(np.nextafter(beta, np.inf))
                    warm = _em.fresh_state(state.log_weights, state.mu, state.kappa)
                    new_state = self._run(warm, data, new_beta)
                    if int(new_state.status[0]) != Status.OK:
                        stop_reason = (
                            f"degenerate EM at beta={new_beta:.6g}: "
                            + _mixture.describe_status(int(new_state.status[0]))
                        )
                        break
                    mu_new = np.array(new_state.mu)
                    small = np.abs(mu_new) < eps
                    if small.any() and (mu_new[small] != 0).any():
                        mu_new[small] = 0.0
                        norms = np.linalg.norm(mu_new, axis=-1, keepdims=True)
                        mu_new = mu_new / np.maximum(norms, np.finfo(np.float64).tiny)
                        new_state = new_state._replace(mu=mu_new)
                    beta, state = new_beta, new_state
                    records.append(self._record(state, beta))
                    if progress is not None:
                        progress.update(1)
            except KeyboardInterrupt:
                stop_reason = "interrupted"
                warnings.warn(
                    f"beta path interrupted; returning the {len(records)} finished steps.",
                    UserWarning,
                    stacklevel=2,
                )
            finally:
                if progress is not None:
                    progress.close()
        from bayesvmf.models.sparse import _path  # _path imports this module

        return _path.SparsePath._from_records(
            records,
            n_samples=n,
            n_features=d,
            estimator_params=self.get_params(),
            stop_reason=stop_reason,
            feature_names=getattr(dense, "feature_names_in_", None),
        )

    def _record(self, state: _em.EMState, beta: float) -> dict[str, Any]:
        mu = np.asarray(state.mu[0])
        weights = np.exp(np.asarray(state.log_weights[0]))
        total = float(state.log_likelihood[0])
        bound = float(state.bound[0])
        return {
            "beta": float(beta),
            "log_likelihood": total,
            "penalized_log_likelihood": total - beta * float(np.abs(mu).sum()),
            "lower_bound": bound,
            "n_iter": int(state.n_iter[0]),
            "converged": bool(state.converged[0]),
            "weights": weights / weights.sum(),
            "mean_directions": mu,
            "concentrations": np.asarray(state.kappa[0]),
            "sparsity": float(np.mean(mu == 0)),
            "n_parameters": criteria.n_parameters(mu, self.shared_kappa),
        }
