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
        np.testing.assert_array_equal(
            np.asarray(getattr(back, name)), np.asarray(getattr(model, name))
        )
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    assert FitResult.from_estimator(back).lower_bound == model.lower_bound_


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


def test_unsaveable_random_state(tmp_path):
    import jax

    with pytest.raises(ValueError, match="cannot save random_state"):
        save(SparseVMFMixture(2, random_state=jax.random.key(0)), tmp_path / "k.npz")


def test_saved_class_path_survives_a_second_import_of_the_package(monkeypatch):
    """pytest's doctest collection imports models/sparse/__init__.py again as "models.sparse";
    that must not rename the shared classes (files saved afterwards failed to load)."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    for family in ("sparse", "kmle", "dirichlet"):
        importlib.import_module(f"models.{family}")
    assert SparseVMFMixture.__module__ == "bayesvmf.models.sparse"
