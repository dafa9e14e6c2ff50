"""Tests of the two concentration schemes of Gopal & Yang (models/bayesian/_kappa.py).

References are independent of the code under test: scipy.integrate.quad of the same
unnormalised target on log kappa (sampling scheme), Gauss-Hermite quadrature of E_q[log C_d]
under the log-normal q (bounding scheme) and scipy.optimize on the bounding objective.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize

from bayesvmf import _mixture, special
from bayesvmf.models.bayesian import _kappa

#: Replicate chains per target (independent chains give the Monte Carlo standard error).
N_CHAINS = 8


def _targets(d, kappas, n_points):
    """(weight, dot) of eq. (1) for n_points whose mean resultant is A_d(kappa) (J = 2)."""
    rbar = np.asarray(special.mean_resultant_length(d, np.asarray(kappas, np.float64)))
    weight = np.asarray(n_points, np.float64)
    return weight, weight * rbar


@functools.cache
def _log_target_scalar(d):
    return jax.jit(lambda t, w, dot, m, s2: _kappa.log_target(t, w, dot, m, s2, d=d))


def _quadrature_moments(d, weight, dot, m, s2):
    """E[kappa], E[log C_d], E[log kappa], Var[log kappa] under exp(h(t)) by scipy quad."""
    h = _log_target_scalar(d)
    grid = np.linspace(m - 12 * np.sqrt(s2), m + 12 * np.sqrt(s2), 20001)
    values = np.asarray(h(jnp.asarray(grid), weight, dot, m, s2))
    mode = grid[np.nanargmax(values)]
    h_max = np.nanmax(values)
    # the posterior scale from the grid: where h drops by 50 from the mode
    inside = grid[values > h_max - 50.0]
    lo, hi = inside.min() - 0.01, inside.max() + 0.01

    def moment(g):
        def integrand(t):
            return g(t) * np.exp(float(h(t, weight, dot, m, s2)) - h_max)

        value, _ = integrate.quad(integrand, lo, hi, points=[mode], limit=200, epsabs=0)
        return value

    z = moment(lambda t: 1.0)
    mean_t = moment(lambda t: t) / z
    return {
        "mean_kappa": moment(np.exp) / z,
        "mean_log_c": moment(lambda t: float(special.log_vmf_normalizer(d, np.exp(t)))) / z,
        "mean_log_kappa": mean_t,
        "var_log_kappa": moment(lambda t: (t - mean_t) ** 2) / z,
    }


# d = 3 and d = 10,000, each with a moderate and a large concentration (kappa >> d at d = 3,
# kappa = 5 d at d = 10,000), 40 and 30 points; prior LogNormal(log 20, 4).
CASES = {3: ([10.0, 1e4], [40.0, 30.0]), 10_000: ([200.0, 5e4], [40.0, 30.0])}
PRIOR_M, PRIOR_S2 = float(np.log(20.0)), 4.0


@pytest.fixture(scope="module", params=sorted(CASES))
def sampled(request):
    d = request.param
    kappas, n_points = CASES[d]
    weight, dot = _targets(d, kappas, n_points)
    weight_j, dot_j = np.repeat(weight, N_CHAINS), np.repeat(dot, N_CHAINS)
    # start away from the truth (half of it), as after a poor initialisation
    state = _kappa.initial_kappa_state(np.repeat(np.asarray(kappas) / 2, N_CHAINS), "sampling")
    # J = 2 * N_CHAINS independent chains in one call (N_CHAINS per target)
    moments, accept = _kappa.kappa_sampling_update(
        jax.random.key(1),
        state,
        weight_j,
        dot_j,
        PRIOR_M,
        PRIOR_S2,
        d=d,
        num_samples=1500,
        num_warmup=300,
    )
    per_chain = {f: np.asarray(getattr(moments, f)).reshape(2, N_CHAINS) for f in moments._fields}
    return d, weight, dot, per_chain, np.asarray(accept)


def test_mh_draws_match_quadrature(sampled):
    """MC moments of the MH draws agree with quadrature of the same target (4.5 SE)."""
    d, weight, dot, per_chain, accept = sampled
    assert np.all((accept > 0.2) & (accept < 0.7)), accept
    for j in range(2):
        exact = _quadrature_moments(d, weight[j], dot[j], PRIOR_M, PRIOR_S2)
        for name, value in exact.items():
            chains = per_chain[name][j]
            se = chains.std(ddof=1) / np.sqrt(N_CHAINS)
            # the check is decisive: the standard error is a small fraction of the scale
            scale = abs(value) if name != "mean_log_kappa" else 1.0
            assert se < 0.05 * scale, (d, j, name, se, value)
            assert abs(chains.mean() - value) < 4.5 * se + 1e-12 * scale, (
                d,
                j,
                name,
                chains.mean(),
                value,
                se,
            )


def test_sampling_no_recompile_when_priors_change():
    """New prior values (empirical Bayes) and new statistics reuse the compiled program."""
    d = 3
    weight, dot = _targets(d, [10.0, 1e4], [40.0, 30.0])
    state = _kappa.initial_kappa_state(np.full(2 * N_CHAINS, 5.0), "sampling")
    args = dict(d=d, num_samples=1500, num_warmup=300)
    w, dt = np.repeat(weight, N_CHAINS), np.repeat(dot, N_CHAINS)
    _kappa.kappa_sampling_update(jax.random.key(0), state, w, dt, 1.0, 2.0, **args)
    before = _mixture.TRACE_COUNTS["bayesian.kappa_sampling"]
    _kappa.kappa_sampling_update(jax.random.key(2), state, w * 2, dt, 3.0, 0.5, **args)
    assert _mixture.TRACE_COUNTS["bayesian.kappa_sampling"] == before


def _gauss_hermite_mean_log_c(d, a, b, n_nodes=120):
    """E[log C_d(kappa)] under kappa ~ LogNormal(a, b) by Gauss-Hermite quadrature on log kappa."""
    nodes, weights = np.polynomial.hermite.hermgauss(n_nodes)
    t = a + np.sqrt(2.0 * b) * nodes
    return float(np.sum(weights * np.asarray(special.log_vmf_normalizer(d, np.exp(t))))) / np.sqrt(
        np.pi
    )


@pytest.mark.parametrize("d", [2, 3, 10, 100, 10_000])
def test_log_c_lower_bound_is_a_lower_bound(d):
    """The Turan + Jensen bound never exceeds E_q[log C_d]; tight where it should be."""
    kappas = np.array([1e-3, 0.5, 5.0, 50.0, 500.0, 5e3, 5e4, 1e6])
    for b in (1e-6, 1e-2, 0.3, 1.0):
        a = np.log(kappas)
        bound = np.asarray(_kappa.log_c_lower_bound(jnp.asarray(a), b, d=d))
        exact = np.array([_gauss_hermite_mean_log_c(d, ai, b) for ai in a])
        slack = 1e-9 * np.maximum(1.0, np.abs(exact))
        assert np.all(bound <= exact + slack), (d, b, bound - exact)
        # tight where the Turan inequality is tight (kappa small against nu, b small)
        nu = d / 2 - 1
        if b <= 1e-2:
            small = kappas < 0.01 * max(nu, 0.5)
            assert np.all(exact[small] - bound[small] < 1e-3 * np.maximum(1, np.abs(exact[small])))
    # exact for the uniform density (kappa -> 0, b -> 0): log C_d(0) = -log |S^{d-1}|
    at_zero = float(_kappa.log_c_lower_bound(np.log(1e-12), 1e-12, d=d))
    assert at_zero == pytest.approx(-float(special.log_sphere_area(d)), rel=1e-12, abs=1e-10)


@pytest.mark.parametrize("d", [2, 3, 10, 100, 10_000])
def test_log_c_lower_bound_is_within_half_a_nat(d):
    """Amos's ratio bound keeps the -(1/2) log kappa of log I_nu: with q(kappa) nearly a point
    mass the bound is within 0.45 nats of log C_d at every kappa (the paper's Turan form lost
    (1/2) log(kappa / nu): 6.4 nats at d = 2, kappa = 5e4), so the bounding scheme no longer
    drives kappa to 0 in low dimension."""
    kappas = np.array([1e-3, 0.5, 5.0, 50.0, 500.0, 5e3, 5e4])
    b = 1e-8
    bound = np.asarray(_kappa.log_c_lower_bound(jnp.asarray(np.log(kappas)), b, d=d))
    exact = np.array([_gauss_hermite_mean_log_c(d, a, b) for a in np.log(kappas)])
    assert np.all(exact - bound >= -1e-9 * np.maximum(1.0, np.abs(exact)))
    assert np.all(exact - bound < 0.45), exact - bound


def _objective_np(d, weight, dot, m, s2):
    f = jax.jit(lambda p: _kappa.bounding_objective(p[None], weight, dot, m, s2, d=d)[0])
    return lambda p: float(f(jnp.asarray(p, jnp.float64)))


@pytest.mark.parametrize("d", [3, 10_000])
def test_bounding_objective_monotone_and_maximised(d):
    """Every step keeps or raises the objective; the end point matches scipy's optimum."""
    kappas, n_points = CASES[d]
    weight, dot = _targets(d, kappas, n_points)
    state = _kappa.initial_kappa_state(np.asarray(kappas) / 50, "bounding", var_log_kappa=1.0)
    previous = np.asarray(_kappa.bounding_objective(state, weight, dot, PRIOR_M, PRIOR_S2, d=d))
    for _ in range(40):
        moments, objective = _kappa.kappa_bounding_update(
            state, weight, dot, PRIOR_M, PRIOR_S2, d=d, num_steps=1
        )
        objective = np.asarray(objective)
        assert np.all(objective >= previous), (objective, previous)
        state, previous = moments.state, objective
    for j in range(2):
        f = _objective_np(d, weight[j], dot[j], PRIOR_M, PRIOR_S2)
        start = np.asarray(state[j])
        res = optimize.minimize(
            lambda p: -f(p),
            start + 0.3,
            method="Nelder-Mead",
            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000},
        )
        assert previous[j] >= -res.fun - 1e-8 * abs(res.fun), (previous[j], -res.fun)
        assert np.allclose(start, res.x, atol=1e-3)
    # the closed-form moments of the state
    a, b = np.asarray(state[:, 0]), np.exp(np.asarray(state[:, 1]))
    np.testing.assert_allclose(moments.mean_kappa, np.exp(a + b / 2), rtol=1e-14)
    np.testing.assert_allclose(moments.var_log_kappa, b, rtol=1e-14)


def test_bounding_close_to_sampling_at_high_dimension(sampled):
    """Bounding E[kappa] against the exact posterior mean: within 2% at d = 10,000 and 10% at
    d = 3 (Amos's bound; the paper's Turan form gave about half of it there: 0.4-0.6)."""
    d, weight, dot, per_chain, _ = sampled
    state = _kappa.initial_kappa_state(np.asarray(CASES[d][0]), "bounding")
    for _ in range(40):  # num_steps=1 as in the monotonicity test: one compiled program
        moments, _ = _kappa.kappa_bounding_update(
            state, weight, dot, PRIOR_M, PRIOR_S2, d=d, num_steps=1
        )
        state = moments.state
    exact = per_chain["mean_kappa"].mean(axis=1)
    if d >= 100:
        np.testing.assert_allclose(moments.mean_kappa, exact, rtol=0.02)
    else:  # measured ratios 0.935 and 0.990
        np.testing.assert_allclose(moments.mean_kappa, exact, rtol=0.1)


def test_bad_scheme():
    with pytest.raises(ValueError, match="scheme must be one of"):
        _kappa.initial_kappa_state([1.0], "grid")
    with pytest.raises(ValueError, match="bounding scheme"):
        _kappa.moments_from_state(jnp.zeros(3), "sampling", d=3)


@pytest.mark.parametrize("scheme", ["sampling", "bounding"])
def test_pooled_update_is_one_concentration_of_the_pooled_target(scheme):
    """Pooled entries get the moments of one update on the summed (weight, dot); others own."""
    from bayesvmf.models.bayesian import _empirical_bayes as _eb

    d = 20
    weight, dot = _targets(d, [5.0, 20.0, 40.0], [30.0, 50.0, 10.0])
    pooled = np.array([True, False, True])
    with jax.enable_x64(True):
        state = _kappa.initial_kappa_state(jnp.array([5.0, 20.0, 40.0]), scheme)
        kw = dict(d=d, num_samples=400, num_warmup=50, num_steps=20)
        key = jax.random.key(0)
        moments, accept = _kappa.pooled_update(
            scheme, key, state, weight, dot, 1.0, 4.0, jnp.asarray(pooled), **kw
        )
        # the reference: a separate update of the pooled target alone, and of entry 1 alone
        alone, _ = _kappa.update(
            scheme,
            key,
            state[jnp.array([0])],
            np.array([weight[0] + weight[2]]),
            np.array([dot[0] + dot[2]]),
            1.0,
            4.0,
            **kw,
        )
        mean_kappa = np.asarray(moments.mean_kappa)
        assert mean_kappa[0] == mean_kappa[2]
        assert accept.shape == (3,)
        if scheme == "bounding":  # deterministic: the same ascent
            np.testing.assert_allclose(mean_kappa[0], float(alone.mean_kappa[0]), rtol=1e-10)
            own, _ = _kappa.update(scheme, key, state[1:2], weight[1:2], dot[1:2], 1.0, 4.0, **kw)
            np.testing.assert_allclose(mean_kappa[1], float(own.mean_kappa[0]), rtol=1e-10)
        else:  # another chain of one target: within Monte Carlo error of the quadrature
            ref = _quadrature_moments(d, weight[0] + weight[2], dot[0] + dot[2], 1.0, 4.0)
            np.testing.assert_allclose(mean_kappa[0], ref["mean_kappa"], rtol=0.05)
        # the KL of the shared concentration counts once
        kl = _kappa.kl_normal(moments.mean_log_kappa, moments.var_log_kappa, 1.0, 4.0)
        total = _kappa.kl_total(
            moments.mean_log_kappa, moments.var_log_kappa, 1.0, 4.0, jnp.asarray(pooled)
        )
        np.testing.assert_allclose(float(total), float(kl[0] + kl[1]), rtol=1e-12)
        # empirical Bayes of (m, s2): two distinct concentrations, the pooled one once
        a, b = np.asarray(moments.mean_log_kappa), np.asarray(moments.var_log_kappa)
        m, s2 = _eb.update_m_s2(jnp.asarray(a), jnp.asarray(b), jnp.asarray(pooled), 4.0)
        np.testing.assert_allclose(float(m), (a[0] + a[1]) / 2, rtol=1e-12)
        expected_s2 = np.mean([b[0] + (a[0] - float(m)) ** 2, b[1] + (a[1] - float(m)) ** 2])
        np.testing.assert_allclose(float(s2), expected_s2, rtol=1e-12)
        # a single concentration: m follows it, s2 is kept (its MLE would collapse the prior)
        everything = jnp.ones(3, bool)
        m1, s21 = _eb.update_m_s2(jnp.full(3, a[0]), jnp.full(3, b[0]), everything, 4.0)
        np.testing.assert_allclose([float(m1), float(s21)], [a[0], 4.0], rtol=1e-12)
