"""Tests of the hierarchical vMF mixture (H-vMFmix) and its tree helpers.

One data shape (n = 160, d = 8, tree (2, 2): 7 nodes, 4 leaves) is used throughout so the
VI step compiles once per scheme.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import ive, logsumexp

from bayesvmf import _data, _mixture, load, save
from bayesvmf.metrics import adjusted_rand as adjusted_rand_score
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _hierarchical_vi as H
from bayesvmf.models.bayesian import _kappa, _shared, _tree
from bayesvmf.models.bayesian._hierarchical import (
    HierarchicalVMFMixture,
    balanced_tree,
    check_parents,
)

TREE = balanced_tree((2, 2))  # root 0; internal 1, 2; leaves 3, 4 (under 1), 5, 6 (under 2)
N_PER_LEAF = 40
D = 8


def _around(rng, centers, spread):
    """Unit vectors scattered around unit ``centers`` (Gaussian noise, then normalised)."""
    x = centers + spread * rng.normal(size=centers.shape)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _hierarchical_data(seed=0):
    """Two orthogonal top directions, two leaves around each, 40 rows around each leaf.

    The spreads give cosines of about 0.9 leaf-to-parent and 0.97 row-to-leaf (a vMF with
    kappa about 120 in d = 8): generated with NumPy to keep the suite free of sampler
    compilations.
    """
    rng = np.random.default_rng(seed)
    top = np.linalg.qr(rng.normal(size=(D, D)))[0][:2]
    leaf = _around(rng, np.repeat(top, 2, axis=0), 0.2)
    labels = np.repeat(np.arange(4), N_PER_LEAF)
    return _around(rng, leaf[labels], 0.09), labels


@pytest.fixture(scope="module")
def data():
    return _hierarchical_data()


@pytest.fixture(scope="module")
def bounding_fit(data):
    X, _ = data
    steps = ("hierarchical.m_step", "hierarchical.e_step")  # the programs of one iteration
    before = {name: _mixture.TRACE_COUNTS.get(name, 0) for name in steps}
    model = HierarchicalVMFMixture(
        TREE,
        kappa_update="bounding",
        shared_kappa=False,
        n_init=2,
        max_iter=200,
        tol=1e-5,
        random_state=0,
    ).fit(X)
    # at most one trace of each for every iteration of both restarts
    model.traces = {name: _mixture.TRACE_COUNTS[name] - before[name] for name in steps}
    return model


# ---- tree helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        ([[-1, 0]], "non-empty 1-D array"),
        ([], "non-empty 1-D array"),
        ([-1, 0, 3], "node 2 has parent 3, outside -1..2"),
        ([-1, -2, 0], "node 1 has parent -2"),
        ([-1, 1, 0], "node 1 is its own parent"),
        ([1, 2, 0], "exactly one root .* got no root"),
        ([-1, -1, 0], r"got 2 roots \(nodes \[0, 1\]\)"),
        ([-1, 2, 1], r"nodes 1 and 2 are not connected to the root \(cycle 1 -> 2 -> 1\)"),
        ([-1, 0, 3, 4, 2], r"nodes 2, 3 and 4 are not connected .*cycle 2 -> 3 -> 4 -> 2"),
    ],
)
def test_check_parents_errors(parents, message):
    with pytest.raises(ValueError, match=message):
        check_parents(np.asarray(parents, dtype=np.int64))


def test_check_parents_dtype_and_copy():
    with pytest.raises(TypeError, match="array of integers; got dtype float64"):
        check_parents([-1.0, 0.0])
    with pytest.raises(TypeError, match="dtype bool"):
        check_parents(np.array([True, False]))
    original = np.array([-1, 0, 0], dtype=np.int32)
    out = check_parents(original)
    out[0] = 5
    assert original.tolist() == [-1, 0, 0] and out.dtype == np.int64


def test_the_numbering_of_the_tree_changes_nothing():
    """One tree (root -> {internal -> {leaf, leaf}, leaf}), numbered root first or not: the
    same fit. The start put every row at node 0 whatever the root was, so the second
    numbering split node 0's children and fitted an empty leaf (a helper's audit)."""
    rng = np.random.default_rng(0)
    centers = np.eye(4)[[0, 0, 1, 1]] + 0.4 * np.eye(4)[[2, 3, 2, 3]]
    X = np.repeat(centers, 30, axis=0) + 0.05 * rng.normal(size=(120, 4))
    fits = [
        HierarchicalVMFMixture(parents, kappa_update="bounding", random_state=0).fit(X)
        for parents in ([-1, 0, 0, 1, 1], [2, 2, -1, 0, 0])
    ]
    # (the start's draws are keyed by node index: the two sibling leaves may swap)
    labels = [fit.predict(X) for fit in fits]
    assert adjusted_rand_score(labels[0], labels[1]) == 1.0
    assert [np.bincount(lab).tolist() for lab in labels] == [[60, 30, 30]] * 2
    np.testing.assert_allclose(fits[1].lower_bound_, fits[0].lower_bound_, rtol=1e-6)


def test_estimator_rejects_bad_tree(data):
    X, _ = data
    with pytest.raises(ValueError, match="cycle"):
        HierarchicalVMFMixture(np.array([-1, 2, 1])).fit(X)
    with pytest.raises(ValueError, match="kappa_update"):
        HierarchicalVMFMixture(TREE, kappa_update="grid").fit(X)
    with pytest.raises(
        ValueError,
        match=r"'C0' parameter of HierarchicalVMFMixture must be a float in the range \(0.0, inf\)",
    ):
        HierarchicalVMFMixture(TREE, C0=0.0).fit(X)
    with pytest.raises(ValueError, match=r"mu0 must have shape \(8,\)"):
        HierarchicalVMFMixture(TREE, mu0=np.ones(3), max_iter=1).fit(X)


def test_balanced_tree():
    parents = balanced_tree((4, 5))
    assert parents.size == 1 + 4 + 20 and parents[0] == -1
    assert np.all(parents[1:5] == 0)
    assert np.all(parents[5:] == np.repeat(np.arange(1, 5), 5))
    leaves = _tree.leaves_of(parents)
    assert leaves.tolist() == list(range(5, 25))
    assert np.all(parents[1:] < np.arange(1, 25))  # root first, parents before children
    assert balanced_tree(()).tolist() == [-1]
    with pytest.raises(ValueError, match="sequence of ints >= 1"):
        balanced_tree((2, 0))
    with pytest.raises(ValueError, match="sequence of ints >= 1"):
        balanced_tree(3)


def test_paths_unbalanced_tree():
    # root 0 -> (1, 2); 1 -> (3, 4); 4 -> (5,): leaves 2, 3, 5
    parents = np.array([-1, 0, 0, 1, 1, 4])
    assert _tree.leaves_of(parents).tolist() == [2, 3, 5]
    paths = _tree.paths_to_leaves(parents, np.array([0, 1, 2, 0]))
    assert paths.tolist() == [[0, 2, -1, -1], [0, 1, 3, -1], [0, 1, 4, 5], [0, 2, -1, -1]]
    with pytest.raises(ValueError, match=r"labels\[1\] = 3 is not a leaf index in 0..2"):
        _tree.paths_to_leaves(parents, np.array([0, 3]))


@pytest.mark.parametrize("init", ["spherical-kmeans++", "random"])
def test_top_down_seeds_are_rows_of_the_node(init):
    """A node's split seeds from its rows only (the others masked): distinct rows when it has
    enough, its rows again when it has fewer distinct rows than children."""
    X = np.random.default_rng(0).normal(size=(12, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[[3, 7]] = X[9]
    data = _data.to_device(X)
    seeds = jax.jit(_tree._node_seeds, static_argnames=("n_children", "init"))
    for rows in ([3, 7, 9], [5], [1, 2, 3, 4, 5, 6]):
        in_node = jnp.asarray(np.isin(np.arange(12), rows))
        for seed in range(4):
            mu = np.asarray(seeds(jax.random.key(seed), data, in_node, n_children=4, init=init))
            cos = mu @ X.T
            assert np.isclose(cos[:, rows], 1.0).any(axis=1).all(), (rows, seed)
            if len(rows) > 4:
                assert np.isclose(cos[:, rows], 1.0).any(axis=0).sum() == 4, (rows, seed)


# ---- fitting ----------------------------------------------------------------------------------


def test_recovery_and_paths(bounding_fit, data):
    X, labels = data
    model = bounding_fit
    pred = model.predict(X)
    assert adjusted_rand_score(labels, pred) >= 0.95
    paths = model.predict_path(X)
    assert paths.shape == (X.shape[0], 3)
    assert np.all(paths[:, 0] == 0)
    assert np.all(paths[:, 2] == model.leaves_[pred])
    assert np.all(model.parents_[paths[:, 2]] == paths[:, 1])
    # the depth-1 node recovers the two top-level groups
    assert adjusted_rand_score(labels // 2, paths[:, 1]) == 1.0
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)


def test_bound_monotone_bounding(bounding_fit):
    bounds = bounding_fit.lower_bounds_
    assert bounds.size >= 5
    assert np.all(np.diff(bounds) >= -1e-9 * np.abs(bounds[1:]))


def _state_and_stats(model, X):
    """Rebuild the variational state of a fitted model and one q(z) update from it."""
    d = X.shape[1]
    tree = _tree.make_tree(model.parents_)
    psi = jnp.asarray(model.node_mean_directions_)
    gamma = jnp.asarray(model.node_mean_concentrations_)
    kappa = _kappa_moments(model, d)
    priors = _kappa.Priors(
        jnp.float64(model.alpha_),
        jnp.asarray(model.mu0_),
        jnp.float64(model.C0_),
        jnp.float64(model.m_),
        jnp.float64(model.s2_),
    )
    state = H.HState(
        psi,
        gamma,
        _shared.mean_direction(d, psi, gamma),
        jnp.asarray(model.dirichlet_),
        kappa,
        priors,
    )
    stats = H.e_step(_data.to_device(X), tree, state)
    return tree, state, stats


def _kappa_moments(model, d):
    a = jnp.asarray(model.node_log_kappa_mean_)
    b = jnp.asarray(model.node_log_kappa_var_)
    return _kappa.moments_from_state(jnp.stack([a, jnp.log(b)], axis=-1), "bounding", d=d)


def test_coordinate_updates_are_argmax(bounding_fit, data):
    """Each closed-form update maximises the bound along its coordinate (perturbation)."""
    X, _ = data
    tree, state, stats = _state_and_stats(bounding_fit, X)
    rng = np.random.default_rng(1)

    jit_bound = jax.jit(H.lower_bound)
    update_mu = jax.jit(H._update_mu)

    def bound(s, z=stats):
        return float(jit_bound(tree, s, z))

    # q(pi)
    s = state._replace(rho=state.priors.alpha + stats.resp_sum)
    base = bound(s)
    for _ in range(3):
        delta = 1e-3 * rng.normal(size=s.rho.shape) * s.rho
        assert bound(s._replace(rho=s.rho + delta)) < base
    # q(mu) of each colour class, perturbed in its natural parameter R_n
    for mask in (tree.even, ~tree.even):
        s = update_mu(tree, state, stats.resultant, mask)
        base = bound(s)
        R = s.psi * s.gamma[:, None]
        for node in np.flatnonzero(np.asarray(mask)):
            for _ in range(2):
                R2 = R.at[node].add(1e-3 * float(s.gamma[node]) * rng.normal(size=X.shape[1]))
                psi2, gamma2 = _shared.vmf_from_natural(R2, s.psi)
                emu2 = _shared.mean_direction(X.shape[1], psi2, gamma2)
                assert bound(s._replace(psi=psi2, gamma=gamma2, emu=emu2)) < base
    # empirical Bayes: alpha, m, s2 and mu0 each at their maximiser
    k = state.kappa
    alpha = _eb.update_alpha(state.priors.alpha, state.rho)
    m, s2 = _eb.update_m_s2(k.mean_log_kappa, k.var_log_kappa)
    mu0, _ = _eb.update_mu0(state.emu[tree.root][None], state.priors.mu0)
    s = state._replace(priors=state.priors._replace(alpha=alpha, m=m, s2=s2, mu0=mu0))
    base = bound(s)
    for field, value in (("alpha", alpha), ("m", m), ("s2", s2)):
        for sign in (-1, 1):
            moved = s.priors._replace(**{field: value * (1 + sign * 1e-3) + sign * 1e-6})
            assert bound(s._replace(priors=moved)) < base
    tilted = mu0 + 1e-2 * rng.normal(size=X.shape[1])
    moved = s.priors._replace(mu0=tilted / jnp.linalg.norm(tilted))
    assert bound(s._replace(priors=moved)) < base
    # q(z): the softmax of the module docstring beats perturbed responsibilities
    data = _data.to_device(X)
    emu = state.emu[tree.leaves]
    wlp = (
        _eb.expected_log_pi(state.rho)
        + state.kappa.mean_log_c[tree.leaves]
        + state.kappa.mean_kappa[tree.leaves] * (X @ emu.T)
    )
    for scale in (0.0, 0.05):
        logits = wlp + scale * rng.normal(size=wlp.shape)
        log_lam = logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)
        lam = jnp.exp(log_lam)
        z = H.ZStats(lam.sum(0), lam.T @ X, -jnp.sum(lam * log_lam))
        value = bound(state, z)
        if scale == 0.0:
            optimum = value
            np.testing.assert_allclose(
                optimum, bound(state, H.e_step(data, tree, state)), rtol=1e-12
            )
        else:
            assert value < optimum


def test_traced_once(bounding_fit):
    assert max(bounding_fit.traces.values()) <= 1


def test_sparse_equals_dense(bounding_fit, data):
    """The data enter only through the q(z) update and the predictive: compare those."""
    X, _ = data
    Xs = sp.csr_matrix(X)
    copy = Xs.copy()
    tree, state, _ = _state_and_stats(bounding_fit, X)
    e_step = jax.jit(H.e_step)
    dense = e_step(_data.to_device(X), tree, state)
    sparse = e_step(_data.to_device(Xs), tree, state)
    # rtol 1e-9: SciPy's sparse kernel sums in another order than the dense product
    for a, b in zip(sparse, dense, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        bounding_fit.score_samples(Xs), bounding_fit.score_samples(X), rtol=1e-9
    )
    assert (Xs != copy).nnz == 0


# ---- prediction -------------------------------------------------------------------------------


def _sample_vmf_s2(rng, mu, kappa, size):
    """Exact vMF draws on S^2 (inverse CDF of w = mu.x, uniform tangent angle), NumPy."""
    u = rng.uniform(size=size)
    w = 1.0 + np.log(u + (1.0 - u) * np.exp(-2.0 * kappa)) / kappa
    phi = rng.uniform(0, 2 * np.pi, size=size)
    e1 = np.cross(mu, [1.0, 0.0, 0.0] if abs(mu[0]) < 0.9 else [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(mu, e1)
    r = np.sqrt(np.clip(1 - w**2, 0, None))
    return w[:, None] * mu + r[:, None] * (np.cos(phi)[:, None] * e1 + np.sin(phi)[:, None] * e2)


def test_predictive_matches_monte_carlo():
    """Closed form over q(mu) + quadrature over q(kappa) against plain Monte Carlo (d = 3)."""
    d, S = 3, 400_000
    rng = np.random.default_rng(7)
    psi = np.array([[0.0, 0.6, 0.8], [1.0, 0.0, 0.0]])
    gamma = np.array([8.0, 3.0])
    a, b = np.array([np.log(5.0), np.log(2.0)]), np.array([0.1, 0.3])
    x = np.array([[0.0, 0.0, 1.0], [0.6, 0.8, 0.0]])
    predictive = jax.jit(_shared.predictive_log_density, static_argnums=0)
    closed = np.asarray(predictive(d, jnp.asarray(x @ psi.T), jnp.asarray(gamma), a, b))
    for k in range(2):
        mu = _sample_vmf_s2(rng, psi[k], gamma[k], S)
        kappa = np.exp(a[k] + np.sqrt(b[k]) * rng.normal(size=S))
        # C_3(kappa) = kappa / (4 pi sinh kappa), written stably
        log_c = np.log(kappa / (2 * np.pi)) - kappa - np.log1p(-np.exp(-2 * kappa))
        dens = np.exp(log_c[:, None] + kappa[:, None] * (mu @ x.T))  # (S, n)
        mc, se = dens.mean(axis=0), dens.std(axis=0) / np.sqrt(S)
        assert np.all(np.abs(np.exp(closed[:, k]) - mc) < 4 * se), (closed[:, k], mc, se)


def _log_c(d, kappa):
    """log C_d(kappa) from SciPy's scaled Bessel function (independent of bayesvmf.special)."""
    nu = d / 2 - 1
    return nu * np.log(kappa) - (d / 2) * np.log(2 * np.pi) - np.log(ive(nu, kappa)) - kappa


def test_score_samples_is_predictive(bounding_fit, data):
    """score_samples against the closed form + quadrature written out with SciPy."""
    X, _ = data
    model = bounding_fit
    leaves = model.leaves_
    gamma = model.node_mean_concentrations_[leaves]
    a, b = model.node_log_kappa_mean_[leaves], model.node_log_kappa_var_[leaves]
    t, w = np.polynomial.hermite.hermgauss(20)
    kappa = np.exp(a[:, None] + np.sqrt(2 * b)[:, None] * t)  # (L, Q)
    cos = X @ model.mean_directions_.T  # (n, L)
    norm = np.sqrt(kappa**2 + gamma[:, None] ** 2 + 2 * kappa * gamma[:, None] * cos[..., None])
    log_p = _log_c(D, kappa) + _log_c(D, gamma)[:, None] - _log_c(D, norm)
    per_leaf = logsumexp(log_p + np.log(w / np.sqrt(np.pi)), axis=-1)
    manual = logsumexp(per_leaf + np.log(model.weights_), axis=1)
    np.testing.assert_allclose(model.score_samples(X), manual, rtol=1e-9)
    assert model.score(X) == pytest.approx(np.mean(model.score_samples(X)))


@pytest.mark.filterwarnings("ignore::bayesvmf.exceptions.ConvergenceWarning")  # max_iter=20
def test_degeneracy_guards_get_the_leaves_mean_directions(data, diagnose_calls):
    """The coincidence guard (two occupied components with one mean direction) is given the
    leaves' mean directions. No natural H-vMFmix case was found (one cluster with 2 or 3
    leaves and the default shared concentration splits it instead: tests/
    test_bayesian_temporal.py has T-vMFmix's), so this checks what the guard receives."""
    calls = diagnose_calls
    X, _ = data
    model = HierarchicalVMFMixture(TREE, n_init=1, max_iter=20, random_state=0).fit(X[:120])
    assert len(calls) == 1
    np.testing.assert_allclose(calls[0]["mean_directions"], model.mean_directions_, atol=1e-12)
    np.testing.assert_allclose(calls[0]["kappa"], model.concentrations_, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::bayesvmf.exceptions.ConvergenceWarning")  # max_iter=3
def test_a_new_row_count_compiles_only_the_data_pass(data):
    """m_step (every update but q(z): the special functions) is one program per shape of
    the model; a fit on one more row traces only the pass over the rows again."""
    X, _ = data
    steps = ("hierarchical.m_step", "hierarchical.e_step")
    counts = []
    for n in (100, 101):
        HierarchicalVMFMixture(TREE, kappa_update="bounding", max_iter=3, random_state=0).fit(X[:n])
        counts.append([_mixture.TRACE_COUNTS.get(name, 0) for name in steps])
    assert counts[1][0] == counts[0][0]  # m_step: not again
    assert counts[1][1] == counts[0][1] + 1  # e_step_rows: once for 101 rows


def test_save_load_round_trip(tmp_path, bounding_fit, data):
    X, _ = data
    save(bounding_fit, tmp_path / "h.npz")
    back = load(tmp_path / "h.npz")
    assert type(back) is HierarchicalVMFMixture
    for name in bounding_fit._fitted_attributes:
        assert hasattr(back, name) == hasattr(bounding_fit, name), name
        if hasattr(bounding_fit, name):  # (feature_names_in_: a DataFrame's only)
            np.testing.assert_array_equal(
                np.asarray(getattr(back, name)), np.asarray(getattr(bounding_fit, name))
            )
    np.testing.assert_array_equal(back.score_samples(X), bounding_fit.score_samples(X))
    np.testing.assert_array_equal(back.predict_path(X), bounding_fit.predict_path(X))


def test_to_arviz(bounding_fit):
    idata = bounding_fit.to_arviz(num_draws=20, random_state=0)
    post = idata.posterior
    assert post["mu"].dims == ("chain", "draw", "node", "feature")
    assert post["mu"].shape == (1, 20, 7, D)
    assert post["kappa"].dims == ("chain", "draw", "node")
    assert post["weights"].dims == ("chain", "draw", "component")
    np.testing.assert_allclose(np.linalg.norm(post["mu"].values, axis=-1), 1.0, rtol=1e-10)
    assert idata.constant_data["leaf_node"].values.tolist() == [3, 4, 5, 6]
    # the same draws at every call by default, as B-vMFmix's (the default was None)
    np.testing.assert_array_equal(
        bounding_fit.to_arviz(num_draws=20).posterior["kappa"].values, post["kappa"].values
    )


# ArviZ's diagnostics of few draws (PSIS's Pareto k, WAIC's variance) are not under test
@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto:UserWarning")
@pytest.mark.filterwarnings("ignore:For one or more samples the posterior variance:UserWarning")
def test_to_arviz_log_likelihood_is_the_mixture_of_the_leaves(bounding_fit, data):
    """to_arviz(X=...): log sum_l pi_l vMF(x_i | mu_l, kappa_l) over the leaves of each
    draw (not the internal nodes), equal to scipy's; ArviZ's loo reads it."""
    import arviz as az
    from conftest import scipy_mixture_log_likelihood

    X = data[0][::4]
    idata = bounding_fit.to_arviz(num_draws=10, random_state=0, X=X)
    leaves = idata.constant_data["leaf_node"].values
    post = idata.posterior
    for s in (0, 9):
        reference = scipy_mixture_log_likelihood(
            X,
            post["mu"].values[0, s, leaves],
            post["kappa"].values[0, s, leaves],
            post["weights"].values[0, s],
        )
        np.testing.assert_allclose(idata.log_likelihood["x"].values[0, s], reference, rtol=1e-11)
    assert idata.log_likelihood["x"].dims == ("chain", "draw", "row")
    assert np.isfinite(az.loo(idata).elpd_loo)


@pytest.mark.filterwarnings("ignore::bayesvmf.exceptions.ConvergenceWarning")  # max_iter=3
def test_n_components_is_a_parameter(data):
    """Without ``parents``, n_components leaves under one root; a grid over it is a search."""
    from sklearn.model_selection import GridSearchCV

    X, _ = data
    settings = dict(kappa_update="bounding", max_iter=3, random_state=0)
    model = HierarchicalVMFMixture(n_components=3, **settings).fit(X)
    assert model.parents_.tolist() == [-1, 0, 0, 0]
    assert model.weights_.shape == (3,)
    assert HierarchicalVMFMixture().set_params(n_components=2).n_components == 2
    assert HierarchicalVMFMixture(TREE, n_components=4, **settings).fit(X).leaves_.size == 4
    # any integer, as the other estimators take it (True is 1: it failed, naming "branching")
    assert HierarchicalVMFMixture(n_components=True, **settings).fit(X).parents_.tolist() == [-1, 0]
    with pytest.raises(ValueError, match="n_components=3 but parents has 4 leaves"):
        HierarchicalVMFMixture(TREE, n_components=3).fit(X)
    # the rows are counted before a tree of n_components leaves is built (10^9 leaves ran
    # out of memory building it)
    with pytest.raises(
        ValueError, match=f"^X has {len(X)} rows, fewer than n_components=1000000000$"
    ):
        HierarchicalVMFMixture(n_components=10**9).fit(X)
    search = GridSearchCV(HierarchicalVMFMixture(**settings), {"n_components": [2, 4]}, cv=2)
    assert search.fit(X).best_params_["n_components"] in (2, 4)
