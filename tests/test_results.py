import json
import zipfile

import numpy as np
import pytest

from bayesvmf import load, save
from bayesvmf.models import SparseVMFMixture
from bayesvmf.results import FitResult


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal([4, 0, 0], 1, (20, 3)), rng.normal([0, 4, 0], 1, (20, 3))])
    return X, SparseVMFMixture(2, n_init=2, beta=0.3, shared_kappa=True, random_state=0).fit(X)


def test_round_trip_fitted(tmp_path, fitted):
    X, model = fitted
    path = tmp_path / "m.npz"
    save(model, path)
    back = load(path)
    assert type(back) is SparseVMFMixture
    assert back.get_params() == model.get_params()
    for name in model._fitted_attributes:
        assert hasattr(back, name) == hasattr(model, name), name
        if hasattr(model, name):  # (feature_names_in_: only for a DataFrame, below)
            np.testing.assert_array_equal(
                np.asarray(getattr(back, name)), np.asarray(getattr(model, name))
            )
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    assert FitResult.from_estimator(back).lower_bound == model.lower_bound_


@pytest.mark.filterwarnings("ignore::bayesvmf.exceptions.ConvergenceWarning")
def test_feature_names_labels_and_diagnosis_survive_save_and_load(tmp_path):
    """A model fitted on a DataFrame, saved and loaded, refuses the DataFrame with its columns
    reordered, as the saved one does (it lost ``feature_names_in_`` and took it with a
    warning); ``labels_`` and the degeneracy diagnosis load too (they were left out, and
    a path's models never had the names). Found by a helper's audit."""
    pd = pytest.importorskip("pandas")
    from bayesvmf import _guards
    from bayesvmf.models import BayesianVMFMixture, DirichletVMFMixture, KMLEMixture

    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal([4, 0, 0], 1, (20, 3)), rng.normal([0, 4, 0], 1, (20, 3))])
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    reordered = frame[["c", "b", "a"]]
    path = tmp_path / "m.npz"
    models = [
        SparseVMFMixture(2, n_init=1, random_state=0),
        BayesianVMFMixture(2, max_iter=20, random_state=0),
        KMLEMixture(family="vmf", n_components=2, random_state=0),
    ]
    for model in models:
        save(model.fit(frame), path)
        back = load(path)
        assert back.feature_names_in_.dtype == object
        assert back.feature_names_in_.tolist() == ["a", "b", "c"]
        np.testing.assert_array_equal(back.labels_, model.labels_)
        for name in _guards.FITTED_ATTRIBUTES:
            np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
        with pytest.raises(ValueError, match="feature names should match"):
            back.predict(reordered)
    sparse_path = SparseVMFMixture(2, n_init=1, random_state=0).path(frame, max_steps=2)
    with pytest.raises(ValueError, match="feature names should match"):
        sparse_path.model_at(-1).predict(reordered)
    topics = DirichletVMFMixture(2, random_state=0).fit([X[i::8] for i in range(8)])
    save(topics, path)
    back = load(path)
    for name in _guards.FITTED_ATTRIBUTES:
        np.testing.assert_array_equal(getattr(back, name), getattr(topics, name))


def test_a_saved_stream_goes_on_where_it_was(tmp_path):
    """partial_fit after load continues the saved stream, as the model that was saved does
    (the file held no stream: the loaded model started a new one from its chunk and dropped
    the fitted parameters in silence, held-out score -4.7 -> -18.5; a helper's audit)."""
    from bayesvmf.models import BayesianVMFMixture, DirichletVMFMixture

    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal([4, 0, 0], 1, (30, 3)), rng.normal([0, 4, 0], 1, (30, 3))])
    X = X[rng.permutation(60)]
    path = tmp_path / "m.npz"
    for model in (SparseVMFMixture(2, random_state=0), BayesianVMFMixture(2, random_state=0)):
        model.partial_fit(X[:20]).partial_fit(X[20:40])
        save(model, path)
        back = load(path).partial_fit(X[40:])
        model.partial_fit(X[40:])
        assert back.n_steps_ == model.n_steps_ == 2
        assert back.n_samples_seen_ == model.n_samples_seen_ == 60
        np.testing.assert_array_equal(back.mean_directions_, model.mean_directions_)
        np.testing.assert_array_equal(back.weights_, model.weights_)
    docs = [X[i : i + 6] for i in range(0, 60, 6)]
    topics = DirichletVMFMixture(2, random_state=0).partial_fit(docs[:5])
    save(topics, path)
    back = load(path).partial_fit(docs[5:])
    np.testing.assert_array_equal(
        back.mean_directions_, topics.partial_fit(docs[5:]).mean_directions_
    )
    # the record names the stream's classes; one outside the package is refused
    meta = _read_meta(path)
    record = json.loads(meta["scalars"]["stream"])
    record["tree"]["tuple"][1] = {"type": "os:PathLike", "fields": []}
    meta["scalars"]["stream"] = json.dumps(record)
    _rewrite(path, tmp_path / "bad.npz", meta=meta)
    with pytest.raises(ValueError, match="stream type 'os:PathLike' is not of this package"):
        load(tmp_path / "bad.npz")
    # a module of the package that does not exist, and an array the record does not name
    record["tree"]["tuple"][1] = {"type": "bayesvmf.nothing:Nothing", "fields": []}
    meta["scalars"]["stream"] = json.dumps(record)
    _rewrite(path, tmp_path / "bad.npz", meta=meta)
    with pytest.raises(ValueError, match="corrupt stream record: No module named"):
        load(tmp_path / "bad.npz")
    # (a file without digests: with them, the extra entry is refused by name first)
    meta = _read_meta(path)
    meta.pop("digests")
    _rewrite(path, tmp_path / "extra.npz", meta=meta, **{"stream.99": np.zeros(2)})
    with pytest.raises(ValueError, match=r"the stream arrays \['stream.99'\] do not match"):
        load(tmp_path / "extra.npz")


def test_round_trip_unfitted(tmp_path):
    save(SparseVMFMixture(3, beta=1.5), tmp_path / "u.npz")
    back = load(tmp_path / "u.npz")
    assert back.beta == 1.5 and not hasattr(back, "mean_directions_")


def test_file_is_pickle_free(tmp_path, fitted):
    _, model = fitted
    save(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as f:
        meta = json.loads(f["__bayesvmf__"].tobytes())
        assert all(f[name].dtype != object for name in f.files)
    assert meta["class"] == "bayesvmf.models.sparse:SparseVMFMixture"


def test_corrupt_and_foreign_files(tmp_path, fitted):
    _, model = fitted
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="bad.npz: not a readable bayesvmf file"):
        load(bad)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.arange(3))
    with pytest.raises(
        ValueError, match=r"foreign.npz: not a bayesvmf file \(no __bayesvmf__ entry\)."
    ):
        load(foreign)
    bare = tmp_path / "bare.npy"
    np.save(bare, np.arange(3))
    with pytest.raises(ValueError, match=r"bare.npy: not a bayesvmf file \(a bare array"):
        load(bare)
    evil = tmp_path / "evil.npz"
    meta = {
        "format": "bayesvmf",
        "format_version": 1,
        "class": "os:system",
        "params": {},
        "scalars": {},
    }
    np.savez(evil, __bayesvmf__=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with pytest.raises(ValueError, match="refusing to load class 'os:system'"):
        load(evil)
    garbled = tmp_path / "garbled.npz"
    np.savez(garbled, __bayesvmf__=np.frombuffer(b"\xff\xfe{", np.uint8))
    with pytest.raises(ValueError, match="corrupt bayesvmf metadata"):
        load(garbled)
    good = tmp_path / "good.npz"
    save(model, good)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ValueError, match="not a readable bayesvmf file"):
        load(truncated)
    assert zipfile.is_zipfile(good)


def _read_meta(path) -> dict:
    """Return the JSON document of a saved file."""
    with np.load(path, allow_pickle=False) as f:
        return json.loads(f["__bayesvmf__"].tobytes())


def _rewrite(path, out, meta=None, **changes):
    """Copy the npz file ``path`` to ``out`` with entries replaced (None: dropped) and, given
    ``meta``, that JSON document in place of the file's."""
    with np.load(path, allow_pickle=False) as f:
        entries = {name: f[name] for name in f.files}
    if meta is not None:
        changes["__bayesvmf__"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    for name, value in changes.items():
        if value is None:
            entries.pop(name)
        else:
            entries[name] = value
    np.savez(out, **entries)


def test_an_entry_changed_after_saving_is_refused_by_name(tmp_path, fitted):
    X, model = fitted
    good = tmp_path / "good.npz"
    save(model, good)
    with np.load(good) as f:
        weights, mu = f["weights_"], f["mean_directions_"]
    nan_mu = mu.copy()
    nan_mu[0, 0] = np.nan
    edits = {
        "nan": dict(mean_directions_=nan_mu),
        "cut": dict(weights_=weights[:1]),
        "retyped": dict(weights_=weights.astype(np.float32)),
        "flipped": dict(mean_directions_=mu[::-1].copy()),  # same bytes' multiset, moved
    }
    for label, change in edits.items():
        out = tmp_path / f"{label}.npz"
        _rewrite(good, out, **change)
        name = next(iter(change))
        with pytest.raises(ValueError, match=rf"{label}.npz: the entry '{name}' differs"):
            load(out)
    _rewrite(good, tmp_path / "dropped.npz", weights_=None)
    with pytest.raises(ValueError, match="the saved entry 'weights_' is missing"):
        load(tmp_path / "dropped.npz")
    _rewrite(good, tmp_path / "extra.npz", surprise=np.zeros(2))
    with pytest.raises(ValueError, match="the entry 'surprise' was not written by save"):
        load(tmp_path / "extra.npz")
    # a file of an earlier version, without digests, loads as before
    meta = _read_meta(good)
    del meta["digests"]
    _rewrite(good, tmp_path / "old.npz", meta=meta)
    np.testing.assert_array_equal(load(tmp_path / "old.npz").predict(X), model.predict(X))


def test_unreadable_files_are_refused_without_advice_to_unpickle_them(tmp_path):
    garbage = tmp_path / "garbage.bin"  # NumPy takes any unknown file for a pickle
    garbage.write_bytes(b"not a zip at all")
    pickled = tmp_path / "pickled.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for path in (garbage, pickled):
        with pytest.raises(ValueError, match=f"{path.name}: not a readable bayesvmf file") as err:
            load(path)
        assert "allow_pickle" not in str(err.value)
        assert "pickle.load" not in str(err.value)


def test_unsaveable_random_state(tmp_path):
    import jax

    with pytest.raises(ValueError, match="cannot save random_state"):
        save(SparseVMFMixture(2, random_state=jax.random.key(0)), tmp_path / "k.npz")


@pytest.mark.parametrize(
    "random_state",
    [np.random.RandomState(0), np.random.RandomState(np.random.PCG64(1))]
    + [np.random.Generator(getattr(np.random, name)(2)) for name in ("MT19937", "PCG64")]
    + [np.random.Generator(getattr(np.random, name)(3)) for name in ("PCG64DXSM", "Philox")]
    + [np.random.Generator(np.random.SFC64(4))],
    ids=lambda r: (
        f"{type(r).__name__}-{type(r.bit_generator).__name__}"
        if isinstance(r, np.random.Generator)
        else "RandomState"
    ),
)
def test_numpy_random_states_and_array_arguments_are_saved(tmp_path, random_state):
    """A NumPy RandomState or Generator (documented values of random_state) is saved as its
    state, and arrays given as init or mu0 as lists, which the estimators take alike (save
    refused all three; a helper's audit), with every bit generator of NumPy's (the states of
    MT19937, Philox and SFC64 hold arrays, which JSON refused). The loaded generator draws
    what the saved one would have drawn next."""
    from bayesvmf.models import TemporalVMFMixture

    labels = np.arange(12) % 2
    model = SparseVMFMixture(2, init=labels, random_state=random_state)
    save(model, tmp_path / "m.npz")
    back = load(tmp_path / "m.npz")
    assert back.init == labels.tolist()
    assert type(back.random_state) is type(random_state)
    draw = "rand" if isinstance(random_state, np.random.RandomState) else "random"
    np.testing.assert_array_equal(
        getattr(back.random_state, draw)(5), getattr(random_state, draw)(5)
    )
    save(TemporalVMFMixture(2, mu0=np.eye(3)[0]), tmp_path / "t.npz")
    assert load(tmp_path / "t.npz").mu0 == [1.0, 0.0, 0.0]


def test_saved_class_path_survives_a_second_import_of_the_package(monkeypatch):
    """pytest's doctest collection imports models/sparse/__init__.py again as "models.sparse";
    that must not rename the shared classes (files saved afterwards failed to load)."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    for family in ("sparse", "kmle", "dirichlet"):
        importlib.import_module(f"models.{family}")
    assert SparseVMFMixture.__module__ == "bayesvmf.models.sparse"
