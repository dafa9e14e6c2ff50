"""shared_kappa of B- and H-vMFmix (issue 18), the degeneracy guards, the alpha cap.

One small problem (n = 90, d = 8, three clusters of 30 rows with kappa 15, 30, 60) shared by
every fit, so the programs compile once per path; a degenerate variant adds one far row
that a component of its own carries.
"""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import scipy_mixture_log_likelihood

import bayesvmf
from bayesvmf.exceptions import ConvergenceWarning, DegenerateRunWarning
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian._bvmf import BayesianVMFMixture
from bayesvmf.models.bayesian._hierarchical import HierarchicalVMFMixture
from bayesvmf.models.bayesian._tree import balanced_tree

K = 3


@pytest.fixture(scope="module")
def sample():
    return bayesvmf.make_vmf_mixture(
        90,
        8,
        K,
        kappa=np.array([15.0, 30.0, 60.0]),
        weights=np.full(K, 1.0 / K),
        kappa_noise=0.0,
        separability_adjustment=False,
        random_state=1,
    )


def _labels(sample):
    return np.asarray(sample.labels)


def _quiet(method, *args, **kwargs):
    """Call ``method`` with ConvergenceWarning ignored (short fits), not its subclass
    DegenerateRunWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("always", DegenerateRunWarning)
        return method(*args, **kwargs)


#: A component holding the far row alone: exactly one row's weight (so "empty" or "carried
#: by a single distinct vector" by rounding), named with its index
ONE_ROW = r"components \[{}\] are (empty|carried by a single distinct vector)"


@pytest.mark.parametrize("scheme", ["bounding", "sampling"])
def test_vi_shared_kappa(scheme, sample):
    """One concentration in every component; the bounding bound rises at every iteration."""
    model = BayesianVMFMixture(
        K,
        kappa_update=scheme,
        init=_labels(sample),
        max_iter=40,
        tol=1e-9,
        dtype="float64",  # a rise to 1e-12 relative: float64 products (mixed: rounding)
        random_state=0,
    )
    with warnings.catch_warnings():  # converged or not, the bound must rise
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(sample.X)
    assert model.shared_kappa  # the default
    kappa = model.concentrations_
    assert np.all(kappa == kappa[0]) and np.all(model.kappa_var_log_ == model.kappa_var_log_[0])
    # between the true 15 and 60 (the pooled estimate of three clusters)
    assert 15.0 < kappa[0] < 60.0
    if scheme == "bounding":
        steps = np.diff(model.lower_bounds_)
        assert np.all(steps >= -1e-12 * np.abs(model.lower_bounds_[1:])), steps.min()
    # empirical Bayes of one concentration: m follows it, s2 stays the user's
    assert model.s2_ == 1.0
    np.testing.assert_allclose(model.m_, model.kappa_mean_log_[0], rtol=1e-6)
    assert model._n_parameters() == (K - 1) + K * 7 + 1
    idata = model.to_arviz(num_draws=7, X=sample.X[:20])
    posterior = idata.posterior
    assert posterior["kappa"].dims == ("chain", "draw")
    assert posterior["mu"].shape == (1, 7, K, 8)
    # the one concentration of a draw is every component's in its log-likelihood
    draw = [posterior[name].values[0, 3] for name in ("mu", "kappa", "weights")]
    reference = scipy_mixture_log_likelihood(sample.X[:20], draw[0], np.full(K, draw[1]), draw[2])
    np.testing.assert_allclose(idata.log_likelihood["x"].values[0, 3], reference, rtol=1e-11)
    assert model.n_occupied_components_ == K and model.degenerate_components_.size == 0
    # the shared estimate differs from the per-component one (the option does something)
    per = BayesianVMFMixture(
        K,
        kappa_update=scheme,
        shared_kappa=False,
        init=_labels(sample),
        max_iter=2,
        random_state=0,
    )
    _quiet(per.fit, sample.X)
    assert np.ptp(per.concentrations_) > 1.0


def test_gibbs_shared_kappa(sample):
    model = BayesianVMFMixture(
        K,
        inference="gibbs",
        init=_labels(sample),
        num_chains=2,
        num_warmup=30,
        num_samples=30,
        random_state=0,
    ).fit(sample.X)
    draws = model.gibbs_kappa_
    assert draws.shape == (2, 30, K)
    np.testing.assert_array_equal(draws, np.broadcast_to(draws[..., :1], draws.shape))
    assert 15.0 < model.concentrations_[0] < 60.0
    assert model.to_arviz().posterior["kappa"].dims == ("chain", "draw")
    assert model.n_occupied_components_ == K and model.n_degenerate_restarts_ == 0


def test_partial_fit_shared_kappa_and_stream_check(sample):
    model = BayesianVMFMixture(K, kappa_update="bounding", max_iter=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.partial_fit(sample.X[:45], n_samples=90)
    model.partial_fit(sample.X[45:], n_samples=90)
    assert np.all(model.concentrations_ == model.concentrations_[0])
    assert model.n_occupied_components_ == K and model.largest_share_ < 0.5
    model.set_params(shared_kappa=False)
    with pytest.raises(
        ValueError,
        match=r"partial_fit: n_components=3, kappa_update='bounding', shared_kappa=False differ "
        r"from the stream this model carries \(n_components=3, kappa_update='bounding', "
        r"shared_kappa=True\)",
    ):
        model.partial_fit(sample.X[:10])


def test_hierarchical_shared_kappa(sample):
    """The leaves share one kappa, the root keeps its own; the bound is monotone."""
    model = HierarchicalVMFMixture(
        balanced_tree((K,)), kappa_update="bounding", max_iter=30, tol=1e-7, random_state=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(sample.X)
    leaves = model.node_concentrations_[model.leaves_]
    assert np.all(leaves == leaves[0])
    assert model.node_concentrations_[0] != leaves[0]
    steps = np.diff(model.lower_bounds_)
    assert np.all(steps >= -1e-12 * np.abs(model.lower_bounds_[1:])), steps.min()
    assert model.s2_ > 1e-6 and model._n_parameters() == (K - 1) + (K + 1) * 7 + 2
    idata = model.to_arviz(num_draws=5, X=sample.X[:20])
    kappa = idata.posterior["kappa"].values[0]  # (draw, node)
    np.testing.assert_array_equal(kappa[:, 2:], np.broadcast_to(kappa[:, 1:2], (5, K - 1)))
    assert np.all(kappa[:, 0] != kappa[:, 1])
    # the leaves' one concentration, not the root's, in each draw's log-likelihood
    mu, weights = idata.posterior["mu"].values[0, 2], idata.posterior["weights"].values[0, 2]
    leaves = model.leaves_
    reference = scipy_mixture_log_likelihood(sample.X[:20], mu[leaves], kappa[2, leaves], weights)
    np.testing.assert_allclose(idata.log_likelihood["x"].values[0, 2], reference, rtol=1e-11)


# ---- degeneracy guards ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def outlier(sample):
    """The first two clusters and one row opposite to everything: a component of its own."""
    keep = _labels(sample) < 2
    X = np.asarray(sample.X)[keep]
    far = -X.sum(axis=0)
    X = np.vstack([X, far / np.linalg.norm(far)])
    labels = np.append(_labels(sample)[keep], 2)
    return X, labels


def test_vi_guard_single_row_component(outlier):
    X, labels = outlier
    model = BayesianVMFMixture(K, kappa_update="bounding", init=labels, max_iter=5)
    with pytest.warns(DegenerateRunWarning) as record:
        _quiet(model.fit, X)
    (message,) = [str(w.message) for w in record if w.category is DegenerateRunWarning]
    assert re.match("BayesianVMFMixture: " + ONE_ROW.format(2), message), message
    assert "Try fewer components (n_components)" in message
    assert model.degenerate_components_.tolist() == [2]
    assert model.n_occupied_components_ in (K - 1, K) and model.n_degenerate_restarts_ == 1
    np.testing.assert_allclose(
        model.largest_share_, np.bincount(labels).max() / len(labels), atol=0.01
    )
    # the per-component model's advice names the shared concentration
    model.set_params(shared_kappa=False)
    with pytest.warns(DegenerateRunWarning, match=r"Try shared_kappa=True"):
        _quiet(model.fit, X)


def test_gibbs_guard_single_row_component(outlier):
    X, labels = outlier
    model = BayesianVMFMixture(
        K,
        inference="gibbs",
        init=labels,
        num_chains=2,
        num_warmup=5,
        num_samples=5,
        random_state=0,  # a fixed chain: with a fresh seed the far row's share varied
    )
    with pytest.warns(DegenerateRunWarning, match=ONE_ROW.format(2)):
        _quiet(model.fit, X)
    assert model.degenerate_components_.tolist() == [2]
    assert model.n_degenerate_restarts_ == 2


def test_partial_fit_guard_single_row_component(outlier):
    """A chunk whose far row has a component of its own: partial_fit warns at that call."""
    X, _ = outlier
    # random_state=30: the k-means++ seeding gives the far row a component of its own (since
    # session 33's seeding draws, seeds 30, 31 and 63 of 0-69 do; seed 1 did before); the
    # split-and-merge moves after the hard passes (kmeans_iter > 0) merge it away, so the
    # start is the seeds themselves (kmeans_iter=0)
    model = BayesianVMFMixture(
        K, kappa_update="bounding", max_iter=3, kmeans_iter=0, random_state=30
    )
    with pytest.warns(DegenerateRunWarning) as record:
        _quiet(model.partial_fit, X, n_samples=X.shape[0])
    (message,) = [str(w.message) for w in record if w.category is DegenerateRunWarning]
    far = int(model.predict(X[-1:])[0])
    assert re.match("BayesianVMFMixture: " + ONE_ROW.format(far), message), message
    assert model.degenerate_components_.tolist() == [far]
    # the default start reseeds that component (bayesvmf._guards: the split-and-merge moves)
    model = BayesianVMFMixture(K, kappa_update="bounding", max_iter=3, random_state=30)
    with warnings.catch_warnings(record=True) as caught:
        _quiet(model.partial_fit, X, n_samples=X.shape[0])
    assert not [w for w in caught if w.category is DegenerateRunWarning]
    assert model.degenerate_components_.tolist() == []


def test_hierarchical_guard_single_row_leaf(outlier):
    X, _ = outlier
    # random_state=4: the fit from its top-down start gives the far row a leaf of its own
    # (with this start about one seed in four does, as with the start before the shared
    # spherical k-means, whose seed 5 this was)
    model = HierarchicalVMFMixture(
        balanced_tree((K,)), kappa_update="bounding", max_iter=5, random_state=4
    )
    with pytest.warns(DegenerateRunWarning) as record:
        _quiet(model.fit, X)
    (message,) = [str(w.message) for w in record if w.category is DegenerateRunWarning]
    far = int(model.predict(X[-1:])[0])
    assert re.match("HierarchicalVMFMixture: " + ONE_ROW.format(far), message), message
    assert "Try fewer leaves" in message
    assert model.degenerate_components_.tolist() == [far] and model.n_degenerate_restarts_ == 1


@pytest.fixture(scope="module")
def background():
    """Five tight clusters (kappa 300, 15 rows each) and 60 rows uniform on the sphere."""
    sample = bayesvmf.make_vmf_mixture(
        75, 8, 5, kappa=300.0, kappa_noise=0.0, separability_adjustment=False, random_state=2
    )
    noise = np.random.default_rng(0).normal(size=(60, 8))
    X = np.vstack([sample.X, noise / np.linalg.norm(noise, axis=1, keepdims=True)])
    return X, np.append(_labels(sample), np.full(60, 5))


def test_guard_background_component_per_component_kappa(background):
    """Per-component kappa: the broad uniform component is flagged, with the advice."""
    X, labels = background
    model = BayesianVMFMixture(
        6, kappa_update="bounding", shared_kappa=False, init=labels, max_iter=5
    )
    with pytest.warns(DegenerateRunWarning) as record:
        _quiet(model.fit, X)
    (message,) = [str(w.message) for w in record if w.category is DegenerateRunWarning]
    assert message.startswith("BayesianVMFMixture: component 5 holds 4")
    assert "(a near-uniform background component)" in message
    assert message.endswith(
        "Try shared_kappa=True (one concentration for all components) or fewer components "
        "(n_components)."
    )
    assert model.degenerate_components_.tolist() == [5]
    np.testing.assert_allclose(model.largest_share_, 60 / 135, atol=0.03)
    # one shared kappa never flags a background (no concentration to compare)
    model.set_params(shared_kappa=True)
    _quiet(model.fit, X)
    assert 5 not in model.degenerate_components_


# ---- the alpha cap --------------------------------------------------------------------------


def test_alpha_cap_stops_the_growth_on_balanced_clusters():
    """Balanced counts: the unconstrained maximiser is beyond n / K; the cap holds it there."""

    @jax.jit
    def ascent(alpha, counts):
        rho = alpha + counts  # coordinate ascent as in a fit: rho, then alpha
        e_log_pi = _eb.expected_log_pi(rho)
        capped = _eb.update_alpha(alpha, rho, _eb.alpha_cap(rho, alpha))
        gain = _eb.dirichlet_prior_terms(capped, e_log_pi) - _eb.dirichlet_prior_terms(
            alpha, e_log_pi
        )
        return capped, _eb.update_alpha(alpha, rho), gain

    with jax.enable_x64(True):
        counts = jnp.array([80.0, 80.0, 80.0])
        alpha = jnp.float64(1.0)
        for _ in range(30):
            alpha, free, gain = ascent(alpha, counts)
            assert float(gain) >= 0.0  # the bound never decreases
        assert float(free) > 80.0  # without the cap it keeps growing
        np.testing.assert_allclose(float(alpha), 80.0, rtol=1e-9)
