"""The tree of H-vMFmix (sec. 3.2 of Gopal & Yang [1]_): parent arrays and their top-down seeding.

A tree is given by its parent array (``parents[n]`` the parent of node n, -1 at the root);
the leaves (nodes without children, in increasing index order) are the mixture components.
This module validates parent arrays (:func:`check_parents`), builds them
(:func:`balanced_tree`), lays them out for the jitted updates (:func:`make_tree`), lists
root-to-leaf paths (:func:`paths_to_leaves`) and seeds the initial assignment top down along
the tree (:func:`top_down_labels`).

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf import _parallel, _seeding
from bayesvmf._compile_cache import JIT_OPTIONS, count_trace
from bayesvmf._program_cache import persistent_jit

__all__ = [
    "check_parents",
    "balanced_tree",
    "Tree",
    "node_depths",
    "leaves_of",
    "make_tree",
    "paths_to_leaves",
    "top_down_labels",
]


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


#: Hard spherical k-means passes at each node of the top-down initialisation, at most (they
#: stop earlier once a pass gains less than :data:`bayesvmf._parallel.HARD_RTOL`).
INIT_LLOYD_STEPS = 10


def top_down_labels(rng_key, data, parents: np.ndarray, init: str) -> np.ndarray:
    """Return the initial leaf of each row, by top-down spherical k-means along the tree.

    The start of H-vMFmix's variational inference (sec. 3.2 of Gopal & Yang [1]_, whose
    updates cannot move a cluster across the tree afterwards): the rows of each internal
    node (all rows at the root), taken breadth first, are split among its children, so that
    sibling leaves start on nearby data, which a flat seeding does not ensure. Each split is
    the shared spherical k-means of the other mixtures, restricted to the node's rows: seeds
    by :func:`bayesvmf._seeding.kmeanspp_pick` (``init="spherical-kmeans++"``; the first
    seed a uniform row of the node) or distinct uniform rows of the node (``"random"``),
    refined by at most :data:`INIT_LLOYD_STEPS` passes of
    :func:`bayesvmf._parallel.spherical_kmeans` over the node's rows; each row of the node
    then goes to the child of its closest direction.

    One compiled program per number of children serves every node: it sees all rows, those
    outside the node masked (best cosine 1 for the seeding, so that they are never drawn and
    add nothing to its potential; weight 0 in the hard passes).

    Parameters
    ----------
    rng_key : jax.Array
        Key of the initialisation; node n uses ``fold_in(rng_key, n)``.
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
        The rows (row blocks over devices give the labels of one device).
    parents : ndarray of int of shape (N,)
        A validated parent array.
    init : {"spherical-kmeans++", "random"}

    Returns
    -------
    ndarray of int of shape (n_samples,)
        Leaf index (0..L-1) of each row.
    """
    with jax.enable_x64(True):
        max_passes = jnp.asarray(INIT_LLOYD_STEPS, jnp.int64)
        # every row starts at the root, wherever it is numbered (np.zeros put them at node 0:
        # a tree with the root elsewhere split node 0's children instead and left a leaf
        # empty, at a bound 55 nats per row lower; a helper's audit)
        node_of = np.full(data.shape[0], int(np.flatnonzero(parents == -1)[0]), np.int64)
        for node in np.argsort(node_depths(parents), kind="stable"):
            children = np.flatnonzero(parents == node)
            in_node = node_of == node
            if children.size == 0 or not in_node.any():
                continue
            child = _split_node(
                rng_key,
                np.int64(node),
                data,
                jnp.asarray(in_node),
                data.row_array(in_node.astype(np.float64)),
                max_passes,
                n_children=int(children.size),
                init=init,
            )
            node_of[in_node] = children[np.asarray(child)[in_node]]
    return np.searchsorted(leaves_of(parents), node_of)


@persistent_jit(static_argnames=("n_children", "init"), compiler_options=JIT_OPTIONS)
def _split_node(rng_key, node, data, in_node, row_weight, max_passes, n_children: int, init: str):
    """Closest of ``n_children`` directions of each row, from the rows ``in_node`` (n,) only.

    The node's key is ``fold_in(rng_key, node)``, derived here rather than by an eager
    operation (a program of its own in every new process). ``row_weight``: ``in_node`` as
    float laid out like the rows (``data.row_array``). On row blocks each device refines
    over its own rows (sums added over devices) and every device returns the labels of all
    rows.
    """
    count_trace("hierarchical.top_down")
    key = jax.random.fold_in(rng_key, node)

    def body(args, data, row_weight):
        key, in_node, max_passes = args
        mu = _node_seeds(key, data, in_node, n_children, init)
        mu = _parallel.spherical_kmeans(data, mu, max_passes, row_weight)
        return jnp.argmax(data.dot(mu.T), axis=1)

    return data.map(body, (key, in_node, max_passes), row_weight)


def _node_seeds(key, data, in_node, n_children: int, init: str) -> jax.Array:
    """Seeds (n_children, d) drawn from the rows ``in_node`` (a bool mask of all n rows)."""
    n_rows = in_node.shape[0]
    if init == "random":
        # distinct rows when the node has enough (otherwise the extra draws repeat the first)
        idx = jax.random.choice(
            key, n_rows, (n_children,), replace=False, p=in_node / jnp.sum(in_node)
        )
        return data.take_rows(jnp.where(in_node[idx], idx, idx[0]))
    keys = jax.random.split(key, n_children)
    # rows outside the node weigh 0: never drawn, no part of the potential; before the first
    # seed every row is at dissimilarity 1, so the first draw is a uniform row of the node,
    # as is a draw once every row of the node is a seed (repeated rows)
    weights = in_node.astype(jnp.float64)

    def pick(k, carry):
        mu, best = carry
        row, best = _seeding.kmeanspp_pick(
            keys[k], best, 1, data.take_rows, lambda r: data.dot(r.T), weights
        )
        return mu.at[k].set(row), best

    mu = jnp.zeros((n_children, data.shape[1]), jnp.float64)
    return jax.lax.fori_loop(0, n_children, pick, (mu, jnp.zeros(n_rows)))[0]
