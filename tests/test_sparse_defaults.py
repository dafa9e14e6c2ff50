"""SparseVMFMixture's defaults of issue 19 and its degeneracy guards.

Hard spherical k-means passes before EM, the relative convergence test, float32 data products
and greedy k-means++ seeding (the defaults), checked against NumPy; the guards of
bayesvmf._guards on the kept run (a near-uniform background component), one warning per fit.
"""

import json
import re
import textwrap
import warnings

import jax
import numpy as np
import pytest
from conftest import TWO_CPU_DEVICES, numpy_lloyd, run_python
from sklearn.metrics import adjusted_rand_score

from bayesvmf import _data
from bayesvmf.exceptions import DegenerateRunWarning
from bayesvmf.models import SparseVMFMixture
from bayesvmf.models import sparse as S


def blobs(rng, n_per=60, d=5, k=3, spread=0.15):
    centres = rng.normal(size=(k, d))
    X = np.vstack([c + spread * rng.normal(size=(n_per, d)) for c in centres])
    return X / np.linalg.norm(X, axis=1, keepdims=True), np.repeat(np.arange(k), n_per)


@pytest.fixture(scope="module")
def small():
    return blobs(np.random.default_rng(7))


def test_spherical_kmeans_equals_numpy_lloyd(small):
    X, _ = small
    # seeds near one another, so that the passes have work to do before they settle
    seeds = X[[0, 1, 2]]
    with jax.enable_x64(True):
        data = _data.to_device(X)
        for passes in (1, 2, 50):
            out = np.asarray(S.spherical_kmeans(data, seeds, np.int64(passes)))
            expected = numpy_lloyd(X, seeds, passes)
            np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
        # it stopped early: 50 passes give the fixed point, which one more pass keeps
        np.testing.assert_allclose(numpy_lloyd(X, out, 1), out, rtol=1e-12, atol=1e-14)
    assert not np.allclose(numpy_lloyd(X, seeds, 1), seeds)


def test_settled_is_absolute_plus_relative():
    with jax.enable_x64(True):
        bound = np.array([400.0, 400.0, -2.0, 1.0])
        previous = np.array([400.0 - 4e-4, 400.0 - 6e-4, -2.0 - 1e-6, 1.0 - 3e-6])
        got = np.asarray(S.settled(bound, previous, 1e-6, 1e-6, 0.0))
        # relative to the gain over the uniform log density (399.8 for the first row)
        shifted = np.asarray(S.settled(bound, previous, 0.0, 1e-3, np.array([399.8, 0, 0, 0])))
    # 4e-4 <= 1e-6 + 4e-4; 6e-4 > 4.01e-4; |-2| gives 3e-6 >= 1e-6; 3e-6 > 2e-6
    assert got.tolist() == [True, False, True, False]
    # 4e-4 > 1e-3 * 0.2; 6e-4 <= 0.4; 1e-6 <= 2e-3; 3e-6 <= 1e-3
    assert shifted.tolist() == [False, True, True, True]


def test_defaults_fit_and_new_parameters(small):
    X, y = small
    model = SparseVMFMixture(3, random_state=0).fit(X)
    assert (model.n_init, model.init, model.dtype) == (1, "greedy-spherical-kmeans++", "mixed")
    assert (model.kmeans_iter, model.rtol) == (20, 1e-5)
    assert model.converged_ and len(model.run_n_iter_) == 1
    assert adjusted_rand_score(y, model.labels_) == 1.0
    # the relative test stops no later than the absolute one from the same start
    strict = SparseVMFMixture(3, random_state=0, rtol=0.0, tol=1e-12).fit(X)
    assert model.n_iter_ <= strict.n_iter_
    np.testing.assert_allclose(model.lower_bound_, strict.lower_bound_, rtol=1e-6)
    # healthy fit: the guards' attributes
    assert model.n_occupied_components_ == 3 and model.n_degenerate_restarts_ == 0
    assert model.degenerate_components_.tolist() == []
    np.testing.assert_allclose(model.largest_share_, model.weights_.max(), rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"rtol": -1.0},
            "The 'rtol' parameter of SparseVMFMixture must be a float in the range [0.0, inf). "
            "Got -1.0 instead.",
        ),
        (
            {"kmeans_iter": 2.5},
            "The 'kmeans_iter' parameter of SparseVMFMixture must be an int in the range "
            "[0, inf). Got 2.5 instead.",
        ),
    ],
)
def test_bad_new_parameters(small, kwargs, message):
    X, _ = small
    copy = X.copy()
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        SparseVMFMixture(3, **kwargs).fit(X)
    np.testing.assert_array_equal(X, copy)


def background_data(rng, d=10):
    """Three tight clusters (40% of the rows) in near-uniform noise (60%)."""
    centres = np.eye(d)[:3]
    tight = np.vstack([c + 0.05 * rng.normal(size=(40, d)) for c in centres])
    noise = rng.normal(size=(180, d))
    X = np.vstack([tight, noise])
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_background_component_is_diagnosed_once():
    X = background_data(np.random.default_rng(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = SparseVMFMixture(4, random_state=0).fit(X)
    degenerate = [w for w in caught if issubclass(w.category, DegenerateRunWarning)]
    assert len(degenerate) == 1, [str(w.message) for w in caught]
    text = str(degenerate[0].message)
    assert text.startswith("SparseVMFMixture: component ")
    assert "(a near-uniform background component)" in text
    assert "Try shared_kappa=True" in text
    k = int(np.argmin(model.concentrations_))
    assert model.degenerate_components_.tolist() == [k]
    assert model.weights_[k] > 0.5
    np.testing.assert_allclose(model.largest_share_, model.weights_[k], rtol=1e-6)
    assert model.n_occupied_components_ == 4
    assert model.n_degenerate_restarts_ == 1
    # one concentration for all: no background, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateRunWarning)
        shared = SparseVMFMixture(4, shared_kappa=True, random_state=0).fit(X)
    assert shared.n_degenerate_restarts_ == 0


def test_collapsed_runs_warn_once(small):
    X, _ = small
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = SparseVMFMixture(3, n_init=2, kappa_max=0.5, random_state=0).fit(X)
    degenerate = [w for w in caught if issubclass(w.category, DegenerateRunWarning)]
    assert len(degenerate) == 1
    assert "all 2 runs degenerated" in str(degenerate[0].message)
    assert model.n_degenerate_restarts_ == 2
    assert model.degenerate_components_.tolist() == [0, 1, 2]  # every kappa at the cap


SHARDED_DEFAULTS = textwrap.dedent(
    """
    import json
    import jax, numpy as np, scipy.sparse as sp
    from bayesvmf.models import SparseVMFMixture

    rng = np.random.default_rng(3)
    n, d, K = 101, 30, 3  # odd n: the second device holds a padding row
    centres = 4 * rng.normal(size=(K, d))
    X = np.abs(centres[rng.integers(0, K, n)] + rng.normal(size=(n, d)))
    X = sp.csr_matrix(np.where(X > 1.0, X, 0.0))
    # dense rows, more than the 4096 that seeding draws from: seeds and their refinement
    # on a subsample gathered from both devices
    n_dense = 4201
    Xd = np.abs(centres[rng.integers(0, K, n_dense), :8] + rng.normal(size=(n_dense, 8)))
    out = {"n_devices": len(jax.devices())}
    for layout, data in (("sparse", X), ("dense", Xd)):
        for name, devices in (("one", None), ("two", 2)):
            m = SparseVMFMixture(K, random_state=0, devices=devices)  # the defaults
            out[layout + "-" + name] = {
                "labels": m.fit_predict(data).tolist(), "mu": m.mean_directions_.tolist(),
                "kappa": m.concentrations_.tolist(), "n_iter": m.n_iter_}
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def sharded_defaults():
    """Default fits on one device and on two forced devices (sparse rows; dense rows)."""
    stdout = run_python(SHARDED_DEFAULTS, env=TWO_CPU_DEVICES, timeout=300)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["n_devices"] == 2
    return out


@pytest.mark.parametrize("layout", ["sparse", "dense"])
def test_defaults_over_two_devices_equal_one_device(sharded_defaults, layout):
    """The hard k-means passes inside the sharded program (a while_loop whose test reads
    statistics summed over devices) finish and give the one-device fit: float32 products
    summed in another order, so the parameters agree to float32 accuracy. The dense rows
    (4,201) are seeded from a subsample of 4,096 rows, gathered from both devices, where the
    seeds are refined first."""
    one, two = sharded_defaults[layout + "-one"], sharded_defaults[layout + "-two"]
    assert one["labels"] == two["labels"] and len(set(one["labels"])) == 3
    assert one["n_iter"] == two["n_iter"]
    np.testing.assert_allclose(two["mu"], one["mu"], atol=1e-5)
    np.testing.assert_allclose(two["kappa"], one["kappa"], rtol=1e-4)


def four_axes(rng, n_per=40, d=6, spread=0.1):
    """Four tight clusters around the first four axes of R^d, unit rows, with labels."""
    X = np.vstack([np.eye(d)[k] + spread * rng.normal(size=(n_per, d)) for k in range(4)])
    return X / np.linalg.norm(X, axis=1, keepdims=True), np.repeat(np.arange(4), n_per)


def stuck_directions(X, y):
    """Two directions in cluster 0 (its halves), one for 1, one for clusters 2 and 3 together:
    the local optimum of a seeding with two seeds in cluster 0 and none in cluster 3."""
    a = X[y == 0]
    side = a[:, 1] > np.median(a[:, 1])
    rows = [a[side].sum(0), a[~side].sum(0), X[y == 1].sum(0), X[(y == 2) | (y == 3)].sum(0)]
    return np.array([r / np.linalg.norm(r) for r in rows])


@pytest.mark.parametrize("sparse", [False, True])
def test_split_merge_leaves_a_seeding_local_optimum(sparse):
    import scipy.sparse as sp

    X, y = four_axes(np.random.default_rng(3))
    with jax.enable_x64(True):
        data = _data.to_device(sp.csr_matrix(X) if sparse else X)
        # Lloyd's passes alone keep the local optimum (it is a fixed point)
        lloyd = np.asarray(S.spherical_kmeans(data, stuck_directions(X, y), np.int64(50)))
        stuck = np.argmax(X @ lloyd.T, axis=1)
        assert adjusted_rand_score(y, stuck) < 0.8
        gains, halves, resultant, counts = (
            np.asarray(a) for a in S.split_gains(data, jax.numpy.asarray(lloyd))
        )
        mu, moves = S.split_merge(data, jax.numpy.asarray(lloyd), np.int64(50))
        mu = np.asarray(mu)
    # the direction covering clusters 2 and 3 gains most from a split, into exactly them
    merged = int(np.bincount(stuck[y >= 2]).argmax())
    assert int(np.argmax(gains)) == merged
    np.testing.assert_allclose(halves.sum(axis=1), resultant, atol=1e-12)
    np.testing.assert_allclose(
        gains, np.linalg.norm(halves, axis=-1).sum(axis=1) - np.linalg.norm(resultant, axis=-1)
    )
    np.testing.assert_allclose(counts.sum(), len(X))
    # one merge of cluster 0's halves and that split reach the true partition
    assert int(moves) == 1
    assert adjusted_rand_score(y, np.argmax(X @ mu.T, axis=1)) == 1.0
    before = np.sum(np.max(X @ lloyd.T, axis=1))
    assert np.sum(np.max(X @ mu.T, axis=1)) > before + 1.0


def test_split_merge_keeps_a_good_optimum():
    X, y = four_axes(np.random.default_rng(4))
    good = np.array([X[y == k].sum(0) for k in range(4)])
    good /= np.linalg.norm(good, axis=1, keepdims=True)
    with jax.enable_x64(True):
        data = _data.to_device(X)
        good = np.asarray(S.spherical_kmeans(data, good, np.int64(50)))
        mu, moves = S.split_merge(data, jax.numpy.asarray(good), np.int64(50))
    # merging two true clusters loses more than any split of one gains: no move
    assert int(moves) == 0
    np.testing.assert_array_equal(np.asarray(mu), good)


@pytest.mark.parametrize("sparse", [False, True])
def test_fits_seeded_from_a_subsample_find_the_clusters_without_recompiling(sparse, monkeypatch):
    """4,400 rows (more than the 4,096 that seeding draws from, dense rows inside the
    program, sparse ones on the host): the subsampled start finds all eight clusters, and a
    fit with another seed (another subsample) runs the programs compiled for the first.
    The split-and-merge moves are made on the subsample only (_parallel.refine), in
    SparseVMFMixture's start and in B- and T-vMFmix's; on 1,000 rows, on all of them."""
    import scipy.sparse as sp

    from bayesvmf import _mixture, _parallel, _seeding

    moved_on = []  # the rows of the data of every split_merge traced
    split_merge = _parallel.split_merge

    def spy_moves(data, mu, max_passes):
        moved_on.append(data.shape[0])
        return split_merge(data, mu, max_passes)

    monkeypatch.setattr(_parallel, "split_merge", spy_moves)
    drawn = []  # the number of rows of every subsample drawn
    for name in ("seeding_sample", "host_seeding_sample"):
        original = getattr(_seeding, name)

        def spy(key, data, k, original=original):
            sample = original(key, data, k)
            if sample is not None and sample is not data:
                drawn.append(sample.shape[0])
            return sample

        monkeypatch.setattr(_seeding, name, spy)
    rng = np.random.default_rng(11)
    centres = np.abs(rng.normal(size=(8, 40))) * (rng.random((8, 40)) < 0.3) + 0.02
    y = rng.integers(0, 8, 4400)
    X = np.abs(centres[y] + 0.05 * rng.normal(size=(4400, 40))) * (centres[y] > 0.05)
    X = sp.csr_matrix(X) if sparse else X
    first = SparseVMFMixture(8, random_state=0).fit(X)
    if sparse and jax.default_backend() != "cpu":
        pytest.skip("the accelerator's sparse kernel seeds on all rows")
    assert drawn and set(drawn) == {4096}
    assert adjusted_rand_score(y, first.labels_) == 1.0
    assert set(moved_on) == {4096}
    before = dict(_mixture.TRACE_COUNTS)
    second = SparseVMFMixture(8, random_state=1).fit(X)
    assert adjusted_rand_score(y, second.labels_) == 1.0
    assert {k: v for k, v in _mixture.TRACE_COUNTS.items() if v != before.get(k)} == {}
    if not sparse:  # the start of B- and T-vMFmix
        moved_on.clear()
        with jax.enable_x64(True):
            mu = jax.jit(_parallel.initial_directions, static_argnums=(2, 3))(
                jax.random.PRNGKey(0), _data.to_device(X), 8, "greedy-spherical-kmeans++", 20
            )
        assert adjusted_rand_score(y, np.argmax(X @ np.asarray(mu).T, axis=1)) == 1.0
        assert set(moved_on) == {4096}
    moved_on.clear()
    SparseVMFMixture(8, random_state=0).fit(X[:1000])
    assert set(moved_on) == {1000}


def test_split_merge_reseeds_an_empty_cluster():
    """A direction far from every row (a seed no row is closest to) has an empty cluster,
    and one direction covers the true clusters 2 and 3: Lloyd's passes keep both (an empty
    cluster keeps its direction). Merging the empty cluster loses nothing, so the moves
    reseed it by splitting the shared cluster: the degenerate start is repaired before EM or
    VI (where a reseed would break the monotone bound, so none is made there)."""
    X, y = four_axes(np.random.default_rng(5))
    mu = np.array([X[y == 0].sum(0), X[y == 1].sum(0), X[y >= 2].sum(0), np.eye(6)[5]])
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    with jax.enable_x64(True):
        data = _data.to_device(X)
        lloyd = np.asarray(S.spherical_kmeans(data, mu, np.int64(50)))
        assert np.bincount(np.argmax(X @ lloyd.T, axis=1), minlength=4)[3] == 0  # empty
        moved, moves = S.split_merge(data, jax.numpy.asarray(lloyd), np.int64(50))
    assert int(moves) >= 1
    assert adjusted_rand_score(y, np.argmax(X @ np.asarray(moved).T, axis=1)) == 1.0
