"""Fitting corpora larger than memory: chunked ``.npz`` readers and streamed fits.

A corpus is stored as several ``.npz`` files, each holding a block of rows (documents) with
the same columns: either a scipy.sparse matrix written by ``scipy.sparse.save_npz`` or a
dense array written by ``numpy.savez`` (the array named ``X``, or the only array of the
file). :func:`iter_chunks` reads and validates them one at a time; :func:`fit_streaming`
feeds them to an estimator's ``partial_fit`` (stepwise EM for
:class:`bayesvmf.models.SparseVMFMixture`, stochastic variational inference for
:class:`bayesvmf.models.BayesianVMFMixture`), so memory holds the model and at most two
chunks, never the corpus (DESIGN.md section 6).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Iterator

import numpy as np
import scipy.sparse as sp

from bayesvmf.data import check_directional

__all__ = ["load_chunk", "chunk_rows", "iter_chunks", "fit_streaming"]

#: Arrays of a ``scipy.sparse.save_npz`` file.
_SPARSE_KEYS = {"format", "shape", "data"}


def load_chunk(path) -> np.ndarray | sp.csr_matrix:
    """Read one chunk file: a ``scipy.sparse.save_npz`` matrix or a ``numpy.savez`` array.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npz`` file. A dense file holds the array ``X``, or exactly one array.

    Returns
    -------
    ndarray or scipy.sparse.csr_matrix
        Not yet validated (see :func:`iter_chunks`).

    Raises
    ------
    ValueError
        If the file holds neither a sparse matrix nor one array (nor an array ``X``).
    """
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
        if _SPARSE_KEYS <= keys:
            return sp.csr_matrix(sp.load_npz(path))
        if "X" in keys:
            return npz["X"]
        if len(keys) == 1:
            return npz[keys.pop()]
    raise ValueError(
        f"chunk file {os.fspath(path)!r} holds arrays {sorted(keys)}: expected a "
        "scipy.sparse.save_npz matrix, an array named 'X' or exactly one array."
    )


def chunk_rows(path) -> int:
    """Return the number of rows of a chunk file, read from its header (not its data).

    Parameters
    ----------
    path : str or os.PathLike
        A chunk file (see :func:`load_chunk`).

    Returns
    -------
    int
    """
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
        if _SPARSE_KEYS <= keys:
            return int(npz["shape"][0])
    name = "X" if "X" in keys else (keys.pop() if len(keys) == 1 else None)
    if name is None:
        load_chunk(path)  # raises the error that names the file and its arrays
    with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape = np.lib.format.read_array_header_1_0(member)[0]
        else:
            shape = np.lib.format.read_array_header_2_0(member)[0]
    return int(shape[0])


def iter_chunks(paths: Iterable, normalize: bool = True) -> Iterator:
    """Yield the validated chunks of a corpus stored as several ``.npz`` files, one at a time.

    Each chunk goes through :func:`bayesvmf.data.check_directional` (named after its file in
    error messages); every chunk must have the columns of the first.

    Parameters
    ----------
    paths : iterable of str or os.PathLike
        The chunk files, in order.
    normalize : bool, default True
        Rescale rows to unit norm; with False, non-unit rows raise a ValueError.

    Yields
    ------
    ndarray or scipy.sparse.csr_matrix of shape (n_chunk, n_features)
        Sparse files stay sparse.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np, scipy.sparse as sp
    >>> from bayesvmf.streaming import iter_chunks
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> sp.save_npz(folder / "part0.npz", sp.csr_matrix([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> np.savez(folder / "part1.npz", X=np.array([[1.0, 1.0, 0.0]]))
    >>> [c.shape for c in iter_chunks(sorted(folder.glob("*.npz")))]
    [(2, 3), (1, 3)]
    >>> next(iter_chunks([folder / "part0.npz"])).toarray()
    array([[0.6, 0.8, 0. ],
           [0. , 0. , 1. ]])
    """
    n_features = None
    for path in paths:
        name = os.fspath(path)
        chunk = check_directional(load_chunk(path), normalize=normalize, name=f"chunk {name!r}")
        if n_features is None:
            n_features = chunk.shape[1]
        elif chunk.shape[1] != n_features:
            raise ValueError(
                f"chunk {name!r} has {chunk.shape[1]} columns, but the first chunk has "
                f"{n_features}."
            )
        yield chunk


def fit_streaming(model, paths, n_epochs: int = 1, normalize: bool = True):
    """Fit ``model`` by ``partial_fit`` on the chunks of a corpus, ``n_epochs`` passes.

    The first chunk initialises the model (see the estimator's ``partial_fit``). Every call
    is told the corpus size (the files' row counts, read from their headers by
    :func:`chunk_rows`) as ``n_samples``, so that an l1 penalty weighs against the corpus,
    as in a batch fit, in every pass. A model that was already streamed continues from its
    state.

    Parameters
    ----------
    model : estimator with ``partial_fit(X, n_samples=...)``
        E.g. :class:`bayesvmf.models.SparseVMFMixture` or
        :class:`bayesvmf.models.BayesianVMFMixture` (``inference="vi"``).
    paths : sequence of str or os.PathLike
        The chunk files (read again at every pass).
    n_epochs : int, default 1
        Passes over the corpus.
    normalize : bool, default True
        Passed to :func:`iter_chunks`.

    Returns
    -------
    model
    """
    if isinstance(n_epochs, bool) or not isinstance(n_epochs, int | np.integer) or n_epochs < 1:
        raise ValueError(f"n_epochs must be an int >= 1; got {n_epochs!r}.")
    paths = list(paths)
    if not paths:
        raise ValueError("paths holds no chunk file.")
    corpus_rows = sum(chunk_rows(path) for path in paths)
    for _ in range(int(n_epochs)):
        for chunk in iter_chunks(paths, normalize=normalize):
            model.partial_fit(chunk, n_samples=corpus_rows)
    return model
