r"""Hierarchical vMF mixture (H-vMFmix, section 3.2 of Gopal & Yang [1]_) by mean-field VI.

Generative story: a fixed tree of nodes n = 0..N-1 given by its parent array pa(n) (the root
has pa = -1); the data live on the L leaves,

    mu_root ~ vMF(mu0, C0),   mu_n ~ vMF(mu_pa(n), kappa_pa(n)),   kappa_n ~ LogNormal(m, s2),
    pi ~ Dir(alpha) over the leaves,   z_i ~ Cat(pi),   x_i ~ vMF(mu_{z_i}, kappa_{z_i}).

Inference: mean-field q(pi) q(z) prod_n q(mu_n) q(kappa_n) with q(pi) = Dir(rho),
q(z_i) = Cat(lam_i), q(mu_n) = vMF(psi_n, gamma_n) and q(kappa_n) from one of the two schemes
of sec. 3.1.1 (:mod:`._kappa`); empirical Bayes of alpha, mu0, m and s2. The paper's
supplement (the derivations) is missing: they are in docs/bayesian_hierarchical_temporal.md
and summarised here.

*Bound.* With E[mu_n] = A_d(gamma_n) psi_n, E[log pi_l] = digamma(rho_l) - digamma(rho_0),
weight_n = number of children (internal n) or N_l = sum_i lam_il (leaf l) and
s_n = sum_{c: pa(c)=n} E[mu_c] (internal) or r_l = sum_i lam_il x_i (leaf),

    L = log C_d(C0) + C0 mu0.E[mu_root]
        + sum_n (weight_n E[log C_d(kappa_n)] + E[kappa_n] E[mu_n].s_n)
        + log G(L alpha) - L log G(alpha) - log G(rho_0) + sum_l log G(rho_l)
        + sum_l (alpha + N_l - rho_l) E[log pi_l]
        - sum_n KL(N(E log kappa_n, Var log kappa_n) || N(m, s2))
        + sum_n H[q(mu_n)] + H[q(z)],

H[vMF(psi, gamma)] = -log C_d(gamma) - gamma A_d(gamma). The vMF terms are linear in each
E[mu_n] because the mean-field factors are independent: E[mu_pa . mu_n] = E[mu_pa].E[mu_n].

*Updates* (each the exact maximiser of L along its coordinate):

* q(z): log lam_il = E[log pi_l] + E[log C_d(kappa_l)] + E[kappa_l] x_i.E[mu_l] + const;
* q(pi): rho_l = alpha + N_l;
* q(mu_n) = vMF(R_n/|R_n|, |R_n|) with
  R_n = E[kappa_pa(n)] E[mu_pa(n)] (C0 mu0 at the root) + E[kappa_n] s_n, the terms of L
  linear in mu_n. Parents and children are coupled, so the nodes are updated in two colour
  classes, even depths then odd depths: no two nodes of one class are adjacent, so each class
  update is a block of exact coordinate maximisations;
* q(kappa_n): the generic conditional of :mod:`._kappa` with weight_n and dot_n = E[mu_n].s_n;
* shared concentration (``shared_kappa``): the leaves share one kappa, q(kappa) from their
  pooled weight and dot (:func:`._kappa.pooled_update`; the internal nodes keep theirs),
  with one KL term and counted once by the empirical Bayes of (m, s2);
* empirical Bayes (:mod:`._empirical_bayes`, the same steps as B-vMFmix): alpha by
  safeguarded Newton on the Dirichlet terms, at most n / L
  (:func:`._empirical_bayes.alpha_cap`); mu0 = psi_root (maximises
  C0 mu0.E[mu_root] on the sphere); m, s2 the Gaussian MLE from the moments of log kappa_n.
  C0 is kept fixed: maximising L in C0 gives A_d(C0) = A_d(gamma_root), and since gamma_root
  grows with C0 the iteration drives C0 to infinity (the root collapses onto the point mu0),
  so C0 is a user setting, as the paper's section 3.2 calls it.

Under the bounding scheme E[log C_d(kappa)] is :func:`_kappa.log_c_lower_bound` (eqs. (2)-(3)
made a true bound), L is a surrogate bound and no update decreases it (tested). Under the
sampling scheme the kappa moments are Monte Carlo averages and the KL term uses the
log-normal with the same moments, so L is only an estimate (the paper makes the same
remark in sec. 3.1.1).

Symbols (code name <-> paper):

====================  ======================================================================
``parents``           pa(n), shape (N,), -1 at the root
``leaves``            node index of each leaf (mixture component), shape (L,)
``psi, gamma``        q(mu_n) = vMF(psi_n, gamma_n), shapes (N, d), (N,)
``rho``               q(pi) = Dir(rho), shape (L,)
``lam``               q(z_i) = Cat(lam_i), shape (n, L)
``resp_sum``          N_l = sum_i lam_il
``resultant``         r_l = sum_i lam_il x_i, shape (L, d)
``child_sum``         s_n = sum over children c of E[mu_c], shape (N, d)
``mean_kappa``        E[kappa_n]; ``mean_log_c`` E[log C_d(kappa_n)]
``alpha, mu0, C0``    Dirichlet parameter, root prior vMF(mu0, C0)
``m, s2``             log-normal prior of every kappa_n
====================  ======================================================================

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from bayesvmf import _compile_cache, _mixture
from bayesvmf._mixture import count_trace
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _kappa
from bayesvmf.models.bayesian._shared import (
    host_mean_direction,
    initial_kappa,
    kappa_moments_at,
    mean_direction,
    predictive_log_density,
    update_kappa_priors,
    vmf_from_natural,
)
from bayesvmf.models.bayesian._tree import Tree, leaves_of, node_depths

__all__ = [
    "HState",
    "ZStats",
    "HInfo",
    "lower_bound",
    "e_step",
    "m_part",
    "vi_step",
    "m_step",
    "e_step_rows",
]

#: The static arguments of :func:`vi_step` and :func:`m_step`.
STATIC_ARGNAMES = ("scheme", "empirical_bayes", "num_samples", "num_steps", "shared_kappa")


class HState(NamedTuple):
    """Variational state of H-vMFmix.

    Attributes
    ----------
    psi : jax.Array of shape (N, d)
        Mean directions of q(mu_n).
    gamma : jax.Array of shape (N,)
        Concentrations of q(mu_n).
    emu : jax.Array of shape (N, d)
        E[mu_n] = A_d(gamma_n) psi_n, kept so each Bessel ratio is evaluated once per
        update (|E[mu_n]| = A_d(gamma_n) also gives the entropy of q(mu_n)).
    rho : jax.Array of shape (L,)
        Parameters of q(pi).
    kappa : _kappa.KappaMoments
        Moments of q(kappa_n), fields of shape (N,), and the state the next update starts
        from.
    priors : _kappa.Priors
        alpha, mu0 (d,), C0, m, s2 (0-d arrays), updated by empirical Bayes.
    """

    psi: jax.Array
    gamma: jax.Array
    emu: jax.Array
    rho: jax.Array
    kappa: Any
    priors: Any


class ZStats(NamedTuple):
    """Statistics of q(z) the other updates need.

    Attributes
    ----------
    resp_sum : jax.Array of shape (L,)
        N_l = sum_i lam_il.
    resultant : jax.Array of shape (L, d)
        r_l = sum_i lam_il x_i.
    entropy : jax.Array, shape ()
        H[q(z)] (0 for a crisp assignment).
    resp_square : jax.Array of shape (L,) or None
        sum_i lam_il^2: with N_l the effective number of rows carrying each leaf (the
        degeneracy diagnosis of :mod:`bayesvmf._guards`); not in the bound.
    """

    resp_sum: jax.Array
    resultant: jax.Array
    entropy: jax.Array
    resp_square: jax.Array | None = None


class HInfo(NamedTuple):
    """Per-iteration diagnostics: ``lower_bound`` (L above) and ``resp_sum`` N_l, (L,)."""

    lower_bound: jax.Array
    resp_sum: jax.Array


def _node_sums(tree: Tree, emu, resultant):
    """Return s_n: the sum of the children's E[mu_c] (internal) or r_l (leaf), (N, d)."""
    child_sum = jax.ops.segment_sum(
        jnp.where(tree.is_root[:, None], 0.0, emu), tree.parent, num_segments=emu.shape[0]
    )
    return child_sum.at[tree.leaves].add(resultant)


def _update_mu(tree: Tree, state: HState, resultant, mask):
    """Update q(mu_n) for the nodes in ``mask`` (one colour class): R_n of the module doc."""
    d = state.psi.shape[1]
    p, emu, mean_kappa = state.priors, state.emu, state.kappa.mean_kappa
    parent_term = jnp.where(
        tree.is_root[:, None],
        p.C0 * p.mu0[None, :],
        mean_kappa[tree.parent][:, None] * emu[tree.parent],
    )
    R = parent_term + mean_kappa[:, None] * _node_sums(tree, emu, resultant)
    psi, gamma = vmf_from_natural(R, state.psi)
    psi = jnp.where(mask[:, None], psi, state.psi)
    gamma = jnp.where(mask, gamma, state.gamma)
    emu = jnp.where(mask[:, None], mean_direction(d, psi, gamma), emu)
    return state._replace(psi=psi, gamma=gamma, emu=emu)


def _kappa_inputs(tree: Tree, emu, stats: ZStats):
    """Return weight_n and dot_n of the kappa conditional (docs/bayesian_vi.md)."""
    leaf_count = jnp.zeros(emu.shape[0]).at[tree.leaves].set(stats.resp_sum)
    weight = jnp.where(tree.is_leaf, leaf_count, tree.n_children)
    return weight, jnp.sum(emu * _node_sums(tree, emu, stats.resultant), axis=1)


def _pooled(tree: Tree, shared_kappa: bool):
    """Return the leaves (one shared kappa) with ``shared_kappa``, else None."""
    return tree.is_leaf if shared_kappa else None


def lower_bound(tree: Tree, state: HState, stats: ZStats, shared_kappa: bool = False):
    """Return the bound L of the module docstring at (``state``, q(z) with ``stats``)."""
    d = state.psi.shape[1]
    p, k = state.priors, state.kappa
    weight, dot = _kappa_inputs(tree, state.emu, stats)
    # one normaliser call for gamma_n and C0; A_d(gamma_n) = |E[mu_n]|
    log_c_gamma, log_c_c0 = _mixture.log_normalizers(d, state.gamma, p.C0)
    entropy_mu = -log_c_gamma - state.gamma * jnp.linalg.norm(state.emu, axis=1)
    return (
        log_c_c0
        + p.C0 * jnp.dot(p.mu0, state.emu[tree.root])
        + jnp.sum(weight * k.mean_log_c + k.mean_kappa * dot)
        + _eb.dirichlet_terms(state.rho, stats.resp_sum, p.alpha)
        - _kappa.kl_total(k.mean_log_kappa, k.var_log_kappa, p.m, p.s2, _pooled(tree, shared_kappa))
        + jnp.sum(entropy_mu)
        + stats.entropy
    )


def e_step(data, tree: Tree, state: HState) -> ZStats:
    """Update q(z) (log lam_il of the module docstring); return its statistics.

    ``data`` is plain data or one device's block of :class:`bayesvmf._blocks.RowBlocks`
    (inside ``shard_map``): padding rows then weigh 0 and the three sums are added over the
    devices (``psum``).
    """
    k = state.kappa
    cos = data.block.dot(state.emu[tree.leaves].T)
    log_pi = _eb.expected_log_pi(state.rho)
    wlp = log_pi + k.mean_log_c[tree.leaves] + k.mean_kappa[tree.leaves] * cos
    log_lam = wlp - logsumexp(wlp, axis=1, keepdims=True)
    lam = jnp.exp(log_lam)
    weighted = data.weigh_rows(lam)
    resultant, resp_sum = _mixture.resultants(data.block, weighted)
    entropy = -jnp.sum(jnp.where(lam > 0, weighted * log_lam, 0.0))
    square = jnp.sum(weighted * lam, axis=0)
    return ZStats(*data.sum_over_blocks(resp_sum, resultant, entropy, square))


def m_part(
    rng_key,
    tree: Tree,
    state: HState,
    stats: ZStats,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
    shared_kappa=False,
):
    """Update q(pi), q(mu) (two colour classes), q(kappa) and the priors, in that order."""
    p = state.priors
    state = state._replace(rho=p.alpha + stats.resp_sum)
    for mask in (tree.even, ~tree.even):
        state = _update_mu(tree, state, stats.resultant, mask)
    weight, dot = _kappa_inputs(tree, state.emu, stats)
    return update_kappa_priors(
        rng_key,
        state,
        weight,
        dot,
        state.emu[tree.root][None],
        scheme=scheme,
        empirical_bayes=empirical_bayes,
        num_samples=num_samples,
        num_steps=num_steps,
        pooled=_pooled(tree, shared_kappa),
        cap_alpha=True,
    )


def vi_step(rng_key, data, tree: Tree, state: HState, stats: ZStats, **static):
    """One VI iteration: q(pi), q(mu), q(kappa), priors given q(z), the bound, then q(z).

    The q(z) update closes the iteration (its statistics feed the next one), so the first
    iteration starts from the crisp initial assignment and the same programs serve every
    iteration. Returns the new state, the new q(z) statistics and the bound at (new state,
    old q(z)); the next bound, after the q(z) update and the rest, is never lower.

    Two compiled programs: :func:`m_step` (every update but q(z), and the bound) never sees
    the rows, so it is compiled once per (tree, d) and not again per number of rows (the
    special functions of q(kappa) and q(mu) are most of a step's compile time);
    :func:`e_step_rows` updates q(z), the one program per data shape. With row blocks on a
    mesh of devices (``devices=``) the q(z) update runs under ``shard_map``: every device
    updates q(z) of its rows and the statistics are added with ``psum``; :func:`m_step`
    runs on the (replicated) statistics. ``static``: the keyword arguments of :func:`m_step`.
    """
    state, info = m_step(rng_key, tree, state, stats, **static)
    return state, e_step_rows(data, tree, state), info


@functools.partial(
    _compile_cache.jit, static_argnames=STATIC_ARGNAMES, compiler_options=_mixture.JIT_OPTIONS
)
def m_step(
    rng_key,
    tree: Tree,
    state: HState,
    stats: ZStats,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
    shared_kappa=False,
):
    """Every update of :func:`vi_step` but q(z), and the bound (no row: compiled per tree, d)."""
    count_trace("hierarchical.m_step")
    state = m_part(
        rng_key,
        tree,
        state,
        stats,
        scheme=scheme,
        empirical_bayes=empirical_bayes,
        num_samples=num_samples,
        num_steps=num_steps,
        shared_kappa=shared_kappa,
    )
    return state, HInfo(lower_bound(tree, state, stats, shared_kappa), stats.resp_sum)


@functools.partial(_compile_cache.jit, compiler_options=_mixture.JIT_OPTIONS)
def e_step_rows(data, tree: Tree, state: HState) -> ZStats:
    """:func:`e_step` on plain data, or on every device's block of rows (``shard_map``)."""
    count_trace("hierarchical.e_step")
    return data.map(lambda args, block: e_step(block, *args), (tree, state))


@functools.partial(_compile_cache.jit, compiler_options=_mixture.JIT_OPTIONS)
def _leaf_log_predictive(data, psi, gamma, mean_log_kappa, var_log_kappa, log_weights):
    count_trace("hierarchical.predictive")
    return _leaf_log_predictive_rows((psi, gamma, mean_log_kappa, var_log_kappa, log_weights), data)


def _leaf_log_predictive_rows(params, data):
    """Log E[pi_l] + log p(x_i | leaf l, q) of the rows of plain data or of one block."""
    psi, gamma, mean_log_kappa, var_log_kappa, log_weights = params
    cos = data.dot(psi.T)
    return predictive_log_density(data.shape[1], cos, gamma, mean_log_kappa, var_log_kappa) + (
        log_weights
    )


@functools.partial(
    _compile_cache.jit, static_argnames="n_components", compiler_options=_mixture.JIT_OPTIONS
)
def _crisp_blocks(data, labels, n_components):
    """(N_l, r_l) of a crisp assignment of row blocks (labels laid out by ``data.row_array``)."""
    count_trace("hierarchical.crisp")

    def body(_, data, labels):
        resp = data.weigh_rows(jax.nn.one_hot(labels, n_components, dtype=jnp.float64))
        resultant, resp_sum = _mixture.resultants(data.block, resp)
        return data.sum_over_blocks(resp_sum, resultant)

    return data.map(body, jnp.zeros(()), labels)


def _crisp(data, labels, n_components) -> ZStats:
    """q(z) statistics of a crisp assignment (entropy 0); ``labels`` a host array (n,)."""
    # one program, on plain data too (its eager one-hot, products and sums were programs
    # of their own, each compiled per row count)
    resp_sum, resultant = _crisp_blocks(data, data.row_array(labels), int(n_components))
    # crisp: sum_i lam_il^2 = N_l
    return ZStats(resp_sum, resultant, jnp.float64(0.0), resp_sum)


def initial_state(tree, parents, d, stats: ZStats, mu0, est) -> HState:
    """Return the initial q(mu), q(kappa), priors of a crisp assignment (bottom-up directions)."""
    resultant = np.asarray(stats.resultant)
    resp_sum = np.asarray(stats.resp_sum)
    leaves = leaves_of(parents)
    N = parents.size
    psi = np.zeros((N, d))
    norms = np.linalg.norm(resultant, axis=1)
    psi[leaves] = np.where(norms[:, None] > 0, resultant / np.maximum(norms, 1e-300)[:, None], mu0)
    kappa = np.zeros(N)
    if est.shared_kappa:  # the classical shared estimate, A_d(kappa) = sum_l |r_l| / n
        kappa[leaves] = initial_kappa(d, norms.sum() / max(resp_sum.sum(), 1e-300))
    else:
        kappa[leaves] = initial_kappa(d, norms / np.maximum(resp_sum, 1e-300))
    depth = node_depths(parents)
    for level in range(int(depth.max()) - 1, -1, -1):
        for node in np.flatnonzero(depth == level):
            children = np.flatnonzero(parents == node)
            if children.size == 0:
                continue
            total = psi[children].sum(axis=0)
            norm = np.linalg.norm(total)
            psi[node] = total / norm if norm > 0 else mu0
            kappa[node] = initial_kappa(d, norm / children.size)
    weight = np.bincount(parents[parents >= 0], minlength=N).astype(np.float64)
    weight[leaves] = resp_sum
    # the shared leaf concentration counts once (as in the empirical Bayes of m)
    distinct = (
        np.flatnonzero(~np.isin(np.arange(N), leaves[1:])) if est.shared_kappa else slice(None)
    )
    m = float(np.mean(np.log(kappa[distinct]))) if est.m is None else float(est.m)
    priors = _kappa.Priors(
        alpha=jnp.float64(est.alpha),
        mu0=jnp.asarray(mu0, jnp.float64),
        C0=jnp.float64(est.C0),
        m=jnp.float64(m),
        s2=jnp.float64(est.s2),
    )
    # gamma is recomputed by the first q(mu) update; until then the concentration of the
    # likelihood terms of each node (kappa times its number of points or children)
    gamma = jnp.asarray(kappa * np.maximum(weight, 1.0))
    return HState(
        jnp.asarray(psi),
        gamma,
        host_mean_direction(d, psi, gamma),
        jnp.asarray(float(est.alpha) + np.asarray(resp_sum, np.float64)),
        kappa_moments_at(d, kappa, est.kappa_update),
        priors,
    )
