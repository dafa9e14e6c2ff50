"""Tests of bayesvmf.distribution: VonMisesFisher, SphericalUniform, KL, unit_vector.

References are independent of the code under test: ``scipy.stats.vonmises_fisher`` where it
is finite, mpmath quadrature of the definition (at 40 digits) where it is not, exact
one-dimensional CDFs for the cosine w = <mu, x>, and Monte Carlo for moments and KL.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.stats as st
from numpyro.distributions.gof import auto_goodness_of_fit
from numpyro.distributions.kl import kl_divergence
from numpyro.infer import MCMC, NUTS, Predictive
from numpyro.infer.util import log_density, log_likelihood

from bayesvmf import special
from bayesvmf._vmf_sampler import _reflect, _sample_cosine_d3, _sample_cosine_wood
from bayesvmf.distribution import SphericalUniform, VonMisesFisher, unit_vector

# Deterministic float64 code against scipy (itself accurate to a few ulp in this range).
RTOL = 1e-10
# A statistical test fails when its p-value is below this. Every seed is fixed, so a test
# is deterministic; a real defect in a sampler gives p-values of 1e-10 or less here.
P_MIN = 1e-3
# Monte Carlo moments: |estimate - exact| <= Z * standard error (two-sided 5.7e-7 per
# coordinate under normality).
Z = 5.0


# ---------------------------------------------------------------------------------------
# helpers and independent references
# ---------------------------------------------------------------------------------------


def random_unit(rng, shape, d):
    x = rng.standard_normal(tuple(shape) + (d,))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def unit_basis(d, i=0, sign=1.0):
    e = np.zeros(d)
    e[i] = sign
    return e


def points_at_cosine(rng, mu, t):
    """Unit vectors x with <mu, x> = t (one per entry of t), for a unit vector mu."""
    v = rng.standard_normal((len(t), mu.shape[-1]))
    v -= (v @ mu)[:, None] * mu
    v /= np.linalg.norm(v, axis=-1, keepdims=True)
    return t[:, None] * mu + np.sqrt(1.0 - t**2)[:, None] * v


def mp_vmf_moments(d, kappa, dps=40):
    """(log C_d, A_d, Var(w), E[sin^2 theta]) by quadrature over the angle theta to mu.

    1/C_d = |S^{d-2}| int_0^pi exp(kappa cos t) sin^{d-2} t dt; the integrand is rescaled by
    its value at the mode and the interval is split around the mode at multiples of its
    width, so tanh-sinh quadrature resolves the peak for any d and kappa.
    """
    with mp.workdps(dps):
        d, k = mp.mpf(d), mp.mpf(kappa)
        log_area_sub = mp.log(2) + (d - 1) / 2 * mp.log(mp.pi) - mp.loggamma((d - 1) / 2)
        if k == 0:
            c0, theta0, width, h0 = mp.mpf(0), mp.pi / 2, mp.mpf(1), mp.mpf(0)
        else:
            c0 = 2 * k / ((d - 2) + mp.sqrt((d - 2) ** 2 + 4 * k**2))  # cosine at the mode
            theta0 = mp.acos(c0)
            s0 = mp.sin(theta0)
            h0 = k * c0 + ((d - 2) * mp.log(s0) if d > 2 else 0)
            width = 1 / mp.sqrt(k * c0 + ((d - 2) / s0**2 if d > 2 else 0))
        pts = {mp.mpf(0), mp.pi, theta0}
        for j in [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64]:
            for sgn in (-1, 1):
                p = theta0 + sgn * j * width
                if 0 < p < mp.pi:
                    pts.add(p)
        pts = sorted(pts)

        def weight(t):
            return mp.exp(k * mp.cos(t) + (d - 2) * mp.log(mp.sin(t)) - h0)

        z = mp.quad(weight, pts)
        a = mp.quad(lambda t: mp.cos(t) * weight(t), pts) / z
        var_w = mp.quad(lambda t: (mp.cos(t) - a) ** 2 * weight(t), pts) / z
        sin2 = mp.quad(lambda t: mp.sin(t) ** 2 * weight(t), pts) / z
        return -(log_area_sub + h0 + mp.log(z)), a, var_w, sin2


def theta_cdf(d, kappa, n_grid=40001):
    """CDF of the angle theta = arccos <mu, x> under vMF(mu, kappa) on S^{d-1}, tabulated.

    Density proportional to exp(kappa (cos t - 1)) sin^{d-2} t on [0, pi], integrated by
    the trapezoid rule on a grid covering the mode +- 60 widths (the mass outside is below
    exp(-1000)); the grid error is far below the KS resolution 1/sqrt(n).
    """
    if kappa == 0:
        lo, hi = 0.0, np.pi
    else:
        c0 = 2 * kappa / ((d - 2) + np.hypot(d - 2, 2 * kappa))
        theta0 = np.arccos(c0)
        width = 1 / np.sqrt(kappa * c0 + ((d - 2) / np.sin(theta0) ** 2 if d > 2 else 0.0))
        lo, hi = max(0.0, theta0 - 60 * width), min(np.pi, theta0 + 60 * width)
    t = np.linspace(lo, hi, n_grid)
    log_f = -2.0 * kappa * np.sin(t / 2) ** 2
    if d > 2:
        with np.errstate(divide="ignore"):
            log_f = log_f + (d - 2) * np.log(np.sin(t))
    f = np.exp(log_f - log_f.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(t))])
    cdf /= cdf[-1]
    return lambda theta: np.interp(theta, t, cdf)


def angle_to(x, mu):
    """theta = arccos <mu, x> computed as 2 arcsin(|x - mu| / 2): accurate near theta = 0."""
    return 2.0 * np.arcsin(np.clip(np.linalg.norm(x - mu, axis=-1) / 2.0, 0.0, 1.0))


def scipy_logpdf(mu, kappa, x):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return st.vonmises_fisher(mu, kappa).logpdf(x)


# ---------------------------------------------------------------------------------------
# shapes, table-driven over cases x sample_shape x jit
# ---------------------------------------------------------------------------------------


class T(NamedTuple):
    """A VonMisesFisher case: dimension, batch shape of loc, concentration."""

    d: int
    loc_batch: tuple
    kappa: object


CASES = [
    T(2, (), 3.0),
    T(3, (), np.array([0.0, 0.5, 1e7])),
    T(10, (2, 1), np.array([0.0, 2.0, 50.0])),  # loc batch (2, 1) x kappa (3,) -> (2, 3)
]


def make(case, rng):
    return VonMisesFisher(random_unit(rng, case.loc_batch, case.d), case.kappa)


# (sample_shape, jit): each pair compiles the sampler once, so the grid is kept small
@pytest.mark.parametrize("sample_shape, jit", [((), False), ((3, 2), True)], ids=["eager", "jit"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c.d}")
def test_shapes_and_unit_norm(case, sample_shape, jit, rng, rng_key):
    vmf = make(case, rng)
    batch = np.broadcast_shapes(case.loc_batch, np.shape(case.kappa))
    assert vmf.batch_shape == batch
    assert vmf.event_shape == (case.d,)
    assert VonMisesFisher.infer_shapes(case.loc_batch + (case.d,), np.shape(case.kappa)) == (
        batch,
        (case.d,),
    )

    def run(key):
        x = vmf.sample(key, sample_shape)
        return x, vmf.log_prob(x)

    x, lp = (jax.jit(run) if jit else run)(rng_key)
    assert x.shape == sample_shape + batch + (case.d,)
    assert lp.shape == sample_shape + batch
    assert x.dtype == lp.dtype == jnp.float64
    assert np.all(np.isfinite(lp))
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    for moment in (vmf.mean, vmf.variance, vmf.mode):
        assert moment.shape == batch + (case.d,)
    assert vmf.entropy().shape == batch
    if jit and case.d == 3:  # same key, same draws and densities without the outer jit
        x_eager = vmf.sample(rng_key, sample_shape)
        np.testing.assert_allclose(x, x_eager, rtol=1e-14, atol=1e-15)
        # log C + kappa <mu, x> nearly cancels at kappa = 1e7: a few ulp of kappa apart
        atol = 1e-15 * (np.max(case.kappa) + 1.0)
        np.testing.assert_allclose(lp, vmf.log_prob(x_eager), rtol=1e-13, atol=atol)


def test_vmap_matches_batch(rng, rng_key):
    d, kappas = 3, jnp.array([0.0, 0.3, 4.0, 2e3])
    loc = jnp.asarray(random_unit(rng, (4,), d))
    x = jnp.asarray(random_unit(rng, (7, 1), d))

    def per_component(mu, kappa):
        vmf = VonMisesFisher(mu, kappa)
        return vmf.log_prob(x[:, 0]), vmf.entropy(), vmf.mean, vmf.variance

    batched = VonMisesFisher(loc, kappas)
    got = jax.vmap(per_component)(loc, kappas)
    want = (batched.log_prob(x).T, batched.entropy(), batched.mean, batched.variance)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-300)
    keys = jax.random.split(rng_key, 3)
    draws = jax.vmap(lambda k: VonMisesFisher(loc[0], 5.0).sample(k, (2,)))(keys)
    assert draws.shape == (3, 2, d)
    np.testing.assert_allclose(np.linalg.norm(draws, axis=-1), 1.0, atol=1e-12)


def test_pytree_round_trip(rng):
    vmf = VonMisesFisher(random_unit(rng, (3,), 4), jnp.array([0.0, 1.0, 10.0]))
    leaves, treedef = jax.tree_util.tree_flatten(vmf)
    assert len(leaves) == 2  # loc and concentration; the dimension is static
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(again, VonMisesFisher)
    assert again.batch_shape == (3,) and again.event_shape == (4,) and again.dimension == 4
    x = jnp.asarray(random_unit(rng, (3,), 4))
    np.testing.assert_array_equal(again.log_prob(x), vmf.log_prob(x))
    # the distribution passes through jit as an argument
    np.testing.assert_allclose(jax.jit(lambda p, v: p.log_prob(v))(vmf, x), vmf.log_prob(x))
    uniform = SphericalUniform(5)
    leaves, treedef = jax.tree_util.tree_flatten(uniform)
    assert leaves == []
    assert jax.tree_util.tree_unflatten(treedef, leaves).dimension == 5


# ---------------------------------------------------------------------------------------
# log_prob and entropy against scipy and mpmath
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d, kappa",
    [
        (2, 1e-3),
        (2, 50.0),
        (3, 0.1),
        (3, 500.0),
        (10, 1.0),
        (10, 5000.0),
        (100, 50.0),
        (1000, 500.0),
        (1000, 5000.0),
    ],
)
def test_log_prob_and_entropy_against_scipy(d, kappa, rng):
    mu = random_unit(rng, (), d)
    x = np.concatenate(
        [random_unit(rng, (20,), d), points_at_cosine(rng, mu, np.linspace(-1, 1, 21))]
    )
    want = scipy_logpdf(mu, kappa, x)
    assert np.all(np.isfinite(want))  # the case table is chosen where scipy is finite
    vmf = VonMisesFisher(mu, kappa)
    got = vmf.log_prob(x)
    # log C + kappa t: each term is accurate to relative 1e-12 or so, so the error is
    # relative to the size of the terms, not of their (possibly cancelling) sum
    scale = np.abs(special.log_vmf_normalizer(d, kappa)) + kappa
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = st.vonmises_fisher(mu, kappa).entropy()
    np.testing.assert_allclose(vmf.entropy(), entropy, rtol=RTOL, atol=RTOL * scale)


@pytest.mark.parametrize(
    "d, kappa",
    [(100000, 1e7), (100000, 1.0), (100000, 1e3), (2, 1e7), (3, 1e-8), (1000, 5e5), (50, 0.0)],
)
def test_log_prob_against_mpmath(d, kappa, rng):
    """Regimes where scipy overflows: the normaliser by 40-digit quadrature."""
    mu = random_unit(rng, (), d)
    t = np.array([-0.5, 0.0, 0.9, 1.0 - 1e-6, 1.0])
    x = points_at_cosine(rng, mu, t)
    t_exact = x @ mu  # the rounded points, so that the reference uses the same x
    log_c, a, _, _ = mp_vmf_moments(d, kappa)
    with mp.workdps(40):
        want = np.array([float(log_c + mp.mpf(kappa) * mp.mpf(float(ti))) for ti in t_exact])
    got = VonMisesFisher(mu, kappa).log_prob(x)
    # float64 sum of log C (~ -kappa) and kappa <mu, x>: absolute error a few ulp of the terms
    scale = abs(float(log_c)) + kappa
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=4e-16 * scale)
    np.testing.assert_allclose(
        VonMisesFisher(mu, kappa).entropy(),
        -float(log_c) - kappa * float(a),
        rtol=1e-12,
        atol=4e-16 * scale,
    )


def test_log_prob_broadcasts_value_against_batch(rng):
    vmf = VonMisesFisher(random_unit(rng, (3,), 4), jnp.array([0.5, 1.0, 8.0]))
    x = random_unit(rng, (5, 1), 4)
    lp = vmf.log_prob(x)
    assert lp.shape == (5, 3)
    for j in range(3):
        want = scipy_logpdf(np.asarray(vmf.loc[j]), float(vmf.concentration[j]), x[:, 0])
        np.testing.assert_allclose(lp[:, j], want, rtol=RTOL)


def test_uniform_cases_agree():
    d = 7
    x = random_unit(np.random.default_rng(1), (4,), d)
    area = special.log_sphere_area(d)
    np.testing.assert_allclose(VonMisesFisher(unit_basis(d), 0.0).log_prob(x), -area, rtol=1e-15)
    np.testing.assert_allclose(SphericalUniform(d).log_prob(x), -area, rtol=1e-15)
    np.testing.assert_allclose(
        SphericalUniform(3).log_prob(unit_basis(3)), -np.log(4 * np.pi), rtol=1e-15
    )
    np.testing.assert_allclose(VonMisesFisher(unit_basis(d), 0.0).entropy(), area, rtol=1e-15)
    np.testing.assert_allclose(SphericalUniform(d).entropy(), area, rtol=1e-15)


# ---------------------------------------------------------------------------------------
# moments
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d, kappa",
    [(2, 1e-6), (3, 0.0), (3, 1e-3), (2, 1e7), (50, 5.0), (50, 1e4), (1000, 2e3), (3, 1e7)],
)
def test_variance_against_mpmath(d, kappa, rng):
    """The closed-form covariance diagonal, including kappa -> 0 and kappa >> d."""
    mu = random_unit(rng, (), d)
    vmf = VonMisesFisher(mu, kappa)
    _, a, var_w, sin2 = mp_vmf_moments(d, kappa)
    # Cov = s_t^2 (I - mu mu^T) + Var(w) mu mu^T with s_t^2 = E[sin^2]/(d - 1), by symmetry
    tangent = float(sin2 / (d - 1))
    want = tangent + (float(var_w) - tangent) * mu**2
    # the closed form is built from A_d and A_{d+2}, each to relative 1e-12; their difference
    # (the coefficient of mu mu^T) loses up to a factor ~d of that
    np.testing.assert_allclose(vmf.variance, want, rtol=2e-12 * d)
    np.testing.assert_allclose(vmf.mean, float(a) * mu, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(vmf.mode, mu)


# One batched draw per dimension, shared by the KS and moment tests (one compilation each).
# kappa = 1e7 checks the stable forms of both samplers far from the data-fitting range.
N_DRAWS = 100_000
DRAW_KAPPAS = {2: [1e-8, 1.0, 1e7], 3: [0.0, 2.0, 1e7], 10: [0.0, 20.0, 1e7]}


@functools.lru_cache
def draws(d):
    """(mu, kappas, x) with x of shape (N_DRAWS, n_kappa, d) drawn from vMF(mu, kappa_j)."""
    mu = random_unit(np.random.default_rng(d), (), d)
    kappas = np.array(DRAW_KAPPAS[d])
    vmf = VonMisesFisher(mu, kappas)
    return mu, kappas, np.asarray(vmf.sample(jax.random.key(d), (N_DRAWS,)))


@pytest.mark.parametrize("d", sorted(DRAW_KAPPAS))
def test_cosine_distribution_ks(d):
    """KS test of the angle to mu of public samples against the exact 1-D law, per kappa."""
    mu, kappas, x = draws(d)
    for j, kappa in enumerate(kappas):
        p = st.kstest(angle_to(x[:, j], mu), theta_cdf(d, kappa)).pvalue
        assert p > P_MIN, (kappa, p)


@pytest.mark.parametrize("d", [3, 10])
def test_mean_and_variance_monte_carlo(d):
    mu, kappas, x = draws(d)
    vmf = VonMisesFisher(mu, kappas)
    mean, var = np.asarray(vmf.mean), np.asarray(vmf.variance)
    np.testing.assert_array_less(np.abs(x.mean(0) - mean), Z * np.sqrt(var / N_DRAWS))
    sq = (x - mean) ** 2
    np.testing.assert_array_less(np.abs(sq.mean(0) - var), Z * sq.std(0) / np.sqrt(N_DRAWS))


def test_goodness_of_fit_on_sphere():
    """NumPyro's nearest-neighbour goodness of fit: sample and log_prob agree on S^2."""
    mu, kappas, x = draws(3)
    x = x[:10_000, 1]  # kappa = 2
    probs = np.exp(VonMisesFisher(mu, kappas[1]).log_prob(x))
    assert auto_goodness_of_fit(x, probs, dim=2) > P_MIN


def test_theta_cdf_reference_matches_closed_form():
    """The tabulated reference CDF against the closed form on S^2, to trust it elsewhere."""
    for kappa in [0.0, 5.0, 1e7]:
        theta = np.linspace(0, np.pi, 101) if kappa < 1e3 else np.linspace(0, 1e-2, 101)
        if kappa == 0:
            exact = (1 - np.cos(theta)) / 2
        else:
            exact = np.expm1(-kappa * (1 - np.cos(theta))) / np.expm1(-2 * kappa)
        np.testing.assert_allclose(theta_cdf(3, kappa)(theta), exact, atol=1e-6)


@pytest.mark.parametrize(
    "d, kappas, n",
    [
        (5, [0.0, 1.0, 30.0], 40_000),
        (1000, [1.0, 1e3, 1e7], 20_000),
        (100000, [0.0, 1e3, 1e7], 20_000),
    ],
)
def test_wood_sampler_ks(d, kappas, n, rng_key):
    """Wood's sampler for w on its own (no tangent vectors), including d = 1e5, kappa = 1e7."""
    kappa = jnp.repeat(jnp.asarray(kappas), n)
    sample = jax.jit(lambda key, kappa: _sample_cosine_wood(key, kappa, d))
    one_minus_w, sin_w = (np.asarray(v).reshape(len(kappas), n) for v in sample(rng_key, kappa))
    assert np.all(np.isfinite(one_minus_w)) and np.all((one_minus_w >= 0) & (one_minus_w <= 2))
    np.testing.assert_allclose(sin_w**2 + (1 - one_minus_w) ** 2, 1.0, atol=1e-14)
    for j, kappa in enumerate(kappas):
        theta = 2.0 * np.arcsin(np.sqrt(one_minus_w[j] / 2.0))
        p = st.kstest(theta, theta_cdf(d, kappa)).pvalue
        assert p > P_MIN, (kappa, p)


def test_exact_inversion_d3_ks(rng_key):
    """d = 3: kappa (1 - w) is Exp(1) truncated at 2 kappa, also at kappa = 1e7 and 1e-8."""
    kappas = [1e-8, 0.7, 1e7]
    sample = jax.jit(_sample_cosine_d3)
    one_minus_w, sin_w = sample(rng_key, jnp.repeat(jnp.asarray(kappas), 20_000))
    e, sin_w = np.asarray(one_minus_w).reshape(3, -1), np.asarray(sin_w).reshape(3, -1)
    np.testing.assert_allclose(sin_w**2 + (1 - e) ** 2, 1.0, atol=1e-14)
    for j, kappa in enumerate(kappas):
        p = st.kstest(e[j], lambda v, k=kappa: np.expm1(-k * v) / np.expm1(-2 * k)).pvalue
        assert p > P_MIN, (kappa, p)


@pytest.mark.parametrize("d", [2, 3, 1000, 100000])
def test_sampling_extremes_finite(d, rng_key):
    """kappa from 0 to 1e7, loc = +e1 and -e1 (the Householder edge cases): finite unit draws.

    The sample mean of w = <mu, x> must match A_d(kappa) within Z standard errors, with the
    standard error from the exact Var(w) (the variance along mu).
    """
    kappas = jnp.array([0.0, 1e-8, 1.0, 1e3, 1e7])
    loc = np.stack([unit_basis(d, 0, 1.0), unit_basis(d, 0, -1.0)])[:, None, :]
    vmf = VonMisesFisher(loc, kappas)  # batch (2, 5)
    n = 4 if d == 100000 else 400
    x = np.asarray(vmf.sample(rng_key, (n,)))
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    w = np.sum(x * loc, axis=-1)
    var_w = np.sum(np.asarray(vmf.variance) * loc**2, axis=-1)  # mu = +-e1: Var(w) entry
    a = np.asarray(special.mean_resultant_length(d, kappas))
    assert np.all(np.abs(w.mean(0) - a) <= Z * np.sqrt(var_w / n) + 1e-15)


def test_reflection_maps_e1_to_loc(rng):
    """The Householder step: w = +-1 gives +-loc exactly, and the tangent part is orthogonal."""
    d = 6
    loc = np.concatenate(
        [
            random_unit(rng, (5,), d),
            np.stack([unit_basis(d, 0, 1.0), unit_basis(d, 0, -1.0), unit_basis(d, 3)]),
            [np.r_[np.sqrt(1 - 1e-18), 1e-9, np.zeros(d - 2)]],  # within 1e-9 of e1
        ]
    )
    n = loc.shape[0]
    v = random_unit(rng, (n,), d - 1)
    for w in (1.0, -1.0):
        x = _reflect(jnp.full((n,), w), jnp.zeros(n), jnp.asarray(v), jnp.asarray(loc))
        np.testing.assert_allclose(x, w * loc, atol=2e-16)
    w = rng.uniform(-1, 1, n)
    x = np.asarray(_reflect(jnp.asarray(w), jnp.sqrt(1 - w**2), jnp.asarray(v), jnp.asarray(loc)))
    np.testing.assert_allclose(np.sum(x * loc, -1), w, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-15)


def test_float32_smoke():
    """float32 (x64 off): finite log_prob, unit samples, float32 moments over the range."""
    with jax.enable_x64(False):
        for d in (3, 1000):  # the exact inversion and Wood's sampler
            loc = jnp.zeros(d, jnp.float32).at[1].set(1.0)
            vmf = VonMisesFisher(loc, jnp.array([0.0, 1.0, 1e3, 1e7], jnp.float32))
            x = vmf.sample(jax.random.key(0), (8,))
            lp = vmf.log_prob(x)
            assert x.dtype == lp.dtype == jnp.float32
            assert np.all(np.isfinite(lp))
            # float32 rounding of a d-vector: a few ulp times sqrt(d)
            np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-5)
            for out in (vmf.mean, vmf.variance, vmf.entropy()):
                assert out.dtype == jnp.float32 and np.all(np.isfinite(out))
            assert np.all(np.isfinite(SphericalUniform(d).sample(jax.random.key(1), (3,))))


# ---------------------------------------------------------------------------------------
# KL divergences
# ---------------------------------------------------------------------------------------


def test_kl_nonnegative_and_zero_on_diagonal(rng):
    for d in (3, 50):  # the recurrence and the Debye branches of special
        locs = random_unit(rng, (6,), d)
        kappas = np.array([0.0, 1e-6, 0.5, 3.0, 40.0, 1e4])
        p = VonMisesFisher(locs[:, None], kappas[:, None])
        q = VonMisesFisher(locs[None], kappas[None])
        kl = np.asarray(kl_divergence(p, q))
        assert kl.shape == (6, 6)
        # KL is a difference of log-normalisers: between nearly equal distributions (kappa
        # 0 vs 1e-6, KL ~ 1e-14) it may round to a few ulp of |log C| below zero
        log_c = np.abs(np.asarray(special.log_vmf_normalizer(d, kappas)))
        tol = 8e-16 * (log_c[:, None] + log_c[None, :] + kappas[:, None] + kappas[None, :])
        assert np.all(kl >= -tol)
        assert np.sum(kl > 1e-3) >= 6 * 5 - 2  # not trivially zero: off-diagonal pairs differ
        np.testing.assert_array_equal(np.diag(kl), 0.0)  # exactly, by construction
        kl_u = np.asarray(kl_divergence(p, SphericalUniform(d)))[:, 0]
        assert kl_u[0] == 0.0 and np.all(kl_u >= -tol[0])
        u_kl = np.asarray(kl_divergence(SphericalUniform(d), q))[0]
        assert u_kl[0] == 0.0 and np.all(u_kl >= -tol[0])
    np.testing.assert_array_equal(kl_divergence(SphericalUniform(4), SphericalUniform(4)), 0.0)


def test_kl_float32_at_large_dimension(rng):
    """float32 KL at d = 1000: a difference of two log normalisers of size ~2,000 lost three
    digits (1.5e-3 relative in a divergence of 0.04); the normalisers relative to the
    uniform's keep float32's precision."""
    d = 1000
    mu_p, mu_q = random_unit(rng, (2,), d)
    pairs = [(10.0, 1.0), (1.0, 10.0), (50.0, 5.0), (0.5, 0.0)]
    for kappa_p, kappa_q in pairs:
        for loc_q in (mu_p, mu_q):
            kl64 = float(
                kl_divergence(VonMisesFisher(mu_p, kappa_p), VonMisesFisher(loc_q, kappa_q))
            )
            with jax.enable_x64(False):
                p = VonMisesFisher(jnp.asarray(mu_p, jnp.float32), jnp.float32(kappa_p))
                q = VonMisesFisher(jnp.asarray(loc_q, jnp.float32), jnp.float32(kappa_q))
                kl32 = kl_divergence(p, q)
                kl_u32 = kl_divergence(p, SphericalUniform(d))
                u_kl32 = kl_divergence(SphericalUniform(d), q)
                assert kl32.dtype == jnp.float32
            assert float(kl32) == pytest.approx(kl64, rel=2e-5)
            uniform = SphericalUniform(d)
            kl_u64 = float(kl_divergence(VonMisesFisher(mu_p, kappa_p), uniform))
            u_kl64 = float(kl_divergence(uniform, VonMisesFisher(loc_q, kappa_q)))
            assert float(kl_u32) == pytest.approx(kl_u64, rel=2e-5)
            assert float(u_kl32) == pytest.approx(u_kl64, rel=2e-5, abs=1e-12)


@pytest.mark.parametrize(
    "d, j, kappa_q, cos_pq",
    # p is vMF(mu, DRAW_KAPPAS[d][j]), whose draws are cached (no new compilation)
    [(3, 1, 5.0, 0.3), (3, 0, 3.0, -0.5), (10, 1, 50.0, 0.9), (10, 1, 0.0, 1.0)],
)
def test_kl_against_monte_carlo(d, j, kappa_q, cos_pq, rng):
    mu_p, kappas, x = draws(d)
    x = jnp.asarray(x[:, j])
    mu_q = points_at_cosine(rng, mu_p, np.array([cos_pq]))[0]
    p, q = VonMisesFisher(mu_p, kappas[j]), VonMisesFisher(mu_q, kappa_q)
    log_ratio = np.asarray(p.log_prob(x) - q.log_prob(x))
    kl = float(kl_divergence(p, q))
    # rtol 0.05 as NumPyro's own KL tests; the Monte Carlo error is far below it here
    assert Z * log_ratio.std() / np.sqrt(len(log_ratio)) < 0.05 * max(kl, 0.1)
    np.testing.assert_allclose(kl, log_ratio.mean(), rtol=0.05)
    uniform = SphericalUniform(d)
    kl_u = float(kl_divergence(p, uniform))
    np.testing.assert_allclose(
        kl_u, np.mean(p.log_prob(x) - uniform.log_prob(x)), rtol=0.05, atol=1e-12
    )
    y = jnp.asarray(draws(d)[2][:, 0])  # kappa = 0: uniform draws
    np.testing.assert_allclose(
        kl_divergence(uniform, q),
        np.mean(uniform.log_prob(y) - q.log_prob(y)),
        rtol=0.05,
        atol=1e-12,
    )


def test_kl_of_zero_concentration_equals_uniform(rng):
    d = 5
    q = VonMisesFisher(random_unit(rng, (), d), 7.0)
    p0 = VonMisesFisher(random_unit(rng, (), d), 0.0)
    np.testing.assert_allclose(
        kl_divergence(p0, q), kl_divergence(SphericalUniform(d), q), rtol=1e-13
    )
    np.testing.assert_allclose(kl_divergence(p0, SphericalUniform(d)), 0.0, atol=1e-13)


def test_kl_dimension_mismatch():
    with pytest.raises(ValueError, match=r"same sphere; got event shapes \(3,\) and \(4,\)"):
        kl_divergence(VonMisesFisher(unit_basis(3), 1.0), VonMisesFisher(unit_basis(4), 1.0))
    with pytest.raises(ValueError, match="same sphere"):
        kl_divergence(VonMisesFisher(unit_basis(3), 1.0), SphericalUniform(4))


# ---------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d, kappa", [(3, 0.5), (3, 1e5), (50, 30.0), (1000, 0.5), (100000, 0.5), (100000, 1e5)]
)
def test_gradients_against_finite_differences(d, kappa, rng):
    mu = jnp.asarray(random_unit(rng, (), d))
    x = jnp.asarray(points_at_cosine(rng, np.asarray(mu), np.array([0.7]))[0])

    def f(k, m):  # no validation: the finite differences step off the sphere
        return VonMisesFisher(m, k, validate_args=False).log_prob(x)

    grad_k, grad_mu = jax.grad(f, argnums=(0, 1))(kappa, mu)
    # central differences: the truncation h^2 |A_d''| / 6 is below 1e-8 relative with
    # h = 1e-4 kappa; the rounding eps |f| / h is large where |log C| is (d = 1e5: |f| ~ 4e5),
    # so it sets the absolute tolerance
    h = 1e-4 * kappa
    fd_k = (f(kappa + h, mu) - f(kappa - h, mu)) / (2 * h)
    np.testing.assert_allclose(grad_k, fd_k, rtol=1e-7, atol=8e-16 * abs(float(f(kappa, mu))) / h)
    # the analytic derivative: <mu, x> - A_d(kappa) (custom JVP of log C)
    np.testing.assert_allclose(
        grad_k, 0.7 - special.mean_resultant_length(d, kappa), rtol=1e-12, atol=1e-14
    )
    # log_prob is linear in loc (no renormalisation): FD along a random direction is exact
    # up to the rounding of f, eps |f| / step
    direction = jnp.asarray(rng.standard_normal(d))
    step = 1e-3
    fd_mu = (f(kappa, mu + step * direction) - f(kappa, mu - step * direction)) / (2 * step)
    atol = 8e-16 * abs(float(f(kappa, mu))) / step
    np.testing.assert_allclose(grad_mu @ direction, fd_mu, rtol=1e-10, atol=atol)
    np.testing.assert_allclose(grad_mu, kappa * x, rtol=1e-14)


# ---------------------------------------------------------------------------------------
# inside NumPyro: obs=, MixtureSameFamily, NUTS on kappa, unit_vector
# ---------------------------------------------------------------------------------------


def test_observed_site_log_density(rng):
    x = jnp.asarray(random_unit(rng, (30,), 4))
    mu = jnp.asarray(random_unit(rng, (), 4))

    def model(x):
        kappa = numpyro.sample("kappa", dist.Exponential(0.1))
        with numpyro.plate("obs", x.shape[0]):
            numpyro.sample("x", VonMisesFisher(mu, kappa), obs=x)

    got, _ = log_density(model, (x,), {}, {"kappa": 3.0})
    want = dist.Exponential(0.1).log_prob(3.0) + np.sum(scipy_logpdf(np.asarray(mu), 3.0, x))
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_mixture_same_family(rng):
    d, k = 3, 3
    weights = jnp.array([0.2, 0.5, 0.3])
    comp = VonMisesFisher(random_unit(rng, (k,), d), jnp.array([0.0, 5.0, 40.0]))
    mix = dist.MixtureSameFamily(dist.Categorical(probs=weights), comp)
    x = jnp.asarray(random_unit(rng, (11,), d))
    want = jax.scipy.special.logsumexp(jnp.log(weights) + comp.log_prob(x[:, None, :]), axis=-1)
    np.testing.assert_allclose(mix.log_prob(x), want, rtol=1e-14)
    draws = mix.sample(jax.random.key(3), (5,))
    assert draws.shape == (5, d)
    np.testing.assert_allclose(np.linalg.norm(draws, axis=-1), 1.0, atol=1e-12)


@pytest.mark.slow
def test_nuts_recovers_concentration(rng, rng_key):
    d, kappa_true, n = 5, 10.0, 500
    mu = random_unit(rng, (), d)
    x = VonMisesFisher(mu, kappa_true).sample(rng_key, (n,))

    def model(x):
        kappa = numpyro.sample("kappa", dist.Exponential(0.05))  # prior mean 20
        with numpyro.plate("obs", x.shape[0]):
            numpyro.sample("x", VonMisesFisher(mu, kappa), obs=x)

    mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.key(7), x)
    kappa = np.asarray(mcmc.get_samples()["kappa"])
    # posterior sd ~ kappa / sqrt(n (d - 1) / 2) ~ 0.3: the check is a few sd wide and
    # would fail for an error of a few percent in log_prob's kappa dependence
    assert kappa.std() < 1.0
    assert abs(kappa.mean() - kappa_true) < 4 * kappa.std()


@pytest.mark.slow
def test_unit_vector_nuts_recovers_direction(rng, rng_key):
    d, kappa, n = 3, 50.0, 200
    mu_true = random_unit(rng, (), d)
    x = VonMisesFisher(mu_true, kappa).sample(rng_key, (n,))

    def model(x):
        mu = unit_vector("mu", d)
        with numpyro.plate("obs", x.shape[0]):
            numpyro.sample("x", VonMisesFisher(mu, kappa), obs=x)

    mcmc = MCMC(NUTS(model), num_warmup=200, num_samples=200, progress_bar=False)
    mcmc.run(jax.random.key(11), x)
    mu = np.asarray(mcmc.get_samples()["mu"])
    np.testing.assert_allclose(np.linalg.norm(mu, axis=-1), 1.0, atol=1e-12)
    # posterior angular sd ~ 1/sqrt(n kappa) = 0.01 rad; the MLE is within a few of those
    mu_hat = np.asarray(x.sum(0) / np.linalg.norm(x.sum(0)))
    mean_dir = mu.mean(0) / np.linalg.norm(mu.mean(0))
    assert mean_dir @ mu_hat > np.cos(0.02)
    assert mean_dir @ mu_true > np.cos(0.05)


def test_unit_vector_prior_density(rng):
    """With a prior, the density of y is N(y) * prior(mu) / uniform(mu): mu's marginal is the
    prior, and the model has no site but y and mu (no factor, which NumPyro counts as data)."""
    d = 4
    prior = VonMisesFisher(random_unit(rng, (), d), 3.0)
    y = jnp.asarray(rng.standard_normal(d))

    def model():
        return unit_vector("mu", d, prior=prior)

    got, trace = log_density(model, (), {}, {"mu_normal": y})
    assert set(trace) == {"mu_normal", "mu"}
    mu = y / jnp.linalg.norm(y)
    np.testing.assert_allclose(trace["mu"]["value"], mu, rtol=1e-15)
    want = np.sum(st.norm.logpdf(np.asarray(y))) + prior.log_prob(mu) + special.log_sphere_area(d)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    # without a prior: only the Gaussian
    got0, _ = log_density(lambda: unit_vector("mu", d), (), {}, {"mu_normal": y})
    np.testing.assert_allclose(got0, np.sum(st.norm.logpdf(np.asarray(y))), rtol=1e-13)
    with pytest.raises(ValueError, match=r"prior must have event shape \(5,\); got \(4,\)"):
        numpyro.handlers.seed(lambda: unit_vector("mu", 5, prior=prior), 0)()


def test_unit_vector_prior_draws_and_log_likelihood(rng):
    """Draws from a model with a unit_vector prior follow the prior (they were uniform: the
    prior was a factor, which NumPyro does not sample), and ``log_likelihood`` (what
    ``az.from_numpyro`` gives ``az.loo``) holds the data site alone (it held the factor
    ``mu_prior`` too, and ``az.loo`` refused the two)."""
    d, kappa, n = 5, 4.0, 20_000
    loc = random_unit(rng, (), d)

    def model(x=None):
        mu = unit_vector("mu", d, prior=VonMisesFisher(loc, kappa))
        with numpyro.plate("obs", 3):
            numpyro.sample("x", VonMisesFisher(mu, 10.0), obs=x)

    draws = Predictive(model, num_samples=n)(jax.random.key(0))
    cosine = np.asarray(draws["mu"] @ loc)
    # E[mu . loc] = A_d(kappa) under the prior (0 when uniform); Monte Carlo standard error
    exact = float(special.mean_resultant_length(d, kappa))
    assert abs(cosine.mean() - exact) < Z * cosine.std() / np.sqrt(n)
    # the radius is chi_d, as N(0, I)'s: E|y|^2 = d
    radius_sq = np.sum(np.asarray(draws["mu_normal"]) ** 2, axis=1)
    assert abs(radius_sq.mean() - d) < Z * radius_sq.std() / np.sqrt(n)
    x = np.asarray(draws["x"][0])
    posterior = {"mu_normal": draws["mu_normal"][:10]}
    log_lik = log_likelihood(model, posterior, x)
    assert set(log_lik) == {"x"} and log_lik["x"].shape == (10, 3)


# ---------------------------------------------------------------------------------------
# SphericalUniform
# ---------------------------------------------------------------------------------------


def test_spherical_uniform_samples(rng_key):
    d, n = 4, 100_000
    u = SphericalUniform(d)
    x = np.asarray(u.sample(rng_key, (n,)))
    assert x.shape == (n, d) and u.batch_shape == () and u.event_shape == (d,)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-14)
    np.testing.assert_array_less(np.abs(x.mean(0)), Z * np.sqrt(1 / d / n))
    np.testing.assert_allclose(u.mean, np.zeros(d))
    np.testing.assert_allclose(u.variance, np.full(d, 1 / d))
    sq = x**2
    np.testing.assert_array_less(np.abs(sq.mean(0) - 1 / d), Z * sq.std(0) / np.sqrt(n))
    # the cosine to any axis has the vMF(kappa = 0) law
    assert st.kstest(angle_to(x, unit_basis(d)), theta_cdf(d, 0.0)).pvalue > P_MIN


# ---------------------------------------------------------------------------------------
# bad input: exact error type and message, nothing modified
# ---------------------------------------------------------------------------------------


def test_invalid_loc_norm_with_validate_args():
    loc = np.array([1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="VonMisesFisher distribution got invalid loc parameter"):
        VonMisesFisher(loc, 1.0, validate_args=True)
    np.testing.assert_array_equal(loc, [1.0, 1.0, 0.0])  # caller's array untouched


@pytest.mark.parametrize("kappa", [-0.5, np.nan, np.inf])
def test_negative_nan_or_infinite_concentration_with_validate_args(kappa):
    # kappa = inf (a point mass, no density) passed NumPyro's nonnegative constraint and
    # gave log_prob NaN
    message = rf"concentration must be finite and >= 0 \(and not NaN\); got {kappa}$"
    with pytest.raises(ValueError, match=f"got invalid concentration parameter: {message}"):
        VonMisesFisher(unit_basis(3), jnp.array([1.0, kappa]), validate_args=True)


@pytest.mark.parametrize("cls", ["vmf", "uniform"])
def test_sample_shape_checked(cls):
    d = VonMisesFisher(unit_basis(3), 2.0) if cls == "vmf" else SphericalUniform(3)
    key = jax.random.key(0)
    np.testing.assert_array_equal(d.sample(key, 4), d.sample(key, (4,)))  # as jax.random
    assert d.sample(key, (2, 0)).shape == (2, 0, 3)
    with pytest.raises(ValueError, match=r"^sample_shape must hold sizes >= 0; got \(-1,\)"):
        d.sample(key, (-1,))
    with pytest.raises(TypeError, match=r"^sample_shape must be a tuple of ints; got \(2\.5,\)"):
        d.sample(key, (2.5,))
    with pytest.raises(TypeError, match=r"^sample_shape must be a tuple of ints \(or an int\)"):
        d.sample(key, None)


@pytest.mark.parametrize("loc", [np.ones(1), np.ones((3, 1))])
def test_dimension_one_rejected(loc):
    with pytest.raises(ValueError, match=r"loc must have dimension d >= 2 .* got d = 1"):
        VonMisesFisher(loc, 1.0)


def test_scalar_loc_rejected():
    with pytest.raises(ValueError, match=r"loc must be an array of shape \(\.\.\., d\)"):
        VonMisesFisher(1.0, 1.0)


def test_non_broadcasting_shapes_rejected(rng):
    with pytest.raises(
        ValueError,
        match=r"loc of shape \(3, 4\) .* and concentration of shape \(2,\) do not broadcast",
    ):
        VonMisesFisher(random_unit(rng, (3,), 4), np.ones(2))


def test_log_prob_validation(rng):
    vmf = VonMisesFisher(unit_basis(3), 2.0, validate_args=True)
    with pytest.warns(UserWarning, match="Out-of-support values"):
        lp = vmf.log_prob(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    assert lp[0] == -np.inf and np.isfinite(lp[1])
    with pytest.raises(ValueError, match=r"value must have event shape \(3,\); got shape \(2, 4\)"):
        vmf.log_prob(random_unit(rng, (2,), 4))


@pytest.mark.parametrize("validate_args", [None, True])
def test_log_prob_refuses_another_dimension(rng, validate_args):
    """A value of another dimension has no density: refused with or without validate_args.

    SphericalUniform(3) returned its d = 3 density for 4-vectors, and VonMisesFisher in 3-D
    broadcast a last axis of length 1 against mu (both without a message)."""
    message = r"value must have event shape \(3,\); got shape \(2, 4\)"
    with pytest.raises(ValueError, match=message):
        SphericalUniform(3, validate_args=validate_args).log_prob(random_unit(rng, (2,), 4))
    with pytest.raises(ValueError, match=r"event shape \(3,\); got shape \(2, 1\)"):
        VonMisesFisher(unit_basis(3), 2.0, validate_args=validate_args).log_prob(np.ones((2, 1)))


@pytest.mark.parametrize("dimension, match", [(1, "got d = 1"), (2.5, "must be an integer")])
def test_spherical_uniform_bad_dimension(dimension, match):
    with pytest.raises(ValueError, match=match):
        SphericalUniform(dimension)
