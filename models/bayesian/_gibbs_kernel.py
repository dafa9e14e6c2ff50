r"""Collapsed Gibbs sampler of the Bayesian vMF mixture B-vMFmix (sec. 3.1.2 of [1]_).

Model (sec. 3.1 of [1]_): pi ~ Dir(alpha), mu_k ~ vMF(mu0, C0), kappa_k ~ LogNormal(m, s2),
z_i ~ Cat(pi), x_i ~ vMF(mu_{z_i}, kappa_{z_i}). vMF priors are conjugate to vMF likelihoods,
so mu and pi are integrated out and the chain moves only the labels z and the concentrations
kappa. With the counts n_k, the resultants s_k = sum_{z_i = k} x_i and
b_k = kappa_k s_k + C0 mu0 (derivation in ``docs/bayesian_gibbs.md``):

.. math::

    P(z_i = k \mid z_{-i}, \kappa, X) \propto (\alpha + n_{-i,k})\, C_d(\kappa_k)
        \frac{C_d(\lVert \kappa_k s_{-i,k} + C_0\mu_0 \rVert)}
             {C_d(\lVert \kappa_k (s_{-i,k} + x_i) + C_0\mu_0 \rVert)},

    p(\log\kappa_k \mid z, X) \propto
        \frac{C_d(\kappa_k)^{n_k}}{C_d(\lVert \kappa_k s_k + C_0\mu_0 \rVert)}
        \, \mathcal{N}(\log\kappa_k \mid m, s^2)

(the second is the kappa conditional of sec. 3.1.2 of [1]_ on the log scale: the log-normal
density times the Jacobian kappa is the normal density of log kappa; C_d(C0) is a constant).

Cost: a row needs ``x_i . s_k`` for the K candidates (O(K d) dense, O(K nnz_i) for a sparse
row read from the CSR arrays) and K normalisers (log C_d of the current |b_k| is carried);
n_k, s_k, |s_k|^2 and s_k . mu0 are carried and updated in O(d) (O(nnz_i)) per label
change, never recomputed per point. |s_k|^2, s_k . mu0 and log C_d(|b_k|) are refreshed from
s_k once per sweep (O(K d)) so that rounding cannot drift. The sweep is evaluated
speculatively in blocks of rows (:func:`gibbs_z_sweep`): exact, the same draws as a
one-row-at-a-time sweep, with one batched normaliser call per block; the normaliser
evaluations (n K per sweep) are its floor (``docs/bayesian_gibbs.md``).

Symbols (code name <-> paper):

===================  =====================================================================
``z``                labels z_i, int32 (n,)
``counts``           n_k = #{i : z_i = k}, (K,)
``resultant``        s_k = sum_{z_i = k} x_i, (K, d)
``resultant_sq``     |s_k|^2, (K,)
``resultant_mu0``    s_k . mu0, (K,)
``kappa``            kappa_k, (K,)
``alpha``            symmetric Dirichlet parameter of pi
``mu0``, ``C0``      mean direction and concentration of the vMF prior on mu_k
``m``, ``s2``        mean and variance of log kappa_k (log-normal prior)
``log_step``         log of the random-walk step of the MH move on log kappa_k
===================  =====================================================================

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher Clustering Models", ICML 2014, sec. 3.1.2.
.. [2] A. Gelman, J. B. Carlin, H. S. Stern, D. B. Dunson, A. Vehtari and D. B. Rubin,
   *Bayesian Data Analysis*, 3rd ed., sec. 11.4 (split R-hat).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln

from bayesvmf import _compile_cache, _data, _mcmc, _mixture
from bayesvmf._data import DenseData
from bayesvmf._mixture import JIT_OPTIONS, count_trace
from bayesvmf.models.bayesian._kappa import Priors

__all__ = [
    "hyper_from_priors",
    "GibbsState",
    "GibbsInfo",
    "init_state",
    "sufficient_statistics",
    "gibbs_z_sweep",
    "gibbs_kappa_update",
    "gibbs_sweep",
    "collapsed_log_joint",
]

#: Rows whose label conditionals are evaluated together by the speculative sweep
#: (:func:`gibbs_z_sweep`): one batched normaliser call per block instead of one per row.
GIBBS_BLOCK = 64
#: Random-walk MH steps on each log kappa_k per sweep. A step costs O(K) (the norms come
#: from the carried |s_k|^2 and s_k . mu0), against O(n K d) for the label sweep.
KAPPA_MH_STEPS = 10
#: Proposals above this are rejected: the range over which ``bayesvmf.special`` is tested.
KAPPA_MAX = 1e7


def hyper_from_priors(priors) -> Priors:
    """Return ``priors`` (:class:`~bayesvmf.models.bayesian._kappa.Priors`) as float64 arrays.

    Held as arrays, a change of a prior value does not retrace the jitted sweeps.
    """
    f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
    return Priors(f64(priors.alpha), f64(priors.mu0), f64(priors.C0), f64(priors.m), f64(priors.s2))


class GibbsState(NamedTuple):
    """State of one chain of the collapsed sampler.

    Attributes
    ----------
    z : int32 array of shape (n,)
        Labels z_i.
    counts : array of shape (K,)
        n_k.
    resultant : array of shape (K, d)
        s_k = sum_{z_i = k} x_i.
    resultant_sq : array of shape (K,)
        |s_k|^2.
    resultant_mu0 : array of shape (K,)
        s_k . mu0.
    kappa : array of shape (K,)
    log_c_kappa : array of shape (K,)
        log C_d(kappa_k) (kept with kappa, so the label moves need no normaliser of their own).
    log_step : array of shape (K,)
        Log of the MH random-walk step on log kappa_k (adapted during warm-up only).
    """

    z: Any
    counts: Any
    resultant: Any
    resultant_sq: Any
    resultant_mu0: Any
    kappa: Any
    log_c_kappa: Any
    log_step: Any


class GibbsInfo(NamedTuple):
    """What one sweep records (per chain).

    Attributes
    ----------
    kappa : array of shape (K,)
    counts : array of shape (K,)
    log_joint : scalar
        log p(X, z, kappa) with mu and pi integrated out (:func:`collapsed_log_joint`).
    accept : array of shape (K,)
        Mean MH acceptance probability of the sweep's kappa moves.
    """

    kappa: Any
    counts: Any
    log_joint: Any
    accept: Any


# --------------------------------------------------------------------------------------------
# Statistics and rows
# --------------------------------------------------------------------------------------------


def sufficient_statistics(data, z, mu0, n_components: int):
    """Compute (n_k, s_k, |s_k|^2, s_k . mu0) from the labels, from scratch (one data product).

    Parameters
    ----------
    data : DenseData or SparseData
    z : int array of shape (n,)
    mu0 : array of shape (d,)
    n_components : int

    Returns
    -------
    counts : (K,), resultant : (K, d), resultant_sq : (K,), resultant_mu0 : (K,)
    """
    onehot = jax.nn.one_hot(z, n_components, dtype=jnp.float64)
    resultant = data.tdot(onehot).T
    return (
        onehot.sum(axis=0),
        resultant,
        jnp.sum(resultant * resultant, axis=1),
        resultant @ mu0,
    )


def init_state(data, z, kappa, mu0, n_components: int) -> GibbsState:
    """Return the chain state at labels ``z`` and concentrations ``kappa`` (statistics exact).

    Parameters
    ----------
    data : DenseData or SparseData
    z : int array of shape (n,)
    kappa : array of shape (K,)
    mu0 : array of shape (d,)
    n_components : int
    """
    counts, resultant, resultant_sq, resultant_mu0 = sufficient_statistics(
        data, z, mu0, n_components
    )
    kappa = jnp.asarray(kappa, jnp.float64)
    # explicit dtype: a weakly typed field would change type after the first chunk and make
    # the chunk program compile twice
    log_step = jnp.zeros(n_components, jnp.float64)
    return GibbsState(
        jnp.asarray(z, jnp.int32),
        counts,
        resultant,
        resultant_sq,
        resultant_mu0,
        kappa,
        _mixture.log_normalizer(resultant.shape[1], kappa),
        log_step,
    )


def max_row_nnz(data) -> int:
    """Largest number of stored entries in a row (1 for dense data, which is not read so)."""
    if isinstance(data, DenseData):
        return 1
    if data.handle is not None:  # the "scipy" kernel's host block: no copy
        counts = np.diff(_data.host_csr(data).indptr)
    else:
        counts = np.bincount(np.asarray(data.rows), minlength=1)
    return max(int(np.max(counts)), 1)


def _row_reader(data, max_nnz: int):
    """Return ``read(i) -> (cols, x)``: the nonzeros of row i (dense: ``cols`` is None).

    Sparse rows are read from the device CSR arrays of ``data`` (``indptr`` added by
    :func:`bayesvmf._data.with_device_csr` for the "scipy" kernel, or rebuilt from the
    row-sorted ``rows`` of the "segment_sum" kernel) as a window of
    ``max_nnz`` entries, the entries past the row's end masked to zero; the arrays are padded
    by ``max_nnz`` so that a window never runs past their end (``dynamic_slice`` would shift
    it back). X is never densified.
    """
    if isinstance(data, DenseData):
        X = data.X

        def read_dense(i):
            return None, X[i].astype(jnp.float64)

        return read_dense
    n = data.shape[0]
    indptr = data.indptr
    if indptr is None:
        indptr = jnp.searchsorted(data.rows, jnp.arange(n + 1, dtype=jnp.int32)).astype(jnp.int32)
    cols = jnp.concatenate([data.cols, jnp.zeros(max_nnz, data.cols.dtype)])
    values = jnp.concatenate([data.values, jnp.zeros(max_nnz, data.values.dtype)])
    offsets = jnp.arange(max_nnz)

    def read_sparse(i):
        start = indptr[i]
        length = indptr[i + 1] - start
        row_cols = lax.dynamic_slice(cols, (start,), (max_nnz,))
        row_values = lax.dynamic_slice(values, (start,), (max_nnz,)).astype(jnp.float64)
        # padded entries point at column 0 with value 0: adding them changes nothing
        return row_cols, jnp.where(offsets < length, row_values, 0.0)

    return read_sparse


def _block_dots(resultant, cols, x):
    """Return x_j . s_k for the rows of a block, shape (B, K) (O(B K d) dense, O(B K nnz))."""
    if cols is None:
        return x @ resultant.T
    return jnp.einsum("kbm,bm->bk", resultant[:, cols], x)


def _add_row(resultant, k, cols, x):
    """Return s with s_k += x (O(d) dense, O(nnz) sparse)."""
    if cols is None:
        return resultant.at[k].add(x)
    return resultant.at[k, cols].add(x)


def _norms_sq(kappa, resultant_sq, resultant_mu0, C0):
    """|kappa_k s_k + C0 mu0|^2 from the carried |s_k|^2 and s_k . mu0 (|mu0| = 1)."""
    return kappa * kappa * resultant_sq + 2.0 * kappa * C0 * resultant_mu0 + C0 * C0


def _inverse_cdf(logits, uniforms):
    """Draw k with P(k) proportional to exp(logits[..., k]), by inversion with u ~ U[0, 1).

    k is the first index whose cumulative weight exceeds u times the total, so a weight
    that underflows to zero is never drawn.
    """
    weights = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    cumulative = jnp.cumsum(weights, axis=-1)
    above = cumulative > uniforms[..., None] * cumulative[..., -1:]
    return jnp.argmax(above, axis=-1).astype(jnp.int32)


# --------------------------------------------------------------------------------------------
# The two moves
# --------------------------------------------------------------------------------------------


def gibbs_z_sweep(rng_key, state: GibbsState, data, hyper: Priors, x_mu0, max_nnz: int):
    """Resample every z_i once, in order, from its collapsed conditional (sec. 3.1.2 of [1]_).

    p(z_i = k | rest) is proportional to (alpha + n_{-i,k}) C_d(kappa_k) C_d(|b_k|) /
    C_d(|b_k + kappa_k x_i|) with b_k = kappa_k s_{-i,k} + C0 mu0 (eq. (D) of
    ``docs/bayesian_gibbs.md``); |b_k|^2 and |b_k + kappa_k x_i|^2 are expanded with the
    carried |s_k|^2 and s_k . mu0, and log C_d(|kappa_k s_k + C0 mu0|) of the current state
    is carried too, so a row needs the K products x_i . s_k and K normalisers: the K - 1
    joined norms and the one left norm of its own component.

    The sweep is the sequential systematic-scan Gibbs sampler, evaluated speculatively in
    blocks of ``GIBBS_BLOCK`` rows: the conditionals of the next B rows are computed together
    (one batched normaliser call) from the current state, and z_i is drawn by inversion of
    its conditional with its own uniform u_i (one U[0, 1) per row, drawn up front). A row
    that keeps its label leaves the state unchanged, so the conditional of the row after it,
    computed from the same state, is exact. At the first row that changes label the move is
    applied and the next block starts at the row after it. Every row is therefore drawn from
    its exact conditional given all the rows before it, with the same u_i as a one-row-at-
    a-time sweep: the output equals that of the sequential sampler (up to rounding), and the
    number of blocks is at most (number of label changes) + n / B.

    Parameters
    ----------
    rng_key : jax.Array
        The uniforms are ``jax.random.uniform(rng_key, (n,), float64)``, u_i for row i.
    state : GibbsState
    data : DenseData or SparseData
    hyper : Priors
    x_mu0 : array of shape (n,)
        x_i . mu0 (one data product per chunk, outside the sweep).
    max_nnz : int
        Static; the largest row length of sparse data (see :func:`max_row_nnz`).

    Returns
    -------
    GibbsState
    """
    n, d = data.shape
    n_components = state.kappa.shape[0]
    kappa, C0, log_c_kappa = state.kappa, hyper.C0, state.log_c_kappa
    components = jnp.arange(n_components)
    read = jax.vmap(_row_reader(data, max_nnz))
    uniforms = jax.random.uniform(rng_key, (n,), jnp.float64)
    # refresh the carried per-component scalars and log C_d(|b_k|) from s_k once per sweep
    # (O(K d)), so that rounding in the O(1) per-change updates cannot accumulate over sweeps
    resultant_sq = jnp.sum(state.resultant * state.resultant, axis=1)
    resultant_mu0 = state.resultant @ hyper.mu0
    norm_sq = _norms_sq(kappa, resultant_sq, resultant_mu0, C0)
    log_c_norm = _mixture.log_normalizer(d, jnp.sqrt(jnp.maximum(norm_sq, 0.0)))

    def next_block(carry, block: int):
        """Draw rows start, start + 1, ... up to the first label change (at most ``block``)."""
        start, _, z, counts, resultant, resultant_sq, resultant_mu0, log_c_norm = carry
        rows = start + jnp.arange(block, dtype=jnp.int32)
        valid = rows < n
        rows = jnp.minimum(rows, n - 1)
        cols, x = read(rows)  # x: (B, d) dense, (B, max_nnz) sparse
        x_sq = jnp.sum(x * x, axis=1)[:, None]
        xm = x_mu0[rows][:, None]
        old = z[rows]
        is_old = old[:, None] == components  # (B, K)
        # x_i . s_{-i,k}, |s_{-i,k}|^2 = |s|^2 - 2 x . (s - x) - |x|^2, s_{-i,k} . mu0
        dots = _block_dots(resultant, cols, x) - jnp.where(is_old, x_sq, 0.0)
        left_sq = resultant_sq - jnp.where(is_old, 2.0 * dots + x_sq, 0.0)
        left_mu0 = resultant_mu0 - jnp.where(is_old, xm, 0.0)
        left_norm_sq = _norms_sq(kappa, left_sq, left_mu0, C0)  # |b_k|^2 without x_i
        # |b + kappa x|^2 = |b|^2 + 2 kappa (kappa x . s + C0 x . mu0) + kappa^2 |x|^2
        joined_sq = left_norm_sq + 2.0 * kappa * (kappa * dots + C0 * xm) + kappa * kappa * x_sq
        # the normaliser each candidate needs beyond the carried log C_d(|b_k|) of the state:
        # k != z_i: |b_k + kappa x_i| (x_i joins); k = z_i: |b_{-i,k}| (x_i leaves; joined
        # back it is the state's |b_k|, whose log C_d is carried)
        changed = jnp.where(is_old, left_norm_sq, joined_sq)
        log_c = _mixture.log_normalizer(d, jnp.sqrt(jnp.maximum(changed, 0.0)))
        logits = (
            jnp.log(hyper.alpha + counts - is_old)
            + log_c_kappa
            + jnp.where(is_old, log_c - log_c_norm, log_c_norm - log_c)
        )
        new = _inverse_cdf(logits, uniforms[rows])
        moved = valid & (new != old)
        any_moved = jnp.any(moved)
        j = jnp.argmax(moved)  # the first row of the block that changes label
        k_old, k_new = old[j], new[j]
        x_j = any_moved * x[j]  # zero when every row kept its label: the state stands
        cols_j = None if cols is None else cols[j]
        resultant = _add_row(_add_row(resultant, k_old, cols_j, -x_j), k_new, cols_j, x_j)
        leave = any_moved & (components == k_old)
        join = any_moved & (components == k_new)
        resultant_sq = jnp.where(leave, left_sq[j], resultant_sq)
        resultant_sq = jnp.where(join, resultant_sq + 2.0 * dots[j] + x_sq[j], resultant_sq)
        resultant_mu0 = resultant_mu0 + jnp.where(join, xm[j], 0.0) - jnp.where(leave, xm[j], 0.0)
        counts = counts + join - leave
        log_c_norm = jnp.where(leave | join, log_c[j], log_c_norm)
        z = z.at[rows[j]].set(jnp.where(any_moved, k_new, k_old))
        start = jnp.where(any_moved, rows[j] + 1, start + block).astype(jnp.int32)
        return start, any_moved, z, counts, resultant, resultant_sq, resultant_mu0, log_c_norm

    def next_rows(carry):
        # after a label change the next block is one row: where labels change often, a
        # long block would mostly be evaluated in vain; after a kept row, a long block
        return lax.cond(
            carry[1],
            functools.partial(next_block, block=1),
            functools.partial(next_block, block=min(GIBBS_BLOCK, n)),
            carry,
        )

    carry = (
        jnp.zeros((), jnp.int32),
        jnp.zeros((), bool),
        state.z,
        state.counts,
        state.resultant,
        resultant_sq,
        resultant_mu0,
        log_c_norm,
    )
    _, _, z, counts, resultant, resultant_sq, resultant_mu0, _ = lax.while_loop(
        lambda carry: carry[0] < n, next_rows, carry
    )
    return state._replace(
        z=z,
        counts=counts,
        resultant=resultant,
        resultant_sq=resultant_sq,
        resultant_mu0=resultant_mu0,
    )


def _kappa_terms(d: int, log_kappa, state: GibbsState, hyper: Priors, extra=None):
    """Return the kappa target of every k, log C_d(kappa_k), log C_d(|b_k|) and log C_d(extra).

    The target is log p(log kappa_k | z, X) up to a constant (module docstring):
    n_k log C_d(kappa_k) - log C_d(|kappa_k s_k + C0 mu0|) + log N(log kappa_k | m, s2), the
    log-normal prior times the Jacobian kappa of the log transform being the normal density
    of log kappa. One normaliser call on all arguments (``extra`` appended, e.g. C0).
    """
    kappa = jnp.exp(log_kappa)
    norm = jnp.sqrt(
        jnp.maximum(_norms_sq(kappa, state.resultant_sq, state.resultant_mu0, hyper.C0), 0.0)
    )
    n_components = kappa.shape[0]
    args = [kappa, norm] if extra is None else [kappa, norm, jnp.reshape(extra, (1,))]
    log_c = _mixture.log_normalizer(d, jnp.concatenate(args))
    log_c_kappa, log_c_norm = log_c[:n_components], log_c[n_components : 2 * n_components]
    target = state.counts * log_c_kappa - log_c_norm - 0.5 * (log_kappa - hyper.m) ** 2 / hyper.s2
    return target, log_c_kappa, log_c_norm, log_c[2 * n_components :]


def gibbs_kappa_update(rng_key, state: GibbsState, hyper: Priors, d: int, adapt, shared=False):
    """Update every kappa_k by ``KAPPA_MH_STEPS`` random-walk MH steps on log kappa_k.

    With ``shared`` (static) one kappa is shared by the components: one chain on its
    conditional, sum_k [n_k log C_d(kappa) - log C_d(|kappa s_k + C0 mu0|)] + log N(log kappa
    | m, s2) (the prior once), its value copied into every kappa_k.

    The proposal is log kappa' = log kappa + exp(log_step) eps, eps ~ N(0, 1): the
    log-normal proposal "around the current iterate" of sec. 3.1.2 of [1]_; it is symmetric
    on the log scale, so the acceptance ratio is the ratio of the targets (eq. (E) of
    ``docs/bayesian_gibbs.md``).
    ``adapt`` (1 during warm-up, 0 after) moves log_step towards
    :data:`bayesvmf._mcmc.TARGET_ACCEPT`, so the sampling phase is a fixed Markov kernel.

    Returns
    -------
    state : GibbsState
        With the new kappa, log C_d(kappa) and log_step.
    accept : array of shape (K,)
        Mean acceptance probability over the steps.
    log_joint : scalar
        :func:`collapsed_log_joint` at the new state, from the normalisers the moves computed.
    """
    keys = jax.random.split(rng_key, KAPPA_MH_STEPS)
    n_components = state.kappa.shape[0]

    def terms(log_kappa, extra=None):
        if not shared:
            return _kappa_terms(d, log_kappa, state, hyper, extra)
        # the likelihood factors of every k at the one kappa (no prior: s2 = inf), summed,
        # and the prior once
        value, log_c_kappa, log_c_norm, log_c_extra = _kappa_terms(
            d,
            jnp.broadcast_to(log_kappa, (n_components,)),
            state,
            hyper._replace(s2=jnp.inf),
            extra,
        )
        value = jnp.sum(value) - 0.5 * (log_kappa - hyper.m) ** 2 / hyper.s2
        return value, log_c_kappa, log_c_norm, log_c_extra

    def target(log_kappa):
        value, log_c_kappa, log_c_norm, _ = terms(log_kappa)
        return value, (log_c_kappa, log_c_norm)

    log_kappa = jnp.log(state.kappa)
    log_step = state.log_step
    if shared:  # one chain: (1,) arrays, the normalisers (aux) stay (K,)
        log_kappa, log_step = log_kappa[:1], log_step[:1]
    # the first evaluation also gives log C_d(C0) (one normaliser call)
    current, log_c_kappa, log_c_norm, log_c_c0 = terms(log_kappa, extra=hyper.C0)
    (log_kappa, _, (log_c_kappa, log_c_norm), log_step), steps = _mcmc.log_kappa_mh(
        keys,
        log_kappa,
        current,
        (log_c_kappa, log_c_norm),
        log_step,
        target,
        gain=adapt * _mcmc.ADAPT_GAIN,
        log_kappa_max=np.log(KAPPA_MAX),
    )
    accept = steps.accept_prob.mean(axis=0)
    if shared:
        log_kappa, log_step, accept = (
            jnp.broadcast_to(a, (n_components,)) for a in (log_kappa, log_step, accept)
        )
    state = state._replace(kappa=jnp.exp(log_kappa), log_c_kappa=log_c_kappa, log_step=log_step)
    log_joint = collapsed_log_joint(
        state.counts, log_kappa, log_c_kappa, log_c_norm, log_c_c0[0], hyper, shared
    )
    return state, accept, log_joint


def collapsed_log_joint(
    counts, log_kappa, log_c_kappa, log_c_norm, log_c_c0, hyper: Priors, shared=False
):
    """Return log p(X, z, kappa | alpha, mu0, C0, m, s2) with mu and pi integrated out.

    Dirichlet-multinomial term log Gamma(K alpha) - log Gamma(n + K alpha)
    + sum_k [log Gamma(n_k + alpha) - log Gamma(alpha)], the collapsed vMF term
    sum_k [n_k log C_d(kappa_k) + log C_d(C0) - log C_d(|kappa_k s_k + C0 mu0|)] and the
    log-normal prior of every kappa_k (a density in kappa).

    Parameters
    ----------
    counts, log_kappa, log_c_kappa, log_c_norm : arrays of shape (K,)
        n_k, log kappa_k, log C_d(kappa_k), log C_d(|kappa_k s_k + C0 mu0|).
    log_c_c0 : scalar
        log C_d(C0).
    hyper : Priors
    shared : bool, default False
        One kappa shared by the components (all ``log_kappa`` equal): its prior counts once.
    """
    n_components = counts.shape[0]
    alpha = hyper.alpha
    dirichlet = (
        gammaln(n_components * alpha)
        - gammaln(counts.sum() + n_components * alpha)
        + jnp.sum(gammaln(counts + alpha) - gammaln(alpha))
    )
    vmf = jnp.sum(counts * log_c_kappa + log_c_c0 - log_c_norm)
    if shared:
        log_kappa = log_kappa[:1]
    prior = jnp.sum(
        -log_kappa
        - 0.5 * jnp.log(2.0 * jnp.pi * hyper.s2)
        - 0.5 * (log_kappa - hyper.m) ** 2 / hyper.s2
    )
    return dirichlet + vmf + prior


def gibbs_sweep(
    rng_key, state: GibbsState, data, hyper: Priors, x_mu0, adapt, max_nnz: int, shared=False
):
    """One sweep: every label once (:func:`gibbs_z_sweep`), then the kappa moves.

    ``shared`` (static): one kappa for every component (:func:`gibbs_kappa_update`).

    Returns
    -------
    state : GibbsState
    info : GibbsInfo
    """
    d = data.shape[1]
    key_z, key_kappa = jax.random.split(rng_key)
    state = gibbs_z_sweep(key_z, state, data, hyper, x_mu0, max_nnz)
    state, accept, log_joint = gibbs_kappa_update(key_kappa, state, hyper, d, adapt, shared)
    return state, GibbsInfo(state.kappa, state.counts, log_joint, accept)


@functools.partial(
    _compile_cache.jit, static_argnames=("max_nnz", "shared"), compiler_options=JIT_OPTIONS
)
def _gibbs_chunk(
    keys, adapt, slots, states, frequency, retained, data, hyper, max_nnz, shared=False
):
    """Run ``keys.shape[1]`` sweeps of every chain (chains one after the other, lax.map).

    ``adapt`` (chain, sweep) is 1 in warm-up; ``slots`` (chain, sweep) is the index in
    ``retained`` where the sweep's resultants are stored, or -1. ``frequency`` (chain, n, K)
    accumulates the label indicators of the sampling sweeps (the chain-alignment statistic).
    """
    count_trace("bayesian.gibbs_chunk")
    x_mu0 = data.dot(hyper.mu0[:, None].astype(jnp.float64))[:, 0]
    n_components = states.kappa.shape[1]

    def one_chain(chain_keys, chain_adapt, chain_slots, state, freq, kept):
        def sweep(carry, inputs):
            state, freq, kept = carry
            key, a, slot = inputs
            state, info = gibbs_sweep(key, state, data, hyper, x_mu0, a, max_nnz, shared)
            freq = freq + (1.0 - a) * jax.nn.one_hot(state.z, n_components, dtype=freq.dtype)
            index = jnp.maximum(slot, 0)
            kept = kept.at[index].set(jnp.where(slot >= 0, state.resultant, kept[index]))
            return (state, freq, kept), info

        (state, freq, kept), infos = lax.scan(
            sweep, (state, freq, kept), (chain_keys, chain_adapt, chain_slots)
        )
        return state, freq, kept, infos

    # chains one after the other (lax.map), not vmapped: a sweep's cost is the normaliser
    # evaluations, not per-operation overhead, and unbatched, the ``lax.cond`` of
    # gibbs_z_sweep runs only the branch it takes
    return lax.map(lambda args: one_chain(*args), (keys, adapt, slots, states, frequency, retained))
