"""bayesvmf.compare: held-out comparison from shared initial assignments; init labels in EM."""

import json
import math

import numpy as np
import pytest
import scipy.optimize
import scipy.special
from matplotlib.figure import Figure
from sklearn.model_selection import train_test_split

from bayesvmf.compare import Comparison, compare, shared_initial_labels
from bayesvmf.datasets import load_docstring_corpus
from bayesvmf.models import SparseVMFMixture


class Recorder:
    """A minimal estimator: records its init, scores rows by a known per-seed constant."""

    def __init__(self, n_components=3, init="own", random_state=None, offset=0.0):
        self.n_components = n_components
        self.init = init
        self.random_state = random_state
        self.offset = offset

    def get_params(self, deep=True):
        return {
            "n_components": self.n_components,
            "init": self.init,
            "random_state": self.random_state,
            "offset": self.offset,
        }

    def fit(self, X):
        self.seen_init_ = self.init
        return self

    def score_samples(self, X):
        # a per-seed value, so that means and standard errors have known answers
        return np.full(X.shape[0], self.offset + self.random_state**2)

    def predict(self, X):
        return np.arange(X.shape[0]) % self.n_components


class NoParams:
    """An estimator without get_params and without init (deep-copied, random_state set)."""

    def __init__(self):
        self.random_state = None

    def fit(self, X):
        return self

    def score_samples(self, X):
        return np.full(X.shape[0], -float(self.random_state))

    def predict(self, X):
        return np.zeros(X.shape[0], int)


@pytest.fixture(scope="module")
def blobs():
    # three well-separated clouds of directions around the first axes of R^6 (NumPy only:
    # the point is the comparison machinery, not the sampler)
    rng = np.random.default_rng(1)
    labels = rng.integers(3, size=150)
    X = np.eye(6)[labels] + 0.2 * rng.standard_normal((150, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X[:100], X[100:], labels[100:]


def test_shared_initial_labels_are_reproducible_and_cover_every_component(blobs):
    X_train = blobs[0]
    a = shared_initial_labels(X_train, 3, seed=0)
    assert a.shape == (100,) and a.dtype == np.int64
    np.testing.assert_array_equal(a, shared_initial_labels(X_train, 3, seed=0))
    assert np.bincount(a, minlength=3).min() > 0
    assert not np.array_equal(a, shared_initial_labels(X_train, 3, seed=1))
    with pytest.raises(ValueError, match="n_components must be an int >= 1, got 0"):
        shared_initial_labels(X_train, 0)


def test_every_model_with_init_gets_the_same_assignments(blobs):
    X_train, X_test, y_test = blobs
    models = {"a": Recorder(), "b": Recorder(offset=1.0), "c": NoParams()}
    seen = {}
    original = Recorder.fit

    def spy(self, X):
        seen.setdefault(self.random_state, []).append(np.asarray(self.init))
        return original(self, X)

    Recorder.fit = spy
    try:
        table = compare(models, X_train, X_test, y_test, seeds=[3, 4])
    finally:
        Recorder.fit = original
    for seed in (3, 4):
        expected = shared_initial_labels(X_train, 3, seed=seed)
        assert len(seen[seed]) == 2
        for got in seen[seed]:
            np.testing.assert_array_equal(got, expected)
    assert table.shared_init == (True, True, False)
    assert models["a"].init == "own"  # the templates are not touched


def test_a_data_parallel_model_starts_on_its_own(blobs):
    """devices= set: a label array cannot be sharded, so that model keeps its own init."""
    X_train, X_test, y_test = blobs
    models = {
        "one": SparseVMFMixture(3, n_init=1),
        "sharded": SparseVMFMixture(3, n_init=1, devices=1),
    }
    table = compare(models, X_train, X_test, y_test, seeds=[0])
    assert table.shared_init == (True, False)
    assert np.all(np.isfinite(table.log_likelihood))


def test_table_numbers(blobs):
    X_train, X_test, y_test = blobs
    table = compare(
        {"a": Recorder(), "b": Recorder(offset=1.0), "c": NoParams()},
        X_train,
        X_test,
        y_test,
        seeds=[1, 2, 4],
        baseline="b",
    )
    rows = {r["model"]: r for r in table.rows()}
    per_seed = np.array([1.0, 4.0, 16.0])
    assert rows["a"]["log_likelihood"] == pytest.approx(per_seed.mean())
    assert rows["a"]["log_likelihood_se"] == pytest.approx(per_seed.std(ddof=1) / math.sqrt(3))
    # paired with the baseline b = a + 1: the difference is exactly -1 on every seed
    assert rows["a"]["difference"] == pytest.approx(-1.0)
    assert rows["a"]["difference_se"] == pytest.approx(0.0)
    diff_c = -np.array([1.0, 2.0, 4.0]) - (per_seed + 1.0)
    assert rows["c"]["difference"] == pytest.approx(diff_c.mean())
    assert rows["c"]["difference_se"] == pytest.approx(diff_c.std(ddof=1) / math.sqrt(3))
    assert math.isnan(rows["b"]["difference_se"])
    assert table.best == "b"
    # NMI/ARI of the fixed predictions, computed independently
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    pred = np.arange(len(y_test)) % 3
    assert rows["a"]["nmi"] == pytest.approx(normalized_mutual_info_score(y_test, pred))
    assert rows["a"]["ari"] == pytest.approx(adjusted_rand_score(y_test, pred))
    text = table.to_markdown()
    assert "| a |" in text and "diff vs b" in text
    assert "a is worse than b by 1 nats" in text and "the seeds agree" in text
    json.dumps(table.to_dict(), allow_nan=False)  # strict JSON
    fig = table.plot()
    assert isinstance(fig, Figure) and len(fig.axes) == 3


def test_one_seed_has_no_standard_error(blobs):
    X_train, X_test, _ = blobs
    table = compare({"a": Recorder(), "b": Recorder(offset=2.0)}, X_train, X_test, seeds=[1])
    assert table.nmi is None
    assert math.isnan(table.rows()[1]["difference_se"])
    assert "one seed: no standard error" in table.to_markdown()
    assert len(table.plot().axes) == 2


def test_bad_arguments(blobs):
    X_train, X_test, y_test = blobs
    models = {"a": Recorder()}
    with pytest.raises(ValueError, match="models must be a non-empty dict"):
        compare({}, X_train, X_test)
    with pytest.raises(ValueError, match="X_train has 6 columns but X_test has 5"):
        compare(models, X_train, X_test[:, :5])
    with pytest.raises(ValueError, match=r"y_test must have one label per test row, shape \(50,\)"):
        compare(models, X_train, X_test, y_test[:10])
    with pytest.raises(ValueError, match="baseline 'z' is not one of the models"):
        compare(models, X_train, X_test, baseline="z")
    with pytest.raises(TypeError, match=r"models\['x'\] \(object\) has no fit\(\)"):
        compare({"x": object()}, X_train, X_test)
    with pytest.raises(ValueError, match="do not agree on n_components"):
        compare({"a": Recorder(3), "b": Recorder(4)}, X_train, X_test)
    with pytest.raises(ValueError, match="init_labels must hold one integer label per training"):
        compare(models, X_train, X_test, init_labels=np.zeros(3, int))
    with pytest.raises(ValueError, match="X_test has a NaN or infinite value in row 0"):
        bad = X_test.copy()
        bad[0, 0] = np.nan
        compare(models, X_train, bad)
    # a NaN label is refused before any fit (sklearn's bare message came after every fit)
    labels = y_test.astype(float)
    labels[7] = np.nan
    with pytest.raises(ValueError, match=r"^y_test has a NaN label in row 7\.$"):
        compare({"a": Unfittable()}, X_train, X_test, labels)


class Unfittable(Recorder):
    def fit(self, X):
        raise AssertionError("compare fitted before checking its arguments")


class NaNScores(Recorder):
    def score_samples(self, X):
        return np.full(X.shape[0], np.nan)


def test_a_nan_score_is_refused_not_ranked(blobs):
    """A model scoring NaN was kept, and argmax ranked it best."""
    X_train, X_test, _ = blobs
    models = {"fine": Recorder(), "broken": NaNScores()}
    message = r"^model 'broken', seed 0: NaNScores\.score_samples gave NaN for row 0 of X"
    with pytest.raises(ValueError, match=message):
        compare(models, X_train, X_test, seeds=[0, 1])


# ---- init labels in SparseVMFMixture ---------------------------------------------------------


def _kappa_reference(d, rbar):
    """Solve A_d(kappa) = rbar with SciPy's scaled Bessel functions (independent of bayesvmf)."""

    def a_d(kappa):
        return scipy.special.ive(d / 2, kappa) / scipy.special.ive(d / 2 - 1, kappa)

    return scipy.optimize.brentq(lambda k: a_d(k) - rbar, 1e-8, 1e4, xtol=1e-12, rtol=1e-14)


def test_sparse_starts_from_the_given_partition(blobs):
    X = blobs[0]
    labels = shared_initial_labels(X, 3, seed=0)
    before = labels.copy()
    # float64 products: the parameters of the start to 1e-10 (the default "mixed" runs them
    # in float32)
    model = SparseVMFMixture(3, init=labels, max_iter=0, dtype="float64").fit(X)
    np.testing.assert_array_equal(labels, before)  # the caller's labels are not modified
    counts = np.bincount(labels, minlength=3)
    np.testing.assert_allclose(model.weights_, counts / len(labels), rtol=1e-12)
    for k in range(3):
        resultant = X[labels == k].sum(axis=0)
        norm = np.linalg.norm(resultant)
        np.testing.assert_allclose(model.mean_directions_[k], resultant / norm, rtol=1e-10)
        kappa = _kappa_reference(X.shape[1], norm / counts[k])
        np.testing.assert_allclose(model.concentrations_[k], kappa, rtol=1e-8)
    # EM from the partition: one run, and the same result every time (no randomness left)
    a = SparseVMFMixture(3, init=labels, random_state=0).fit(X)
    b = SparseVMFMixture(3, init=list(labels), n_init=5, random_state=7).fit(X)
    assert a.run_statuses_.shape == (1,)
    np.testing.assert_array_equal(a.mean_directions_, b.mean_directions_)


@pytest.mark.parametrize(
    ("init", "message"),
    [
        (np.zeros(5, int), r"init labels must have shape \(n_samples,\) = \(100,\), got shape"),
        (np.full(100, 3), r"init labels must be in \[0, n_components=3\); row 0 has label 3"),
        (np.r_[np.zeros(50, int), np.ones(50, int)], "init labels leave component 2 empty"),
        (np.zeros(100), "init labels must be integers, got an array of dtype float64"),
        ("kmeans", "The 'init' parameter of SparseVMFMixture must be a str among"),
    ],
)
def test_sparse_bad_init_labels(blobs, init, message):
    with pytest.raises(ValueError, match=message):
        SparseVMFMixture(3, init=init).fit(blobs[0])


# ---- the real thing: the docstring corpus ---------------------------------------------------


@pytest.fixture(scope="module")
def corpus_split(tmp_path_factory):
    corpus = load_docstring_corpus(cache=tmp_path_factory.mktemp("cache"))
    return train_test_split(corpus.X, corpus.y, test_size=0.3, random_state=0, stratify=corpus.y)


def test_compare_on_the_docstring_corpus(corpus_split):
    X_train, X_test, _, y_test = corpus_split
    # the models of the README's example (same split): the suite compiles them once
    table = compare(
        {
            "vMF mixture": SparseVMFMixture(5),
            "same, again": SparseVMFMixture(5),
            "shared kappa": SparseVMFMixture(5, shared_kappa=True),
        },
        X_train,
        X_test,
        y_test,
        seeds=[0, 1],
    )
    assert isinstance(table, Comparison)
    # the same estimator from the same start gives the same fit: a difference of exactly 0
    np.testing.assert_array_equal(table.log_likelihood[0], table.log_likelihood[1])
    assert table.shared_init == (True, True, True)
    # the held-out likelihood is a real score: the fitted mixture beats the uniform
    # distribution on the sphere (log density -log|S^{d-1}|, 7466 at this d) by far
    d = X_train.shape[1]
    log_uniform = math.lgamma(d / 2) - math.log(2) - (d / 2) * math.log(math.pi)
    assert table.log_likelihood.min() > log_uniform + 100
    assert table.nmi.min() > 0.4  # the labels are found (chance is about 0)
