"""Directional data: input checking and device transfer; the synthetic generators.

Every estimator receives its data through :func:`check_directional`, which validates and
(optionally) normalises the rows to unit length, keeping scipy.sparse input sparse
(docs/architecture.md, "The data path"), and hands it to JAX with :func:`to_device` (a
dense array or a ``jax.experimental.sparse.BCOO``). The synthetic generators
(:func:`make_vmf_mixture`, the simulation protocol of Rossi & Barbaro, section 4.1;
:func:`make_temporal_vmf_mixture`; :func:`mixture_overlap`) live in
:mod:`bayesvmf._synthetic` and are re-exported here, so
``from bayesvmf.data import make_vmf_mixture`` is the place to import them from.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jax.experimental import sparse as jsparse

from bayesvmf._synthetic import (
    VMFMixtureSample,
    make_temporal_vmf_mixture,
    make_vmf_mixture,
    mixture_overlap,
)

__all__ = [
    "UNIT_NORM_TOL",
    "VMFMixtureSample",
    "check_directional",
    "make_temporal_vmf_mixture",
    "make_vmf_mixture",
    "mixture_overlap",
    "to_device",
]

#: Default tolerance on |norm - 1| for rows that must already be unit norm
#: (``normalize=False``). The target norm is 1, so this is also a relative tolerance.
#: Rows normalised in float32 by another tool carry an error of a few float32 epsilons
#: (eps = 6e-8) times log2(n_features) from pairwise summation, about 1e-6 at most for
#: n_features <= 1e5; any looser tolerance would let unnormalised data through.
UNIT_NORM_TOL = 1e-6


# ---------------------------------------------------------------------------------------
# Input checking
# ---------------------------------------------------------------------------------------


def _check_numeric_dtype(dtype: np.dtype, name: str) -> None:
    """Raise ``TypeError`` unless ``dtype`` is boolean, integer or real floating."""
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must hold real numbers (bool, integer or float), got dtype {dtype}"
        )


def _first(mask: np.ndarray) -> int:
    """Return the index of the first True entry of a 1-D boolean mask (which has one)."""
    return int(np.flatnonzero(mask)[0])


def _check_shape(shape: tuple[int, ...], name: str, min_rows: int, min_rows_name: str | None):
    """Run the shape checks shared by the dense and the sparse paths."""
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got an array of shape {shape}")
    n_rows, n_cols = shape
    if n_rows == 0:
        raise ValueError(f"{name} is empty: it has 0 rows (shape {shape})")
    if n_cols < 2:
        raise ValueError(
            f"{name} has {n_cols} column(s); a direction needs at least 2 features (shape {shape})"
        )
    if n_rows < min_rows:
        what = f"{min_rows_name}={min_rows}" if min_rows_name else f"the {min_rows} required"
        raise ValueError(f"{name} has {n_rows} rows, fewer than {what}")


def _check_norms(norms: np.ndarray, name: str, normalize: bool, tol: float) -> None:
    """Reject all-zero rows and, when ``normalize=False``, rows that are not unit norm."""
    zero = norms == 0.0
    if zero.any():
        row = _first(zero)
        raise ValueError(
            f"{name} has an all-zero row: row {row} (a direction needs a nonzero vector)"
        )
    if not normalize:
        off = np.abs(norms - 1.0) > tol
        if off.any():
            row = _first(off)
            raise ValueError(
                f"{name} row {row} has norm {norms[row]:.6g} but normalize=False requires "
                f"unit-norm rows (|norm - 1| <= {tol:g}); pass normalize=True to rescale"
            )


def _row_norms_dense(X: np.ndarray) -> np.ndarray:
    """Euclidean row norms, scaled by the row's largest entry so nothing over/underflows.

    A row of 1e-170s would otherwise square to 0 and be reported as all-zero, and a row of
    1e200s would square to inf.
    """
    # the largest |entry| without an |X| temporary, and X / scale formed once: the same
    # values as abs-max and two divisions, in about half the time (a data-sized array fewer)
    scale = np.maximum(X.max(axis=1), -X.min(axis=1))
    safe = np.where(scale > 0, scale, 1.0)
    scaled = X / safe[:, None]
    return scale * np.sqrt(np.einsum("ij,ij->i", scaled, scaled))


def _check_dense_rows(X: np.ndarray, name: str) -> np.ndarray:
    """Reject NaN or infinite values (naming the first row) and return the row norms.

    Rows go in blocks of about CHUNK_NNZ values, so the temporaries (the finite flags, the
    rescaled rows) are a few MiB, not arrays the size of X. Each row's norm is the same
    computation whatever the block (tests/test_data.py checks it bitwise against one
    block). Why: NumPy asks the kernel for huge pages for large arrays, and in a new
    process a fresh data-sized array sometimes waits for the kernel to compact memory.
    Measured on a dense 50,000 x 256 array, the first check in each of ten new processes:
    0.06-0.07 s, but 0.18-0.50 s in four of them, with the flags and the rescaled rows as
    whole arrays; 0.036-0.041 s in all ten in blocks.
    """
    n, d = X.shape
    norms = np.empty(n)
    # at least two rows a block: NumPy's einsum sums a lone long row in another order
    bounds = list(range(0, n, max(2, CHUNK_NNZ // d))) + [n]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    for start, stop in zip(bounds[:-1], bounds[1:]):
        block = X[start:stop]
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            raise ValueError(f"{name} has a NaN or infinite value in row {start + _first(bad)}")
        norms[start:stop] = _row_norms_dense(block)
    return norms


def _row_norms_csr(values: np.ndarray, rows: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Row norms of CSR rows, scaled like the dense norms.

    ``values`` are the stored values of a slice of rows, ``rows`` the local row of each and
    ``indptr`` the slice's row pointers (from its first row's offset). The largest |entry| of
    each row comes from ``maximum.reduceat`` over the non-empty rows (a max is exact in any
    order; ``maximum.at`` took 40% of a check); the sum of squares is bincount's, in the
    order of the values.
    """
    n_rows = indptr.shape[0] - 1
    counts = np.diff(indptr)
    absdata = np.abs(values)
    scale = np.zeros(n_rows)
    nonempty = counts > 0
    if absdata.size:
        scale[nonempty] = np.maximum.reduceat(absdata, indptr[:-1][nonempty] - indptr[0])
    safe = np.where(scale > 0, scale, 1.0)
    scaled = absdata / np.repeat(safe, counts)
    return scale * np.sqrt(np.bincount(rows, weights=scaled * scaled, minlength=n_rows))


#: Sparse rows are checked and rescaled in slices of about this many stored values, so the
#: temporaries stay a few MiB instead of several arrays of nnz values (which made checking
#: a corpus cost 3.7x its own memory at peak).
CHUNK_NNZ = 1 << 19

#: With ``copy=False``, rows whose norms are within this of 1 count as normalised already:
#: rescaling them would move each value by a few ulps at most.
SHARE_NORM_TOL = 4 * np.finfo(np.float64).eps


def _row_slices(indptr: np.ndarray):
    """Yield (first row, stop row, local row index of each value) over slices of rows."""
    n = indptr.shape[0] - 1
    start = 0
    while start < n:
        stop = int(np.searchsorted(indptr, indptr[start] + CHUNK_NNZ, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        counts = np.diff(indptr[start : stop + 1])
        yield start, stop, np.repeat(np.arange(stop - start, dtype=np.int32), counts)
        start = stop


def _check_csr_rows(Xc: scipy.sparse.csr_matrix, name: str) -> np.ndarray:
    """Reject NaN or infinite values (naming the first row) and return the row norms."""
    norms = np.empty(Xc.shape[0])
    for start, stop, rows in _row_slices(Xc.indptr):
        values = Xc.data[Xc.indptr[start] : Xc.indptr[stop]]
        bad = ~np.isfinite(values)
        if bad.any():
            raise ValueError(f"{name} has a NaN or infinite value in row {start + rows[bad].min()}")
        norms[start:stop] = _row_norms_csr(values, rows, Xc.indptr[start : stop + 1])
    return norms


def _unit_rows(norms: np.ndarray, normalize: bool, tol: float) -> bool:
    """Whether rows of these norms pass as they are: the checked data would equal them.

    Within :data:`SHARE_NORM_TOL` of 1 when ``normalize`` (rescaling would move each value
    by a few ulps at most), within ``tol`` otherwise (nothing is rescaled).
    """
    return np.abs(norms - 1.0).max(initial=0.0) <= (SHARE_NORM_TOL if normalize else tol)


def _shared_csr(X, name: str, normalize: bool, tol: float):
    """Return X's arrays as a read-only CSR matrix if X passes as it is, else None.

    X passes when it is a float64 CSR matrix in canonical form without explicit zeros whose
    values are finite and whose rows are unit norm (within :data:`SHARE_NORM_TOL` when
    ``normalize`` is True, else within ``tol``): the checked matrix would equal it.
    """
    if X.format != "csr" or X.dtype != np.float64 or not X.has_canonical_format:
        return None
    if not X.data.all():  # explicit zeros (a reduction: no temporary of nnz values)
        return None
    norms = _check_csr_rows(X, name)
    _check_norms(norms, name, normalize, tol)
    if not _unit_rows(norms, normalize, tol):
        return None

    def read_only(a):
        view = a.view()
        view.flags.writeable = False
        return view

    shared = scipy.sparse.csr_matrix(
        (read_only(X.data), read_only(X.indices), read_only(X.indptr)), shape=X.shape, copy=False
    )
    shared.has_canonical_format = True
    return shared


def _bcoo_to_scipy(X: Any) -> scipy.sparse.coo_matrix:
    """Convert a plain 2-D ``BCOO`` (no batch or dense dimensions) to scipy COO."""
    if X.n_batch or X.n_dense or X.ndim != 2:
        raise ValueError(
            f"a BCOO input must be 2-D without batch or dense dimensions, got shape "
            f"{X.shape} with n_batch={X.n_batch}, n_dense={X.n_dense}"
        )
    indices = np.asarray(X.indices)
    return scipy.sparse.coo_matrix(
        (np.asarray(X.data), (indices[:, 0], indices[:, 1])), shape=X.shape
    )


def check_directional(
    X: Any,
    *,
    normalize: bool = True,
    name: str = "X",
    min_rows: int = 1,
    min_rows_name: str | None = None,
    dtype: Any = None,
    tol: float = UNIT_NORM_TOL,
    copy: bool = True,
) -> np.ndarray | scipy.sparse.csr_matrix:
    """Validate directional data and return a normalised copy.

    Each row of ``X`` is one observation, a direction in R^d. The checks, in order, each
    raising with a message that names ``name`` and, where it applies, the first offending
    row: a numeric dtype (``TypeError``); 2-D; at least one row; at least 2 columns (a
    direction in one dimension is only a sign); at least ``min_rows`` rows; no NaN or
    infinite value; no all-zero row; and, with ``normalize=False``, unit-norm rows.

    The caller's object is never modified: the result is a new array (with ``copy=False``,
    possibly a read-only view of X or of its arrays). Sparse rows are checked in slices, so the
    check needs a few MiB beyond the result, whatever the size of X.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A NumPy array, a JAX array, nested lists, a scipy.sparse matrix or array in any
        format, or a 2-D ``jax.experimental.sparse.BCOO``. Boolean and integer values are
        accepted and cast to float (a binary document-term matrix is a valid input).
    normalize : bool, default=True
        If True, rows are rescaled to unit Euclidean norm. If False, every row must
        already have ``|norm - 1| <= tol``, otherwise a ``ValueError`` names the first row
        that does not.
    name : str, default="X"
        The argument name used in error messages.
    min_rows : int, default=1
        The smallest acceptable number of rows (e.g. the number of mixture components).
    min_rows_name : str or None, default=None
        What requires ``min_rows`` rows, for the message: with ``"n_components"`` it
        reads "X has 3 rows, fewer than n_components=4".
    dtype : floating dtype or None, default=None
        The dtype of the result; None means float64. Norms are always computed and the
        rows divided in float64, then cast, so float32 output has unit rows to about
        1e-7.
    tol : float, default=UNIT_NORM_TOL (1e-6)
        Tolerance on ``|norm - 1|`` when ``normalize=False``; the target norm is 1, so it
        is also relative. 1e-6 accepts data normalised in float32 by other tools (see
        :data:`UNIT_NORM_TOL`).
    copy : bool, default=True
        With False, input that already passes as it is is not copied: a float64 CSR matrix
        in canonical form without explicit zeros, or a C-ordered float64 NumPy array, with
        unit rows (within :data:`SHARE_NORM_TOL`, a few ulps, when ``normalize=True``). The
        result is then a read-only view of X (a new CSR object whose arrays are read-only
        views of X's). The estimators use this so that fitting normalised data holds one
        copy of it, not two. Other input is copied as with True.

    Returns
    -------
    X_checked : ndarray or scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Dense input gives a new C-contiguous NumPy array of ``dtype``. Sparse input
        stays sparse (it is never densified): a new CSR matrix of ``dtype`` in canonical
        form (indices sorted, duplicates summed, explicit zeros removed).

    Raises
    ------
    TypeError
        If ``X`` is not numeric (strings, objects, complex numbers) or ``dtype`` is not a
        floating dtype.
    ValueError
        If ``X`` fails one of the checks above.

    See Also
    --------
    to_device : turn the result into a JAX array or BCOO matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.data import check_directional
    >>> check_directional([[3.0, 4.0], [0.0, 2.0]])
    array([[0.6, 0.8],
           [0. , 1. ]])
    >>> check_directional([[3.0, 4.0], [0.0, 0.0]])
    Traceback (most recent call last):
        ...
    ValueError: X has an all-zero row: row 1 (a direction needs a nonzero vector)
    >>> import scipy.sparse
    >>> Xs = check_directional(scipy.sparse.coo_matrix([[0.0, 2.0], [1.0, 1.0]]))
    >>> Xs.format, Xs.toarray().round(4).tolist()
    ('csr', [[0.0, 1.0], [0.7071, 0.7071]])
    """
    out_dtype = np.dtype(np.float64 if dtype is None else dtype)
    if out_dtype.kind != "f":
        raise TypeError(f"dtype must be a floating dtype, got {out_dtype}")

    if isinstance(X, jsparse.BCOO):
        X = _bcoo_to_scipy(X)

    if scipy.sparse.issparse(X):
        _check_numeric_dtype(X.dtype, name)
        _check_shape(X.shape, name, min_rows, min_rows_name)
        if not copy and out_dtype == np.float64:
            shared = _shared_csr(X, name, normalize, tol)
            if shared is not None:
                return shared
        # A new float64 CSR matrix: converting copies, copy=True covers CSR input.
        Xc = scipy.sparse.csr_matrix(X, dtype=np.float64, copy=True)
        Xc.sum_duplicates()  # also sorts the indices (canonical format)
        Xc.eliminate_zeros()
        norms = _check_csr_rows(Xc, name)
        _check_norms(norms, name, normalize, tol)
        if normalize:
            for start, stop, rows in _row_slices(Xc.indptr):
                Xc.data[Xc.indptr[start] : Xc.indptr[stop]] /= norms[start:stop][rows]
        return Xc.astype(out_dtype, copy=False)

    try:
        arr = np.asarray(X)
    except (ValueError, TypeError) as err:  # ragged nested lists, unconvertible objects
        raise ValueError(f"{name} could not be converted to an array: {err}") from err
    _check_numeric_dtype(arr.dtype, name)
    _check_shape(arr.shape, name, min_rows, min_rows_name)
    in_place = arr.dtype == np.float64 and arr.flags.c_contiguous
    # np.array(..., copy=True) always allocates: the caller's buffer is never touched, even
    # when X is already a float64 array (np.asarray would return it as is). A C-ordered
    # float64 X is checked as it is (the same norms, bitwise) before deciding to copy it.
    Xd = arr if in_place else np.array(arr, dtype=np.float64, copy=True, order="C")
    norms = _check_dense_rows(Xd, name)
    _check_norms(norms, name, normalize, tol)
    if in_place:
        if not copy and out_dtype == np.float64 and _unit_rows(norms, normalize, tol):
            shared = arr.view()
            shared.flags.writeable = False
            return shared
        Xd = np.array(arr, copy=True)
    if normalize:
        Xd /= norms[:, None]
    return Xd.astype(out_dtype, copy=False)


def to_device(X: np.ndarray | scipy.sparse.spmatrix | scipy.sparse.sparray, dtype: Any = None):
    """Move checked data to JAX: a dense array, or a BCOO matrix for sparse input.

    Meant for the output of :func:`check_directional`; it does no checking itself. Sparse
    input becomes ``jax.experimental.sparse.BCOO`` in row-major order, flagged
    ``indices_sorted=True`` and ``unique_indices=True`` (which the canonical CSR form
    guarantees) so that JAX's sparse kernels can use sorted segment sums
    (docs/design.md section 5). Call it inside ``jax.enable_x64(True)`` to get float64 values.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features)
        Checked data.
    dtype : dtype or None, default=None
        The dtype of the values on the device; None keeps the dtype of ``X``.

    Returns
    -------
    jax.Array or jax.experimental.sparse.BCOO of shape (n_samples, n_features)
        Indices of the BCOO matrix are int32, shape (nnz, 2).

    Examples
    --------
    >>> import jax, scipy.sparse
    >>> from bayesvmf.data import check_directional, to_device
    >>> with jax.enable_x64(True):
    ...     Xd = to_device(check_directional(scipy.sparse.eye(3, format="csr")))
    ...     print(type(Xd).__name__, Xd.shape, Xd.nse, Xd.dtype)
    BCOO (3, 3) 3 float64
    """
    if scipy.sparse.issparse(X):
        csr = scipy.sparse.csr_matrix(X)  # no copy for CSR input
        if not csr.has_canonical_format:
            csr = csr.copy()
            csr.sum_duplicates()
        data = csr.data if dtype is None else csr.data.astype(dtype)
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int32), np.diff(csr.indptr))
        indices = np.column_stack([rows, csr.indices.astype(np.int32)])
        return jsparse.BCOO(
            (jnp.asarray(data), jnp.asarray(indices)),
            shape=csr.shape,
            indices_sorted=True,
            unique_indices=True,
        )
    return jnp.asarray(X, dtype=dtype)
