"""The data layer of the vMF mixtures: plain device data and the two data products.

Every vMF mixture touches its rows through two products only (docs/design.md section 2):
``X @ M`` (``data.dot``, the log-likelihood matrix ``X @ mu.T``) and ``X.T @ R``
(``data.tdot``, the resultants ``resp.T @ X``). This module holds the plain device data of
one device (:class:`DenseData`, :class:`SparseData`, built by :func:`to_device`), the host
registry of the "scipy" sparse kernel and the two products. The rows split over several
devices are :class:`bayesvmf._blocks.RowBlocks`; the estimators get either from the one
constructor :func:`bayesvmf._blocks.device_data`, and all of them answer the same interface
(:class:`_PlainData`, the table of :mod:`bayesvmf._blocks`).

Numerics: the two products run in the dtype of the stored data values (float32 with
``dtype="mixed"``, float64 with ``dtype="float64"``; docs/design.md section 5) and are cast
back to the caller's dtype. Dense products are XLA dots (BLAS-class kernels on CPU). On CPU
the sparse products call SciPy's compiled CSR/CSC kernels through an XLA custom call
(:mod:`bayesvmf._host_kernel`: cacheable, unlike ``jax.pure_callback``; the floor of
docs/design.md section 5 itself); elsewhere they are sorted ``segment_sum`` programs
(:class:`SparseData`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from bayesvmf import _compile_cache, _host_kernel
from bayesvmf._compile_cache import JIT_OPTIONS, count_trace

__all__ = [
    "DenseData",
    "SparseData",
    "SPARSE_KERNELS",
    "to_device",
    "host_csr",
    "host_blocks",
    "with_device_csr",
]


# --------------------------------------------------------------------------------------------
# Device data and the two data products
# --------------------------------------------------------------------------------------------


class _PlainData:
    """The interface of the data layer on plain data: one block, on one device.

    :class:`DenseData` and :class:`SparseData` answer what row blocks
    (:class:`bayesvmf._blocks.RowBlocks`) answer, so that a model asks its data and never
    checks where the rows live (the table of :mod:`bayesvmf._blocks`). Here every row is
    real and there is nothing to add over devices.
    """

    #: plain data are never sharded over devices
    is_sharded = False

    @property
    def n_samples(self) -> int:
        """Number of rows."""
        return self.shape[0]

    @property
    def block(self):
        """The rows a row-wise computation sees: the data themselves."""
        return self

    def dot(self, M: jax.Array) -> jax.Array:
        """Return ``X @ M`` for ``M`` of shape (n_features, m): the first data product.

        The result, of shape (n_samples, m), is in the dtype of ``M`` (:func:`_product`).
        """
        return _product(self, M, transpose=False)

    def tdot(self, R: jax.Array, *, as_rows: bool = False) -> jax.Array:
        """Return ``X.T @ R`` (n_features, m) for ``R`` of shape (n_samples, m), in its dtype.

        The second data product of an iteration (the resultants ``resp.T @ X``). With
        ``as_rows``, return ``R.T @ X`` (m, n_features) instead (the Dirichlet corpus's VEM
        and SVI steps use that orientation). Dense data compute ``R.T @ X`` either way, over
        the rows of ``X`` as stored (:func:`_product`); ``as_rows`` spares the transpose.
        """
        return _product(self, R, transpose=True, as_rows=as_rows)

    def weigh_rows(self, values: jax.Array) -> jax.Array:
        """Per-row values of real rows only: returned as they are."""
        return values

    def sum_over_blocks(self, *values) -> tuple:
        """Partial sums of the only block: returned as they are (a tuple)."""
        return values

    def map(self, fn, replicated, *rows, per_row: bool = False):
        """Return ``fn(replicated, self, *rows)`` (one device: no ``shard_map``)."""
        return fn(replicated, self, *rows)

    def map_sums(self, fn, replicated, *, columns: int):
        """Return ``fn(replicated, self)``: sums over the rows (plain data: one block).

        ``fn`` returns a pytree of sums over the rows it is given (statistics), computed
        from per-row values of ``columns`` entries each (runs times components). Large dense
        data add the sums of row chunks instead (:meth:`DenseData.map_sums`).
        """
        return fn(replicated, self)

    def map_rows(self, fn, replicated) -> np.ndarray:
        """Return ``fn(replicated, self)`` (one entry per row), compiled, as a host array."""
        with jax.enable_x64(True):
            return self.host_rows(_map_rows(fn, replicated, self))

    def replicate(self, tree):
        """Return ``tree`` as it is (one device: nothing to place; see RowBlocks.replicate)."""
        return tree

    def row_array(self, values) -> jax.Array:
        """Return per-row host ``values`` as a device array (the rows' layout: plain)."""
        return jnp.asarray(np.asarray(values))

    def host_rows(self, values) -> np.ndarray:
        """Return per-row device ``values`` as a host (n_samples, ...) array."""
        return np.asarray(values)[: self.n_samples]


@functools.partial(_compile_cache.jit, static_argnames="fn", compiler_options=JIT_OPTIONS)
def _map_rows(fn, replicated, data):
    """Return ``fn(replicated, data)``: the program of :meth:`_PlainData.map_rows`."""
    count_trace("data.map_rows")
    return fn(replicated, data)


@jax.tree_util.register_pytree_node_class
class DenseData(_PlainData):
    """Dense data on the device.

    Attributes
    ----------
    X : jax.Array of shape (n_samples, n_features)
        Unit rows, in the dtype of the data products. The second product ``X.T @ R`` is
        taken over the rows of this one array (:func:`_product`); no transposed copy is
        kept. It made that product faster (up to 1.9x, four restarts at d = 2,000) but cost
        more than it saved in whole fits (its host copy in fresh memory): on 2 cores, dense
        50,000 x 256, K = 32, SparseVMFMixture 0.250-0.271 -> 0.203-0.230 s, B-vMFmix
        0.344-0.357 -> 0.249-0.315 s without it (docs/design.md section 5).
    """

    def __init__(self, X):
        self.X = X

    def tree_flatten(self):
        """Flatten into the one array (child); no aux data."""
        return (self.X,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        """Rebuild from :meth:`tree_flatten` output."""
        return cls(*children)

    @property
    def shape(self) -> tuple[int, int]:
        """(n_samples, n_features)."""
        return self.X.shape

    @property
    def program_size(self) -> int:
        """Twice the entries: what sizes a program on these rows (:func:`._compile_cache.jit`).

        An iteration reads X in both products. Training data counted so while they kept a
        transposed copy, and the size tiers of docs/design.md section 5 were measured so.
        """
        return 2 * math.prod(self.X.shape)

    def take_rows(self, idx: jax.Array) -> jax.Array:
        """Return the rows ``X[idx]`` as a dense float64 (len(idx), d) array."""
        return self.X[idx].astype(jnp.float64)

    def map_sums(self, fn, replicated, *, columns: int, chunk_rows: int | None = None):
        """Return the sums ``fn(replicated, rows)`` over chunks of rows, added in row order.

        An E-step holds a few float64 (rows, ``columns``) arrays at once (log-likelihoods,
        responsibilities); over all rows they grow with n. Large dense data are taken in
        chunks of rows (:func:`bayesvmf._blocks.sum_over_chunks`, which says when and
        why); the others, or ``chunk_rows`` of at least n, in one pass:
        ``fn(replicated, self)``.
        """
        from bayesvmf._blocks import sum_over_chunks  # _blocks builds on this module

        return sum_over_chunks(self, fn, replicated, columns=columns, chunk_rows=chunk_rows)


#: Kernels of the two sparse products (see :class:`SparseData`).
SPARSE_KERNELS = ("auto", "scipy", "segment_sum")


@jax.tree_util.register_pytree_node_class
class SparseData(_PlainData):
    """Sparse data for the two products: a host CSR matrix, or sorted COO arrays on the device.

    Two kernels compute the products ``X @ M`` and ``X.T @ R`` of an iteration (docs/design.md
    section 5); the matrix is never densified and memory stays O(nnz):

    ``"scipy"`` (the default on CPU)
        A call into SciPy's compiled CSR/CSC products (on the CPU backend an XLA custom
        call, :mod:`bayesvmf._host_kernel`, so the program can enter the persistent
        compilation cache; ``jax.pure_callback`` otherwise). The CSR matrix stays
        on the host, registered once (:func:`register_host_block`); the program carries only
        its int32 ``handle``, so a product ships just its dense operand and result across
        the callback boundary. (JAX copies every callback operand into a fresh
        buffer: passing the CSR arrays themselves cost a copy of the whole data per product,
        which is what made a fit's peak memory 8-16x the data before this design.) These
        products *are* the floor of docs/design.md section 5, so an iteration costs about the
        floor plus the O(nK) elementwise work. Batched (vmapped) right-hand sides are
        concatenated into products of several columns each, so restarts share passes over
        the data (:data:`PRODUCT_DENSE_BYTES`). Code that reads rows inside a program
        (collapsed Gibbs) adds device copies of the CSR arrays with :func:`with_device_csr`.
        One device only: data sharded over several devices uses ``"segment_sum"``
        (:func:`bayesvmf._blocks.device_data` says why).
    ``"segment_sum"`` (the default on GPU/TPU, where a host callback would copy, and for
    data sharded over devices)
        One sorted ``segment_sum`` per product: ``X @ M`` over the row-sorted COO arrays
        ``rows``, ``cols``, ``values``, ``X.T @ R`` over the column-sorted copy ``t_rows``,
        ``t_cols``, ``t_values``.

    Parameters
    ----------
    rows, cols, values : jax.Array of shape (nnz,) or None
        Row-sorted coordinates and values (``segment_sum``); with the ``scipy`` kernel,
        ``cols`` and ``values`` are the device CSR arrays added by :func:`with_device_csr`,
        else None, and ``rows`` is None.
    t_rows, t_cols, t_values : jax.Array of shape (nnz,) or None
        The same entries sorted by column (``segment_sum`` kernel only).
    shape : tuple of int
        (n_samples, n_features) of one row block, static.
    indptr : jax.Array of shape (n_samples + 1,) or None
        Device CSR row pointers (``scipy`` kernel after :func:`with_device_csr`).
    kernel : {"scipy", "segment_sum"}, default "segment_sum"
        Static.
    handle : jax.Array of int32, shape (1,), or None
        ``scipy`` kernel: the registry handle of the host CSR matrix.
    dtype : dtype or None
        Static dtype of the values, hence of the products (default: that of ``values``).
    """

    def __init__(
        self,
        rows,
        cols,
        values,
        t_rows,
        t_cols,
        t_values,
        shape,
        indptr=None,
        kernel="segment_sum",
        handle=None,
        dtype=None,
    ):
        self.rows, self.cols, self.values = rows, cols, values
        self.t_rows, self.t_cols, self.t_values = t_rows, t_cols, t_values
        self.indptr = indptr
        self.handle = handle
        self.shape = tuple(int(s) for s in shape)
        self.kernel = kernel
        self.dtype = jnp.dtype(dtype if dtype is not None else values.dtype)
        # the registry entries of the host blocks live while this object (or a program
        # still using ``handle``, see register_host_block) does; copies made by
        # tree_unflatten share the handle but not this reference
        self._anchors = ()

    def tree_flatten(self):
        """Flatten into arrays (children) and the static shape, kernel, dtype (aux data)."""
        children = (
            self.rows,
            self.cols,
            self.values,
            self.t_rows,
            self.t_cols,
            self.t_values,
            self.indptr,
            self.handle,
        )
        return children, (self.shape, self.kernel, self.dtype.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        """Rebuild from :meth:`tree_flatten` output."""
        shape, kernel, dtype = aux
        *arrays, indptr, handle = children
        return cls(*arrays, shape, indptr=indptr, kernel=kernel, handle=handle, dtype=dtype)

    @property
    def nnz(self) -> int:
        """Number of stored entries (padding included); read on the host, outside programs."""
        if self.values is not None:
            return int(self.values.shape[0])
        return sum(block.nnz for block in host_blocks(self))

    @property
    def program_size(self) -> int:
        """Stored entries: what sizes a program on these rows (:func:`._compile_cache.jit`)."""
        return self.nnz

    def take_rows(self, idx: jax.Array) -> jax.Array:
        """Return the rows ``X[idx]`` as a dense float64 (len(idx), d) array.

        Read from the host CSR matrix on the CPU "scipy" kernel (the nonzeros of those rows,
        :func:`bayesvmf._host_kernel.scipy_rows`); otherwise ``X.T @ onehot(idx)``, a pass
        over all of X (the same numbers: each entry is one stored value times 1).
        """
        if self.kernel == "scipy" and _host_kernel.available():
            rows = _host_kernel.scipy_rows(self.handle, idx, shape=self.shape, dtype=self.dtype)
            return rows.astype(jnp.float64)
        onehot = jax.nn.one_hot(idx, self.shape[0], dtype=jnp.float64).T
        return self.tdot(onehot).T


# --------------------------------------------------------------------------------------------
# The host registry of the "scipy" kernel
# --------------------------------------------------------------------------------------------

#: handle -> host CSR block of the "scipy" kernel. An entry is removed when its anchor (an
#: object that owns the block's handle array) is freed, see register_host_block.
_HOST_BLOCKS: dict[int, sp.csr_matrix] = {}
_NEXT_HANDLE = iter(range(1, 2**31))


def _release(handle: int) -> None:
    """Forget a host block and its row blocks (:func:`_row_blocks`)."""
    _HOST_BLOCKS.pop(handle, None)
    _ROW_BLOCKS.pop(handle, None)


class _HostAnchor:
    """Owns the registry entry of one host CSR block and the memory of its int32 handle.

    On CPU, ``jax.device_put`` of a 64-byte-aligned NumPy array aliases its memory instead of
    copying it, and the device buffer keeps the array, and so this anchor, alive until the
    buffer is freed, which the runtime delays until no enqueued program uses it. A program
    that reads the handle therefore always finds its block in the registry, even when the
    :class:`SparseData` it came from has been dropped before the program ran.
    """

    def __init__(self, handle: int):
        raw = np.zeros(32, np.int32)
        start = (-raw.ctypes.data % 64) // 4
        self._memory = raw[start : start + 1]
        self._memory[0] = handle
        self.__array_interface__ = self._memory.__array_interface__
        weakref.finalize(self, _release, handle)


def register_host_block(block: sp.csr_matrix) -> tuple[np.ndarray, _HostAnchor]:
    """Register a host CSR block for the "scipy" kernel; return its handle and anchor.

    Parameters
    ----------
    block : scipy.sparse.csr_matrix
        Kept as it is (never modified), so it may share memory with the caller's matrix.

    Returns
    -------
    handle : ndarray of int32, shape (1,)
        The handle array, to be placed on the device (zero-copy on CPU).
    anchor : object
        The object that keeps the registry entry; hold it as long as the handle is used
        (:class:`SparseData` does).
    """
    handle = next(_NEXT_HANDLE)
    anchor = _HostAnchor(handle)
    _HOST_BLOCKS[handle] = block
    return np.asarray(anchor), anchor


def _lookup(handle: int) -> sp.csr_matrix:
    try:
        return _HOST_BLOCKS[int(handle)]
    except KeyError:
        raise RuntimeError(
            f"the host CSR block {int(handle)} of a sparse product was released before the "
            "product ran; keep the SparseData returned by device_data alive while "
            "its programs run"
        ) from None


def host_blocks(data: SparseData) -> list[sp.csr_matrix]:
    """Return the host CSR block of "scipy"-kernel data in a list (outside programs; no copy)."""
    if data.handle is None:
        raise ValueError("host_blocks needs SparseData of the 'scipy' kernel")
    return [_lookup(h) for h in np.asarray(data.handle).reshape(-1)]


def host_csr(data: SparseData) -> sp.csr_matrix:
    """Return sparse data as one host CSR matrix of its values' dtype.

    No copy for "scipy"-kernel data; otherwise built from the device arrays.
    """
    if data.handle is not None:
        (block,) = host_blocks(data)
        return block
    values, cols = np.asarray(data.values), np.asarray(data.cols)
    if data.indptr is not None:
        return sp.csr_matrix((values, cols, np.asarray(data.indptr)), shape=data.shape)
    return sp.csr_matrix((values, (np.asarray(data.rows), cols)), shape=data.shape)


def with_device_csr(data):
    """Return "scipy"-kernel data with device copies of its CSR arrays ``indptr/cols/values``.

    For programs that read rows of X directly (collapsed Gibbs). One block only; other data
    is returned unchanged. The result keeps ``data``'s host registration alive.
    """
    if not isinstance(data, SparseData) or data.handle is None or data.indptr is not None:
        return data
    (block,) = host_blocks(data)
    out = SparseData(
        None,
        jnp.asarray(block.indices, jnp.int32),
        jnp.asarray(block.data, data.dtype),
        None,
        None,
        None,
        data.shape,
        indptr=jnp.asarray(block.indptr, jnp.int32),
        kernel=data.kernel,
        handle=data.handle,
        dtype=data.dtype,
    )
    out._anchors = data._anchors
    return out


def _resolve_kernel(kernel: str) -> str:
    if kernel not in SPARSE_KERNELS:
        raise ValueError(f"kernel must be one of {SPARSE_KERNELS}; got {kernel!r}.")
    if kernel == "auto":
        return "scipy" if jax.default_backend() == "cpu" else "segment_sum"
    return kernel


def host_block(csr: sp.csr_matrix, dtype, rows: int | None = None) -> sp.csr_matrix:
    """Return ``csr`` with values in ``dtype`` and ``rows`` rows (empty rows appended).

    Shares the index arrays (and the values when their dtype already matches) with ``csr``,
    which is never modified.
    """
    n, d = csr.shape
    rows = n if rows is None else int(rows)
    indptr = csr.indptr
    if rows > n:
        indptr = np.concatenate([indptr, np.full(rows - n, indptr[-1], indptr.dtype)])
    values = csr.data.astype(np.dtype(jnp.dtype(dtype).name), copy=False)
    if values is csr.data and indptr is csr.indptr:
        return csr
    return sp.csr_matrix((values, csr.indices, indptr), shape=(rows, d), copy=False)


def scipy_kernel_data(block: sp.csr_matrix, dtype) -> SparseData:
    """Register a host CSR block and return its "scipy"-kernel :class:`SparseData`.

    The handle goes to the default device. The "scipy" kernel serves one device only: a
    program over several devices must not call back into Python (see
    :func:`bayesvmf._blocks.device_data`).
    """
    handle, anchor = register_host_block(block)
    data = SparseData(
        None,
        None,
        None,
        None,
        None,
        None,
        block.shape,
        kernel="scipy",
        handle=jax.device_put(handle),
        dtype=dtype,
    )
    data._anchors = (anchor,)
    return data


def to_device(X, dtype=jnp.float64, kernel: str = "auto") -> DenseData | SparseData:
    """Move checked data (unit rows) to the device once, as plain data.

    The plain case of :func:`bayesvmf._blocks.device_data` (no ``devices``, no ``bucket``),
    which is what the estimators and the seedings call.

    Parameters
    ----------
    X : ndarray, jax.Array, scipy.sparse matrix or jax.experimental.sparse.BCOO
        Validated data of shape (n_samples, n_features). It is not modified.
    dtype : dtype, default float64
        Dtype of the stored values, hence of the two data products.
    kernel : {"auto", "scipy", "segment_sum"}, default "auto"
        Kernel of the sparse products (:class:`SparseData`); "auto" is "scipy" on CPU and
        "segment_sum" elsewhere. Ignored for dense input. With "scipy" the CSR matrix stays
        on the host and shares its index arrays (and float64 values) with ``X``.

    Returns
    -------
    DenseData or SparseData
    """
    try:
        from jax.experimental import sparse as jsparse

        if isinstance(X, jsparse.BCOO):
            X = sp.coo_matrix(
                (np.asarray(X.data), (np.asarray(X.indices[:, 0]), np.asarray(X.indices[:, 1]))),
                shape=X.shape,
            )
    except ImportError:  # pragma: no cover - jax always ships experimental.sparse
        pass
    if sp.issparse(X):
        kernel = _resolve_kernel(kernel)
        csr = sp.csr_matrix(X)  # a new object sharing X's arrays when X is CSR
        if not csr.has_canonical_format:
            csr = csr.copy()  # sum_duplicates works in place: never on X's arrays
            csr.sum_duplicates()
        n, d = csr.shape
        if kernel == "scipy":
            return scipy_kernel_data(host_block(csr, dtype), dtype)
        cols = jnp.asarray(csr.indices.astype(np.int32))
        values = jnp.asarray(csr.data, dtype=dtype)
        rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(csr.indptr))
        csc = csr.tocsc()
        t_cols = np.repeat(np.arange(d, dtype=np.int32), np.diff(csc.indptr))
        return SparseData(
            jnp.asarray(rows),
            cols,
            values,
            jnp.asarray(csc.indices.astype(np.int32)),
            jnp.asarray(t_cols),
            jnp.asarray(csc.data, dtype=dtype),
            (n, d),
            None,
            kernel,
        )
    dtype = jnp.dtype(dtype)
    # a dtype JAX keeps as it is (float64 only under x64), else JAX's cast and its warning
    if isinstance(X, np.ndarray) and X.ndim == 2 and jax.dtypes.canonicalize_dtype(dtype) == dtype:
        return DenseData(_device_put_aligned(X, dtype))
    if isinstance(X, np.ndarray):
        X = X.astype(dtype, copy=False)  # cast on the host: no program for it
    return DenseData(jnp.asarray(X, dtype=dtype))


#: Byte alignment of the host copy that :func:`_device_put_aligned` hands to JAX; the CPU
#: client shares host buffers aligned to 64 bytes instead of copying them.
HOST_ALIGNMENT = 64


def _device_put_aligned(X: np.ndarray, dtype: np.dtype) -> jax.Array:
    """Copy ``X`` as ``dtype`` to 64-byte aligned host memory; put it on the device.

    The cast happens on the host (no program for it) into a buffer of this function's own,
    which nothing writes after, so ``jax.device_put(..., may_alias=True)`` can share it on
    the CPU. For float32 products (SparseVMFMixture's default ``dtype="mixed"``) that is one
    data-sized copy instead of two (the cast, then JAX's copy of an unaligned array); for
    float64 it is one copy as before, now one the fit owns. Measured on dense 50,000 x 256,
    K = 32, ten fits each after a warm-up, the two ways alternated in one process: median
    SparseVMFMixture fit 0.252 -> 0.233 s (JAX's copy alone took 0.03 s, 0.06 s in a new
    process's first fit); B-vMFmix, float64, 0.424 -> 0.393 s, within its spread.
    ``X`` is 2-D and ``dtype`` one JAX keeps (float64 only under x64: :func:`to_device`
    leaves other cases to ``jnp.asarray`` and its warning).
    On an accelerator the array is copied to the device as before. The values are those of
    ``X.astype(dtype)``.
    """
    _compile_cache.release_host_buffers()  # the copies of data deleted since: freed
    size = X.size * dtype.itemsize
    raw = _host_buffer(size + HOST_ALIGNMENT)
    offset = (-raw.ctypes.data) % HOST_ALIGNMENT
    host = raw[offset : offset + size].view(dtype).reshape(X.shape)
    np.copyto(host, X, casting="unsafe")
    array = jax.device_put(host, may_alias=True)
    _compile_cache.share_host_buffer(raw, array)
    return array


def _host_buffer(nbytes: int) -> np.ndarray:
    """Return ``nbytes`` of new host memory, a uint8 array (a seam for the tests)."""
    return np.empty(nbytes, dtype=np.uint8)


def _data_dtype(data):
    return data.X.dtype if isinstance(data, DenseData) else data.dtype


def _host_rows(handle, idx, *, shape):
    """Host side of :func:`bayesvmf._host_kernel.scipy_rows`: ``X[idx]`` dense, (..., m, d)."""
    A = _lookup(handle)
    if A.shape != shape:  # pragma: no cover - guarded by construction
        raise ValueError(f"host block of shape {A.shape} where {shape} was expected")
    idx = np.asarray(idx)
    return A[idx.reshape(-1)].toarray().reshape(*idx.shape, shape[1])


def _host_product(handle, B, *, shape, transpose, bits):
    """Host side of the "scipy" kernel: ``X @ B`` or ``X.T @ B`` for B of shape (..., r, m).

    ``X`` is the registered host block of ``handle``. Leading (vmapped) axes of B are folded
    into the columns of one product. The handle arrives unbatched (``vmap_method=
    "expand_dims"`` only adds unit axes). With ``bits``, float64 operands and the result
    travel as their uint32 bit patterns (shape (..., 2)), see :func:`_scipy_product`.
    """
    handle = np.asarray(handle).reshape(-1)
    if handle.size != 1:
        raise ValueError("the sparse data of a product cannot be batched (vmapped)")
    A = _lookup(handle[0])
    if A.shape != shape:  # pragma: no cover - guarded by construction
        raise ValueError(f"host block of shape {A.shape} where {shape} was expected")
    B = np.asarray(B)
    if bits:
        B = np.ascontiguousarray(B).view(np.float64)[..., 0]
    lead, (r, m) = B.shape[:-2], B.shape[-2:]
    B = B.reshape(-1, r, m)
    # right-hand sides of several restarts share a pass over X, in groups whose (d, columns)
    # dense side (read or written at random rows) stays within PRODUCT_DENSE_BYTES
    group = max(1, PRODUCT_DENSE_BYTES // (shape[1] * m * B.dtype.itemsize))
    parts = []
    for start in range(0, B.shape[0], group):
        part = B[start : start + group]
        B2 = np.moveaxis(part, 0, 1).reshape(r, -1)
        out = _threaded_product(handle[0], A, B2, transpose)
        parts.append(np.moveaxis(out.reshape(out.shape[0], -1, m), 1, 0))
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    out = np.ascontiguousarray(out.reshape(*lead, *out.shape[-2:]), dtype=A.dtype)
    return out.view(np.uint32).reshape(*out.shape, 2) if bits else out


#: Row blocks of the "scipy" kernel's products. SciPy's CSR kernels release the GIL, so the
#: rows of X, cut into this many blocks of about equal numbers of nonzeros, are multiplied
#: side by side: for ``X @ B`` each block gives its rows of the result, for ``X.T @ R`` a
#: partial sum, the partial sums added in block order. The number of blocks is fixed, not
#: taken from the machine, so that a fit gives the same numbers on any number of cores (the
#: blocks run on min(PRODUCT_BLOCKS, cores) threads). Measured on 2 cores (16,000 x 26,214
#: tf-idf, 1.44M nonzeros, 20 float32 columns): X @ B 6.0 -> 3.2 ms, X.T @ R 5.4 -> 3.0 ms;
#: 4,000 of its rows (360,000 nonzeros) 1.48 -> 0.83 ms, 500 rows (45,000) 0.19 -> 0.16 ms.
PRODUCT_BLOCKS = 2

#: Matrices with fewer nonzeros are multiplied in one block (the break-even measured above
#: lies below 45,000 nonzeros).
THREADED_MIN_NNZ = 65_536

#: handle -> {number of blocks: [(first row, end row, CSR block)]}: the row blocks of a host
#: matrix (views of its arrays), released with it (:func:`_release`).
_ROW_BLOCKS: dict[int, dict[int, list]] = {}
_POOL: list = []  # [(pid, ThreadPoolExecutor)]: one pool per process (not inherited by fork)


def _row_blocks(handle: int, A: sp.csr_matrix, n_blocks: int) -> list:
    """Cut ``A`` into ``n_blocks`` row blocks of about equal nnz (views of its arrays)."""
    cached = _ROW_BLOCKS.setdefault(int(handle), {})
    if n_blocks not in cached:
        cuts = np.searchsorted(A.indptr, np.linspace(0, A.nnz, n_blocks + 1)[1:-1])
        bounds = [0, *sorted({int(c) for c in cuts if 0 < c < A.shape[0]}), A.shape[0]]
        blocks = []
        for first, end in zip(bounds[:-1], bounds[1:], strict=True):
            lo, hi = A.indptr[first], A.indptr[end]
            indptr = A.indptr[first : end + 1] - lo
            block = sp.csr_matrix(
                (A.data[lo:hi], A.indices[lo:hi], indptr), shape=(end - first, A.shape[1])
            )
            blocks.append((first, end, block))
        cached[n_blocks] = blocks
    return cached[n_blocks]


def _pool():
    """Return this process's thread pool of the products."""
    pid = os.getpid()
    if not _POOL or _POOL[0][0] != pid:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        workers = max(1, min(PRODUCT_BLOCKS, cores or os.cpu_count() or 1))
        _POOL[:] = [(pid, concurrent.futures.ThreadPoolExecutor(workers, "bayesvmf-csr"))]
    return _POOL[0][1]


def _threaded_product(handle: int, A: sp.csr_matrix, B: np.ndarray, transpose: bool):
    """Return ``A @ B`` or ``A.T @ B``, the rows of A in :data:`PRODUCT_BLOCKS` blocks."""
    n_blocks = PRODUCT_BLOCKS if A.nnz >= THREADED_MIN_NNZ else 1
    if n_blocks <= 1:
        return np.asarray(A.T @ B if transpose else A @ B)
    blocks, pool = _row_blocks(handle, A, n_blocks), _pool()
    if transpose:
        futures = [pool.submit(lambda b: np.asarray(b[2].T @ B[b[0] : b[1]]), b) for b in blocks]
    else:
        futures = [pool.submit(lambda b: np.asarray(b[2] @ B), b) for b in blocks]
    # every block finishes before this returns, even when one raises: under the custom call
    # B is a view of an XLA buffer, which may be freed once the call returns
    concurrent.futures.wait(futures)
    outs = [f.result() for f in futures]
    return functools.reduce(np.add, outs) if transpose else np.concatenate(outs)


#: Largest (d, columns) dense side of one SciPy product: restarts beyond it get products of
#: their own. Measured on the 18,846 x 26,214 corpus with 1.7M nonzeros, float64: the two
#: products of 4 restarts (80 columns, 16.8 MB) in one pass took 120-151 ms, in two passes
#: of 40 columns 104 ms; float32 (8.4 MB) is fastest in one pass (51-57 ms).
PRODUCT_DENSE_BYTES = 8_400_000


@functools.cache
def _host_callback(shape: tuple[int, int], transpose: bool, bits: bool):
    """One host function per (shape, transpose, bits), shared by every trace."""
    return functools.partial(_host_product, shape=shape, transpose=transpose, bits=bits)


def _scipy_product(data, B, transpose: bool):
    """``X @ B`` or ``X.T @ B`` through SciPy (the "scipy" kernel of :class:`SparseData`).

    Only the block's handle, ``B`` and the result cross the callback boundary. float64
    operands cross it as uint32 bit patterns: JAX re-places the callback's arguments and
    checks its results under the x64 setting of the thread XLA runs the callback on, which is
    not the caller's scoped ``jax.enable_x64(True)``; float64 would then arrive as float32
    (observed as intermittent dtype errors). Bit patterns are exact.
    """
    if _host_kernel.available():  # a custom call that the compilation cache can keep
        return _host_kernel.scipy_product(data.handle, B, shape=data.shape, transpose=transpose)
    rows = data.shape[1] if transpose else data.shape[0]
    bits = data.dtype == jnp.float64
    host = _host_callback(data.shape, transpose, bits)
    if bits:
        B = jax.lax.bitcast_convert_type(B, jnp.uint32)
    shape = (*B.shape[: -3 if bits else -2], rows, B.shape[-2 if bits else -1])
    if bits:
        result = jax.ShapeDtypeStruct((*shape, 2), jnp.uint32)
    else:
        result = jax.ShapeDtypeStruct(shape, data.dtype)
    out = jax.pure_callback(host, result, data.handle, B, vmap_method="expand_dims")
    return jax.lax.bitcast_convert_type(out, jnp.float64) if bits else out


def _product(data, B: jax.Array, transpose: bool, as_rows: bool = False) -> jax.Array:
    """``X @ B`` or ``X.T @ B`` in the data's dtype, returned in the dtype of ``B``.

    ``as_rows`` (with ``transpose``): ``B.T @ X`` instead (:meth:`_PlainData.tdot`).

    The "segment_sum" kernel gathers the rows of B at the nonzeros' columns and sums them
    into the output rows: for ``X @ B`` in row order (COO), for ``X.T @ B`` in column order
    (the column-sorted copy), so that both sums run over sorted segments.
    """
    out_dtype = B.dtype
    B = B.astype(_data_dtype(data))
    if isinstance(data, DenseData):
        if not transpose:
            return (data.X @ B).astype(out_dtype)
        # the sum runs over the rows of X as stored, (..., m, d), cast before any transpose:
        # XLA's CPU backend then transposes R and takes its fast product; a transpose
        # between the product and the cast it folds into a product contracting dimension
        # 0 of both, 2.5x slower (docs/design.md section 5)
        if B.ndim == 2 and B.dtype == jnp.float64:
            # one float64 right-hand side as a batch of one: XLA's CPU backend takes a
            # faster kernel for it (50,000 x 256, K = 32: 12.4 against 23.9 ms; 20,000 x
            # 2,000, K = 16: 30.8 against 43.0 ms). Vmapped, the same program as before, to
            # the bit. Not for float32, where the batch of one is as often slower
            # (docs/design.md section 5)
            rows = jax.lax.dot_general(B[None], data.X, (((1,), (0,)), ((), ())))[0]
        else:
            rows = jax.lax.dot_general(B, data.X, (((B.ndim - 2,), (0,)), ((), ())))
        rows = rows.astype(out_dtype)
        return rows if as_rows else jnp.swapaxes(rows, -1, -2)
    if as_rows:  # the last two axes only: the "scipy" kernel takes a stack of B whole
        return jnp.swapaxes(_product(data, B, transpose), -1, -2).astype(out_dtype)
    if data.kernel == "scipy":
        return _scipy_product(data, B, transpose=transpose).astype(out_dtype)
    if B.ndim > 2:  # B[gather] would index the stack's first axis (clamped): wrong sums
        raise ValueError(
            f"the segment_sum kernel multiplies one right-hand side (2-D), got B of shape "
            f"{B.shape}; vmap over a stack"
        )
    if transpose:
        values, gather, segments, size = data.t_values, data.t_rows, data.t_cols, data.shape[1]
    else:
        values, gather, segments, size = data.values, data.cols, data.rows, data.shape[0]
    out = jax.ops.segment_sum(
        values[:, None] * B[gather], segments, num_segments=size, indices_are_sorted=True
    )
    return out.astype(out_dtype)
