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
import scipy.sparse as sp

from bayesvmf import _data

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


def host_matrix(data):
    """Return the data as a host NumPy array or SciPy CSR matrix (initialisation).

    ``data`` is device data (:class:`~bayesvmf._data.DenseData` or
    :class:`~bayesvmf._data.SparseData` of one block) or the checked host input itself
    (an ndarray or a SciPy sparse matrix: what a fit over several devices passes).
    """
    if isinstance(data, np.ndarray):
        return data.astype(np.float64, copy=False)
    if sp.issparse(data):
        return sp.csr_matrix(data).astype(np.float64, copy=False)
    if isinstance(data, _data.DenseData):
        return np.asarray(data.X, np.float64)
    return _data.host_csr(data).astype(np.float64, copy=False)


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
