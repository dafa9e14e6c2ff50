r"""The corpus layer of VMFMix [1]_: documents stored flat with offsets, padded and sharded.

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from bayesvmf import _blocks
from bayesvmf._blocks import bucket_size
from bayesvmf.data import check_directional


class Corpus(NamedTuple):
    """A set of documents stored flat (no padding).

    Attributes
    ----------
    X : array of shape (N, d)
        All vectors of all documents, document after document, unit rows.
    weights : array of shape (N,)
        Count w_ij of each vector (ones when not given).
    doc : array of shape (N,), int32
        Document index of each row, sorted (row n belongs to document ``doc[n]``).
    doc_weight : array of shape (M,)
        Total weight n_i = sum_j w_ij of each document.
    """

    X: Any
    weights: Any
    doc: Any
    doc_weight: Any


def _check_documents(docs, weights, *, normalize: bool, n_features: int | None):
    """Validate documents and weights; return host arrays (X, w, offsets). Never modifies input."""
    if isinstance(docs, np.ndarray) and docs.ndim != 1:
        raise ValueError(
            "docs must be a list of (n_i, d) arrays, one per document, "
            f"not one array of shape {docs.shape}"
        )
    try:
        n_docs = len(docs)
    except TypeError as err:
        raise ValueError(
            f"docs must be a list of (n_i, d) arrays, got {type(docs).__name__}"
        ) from err
    if n_docs == 0:
        raise ValueError("docs is empty: need at least one document")
    checked = []
    where = "the fitted dimension" if n_features is not None else "the dimension of docs[0]"
    for i, doc in enumerate(docs):
        arr = check_directional(doc, normalize=normalize, name=f"docs[{i}]")
        if n_features is None:
            n_features = arr.shape[1]
        elif arr.shape[1] != n_features:
            raise ValueError(
                f"docs[{i}] has {arr.shape[1]} features, expected {n_features} ({where})"
            )
        checked.append(arr)
    lengths = np.array([a.shape[0] for a in checked], dtype=np.int64)
    if weights is None:
        w = np.ones(int(lengths.sum()), dtype=np.float64)
    else:
        try:
            n_weights = len(weights)
        except TypeError as err:
            raise ValueError(
                f"weights must be a list of 1-D arrays, one per document, got "
                f"{type(weights).__name__}"
            ) from err
        if n_weights != n_docs:
            raise ValueError(
                f"weights has {n_weights} entries but docs has {n_docs} documents "
                "(one weight array per document)"
            )
        parts = []
        for i, (wi, n_i) in enumerate(zip(weights, lengths, strict=True)):
            arr = np.array(wi, dtype=np.float64, copy=True)
            if arr.shape != (n_i,):
                raise ValueError(
                    f"weights[{i}] has shape {arr.shape}, expected ({n_i},) to match docs[{i}]"
                )
            if not np.isfinite(arr).all():
                raise ValueError(f"weights[{i}] has a NaN or infinite value")
            if (arr < 0).any():
                j = int(np.flatnonzero(arr < 0)[0])
                raise ValueError(f"weights[{i}] has a negative value at position {j}")
            parts.append(arr)
        w = np.concatenate(parts)
        if not w.sum() > 0:
            raise ValueError("weights are all zero: at least one vector needs a positive weight")
    X = np.concatenate(checked, axis=0)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return X, w, offsets


def prepare_corpus(X, w, offsets, dtype=jnp.float64) -> Corpus:
    """Build a device :class:`Corpus` from host arrays and document offsets.

    ``dtype`` is the storage dtype of the vectors X, hence of the two data products
    (float32 for ``dtype="mixed"`` of the estimator); weights stay float64.
    """
    lengths = np.diff(offsets)
    doc = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    doc_weight = np.bincount(doc, weights=w, minlength=len(lengths))
    return Corpus(
        jnp.asarray(X, dtype),
        jnp.asarray(w, jnp.float64),
        jnp.asarray(doc),
        jnp.asarray(doc_weight, jnp.float64),
    )


def _data_dot(X, M):
    """X @ M.T in the storage dtype of X (float32 in mixed mode), returned in M's dtype."""
    return (X @ M.astype(X.dtype).T).astype(M.dtype)


def _data_tdot(R, X):
    """R.T @ X in the storage dtype of X (float32 in mixed mode), returned in R's dtype."""
    return (R.astype(X.dtype).T @ X).astype(R.dtype)


def padded_corpus(X, w, offsets, dtype=jnp.float64) -> tuple[Corpus, int]:
    """Build a device :class:`Corpus` padded to bucket sizes (a streaming chunk).

    The N rows and M documents are rounded up to :func:`bayesvmf._blocks.bucket_size`
    (at most 41% padding), so chunks of similar size share one compiled SVI step. Padding
    rows are zero vectors of weight 0 appended to the last document, padding documents are
    empty: neither changes a statistic nor a real document's bound (weight-0 rows enter every
    sum multiplied by their weight; an empty document keeps phi_i = alpha and its own bound
    is masked by the caller).

    Returns
    -------
    corpus : Corpus
    n_docs : int
        The number of real documents M (the first M of the padded table).
    """
    n_rows, d = X.shape
    n_docs = len(offsets) - 1
    rows, docs = bucket_size(n_rows), bucket_size(n_docs)
    X_pad = np.zeros((rows, d))
    X_pad[:n_rows] = X
    w_pad = np.zeros(rows)
    w_pad[:n_rows] = w
    # the last real document runs to the end of the padding rows; padding documents are empty
    offsets_pad = np.concatenate([offsets[:-1], np.full(docs - n_docs + 1, rows)])
    return prepare_corpus(X_pad, w_pad, offsets_pad, dtype), n_docs


class ShardedCorpus(NamedTuple):
    """Documents split over devices (:func:`shard_documents`).

    Attributes
    ----------
    corpus : Corpus
        Its four arrays sharded along their first axis: device g holds rows
        [g R, (g + 1) R) and documents [g D, (g + 1) D), document ids local to the device.
    mesh : jax.sharding.Mesh
    row_id : jax.Array of int32, shape (G R,)
        Global number of each row among the real vectors (0 for padding rows).
    n_real : int
        Number of real vectors.
    doc_index : ndarray of int, shape (M,)
        Position of each real document (in the caller's order) in the padded document axis.
    doc_counts : jax.Array of int32, shape (G,)
        Real documents of each device (the first of its D), sharded: one per device.
    """

    corpus: Corpus
    mesh: Any
    row_id: Any
    n_real: int
    doc_index: np.ndarray
    doc_counts: Any


def shard_documents(
    X, w, offsets, devices, dtype=jnp.float64, bucket: bool = False
) -> ShardedCorpus:
    """Split checked documents over ``devices``: whole documents, about equal vector counts.

    Device g gets consecutive documents whose first vector falls in the g-th equal share of
    the N vectors. Every device's part is padded to the same R rows and D documents: padding
    rows are zero vectors of weight 0 appended to the device's last document (document
    ids stay sorted), padding documents are empty (weight 0: they add nothing to a
    statistic or to the bound, see :func:`vem_step`).

    Parameters
    ----------
    X, w, offsets : host arrays
        The output of ``_check_documents``.
    devices : list of jax devices
    dtype : dtype of the stored vectors
    bucket : bool, default False
        Round R and D up to :func:`bayesvmf._blocks.bucket_size` (streaming chunks), so
        that chunks of similar size share compiled programs.

    Returns
    -------
    ShardedCorpus
    """
    n_rows, d = X.shape
    n_docs = len(offsets) - 1
    n_dev = len(devices)
    starts = np.asarray(offsets[:-1])
    # first document of each device: the first whose start reaches the device's share
    bounds = np.searchsorted(starts, np.arange(n_dev) * n_rows / n_dev, side="left")
    bounds = np.append(np.minimum(bounds, n_docs), n_docs)
    bounds = np.maximum.accumulate(bounds)
    parts_rows = [offsets[bounds[g + 1]] - offsets[bounds[g]] for g in range(n_dev)]
    rows = max(max(parts_rows), 1)
    docs = max(max(np.diff(bounds)), 1)
    if bucket:
        rows, docs = bucket_size(rows), bucket_size(docs)
    np_dtype = np.dtype(jnp.dtype(dtype).name)
    X_pad = np.zeros((n_dev * rows, d), np_dtype)
    w_pad = np.zeros(n_dev * rows)
    doc_pad = np.zeros(n_dev * rows, np.int32)
    row_id = np.zeros(n_dev * rows, np.int32)
    doc_weight = np.zeros(n_dev * docs)
    doc_index = np.empty(n_docs, np.int64)
    for g in range(n_dev):
        first, last = bounds[g], bounds[g + 1]
        r0, r1 = offsets[first], offsets[last]
        base = g * rows
        X_pad[base : base + r1 - r0] = X[r0:r1]
        w_pad[base : base + r1 - r0] = w[r0:r1]
        row_id[base : base + r1 - r0] = np.arange(r0, r1)
        lengths = np.diff(offsets[first : last + 1])
        local = np.repeat(np.arange(last - first, dtype=np.int32), lengths)
        doc_pad[base : base + r1 - r0] = local
        # padding rows join the device's last document (weight 0), keeping ids sorted
        doc_pad[base + r1 - r0 : base + rows] = max(last - first - 1, 0)
        if last > first:  # every document has at least one vector
            doc_weight[g * docs : g * docs + last - first] = np.add.reduceat(
                w[r0:r1], offsets[first:last] - r0
            )
        doc_index[first:last] = g * docs + np.arange(last - first)
    mesh = _blocks.make_mesh(devices)
    arrays = {"X": X_pad, "w": w_pad, "doc": doc_pad, "doc_weight": doc_weight}
    arrays["row_id"], arrays["doc_counts"] = row_id, np.diff(bounds).astype(np.int32)
    placed = _blocks.place(arrays, mesh)
    corpus = Corpus(placed["X"], placed["w"], placed["doc"], placed["doc_weight"])
    return ShardedCorpus(
        corpus, mesh, placed["row_id"], int(n_rows), doc_index, placed["doc_counts"]
    )
