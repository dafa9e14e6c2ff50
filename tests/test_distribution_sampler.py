"""Statistical tests of VonMisesFisher.sample over a grid of (d, kappa, n), float32 and float64.

The grid straddles 2^15 elements per draw (sample_shape + batch_shape + (d,)): jaxlib 0.10.2
miscompiles some jitted reduce-then-broadcast fusions on the CPU past about that size
(jax-ml/jax issue 39103), and the sampler's Householder step used to hit it (d = 6,
n = 10,000, float32: mean cosine 12 standard errors off), so every size is drawn through the
public ``sample``, jitted as users run it. Each case checks, against references that do not
use the sampler:

* the mean of :math:`1 - t`, :math:`t = \\mu^\\top x` the cosine with the mean direction,
  within ``Z`` standard errors of :math:`1 - A_d(\\kappa)`
  (``special.one_minus_mean_resultant_length``; the same check as the mean cosine against
  :math:`A_d`, without the rounding of :math:`t` near 1), the standard error from the exact
  variance of :math:`t` (``VonMisesFisher.variance``);
* the second moment :math:`E[(1-t)^2] = \\operatorname{Var}(t) + (1 - A_d)^2`, its standard
  error from the fourth moment of the exact marginal by quadrature;
* a Kolmogorov-Smirnov test of the angle :math:`\\theta = \\arccos t` (a monotone function of
  :math:`t`, so the same test as one of :math:`t`) against the CDF of the exact marginal
  density :math:`\\propto e^{\\kappa \\cos\\theta} \\sin^{d-2}\\theta` (the density
  :math:`\\propto e^{\\kappa t}(1-t^2)^{(d-3)/2}` of :math:`t`), by quadrature;
* the tangent part: the mean of :math:`x - t\\mu` is zero (a chi-square test of
  :math:`n \\lVert \\bar x_\\perp \\rVert^2 / \\sigma_\\perp^2 \\sim \\chi^2_{d-1}`), so the
  reflection carries the uniform tangent direction onto the sphere around :math:`\\mu`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.stats as st

from bayesvmf import VonMisesFisher, special

# A statistical test fails when its p-value is below this (every key is fixed, so each test
# is deterministic; the defect this file guards against gave p-values below 1e-30).
P_MIN = 1e-3
# Moments: |estimate - exact| <= Z standard errors.
Z = 5.0

# (d, kappa, n, batch): batch None draws n from one distribution; an int B draws n from each
# of B distributions with random mean directions and, when kappa is a tuple, one kappa each.
# Elements per draw, n * B * d, on both sides of 2^15 = 32,768.
GRID = [
    pytest.param(2, 50.0, 20_000, None, id="d2-k50-n20000"),  # 40,000 elements
    pytest.param(3, 1.0, 1_000, None, id="d3-k1-n1000"),  # 3,000
    pytest.param(3, 5.0, 33_000, None, id="d3-k5-n33000"),  # 99,000 (the issue's)
    pytest.param(5, 0.0, 8_000, None, id="d5-k0-n8000"),  # 40,000, uniform
    pytest.param(6, 5.0, 10_000, None, id="d6-k5-n10000"),  # 60,000 (the issue's)
    pytest.param(6, 5.0, 4_000, None, id="d6-k5-n4000"),  # 24,000
    pytest.param(10, 5.0, 10_000, None, id="d10-k5-n10000"),  # 100,000 (the issue's)
    pytest.param(100, 1e4, 2_000, None, id="d100-k1e4-n2000"),  # 200,000
    pytest.param(1000, 500.0, 200, None, id="d1000-k500-n200"),  # 200,000
    pytest.param(6, (0.5, 5.0, 50.0, 500.0, 5000.0), 2_000, 5, id="d6-batch5-n2000"),  # 60,000
    pytest.param(4, (1.0, 30.0), 2_000, 2, id="d4-batch2-n2000"),  # 16,000
    pytest.param(4, 2.0, 10_000, None, id="d4-k2-n10000"),  # 40,000
    pytest.param(16, 20.0, 4_000, None, id="d16-k20-n4000"),  # 64,000
    pytest.param(3, 20.0, 300, 200, id="d3-batch200-n300"),  # 180,000
]


@functools.cache
def angle_law(d, kappa):
    """Exact law of theta = arccos(mu.x) by quadrature: (grid, CDF on it, E(1-t)^k k=1..4).

    Density in theta on [0, pi]: exp(kappa (cos theta - 1)) sin^(d-2) theta, up to a constant
    (the factor exp(-kappa) keeps it finite). The grid is refined to where the mass is:
    theta <= 60 / sqrt(kappa) + 30 / sqrt(d) (many standard deviations past the mode).
    """
    top = min(np.pi, 60.0 / np.sqrt(max(kappa, 1e-300)) + 30.0 / np.sqrt(d))
    theta = np.linspace(0.0, top, 400_001)
    with np.errstate(divide="ignore"):
        log_sin = np.log(np.sin(theta))
    log_f = kappa * (np.cos(theta) - 1.0) + (0.0 if d == 2 else (d - 2) * log_sin)
    f = np.exp(log_f - np.max(log_f))
    cdf = scipy.integrate.cumulative_trapezoid(f, theta, initial=0.0)
    total = cdf[-1]
    one_minus_t = 2.0 * np.sin(0.5 * theta) ** 2
    moments = [scipy.integrate.trapezoid(f * one_minus_t**k, theta) / total for k in (1, 2, 3, 4)]
    return theta, cdf / total, moments


def _draw(d, kappa, n, batch, dtype, seed):
    """Draws, the mean directions and concentrations used (as the sampler saw them)."""
    rng = np.random.default_rng(seed)
    if batch is None:
        loc = rng.standard_normal(d)
        kappas = np.asarray(kappa)
    else:
        loc = rng.standard_normal((batch, d))
        kappas = np.broadcast_to(np.asarray(kappa), (batch,))
    loc = loc / np.linalg.norm(loc, axis=-1, keepdims=True)
    vmf = VonMisesFisher(jnp.asarray(loc, dtype), jnp.asarray(kappas, dtype))
    x = vmf.sample(jax.random.key(seed), (n,))
    assert x.shape == (n,) + vmf.batch_shape + (d,) and x.dtype == dtype
    return np.asarray(x, np.float64), np.asarray(vmf.loc, np.float64), kappas


def _check_member(x, loc, d, kappa, label):
    """All checks for draws x (n, d) from one vMF(loc, kappa); ``label`` names the case."""
    n = x.shape[0]
    assert np.all(np.isfinite(x)), label
    # the tangent part and 1 - t = |x - mu|^2 / 2 without cancellation near t = 1
    one_minus_t = 0.5 * np.sum((x - loc) ** 2, axis=-1)
    t = 1.0 - one_minus_t
    theta = 2.0 * np.arcsin(np.clip(np.sqrt(one_minus_t / 2.0), 0.0, 1.0))
    grid, cdf, (m1, m2, m3, m4) = angle_law(d, float(kappa))

    with jax.enable_x64(True):
        exact_1ma = float(special.one_minus_mean_resultant_length(d, float(kappa)))
        e1 = np.eye(d)[0]
        var_t = float(VonMisesFisher(jnp.asarray(e1), float(kappa)).variance[0])
    # the quadrature agrees with the package's special functions (it is the reference below)
    assert abs(m1 - exact_1ma) <= 1e-6 * exact_1ma + 1e-12, (label, m1, exact_1ma)
    assert abs(m2 - m1**2 - var_t) <= 1e-5 * var_t + 1e-14, (label, m2 - m1**2, var_t)

    se1 = np.sqrt(var_t / n)
    z1 = (one_minus_t.mean() - exact_1ma) / se1
    assert abs(z1) <= Z, (
        f"{label}: mean cosine {t.mean():.6f}, A_d = {1 - exact_1ma:.6f}, z = {z1:.1f}"
    )
    exact_m2 = var_t + exact_1ma**2
    se2 = np.sqrt(max(m4 - m2**2, 0.0) / n)
    z2 = (np.mean(one_minus_t**2) - exact_m2) / se2
    assert abs(z2) <= Z, (
        f"{label}: E(1-t)^2 {np.mean(one_minus_t**2):.6g} vs {exact_m2:.6g}, z = {z2:.1f}"
    )

    ks = st.kstest(theta, lambda s: np.interp(s, grid, cdf))
    assert ks.pvalue >= P_MIN, (
        f"{label}: KS of the cosine, D = {ks.statistic:.4f}, p = {ks.pvalue:.2g}"
    )

    tangent_mean = (x - t[:, None] * loc).mean(0)
    sigma2 = (1.0 - (m2 - 2 * m1 + 1.0)) / (d - 1)  # E|x_perp|^2 / (d - 1) = (1 - E t^2)/(d-1)
    chi2 = n * np.sum(tangent_mean**2) / sigma2
    p_tangent = st.chi2.sf(chi2, d - 1)
    assert p_tangent >= P_MIN, f"{label}: tangent mean chi2 = {chi2:.1f} on {d - 1} dof"


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize(("d", "kappa", "n", "batch"), GRID)
def test_sampler_statistics(d, kappa, n, batch, x64):
    """Mean cosine, second moment, KS of the cosine and tangent mean at every grid size."""
    seed = d * 7919 + n
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        x, loc, kappas = _draw(d, kappa, n, batch, dtype, seed)
    if batch is None:
        _check_member(x, loc, d, kappas, f"d={d} kappa={kappa} n={n}")
        return
    if np.ndim(kappa) == 0:  # one law for every member: pool the members in the tangent frame
        # rotate each member's draws so its mean direction is e_1 (a reflection per member)
        e1 = np.eye(d)[0]
        u = loc - e1
        u_sq = np.sum(u * u, -1, keepdims=True)
        u_sq = np.where(u_sq > 0, u_sq, 1.0)
        pooled = x - 2.0 * np.sum(x * u, -1, keepdims=True) / u_sq * u
        _check_member(pooled.reshape(-1, d), e1, d, kappa, f"d={d} kappa={kappa} n={n}x{batch}")
        return
    for b in range(batch):
        _check_member(x[:, b], loc[b], d, kappas[b], f"d={d} kappa={kappas[b]} n={n} member {b}")
