"""The B-vMFmix estimator (sec. 3.1 of Gopal & Yang [1]_).

The model, the bound and the VI steps: :mod:`._bvmf_vi`; collapsed Gibbs: :mod:`._gibbs`;
the start of a fit (priors, initial labels and statistics): :mod:`._bvmf_resolve`.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import warnings
from numbers import Integral

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from bayesvmf import _blocks, _guards, _mixture, _seeding
from bayesvmf._base import (
    RANDOM_STATE,
    STREAM_CONSTRAINTS,
    StreamingMixin,
    check_count,
    check_random_state,
)
from bayesvmf.exceptions import ConvergenceWarning, NotFittedError
from bayesvmf.models.bayesian import _bvmf_resolve, _bvmf_stream, _kappa
from bayesvmf.models.bayesian._bvmf_posterior import kappa_draws, vi_to_arviz
from bayesvmf.models.bayesian._bvmf_vi import (
    FitKeys,
    StreamState,
    VIState,
    _fit_keys,
    _init_state,
    _kept_run,
    _log_predictive,
    _log_resp_rows,
    _weighted_log_resp,
    vi_iterations,
)
from bayesvmf.models.bayesian._kappa import Priors
from bayesvmf.models.bayesian._shared import FINITE, NONNEGATIVE, POSITIVE, with_log_likelihood

__all__ = ["BayesianVMFMixture"]


class BayesianVMFMixture(StreamingMixin, _mixture.BaseVMFMixture):
    r"""Bayesian mixture of von Mises-Fisher distributions (B-vMFmix, Gopal & Yang [1]_).

    pi ~ Dir(alpha), mu_k ~ vMF(mu0, C0), kappa_k ~ LogNormal(m, s2), z_i ~ Cat(pi),
    x_i ~ vMF(mu_{z_i}, kappa_{z_i}). Variational inference (sec. 3.1.1) with empirical Bayes
    (sec. 3.1.3), or collapsed Gibbs sampling (sec. 3.1.2). Dense or scipy.sparse input;
    sparse input stays sparse.

    Parameters
    ----------
    n_components : int, default 1
        K.
    inference : {"vi", "gibbs"}, default "vi"
    kappa_update : {"sampling", "bounding"}, default "sampling"
        The q(kappa) scheme of VI (:mod:`bayesvmf.models.bayesian._kappa`). "sampling":
        ``kappa_num_samples`` MH draws from the conditional of eq. (1) per iteration (the
        paper's method); the bound is then a Monte Carlo estimate (below). "bounding":
        q(kappa_k) log-normal fitted to a guaranteed lower bound; the bound never decreases.
    shared_kappa : bool, default True
        One concentration kappa ~ LogNormal(m, s2) for all components, updated from the
        pooled statistics (sum_k N_k, sum_k E[mu_k] . r_k: :func:`._kappa.pooled_update`),
        with the same meaning as :class:`~bayesvmf.models.SparseVMFMixture`'s; in every
        inference path (VI with both schemes, collapsed Gibbs, :meth:`partial_fit`). False:
        one kappa_k per component, the paper's model. The trade-off: per-component kappa is
        the better density model, shared kappa the better clustering. With one kappa per
        component the highest-bound solution on real corpora often has a broad, low-kappa
        "background" cluster that absorbs a fifth of the rows (CNAE-9, K = 30: NMI 0.58
        against 0.63 with a shared kappa), which a shared kappa rules out; hence the default.
        Empirical Bayes then updates m but keeps s2 (one concentration gives no variance to
        estimate: :func:`._empirical_bayes.update_m_s2`).
    alpha : float, default 1.0
        Symmetric Dirichlet parameter (> 0).
    mu0 : None or array of shape (n_features,), default None
        Prior mean direction; None: the direction of the mean of the rows.
    C0 : float, default 1.0
        Prior concentration of the mu_k (>= 0; 0 is the uniform prior).
    m : None or float, default None
        Prior mean of log kappa_k; None: log of the shared-kappa estimate of the initial
        clustering of the first restart (A_d(kappa) = sum_k |r_k| / n, the classical
        vMFmix M-step of sec. 2 of [1]_).
    s2 : float, default 1.0
        Prior variance of log kappa_k (> 0).
    empirical_bayes : bool, default True
        VI: update alpha, mu0, C0, m, s2 at every iteration to maximise the bound.
    init : str or int array of shape (n_samples,), default "greedy-spherical-kmeans++"
        "greedy-spherical-kmeans++", "spherical-kmeans++" or "random"; or labels. Initial
        assignments: each row to its closest initial direction by cosine, one set
        per restart (chain). The seeds are K random rows (Algorithm 4 of Rossi and
        Barbaro's classical mixture), spherical k-means++ seeds (k-means++ on the cosine
        dissimilarity), or greedy spherical k-means++ (the best of 2 + floor(ln K)
        candidates per seed, as scikit-learn's KMeans), then refined by ``kmeans_iter``
        hard spherical k-means passes: the initialisation of
        :class:`~bayesvmf.models.SparseVMFMixture`. Or the given labels (every component
        must be used), the same for every chain, so that several methods can start from
        identical assignments. With labels VI runs once: ``n_init`` is ignored, as by
        :class:`~bayesvmf.models.SparseVMFMixture` (restarts from one start would repeat it).
    kmeans_iter : int, default 20
        Hard spherical k-means passes (Lloyd's iterations on the cosine, the limit of the
        classical mixture's EM as every kappa grows alike; Banerjee et al., JMLR 2005) that
        refine each restart's seeds before inference
        (:func:`bayesvmf._parallel.spherical_kmeans`; they stop early once the partition has
        settled), then split-and-merge moves that leave the passes' local optima
        (:func:`bayesvmf._parallel.split_merge`, each followed by at most ``kmeans_iter``
        passes): the start of :class:`~bayesvmf.models.SparseVMFMixture`. The initial
        assignment is the final partition. On data of more than max(4096, 128 K) rows (dense,
        or sparse on one CPU device) the seeds are drawn from, and first refined on, a uniform
        subsample of that many rows (:func:`bayesvmf._parallel.seeds`), and on all rows
        only the hard passes follow (:func:`bayesvmf._parallel.refine`). 0 assigns the rows to
        the seeds (earlier versions, on data of at most that many rows:
        ``init="spherical-kmeans++", kmeans_iter=0``). Ignored when ``init`` is an
        array of labels.
    n_init : int, default 1
        VI restarts, run side by side (vmapped); among the restarts that did not degenerate
        (:mod:`bayesvmf._guards`), the first whose bound per row is within ``tol`` of the
        largest is kept (:func:`bayesvmf._guards.select_run`).
    max_iter : int, default 100
        VI iterations, at least 1 (as every model of the Bayesian family: the bound of a
        fit is the bound after an iteration).
    tol : float, default 1e-6
        Convergence threshold on the change of the bound per row.
    num_chains, num_warmup, num_samples : int, default 2, 200, 200
        Gibbs chains and sweeps.
    kappa_num_samples, kappa_num_warmup : int, default 50, 20
        VI sampling scheme: retained and discarded MH draws per iteration.
    kappa_num_steps : int, default 5
        VI bounding scheme: ascent steps on q(kappa) per iteration.
    predictive_draws : int, default 64
        Number of draws of q(kappa) behind :meth:`score_samples` and :meth:`to_arviz`
        (sampling scheme; the bounding scheme's log-normal uses Gauss-Hermite quadrature).
    learning_decay : float in (0.5, 1], default 0.7
        The exponent a of the step sizes rho_t = (t + tau)^(-a) of :meth:`partial_fit`
        (:class:`bayesvmf._base.StreamingMixin`).
    learning_offset : float >= 0, default 1.0
        The offset tau of those step sizes (a larger tau damps the first steps).
    normalize : bool, default True
        Rescale rows to unit norm; with False, non-unit rows raise a ValueError.
    dtype : {"mixed", "float64"}, default "mixed"
        "mixed" runs VI's two data products (rows times mean directions, responsibilities
        times rows) and the predictions' in float32, as
        :class:`~bayesvmf.models.SparseVMFMixture` does, and everything else (special
        functions, q(kappa), the bound) in float64; "float64" (the default of earlier
        versions) runs the products in float64 too. The bound then rises at every
        iteration up to the rounding of float32 products. Collapsed Gibbs runs in float64
        whatever this says (its sampler is checked against exact enumeration and NUTS in
        float64 only).
    random_state : None, int, numpy RandomState or Generator, or jax key, default None
        Seed of a fit (:func:`bayesvmf._base.make_key`): an int is reproducible; a
        RandomState or Generator gives a seed drawn from it; None a fresh one.
    verbose : int, default 0
        0 is silent; 1 or more shows a tqdm bar over the iterations (scikit-learn's meaning).
    devices : None, int or list of jax devices, default None
        Data-parallel VI (docs/design.md section 6): the rows of X are split into one equal block
        per device (``jax.sharding``; padding rows weigh 0); every device computes q(z) of
        its rows and their statistics (N_k, r_k, the entropy of q(z)), which are added with
        ``psum``; the global updates (q(pi), q(mu), q(kappa), empirical Bayes) run
        replicated. The result equals the one-device fit to floating-point accuracy (except
        the seeds of sparse data of more than max(4096, 128 K) rows: one CPU device draws
        them from a subsample, row blocks from all rows; docs/design.md section 6). An int
        n means the first n of ``jax.devices()``; None is the default device. ``fit``,
        ``fit_predict`` and ``partial_fit`` shard; ``predict``, ``score_samples`` etc. run
        on the default device. VI only: a collapsed Gibbs sweep visits the rows one after
        another, and ``init`` as an array of labels cannot be combined with it.

    Attributes
    ----------
    Every fit sets ``weights_``, ``mean_directions_``, ``concentrations_``, ``labels_``,
    ``lower_bound_``, ``n_iter_``, ``converged_``, ``inference_``, ``n_features_in_`` and
    the degeneracy attributes; the attributes from ``weight_concentration_`` to
    ``n_steps_`` are of VI fits only, ``gibbs_*`` and ``rhat_kappa_`` of Gibbs fits only.

    weights_ : ndarray of shape (n_components,)
        E_q[pi] = rho / sum(rho).
    mean_directions_ : ndarray of shape (n_components, n_features)
        psi_k, the mode of q(mu_k) (E_q[mu_k] = A_d(gamma_k) psi_k).
    concentrations_ : ndarray of shape (n_components,)
        E_q[kappa_k]. VI keeps E_q[log kappa_k] at most log 1e6 (the cap of q(kappa),
        :mod:`._kappa`); collapsed Gibbs caps kappa at 1e7.
    labels_ : ndarray of shape (n_samples,)
        The component of each training row (``fit_predict``'s result).
    weight_concentration_, mean_direction_concentration_ : ndarray of shape (n_components,)
        rho and gamma.
    kappa_mean_log_, kappa_var_log_, kappa_mean_log_c_ : ndarray of shape (n_components,)
        E_q[log kappa_k], Var_q[log kappa_k], E_q[log C_d(kappa_k)] (the scheme's).
    kappa_draws_, kappa_draw_log_weights_ : ndarray of shape (S, K), (S,)
        The representation of q(kappa) used by :meth:`score_samples`: ``predictive_draws``
        MH draws with equal weights (sampling) or Gauss-Hermite nodes and weights (bounding).
    kappa_accept_rate_ : ndarray of shape (n_components,)
        MH acceptance of the last kappa update (sampling scheme).
    alpha_, mu0_, C0_, m_, s2_ : the prior values at the end (updated by empirical Bayes)
    lower_bounds_ : ndarray of shape (n_iter_,)
        The variational bound per row after each iteration (the kept restart). With
        ``kappa_update="sampling"`` it is a Monte Carlo estimate (the E_q[kappa],
        E_q[log C_d(kappa)] terms are averages of MH draws; the q(kappa) entropy is that of
        the log-normal with the draws' mean and variance of log kappa), so it is noisy and
        not guaranteed to increase. The MH draws use the same key at every iteration (common
        random numbers), so the noise is frozen and the iteration can converge.
    lower_bound_ : float
    n_iter_ : int
    converged_ : bool
    inference_ : {"vi", "gibbs"}
        The inference of the fit (``partial_fit``: "vi"). After ``set_params`` changes
        ``inference``, the model refuses to predict (``NotFittedError``) until it is fitted
        again.
    run_lower_bounds_ : ndarray of shape (n_init,)
    n_samples_seen_, n_steps_ : int
        VI fits: rows seen (of the fit and of the :meth:`partial_fit` chunks since) and
        stochastic steps done since that fit. After :meth:`partial_fit`,
        ``lower_bound_`` is the bound per row estimated from the last chunk
        (:func:`._bvmf_vi.svi_step`), ``lower_bounds_`` gets one such value per call and ``n_iter_``
        grows by one per call.
    n_features_in_ : int
    n_occupied_components_ : int
        Components holding at least one row's weight (sum_i lambda_ik >= 1; Gibbs: the
        average count over the retained draws).
    largest_share_ : float
        The largest fraction of the rows held by one component.
    degenerate_components_ : ndarray of int
        Components diagnosed degenerate (:mod:`bayesvmf._guards`): empty, carried by a
        single row, at the concentration cap, coinciding with an earlier component (VI) or
        a near-uniform background component (per-component kappa only). A
        :class:`~bayesvmf.exceptions.DegenerateRunWarning` names them and what to try.
    n_degenerate_restarts_ : int
        Restarts (VI) or chains (Gibbs) whose final state was degenerate; VI keeps the best
        healthy restart when there is one.
    gibbs_* , rhat_kappa_ : Gibbs fits only (:func:`._gibbs.fit_gibbs`).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.models.bayesian._bvmf import BayesianVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal([5, 0, 0], 1, (30, 3)), rng.normal([0, 5, 0], 1, (30, 3))])
    >>> model = BayesianVMFMixture(
    ...     2, kappa_update="bounding", empirical_bayes=False, random_state=0
    ... ).fit(X)
    >>> sorted(np.bincount(model.predict(X)).tolist())
    [30, 30]
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "inference": [StrOptions({"vi", "gibbs"})],
        "kappa_update": [StrOptions(set(_kappa.SCHEMES))],
        "shared_kappa": ["boolean"],
        "alpha": [POSITIVE],
        "mu0": [None, "array-like"],
        "C0": [NONNEGATIVE],
        "m": [FINITE, None],
        "s2": [POSITIVE],
        "empirical_bayes": ["boolean"],
        "init": [StrOptions(set(_seeding.INIT_METHODS)), "array-like"],
        "kmeans_iter": [Interval(Integral, 0, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [NONNEGATIVE],
        "num_chains": [Interval(Integral, 1, None, closed="left")],
        "num_warmup": [Interval(Integral, 0, None, closed="left")],
        "num_samples": [Interval(Integral, 1, None, closed="left")],
        "kappa_num_samples": [Interval(Integral, 2, None, closed="left")],
        "kappa_num_warmup": [Interval(Integral, 0, None, closed="left")],
        "kappa_num_steps": [Interval(Integral, 1, None, closed="left")],
        "predictive_draws": [Interval(Integral, 1, None, closed="left")],
        **STREAM_CONSTRAINTS,
        "normalize": ["boolean"],
        "dtype": [StrOptions({"float64", "mixed"})],
        "random_state": RANDOM_STATE,
        "verbose": ["verbose"],
        "devices": _blocks.DevicesOption(),
    }
    #: what the global factors of a stream are shaped and updated by (StreamingMixin)
    _stream_params = ("n_components", "kappa_update", "shared_kappa")

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "weight_concentration_",
        "mean_direction_concentration_",
        "kappa_mean_log_",
        "kappa_var_log_",
        "kappa_mean_log_c_",
        "kappa_draws_",
        "kappa_draw_log_weights_",
        "kappa_accept_rate_",
        "alpha_",
        "mu0_",
        "C0_",
        "m_",
        "s2_",
        "lower_bounds_",
        "run_lower_bounds_",
        "gibbs_kappa_",
        "gibbs_counts_",
        "gibbs_log_joint_",
        "gibbs_resultants_",
        "gibbs_accept_rate_",
        "gibbs_priors_",
        "rhat_kappa_",
        "inference_",
    )

    def __init__(
        self,
        n_components: int = 1,
        *,
        inference: str = "vi",
        kappa_update: str = "sampling",
        shared_kappa: bool = True,
        alpha: float = 1.0,
        mu0=None,
        C0: float = 1.0,
        m: float | None = None,
        s2: float = 1.0,
        empirical_bayes: bool = True,
        init="greedy-spherical-kmeans++",
        kmeans_iter: int = 20,
        n_init: int = 1,
        max_iter: int = 100,
        tol: float = 1e-6,
        num_chains: int = 2,
        num_warmup: int = 200,
        num_samples: int = 200,
        kappa_num_samples: int = 50,
        kappa_num_warmup: int = 20,
        kappa_num_steps: int = 5,
        predictive_draws: int = 64,
        learning_decay: float = 0.7,
        learning_offset: float = 1.0,
        normalize: bool = True,
        dtype: str = "mixed",
        random_state=None,
        verbose: int = 0,
        devices=None,
    ):
        self.n_components = n_components
        self.inference = inference
        self.kappa_update = kappa_update
        self.shared_kappa = shared_kappa
        self.alpha = alpha
        self.mu0 = mu0
        self.C0 = C0
        self.m = m
        self.s2 = s2
        self.empirical_bayes = empirical_bayes
        self.init = init
        self.kmeans_iter = kmeans_iter
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.num_chains = num_chains
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.kappa_num_samples = kappa_num_samples
        self.kappa_num_warmup = kappa_num_warmup
        self.kappa_num_steps = kappa_num_steps
        self.predictive_draws = predictive_draws
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.normalize = normalize
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.devices = devices

    def get_params(self, deep: bool = True) -> dict:
        """Return the constructor arguments; array-valued ``init``/``mu0`` as lists (saveable)."""
        params = super().get_params(deep)
        for name in ("init", "mu0"):
            if isinstance(params[name], np.ndarray | jax.Array):
                params[name] = np.asarray(params[name]).tolist()
        return params

    # ---- fitting ----------------------------------------------------------------------------

    def _fit(self, data, rng_key) -> None:
        # user input first, so that bad values fail before anything is compiled
        user_labels = (
            None if isinstance(self.init, str) else _bvmf_resolve.check_labels(self, data.shape[0])
        )
        if self.inference == "gibbs":
            batch = self.num_chains
        else:  # VI from given labels is deterministic up to the MH key: one run, not n_init
            batch = 1 if user_labels is not None else self.n_init
        keys = _fit_keys(rng_key, batch=int(batch))
        priors, labels, statistics = _bvmf_resolve.resolve(self, data, keys, user_labels)
        # a new fit forgets any stream and its counters (a VI fit sets its own state); only
        # now, so that a fit refused by _bvmf_resolve.resolve leaves the model as it was
        self._stream_forget()
        if self.inference == "gibbs":
            from bayesvmf.models.bayesian import _gibbs

            diag, n_bad = _gibbs.fit_gibbs(self, data, keys.fit, priors, labels)
            self.inference_ = "gibbs"
            self._report_guards(diag, n_bad, int(self.num_chains), stacklevel=4)
            return
        self._fit_vi(data, keys, priors, statistics)
        self.inference_ = "vi"

    def _check_is_fitted(self) -> None:
        """Refuse an unfitted model, and one whose ``inference`` changed since its fit.

        A VI fit and a Gibbs fit keep different attributes (and a later fit of the other
        kind does not remove them): after ``set_params(inference=...)`` the predictions
        read attributes that are missing (an AttributeError) or left by an older fit.
        """
        super()._check_is_fitted()
        fitted = getattr(self, "inference_", None)  # (None: a file saved before it)
        if fitted is not None and fitted != self.inference:
            raise NotFittedError(
                f"This {type(self).__name__} was fitted with inference={fitted!r}, but "
                f"inference is now {self.inference!r}: fit it again, or set inference back "
                f"to {fitted!r}."
            )

    def _fit_vi(self, data, keys: FitKeys, priors: Priors, statistics) -> None:
        resultant, resp_sum = statistics
        batch = resultant.shape[0]
        batch_priors = jax.tree_util.tree_map(
            lambda a: np.broadcast_to(np.asarray(a), (batch, *np.shape(a))), priors
        )
        shared = bool(self.shared_kappa)
        state = _init_state(resultant, resp_sum, keys.mh, batch_priors, self.kappa_update, shared)
        static = dict(self._static(), shared_kappa=shared)
        tol, max_iter = np.float64(self.tol), np.int64(self.max_iter)
        empirical_bayes = np.bool_(self.empirical_bayes)
        history = []
        progress = self._progress(self.max_iter, f"VI ({batch} restarts)")
        try:
            for state in vi_iterations(state, data, tol, max_iter, empirical_bayes, **static):
                history.append(np.asarray(state.bound))
                if progress is not None:
                    progress.update(1)
        finally:
            if progress is not None:
                progress.close()
        self._set_from_batch(state, history, data, keys.draws)

    def _validate_params(self) -> None:
        super()._validate_params()
        # devices= with Gibbs sampling or an init label array is refused here, before
        # anything of the fitted model changes
        self._check_devices()

    def _product_dtype(self):
        # collapsed Gibbs is tested in float64 only (the dtype parameter's docstring)
        return jnp.float64 if self.inference == "gibbs" else super()._product_dtype()

    def _training_data(self, Xc):
        """Return the training data: plain, or one row block per device (``devices``).

        With ``devices`` the rows are sharded over the devices for the whole fit and the
        final assignment of ``fit_predict`` (see the class docstring).
        """
        return _blocks.device_data(Xc, self._product_dtype(), devices=self.devices)

    def _training_labels(self, data) -> np.ndarray:
        """Return the largest lambda_ik of each training row (each device its rows)."""
        if not data.is_sharded:
            return super()._training_labels(data)
        logits = data.map_rows(_log_resp_rows, self._log_resp_params())
        return np.argmax(logits, axis=1)

    def _check_devices(self) -> list | None:
        """Resolve ``devices``; refuse it with Gibbs sampling or an ``init`` label array."""
        devices = _blocks.resolve_devices(self.devices)
        if devices is None:
            return None
        if self.inference != "vi":
            raise ValueError(
                f"{type(self).__name__}: devices={self.devices!r} shards the rows of "
                "variational inference; the collapsed Gibbs sampler visits the rows one after "
                "another on one device: use devices=None with inference='gibbs'."
            )
        if not isinstance(self.init, str):
            raise ValueError(
                f"{type(self).__name__}: init as an array of labels cannot be combined with "
                "devices=; use a seeding method (the default init, "
                "'greedy-spherical-kmeans++', 'spherical-kmeans++' or 'random')."
            )
        return devices

    def partial_fit(self, X, y=None, *, n_samples: int | None = None) -> BayesianVMFMixture:
        """Update the model with one chunk of rows: stochastic variational inference.

        SVI of Hoffman et al. [2]_ (:func:`._bvmf_vi.svi_step`, docs/bayesian_vi.md): q(z) of the
        chunk's rows at the current global factors, then every global natural parameter
        (N_k behind q(pi) and the weight of q(kappa_k), E[kappa_k] r_k behind q(mu_k), the
        dot delta_k of q(kappa_k)) moves towards its estimate from the chunk scaled by
        ``n_samples`` / (rows of the chunk), with the step rho_t = (t +
        ``learning_offset``)^(-``learning_decay``) for the t-th update (the convention of
        :meth:`bayesvmf.models.SparseVMFMixture.partial_fit`); then q(kappa) by
        ``kappa_update`` (both schemes) and, with ``empirical_bayes``, the empirical Bayes
        updates of the hyper-parameters from the global factors.

        The first call on an unfitted model initialises from the first chunk: a batch VI fit
        of it (``n_init`` restarts, ``max_iter``, ``tol``; at least ``n_components`` rows),
        followed by one step with rho = 1, which rescales its statistics to ``n_samples``
        rows. A model fitted by Gibbs sampling has no variational factors to continue from:
        partial_fit asks for ``inference="vi"``, and with it starts a new stream. A model
        fitted by VI (``fit``, or earlier calls) continues from its state, with t counted
        from that fit; every call validates the parameters, changing ``n_components``,
        ``kappa_update`` or ``shared_kappa`` in between is an error, and a call that raises
        leaves the model as it was. Chunks are padded to a few bucket sizes (rows and nnz,
        at most 41% padding, weight 0), so a stream of similar chunks compiles a few
        programs and then none. :func:`bayesvmf.streaming.fit_streaming`
        feeds the chunks of a corpus stored as ``.npz`` files. A saved model keeps its stream:
        restored by :func:`bayesvmf.load`, it goes on where the saved one was (a file
        written before session 27 holds none, and its first call starts a new stream).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_chunk, n_features)
        y : ignored
        n_samples : int or None, default None
            Number of rows n of the corpus the chunks come from (the statistics of a chunk of
            m rows are scaled by n / m), as :func:`bayesvmf.streaming.fit_streaming` passes
            it. None uses the rows seen so far, ``n_samples_seen_`` (an endless stream).

        Returns
        -------
        self

        References
        ----------
        .. [2] M. D. Hoffman, D. M. Blei, C. Wang and J. Paisley, "Stochastic variational
           inference", JMLR 14 (2013) 1303-1347.
        """
        return _bvmf_stream.partial_fit(self, X, n_samples)

    def _static(self) -> dict:
        """Return the static sizes of the VI and SVI steps."""
        return dict(
            scheme=self.kappa_update,
            num_samples=int(self.kappa_num_samples),
            num_warmup=int(self.kappa_num_warmup),
            num_steps=int(self.kappa_num_steps),
        )

    def _report_guards(self, diag, n_degenerate: int, n_runs: int, stacklevel: int) -> None:
        """Set the guards' fitted attributes and warn about a degenerate kept state.

        ``stacklevel`` counts from this method's caller (1: the caller's line).
        """
        _guards.report(self, diag, n_degenerate)
        advice = (
            "Try fewer components (n_components) or another random_state."
            if self.shared_kappa
            else "Try shared_kappa=True (one concentration for all components) or fewer "
            "components (n_components)."
        )
        _guards.warn_components(
            diag,
            type(self).__name__,
            advice,
            n_runs=n_runs,
            n_degenerate_runs=n_degenerate,
            stacklevel=stacklevel + 1,
        )

    def _set_from_batch(self, state: VIState, history, data, rng_key) -> None:
        bounds = np.asarray(state.bound)
        counts, square = np.asarray(state.stats.resp_sum), np.asarray(state.stats.resp_square)
        kappa = np.asarray(state.post.kappa.mean_kappa)
        psi = np.asarray(state.post.psi)
        # effective rows N_k^2 / sum_i lambda_ik^2 (_guards.effective_counts from the sums)
        effective = np.where(square > 0, counts**2 / np.where(square > 0, square, 1.0), 0.0)
        diagnoses = [
            _guards.diagnose(
                c,
                n_rows=data.shape[0],
                kappa=k,
                kappa_max=_kappa.REPORTED_CAP,
                effective_rows=e,
                mean_directions=mu,
            )
            for c, k, e, mu in zip(counts, kappa, effective, psi, strict=True)
        ]
        best = _guards.select_run(bounds, diagnoses, float(self.tol))
        run, natural, dot = _kept_run(state, np.int64(best), d=data.shape[1])
        n_iter = int(run.n_iter)
        # the global natural parameters of this fit: partial_fit continues from them
        online = StreamState(run.stats.resp_sum, natural, dot, run.post, run.priors, run.key)
        self._stream_commit(online, int(data.shape[0]))
        self._set_posterior(online, run.accept_rate, rng_key)
        self.lower_bounds_ = np.array([h[best] for h in history[:n_iter]], dtype=np.float64)
        self.lower_bound_ = float(bounds[best])
        self.run_lower_bounds_ = bounds
        self.n_iter_ = n_iter
        self.converged_ = bool(run.converged)
        if not self.converged_:
            noisy = (
                " The sampling scheme's bound is a Monte Carlo estimate: a larger "
                "kappa_num_samples lowers its noise."
                if self.kappa_update == "sampling"
                else ""
            )
            warnings.warn(
                f"{type(self).__name__}: the best of {len(bounds)} runs did not converge "
                f"within max_iter={self.max_iter} iterations (tol={self.tol}); increase "
                f"max_iter or tol.{noisy}",
                ConvergenceWarning,
                stacklevel=5,
            )
        n_degenerate = sum(diag.degenerate for diag in diagnoses)
        self._report_guards(diagnoses[best], n_degenerate, len(diagnoses), stacklevel=6)

    def _set_posterior(self, online: StreamState, accept_rate, rng_key) -> None:
        """Set the fitted attributes of the global factors and priors of ``online``."""
        post, priors = online.post, online.priors
        rho = np.asarray(post.rho)
        self.weight_concentration_ = rho
        self.weights_ = rho / rho.sum()
        self.mean_directions_ = np.asarray(post.psi)
        self.mean_direction_concentration_ = np.asarray(post.gamma)
        self.concentrations_ = np.asarray(post.kappa.mean_kappa)
        self.kappa_mean_log_ = np.asarray(post.kappa.mean_log_kappa)
        self.kappa_var_log_ = np.asarray(post.kappa.var_log_kappa)
        self.kappa_mean_log_c_ = np.asarray(post.kappa.mean_log_c)
        self.kappa_accept_rate_ = np.asarray(accept_rate)
        self.alpha_ = float(priors.alpha)
        self.mu0_ = np.asarray(priors.mu0)
        self.C0_ = float(priors.C0)
        self.m_ = float(priors.m)
        self.s2_ = float(priors.s2)
        self.kappa_draws_, self.kappa_draw_log_weights_ = kappa_draws(self, online, rng_key)

    def _n_parameters(self) -> int:
        """K - 1 weights, K (d - 1) directions and K concentrations (1 when shared)."""
        self._check_is_fitted()
        k, d = np.shape(self.mean_directions_)
        return (k - 1) + k * (d - 1) + (1 if self.shared_kappa else k)

    # ---- prediction -------------------------------------------------------------------------

    def _estimate_weighted_log_prob(self, data) -> jax.Array:
        """Log lambda_ik + const at the posterior: E log pi_k + E log C_d + E[kappa_k] x . E[mu_k].

        For a Gibbs fit: the plug-in log weights_ + log vMF(x | mean_directions_,
        concentrations_).
        """
        if self.inference == "gibbs":
            return super()._estimate_weighted_log_prob(data)
        with jax.enable_x64(True):
            return _weighted_log_resp(data, *self._log_resp_params())

    def _log_resp_params(self) -> tuple:
        """Return (rho, psi, gamma, E[kappa], E[log C_d]) of a VI fit (for ``_log_resp_rows``)."""
        names = (
            "weight_concentration_",
            "mean_directions_",
            "mean_direction_concentration_",
            "concentrations_",
            "kappa_mean_log_c_",
        )
        return tuple(np.asarray(getattr(self, name)) for name in names)

    def score_samples(self, X) -> np.ndarray:
        r"""Return the held-out log posterior predictive density of each row.

        VI: with q(pi), q(mu_k) integrated exactly and q(kappa_k) by its draws,

        .. math::

            \log p(x \mid X) \approx \log \sum_k \frac{\rho_k}{\sum_j \rho_j}
                \sum_s w_s \frac{C_d(\kappa_{sk})\, C_d(\gamma_k)}
                {C_d(\lVert \kappa_{sk} x + \gamma_k \psi_k \rVert)},

        since :math:`\int \mathrm{vMF}(x \mid \mu, \kappa)\, \mathrm{vMF}(\mu \mid \psi,
        \gamma)\, d\mu = C_d(\kappa) C_d(\gamma) / C_d(\lVert\kappa x + \gamma\psi\rVert)` and
        :math:`E_q[\pi_k] = \rho_k / \sum_j \rho_j`. The kappa draws are ``kappa_draws_``:
        ``predictive_draws`` MH draws from the final conditional of eq. (1) with weights
        1/S (sampling scheme: a Monte Carlo average over q(kappa) only), or the
        :data:`HERMITE_NODES` Gauss-Hermite nodes of the log-normal q(kappa) (bounding
        scheme: a quadrature). A logsumexp over (k, s). Gibbs:
        :func:`._gibbs.gibbs_score_samples`.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            data = self._device_data(X)
            if self.inference == "gibbs":
                from bayesvmf.models.bayesian import _gibbs

                return np.asarray(_gibbs.gibbs_score_samples(self, data))
            return np.asarray(
                _log_predictive(
                    data,
                    jnp.asarray(self.weight_concentration_),
                    jnp.asarray(self.mean_directions_),
                    jnp.asarray(self.mean_direction_concentration_),
                    jnp.asarray(self.kappa_draws_),
                    jnp.asarray(self.kappa_draw_log_weights_),
                )
            )

    def to_arviz(self, num_draws: int = 100, random_state=0, X=None):
        """Return posterior draws as ``arviz.InferenceData``.

        VI: ``num_draws`` independent draws from q (one chain): ``mu`` ~ q(mu_k) = vMF(psi_k,
        gamma_k) (dims ``component``, ``feature``), ``kappa`` ~ q(kappa_k) (log-normal for
        bounding, resampled from ``kappa_draws_`` for sampling) and ``weights`` ~ Dir(rho)
        (dim ``component``), with dims ``chain`` (one) and ``draw``; the final bound per row is in
        ``attrs["lower_bound"]``. Gibbs:
        :func:`._gibbs.gibbs_to_arviz`.

        Parameters
        ----------
        num_draws : int, default 100
        random_state : None, int, numpy RandomState or Generator, or jax key, default 0
            VI only (draws from q). A Gibbs fit returns its chains' own draws, so these
            do not apply to it, and are still checked.
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features), optional
            VI only: rows whose log-likelihood under each draw, log sum_k pi_k
            vMF(x_i | mu_k, kappa_k), makes the ``log_likelihood`` group (variable ``x``,
            dims ``chain``, ``draw``, ``row``), which ArviZ's ``loo`` and ``waic`` read.
            The draws are from q, an approximation of the posterior. A Gibbs fit has no
            draws of mu (the sampler integrates them out) and refuses X.

        Returns
        -------
        arviz.InferenceData
        """
        self._check_is_fitted()
        if self.inference == "gibbs":  # (any value was ignored before)
            check_count(num_draws, "num_draws")
            check_random_state(random_state)
            if X is not None:
                raise ValueError(
                    "X: a collapsed Gibbs fit keeps no draws of mu (the sampler integrates "
                    "them out), so it has no log-likelihood per draw; fit with "
                    "inference='vi', or use score_samples for the predictive density."
                )
            from bayesvmf.models.bayesian import _gibbs

            return _gibbs.gibbs_to_arviz(self)
        rows = None if X is None else self._check_input(X, reset=False)
        idata = vi_to_arviz(self, num_draws, random_state)
        return idata if rows is None else with_log_likelihood(idata, rows)
