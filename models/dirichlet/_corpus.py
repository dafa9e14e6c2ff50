r"""The corpus of VMFMix [1]_: vectors in the data layer, the documents' structure beside them.

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from bayesvmf import _blocks
from bayesvmf._blocks import bucket_size
from bayesvmf.data import check_directional


class Corpus(NamedTuple):
    """A set of documents: their vectors in the data layer, their structure here.

    The vectors are data of :func:`bayesvmf._blocks.device_data` (plain data on one device,
    one block padded to bucket sizes, or one block of whole documents per device); the
    document structure laid out like them is the model's.

    Attributes
    ----------
    data : DenseData or RowBlocks
        All vectors of all documents, document after document, unit rows, in the storage
        dtype of the two data products; padded (zero rows) and split over devices when
        built by :func:`padded_corpus` or :func:`shard_documents`.
    weights : array of shape (N,)
        Count w_ij of each row (ones when not given; 0 for a padding row), laid out like
        the rows.
    doc : array of shape (N,), int32
        Document index of each row (local to its block), sorted within a block (row n
        belongs to document ``doc[n]``; padding rows to their block's last document).
    doc_weight : array of shape (M,)
        Total weight n_i = sum_j w_ij of each document (0 for a padding document), laid out
        in blocks like the rows.
    """

    data: Any
    weights: Any
    doc: Any
    doc_weight: Any

    @property
    def X(self):
        """The stored rows, padding included (of this device's block inside ``map``)."""
        return self.data.block.X


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
        if sp.issparse(doc):  # (the tags say so; a sparse document failed in NumPy's concatenate)
            raise TypeError(
                f"docs[{i}] is a sparse matrix: documents are sets of dense vectors "
                f"(word vectors, embeddings); pass docs[{i}].toarray()"
            )
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
    """Build a device :class:`Corpus` from host arrays and document offsets (one device).

    ``dtype`` is the storage dtype of the vectors X, hence of the two data products
    (float32 for ``dtype="mixed"`` of the estimator); weights stay float64.
    """
    lengths = np.diff(offsets)
    doc = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    doc_weight = np.bincount(doc, weights=w, minlength=len(lengths))
    return Corpus(
        _blocks.device_data(X, dtype),
        jnp.asarray(w, jnp.float64),
        jnp.asarray(doc),
        jnp.asarray(doc_weight, jnp.float64),
    )


def padded_corpus(X, w, offsets, dtype=jnp.float64) -> tuple[Corpus, int]:
    """Build a device :class:`Corpus` padded to bucket sizes (a streaming chunk).

    The N rows (one block of :func:`bayesvmf._blocks.device_data` with ``bucket``) and the
    M documents are rounded up to :func:`bayesvmf._blocks.bucket_size` (at most 41%
    padding), so chunks of similar size share one compiled SVI step. Padding rows are zero
    vectors of weight 0 appended to the last document, padding documents are empty: neither
    changes a statistic nor a real document's bound (weight-0 rows enter every sum
    multiplied by their weight; an empty document keeps phi_i = alpha and its own bound is
    masked by the caller).

    Returns
    -------
    corpus : Corpus
    n_docs : int
        The number of real documents M (the first M of the padded table).
    """
    n_docs = len(offsets) - 1
    data = _blocks.device_data(X, dtype, bucket=True)
    doc = np.repeat(np.arange(n_docs, dtype=np.int32), np.diff(offsets))
    doc_weight = np.bincount(doc, weights=w, minlength=n_docs)
    corpus = Corpus(
        # rows counted by their weights: chunks of one bucket share one compiled step
        data.counted_by_weight(),
        data.row_array(np.asarray(w, np.float64)),
        data.row_array(doc, edge=True),  # padding rows join the last document
        data.block_array(doc_weight, (0,), bucket_size(n_docs)),
    )
    return corpus, n_docs


class ShardedCorpus(NamedTuple):
    """Documents split over devices (:func:`shard_documents`).

    Attributes
    ----------
    corpus : Corpus
        Its vectors are row blocks on a mesh (:class:`bayesvmf._blocks.RowBlocks`): device
        g holds the rows of documents [g D, (g + 1) D) of the padded document axis, with
        document ids local to the device; its weights, ids and documents are laid out alike.
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
    row_id: Any
    n_real: int
    doc_index: np.ndarray
    doc_counts: Any


def shard_documents(
    X, w, offsets, devices, dtype=jnp.float64, bucket: bool = False
) -> ShardedCorpus:
    """Split checked documents over ``devices``: whole documents, about equal vector counts.

    Device g gets consecutive documents whose first vector falls in the g-th equal share of
    the N vectors: the data layer cuts the rows there (``block_starts`` of
    :func:`bayesvmf._blocks.device_data`) and pads every device's part to the same R rows;
    the documents are padded here to the same D per device. Padding rows are zero vectors
    of weight 0 appended to the device's last document (document ids stay sorted), padding
    documents are empty (weight 0: they add nothing to a statistic or to the bound, see
    :func:`vem_step`).

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
    n_rows = X.shape[0]
    n_docs = len(offsets) - 1
    n_dev = len(devices)
    starts = np.asarray(offsets[:-1])
    # first document of each device: the first whose start reaches the device's share
    bounds = np.searchsorted(starts, np.arange(n_dev) * n_rows / n_dev, side="left")
    bounds = np.append(np.minimum(bounds, n_docs), n_docs)
    bounds = np.maximum.accumulate(bounds)
    data = _blocks.device_data(
        X, dtype, devices=devices, bucket=bucket, block_starts=offsets[bounds[:-1]]
    )
    docs = max(max(np.diff(bounds)), 1)
    if bucket:
        docs = bucket_size(docs)
    lengths = np.diff(offsets)
    # document ids local to their device
    device_of_doc = np.searchsorted(bounds[1:], np.arange(n_docs), side="right")
    local = (np.arange(n_docs) - bounds[device_of_doc]).astype(np.int32)
    doc_weight = np.zeros(n_docs)
    for g in range(n_dev):
        first, last = bounds[g], bounds[g + 1]
        if last > first:  # every document has at least one vector; reduceat per device
            r0 = offsets[first]
            doc_weight[first:last] = np.add.reduceat(
                w[r0 : offsets[last]], offsets[first:last] - r0
            )
    doc_index = device_of_doc * docs + local
    corpus = Corpus(
        # a chunk's rows counted by their weights: chunks of one bucket share compiled steps
        data.counted_by_weight() if bucket else data,
        data.row_array(np.asarray(w, np.float64)),
        # padding rows join the device's last document, keeping the ids sorted
        data.row_array(np.repeat(local, lengths), edge=True),
        data.block_array(doc_weight, tuple(bounds[:-1]), docs),
    )
    return ShardedCorpus(
        corpus,
        data.row_array(np.arange(n_rows, dtype=np.int32)),
        int(n_rows),
        doc_index,
        data.block_array(np.diff(bounds).astype(np.int32), tuple(range(n_dev)), 1),
    )
