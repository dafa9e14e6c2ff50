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
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln, logsumexp
from scipy.optimize import linear_sum_assignment

from bayesvmf import _mixture, special
from bayesvmf._mixture import JIT_OPTIONS, DenseData, count_trace, data_dot, data_tdot
from bayesvmf.exceptions import ConvergenceWarning
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
    "log_predictive",
    "align_chains",
    "run_chains",
    "fit_gibbs",
    "gibbs_score_samples",
    "gibbs_to_arviz",
]

#: Sweeps per jitted chunk (the progress bar moves between chunks); a fit runs
#: ceil(total / GIBBS_CHUNK) chunks of equal length, so the chunk program compiles once.
GIBBS_CHUNK = 50
#: Rows whose label conditionals are evaluated together by the speculative sweep
#: (:func:`gibbs_z_sweep`): one batched normaliser call per block instead of one per row.
GIBBS_BLOCK = 64
#: Random-walk MH steps on each log kappa_k per sweep. A step costs O(K) (the norms come
#: from the carried |s_k|^2 and s_k . mu0), against O(n K d) for the label sweep.
KAPPA_MH_STEPS = 10
#: Acceptance rate the warm-up adapts the MH step towards (the optimum of a 1-D Gaussian
#: random walk, Gelman, Roberts and Gilks 1996).
KAPPA_MH_TARGET = 0.44
#: Proposals above this are rejected: the range over which ``bayesvmf.special`` is tested.
KAPPA_MAX = 1e7
#: Number of retained draws of the resultants s_k per chain (evenly spaced over the sampling
#: phase, the last sweep included) used by the held-out predictive.
GIBBS_PREDICTIVE_DRAWS = 10
#: R-hat threshold of ``converged_``.
RHAT_THRESHOLD = 1.1


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
    resultant = data_tdot(data, onehot).T
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
        counts = np.diff(_mixture.host_csr(data).indptr)
    else:
        counts = np.bincount(np.asarray(data.rows), minlength=1)
    return max(int(np.max(counts)), 1)


def _row_reader(data, max_nnz: int):
    """Return ``read(i) -> (cols, x)``: the nonzeros of row i (dense: ``cols`` is None).

    Sparse rows are read from the device CSR arrays of ``data`` (``indptr`` added by
    :func:`bayesvmf._mixture.with_device_csr` for the "scipy" kernel, or rebuilt from the
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


def gibbs_kappa_update(rng_key, state: GibbsState, hyper: Priors, d: int, adapt):
    """Update every kappa_k by ``KAPPA_MH_STEPS`` random-walk MH steps on log kappa_k.

    The proposal is log kappa' = log kappa + exp(log_step) eps, eps ~ N(0, 1): the
    log-normal proposal "around the current iterate" of sec. 3.1.2 of [1]_; it is symmetric
    on the log scale, so the acceptance ratio is the ratio of the targets (eq. (E) of
    ``docs/bayesian_gibbs.md``).
    ``adapt`` (1 during warm-up, 0 after) moves log_step towards ``KAPPA_MH_TARGET``, so the
    sampling phase is a fixed Markov kernel.

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

    def step(carry, key):
        # the target of the current point and its normalisers are carried (z is fixed
        # here): one normaliser evaluation per step, at the proposal
        log_kappa, current, log_c_kappa, log_c_norm, log_step = carry
        key_prop, key_acc = jax.random.split(key)
        proposal = log_kappa + jnp.exp(log_step) * jax.random.normal(key_prop, log_kappa.shape)
        proposed, prop_c_kappa, prop_c_norm, _ = _kappa_terms(d, proposal, state, hyper)
        log_ratio = jnp.where(proposal > np.log(KAPPA_MAX), -jnp.inf, proposed - current)
        accept_prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        accept = jax.random.uniform(key_acc, log_kappa.shape) < accept_prob
        log_kappa = jnp.where(accept, proposal, log_kappa)
        current = jnp.where(accept, proposed, current)
        log_c_kappa = jnp.where(accept, prop_c_kappa, log_c_kappa)
        log_c_norm = jnp.where(accept, prop_c_norm, log_c_norm)
        log_step = log_step + adapt * 0.1 * (accept_prob - KAPPA_MH_TARGET)
        return (log_kappa, current, log_c_kappa, log_c_norm, log_step), accept_prob

    log_kappa = jnp.log(state.kappa)
    current, log_c_kappa, log_c_norm, log_c_c0 = _kappa_terms(
        d, log_kappa, state, hyper, extra=hyper.C0
    )
    init = (log_kappa, current, log_c_kappa, log_c_norm, state.log_step)
    (log_kappa, _, log_c_kappa, log_c_norm, log_step), accept_prob = lax.scan(step, init, keys)
    state = state._replace(kappa=jnp.exp(log_kappa), log_c_kappa=log_c_kappa, log_step=log_step)
    log_joint = collapsed_log_joint(
        state.counts, log_kappa, log_c_kappa, log_c_norm, log_c_c0[0], hyper
    )
    return state, accept_prob.mean(axis=0), log_joint


def collapsed_log_joint(counts, log_kappa, log_c_kappa, log_c_norm, log_c_c0, hyper: Priors):
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
    """
    n_components = counts.shape[0]
    alpha = hyper.alpha
    dirichlet = (
        gammaln(n_components * alpha)
        - gammaln(counts.sum() + n_components * alpha)
        + jnp.sum(gammaln(counts + alpha) - gammaln(alpha))
    )
    vmf = jnp.sum(counts * log_c_kappa + log_c_c0 - log_c_norm)
    prior = jnp.sum(
        -log_kappa
        - 0.5 * jnp.log(2.0 * jnp.pi * hyper.s2)
        - 0.5 * (log_kappa - hyper.m) ** 2 / hyper.s2
    )
    return dirichlet + vmf + prior


def gibbs_sweep(rng_key, state: GibbsState, data, hyper: Priors, x_mu0, adapt, max_nnz: int):
    """One sweep: every label once (:func:`gibbs_z_sweep`), then the kappa moves.

    Returns
    -------
    state : GibbsState
    info : GibbsInfo
    """
    d = data.shape[1]
    key_z, key_kappa = jax.random.split(rng_key)
    state = gibbs_z_sweep(key_z, state, data, hyper, x_mu0, max_nnz)
    state, accept, log_joint = gibbs_kappa_update(key_kappa, state, hyper, d, adapt)
    return state, GibbsInfo(state.kappa, state.counts, log_joint, accept)


@functools.partial(jax.jit, static_argnames=("max_nnz",), compiler_options=JIT_OPTIONS)
def _gibbs_chunk(keys, adapt, slots, states, frequency, retained, data, hyper, max_nnz):
    """Run ``keys.shape[1]`` sweeps of every chain (chains one after the other, lax.map).

    ``adapt`` (chain, sweep) is 1 in warm-up; ``slots`` (chain, sweep) is the index in
    ``retained`` where the sweep's resultants are stored, or -1. ``frequency`` (chain, n, K)
    accumulates the label indicators of the sampling sweeps (the chain-alignment statistic).
    """
    count_trace("bayesian.gibbs_chunk")
    x_mu0 = data_dot(data, hyper.mu0[:, None].astype(jnp.float64))[:, 0]
    n_components = states.kappa.shape[1]

    def one_chain(chain_keys, chain_adapt, chain_slots, state, freq, kept):
        def sweep(carry, inputs):
            state, freq, kept = carry
            key, a, slot = inputs
            state, info = gibbs_sweep(key, state, data, hyper, x_mu0, a, max_nnz)
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


@functools.partial(jax.jit, static_argnames=("n_components",), compiler_options=JIT_OPTIONS)
def _init_states(data, z, kappa, mu0, n_components):
    count_trace("bayesian.gibbs_init")
    return jax.vmap(lambda zc, kc: init_state(data, zc, kc, mu0, n_components))(z, kappa)


@functools.partial(jax.jit, static_argnames=("n_components",), compiler_options=JIT_OPTIONS)
def _initial_kappa(data, z, m, n_components):
    """Start kappa_k at the ML estimate of the initial clusters (exp(m) if fewer than 2 rows).

    One data product for all chains (labels of shape (chains, n)); the estimate is clipped
    to [1e-3, 1e5] so that the first MH steps start inside the well-tested range.
    """
    count_trace("bayesian.gibbs_init_kappa")
    n_chains, n = z.shape
    d = data.shape[1]
    onehot = jax.nn.one_hot(z, n_components, dtype=jnp.float64)  # (C, n, K)
    flat = jnp.moveaxis(onehot, 0, 1).reshape(n, n_chains * n_components)
    resultant = data_tdot(data, flat).T.reshape(n_chains, n_components, d)
    counts = onehot.sum(axis=1)
    rbar = jnp.linalg.norm(resultant, axis=2) / jnp.maximum(counts, 1.0)
    kappa, _ = _mixture.solve_kappa(d, rbar, 1e5)
    kappa = jnp.clip(kappa, 1e-3, 1e5)
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
    kappa = _initial_kappa(data, z, hyper.m, n_components)
    states = _init_states(data, z, kappa, hyper.mu0, n_components)
    max_nnz = max_row_nnz(data)
    # the sweeps read rows of X inside the program: device CSR arrays beside the host blocks
    data = _mixture.with_device_csr(data)

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
            keys[c], adapt, slots, states, frequency, retained, data, hyper, max_nnz=max_nnz
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
    dots = data_dot(data, flat.T).reshape(-1, n_draws, n_components)  # x . s_k
    x_mu0 = data_dot(data, hyper.mu0[:, None])[:, 0]
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


def fit_gibbs(estimator, data, rng_key, priors: Priors, init_labels) -> None:
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
        ``progress_bar``.
    data : DenseData or SparseData
        Training rows (unit norm), shape (n, d).
    rng_key : jax.Array
    priors : Priors
        Resolved prior values.
    init_labels : int array of shape (num_chains, n)
        Initial labels of every chain.
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
        progress_bar=bool(estimator.progress_bar),
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
    (components holding at least one row). Chains are aligned to chain 0's labels.
    """
    import arviz as az

    kappa = np.asarray(estimator.gibbs_kappa_)
    counts = np.asarray(estimator.gibbs_counts_)
    n_components = kappa.shape[2]
    alpha = float(np.asarray(estimator.gibbs_priors_)[0])
    n = counts[0, 0].sum()
    weights = (alpha + counts) / (n + n_components * alpha)
    return az.from_dict(
        posterior={"kappa": kappa, "weights": weights},
        sample_stats={
            "log_joint": np.asarray(estimator.gibbs_log_joint_),
            "n_occupied": (counts > 0).sum(axis=2),
        },
        coords={"component": np.arange(n_components)},
        dims={"kappa": ["component"], "weights": ["component"]},
    )
