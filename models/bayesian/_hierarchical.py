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
* empirical Bayes (:mod:`._empirical_bayes`, the same steps as B-vMFmix): alpha by
  safeguarded Newton on the Dirichlet terms; mu0 = psi_root (maximises
  C0 mu0.E[mu_root] on the sphere); m, s2 the Gaussian MLE from the moments of log kappa_n.
  C0 is kept fixed: maximising L in C0 gives A_d(C0) = A_d(gamma_root), and since gamma_root
  grows with C0 the iteration drives C0 to infinity (the root collapses onto the point mu0),
  so C0 is a user setting, as the paper's section 3.2 calls it.

Under the bounding scheme E[log C_d(kappa)] is the Turan/delta-method bound of eqs. (2)-(3),
L is a surrogate bound and no update decreases it (tested). Under the sampling scheme the
kappa moments are Monte Carlo averages and the KL term uses the log-normal with the same
moments, so L is only an estimate (the paper makes the same remark in sec. 3.1.1).

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
import numbers
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.experimental import multihost_utils
from jax.scipy.special import logsumexp
from jax.sharding import PartitionSpec as P

from bayesvmf import _mixture, _parallel, special
from bayesvmf._mixture import count_trace
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _kappa

__all__ = [
    "check_parents",
    "balanced_tree",
    "Tree",
    "HState",
    "HierarchicalVMFMixture",
]

#: Gauss-Hermite nodes of the log-normal q(kappa) in the predictive density (see
#: :func:`predictive_log_density`). The integrand log kappa -> C_d(kappa) C_d(gamma) /
#: C_d(|kappa x + gamma psi|) is smooth; 20 nodes integrate it to ~1e-10 relative in the
#: tests' settings.
N_QUADRATURE = 20

#: Smallest concentration used when initial estimates are 0 (uniform); log kappa must exist.
KAPPA_FLOOR = 1e-2


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


def check_parents(parents) -> np.ndarray:
    """Validate a parent array and return it as a new int64 array.

    A valid array has integer dtype, one entry per node, exactly one root (entry -1), every
    other entry the index of another node, and no cycle (so every node, hence every leaf,
    is reachable from the root).

    Parameters
    ----------
    parents : array-like of int of shape (n_nodes,)
        ``parents[n]`` is the parent of node n, -1 for the root.

    Returns
    -------
    ndarray of int64 of shape (n_nodes,)

    Raises
    ------
    TypeError
        If the array is not of integer dtype.
    ValueError
        If it is not 1-D and non-empty, has no root or several, an index out of range, a
        node that is its own parent, or a cycle (the message names the nodes).

    Examples
    --------
    >>> check_parents([-1, 0, 0, 1, 1]).tolist()
    [-1, 0, 0, 1, 1]
    >>> check_parents([-1, 2, 1])
    Traceback (most recent call last):
    ...
    ValueError: parents: nodes 1 and 2 are not connected to the root (cycle 1 -> 2 -> 1).
    """
    arr = np.asarray(parents)
    if arr.dtype == object or arr.dtype.kind not in "iu":
        raise TypeError(f"parents must be an array of integers; got dtype {arr.dtype}.")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"parents must be a non-empty 1-D array; got shape {arr.shape}.")
    arr = arr.astype(np.int64)
    n = arr.size
    bad = np.flatnonzero((arr < -1) | (arr >= n))
    if bad.size:
        j = int(bad[0])
        raise ValueError(
            f"parents: node {j} has parent {int(arr[j])}, outside -1..{n - 1} (-1 marks the root)."
        )
    roots = np.flatnonzero(arr == -1)
    if roots.size != 1:
        what = "no root" if roots.size == 0 else f"{roots.size} roots (nodes {roots.tolist()})"
        raise ValueError(f"parents must have exactly one root (entry -1); got {what}.")
    selfp = np.flatnonzero(arr == np.arange(n))
    if selfp.size:
        raise ValueError(f"parents: node {int(selfp[0])} is its own parent.")
    # climb from every node at once; after n steps every node connected to the root is there
    up = arr.copy()
    reached = up == -1
    for _ in range(n):
        up = np.where(reached, -1, arr[np.where(reached, 0, up)])
        reached = reached | (up == -1)
    lost = np.flatnonzero(~reached)
    if lost.size:
        start = int(lost[0])
        seen, j = [], start
        while j not in seen:
            seen.append(j)
            j = int(arr[j])
        cycle = seen[seen.index(j) :] + [j]
        names = ", ".join(str(x) for x in lost[:-1]) + f" and {lost[-1]}" if lost.size > 1 else ""
        who = f"nodes {names}" if lost.size > 1 else f"node {start}"
        raise ValueError(
            f"parents: {who} {'are' if lost.size > 1 else 'is'} not connected to the root "
            f"(cycle {' -> '.join(str(x) for x in cycle)})."
        )
    return arr


def balanced_tree(branching) -> np.ndarray:
    """Return the parent array of a balanced tree, root first, level by level.

    Parameters
    ----------
    branching : sequence of int >= 1
        Number of children of each node at each level: ``(4, 5)`` is a root with 4
        children, each with 5 children (20 leaves).

    Returns
    -------
    ndarray of int64 of shape (n_nodes,)
        Nodes numbered breadth first; the leaves are the last ``prod(branching)`` nodes.

    Examples
    --------
    >>> balanced_tree((2, 3)).tolist()
    [-1, 0, 0, 1, 1, 1, 2, 2, 2]
    >>> int((balanced_tree((4, 5)) >= 0).sum() + 1), 4 * 5
    (25, 20)
    """
    levels = list(branching) if isinstance(branching, list | tuple | np.ndarray) else None
    if levels is None or not all(
        isinstance(b, numbers.Integral) and not isinstance(b, bool) and b >= 1 for b in levels
    ):
        raise ValueError(f"branching must be a sequence of ints >= 1; got {branching!r}.")
    parents = [-1]
    level = [0]
    for b in levels:
        nxt = []
        for p in level:
            for _ in range(int(b)):
                parents.append(p)
                nxt.append(len(parents) - 1)
        level = nxt
    return np.asarray(parents, dtype=np.int64)


class Tree(NamedTuple):
    """The tree as device arrays (built once per fit by :func:`make_tree`).

    Attributes
    ----------
    parent : jax.Array of int of shape (N,)
        pa(n); the root points to itself (its parent terms are masked by ``is_root``).
    is_root, is_leaf, even : jax.Array of bool of shape (N,)
        The root; the leaves; the nodes at even depth (the first colour class).
    n_children : jax.Array of shape (N,)
    leaves : jax.Array of int of shape (L,)
        Node index of each leaf, increasing; leaf l is mixture component l.
    root : jax.Array of int, shape ()
        Index of the root.
    """

    parent: jax.Array
    is_root: jax.Array
    is_leaf: jax.Array
    even: jax.Array
    n_children: jax.Array
    leaves: jax.Array
    root: jax.Array


def node_depths(parents: np.ndarray) -> np.ndarray:
    """Return the depth of each node of a valid parent array (root 0)."""
    depth = np.zeros(parents.size, np.int64)
    up = parents.copy()
    while np.any(up >= 0):
        depth += up >= 0
        up = np.where(up >= 0, parents[np.maximum(up, 0)], -1)
    return depth


def leaves_of(parents: np.ndarray) -> np.ndarray:
    """Return the leaves (nodes without children) of a valid parent array, increasing."""
    has_child = np.zeros(parents.size, bool)
    has_child[parents[parents >= 0]] = True
    return np.flatnonzero(~has_child)


def make_tree(parents: np.ndarray) -> Tree:
    """Build the device :class:`Tree` of a validated parent array."""
    n = parents.size
    is_root = parents < 0
    parent = np.where(is_root, np.arange(n), parents)
    n_children = np.bincount(parents[~is_root], minlength=n).astype(np.float64)
    return Tree(
        jnp.asarray(parent),
        jnp.asarray(is_root),
        jnp.asarray(n_children == 0),
        jnp.asarray(node_depths(parents) % 2 == 0),
        jnp.asarray(n_children),
        jnp.asarray(leaves_of(parents)),
        jnp.asarray(int(np.flatnonzero(is_root)[0])),
    )


def paths_to_leaves(parents: np.ndarray, labels) -> np.ndarray:
    """Return the root-to-leaf node path of each label (leaf index), padded with -1.

    Parameters
    ----------
    parents : ndarray of int of shape (N,)
        A validated parent array.
    labels : array-like of int of shape (n,)
        Leaf (component) indices in 0..L-1.

    Returns
    -------
    ndarray of int64 of shape (n, max_depth + 1)
        Row i lists the nodes from the root down to leaf ``labels[i]``; rows of shallower
        leaves end with -1.
    """
    leaves = leaves_of(parents)
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu" or labels.ndim != 1:
        raise ValueError("labels must be a 1-D array of integer leaf indices.")
    bad = np.flatnonzero((labels < 0) | (labels >= leaves.size))
    if bad.size:
        raise ValueError(
            f"labels[{int(bad[0])}] = {int(labels[bad[0]])} is not a leaf index in "
            f"0..{leaves.size - 1}."
        )
    depth = node_depths(parents)
    width = int(depth[leaves].max()) + 1
    table = np.full((leaves.size, width), -1, np.int64)
    for leaf, node in enumerate(leaves):
        path = [int(node)]
        while parents[path[-1]] >= 0:
            path.append(int(parents[path[-1]]))
        table[leaf, : len(path)] = path[::-1]
    return table[labels]


# --------------------------------------------------------------------------------------------
# Pieces shared with the temporal model
# --------------------------------------------------------------------------------------------


def mean_direction(d: int, psi, gamma):
    """Return E[mu] = A_d(gamma) psi under q(mu) = vMF(psi, gamma) (any batch shape)."""
    return special.mean_resultant_length(d, gamma)[..., None] * psi


def vmf_entropy(d: int, gamma):
    """Return H[vMF(., gamma)] = -log C_d(gamma) - gamma A_d(gamma)."""
    return -_mixture.log_normalizer(d, gamma) - gamma * special.mean_resultant_length(d, gamma)


def vmf_from_natural(R, psi_old):
    """Return (psi, gamma) = (R/|R|, |R|); keep the old direction where R = 0 (uniform q)."""
    norm = jnp.linalg.norm(R, axis=-1)
    safe = jnp.where(norm > 0, norm, 1.0)[..., None]
    return jnp.where((norm > 0)[..., None], R / safe, psi_old), norm


def quadrature_log_kappa(mean_log_kappa, var_log_kappa):
    """Return Gauss-Hermite nodes kappa_j (..., Q) and log weights (Q,) of LogNormal(a, b)."""
    t, w = np.polynomial.hermite.hermgauss(N_QUADRATURE)
    log_kappa = mean_log_kappa[..., None] + jnp.sqrt(2.0 * var_log_kappa)[..., None] * t
    return jnp.exp(log_kappa), jnp.asarray(np.log(w / np.sqrt(np.pi)))


def predictive_log_density(d: int, cos, gamma, mean_log_kappa, var_log_kappa):
    r"""Return log int int vMF(x | mu, kappa) q(mu) q(kappa) dmu dkappa per row and component.

    The integral over q(mu) = vMF(psi, gamma) is closed form (vMF conjugacy),

    .. math::

        \int \mathrm{vMF}(x \mid \mu, \kappa)\, \mathrm{vMF}(\mu \mid \psi, \gamma)\, d\mu
        = \frac{C_d(\kappa) C_d(\gamma)}{C_d(\lVert \kappa x + \gamma \psi \rVert)},
        \quad \lVert \kappa x + \gamma\psi \rVert^2 = \kappa^2 + \gamma^2
        + 2\kappa\gamma\, x^\top\psi,

    and the integral over q(kappa) = LogNormal(a, b) uses ``N_QUADRATURE`` Gauss-Hermite
    nodes in log kappa (in log space, a logsumexp).

    Parameters
    ----------
    d : int
    cos : jax.Array of shape (n, K)
        x_i . psi_k.
    gamma : jax.Array of shape (K,) or (n, K)
        Concentration of q(mu) (per row when the rows have different q, as in T-vMFmix).
    mean_log_kappa, var_log_kappa : jax.Array of shape (K,)

    Returns
    -------
    jax.Array of shape (n, K)
    """
    kappa, log_w = quadrature_log_kappa(mean_log_kappa, var_log_kappa)  # (K, Q)
    log_c_kappa = _mixture.log_normalizer(d, kappa)  # (K, Q)
    gamma = gamma[..., None]  # (K, 1) or (n, K, 1)
    sq = kappa**2 + gamma**2 + 2.0 * kappa * gamma * cos[..., None]
    norm = jnp.sqrt(jnp.maximum(sq, 0.0))
    terms = log_c_kappa + _mixture.log_normalizer(d, gamma) - _mixture.log_normalizer(d, norm)
    return logsumexp(terms + log_w, axis=-1)


# --------------------------------------------------------------------------------------------
# The variational state and the step
# --------------------------------------------------------------------------------------------


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
    """

    resp_sum: jax.Array
    resultant: jax.Array
    entropy: jax.Array


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
    """Return weight_n and dot_n of the kappa conditional (bayesian_shared.md)."""
    leaf_count = jnp.zeros(emu.shape[0]).at[tree.leaves].set(stats.resp_sum)
    weight = jnp.where(tree.is_leaf, leaf_count, tree.n_children)
    return weight, jnp.sum(emu * _node_sums(tree, emu, stats.resultant), axis=1)


def lower_bound(tree: Tree, state: HState, stats: ZStats):
    """Return the bound L of the module docstring at (``state``, q(z) with ``stats``)."""
    d = state.psi.shape[1]
    p, k = state.priors, state.kappa
    weight, dot = _kappa_inputs(tree, state.emu, stats)
    # one normaliser call for gamma_n and C0; A_d(gamma_n) = |E[mu_n]|
    log_c = _mixture.log_normalizer(d, jnp.append(state.gamma, p.C0))
    entropy_mu = -log_c[:-1] - state.gamma * jnp.linalg.norm(state.emu, axis=1)
    return (
        log_c[-1]
        + p.C0 * jnp.dot(p.mu0, state.emu[tree.root])
        + jnp.sum(weight * k.mean_log_c + k.mean_kappa * dot)
        + _eb.dirichlet_terms(state.rho, stats.resp_sum, p.alpha)
        - jnp.sum(_kappa.kl_normal(k.mean_log_kappa, k.var_log_kappa, p.m, p.s2))
        + jnp.sum(entropy_mu)
        + stats.entropy
    )


def e_step(data, tree: Tree, state: HState) -> ZStats:
    """Update q(z) (log lam_il of the module docstring); return its statistics.

    ``data`` is plain data or one device's block of :class:`bayesvmf._parallel.RowBlocks`
    (inside ``shard_map``): padding rows then weigh 0 and the three sums are added over the
    devices (``psum``).
    """
    k = state.kappa
    cos = _mixture.data_dot(_parallel.block_data(data), state.emu[tree.leaves].T)
    log_pi = _eb.expected_log_pi(state.rho)
    wlp = log_pi + k.mean_log_c[tree.leaves] + k.mean_kappa[tree.leaves] * cos
    log_lam = wlp - logsumexp(wlp, axis=1, keepdims=True)
    lam = jnp.exp(log_lam)
    weighted = lam * data.row_weight[:, None] if isinstance(data, _parallel.RowBlocks) else lam
    resultant, resp_sum = _mixture.resultants(_parallel.block_data(data), weighted)
    entropy = -jnp.sum(jnp.where(lam > 0, weighted * log_lam, 0.0))
    return ZStats(*_parallel.sum_over_blocks(data, resp_sum, resultant, entropy))


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
):
    """Update q(pi), q(mu) (two colour classes), q(kappa) and the priors, in that order."""
    d = state.psi.shape[1]
    p = state.priors
    state = state._replace(rho=p.alpha + stats.resp_sum)
    for mask in (tree.even, ~tree.even):
        state = _update_mu(tree, state, stats.resultant, mask)
    weight, dot = _kappa_inputs(tree, state.emu, stats)
    kappa, _ = _kappa.update(
        scheme,
        rng_key,
        state.kappa.state,
        weight,
        dot,
        p.m,
        p.s2,
        d=d,
        num_samples=num_samples,
        num_warmup=0,
        num_steps=num_steps,
    )
    if empirical_bayes:  # sec. 3.1.3; C0 stays the user's (module docstring)
        alpha = _eb.update_alpha(p.alpha, state.rho)
        mu0, _ = _eb.update_mu0(state.emu[tree.root][None], p.mu0)
        m, s2 = _eb.update_m_s2(kappa.mean_log_kappa, kappa.var_log_kappa)
        p = p._replace(alpha=alpha, mu0=mu0, m=m, s2=s2)
    return state._replace(kappa=kappa, priors=p)


def vi_step(
    rng_key,
    data,
    tree: Tree,
    state: HState,
    stats: ZStats,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
):
    """One VI iteration: q(pi), q(mu), q(kappa), priors given q(z), the bound, then q(z).

    The q(z) update closes the iteration (its statistics feed the next one), so the first
    iteration starts from the crisp initial assignment and one program serves every
    iteration. Returns the new state, the new q(z) statistics and the bound at (new state,
    old q(z)); the next bound, after the q(z) update and the rest, is never lower.

    With row blocks on a mesh of devices (``devices=``) the step runs under ``shard_map``:
    every device updates q(z) of its rows and the statistics are added with ``psum``; the
    rest (identical inputs) runs replicated.
    """
    count_trace("hierarchical.vi_step")
    body = functools.partial(
        _vi_step_body,
        scheme=scheme,
        empirical_bayes=empirical_bayes,
        num_samples=num_samples,
        num_steps=num_steps,
    )
    return _parallel.map_blocks(body, (rng_key, tree, state, stats), data)


def _vi_step_body(args, data, **static):
    """:func:`vi_step` on plain data or on one device's block of rows."""
    rng_key, tree, state, stats = args
    state = m_part(rng_key, tree, state, stats, **static)
    info = HInfo(lower_bound(tree, state, stats), stats.resp_sum)
    return state, e_step(data, tree, state), info


_STATIC = ("scheme", "empirical_bayes", "num_samples", "num_steps")
_vi_step = jax.jit(vi_step, static_argnames=_STATIC, compiler_options=_mixture.JIT_OPTIONS)


@functools.partial(jax.jit, compiler_options=_mixture.JIT_OPTIONS)
def _leaf_log_predictive(data, psi, gamma, mean_log_kappa, var_log_kappa, log_weights):
    count_trace("hierarchical.predictive")
    return _leaf_log_predictive_rows((psi, gamma, mean_log_kappa, var_log_kappa, log_weights), data)


def _leaf_log_predictive_rows(params, data):
    """Log E[pi_l] + log p(x_i | leaf l, q) of the rows of plain data or of one block."""
    psi, gamma, mean_log_kappa, var_log_kappa, log_weights = params
    cos = _mixture.data_dot(data, psi.T)
    return predictive_log_density(data.shape[1], cos, gamma, mean_log_kappa, var_log_kappa) + (
        log_weights
    )


# --------------------------------------------------------------------------------------------
# Rows over devices (devices=): statistics of row blocks, per-row arrays laid out alike
# --------------------------------------------------------------------------------------------


def is_sharded(data) -> bool:
    """Return whether ``data`` is row blocks on a mesh of devices (outside ``shard_map``)."""
    return (
        isinstance(data, _parallel.RowBlocks) and data.mesh is not None and data.axis_name is None
    )


def map_row_blocks(fn, replicated, data, *rows, per_row: bool = False):
    """:func:`bayesvmf._parallel.map_blocks` with per-row arrays sharded along with the rows.

    Calls ``fn(replicated, data, *rows)``: on row blocks on a mesh, once per device under
    ``shard_map`` with the view of that device's block and its slice of every array of
    ``rows`` (laid out by :func:`row_array`); otherwise directly. The outputs are the same
    on every device (statistics that ``fn`` sums with ``psum``) or, with ``per_row``, one
    leading entry per row of the block (rows in global order, padding rows included).
    """
    if not is_sharded(data):
        return fn(replicated, data, *rows)
    n_samples = data.n_samples

    def local(replicated, block, weight, *rows):
        view = _parallel.RowBlocks(block, weight, n_samples, None, _parallel.AXIS)
        return fn(replicated, view, *rows)

    return jax.shard_map(
        local,
        mesh=data.mesh,
        in_specs=(P(), P(_parallel.AXIS), P(_parallel.AXIS)) + (P(_parallel.AXIS),) * len(rows),
        out_specs=P(_parallel.AXIS) if per_row else P(),
        # the host callback of the "scipy" kernel carries no replication type
        check_vma=False,
    )(replicated, data.data, data.row_weight, *rows)


def row_array(values, data) -> jax.Array:
    """Return per-row host ``values`` (n, ...) as a device array laid out like ``data``'s rows.

    For row blocks: padded with zeros to the blocks' rows (the padding rows weigh 0) and
    sharded over their mesh like the rows; for plain data: the array as it is.
    """
    values = np.asarray(values)
    if not isinstance(data, _parallel.RowBlocks):
        return jnp.asarray(values)
    padded = np.zeros((data.row_weight.shape[0], *values.shape[1:]), values.dtype)
    padded[: values.shape[0]] = values
    return _parallel.place({"rows": padded}, data.mesh)["rows"]


def host_rows(values, data) -> np.ndarray:
    """Return per-row output of :func:`map_row_blocks` (``per_row``) as a host (n, ...) array."""
    if is_sharded(data):
        # every process gets every row (several hosts: shards of other processes too)
        values = multihost_utils.process_allgather(values, tiled=True)
    return np.asarray(values)[: data.shape[0]]


def fit_data(Xc, devices: list | None):
    """Return checked data on the device: plain, or one row block per device."""
    if devices is None:
        return _mixture.to_device(Xc)
    return _parallel.row_blocks(Xc, jnp.float64, devices=devices)


@functools.partial(jax.jit, compiler_options=_mixture.JIT_OPTIONS)
def _row_sum_blocks(data):
    """sum_i x_i of row blocks (padding rows weigh 0), added over the devices."""
    count_trace("hierarchical.row_sum")

    def body(_, data):
        total = _mixture.data_tdot(data.data, data.row_weight[:, None])[:, 0]
        return _parallel.sum_over_blocks(data, total)[0]

    return _parallel.map_blocks(body, jnp.zeros(()), data)


@functools.partial(jax.jit, static_argnames="n_components", compiler_options=_mixture.JIT_OPTIONS)
def _crisp_blocks(data, labels, n_components):
    """(N_l, r_l) of a crisp assignment of row blocks (labels laid out by row_array)."""
    count_trace("hierarchical.crisp")

    def body(_, data, labels):
        resp = jax.nn.one_hot(labels, n_components, dtype=jnp.float64) * data.row_weight[:, None]
        resultant, resp_sum = _mixture.resultants(data.data, resp)
        return _parallel.sum_over_blocks(data, resp_sum, resultant)

    return map_row_blocks(body, jnp.zeros(()), data, labels)


# --------------------------------------------------------------------------------------------
# Estimator
# --------------------------------------------------------------------------------------------


class _Parents(NamedTuple):
    """``parents``: a parent array (checked in full by :func:`check_parents`)."""

    def check(self, value) -> bool:
        """Accept any array-like; :func:`check_parents` gives the precise error."""
        return value is not None

    def describe(self) -> str:
        """Describe the constraint in words."""
        return "a parent array (see balanced_tree)"


class _OptionalInterval(NamedTuple):
    interval: _mixture.Interval

    def check(self, value) -> bool:
        return value is None or self.interval.check(value)

    def describe(self) -> str:
        return "None or " + self.interval.describe()


class _OptionalDirection(NamedTuple):
    def check(self, value) -> bool:
        if value is None:
            return True
        arr = np.asarray(value)
        return arr.ndim == 1 and arr.dtype.kind in "iuf" and np.all(np.isfinite(arr))

    def describe(self) -> str:
        return "None or a 1-D finite array of n_features values (normalised to unit norm)"


#: constructor arguments shared by the hierarchical and the temporal estimators
SHARED_CONSTRAINTS: dict[str, Any] = {
    "kappa_update": _mixture.Options(("sampling", "bounding")),
    "alpha": _mixture.Interval(float, 0.0, None, low_open=True),
    "C0": _mixture.Interval(float, 0.0, None, low_open=True),
    "m": _OptionalInterval(_mixture.Interval(float, None, None)),
    "s2": _mixture.Interval(float, 0.0, None, low_open=True),
    "empirical_bayes": _mixture.Boolean(),
    "init": _mixture.Options(("random", "spherical-kmeans++")),
    "n_init": _mixture.Interval(int, 1, None),
    "max_iter": _mixture.Interval(int, 1, None),
    "tol": _mixture.Interval(float, 0.0, None),
    "kappa_num_samples": _mixture.Interval(int, 1, None),
    "kappa_num_steps": _mixture.Interval(int, 1, None),
    "normalize": _mixture.Boolean(),
    "random_state": _mixture.RandomState(),
    "progress_bar": _mixture.Boolean(),
    "devices": _parallel.DevicesOption(),
}


def resolve_mu0(mu0, mean_direction_of_data, n_features, name="mu0"):
    """Return the unit prior direction: the data mean direction when ``mu0`` is None."""
    if mu0 is None:
        return np.asarray(mean_direction_of_data, np.float64)
    arr = np.asarray(mu0, np.float64)
    if arr.shape != (n_features,):
        raise ValueError(f"{name} must have shape ({n_features},); got {arr.shape}.")
    norm = np.linalg.norm(arr)
    if norm == 0:
        raise ValueError(f"{name} must not be the zero vector.")
    return arr / norm


def data_mean_direction(data) -> np.ndarray:
    """Return the direction of sum_i x_i (the first basis vector if it is zero)."""
    if isinstance(data, _parallel.RowBlocks):
        total = np.asarray(_row_sum_blocks(data))
    else:
        total = np.asarray(_mixture.data_tdot(data, jnp.ones((data.shape[0], 1)))[:, 0])
    norm = np.linalg.norm(total)
    if norm == 0:
        total, norm = np.eye(data.shape[1])[0], 1.0
    return total / norm


def initial_labels(rng_key, data, n_components, init):
    """Crisp initial assignment: each row to the closest seed (spherical k-means++ or random)."""
    mu = _mixture.INIT_METHODS[init](rng_key, data, n_components)
    return np.asarray(jnp.argmax(_mixture.data_dot(data, mu.T), axis=1))


def host_matrix(data):
    """Return the data as a host NumPy array or SciPy CSR matrix (initialisation).

    ``data`` is device data (:class:`~bayesvmf._mixture.DenseData` or
    :class:`~bayesvmf._mixture.SparseData` of one block) or the checked host input itself
    (an ndarray or a SciPy sparse matrix: what a fit over several devices passes).
    """
    if isinstance(data, np.ndarray):
        return data.astype(np.float64, copy=False)
    if sp.issparse(data):
        return sp.csr_matrix(data).astype(np.float64, copy=False)
    if isinstance(data, _mixture.DenseData):
        return np.asarray(data.X, np.float64)
    return _mixture.host_csr(data).astype(np.float64, copy=False)


def _dense_rows(X, j):
    row = X[j]
    return np.asarray(row.toarray()).ravel() if hasattr(row, "toarray") else np.asarray(row)


#: Lloyd iterations of spherical k-means at each node of the top-down initialisation.
INIT_LLOYD_STEPS = 10


def top_down_labels(rng_key, data, parents: np.ndarray, init: str) -> np.ndarray:
    """Return the initial leaf of each row, by top-down spherical k-means along the tree.

    The rows of each internal node (all rows at the root), taken breadth first, are split
    among its children by spherical k-means (``INIT_LLOYD_STEPS`` Lloyd steps) seeded by
    spherical k-means++ (``init="spherical-kmeans++"``) or by uniformly drawn rows
    (``"random"``). Sibling leaves then start on nearby data, which a flat seeding does not
    ensure: the variational updates cannot move a cluster across the tree afterwards.

    ``data``: device data of one block, or the checked host matrix (:func:`host_matrix`).

    Returns
    -------
    ndarray of int of shape (n_samples,)
        Leaf index (0..L-1) of each row.
    """
    X = host_matrix(data)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel()[-1])
    node_of = np.zeros(X.shape[0], np.int64)
    depth = node_depths(parents)
    for node in np.argsort(depth, kind="stable"):
        children = np.flatnonzero(parents == node)
        rows = np.flatnonzero(node_of == node)
        if children.size == 0 or rows.size == 0:
            continue
        Xr = X[rows]
        k = children.size
        seeds = [int(rng.integers(rows.size))]
        best = np.asarray(Xr @ _dense_rows(Xr, seeds[0])).ravel()
        for _ in range(1, k):
            weight = np.clip(1.0 - best, 0.0, None)
            if init == "random" or weight.sum() <= 0:
                seeds.append(int(rng.integers(rows.size)))
            else:
                seeds.append(int(rng.choice(rows.size, p=weight / weight.sum())))
            best = np.maximum(best, np.asarray(Xr @ _dense_rows(Xr, seeds[-1])).ravel())
        mu = np.stack([_dense_rows(Xr, j) for j in seeds])
        for _ in range(INIT_LLOYD_STEPS):
            assign = np.argmax(np.asarray(Xr @ mu.T), axis=1)
            total = np.asarray(Xr.T @ np.eye(k)[assign]).T
            norm = np.linalg.norm(total, axis=1, keepdims=True)
            mu = np.where(norm > 0, total / np.where(norm > 0, norm, 1.0), mu)
        node_of[rows] = children[np.argmax(np.asarray(Xr @ mu.T), axis=1)]
    leaves = leaves_of(parents)
    return np.searchsorted(leaves, node_of)


def progress(enabled, total, desc):
    """Return a tqdm bar when ``enabled``, else None (library code never prints otherwise)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False)


class HierarchicalVMFMixture(_mixture.BaseVMFMixture):
    r"""Hierarchical Bayesian vMF mixture (H-vMFmix, section 3.2 of [1]_), mean-field VI.

    The mixture components are the leaves of a fixed tree; each node's mean direction is
    drawn around its parent's (``mu_n ~ vMF(mu_pa(n), kappa_pa(n))``), so nearby leaves are
    shrunk towards each other. Updates and bound: module docstring and
    docs/bayesian_hierarchical_temporal.md.

    Parameters
    ----------
    parents : array-like of int of shape (n_nodes,)
        Parent of each node, -1 for the root (e.g. from :func:`balanced_tree`). The leaves
        (nodes without children, in increasing index order) are the mixture components.
    kappa_update : {"sampling", "bounding"}, default "sampling"
        The q(kappa) scheme of sec. 3.1.1 (:mod:`._kappa`).
    alpha : float, default 1.0
        Dirichlet parameter of pi (learnt when ``empirical_bayes``).
    mu0 : array-like of shape (n_features,) or None, default None
        Prior direction of the root; None: the direction of the data mean (learnt).
    C0 : float, default 1.0
        Prior concentration of the root around mu0 (fixed, see the module docstring).
    m : float or None, default None
        Mean of log kappa_n; None: the mean over nodes of the log of the initial kappa
        estimates (leaves: the concentration of their initial clusters; internal nodes: of
        their children's initial directions). Learnt when ``empirical_bayes``.
    s2 : float, default 1.0
        Variance of log kappa_n (learnt when ``empirical_bayes``).
    empirical_bayes : bool, default True
        Update alpha, mu0, m and s2 by maximising the bound (sec. 3.1.3).
    init : {"spherical-kmeans++", "random"}, default "spherical-kmeans++"
        Seeds of the initial crisp assignment to the leaves, made top down along the tree
        (:func:`top_down_labels`).
    n_init : int, default 1
        Restarts; the first whose final bound is within ``tol * n_samples`` of the best is
        kept (:func:`bayesvmf._mixture.best_run`).
    max_iter : int, default 100
    tol : float, default 1e-6
        Convergence when the bound changes by less than ``tol * n_samples``.
    kappa_num_samples : int, default 50
        Metropolis-Hastings draws per iteration (sampling scheme).
    kappa_num_steps : int, default 20
        Gradient steps on q(kappa) per iteration (bounding scheme).
    normalize : bool, default True
    random_state : None, int or jax key
    progress_bar : bool, default False
    devices : None, int or list of jax devices, default None
        Data-parallel VI (DESIGN.md section 6): the rows of X are split into one equal block
        per device (``jax.sharding``; padding rows weigh 0); every device computes q(z) of
        its rows and their statistics (N_l, r_l, the entropy of q(z)), which are added with
        ``psum``; the updates of q(pi), q(mu_n), q(kappa_n) and empirical Bayes run
        replicated. The result equals the one-device fit to floating-point accuracy. The
        top-down initialisation (:func:`top_down_labels`) needs all rows at once and runs
        on the host, on the checked input; the crisp statistics it starts from are computed
        on the devices. An int n means the first n of ``jax.devices()``; None is the default
        device. ``fit`` and ``fit_predict`` shard; ``predict``, ``score_samples`` etc. run
        on the default device.

    Attributes
    ----------
    weights_ : ndarray of shape (L,)
        E[pi] = rho / sum(rho).
    mean_directions_, concentrations_ : ndarray of shapes (L, d), (L,)
        Leaf posterior mean directions psi_l and E[kappa_l].
    node_mean_directions_, node_mean_concentrations_ : ndarray of shapes (N, d), (N,)
        q(mu_n) = vMF(psi_n, gamma_n) of every node.
    node_concentrations_, node_log_kappa_mean_, node_log_kappa_var_ : ndarray of shape (N,)
        E[kappa_n], E[log kappa_n], Var[log kappa_n].
    dirichlet_ : ndarray of shape (L,)
        rho.
    alpha_, mu0_, C0_, m_, s2_
        Priors after empirical Bayes.
    parents_, leaves_ : ndarray of int
        The validated tree and its leaves.
    lower_bounds_ : ndarray
        Bound after each iteration of the kept restart.

    References
    ----------
    .. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> centers = np.eye(4)[[0, 0, 1, 1]] + 0.4 * np.eye(4)[[2, 3, 2, 3]]
    >>> X = np.repeat(centers, 30, axis=0) + 0.05 * rng.normal(size=(120, 4))
    >>> model = HierarchicalVMFMixture(balanced_tree((2, 2)), kappa_update="bounding",
    ...                                tol=1e-4, random_state=0).fit(X)
    >>> paths = model.predict_path(X)  # root, depth-1 node, leaf of each row
    >>> paths.shape, len(set(paths[:60, 1])), len(set(paths[60:, 1])), len(set(paths[:, 2]))
    ((120, 3), 1, 1, 4)
    """

    _parameter_constraints: dict[str, Any] = {
        "parents": _Parents(),
        **SHARED_CONSTRAINTS,
    }

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "node_mean_directions_",
        "node_mean_concentrations_",
        "node_concentrations_",
        "node_log_kappa_mean_",
        "node_log_kappa_var_",
        "dirichlet_",
        "alpha_",
        "mu0_",
        "C0_",
        "m_",
        "s2_",
        "parents_",
        "leaves_",
        "lower_bounds_",
    )

    def __init__(
        self,
        parents,
        *,
        kappa_update: str = "sampling",
        alpha: float = 1.0,
        mu0=None,
        C0: float = 1.0,
        m: float | None = None,
        s2: float = 1.0,
        empirical_bayes: bool = True,
        init: str = "spherical-kmeans++",
        n_init: int = 1,
        max_iter: int = 100,
        tol: float = 1e-6,
        kappa_num_samples: int = 50,
        kappa_num_steps: int = 20,
        normalize: bool = True,
        random_state=None,
        progress_bar: bool = False,
        devices=None,
    ):
        self.parents = parents
        self.kappa_update = kappa_update
        self.alpha = alpha
        self.mu0 = mu0
        self.C0 = C0
        self.m = m
        self.s2 = s2
        self.empirical_bayes = empirical_bayes
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.kappa_num_samples = kappa_num_samples
        self.kappa_num_steps = kappa_num_steps
        self.normalize = normalize
        self.random_state = random_state
        self.progress_bar = progress_bar
        self.devices = devices

    def fit(self, X, y=None) -> HierarchicalVMFMixture:
        """Estimate the variational posterior (without the final prediction of fit_predict).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        self._validate_params()
        devices = _parallel.resolve_devices(self.devices)  # before the fitted model changes
        Xc = self._check_input(X, reset=True)
        with jax.enable_x64(True):
            self._fit(fit_data(Xc, devices), _mixture.make_key(self.random_state), host=Xc)
        return self

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit the model and return the most probable leaf of each row (``fit(X).predict(X)``).

        With ``devices`` the rows are sharded over the devices for the fit and this final
        assignment (see the class docstring).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        if self.devices is None:
            return super().fit_predict(X)
        self._validate_params()
        devices = _parallel.resolve_devices(self.devices)  # before the fitted model changes
        Xc = self._check_input(X, reset=True)
        with jax.enable_x64(True):
            data = fit_data(Xc, devices)
            self._fit(data, _mixture.make_key(self.random_state), host=Xc)
            rows = _parallel.map_rows(_leaf_log_predictive_rows, self._predictive_params(), data)
            return np.argmax(rows, axis=1)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Return the constructor arguments; array ``parents``/``mu0`` as lists.

        Lists keep :func:`bayesvmf.save` (which stores parameters as JSON) working for the
        arrays :func:`balanced_tree` returns; both forms mean the same model.
        """
        params = super().get_params(deep)
        for name in ("parents", "mu0"):
            if isinstance(params[name], np.ndarray | jax.Array):
                params[name] = np.asarray(params[name]).tolist()
        return params

    @property
    def n_components(self) -> int:
        """Number of leaves of ``parents`` (the mixture components)."""
        return int(leaves_of(check_parents(self.parents)).size)

    def _validate_params(self) -> None:
        super()._validate_params()
        check_parents(self.parents)
        if not _OptionalDirection().check(self.mu0):
            raise ValueError(
                f"{type(self).__name__}: parameter 'mu0' must be "
                f"{_OptionalDirection().describe()}; got {self.mu0!r}."
            )

    def _n_parameters(self) -> int:
        n_nodes, d = self.node_mean_directions_.shape
        return (self.leaves_.size - 1) + n_nodes * (d - 1) + n_nodes

    # ---- fitting ----------------------------------------------------------------------------

    def _fit(self, data, rng_key, host=None) -> None:
        """Fit to device data (plain, or row blocks over devices).

        ``host``: the checked input on the host, for the top-down initialisation (needed with
        row blocks; by default read back from plain device data).
        """
        parents = check_parents(self.parents)
        tree = make_tree(parents)
        n, d = data.shape
        L = int(tree.leaves.shape[0])
        mu0 = resolve_mu0(self.mu0, data_mean_direction(data), d)
        static = dict(
            scheme=self.kappa_update,
            empirical_bayes=bool(self.empirical_bayes),
            num_samples=int(self.kappa_num_samples),
            num_steps=int(self.kappa_num_steps),
        )
        runs = []
        for r, run_key in enumerate(jax.random.split(rng_key, self.n_init)):
            init_key, loop_key = jax.random.split(run_key)
            labels = top_down_labels(init_key, data if host is None else host, parents, self.init)
            stats = _crisp(data, labels, L)
            state = initial_state(tree, parents, d, stats, mu0, self)
            bounds, converged = [], False
            bar = progress(self.progress_bar, self.max_iter, f"H-vMFmix VI {r + 1}/{self.n_init}")
            for key in jax.random.split(loop_key, self.max_iter):
                state, stats, info = _vi_step(key, data, tree, state, stats, **static)
                bounds.append(float(info.lower_bound))
                if bar is not None:
                    bar.update()
                if len(bounds) > 1 and abs(bounds[-1] - bounds[-2]) <= self.tol * n:
                    converged = True
                    break
            if bar is not None:
                bar.close()
            runs.append((state, bounds, converged))
        # the first restart within tol of the best: restarts that reach one optimum tie to
        # rounding, which must not decide between them (one device or several)
        state, bounds, converged = runs[
            _mixture.best_run([run[1][-1] for run in runs], self.tol * n)
        ]
        if not converged:
            warn_not_converged(type(self).__name__, self.n_init, self.max_iter, bounds, n, self.tol)
        self._store(state, parents, bounds, converged)

    def _store(self, state: HState, parents, bounds, converged) -> None:
        leaves = leaves_of(parents)
        k = state.kappa
        rho = np.asarray(state.rho)
        self.parents_ = parents
        self.leaves_ = leaves
        self.node_mean_directions_ = np.asarray(state.psi)
        self.node_mean_concentrations_ = np.asarray(state.gamma)
        self.node_concentrations_ = np.asarray(k.mean_kappa)
        self.node_log_kappa_mean_ = np.asarray(k.mean_log_kappa)
        self.node_log_kappa_var_ = np.asarray(k.var_log_kappa)
        self.dirichlet_ = rho
        self.weights_ = rho / rho.sum()
        self.mean_directions_ = self.node_mean_directions_[leaves]
        self.concentrations_ = self.node_concentrations_[leaves]
        p = state.priors
        self.alpha_ = float(p.alpha)
        self.mu0_ = np.asarray(p.mu0)
        self.C0_ = float(p.C0)
        self.m_ = float(p.m)
        self.s2_ = float(p.s2)
        self.lower_bounds_ = np.asarray(bounds)
        self.lower_bound_ = float(bounds[-1])
        self.n_iter_ = len(bounds)
        self.converged_ = bool(converged)

    # ---- prediction -------------------------------------------------------------------------

    def _predictive_params(self) -> tuple:
        """Return the leaves' q(mu), q(kappa) and log E[pi] as float64 arrays (inside x64)."""
        leaves = self.leaves_
        return (
            jnp.asarray(self.mean_directions_, jnp.float64),
            jnp.asarray(self.node_mean_concentrations_[leaves], jnp.float64),
            jnp.asarray(self.node_log_kappa_mean_[leaves], jnp.float64),
            jnp.asarray(self.node_log_kappa_var_[leaves], jnp.float64),
            jnp.log(jnp.asarray(self.weights_, jnp.float64)),
        )

    def _estimate_weighted_log_prob(self, data) -> jax.Array:
        """Return log E[pi_l] + log p(x_i | leaf l, q) (closed form, see score_samples)."""
        with jax.enable_x64(True):
            return _leaf_log_predictive(data, *self._predictive_params())

    def score_samples(self, X) -> np.ndarray:
        r"""Return the held-out log posterior predictive density of each row.

        .. math::

            \log p(x \mid X_{\text{train}}) \approx \log \sum_l E_q[\pi_l]
            \int\!\!\int \mathrm{vMF}(x \mid \mu_l, \kappa_l)\, q(\mu_l)\, q(\kappa_l)\,
            d\mu_l\, d\kappa_l,

        the integral over q(mu_l) = vMF(psi_l, gamma_l) in closed form,
        C_d(kappa) C_d(gamma_l) / C_d(|kappa x + gamma_l psi_l|), and the one over
        q(kappa_l) by 20-node Gauss-Hermite quadrature in log kappa under the log-normal
        with E[log kappa_l] and Var[log kappa_l] (exactly q under the bounding scheme; the
        moment-matched log-normal of the Metropolis draws under the sampling scheme).
        E_q[pi_l] = rho_l / sum(rho) is the exact predictive of z under q(pi).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return super().score_samples(X)

    def node_paths(self, labels) -> np.ndarray:
        """Return the root-to-leaf path of nodes for each leaf label.

        Parameters
        ----------
        labels : array-like of int of shape (n,)
            Leaf (component) indices, e.g. from :meth:`predict`.

        Returns
        -------
        ndarray of int of shape (n, max_depth + 1)
            Node indices from the root to the leaf; shallower leaves are padded with -1.
        """
        self._check_is_fitted()
        return paths_to_leaves(self.parents_, labels)

    def predict_path(self, X) -> np.ndarray:
        """Return the root-to-leaf node path of the most probable leaf of each row.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of int of shape (n_samples, max_depth + 1)
        """
        return self.node_paths(self.predict(X))

    def to_arviz(self, num_draws: int = 200, random_state=None):
        """Return draws from q as an ``arviz.InferenceData`` (one chain of ``num_draws``).

        ``posterior`` holds ``mu`` (dims node, feature), ``kappa`` (node) and ``weights``
        (component = leaf index); ``constant_data`` holds ``parents`` (node) and
        ``leaf_node`` (component). mu_n ~ vMF(psi_n, gamma_n), log kappa_n ~ N(E[log kappa_n],
        Var[log kappa_n]) (moment-matched for the sampling scheme), pi ~ Dir(rho).
        """
        self._check_is_fitted()
        import arviz as az

        draws = draw_from_q(
            self.node_mean_directions_,
            self.node_mean_concentrations_,
            self.node_log_kappa_mean_,
            self.node_log_kappa_var_,
            self.dirichlet_,
            num_draws,
            random_state,
        )
        n_nodes, d = self.node_mean_directions_.shape
        return az.from_dict(
            posterior={k: v[None] for k, v in draws.items()},
            constant_data={"parents": self.parents_, "leaf_node": self.leaves_},
            coords={
                "node": np.arange(n_nodes),
                "feature": np.arange(d),
                "component": np.arange(self.leaves_.size),
            },
            dims={
                "mu": ["node", "feature"],
                "kappa": ["node"],
                "weights": ["component"],
                "parents": ["node"],
                "leaf_node": ["component"],
            },
        )


def _crisp(data, labels, n_components) -> ZStats:
    """q(z) statistics of a crisp assignment (entropy 0); ``labels`` a host array (n,)."""
    if isinstance(data, _parallel.RowBlocks):
        resp_sum, resultant = _crisp_blocks(data, row_array(labels, data), int(n_components))
        return ZStats(resp_sum, resultant, jnp.float64(0.0))
    resp = jax.nn.one_hot(jnp.asarray(labels), n_components, dtype=jnp.float64)
    resultant, resp_sum = _mixture.resultants(data, resp)
    return ZStats(resp_sum, resultant, jnp.float64(0.0))


def initial_kappa(d, rbar):
    """Concentration estimates A_d^{-1}(rbar) (full-precision solve), floored at KAPPA_FLOOR."""
    kappa = special.kappa_from_rbar(d, jnp.clip(jnp.asarray(rbar, jnp.float64), 0.0, 1 - 1e-12))
    return np.maximum(np.asarray(kappa), KAPPA_FLOOR)


def kappa_moments_at(d, kappa, scheme) -> Any:
    """KappaMoments of a point value of kappa (the start of the first kappa update)."""
    kappa = jnp.asarray(kappa, jnp.float64)
    return _kappa.KappaMoments(
        mean_kappa=kappa,
        mean_log_c=_mixture.log_normalizer(int(d), kappa),
        mean_log_kappa=jnp.log(kappa),
        var_log_kappa=jnp.full_like(kappa, 0.01),
        state=_kappa.initial_kappa_state(kappa, scheme),
    )


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
    m = float(np.mean(np.log(kappa))) if est.m is None else float(est.m)
    priors = _kappa.Priors(
        alpha=jnp.float64(est.alpha),
        mu0=jnp.asarray(mu0, jnp.float64),
        C0=jnp.float64(est.C0),
        m=jnp.float64(m),
        s2=jnp.float64(est.s2),
    )
    L = leaves.size
    # gamma is recomputed by the first q(mu) update; until then the concentration of the
    # likelihood terms of each node (kappa times its number of points or children)
    gamma = jnp.asarray(kappa * np.maximum(weight, 1.0))
    return HState(
        jnp.asarray(psi),
        gamma,
        mean_direction(d, jnp.asarray(psi), gamma),
        jnp.full((L,), float(est.alpha)) + jnp.asarray(resp_sum),
        kappa_moments_at(d, kappa, est.kappa_update),
        priors,
    )


def warn_not_converged(name, n_init, max_iter, bounds, n, tol, stacklevel=5):
    """Warn (ConvergenceWarning) that the kept restart did not converge."""
    change = abs(bounds[-1] - bounds[-2]) / n if len(bounds) > 1 else np.inf
    warnings.warn(
        f"{name}: the best of {n_init} restarts did not converge in max_iter={max_iter} "
        f"iterations (last bound change {change:.3g} per row > tol={tol}); increase "
        "max_iter or tol (with kappa_update='sampling' the bound is a noisy Monte Carlo "
        "estimate: use a looser tol or more kappa_num_samples).",
        ConvergenceWarning,
        stacklevel=stacklevel,
    )


def draw_from_q(psi, gamma, mean_log_kappa, var_log_kappa, rho, num_draws, random_state):
    """Draw mu ~ vMF(psi, gamma), kappa ~ LogNormal, weights ~ Dir(rho) (host arrays).

    The vMF batch is flattened and padded to a power of two (at least 16), so models of
    similar size share one compilation of the rejection sampler.
    """
    from bayesvmf.distribution import VonMisesFisher

    if not _mixture.Interval(int, 1, None).check(num_draws):
        raise ValueError(f"num_draws must be an int >= 1; got {num_draws!r}.")
    psi = np.asarray(psi, np.float64)
    batch, d = psi.shape[:-1], psi.shape[-1]
    flat_psi, flat_gamma = psi.reshape(-1, d), np.asarray(gamma, np.float64).ravel()
    size = max(16, 1 << int(np.ceil(np.log2(flat_psi.shape[0]))))
    pad = size - flat_psi.shape[0]
    flat_psi = np.concatenate([flat_psi, np.tile(flat_psi[:1], (pad, 1))])
    flat_gamma = np.concatenate([flat_gamma, np.tile(flat_gamma[:1], pad)])
    with jax.enable_x64(True):
        k_mu, k_kappa, k_pi = jax.random.split(_mixture.make_key(random_state), 3)
        mu = VonMisesFisher(jnp.asarray(flat_psi), jnp.asarray(flat_gamma)).sample(
            k_mu, (num_draws,)
        )
        mu = np.asarray(mu)[:, : size - pad].reshape(num_draws, *batch, d)
        log_kappa = jnp.asarray(mean_log_kappa) + jnp.sqrt(
            jnp.asarray(var_log_kappa)
        ) * jax.random.normal(k_kappa, (num_draws, *np.shape(mean_log_kappa)))
        weights = jax.random.dirichlet(k_pi, jnp.asarray(rho), (num_draws,))
        return {
            "mu": mu,
            "kappa": np.asarray(jnp.exp(log_kappa)),
            "weights": np.asarray(weights),
        }
