"""scikit-learn compatibility of the estimators (bayesvmf._base, issue 16).

scikit-learn's own estimator checks run over every 2-D estimator in :data:`ESTIMATORS`
(constructed small: one restart, a few iterations, so each check is a short fit); the
checks an estimator cannot pass are listed, with the reason, in
:data:`EXPECTED_FAILED_CHECKS` (at most 6 per estimator). The tests after them use the
estimators the way scikit-learn's tools do: clone, pipelines, grid search, cross-validation,
pickling, DataFrames, NumPy seeds, warnings filters.
"""

import pickle
import re
import subprocess
import sys
import warnings
from numbers import Integral

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer
from sklearn.utils import get_tags
from sklearn.utils._param_validation import Interval, InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

import bayesvmf
from bayesvmf import _base
from bayesvmf.models import (
    BayesianVMFMixture,
    HierarchicalVMFMixture,
    KMLEMixture,
    SparseVMFMixture,
    TemporalVMFMixture,
)

# The checks fit with max_iter=5: not converging is expected there (our ConvergenceWarning
# and DegenerateRunWarning subclass scikit-learn's, so this one filter covers them).
CHECKS_FILTER = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

#: Every 2-D estimator, constructed small. Other estimators are added here with their
#: expected failures in EXPECTED_FAILED_CHECKS.
ESTIMATORS = [
    SparseVMFMixture(2, n_init=1, max_iter=5, random_state=0),
    SparseVMFMixture(2, beta=0.5, n_init=1, max_iter=5, random_state=0),
    # (the random seeding of 2 close rows needs more than 5 iterations to split the
    # blobs of check_clustering with one shared kappa; k-means++ seeds apart)
    SparseVMFMixture(
        2, shared_kappa=True, init="spherical-kmeans++", n_init=1, max_iter=5, random_state=0
    ),
    # the Bayesian family by VI with the bounding scheme of q(kappa) (sec. 3.1.1, the cheaper
    # of the paper's two), two ascent steps on q(kappa) per iteration; 3 components, as
    # check_clustering's 3 blobs (with 2, one component takes every row); H-vMFmix on its
    # default tree (a root over n_components leaves), T-vMFmix on its default time index
    # (every row at time 0; scikit-learn's y, when a check gives one, is the time index)
    BayesianVMFMixture(3, kappa_update="bounding", max_iter=5, kappa_num_steps=2, random_state=0),
    HierarchicalVMFMixture(
        n_components=3, kappa_update="bounding", max_iter=5, kappa_num_steps=2, random_state=0
    ),
    TemporalVMFMixture(3, kappa_update="bounding", max_iter=5, kappa_num_steps=2, random_state=0),
    # k-MLE's vMF family; its Wishart family takes (n, d, d) matrices (tags: not 2-D), so
    # scikit-learn's checks do not apply to it
    KMLEMixture(family="vmf", n_components=2, max_iter=5, random_state=0),
]

#: Checks whose data are not directional data, or whose message is scikit-learn's own
#: wording for an input the package refuses with its own message (bayesvmf.data).
DIRECTIONAL_DATA = {
    "check_estimators_dtypes": (
        "its integer data (3 * uniform(0, 1) truncated) has an all-zero row: not a direction "
        "(ValueError 'X has an all-zero row')"
    ),
    "check_estimator_sparse_array": (
        "its sparse data (uniform entries below 0.8 set to 0, 3 columns) has all-zero rows: "
        "not directions"
    ),
    "check_estimator_sparse_matrix": (
        "its sparse data (uniform entries below 0.8 set to 0, 3 columns) has all-zero rows: "
        "not directions"
    ),
    "check_estimator_sparse_tag": (
        "fits sparse data with all-zero rows (not directions) to test the sparse tag; sparse "
        "input itself is supported (tests/test_sparse.py)"
    ),
    "check_fit2d_predict1d": (
        "1-D input is refused with the package's message 'X must be 2-D, got an array of "
        "shape (3,)', not scikit-learn's 'Reshape your data'"
    ),
}

#: class name -> {check name: reason}
EXPECTED_FAILED_CHECKS = {
    "SparseVMFMixture": DIRECTIONAL_DATA,
    "BayesianVMFMixture": DIRECTIONAL_DATA,
    "KMLEMixture": DIRECTIONAL_DATA,
    "HierarchicalVMFMixture": DIRECTIONAL_DATA,
    "TemporalVMFMixture": {
        **DIRECTIONAL_DATA,
        "check_estimators_nan_inf": (
            "fits with y = np.ones(10), floats, which T-vMFmix takes as its time index and "
            "refuses (TypeError: floats are refused so that real timestamps are not silently "
            "truncated to steps)"
        ),
    },
}


def expected_failed_checks(estimator) -> dict[str, str]:
    """Return the checks ``estimator`` is expected to fail, with their reasons."""
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@CHECKS_FILTER
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_expected_failures_are_few_and_explained():
    for name, failures in EXPECTED_FAILED_CHECKS.items():
        assert len(failures) <= 6, name
        assert all(reason.strip() for reason in failures.values()), name


# ---- use with scikit-learn's tools -----------------------------------------------------------


@pytest.fixture(scope="module")
def X():
    """60 rows of 3 well separated directions in R^4 (not unit norm: normalize=True)."""
    rng = np.random.default_rng(0)
    centers = 5 * np.eye(4)[:3]
    return np.vstack([rng.normal(c, 1.0, (20, 4)) for c in centers])


def small(**kwargs):
    return SparseVMFMixture(**{"n_components": 3, "n_init": 2, "random_state": 0, **kwargs})


def test_tags():
    tags = get_tags(small())
    assert tags.estimator_type == "density_estimator"
    assert tags.input_tags.sparse and not tags.input_tags.positive_only
    assert not tags.input_tags.allow_nan and not tags.target_tags.required


def test_clone_keeps_parameters_not_fit(X):
    model = small(beta=0.1, random_state=np.random.RandomState(3)).fit(X)
    copy = clone(model)
    assert copy.get_params()["beta"] == 0.1 and copy.n_components == 3
    assert not hasattr(copy, "mean_directions_")


def test_pipeline_predict_and_score(X):
    pipe = make_pipeline(Normalizer(), small()).fit(X)
    direct = small().fit(X)
    np.testing.assert_array_equal(pipe.predict(X), direct.predict(X))
    assert pipe.score(X) == pytest.approx(direct.score(X), rel=1e-12)


@CHECKS_FILTER
@pytest.mark.parametrize(
    "estimator",
    [
        SparseVMFMixture(3, n_init=1, max_iter=5, random_state=0),
        HierarchicalVMFMixture(n_components=3, kappa_update="bounding", max_iter=5),
        TemporalVMFMixture(3, kappa_update="bounding", max_iter=5, random_state=0),
    ],
    ids=type,
)
def test_fit_predict_keeps_its_labels(X, estimator):
    """fit_predict sets labels_ as fit does (it left an earlier fit's labels_ behind). The
    rows shuffled: another fit of the same shape (no new program), other labels."""
    before = estimator.fit(X).labels_.copy()
    labels = estimator.fit_predict(X[np.random.default_rng(0).permutation(len(X))])
    assert labels.shape == (len(X),) and not np.array_equal(labels, before)
    np.testing.assert_array_equal(estimator.labels_, labels)


def test_grid_search_over_n_components(X):
    folds = KFold(3, shuffle=True, random_state=0)  # X is sorted by cluster
    search = GridSearchCV(small(n_init=1), {"n_components": [1, 3]}, cv=folds).fit(X)
    # three clusters: the held-out log-likelihood prefers 3 components to 1
    assert search.best_params_ == {"n_components": 3}


def test_cross_val_score(X):
    scores = cross_val_score(small(n_init=1), X, cv=KFold(3, shuffle=True, random_state=0))
    assert scores.shape == (3,) and np.all(np.isfinite(scores))


def test_pickle_round_trip_and_save_load(X, tmp_path):
    model = small().fit(X)
    back = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(back.predict_proba(X), model.predict_proba(X))
    assert back.get_params() == model.get_params()
    bayesvmf.save(model, tmp_path / "model.npz")
    loaded = bayesvmf.load(tmp_path / "model.npz")
    np.testing.assert_array_equal(loaded.score_samples(X), model.score_samples(X))


@pytest.mark.parametrize("estimator", [small(), BayesianVMFMixture(3, random_state=0)], ids=type)
def test_a_pickled_stream_goes_on_as_the_original(X, estimator):
    """A model pickled mid-stream and unpickled without x64 (JAX's default) continues its
    stream as the original does. Its float64 JAX state came back float32: the next
    partial_fit failed inside a jitted loop (SparseVMFMixture) or went on from rounded
    statistics (B-vMFmix's directions 4e-8 off). Found by a helper's audit."""

    model = estimator.partial_fit(X[:30])
    with jax.enable_x64(False):
        back = pickle.loads(pickle.dumps(model))
    floats = [a for a in jax.tree.leaves(back._online) if jnp.issubdtype(a.dtype, jnp.floating)]
    assert floats and all(a.dtype == np.float64 for a in floats)
    # against the original itself (a deepcopy goes through __getstate__ too)
    np.testing.assert_array_equal(
        back.partial_fit(X[30:]).mean_directions_, model.partial_fit(X[30:]).mean_directions_
    )
    # a streamed model keeps no labels_ of an earlier fit's rows (B-vMFmix kept them)
    assert hasattr(model.fit(X[:30]), "labels_")
    with warnings.catch_warnings():
        # that fit saw two clusters with K = 3: a restart may collapse a component as the
        # stream goes on (one of SparseVMFMixture's two does with session 33's seeding
        # draws), which is not what this checks
        warnings.simplefilter("ignore", bayesvmf.DegenerateRunWarning)
        assert not hasattr(model.partial_fit(X[30:]), "labels_")


def test_dataframe_feature_names(X):
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    model = small().fit(frame)
    np.testing.assert_array_equal(model.feature_names_in_, ["a", "b", "c", "d"])
    np.testing.assert_array_equal(model.predict(frame), small().fit(X).predict(X))
    message = "Feature names must be in the same order as they were in fit."
    with pytest.raises(ValueError, match=re.escape(message)):
        model.predict(frame[["b", "a", "c", "d"]])
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        model.predict(X)


def test_dataframe_of_sparse_columns_is_sparse_input(X):
    """A DataFrame of pandas sparse columns fits as its CSR matrix does (it was refused:
    "Sparse data was passed for X, but dense data is required"; a helper's audit)."""
    sparse_X = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    frame = pd.DataFrame.sparse.from_spmatrix(sparse_X, columns=["a", "b", "c", "d"])
    model = small().fit(frame)
    np.testing.assert_array_equal(model.mean_directions_, small().fit(sparse_X).mean_directions_)
    assert model.feature_names_in_.tolist() == ["a", "b", "c", "d"]


def test_object_and_nullable_columns_accepted(X):
    expected = small().fit(X).mean_directions_
    np.testing.assert_array_equal(small().fit(X.astype(object)).mean_directions_, expected)
    counts = np.rint(10 * np.abs(X)).astype(int)
    frame = pd.DataFrame({f"x{j}": pd.array(counts[:, j], dtype="Int64") for j in range(4)})
    np.testing.assert_array_equal(
        small().fit(frame).mean_directions_, small().fit(counts).mean_directions_
    )
    frame.iloc[7, 2] = pd.NA
    with pytest.raises(ValueError, match="^X has a NaN or infinite value in row 7$"):
        small().fit(frame)


def test_bad_input_messages(X):
    with pytest.raises(ValueError, match="^Complex data not supported: X has dtype complex128"):
        small().fit(X.astype(complex))
    with pytest.raises(ValueError, match=r"^X has 1 feature\(s\) \(shape=\(60, 1\)\) while a"):
        small().fit(X[:, :1])
    fitted = small().fit(X)
    with pytest.raises(ValueError, match="^X has 1 features, but SparseVMFMixture is expecting 4"):
        fitted.predict(X[:, :1])
    message = "X could not be converted to numbers: float() argument must be a string or a"
    bad = X.astype(object)
    bad[0, 0] = {"a": 1}
    with pytest.raises(TypeError, match="^" + re.escape(message)):
        small().fit(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"random_state": -1}, "The 'random_state' parameter of SparseVMFMixture must be an int"),
        ({"random_state": "a"}, "The 'random_state' parameter of SparseVMFMixture must be an int"),
        ({"verbose": -1}, "The 'verbose' parameter of SparseVMFMixture must be an int in the"),
        ({"tol": np.inf}, "The 'tol' parameter of SparseVMFMixture must be a float in the"),
    ],
)
def test_parameter_errors(X, kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        small(**kwargs).fit(X)


def test_numpy_seeds_reproducible(X):
    for seed in (np.random.RandomState, np.random.default_rng):
        a = small(random_state=seed(1)).fit(X).mean_directions_
        b = small(random_state=seed(1)).fit(X).mean_directions_
        np.testing.assert_array_equal(a, b)
    # one RandomState instance is drawn from at each fit (scikit-learn's convention)
    rs = np.random.RandomState(1)
    assert _base.seed_from(rs) != _base.seed_from(rs)


def test_int_seed_is_the_jax_key():
    # an int random_state is jax.random.key(int) exactly, as before the base: no fit moves
    with jax.enable_x64(True):
        for seed in (0, 7, 2**40):
            np.testing.assert_array_equal(
                jax.random.key_data(_base.make_key(seed)),
                jax.random.key_data(jax.random.key(seed)),
            )
    key = jax.random.key(3)
    assert _base.make_key(key) is key


def test_sample_reproducible(X):
    model = small().fit(X)
    a, la = model.sample(7)
    b, lb = model.sample(7)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(la, lb)
    c, _ = model.sample(7, random_state=1)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(c, model.sample(7, random_state=1)[0])
    with pytest.raises(ValueError, match="^random_state must be None, an int, a numpy Random"):
        model.sample(7, random_state="x")  # (int("x") named nothing)
    d, _ = model.sample(7, random_state=np.random.default_rng(2))
    np.testing.assert_array_equal(d, model.sample(7, random_state=np.random.default_rng(2))[0])
    with pytest.raises(ValueError, match=r"^n_samples must be an int >= 1; got 0\.$"):
        model.sample(0)


def test_sample_refuses_draws_larger_than_memory(X, monkeypatch):
    """sample(10**11) in R^4 used to abort the process inside XLA (a failed check, no
    exception); draws that cannot fit in memory are refused by name before any program."""
    model = small().fit(X)
    monkeypatch.setattr(_base, "physical_memory", lambda: 2**40)  # 1 TiB
    with pytest.raises(ValueError, match=r"^n_samples=100000000000 needs 100,000,000,000 draws"):
        model.sample(10**11)
    # the limit is this machine's memory: 1 MiB holds 1,000 draws in R^4 (72 KB), not 10^5
    monkeypatch.setattr(_base, "physical_memory", lambda: 2**20)
    assert model.sample(1000)[0].shape == (1000, 4)
    message = r": 6\.9 MiB, more than this machine's 1\.0 MiB of memory\.$"
    with pytest.raises(ValueError, match=message):
        model.sample(10**5)


def test_unfitted_raises_sklearn_not_fitted(X):
    assert bayesvmf.NotFittedError is NotFittedError
    model = small()
    for method in (model.predict, model.predict_proba, model.score_samples, model.score):
        with pytest.raises(NotFittedError, match="This SparseVMFMixture instance is not fitted"):
            method(X)
    with pytest.raises(NotFittedError):
        model.sample(3)


def test_sklearn_filter_silences_our_convergence_warning(X):
    assert issubclass(bayesvmf.ConvergenceWarning, SklearnConvergenceWarning)
    assert issubclass(bayesvmf.DegenerateRunWarning, SklearnConvergenceWarning)
    # the defaults before issue 19 (the hard k-means passes and the relative test of the
    # current ones let this fit converge in one iteration)
    legacy = dict(max_iter=1, init="random", kmeans_iter=0, dtype="float64", rtol=0.0)
    with pytest.warns(SklearnConvergenceWarning, match="did not converge within max_iter=1"):
        small(**legacy).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=SklearnConvergenceWarning)
        small(**legacy).fit(X)


def test_sparse_input_keeps_feature_count(X):
    model = small().fit(sp.csr_matrix(X))
    assert model.n_features_in_ == 4 and not hasattr(model, "feature_names_in_")
    np.testing.assert_array_equal(model.labels_, model.predict(X))


# ---- k-MLE and the Dirichlet-vMF mixture -----------------------------------------------------


def test_kmle_and_dirichlet_tags_say_what_their_input_is():
    from bayesvmf.models import DirichletVMFMixture

    wishart = get_tags(KMLEMixture())
    assert not wishart.input_tags.two_d_array and wishart.input_tags.three_d_array
    assert not wishart.input_tags.sparse
    vmf = get_tags(KMLEMixture(family="vmf"))
    assert vmf.input_tags.two_d_array and vmf.input_tags.sparse
    documents = get_tags(DirichletVMFMixture())  # a list of (n_i, d) arrays
    assert not documents.input_tags.two_d_array and not documents.input_tags.sparse
    assert DirichletVMFMixture().n_topics == 10  # every argument has a default


_KMLE_WISHART_SCRIPT = """
import pickle
import numpy as np
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, KFold
from bayesvmf.models import KMLEMixture

rng = np.random.default_rng(0)
a = rng.normal(size=(40, 5, 2))
X = np.einsum("nti,ntj->nij", a, a) * np.repeat([1.0, 9.0], 20)[:, None, None]
model = KMLEMixture(n_components=2, random_state=0)
try:
    model.predict(X)
    raise SystemExit("predict before fit did not raise")
except NotFittedError as err:
    assert "This KMLEMixture instance is not fitted" in str(err), err
model.fit(X)
assert model.n_features_in_ == 2
assert clone(model).get_params() == model.get_params()
back = pickle.loads(pickle.dumps(model))
np.testing.assert_array_equal(back.score_samples(X), model.score_samples(X))
folds = KFold(2, shuffle=True, random_state=0)
search = GridSearchCV(KMLEMixture(random_state=0), {"n_components": [1, 2]}, cv=folds).fit(X)
# two scales 9 apart: the held-out log-likelihood prefers 2 components to 1
assert search.best_params_ == {"n_components": 2}, search.best_params_
"""


def test_kmle_wishart_clone_pickle_grid_search_and_not_fitted():
    """Run in a fresh process: in two complete two-worker runs of the suite, XLA aborted
    (SIGABRT inside backend_compile_and_load, KMLE's _start) while compiling this test's
    programs in a worker that had compiled the whole module's estimator checks before; the
    test passes on its own and the cause is not known (jaxlib 0.10.2, CPU)."""
    out = subprocess.run(
        [sys.executable, "-c", _KMLE_WISHART_SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]


@pytest.mark.parametrize("name", ["BayesianVMFMixture", "DirichletVMFMixture"])
def test_verbose_is_the_progress_switch(name, capsys):
    """`verbose` (scikit-learn's int level) replaces the former `progress_bar`: 0 is silent,
    1 draws a tqdm bar on stderr."""
    import bayesvmf.models

    cls = getattr(bayesvmf.models, name)
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(40, 3)))
    data = [X[:20], X[20:]] if name == "DirichletVMFMixture" else X
    assert "progress_bar" not in cls().get_params() and cls().verbose == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 3 iterations do not converge
        cls(2, max_iter=3, random_state=0).fit(data)
        assert capsys.readouterr().err == ""
        cls(2, max_iter=3, random_state=0, verbose=1).fit(data)
    err = capsys.readouterr().err
    assert "it/s" in err or "s/it" in err, err


# ---- the streaming mixin (partial_fit's bookkeeping) ----------------------------------------


class _Stream(_base.StreamingMixin, _base.BaseVMFEstimator):
    """The smallest streaming estimator: its state is the running mean of the chunks' sums,
    and a chunk holding a NaN makes its step fail after the counts were taken."""

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        **_base.STREAM_CONSTRAINTS,
    }
    _stream_params = ("n_components",)

    def __init__(self, n_components=2, *, learning_decay=0.7, learning_offset=1.0):
        self.n_components = n_components
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset

    def partial_fit(self, X, n_samples=None):
        first, n_samples = self._stream_begin(n_samples)
        X = np.asarray(X, dtype=float)
        step = self._stream_step(first, X.shape[0], n_samples)
        if np.isnan(X).any():
            raise ValueError("the step failed")
        old = 0.0 if first else self._online
        new = (1 - step.step_size) * old + step.step_size * X.sum() * step.n_total / X.shape[0]
        self._stream_commit(new, step.n_seen, step.n_steps)
        self.last_step_ = step
        return self


def test_stream_counts_and_step_sizes():
    """rho_t = (t + tau)^(-a) for the t-th step after the first chunk (rho = 1 there); the
    corpus size is the caller's, else the units seen so far; the counters are committed."""
    model = _Stream().partial_fit(np.ones((3, 2)))
    assert model.last_step_ == _base.StreamStep(True, 3, 0, 1.0, 3)
    assert (model.n_samples_seen_, model.n_steps_, model._online) == (3, 0, 6.0)
    model.partial_fit(np.ones((5, 2)), n_samples=100)
    assert model.last_step_ == _base.StreamStep(False, 8, 1, 2.0**-0.7, 100)
    assert (model.n_samples_seen_, model.n_steps_) == (8, 1)
    assert model._online == pytest.approx((1 - 2.0**-0.7) * 6.0 + 2.0**-0.7 * 200.0, rel=1e-15)
    model.set_params(learning_decay=1.0, learning_offset=3.0).partial_fit(np.ones((2, 2)))
    assert model.last_step_ == _base.StreamStep(False, 10, 2, 0.2, 10)
    # a fit that starts no stream of its own forgets it: the next call starts anew
    model._stream_forget()
    assert model._online is None and not hasattr(model, "n_samples_seen_")
    assert not hasattr(model, "n_steps_")
    assert model.partial_fit(np.ones((4, 2))).last_step_ == _base.StreamStep(True, 4, 0, 1.0, 4)


def test_stream_refusals_leave_the_counters():
    """Parameters are validated at every call, a changed stream shape and a bad corpus size
    are refused, and a step that fails commits nothing."""
    model = _Stream().partial_fit(np.ones((3, 2))).partial_fit(np.ones((3, 2)))
    state = (model.n_samples_seen_, model.n_steps_, model._online)
    model.set_params(learning_decay=2.0)
    with pytest.raises(
        InvalidParameterError,
        match=r"^The 'learning_decay' parameter of _Stream must be a float in the range "
        r"\(0\.5, 1\.0\]\. Got 2\.0 instead\.$",
    ):
        model.partial_fit(np.ones((3, 2)))
    model.set_params(learning_decay=0.7, n_components=3)
    with pytest.raises(
        ValueError,
        match=r"^_Stream\.partial_fit: n_components=3 differs from the stream this model "
        r"carries \(n_components=2\); restore it, or call fit to start anew\.$",
    ):
        model.partial_fit(np.ones((3, 2)))
    model.set_params(n_components=2)
    with pytest.raises(ValueError, match=r"^n_samples must be None or an int >= 1; got 0\.$"):
        model.partial_fit(np.ones((3, 2)), n_samples=0)
    with pytest.raises(ValueError, match="the step failed"):
        model.partial_fit(np.full((3, 2), np.nan))
    assert (model.n_samples_seen_, model.n_steps_, model._online) == state
    assert model.partial_fit(np.ones((3, 2))).n_steps_ == 2
