"""Fitting corpora larger than memory: chunked ``.npz`` readers and streamed fits.

A corpus is stored as several ``.npz`` files, each holding a block of rows (documents) with
the same columns: either a scipy.sparse matrix written by ``scipy.sparse.save_npz`` or a
dense array written by ``numpy.savez`` (the array named ``X``, or the only array of the
file). :func:`iter_chunks` reads and validates them one at a time; :func:`fit_streaming`
feeds them to an estimator's ``partial_fit`` (stepwise EM for
:class:`bayesvmf.models.SparseVMFMixture`, stochastic variational inference for
:class:`bayesvmf.models.BayesianVMFMixture`), so memory holds the model and at most two
chunks, never the corpus (docs/design.md section 6).

A corpus of *sets* of vectors (the documents of :class:`bayesvmf.models.DirichletVMFMixture`)
is stored as document chunks, written by :func:`save_document_chunk`: the vectors of the
chunk's documents one after another (``X``, dense), the number of vectors of each document
(``lengths``) and, optionally, the weight of each vector (``weights``).
:func:`load_document_chunk` reads one back as lists of arrays, and :func:`fit_streaming`
feeds such files to ``DirichletVMFMixture.partial_fit`` (stochastic VI over whole
documents).
"""

from __future__ import annotations

import inspect
import os
import zipfile
from collections.abc import Iterable, Iterator

import numpy as np
import scipy.sparse as sp

from bayesvmf._compile_cache import cached
from bayesvmf.data import check_directional

__all__ = [
    "load_chunk",
    "chunk_rows",
    "iter_chunks",
    "save_document_chunk",
    "load_document_chunk",
    "chunk_documents",
    "fit_streaming",
]

#: Arrays of a ``scipy.sparse.save_npz`` file.
_SPARSE_KEYS = {"format", "shape", "data"}


def _open_npz(path):
    """Open a chunk file with ``np.load`` (no pickle), refusing what is not an .npz archive.

    A bare ``.npy`` array, a damaged file or a path of another type raised NumPy's own
    errors (a context-manager TypeError, advice to unpickle), without the file's name.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"a chunk file must be a str or os.PathLike path; got {path!r}")
    name = os.fspath(path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"chunk file {name!r} is not a readable .npz archive ({exc})") from exc
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(
            f"chunk file {name!r} holds one bare array (.npy): chunks are .npz archives "
            "(numpy.savez, scipy.sparse.save_npz or save_document_chunk)"
        )
    return loaded


#: Arrays of a document chunk (:func:`save_document_chunk`); ``weights`` is optional.
_DOCUMENT_KEYS = {"X", "lengths"}


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
    with _open_npz(path) as npz:
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
    with _open_npz(path) as npz:
        keys = set(npz.files)
        if _SPARSE_KEYS <= keys:
            return int(npz["shape"][0])
    name = "X" if "X" in keys else (keys.pop() if len(keys) == 1 else None)
    if name is None:
        load_chunk(path)  # raises the error that names the file and its arrays
    return _header_shape(path, name)[0]


def _header_shape(path, name: str) -> tuple[int, ...]:
    """Return the shape of the array ``name`` of a ``.npz`` file from its header alone."""
    with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape = np.lib.format.read_array_header_1_0(member)[0]
        else:
            shape = np.lib.format.read_array_header_2_0(member)[0]
    return tuple(int(s) for s in shape)


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
        loaded = load_chunk(path)  # (checks the path first)
        name = os.fspath(path)
        chunk = check_directional(loaded, normalize=normalize, name=f"chunk {name!r}")
        if n_features is None:
            n_features = chunk.shape[1]
        elif chunk.shape[1] != n_features:
            raise ValueError(
                f"chunk {name!r} has {chunk.shape[1]} columns, but the first chunk has "
                f"{n_features}."
            )
        yield chunk


def save_document_chunk(path, docs, weights=None) -> None:
    """Write a chunk of documents (sets of vectors) to ``path`` as one ``.npz`` file.

    Parameters
    ----------
    path : str or os.PathLike
        Destination; NumPy appends ``.npz`` when it is missing.
    docs : list of array-like of shape (n_i, d)
        The documents, each with at least one vector, all with the same d.
    weights : list of array-like of shape (n_i,), optional
        The weight (count) of each vector.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from bayesvmf.streaming import save_document_chunk, load_document_chunk
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "docs0.npz"
    >>> save_document_chunk(path, [np.eye(3)[:2], np.ones((1, 3))])
    >>> docs, weights = load_document_chunk(path)
    >>> [d.shape for d in docs], weights
    ([(2, 3), (1, 3)], None)
    """
    docs = [np.asarray(doc, dtype=np.float64) for doc in docs]
    if not docs:
        raise ValueError("docs is empty: a document chunk needs at least one document.")
    for i, doc in enumerate(docs):
        if doc.ndim != 2 or doc.shape[0] == 0 or doc.shape[1] != docs[0].shape[1]:
            raise ValueError(
                f"docs[{i}] has shape {doc.shape}: every document must be a (n_i, d) array "
                f"with n_i >= 1 and d = {docs[0].shape[-1]} (that of docs[0])."
            )
    arrays = {
        "X": np.concatenate(docs),
        "lengths": np.array([doc.shape[0] for doc in docs], dtype=np.int64),
    }
    if weights is not None:
        if len(weights) != len(docs):
            raise ValueError(
                f"weights has {len(weights)} entries but docs has {len(docs)} documents."
            )
        for i, (w, doc) in enumerate(zip(weights, docs, strict=True)):
            if np.shape(w) != (doc.shape[0],):
                raise ValueError(
                    f"weights[{i}] has shape {np.shape(w)}, expected ({doc.shape[0]},)."
                )
        arrays["weights"] = np.concatenate([np.asarray(w, dtype=np.float64) for w in weights])
    np.savez(path, **arrays)


def load_document_chunk(path) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Read a document chunk written by :func:`save_document_chunk`.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    docs : list of ndarray of shape (n_i, d)
        Views into the file's ``X`` (not yet validated: the estimator checks them).
    weights : list of ndarray of shape (n_i,) or None

    Raises
    ------
    ValueError
        If the file is not a document chunk, or its ``lengths`` do not split ``X``.
    """
    name = os.fspath(path)
    with _open_npz(path) as npz:
        keys = set(npz.files)
        if not _DOCUMENT_KEYS <= keys or not keys <= _DOCUMENT_KEYS | {"weights"}:
            raise ValueError(
                f"chunk file {name!r} holds arrays {sorted(keys)}: a document chunk holds "
                "'X', 'lengths' and optionally 'weights' (see save_document_chunk)."
            )
        X, lengths = npz["X"], npz["lengths"]
        weights = npz["weights"] if "weights" in keys else None
    if X.ndim != 2:
        raise ValueError(f"chunk file {name!r}: X has shape {X.shape}, expected (n, d).")
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or lengths.size == 0:
        raise ValueError(
            f"chunk file {name!r}: lengths must be a non-empty 1-D integer array; got shape "
            f"{lengths.shape}, dtype {lengths.dtype}."
        )
    if (lengths < 1).any():
        i = int(np.flatnonzero(lengths < 1)[0])
        raise ValueError(f"chunk file {name!r}: document {i} has {lengths[i]} vectors (< 1).")
    if int(lengths.sum()) != X.shape[0]:
        raise ValueError(
            f"chunk file {name!r}: lengths add up to {int(lengths.sum())} vectors, but X "
            f"has {X.shape[0]} rows."
        )
    if weights is not None and weights.shape != (X.shape[0],):
        raise ValueError(
            f"chunk file {name!r}: weights has shape {weights.shape}, expected ({X.shape[0]},)."
        )
    cuts = np.cumsum(lengths)[:-1]
    docs = np.split(X, cuts)
    return docs, (None if weights is None else np.split(weights, cuts))


def chunk_documents(path) -> int:
    """Return the number of documents of a document chunk, read from its header."""
    with _open_npz(path) as npz:
        keys = set(npz.files)
    if "lengths" not in keys:
        load_document_chunk(path)  # raises the error that names the file and its arrays
    return _header_shape(path, "lengths")[0]


@cached
def fit_streaming(model, paths, n_epochs: int = 1, normalize: bool = True):
    """Fit ``model`` by ``partial_fit`` on the chunks of a corpus, ``n_epochs`` passes.

    The whole stream is one call of the estimators' compilation cache
    (:func:`bayesvmf._compile_cache.cached`): the warnings of its ``partial_fit`` calls point
    at the line that called ``fit_streaming``, not at this module.

    The first chunk initialises the model (see the estimator's ``partial_fit``). Every call
    is told the corpus size (the files' row counts, read from their headers by
    :func:`chunk_rows`) as ``n_samples``, so that an l1 penalty weighs against the corpus,
    as in a batch fit, in every pass. A model that was already streamed continues from its
    state.

    A model whose ``partial_fit`` takes sets of vectors (``n_sets=``, as
    :class:`bayesvmf.models.DirichletVMFMixture`) gets document chunks
    (:func:`save_document_chunk`): each call receives the chunk's documents and weights and
    the corpus size in documents (:func:`chunk_documents`) as ``n_sets``; the model's own
    ``normalize`` applies.

    Parameters
    ----------
    model : estimator with ``partial_fit(X, n_samples=...)`` or ``partial_fit(docs, weights=...,
        n_sets=...)``
        E.g. :class:`bayesvmf.models.SparseVMFMixture`,
        :class:`bayesvmf.models.BayesianVMFMixture` (``inference="vi"``) or
        :class:`bayesvmf.models.DirichletVMFMixture` (``inference="vem"``).
    paths : sequence of str or os.PathLike
        The chunk files (read again at every pass).
    n_epochs : int, default 1
        Passes over the corpus.
    normalize : bool, default True
        Passed to :func:`iter_chunks` (row chunks only), which rescales the rows once: the
        model's own ``normalize`` is set to False during the stream (its check of unit rows
        still runs) and restored afterwards.

    Returns
    -------
    model

    Raises
    ------
    TypeError, ValueError
        For ``paths`` given as one path, a missing file (FileNotFoundError, an OSError) or
        a file that is not a chunk, before any chunk is fitted (every file's header is read
        first); for a chunk whose values are refused (a NaN, an all-zero row, other
        columns) when it is reached: the chunks before it stay fitted, as with
        ``partial_fit`` called by hand.
    """
    if isinstance(n_epochs, bool) or not isinstance(n_epochs, int | np.integer) or n_epochs < 1:
        raise ValueError(f"n_epochs must be an int >= 1; got {n_epochs!r}.")
    if isinstance(paths, str | os.PathLike):  # (one path was iterated by character)
        raise TypeError(f"paths must be a sequence of chunk files, not one path: {paths!r}")
    paths = list(paths)
    if not paths:
        raise ValueError("paths holds no chunk file.")
    if "n_sets" in inspect.signature(model.partial_fit).parameters:
        corpus_sets = sum(chunk_documents(path) for path in paths)
        for _ in range(int(n_epochs)):
            for path in paths:
                docs, weights = load_document_chunk(path)
                model.partial_fit(docs, weights=weights, n_sets=corpus_sets)
        return model
    corpus_rows = sum(chunk_rows(path) for path in paths)
    # iter_chunks rescales (or checks) the rows once; a model that would rescale them again
    # (normalize=True) moves them by an ulp, which the stochastic steps amplify: it only
    # checks them during the stream, and gets its setting back afterwards
    rescales = bool(model.get_params().get("normalize", False))
    if rescales:
        model.set_params(normalize=False)
    try:
        for _ in range(int(n_epochs)):
            for chunk in iter_chunks(paths, normalize=normalize):
                model.partial_fit(chunk, n_samples=corpus_rows)
    finally:
        if rescales:
            model.set_params(normalize=True)
    return model
