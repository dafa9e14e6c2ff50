r"""k-MLE with Hartigan moves (Algorithm 2 of [1]_): families, state, the jitted sweep.

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bayesvmf import _compile_cache
from bayesvmf.models.kmle._wishart import _wishart_mle_from_stats

#: Random visit orders handed to one call of the jitted inner loop (a static shape).
_PASSES_PER_CALL = 8
#: Smallest padded sizes (rows, components) of the k-MLE state; see ``_bucket``.
_MIN_ROWS = 16
_MIN_COMPONENTS = 4


class Family(NamedTuple):
    """The operations k-MLE needs from an exponential family (static, hashable).

    Attributes
    ----------
    name : str
    row : callable
        ``row(data, i) -> (p,)``: the summed-statistics increment of observation ``i``.
    mle : callable
        ``mle(counts (K,), agg (K, p), cap) -> params`` (leading axis K); ``cap`` holds
        the family's parameter bounds: ``(min_dof, max_dof)`` (Wishart) or ``kappa_max``
        (vMF).
    log_lik : callable
        ``log_lik(data, params) -> (N, K)`` log-densities.
    n_row_arrays : int
        How many leading arrays of ``data`` have one row per observation (padded with
        zero rows to a bucketed size).
    """

    name: str
    row: Any
    mle: Any
    log_lik: Any
    n_row_arrays: int


def _wishart_split_agg(agg):
    d = math.isqrt(agg.shape[-1] - 1)
    return agg[..., 0], agg[..., 1:].reshape(*agg.shape[:-1], d, d)


def _wishart_mle_agg(counts, agg, cap):
    # cap = (min_dof, max_dof): min_dof > d keeps every Cauchy-Schwarz integral finite
    sum_log_det, scatter = _wishart_split_agg(agg)
    return _wishart_mle_from_stats(counts, sum_log_det, scatter, cap)


def _wishart_log_lik(data, params):
    # <t(X_i), theta_j> - F(theta_j) with rows (log|X_i|, vec X_i): one matrix product.
    stats = data[0]
    k = params.theta_n.shape[0]
    coef = jnp.concatenate([params.theta_n[:, None], -0.5 * params.theta_s.reshape(k, -1)], 1)
    return stats @ coef.T - params.log_normalizer


def _row_dense(data, i):
    return data[0][i]


WISHART = Family("wishart", _row_dense, _wishart_mle_agg, _wishart_log_lik, 1)


class VMFParams(NamedTuple):
    r"""vMF component parameters (leading axis: components).

    Attributes
    ----------
    mu : array of shape (K, d)
        Mean directions.
    kappa : array of shape (K,)
        Concentrations.
    log_normalizer : array of shape (K,)
        :math:`\log C_d(\kappa_j)`.
    """

    mu: Any
    kappa: Any
    log_normalizer: Any


def _vmf_mle_agg(counts, agg, cap):
    from bayesvmf import special

    d = agg.shape[-1]
    norm = jnp.sqrt(jnp.sum(agg**2, axis=-1))
    tiny = jnp.finfo(agg.dtype).tiny
    mu = agg / jnp.maximum(norm, tiny)[:, None]
    rbar = norm / counts.astype(agg.dtype)
    kappa = special.kappa_from_rbar(d, rbar, kappa_max=cap)
    return VMFParams(mu, kappa, special.log_vmf_normalizer(d, kappa))


def _vmf_log_lik_dense(data, params):
    # log vMF(x | mu, kappa) = log C_d(kappa) + kappa mu.x, as in VonMisesFisher.log_prob
    return data[0] @ (params.kappa[:, None] * params.mu).T + params.log_normalizer


def _vmf_row_ell(data, i):
    cols, vals, d = data[0], data[1], data[2].shape[0]
    return jnp.zeros((d,), vals.dtype).at[cols[i]].add(vals[i])


def _vmf_log_lik_ell(data, params):
    cols, vals = data[0], data[1]
    v = (params.kappa[:, None] * params.mu).T  # (d, K)
    return jnp.einsum("nm,nmk->nk", vals, v[cols]) + params.log_normalizer


VMF_DENSE = Family("vmf", _row_dense, _vmf_mle_agg, _vmf_log_lik_dense, 1)
VMF_SPARSE = Family("vmf", _vmf_row_ell, _vmf_mle_agg, _vmf_log_lik_ell, 2)


# ---------------------------------------------------------------------------------------------
# k-MLE with Hartigan moves (Algorithm 2 of [1])
# ---------------------------------------------------------------------------------------------


class KMLEState(NamedTuple):
    r"""State of k-MLE (Algorithm 2 of [1]_), possibly padded to a bucketed shape.

    Arrays may be longer than the sample (``N_pad >= N`` rows) and carry more components
    than are in use (``K_pad >= K``), so that fits of nearby sizes share one compiled
    program: padded rows have ``valid`` False and are never counted or moved; unused
    components have ``counts == 0``, hence :math:`\log w_j = -\infty`, and can never
    receive a point.

    Attributes
    ----------
    labels : int array of shape (N_pad,)
        The partition :math:`z` (0 on padded rows).
    valid : bool array of shape (N_pad,)
        True for the rows of the sample, False for padding.
    counts : int array of shape (K_pad,)
        Cluster sizes :math:`|C_j|` (0 for unused components).
    agg : array of shape (K_pad, p)
        Summed sufficient statistics per cluster (Wishart: :math:`(\sum\log|X_i|,
        \mathrm{vec}\sum X_i)`; vMF: the resultant :math:`\sum x_i`).
    params : WishartParams or VMFParams
        Cluster MLEs (leading axis K_pad; unused components hold a finite placeholder).
    log_lik : array of shape (N_pad, K_pad)
        :math:`\log p_F(X_i; \theta_j)`.
    log_weights : array of shape (K_pad,)
        :math:`\log w_j`, held fixed during a sweep (updated after it, line 18).
    """

    labels: Any
    valid: Any
    counts: Any
    agg: Any
    params: Any
    log_lik: Any
    log_weights: Any


class SweepInfo(NamedTuple):
    """What a :func:`hartigan_sweep` did.

    Attributes
    ----------
    n_transfers : int array
        Number of points moved.
    n_passes : int array
        Number of passes completed.
    done : bool array
        True if the last pass made no transfer (the inner loop of Algorithm 2 converged).
    """

    n_transfers: Any
    n_passes: Any
    done: Any


def _log_weights(counts, dtype):
    """Line 4 / 18 of Algorithm 2: log w_j = log(|C_j| / N); -inf for unused components."""
    return jnp.log(counts / jnp.sum(counts)).astype(dtype)


def init_state(family: Family, data, labels, valid, n_components: int, cap) -> KMLEState:
    """Build the k-MLE state of a partition: cluster statistics, MLEs, weights (lines 2-4).

    Parameters
    ----------
    family : Family
        Static.
    data : tuple of arrays
        The family's device representation of the sample (``N_pad`` rows).
    labels : int array of shape (N_pad,)
        A partition of the valid rows with labels in ``[0, K)``; components ``K`` to
        ``n_components - 1`` stay empty (padding).
    valid : bool array of shape (N_pad,)
        True for the rows of the sample.
    n_components : int
        ``K_pad`` (static).
    cap : float array
        ``(min_dof, max_dof)`` (Wishart) or ``kappa_max`` (vMF).

    Returns
    -------
    KMLEState
    """
    labels = jnp.asarray(labels, jnp.int32)
    valid = jnp.asarray(valid, bool)
    n = labels.shape[0]
    counts = jax.ops.segment_sum(valid.astype(jnp.int32), labels, num_segments=n_components)
    rows = jax.vmap(lambda i: family.row(data, i))(jnp.arange(n))
    rows = jnp.where(valid[:, None], rows, 0.0)
    agg = jax.ops.segment_sum(rows, labels, num_segments=n_components)
    # unused components get a finite placeholder (a copy of component 0, never empty) so
    # that no NaN enters the log-likelihood matrix; their weight is 0, so they never win.
    used = counts > 0
    safe_counts = jnp.where(used, counts, counts[0])
    safe_agg = jnp.where(used[:, None], agg, agg[0])
    params = family.mle(safe_counts, safe_agg, cap)
    log_lik = family.log_lik(data, params)
    log_weights = _log_weights(counts, log_lik.dtype)
    return KMLEState(labels, valid, counts, agg, params, log_lik, log_weights)


def complete_log_likelihood(state: KMLEState):
    r"""Return the mean complete log-likelihood :math:`\frac1N \ell(z, w, \theta)`.

    :math:`\ell = \sum_i \log w_{z_i} + \log p_F(X_i; \theta_{z_i})` over the valid rows;
    maximising it is minimising :math:`\mathrm{kmeans}_{F^*, \log w}` (sec. 3.1 of [1]_).
    """
    idx = state.labels[:, None]
    own = jnp.take_along_axis(state.log_lik + state.log_weights, idx, axis=1)[:, 0]
    own = jnp.where(state.valid, own, 0.0)
    return jnp.sum(own) / jnp.sum(state.valid)


def hartigan_sweep(family: Family, state: KMLEState, data, perms, cap, tol, max_transfers):
    r"""Run the inner loop of Algorithm 2 of [1]_ (lines 8-17) with the weights fixed.

    Passes over the sample in the orders given by ``perms`` (line 10); a point
    :math:`X_i` in a cluster with more than one point (line 11) moves to
    :math:`z_i^* = \arg\max_j \log w_j + \log p_F(X_i; \theta_j)` when that improves its
    term by more than ``tol`` (line 13), and the two affected clusters' summed statistics
    and MLEs are updated at once (line 15). Stops after a pass without transfers (then
    ``info.done`` is True), when the passes in ``perms`` are used up, or after
    ``max_transfers`` transfers. Within a pass, all points up to the next one that wants
    to move are skipped with one vectorised test: the parameters do not change between
    their visits, so this is the paper's sequential order exactly. Padded rows
    (``state.valid`` False) never move; unused components (weight 0) never receive.

    Parameters
    ----------
    family : Family
        Static.
    state : KMLEState
    data : tuple of arrays
    perms : int array of shape (n_passes, N_pad)
        Visit orders, one row per pass (random permutations drawn by the caller).
    cap : float array
        ``(min_dof, max_dof)`` (Wishart) or ``kappa_max`` (vMF).
    tol : float array
        Smallest gain, in log-likelihood units, that counts as an improvement.
    max_transfers : int array
        Cap on the number of transfers in this call.

    Returns
    -------
    state : KMLEState
    info : SweepInfo
    """
    n = state.labels.shape[0]
    n_perms = perms.shape[0]
    positions = jnp.arange(n)
    zero = jnp.int32(0)

    def cond(c):
        _, p, _, _, n_transfers, done = c
        return (~done) & (n_transfers < max_transfers) & (p < n_perms)

    def transfer(c, j, best):
        st, p, _, pass_transfers, n_transfers, done = c
        i = perms[p, j]
        a, b = st.labels[i], best[i].astype(jnp.int32)
        row = family.row(data, i)
        counts = st.counts.at[a].add(-1).at[b].add(1)
        agg = st.agg.at[a].add(-row).at[b].add(row)
        ab = jnp.stack([a, b])
        new = family.mle(counts[ab], agg[ab], cap)
        params = jax.tree_util.tree_map(lambda q, r: q.at[ab].set(r), st.params, new)
        log_lik = st.log_lik.at[:, ab].set(family.log_lik(data, new))
        labels = st.labels.at[i].set(b)
        st = KMLEState(labels, st.valid, counts, agg, params, log_lik, st.log_weights)
        return st, p, j + 1, pass_transfers + 1, n_transfers + 1, done

    def end_pass(c):
        st, p, _, pass_transfers, n_transfers, _ = c
        return st, p + 1, zero, zero, n_transfers, pass_transfers == 0

    def body(c):
        st, p, pos = c[0], c[1], c[2]
        score = st.log_lik + st.log_weights
        best = jnp.argmax(score, axis=1)
        gain = jnp.max(score, axis=1) - jnp.take_along_axis(score, st.labels[:, None], 1)[:, 0]
        movable = (gain > tol) & (st.counts[st.labels] > 1) & st.valid
        candidate = movable[perms[p]] & (positions >= pos)
        j = jnp.argmax(candidate).astype(jnp.int32)
        return lax.cond(candidate[j], lambda c: transfer(c, j, best), end_pass, c)

    carry = (state, zero, zero, zero, zero, jnp.asarray(False))
    state, p, _, _, n_transfers, done = lax.while_loop(cond, body, carry)
    return state, SweepInfo(n_transfers, p, done)


_hartigan_sweep = _compile_cache.jit(hartigan_sweep, static_argnums=0)
_init_state = _compile_cache.jit(init_state, static_argnums=(0, 4))
_complete_log_likelihood = _compile_cache.jit(complete_log_likelihood)


@_compile_cache.jit
def _set_weights(state: KMLEState):
    """Line 18 of Algorithm 2: w_j = |C_j| / N."""
    return state._replace(log_weights=_log_weights(state.counts, state.log_lik.dtype))


@partial(_compile_cache.jit, static_argnums=0)
def _mixture_log_lik(family: Family, data, params, log_weights):
    """Return log w_j + log p_F(X_i; theta_j), the matrix behind predict and score_samples."""
    return family.log_lik(data, params) + log_weights


def _bucket(size: int, minimum: int) -> int:
    """Round ``size`` up to ``minimum``, or above it to one of 4 sizes per octave (<= 25 %).

    k-MLE compiles one program per (rows, components) shape; rounding both up to a few
    bucketed sizes lets fits of nearby sizes (series of different lengths, DP-k-MLE++
    choosing different K, test fixtures) reuse one compilation.
    """
    if size <= minimum:
        return minimum
    step = 1 << max((size - 1).bit_length() - 3, 0)
    return -(-size // step) * step


def _pad_rows(a, n_pad):
    if a.shape[0] == n_pad:
        return a
    # on the host (the data come back from the device once): an eager concatenation is a
    # program compiled per shape
    a = np.asarray(a)
    return jnp.asarray(np.concatenate([a, np.zeros((n_pad - a.shape[0], *a.shape[1:]), a.dtype)]))


def _pad_data(family: Family, data, n_pad):
    """Pad the per-row arrays of ``data`` (the first ``family.n_row_arrays``) with zeros."""
    k = family.n_row_arrays
    return tuple(_pad_rows(a, n_pad) for a in data[:k]) + tuple(data[k:])


def _visit_orders(rng, n, n_pad, n_passes=None):
    """Random visit orders (line 10): permutations of the n rows, padding appended last."""
    n_passes = _PASSES_PER_CALL if n_passes is None else n_passes
    perms = rng.permuted(np.tile(np.arange(n), (n_passes, 1)), axis=1)
    pad = np.broadcast_to(np.arange(n, n_pad), (n_passes, n_pad - n))
    return jnp.asarray(np.concatenate([perms, pad], axis=1))


def _start(family: Family, data, labels, n_components: int, cap):
    """Pad data and labels to bucketed shapes and build the initial state (lines 2-4)."""
    n = len(labels)
    n_pad = _bucket(n, _MIN_ROWS)
    k_pad = _bucket(n_components, _MIN_COMPONENTS)
    data = _pad_data(family, data, n_pad)
    labels = np.concatenate([np.asarray(labels, np.int32), np.zeros(n_pad - n, np.int32)])
    valid = np.arange(n_pad) < n
    return data, _init_state(family, data, labels, valid, k_pad, cap)
