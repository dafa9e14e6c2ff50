"""The chain driver of collapsed Gibbs sampling for B-vMFmix (sec. 3.1.2 of Gopal & Yang [1]_).

Runs the chains of the sweeps of :mod:`._gibbs_kernel` in jitted chunks, aligns their
labels, computes R-hat, the held-out predictive from retained draws and the ArviZ export;
:func:`fit_gibbs` sets the fitted attributes of a :class:`._bvmf.BayesianVMFMixture`.
Derivations: docs/bayesian_gibbs.md.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from scipy.optimize import linear_sum_assignment

from bayesvmf import _arviz, _compile_cache, _data, _guards, _mcmc, _mixture, special
from bayesvmf._mixture import JIT_OPTIONS, count_trace
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models.bayesian._gibbs_kernel import (
    KAPPA_MAX,
    GibbsState,
    _gibbs_chunk,
    _norms_sq,
    hyper_from_priors,
    init_state,
    max_row_nnz,
)
from bayesvmf.models.bayesian._kappa import Priors

__all__ = [
    "align_chains",
    "run_chains",
    "log_predictive",
    "fit_gibbs",
    "gibbs_score_samples",
    "gibbs_to_arviz",
]

#: Sweeps per jitted chunk (the progress bar moves between chunks); a fit runs
#: ceil(total / GIBBS_CHUNK) chunks of equal length, so the chunk program compiles once.
GIBBS_CHUNK = 50
#: Number of retained draws of the resultants s_k per chain (evenly spaced over the sampling
#: phase, the last sweep included) used by the held-out predictive.
GIBBS_PREDICTIVE_DRAWS = 10
#: R-hat threshold of ``converged_``.
RHAT_THRESHOLD = 1.1


def _init_states(data, z, kappa, mu0, n_components):
    count_trace("bayesian.gibbs_init")
    return jax.vmap(lambda zc, kc: init_state(data, zc, kc, mu0, n_components))(z, kappa)


@functools.partial(
    _compile_cache.jit, static_argnames=("n_components", "shared"), compiler_options=JIT_OPTIONS
)
def _initial_kappa(data, z, m, n_components, shared=False):
    """Start kappa_k at the ML estimate of the initial clusters (exp(m) if fewer than 2 rows).

    One data product for all chains (labels of shape (chains, n)); the estimate is clipped
    to [:data:`bayesvmf._mcmc.KAPPA_START_MIN`, 1e5] so that the first MH steps start inside
    the well-tested range. With ``shared``: the shared estimate A_d(kappa) = sum_k |s_k| / n
    for every k.
    """
    count_trace("bayesian.gibbs_init_kappa")
    n_chains, n = z.shape
    d = data.shape[1]
    onehot = jax.nn.one_hot(z, n_components, dtype=jnp.float64)  # (C, n, K)
    flat = jnp.moveaxis(onehot, 0, 1).reshape(n, n_chains * n_components)
    resultant = data.tdot(flat).T.reshape(n_chains, n_components, d)
    counts = onehot.sum(axis=1)
    norms = jnp.linalg.norm(resultant, axis=2)
    if shared:
        rbar = jnp.broadcast_to(jnp.sum(norms, axis=1, keepdims=True) / n, norms.shape)
        counts = jnp.broadcast_to(jnp.float64(n), counts.shape)
    else:
        rbar = norms / jnp.maximum(counts, 1.0)
    kappa, _ = _mixture.solve_kappa(d, rbar, 1e5)
    kappa = jnp.clip(kappa, _mcmc.KAPPA_START_MIN, 1e5)
    return jnp.where(counts >= 2, kappa, jnp.exp(m))


def _retained_draws(num_samples: int, num_retained: int) -> np.ndarray:
    """Return the indices (within the sampling phase) of the draws whose resultants are kept.

    Evenly spaced and including the last sweep; distinct because num_retained <= num_samples.
    """
    return np.round(np.linspace(0, num_samples - 1, num_retained)).astype(np.int64)


class ChainResult(NamedTuple):
    """Host arrays of a run of :func:`run_chains` (chain axis first, labels as run).

    Attributes
    ----------
    kappa, counts, accept : (chain, sweep, K)
    log_joint : (chain, sweep)
    frequency : (chain, n, K)
        Label counts over the sampling sweeps.
    retained : (chain, r, K, d)
        s_k at the sweeps ``num_warmup + _retained_draws(num_samples, r)``.
    state : GibbsState
        Final state (device arrays, chain axis first).
    """

    kappa: np.ndarray
    counts: np.ndarray
    log_joint: np.ndarray
    accept: np.ndarray
    frequency: np.ndarray
    retained: np.ndarray
    state: GibbsState


def run_chains(
    rng_key,
    data,
    hyper: Priors,
    init_labels,
    *,
    n_components: int,
    num_warmup: int,
    num_samples: int,
    progress_bar: bool = False,
    shared_kappa: bool = False,
):
    """Run ``len(init_labels)`` chains of the collapsed sampler (warm-up included).

    Chains run one after the other in one program (``lax.map``); the sweeps run as a
    ``lax.scan`` in ``ceil(total / GIBBS_CHUNK)`` chunks of equal length (one compile), with
    a tqdm bar over the chunks when ``progress_bar``.

    Parameters
    ----------
    rng_key : jax.Array
    data : DenseData or SparseData
    hyper : Priors
    init_labels : int array of shape (num_chains, n)
        Initial labels in [0, n_components).
    n_components : int
        K.
    num_warmup, num_samples : int
    progress_bar : bool
    shared_kappa : bool, default False
        One kappa for all components (:func:`._gibbs_kernel.gibbs_kappa_update`).

    Returns
    -------
    ChainResult
        Sweep arrays cover warm-up and sampling (``num_warmup + num_samples`` sweeps).
    """
    init_labels = np.asarray(init_labels, dtype=np.int32)
    n_chains, n = init_labels.shape
    d = data.shape[1]
    # kappa_k starts at the ML estimate of the initial clusters
    num_retained = min(GIBBS_PREDICTIVE_DRAWS, num_samples)
    z = jnp.asarray(init_labels)
    kappa = _initial_kappa(data, z, hyper.m, n_components, bool(shared_kappa))
    states = _init_states(data, z, kappa, hyper.mu0, n_components)
    max_nnz = max_row_nnz(data)
    # the sweeps read rows of X inside the program: device CSR arrays beside the host blocks
    data = _data.with_device_csr(data)

    total = num_warmup + num_samples
    n_chunks = max(-(-total // GIBBS_CHUNK), 1)
    chunk = -(-total // n_chunks)
    sweeps = np.arange(n_chunks * chunk)
    # sweeps past ``total`` (chunk rounding) count as warm-up: they never enter an average
    adapt_all = ((sweeps < num_warmup) | (sweeps >= total)).astype(np.float64)
    slots_all = np.full(n_chunks * chunk, -1, np.int32)
    slots_all[num_warmup + _retained_draws(num_samples, num_retained)] = np.arange(num_retained)
    keys = jax.random.split(rng_key, n_chunks * n_chains * chunk).reshape(n_chunks, n_chains, chunk)
    frequency = jnp.zeros((n_chains, n, n_components), jnp.float64)
    retained = jnp.zeros((n_chains, num_retained, n_components, d), jnp.float64)
    infos = []
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_chunks * chunk, desc="B-vMFmix Gibbs", leave=False)
    for c in range(n_chunks):
        part = slice(c * chunk, (c + 1) * chunk)
        adapt = jnp.broadcast_to(jnp.asarray(adapt_all[part]), (n_chains, chunk))
        slots = jnp.broadcast_to(jnp.asarray(slots_all[part]), (n_chains, chunk))
        states, frequency, retained, info = _gibbs_chunk(
            keys[c],
            adapt,
            slots,
            states,
            frequency,
            retained,
            data,
            hyper,
            max_nnz=max_nnz,
            shared=bool(shared_kappa),
        )
        infos.append(jax.tree.map(np.asarray, info))
        if bar is not None:
            bar.update(chunk)
    if bar is not None:
        bar.close()
    info = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1)[:, :total], *infos)
    return ChainResult(
        info.kappa,
        info.counts,
        info.log_joint,
        info.accept,
        np.asarray(frequency),
        np.asarray(retained),
        states,
    )


# --------------------------------------------------------------------------------------------
# Chain alignment, predictive
# --------------------------------------------------------------------------------------------


def align_chains(frequency) -> np.ndarray:
    """Permutations relabelling every chain to agree with chain 0 (label switching).

    Chain c's label l is matched to chain 0's label k by the Hungarian algorithm
    (``scipy.optimize.linear_sum_assignment``) on the overlap of their posterior assignment
    frequencies, sum_i f0_ik fc_il: the permutation maximising the number of rows that the
    two chains put together.

    Parameters
    ----------
    frequency : array of shape (chain, n, K)
        Label counts (or frequencies) of every row over each chain's sampling sweeps.

    Returns
    -------
    ndarray of shape (chain, K)
        ``perm[c]``: chain c's arrays indexed by ``[..., perm[c]]`` follow chain 0's labels.
        ``perm[0]`` is the identity.

    Examples
    --------
    >>> import numpy as np
    >>> frequency = np.array([[[9, 1], [8, 2], [0, 10]],    # chain 0: rows 0, 1 in label 0
    ...                       [[1, 9], [3, 7], [10, 0]]])   # chain 1: the same, labels swapped
    >>> align_chains(frequency).tolist()
    [[0, 1], [1, 0]]
    """
    frequency = np.asarray(frequency, np.float64)
    perms = []
    for chain in frequency:
        _, cols = linear_sum_assignment(-(frequency[0].T @ chain))
        perms.append(cols)
    return np.stack(perms)


@jax.jit
def _log_predictive(data, counts, resultant, kappa, hyper):
    count_trace("bayesian.gibbs_predictive")
    n_draws, n_components, d = resultant.shape
    n_total = counts.sum(axis=1, keepdims=True)  # (R, 1)
    log_weights = jnp.log(hyper.alpha + counts) - jnp.log(n_total + n_components * hyper.alpha)
    flat = resultant.reshape(n_draws * n_components, d)
    dots = data.dot(flat.T).reshape(-1, n_draws, n_components)  # x . s_k
    x_mu0 = data.dot(hyper.mu0[:, None])[:, 0]
    resultant_sq = jnp.sum(resultant * resultant, axis=2)
    resultant_mu0 = resultant @ hyper.mu0
    norm_sq = _norms_sq(kappa, resultant_sq, resultant_mu0, hyper.C0)  # (R, K)
    # rows are unit vectors (checked on input): |x|^2 = 1
    new_sq = norm_sq + 2.0 * kappa * (kappa * dots + hyper.C0 * x_mu0[:, None, None]) + kappa**2
    # one normaliser call on every argument (one compiled instance of the special function)
    size = kappa.size
    norms = jnp.sqrt(jnp.maximum(jnp.concatenate([norm_sq.ravel(), new_sq.ravel()]), 0.0))
    args = jnp.concatenate([kappa.ravel(), norms])
    log_c = _mixture.log_normalizer(d, args)
    log_c_kappa = log_c[:size].reshape(kappa.shape)
    log_c_old = log_c[size : 2 * size].reshape(kappa.shape)
    log_c_new = log_c[2 * size :].reshape(new_sq.shape)
    per_draw = logsumexp(log_weights + log_c_kappa + log_c_old - log_c_new, axis=2)  # (m, R)
    return logsumexp(per_draw, axis=1) - jnp.log(n_draws)


def log_predictive(data, counts, resultant, kappa, hyper: Priors) -> jax.Array:
    r"""Held-out log posterior predictive density of every row, averaged over draws.

    For each retained draw (z^(r), kappa^(r)) the collapsed predictive of a new row is

    .. math::

        p(x \mid z^{(r)}, \kappa^{(r)}, X) = \sum_k \frac{\alpha + n_k}{n + K\alpha}
            C_d(\kappa_k) \frac{C_d(\lVert\kappa_k s_k + C_0\mu_0\rVert)}
                               {C_d(\lVert\kappa_k (s_k + x) + C_0\mu_0\rVert)},

    (mu and pi integrated out, ``docs/bayesian_gibbs.md``); the result is
    log (1/R) sum_r p(x | z^(r), kappa^(r), X), a logsumexp over the R draws.

    Parameters
    ----------
    data : DenseData or SparseData
        Held-out unit rows, shape (m, d).
    counts : array of shape (R, K)
    resultant : array of shape (R, K, d)
    kappa : array of shape (R, K)
    hyper : Priors

    Returns
    -------
    jax.Array of shape (m,)
    """
    return _log_predictive(
        data,
        jnp.asarray(counts, jnp.float64),
        jnp.asarray(resultant, jnp.float64),
        jnp.asarray(kappa, jnp.float64),
        hyper,
    )


# --------------------------------------------------------------------------------------------
# Estimator glue (BayesianVMFMixture with inference="gibbs")
# --------------------------------------------------------------------------------------------


def _pack_priors(priors: Priors) -> np.ndarray:
    """(alpha, C0, m, s2, mu0...) as one float64 array (saved with the fit)."""
    scalars = [float(priors.alpha), float(priors.C0), float(priors.m), float(priors.s2)]
    return np.concatenate([scalars, np.asarray(priors.mu0, np.float64)])


def _unpack_priors(packed) -> Priors:
    packed = np.asarray(packed, np.float64)
    alpha, C0, m, s2 = packed[:4]
    return hyper_from_priors(Priors(alpha, packed[4:], C0, m, s2))


def _check_init_labels(init_labels, num_chains: int, n: int, n_components: int) -> np.ndarray:
    labels = np.asarray(init_labels)
    if labels.shape != (num_chains, n):
        raise ValueError(
            f"init_labels must have shape (num_chains, n_samples) = ({num_chains}, {n}); "
            f"got {labels.shape}."
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"init_labels must hold integers; got dtype {labels.dtype}.")
    bad = (labels < 0) | (labels >= n_components)
    if bad.any():
        chain, row = np.argwhere(bad)[0]
        raise ValueError(
            f"init_labels must lie in [0, n_components={n_components}); chain {chain}, row "
            f"{row} is {labels[chain, row]}."
        )
    return labels.astype(np.int32)


def _permute_components(array: np.ndarray, perms: np.ndarray, axis: int) -> np.ndarray:
    """Index every chain c of ``array`` (chain axis first) by ``perms[c]`` along ``axis``."""
    return np.stack([np.take(a, p, axis=axis - 1) for a, p in zip(array, perms, strict=True)])


def _split_rhat(draws: np.ndarray) -> np.ndarray:
    """Split R-hat ([2]_) of (chain, draw, ...) draws, by NumPyro's implementation."""
    from numpyro.diagnostics import split_gelman_rubin

    return np.asarray(split_gelman_rubin(draws))


@functools.partial(jax.jit, static_argnames=("d",))
def _posterior_mean_directions(kappa, resultant, hyper, d):
    """Average of E[mu_k | z, kappa, X] = A_d(|b_k|) b_k / |b_k| over draws, renormalised.

    b_k = kappa_k s_k + C0 mu0 is the natural parameter of the conditional vMF of mu_k.
    """
    count_trace("bayesian.gibbs_directions")
    b = kappa[..., None] * resultant + hyper.C0 * hyper.mu0
    norm = jnp.linalg.norm(b, axis=-1, keepdims=True)
    tiny = jnp.finfo(jnp.float64).tiny
    mean = special.mean_resultant_length(d, norm) * b / jnp.maximum(norm, tiny)
    mean = mean.reshape(-1, *mean.shape[-2:]).mean(axis=0)
    mean_norm = jnp.linalg.norm(mean, axis=-1, keepdims=True)
    # a direction whose posterior is uniform (C0 = 0 and an empty component) falls back to mu0
    return jnp.where(mean_norm > tiny, mean / jnp.maximum(mean_norm, tiny), hyper.mu0)


def fit_gibbs(estimator, data, rng_key, priors: Priors, init_labels):
    """Fit B-vMFmix by collapsed Gibbs (sec. 3.1.2 of [1]_); set the estimator's attributes.

    Runs ``estimator.num_chains`` chains (one program) of ``num_warmup`` + ``num_samples``
    sweeps, each chain from its row of ``init_labels`` and kappa_k at the ML estimate of its
    initial clusters. The chains are aligned to chain 0's labelling (:func:`align_chains`)
    before anything is exported. Sets:

    - ``weights_``: posterior mean of pi, the average over draws of
      E[pi_k | z] = (alpha + n_k) / (n + K alpha); ``concentrations_``: posterior mean of
      kappa; ``mean_directions_``: the average over the retained draws of
      E[mu_k | z, kappa, X], renormalised;
    - ``gibbs_kappa_``, ``gibbs_counts_`` (chain, draw, K), ``gibbs_log_joint_``
      (chain, draw): the sampling-phase draws; ``gibbs_resultants_`` (chain, r, K, d): s_k at
      r = min(``GIBBS_PREDICTIVE_DRAWS``, num_samples) evenly spaced draws (the last one
      included) for the held-out predictive; ``gibbs_accept_rate_`` (chain, K): mean MH
      acceptance of kappa over the sampling phase; ``gibbs_priors_`` (d + 4,): the prior
      values (alpha, C0, m, s2, mu0) the predictive needs;
    - ``rhat_kappa_`` (K,): split R-hat of kappa_k ([2]_); ``converged_``: all below 1.1
      (otherwise a ``ConvergenceWarning``);
    - ``lower_bounds_``: the collapsed log joint log p(X, z, kappa) of chain 0 at every
      sweep, warm-up included; ``lower_bound_``: its last value; ``n_iter_``: number of
      sweeps.

    Parameters
    ----------
    estimator : BayesianVMFMixture
        Read: ``n_components``, ``num_chains``, ``num_warmup``, ``num_samples``,
        ``verbose``, ``shared_kappa``.
    data : DenseData or SparseData
        Training rows (unit norm), shape (n, d).
    rng_key : jax.Array
    priors : Priors
        Resolved prior values.
    init_labels : int array of shape (num_chains, n)
        Initial labels of every chain.

    Returns
    -------
    diagnosis : bayesvmf._guards.Diagnosis
        Of the average counts over all chains and draws (crisp labels: the effective rows of
        a component are its count), with the posterior mean kappa and the cap KAPPA_MAX.
    n_degenerate_chains : int
        Chains whose own average counts are degenerate.
    """
    n, d = data.shape
    n_components = int(estimator.n_components)
    num_chains = int(estimator.num_chains)
    num_warmup, num_samples = int(estimator.num_warmup), int(estimator.num_samples)
    labels = _check_init_labels(init_labels, num_chains, n, n_components)
    hyper = hyper_from_priors(priors)
    result = run_chains(
        rng_key,
        data,
        hyper,
        labels,
        n_components=n_components,
        num_warmup=num_warmup,
        num_samples=num_samples,
        progress_bar=bool(estimator.verbose),
        shared_kappa=bool(estimator.shared_kappa),
    )
    perms = align_chains(result.frequency)
    sampling = slice(num_warmup, None)
    kappa = _permute_components(result.kappa[:, sampling], perms, axis=2)
    counts = _permute_components(result.counts[:, sampling], perms, axis=2)
    accept = _permute_components(result.accept[:, sampling], perms, axis=2).mean(axis=1)
    resultants = _permute_components(result.retained, perms, axis=2)
    kept = _retained_draws(num_samples, resultants.shape[1])
    alpha = float(priors.alpha)
    rhat = _split_rhat(kappa)

    estimator.gibbs_kappa_ = kappa
    estimator.gibbs_counts_ = counts
    estimator.gibbs_log_joint_ = result.log_joint[:, sampling]
    estimator.gibbs_resultants_ = resultants
    estimator.gibbs_accept_rate_ = accept
    estimator.gibbs_priors_ = _pack_priors(priors)
    estimator.rhat_kappa_ = rhat
    estimator.weights_ = ((alpha + counts) / (n + n_components * alpha)).mean(axis=(0, 1))
    estimator.concentrations_ = kappa.mean(axis=(0, 1))
    estimator.mean_directions_ = np.asarray(
        _posterior_mean_directions(jnp.asarray(kappa[:, kept]), jnp.asarray(resultants), hyper, d)
    )
    estimator.lower_bounds_ = result.log_joint[0]
    estimator.lower_bound_ = float(result.log_joint[0, -1])
    estimator.n_iter_ = num_warmup + num_samples
    estimator.converged_ = bool(np.all(rhat < RHAT_THRESHOLD))
    if not estimator.converged_:
        bad = np.flatnonzero(~(rhat < RHAT_THRESHOLD))
        warnings.warn(
            f"{type(estimator).__name__} (gibbs): the split R-hat of kappa is "
            f"{np.nanmax(rhat):.3g} >= {RHAT_THRESHOLD} (components {bad.tolist()}); the "
            f"{num_chains} chains disagree. Run longer chains (num_warmup, num_samples), start "
            "them from better initial labels, or use fewer components.",
            ConvergenceWarning,
            stacklevel=3,
        )
    # degeneracy guards on the average counts (crisp labels: the effective rows of a
    # component are its count) of all chains, and of each chain for n_degenerate_restarts_
    mean_counts, mean_kappa = counts.mean(axis=1), kappa.mean(axis=1)

    def diagnose(c, k):
        return _guards.diagnose(c, n_rows=n, kappa=k, kappa_max=KAPPA_MAX, effective_rows=c)

    n_bad = sum(diagnose(c, k).degenerate for c, k in zip(mean_counts, mean_kappa, strict=True))
    return diagnose(mean_counts.mean(axis=0), estimator.concentrations_), n_bad


def _predictive_draws(estimator):
    """Return counts (R, K), resultants (R, K, d), kappa (R, K) of the retained draws."""
    resultants = np.asarray(estimator.gibbs_resultants_)
    kept = _retained_draws(np.shape(estimator.gibbs_kappa_)[1], resultants.shape[1])
    n_components, d = resultants.shape[2:]
    counts = np.asarray(estimator.gibbs_counts_)[:, kept].reshape(-1, n_components)
    kappa = np.asarray(estimator.gibbs_kappa_)[:, kept].reshape(-1, n_components)
    return counts, resultants.reshape(-1, n_components, d), kappa


def gibbs_score_samples(estimator, data) -> jax.Array:
    r"""Held-out log posterior predictive density of every row of ``data`` (Gibbs fit).

    log (1/R) sum_r p(x | z^(r), kappa^(r), X): a logsumexp over the R = num_chains x r
    retained draws (``gibbs_resultants_``: r = min(10, num_samples) evenly spaced draws per
    chain) of the collapsed predictive with mu and pi integrated out,

    .. math::

        p(x \mid z, \kappa, X) = \sum_k \frac{\alpha + n_k}{n + K\alpha} C_d(\kappa_k)
            \frac{C_d(\lVert\kappa_k s_k + C_0\mu_0\rVert)}
                 {C_d(\lVert\kappa_k (s_k + x) + C_0\mu_0\rVert)}

    (:func:`log_predictive`). A Monte Carlo average over the posterior of (z, kappa); each
    term is exact given its draw.

    Parameters
    ----------
    estimator : BayesianVMFMixture
        Fitted with ``inference="gibbs"``.
    data : DenseData or SparseData
        Unit rows, shape (m, d).

    Returns
    -------
    jax.Array of shape (m,)
    """
    counts, resultant, kappa = _predictive_draws(estimator)
    return log_predictive(data, counts, resultant, kappa, _unpack_priors(estimator.gibbs_priors_))


def gibbs_to_arviz(estimator):
    """Return the Gibbs draws as ``arviz.InferenceData`` (dims chain, draw, component).

    ``posterior``: ``kappa`` (the kappa_k draws) and ``weights`` (E[pi_k | z] =
    (alpha + n_k) / (n + K alpha) at every draw, pi integrated out as in the sampler);
    ``sample_stats``: ``log_joint`` (collapsed log p(X, z, kappa)) and ``n_occupied``
    (components holding at least one row). Chains are aligned to chain 0's labels. With
    ``shared_kappa`` the one concentration has dims (chain, draw) only.
    """
    kappa = np.asarray(estimator.gibbs_kappa_)
    counts = np.asarray(estimator.gibbs_counts_)
    n_components = kappa.shape[2]
    alpha = float(np.asarray(estimator.gibbs_priors_)[0])
    n = counts[0, 0].sum()
    weights = (alpha + counts) / (n + n_components * alpha)
    shared = bool(estimator.shared_kappa)
    return _arviz.inference_data(
        {"kappa": kappa[..., 0] if shared else kappa, "weights": weights},
        {"kappa": [] if shared else ["component"], "weights": ["component"]},
        sample_stats={
            "log_joint": np.asarray(estimator.gibbs_log_joint_),
            "n_occupied": (counts > 0).sum(axis=2),
        },
    )
