r"""The VMFMix estimator :class:`DirichletVMFMixture` [1]_.

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
.. [4] X. Li, J. Chi, C. Li, J. OuYang and B. Fu, "Integrating topic modeling with word
   embeddings by mixtures of vMFs", COLING 2016.
.. [5] M. D. Hoffman, D. M. Blei, C. Wang and J. Paisley, "Stochastic variational
   inference", JMLR 14 (2013) 1303-1347.
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from bayesvmf import _arviz, _blocks, _guards, _mixture
from bayesvmf._base import (
    RANDOM_STATE,
    STREAM_CONSTRAINTS,
    BaseVMFEstimator,
    StreamingMixin,
    check_count,
)
from bayesvmf.models.dirichlet import _batch_fit, _degeneracy
from bayesvmf.models.dirichlet._corpus import (
    _check_documents,
    padded_corpus,
    prepare_corpus,
    shard_documents,
)
from bayesvmf.models.dirichlet._gibbs import GibbsDraw
from bayesvmf.models.dirichlet._svi import _svi_step
from bayesvmf.models.dirichlet._vem import e_step_documents

#: Default of ``shared_kappa`` (see the class docstring for the measurements behind it).
SHARED_KAPPA_DEFAULT = True


def _check_y_is_not_weights(y, docs, method: str) -> None:
    """Refuse per-vector weights given where scikit-learn passes ``y`` (before: the 2nd argument).

    ``weights`` became keyword-only so that pipelines and scorers, which pass labels there,
    work; a call written for the old order would otherwise have its weights ignored. Only
    a y shaped as weights (one 1-D array per document, as long as it) is refused: a label
    per document, or a row of labels per document (multi-output), passes.
    """
    if y is None or isinstance(y, str | bytes):
        return
    try:
        entries, sizes = list(y), [len(doc) for doc in docs]
    except TypeError:
        return
    if len(entries) == len(sizes) and all(
        np.ndim(entry) == 1 and np.shape(entry)[0] == size
        for entry, size in zip(entries, sizes, strict=True)
    ):
        raise TypeError(
            f"{method}: the second argument is y (ignored), and it holds an array per "
            f"document: pass per-vector weights by name, {method}(docs, weights=...)"
        )


class DirichletVMFMixture(StreamingMixin, BaseVMFEstimator):
    r"""Dirichlet-vMF mixture over sets of vectors (VMFMix [1]_), by VEM or collapsed Gibbs.

    Each document is a set of unit vectors drawn from a document-specific mixture of K vMF
    topics shared by all documents: theta_i ~ Dir(alpha), z_ij ~ Cat(theta_i),
    x_ij ~ vMF(mu_{z_ij}, kappa_{z_ij}). ``inference="vem"`` maximises the bound of
    eqs. (5) + (8) of [1]_ over q and the topics (eqs. (9), (10)), with ``n_init``
    restarts; ``inference="gibbs"`` samples the collapsed posterior (module docstring).

    Parameters
    ----------
    n_topics : int, default=10
        K (scikit-learn's ``LatentDirichletAllocation`` default).
    alpha : float, default=0.1
        Symmetric Dirichlet parameter of theta_i.
    inference : {"vem", "gibbs"}, default="vem"
    n_init : int, default=4
        VEM restarts, each from its own key; among the restarts without a degenerate topic
        (``degenerate_components_``), the first whose final bound is within ``tol`` per unit
        of weight of the best is kept (:func:`bayesvmf._guards.select_run`).
    max_iter : int, default=200
        VEM iterations per restart.
    tol : float, default=1e-5
        VEM stops when the bound increases by at most ``tol`` per unit of vector weight.
    kappa_max : float, default=1e6
        Cap on the concentrations (a topic on a single repeated vector would diverge).
    num_chains : int, default=2
        Gibbs chains (vmapped; each has its own key and initialisation).
    num_warmup, num_samples : int, default=200, 200
        Gibbs sweeps discarded (MH step adapted) and kept per chain.
    mu_prior_concentration : float, default=0.0
        c0 of the vMF prior on mu_k (Gibbs); 0 is the uniform prior. mu0 is the direction of
        the weighted mean of the training vectors.
    kappa_prior : tuple of two floats, default=(1.0, 0.01)
        Gamma(shape, rate) prior of kappa_k (Gibbs).
    random_state : int, RandomState, Generator, JAX key or None, default=None
        Seed of the fit (:func:`bayesvmf._base.make_key`; NumPy ``RandomState`` and
        ``Generator`` give one seed drawn from them).
    verbose : int, default=0
        0 is silent; 1 or more shows a tqdm bar over VEM iterations or Gibbs chunks.
    normalize : bool, default=True
        Rescale the vectors to unit norm (with False they must already be unit norm).
    learning_decay : float in (0.5, 1], default=0.7
        The exponent a of the step sizes rho_t = (t + tau)^(-a) of :meth:`partial_fit`
        (:class:`bayesvmf._base.StreamingMixin`).
    learning_offset : float >= 0, default=1.0
        The offset tau of those step sizes (a larger tau damps the first steps).
    dtype : {"float64", "mixed"}, default="float64"
        "mixed" stores the vectors in float32 and runs the two data products X @ mu.T and
        resp.T @ X in float32 (VEM, SVI, transform, score); everything else (log-normalisers,
        digamma, softmax, kappa, the bound) stays float64. The cosines x'mu_k and the
        resultants r_k then carry float32 rounding (unit roundoff 6e-8, accumulated over the
        d terms of a product), the log-likelihood terms kappa_k mu_k' x about kappa_k times
        that. On the speed benchmark (N = 1e5, d = 100, K = 30) one mixed VEM step moved the
        bound by 5.8e-11 (relative), mu by 9.4e-8 and kappa by 2.8e-7 (relative) against
        float64 from the same state (benchmarks/results/dirichlet.md). The Gibbs sampler
        always runs in float64.
    devices : None, int or list of jax devices, default=None
        Data-parallel VEM (docs/design.md section 6): the documents are split into one group of
        whole documents per device, about equal in vectors (:func:`shard_documents`);
        every device computes q(z) and phi of its documents and their statistics (n_k,
        r_k, the entropy of q(z), the theta part of the bound), which are added with
        ``psum``; the M-step runs replicated. The k-means++ draws of the initialisation
        follow the vectors' global order, so the fit equals the one-device fit to
        floating-point accuracy. An int n means the first n of ``jax.devices()``; None is
        the default device. ``fit`` and ``partial_fit`` (each chunk split over the devices,
        padded to bucket sizes) shard; ``transform``, ``score`` etc. run on the default
        device; Gibbs sampling is not sharded.
    shared_kappa : bool, default=True
        One concentration for all topics, from the pooled statistics (the same name and
        meaning as :class:`~bayesvmf.models.SparseVMFMixture`'s): the M-step solves
        A_d(kappa) = sum_k |r_k| / sum_k n_k exactly (eq. (10) of [1]_ pooled over topics,
        the maximiser of the bound in the one kappa, so VEM's bound stays monotone); SVI
        pools the running statistics; the Gibbs sampler moves the one kappa by MH on the
        product of the topics' collapsed marginals (prior counted once). False is the paper's
        model, one kappa_k per topic.

        Trade-off: per-topic kappa is the better density model (higher bound), shared kappa
        the better document features. With one kappa per topic the bound rewards a topic
        that collapses onto one frequent word type (its density is unbounded: kappa runs to
        ``kappa_max``) and a broad low-kappa background topic that soaks up what the others
        do not fit. On Classic3 word vectors (K = 30, the other defaults,
        benchmarks/results/dirichlet.md; macro-F1 of a logistic regression, 5-fold CV),
        per-topic kappa gave kappa from 49 to 7,548, one of the 4 restarts collapsed (a
        topic at the cap; it had the best bound, 28.11M against 27.77M, and was kept before
        the guards: macro-F1 0.982), and macro-F1 0.985 for the restart kept now; shared
        kappa gave no degenerate restart, largest share 0.083 (0.127 per topic), converged
        in 66 iterations (126) and macro-F1 0.988, against 0.987 for the histogram of
        KMeans(30) word clusters (fold sd ~0.005: the three are close on this easy corpus).
        Hence the default True; pass False for the paper's model or a density estimate
        (then mind ``DegenerateRunWarning``).

    Attributes
    ----------
    mean_directions_ : ndarray of shape (K, d)
    concentrations_ : ndarray of shape (K,)
    weights_ : ndarray of shape (K,)
        Share of the training weight in each topic.
    lower_bound_ : float
        Final bound (VEM, best restart); NaN for Gibbs.
    lower_bounds_ : ndarray
        The bound after each iteration of the best restart (VEM; empty for Gibbs).
    lower_bounds_all_ : list of ndarray
        The bound paths of every restart (VEM).
    n_iter_ : int
    converged_ : bool
    doc_topic_ : ndarray of shape (M, K)
        E[theta_i] of the training documents.
    samples_ : dict of ndarray
        Gibbs only: ``kappa`` (chain, draw, topic), ``mu`` (chain, draw, topic, feature),
        ``weights`` (chain, draw, topic), ``lp``, ``n_occupied``, ``kappa_accept``. Chains
        are relabelled to agree with chain 0 (Hungarian matching of mean directions).
    n_sets_seen_, n_steps_ : int
        VEM fits and :meth:`partial_fit`: documents seen (of the fit, or of the first chunk,
        and of the chunks since) and SVI steps done since. Absent after a Gibbs fit.
    n_occupied_components_ : int
        Topics holding at least one token's weight (of the kept restart; Gibbs: posterior
        mean weights; :meth:`partial_fit`: the running statistics).
    largest_share_ : float
        The largest share of the token weight held by one topic.
    degenerate_components_ : ndarray of int
        The degenerate topics of the kept state (:mod:`bayesvmf._guards`): collapsed
        (kappa at ``kappa_max``), carried by one word type (the effective number of distinct
        vectors of the topic's expected counts per distinct vector, not per token, below
        1.5), a near-uniform background (kappa below a quarter of the others' median with a
        large share), or empty. A ``DegenerateRunWarning`` names them.
    n_degenerate_restarts_ : int
        VEM restarts that degenerated. The kept restart is the best bound among the healthy
        ones (a collapsed topic raises the bound); a degenerate one only when all are.

    References
    ----------
    .. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.models import DirichletVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> centers = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    >>> docs = [centers[rng.integers(2, size=8)] + 0.05 * rng.normal(size=(8, 3))
    ...         for _ in range(10)]
    >>> model = DirichletVMFMixture(2, n_init=1, random_state=0).fit(docs)
    >>> theta = model.transform(docs)
    >>> theta.shape, bool(np.allclose(theta.sum(axis=1), 1.0))
    ((10, 2), True)
    """

    _parameter_constraints = {
        "n_topics": [Interval(numbers.Integral, 1, None, closed="left")],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "inference": [StrOptions({"vem", "gibbs"})],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "kappa_max": [Interval(numbers.Real, 0, None, closed="neither")],
        "num_chains": [Interval(numbers.Integral, 1, None, closed="left")],
        "num_warmup": [Interval(numbers.Integral, 0, None, closed="left")],
        "num_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "mu_prior_concentration": [Interval(numbers.Real, 0, None, closed="left")],
        "kappa_prior": [tuple, list],  # two positive numbers: checked in _validate_params
        "random_state": RANDOM_STATE,
        "verbose": ["verbose"],
        "normalize": ["boolean"],
        **STREAM_CONSTRAINTS,
        "dtype": [StrOptions({"float64", "mixed"})],
        "shared_kappa": ["boolean"],
        "devices": _blocks.DevicesOption(),
    }
    _fitted_check = ("mean_directions_",)
    #: the stream of partial_fit (StreamingMixin): its statistics have n_topics rows; its
    #: counter counts documents
    _stream_params = ("n_topics",)
    _stream_seen = "n_sets_seen_"
    _stream_count = "n_sets"

    def __sklearn_tags__(self):
        """Return the tags: the input is a list of documents, not a 2-D array or sparse matrix."""
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.sparse = False
        return tags

    def __init__(
        self,
        n_topics: int = 10,
        *,
        alpha: float = 0.1,
        inference: str = "vem",
        n_init: int = 4,
        max_iter: int = 200,
        tol: float = 1e-5,
        kappa_max: float = _mixture.KAPPA_MAX,
        num_chains: int = 2,
        num_warmup: int = 200,
        num_samples: int = 200,
        mu_prior_concentration: float = 0.0,
        kappa_prior: tuple[float, float] = (1.0, 0.01),
        random_state: int | None = None,
        verbose: int = 0,
        normalize: bool = True,
        learning_decay: float = 0.7,
        learning_offset: float = 1.0,
        dtype: str = "float64",
        devices=None,
        shared_kappa: bool = SHARED_KAPPA_DEFAULT,
    ):
        self.n_topics = n_topics
        self.alpha = alpha
        self.inference = inference
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.kappa_max = kappa_max
        self.num_chains = num_chains
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.mu_prior_concentration = mu_prior_concentration
        self.kappa_prior = kappa_prior
        self.random_state = random_state
        self.verbose = verbose
        self.normalize = normalize
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.dtype = dtype
        self.devices = devices
        self.shared_kappa = shared_kappa

    # ---------------------------------------------------------------- persistence
    #: fitted arrays and JSON scalars written by :func:`bayesvmf.save` (``_get_state``);
    #: ``lower_bounds_all_`` (a ragged list) and ``samples_`` (a dict) are flattened below
    _fitted_arrays = (
        "mean_directions_",
        "concentrations_",
        "weights_",
        "doc_topic_",
        "lower_bounds_",
        "collapsed_",
        "degenerate_components_",
    )
    _fitted_scalars = (
        "lower_bound_",
        "n_iter_",
        "converged_",
        "n_features_",
        "n_sets_seen_",
        "n_steps_",
        *(name for name in _guards.FITTED_ATTRIBUTES if name != "degenerate_components_"),
    )

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return (arrays, JSON scalars) of the fitted attributes, for :func:`bayesvmf.save`."""
        arrays = {n: np.asarray(getattr(self, n)) for n in self._fitted_arrays if hasattr(self, n)}
        scalars = {}
        for name in self._fitted_scalars:
            if hasattr(self, name):
                value = getattr(self, name)
                scalars[name] = value.item() if isinstance(value, np.generic) else value
        if hasattr(self, "lower_bounds_all_"):
            runs = [np.asarray(r, dtype=np.float64) for r in self.lower_bounds_all_]
            arrays["lower_bounds_all_"] = np.concatenate(runs) if runs else np.zeros(0)
            arrays["lower_bounds_all_lengths"] = np.array([len(r) for r in runs], np.int64)
        for name, value in getattr(self, "samples_", {}).items():
            arrays[f"samples_{name}"] = np.asarray(value)
        stream_arrays, stream_scalars = self._stream_state()
        return {**arrays, **stream_arrays}, {**scalars, **stream_scalars}

    def _set_state(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Restore the fitted attributes written by :meth:`_get_state`."""
        arrays, scalars = dict(arrays), dict(scalars)
        self._restore_stream(arrays, scalars)
        if "lower_bounds_all_" in arrays:
            flat = arrays.pop("lower_bounds_all_")
            lengths = arrays.pop("lower_bounds_all_lengths", None)
            if lengths is None or int(np.sum(lengths)) != flat.shape[0]:
                raise ValueError("lower_bounds_all_ does not match lower_bounds_all_lengths")
            self.lower_bounds_all_ = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
        samples = {
            k[len("samples_") :]: arrays.pop(k) for k in list(arrays) if k.startswith("samples_")
        }
        if samples:
            unknown = set(samples) - set(GibbsDraw._fields)
            if unknown:
                raise ValueError(f"unexpected fitted attribute samples_{sorted(unknown)[0]}")
            self.samples_ = samples
        for name, value in {**scalars, **arrays}.items():
            if name not in self._fitted_arrays + self._fitted_scalars:
                raise ValueError(f"unexpected fitted attribute {name!r}")
            setattr(self, name, value)

    # ---------------------------------------------------------------- validation
    def _validate_params(self) -> None:
        """Check the arguments (scikit-learn's constraints), then what they cannot say."""
        super()._validate_params()
        prior = self.kappa_prior
        if not (
            isinstance(prior, tuple | list)
            and len(prior) == 2
            and all(isinstance(v, numbers.Real) and v > 0 for v in prior)
        ):
            raise ValueError(
                f"kappa_prior must be two positive numbers (shape, rate), got {prior!r}"
            )
        _blocks.resolve_devices(self.devices)  # before anything of the fitted model changes
        if self.devices is not None and self.inference != "vem":
            raise ValueError(
                f"devices={self.devices!r} shards variational EM; the collapsed Gibbs sampler "
                "visits the tokens one after another on one device: use devices=None with "
                "inference='gibbs'"
            )

    def _product_dtype(self):
        return jnp.float32 if self.dtype == "mixed" else jnp.float64

    def _corpus(self, docs, weights, *, fitted: bool):
        n_features = self.mean_directions_.shape[1] if fitted else None
        X, w, offsets = _check_documents(
            docs, weights, normalize=self.normalize, n_features=n_features
        )
        return X, w, offsets

    # ---------------------------------------------------------------- fit
    def fit(self, docs, y=None, *, weights=None) -> DirichletVMFMixture:
        """Fit the topics to documents.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
            The documents, each a set of vectors (rows); lengths may differ.
        y : ignored
            Where scikit-learn passes labels (a pipeline with a classifier after this step,
            a supervised scorer).
        weights : list of array-like of shape (n_i,), optional, keyword only
            Nonnegative count of each vector (whole numbers for ``inference="gibbs"``).

        Returns
        -------
        self
        """
        _check_y_is_not_weights(y, docs, "fit")
        self._validate_params()
        self._fit_new(docs, weights)
        return self

    def _fit_new(self, docs, weights):
        """Validate documents against nothing fitted and fit; return the checked (X, w, offsets)."""
        X, w, offsets = self._corpus(docs, weights, fitted=False)
        if X.shape[0] < self.n_topics:
            raise ValueError(
                f"docs hold {X.shape[0]} vectors in total, fewer than n_topics={self.n_topics}"
            )
        key = self._make_key()
        # a new fit forgets any stream; a VEM fit starts its own (see _batch_fit.fit_vem)
        self._stream_forget()
        with jax.enable_x64(True):
            if self.inference == "vem":
                _batch_fit.fit_vem(self, key, X, w, offsets)
            else:
                _batch_fit.fit_gibbs(self, key, X, w, offsets)
        return X, w, offsets

    def partial_fit(self, docs, y=None, *, weights=None, n_sets: int | None = None):
        r"""Update the topics with one chunk of documents: stochastic variational inference.

        SVI of Hoffman et al. [5]_ (Algorithm 1) over chunks of whole documents. Local step:
        q(theta_i) and q(z_i) of the chunk's documents, eq. (9) of [1]_ iterated to
        convergence with the topics held fixed. Global step: the natural statistics of the
        topics, s = (n_{..k}, r_k) of eqs. (6), (7), move towards the chunk's statistics
        scaled to the corpus, s_t = (1 - rho_t) s_{t-1} + rho_t (M / M_chunk) s(chunk), with
        rho_t = (t + ``learning_offset``)^(-``learning_decay``) for the t-th update (a in
        (0.5, 1]: sum rho_t infinite, sum rho_t^2 finite, the Robbins-Monro conditions of
        the convergence argument); mu and kappa are the batch M-step of s_t (eq. (10),
        kappa solved exactly). See :func:`svi_step`.

        The first call on an unfitted model (or one restored by :func:`bayesvmf.load` from a
        file written before session 27, which holds no stream; later files do, and the model
        goes on where the saved one was) initialises from the first chunk: a batch VEM fit of it
        (``n_init`` restarts, ``max_iter``, ``tol``; it needs at least ``n_topics`` vectors),
        followed by one SVI step with rho = 1, which sets the running statistics to the
        chunk's. A model fitted by VEM continues from the statistics of that fit, with t
        counted from it.
        Chunks are padded to a few bucket sizes (vectors and documents, at most 41% padding,
        weight 0), so a stream of similar chunks compiles a few programs and then none.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
            The chunk: whole documents (sets of vectors).
        y : ignored
        weights : list of array-like of shape (n_i,), optional, keyword only
            Nonnegative count of each vector.
        n_sets : int or None, default=None
            Number of documents M of the corpus the chunks come from (the scale M / M_chunk).
            None uses the documents seen so far, ``n_sets_seen_`` (an endless stream).

        Returns
        -------
        self

        Notes
        -----
        After a call, ``doc_topic_`` holds E[theta_i] of the chunk's documents and
        ``lower_bound_`` the chunk's bound (5) + (8) per unit of vector weight, both at the
        topics before the update; ``weights_`` is the running share n_{..k} / sum n_{..k}.
        Only ``inference="vem"`` streams. ``fit`` forgets the stream (a VEM fit starts a new
        one from its own statistics). Every call validates the parameters; changing
        ``n_topics`` during a stream is an error, and a call that raises (a refused
        parameter, a chunk that fails validation) leaves the model unchanged. Every later
        call diagnoses the running topics (the degeneracy attributes, a
        ``DegenerateRunWarning``), with the chunk's counts per word type.
        """
        _check_y_is_not_weights(y, docs, "partial_fit")
        first, n_sets = self._stream_begin(n_sets)
        if self.inference != "vem":
            raise ValueError(
                f"partial_fit needs inference='vem' (stochastic VI), got {self.inference!r}"
            )
        if first:
            X, w, offsets = self._fit_new(docs, weights)
        else:
            X, w, offsets = self._corpus(docs, weights, fitted=True)
        n_chunk = len(offsets) - 1
        step = self._stream_step(first, n_chunk, n_sets)
        devices = _blocks.resolve_devices(self.devices)
        with jax.enable_x64(True):
            shared = bool(self.shared_kappa)
            if devices is None:
                corpus, n_docs = padded_corpus(X, w, offsets, self._product_dtype())
                doc_counts, doc_index = jnp.int32(n_docs), np.arange(n_docs)
            else:
                sharded = shard_documents(X, w, offsets, devices, self._product_dtype(), True)
                corpus, doc_counts = sharded.corpus, sharded.doc_counts
                doc_index = sharded.doc_index
            stats, mu, kappa, collapsed, phi, bound = _svi_step(
                *self._online,
                corpus,
                doc_counts,
                jnp.float64(self.alpha),
                jnp.float64(self.kappa_max),
                jnp.float64(step.step_size),
                jnp.float64(step.n_total / n_chunk),
                shared_kappa=shared,
            )
            resp_sum = np.asarray(stats.resp_sum)
            phi = np.asarray(phi)[doc_index]
            self.mean_directions_ = np.asarray(mu)
            self.concentrations_ = np.asarray(kappa)
            self.collapsed_ = np.asarray(collapsed)
            self.weights_ = resp_sum / resp_sum.sum()
            self.doc_topic_ = phi / phi.sum(axis=1, keepdims=True)
            self.lower_bound_ = float(bound) / float(w.sum())
            if not first:
                # the running topics; a first call keeps the diagnosis (and warning) of the
                # VEM fit of its chunk. No single-type check here: one chunk's expected
                # counts per word type would flag a healthy topic that the chunk barely uses
                diagnosis = _degeneracy.diagnose(
                    resp_sum,
                    float(resp_sum.sum()),
                    self.concentrations_,
                    self.kappa_max,
                    mean_directions=self.mean_directions_,
                )
        self._stream_commit((stats, mu, kappa), step.n_seen, step.n_steps)
        if not first:
            self.n_iter_ += 1
            self._guard(diagnosis, int(diagnosis.degenerate), 1, stacklevel=4)
        return self

    def _guard(self, diagnosis, n_degenerate: int, n_runs: int, stacklevel: int = 6) -> None:
        """Set the degeneracy attributes and warn about the kept state (:mod:`bayesvmf._guards`).

        ``stacklevel`` counts from :func:`bayesvmf._guards.warn_components` to the user's call
        (warn_components, _guard, _batch_fit.fit_vem, _fit_new, fit, the caller: 6).
        """
        _guards.report(self, diagnosis, n_degenerate)
        _guards.warn_components(
            diagnosis,
            type(self).__name__,
            _degeneracy.advice(bool(self.shared_kappa)),
            n_runs=n_runs,
            n_degenerate_runs=n_degenerate,
            stacklevel=stacklevel,
        )

    # ---------------------------------------------------------------- use
    def _e_step(self, docs, weights):
        self._check_is_fitted()
        X, w, offsets = self._corpus(docs, weights, fitted=True)
        with jax.enable_x64(True):
            corpus = prepare_corpus(X, w, offsets, self._product_dtype())
            phi, bounds, _, _ = e_step_documents(
                corpus, self.mean_directions_, self.concentrations_, self.alpha
            )
            return np.asarray(phi), np.asarray(bounds), w, offsets

    def transform(self, docs, *, weights=None) -> np.ndarray:
        """Return the topic proportions E_q[theta_i] of documents (rows sum to 1).

        Runs the E-step (eq. (9) of [1]_) with the fitted topics held fixed, to convergence.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
        weights : list of array-like of shape (n_i,), optional, keyword only

        Returns
        -------
        ndarray of shape (n_documents, K)
        """
        phi, _, _, _ = self._e_step(docs, weights)
        return phi / phi.sum(axis=1, keepdims=True)

    def fit_transform(self, docs, y=None, *, weights=None) -> np.ndarray:
        """Fit, then return the topic proportions of the same documents (:meth:`transform`).

        The step a pipeline runs when a classifier follows (topic proportions as features).
        """
        return self.fit(docs, y, weights=weights).transform(docs, weights=weights)

    def score_documents(self, docs, *, weights=None) -> np.ndarray:
        """Return, per document, the bound (5) + (8) on log p(x_i | alpha, mu, kappa)."""
        return self._e_step(docs, weights)[1]

    def score(self, docs, y=None, *, weights=None) -> float:
        """Return the held-out log-likelihood per vector (a variational lower bound).

        sum_i L_i / sum_ij w_ij, where L_i is the bound (5) + (8) of document i with q fitted
        to that document alone and the topics held fixed; L_i <= log p(x_i | alpha, mu,
        kappa) with theta_i and z_i integrated out, so nothing of a held-out document is
        seen twice.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
        y : ignored
        weights : list of array-like of shape (n_i,), optional, keyword only

        Returns
        -------
        float
        """
        _check_y_is_not_weights(y, docs, "score")
        _, bounds, w, _ = self._e_step(docs, weights)
        return float(bounds.sum() / w.sum())

    def top_items(self, vocabulary, n: int = 10, labels=None) -> list[list[tuple[Any, float]]]:
        """List, for each topic, the ``n`` items (e.g. words) nearest to its mean direction.

        Parameters
        ----------
        vocabulary : array-like of shape (V, d)
            Item vectors (normalised here; zero rows never rank).
        n : int >= 1, default=10
        labels : sequence of length V, optional
            Item names; by default the row indices.

        Returns
        -------
        list of K lists of (label, cosine) pairs, best first.
        """
        self._check_is_fitted()
        n = check_count(n, "n")  # (n = -1 dropped the last item silently)
        V = np.asarray(vocabulary, dtype=np.float64)
        if V.ndim != 2 or V.shape[1] != self.mean_directions_.shape[1]:
            raise ValueError(
                f"vocabulary must have shape (V, {self.mean_directions_.shape[1]}), got {V.shape}"
            )
        if labels is not None and len(labels) != V.shape[0]:
            raise ValueError(f"labels has {len(labels)} entries, vocabulary has {V.shape[0]} rows")
        norms = np.linalg.norm(V, axis=1)
        cos = (V @ self.mean_directions_.T) / np.where(norms > 0, norms, np.inf)[:, None]
        out = []
        for k in range(cos.shape[1]):
            order = np.argsort(-cos[:, k], kind="stable")[:n]
            out.append(
                [(labels[j] if labels is not None else int(j), float(cos[j, k])) for j in order]
            )
        return out

    def to_arviz(self):
        """Return the Gibbs draws as an ``arviz.InferenceData`` (dims chain, draw, topic, feature).

        ``posterior`` holds ``mu`` (the conditional mode of mu_k given z and kappa), ``kappa``
        and ``weights``; ``sample_stats`` holds ``lp`` (collapsed log joint), ``n_occupied``
        and ``kappa_accept``.
        """
        self._check_is_fitted()
        if not hasattr(self, "samples_"):
            raise ValueError("to_arviz needs draws: fit with inference='gibbs'")
        s = self.samples_
        return _arviz.inference_data(
            {"mu": s["mu"], "kappa": s["kappa"], "weights": s["weights"]},
            {
                "mu": ["topic", "feature"],
                "kappa": ["topic"],
                "weights": ["topic"],
                "kappa_accept": ["topic"],
            },
            sample_stats={
                "lp": s["lp"],
                "n_occupied": s["n_occupied"],
                "kappa_accept": s["kappa_accept"],
            },
        )
