"""VonMisesFisher against scipy's and TFP's published vMF tests, at their tolerances.

scipy: the reference values of ``TestVonMises_Fisher`` in scipy 1.17's
``scipy/stats/tests/test_multivariate.py`` (``test_pdf_accuracy`` rtol 1e-13,
``test_logpdf_accuracy`` rtol 1e-14, ``test_entropy_accuracy`` rtol 2e-14; scipy computed
them with mpmath at 50 digits). They are copied below as published, one row per case.

TFP: ``tensorflow_probability/python/distributions/von_mises_fisher_test.py`` publishes no
fixed values; its ``_verifyPdfWithNumpy`` compares float32 ``log_prob`` with the formula
``kappa mu.x + (d/2 - 1) log kappa - (d/2) log 2 pi - log ive(d/2 - 1, kappa) - kappa``
(``-log|S^{d-1}|`` at kappa = 0) at absolute tolerances 1e-4 (d = 2, 4), 2e-3 (d = 3) and
2e-4 (d = 5), for the mean directions and concentrations of its
``testSampleAndPdfConsistency{2,3,4,5}d``; the same cases and tolerances are used here, in
float32 as TFP runs them.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sc

from bayesvmf import VonMisesFisher

E3, Z3, E5 = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0]), np.eye(5)[0]
S98, S02 = np.sqrt(0.98), np.sqrt(0.02)
MU_98_3 = np.array([S98, S02, 0.0])
MU_98_5 = np.array([S98, S02, 0.0, 0.0, 0.0])
MU_8_5 = np.array([np.sqrt(0.8), np.sqrt(0.2), 0.0, 0.0, 0.0])

# (x, mu, kappa, pdf, logpdf): scipy TestVonMises_Fisher.test_pdf_accuracy and
# test_logpdf_accuracy (the same cases in the same order)
SCIPY_DENSITY = [
    (E3, E3, 1e-4, 0.0795854295583605, -2.5309242486359573),
    (E3, Z3, 1e-4, 0.07957747141331854, -2.5310242486359575),
    (E3, E3, 100, 15.915494309189533, 2.767293119578746),
    (E3, Z3, 100, 5.920684802611232e-43, -97.23270688042125),
    (E3, MU_98_3, 2000, 5.930499050746588e-07, -14.337987284534103),
    (E3, E3, 2000, 318.3098861837907, 5.763025393132737),
    (E5, E5, 2000, 101371.86957712633, 11.526550911307156),
    (E5, MU_98_5, 2000, 0.00018886808182653578, -8.574461766359684),
    (E5, MU_8_5, 2000, 2.0255393314603194e-87, -199.61906708886113),
]
# (d, kappa, entropy): scipy TestVonMises_Fisher.test_entropy_accuracy, mu = 1/sqrt(d)
SCIPY_ENTROPY = [
    (3, 1e-4, 2.531024245302624),
    (3, 100, -1.7672931195787458),
    (5, 5000, -11.359032310024453),
    (8, 1, 3.4189526482545527),
]


@pytest.mark.parametrize(("x", "mu", "kappa", "pdf", "logpdf"), SCIPY_DENSITY)
def test_scipy_published_density(x, mu, kappa, pdf, logpdf):
    """float64 log-density to rtol 1e-14 and density to rtol 1e-13 (scipy's tolerances)."""
    got = VonMisesFisher(jnp.asarray(mu), kappa).log_prob(jnp.asarray(x))
    np.testing.assert_allclose(float(got), logpdf, rtol=1e-14)
    np.testing.assert_allclose(np.exp(float(got)), pdf, rtol=1e-13)


@pytest.mark.parametrize(("d", "kappa", "entropy"), SCIPY_ENTROPY)
def test_scipy_published_entropy(d, kappa, entropy):
    """float64 entropy to rtol 2e-14 (scipy's tolerance)."""
    mu = jnp.full((d,), 1.0 / np.sqrt(d))
    np.testing.assert_allclose(float(VonMisesFisher(mu, kappa).entropy()), entropy, rtol=2e-14)


# TFP testSampleAndPdfConsistency{2,3,4,5}d: (mean directions before normalising,
# concentrations, atol of _verifyPdfWithNumpy)
TFP_CASES = [
    ([[1.0, 2], [-2, -3]], [0, 1e-5, 0.1, 1, 10], 1e-4),
    ([[1.0, 2, 3], [-2, -3, -1]], [0, 1e-5, 0.1, 1, 10], 2e-3),
    ([[1.0, 2, 3, 4], [-2, -3, -1, 0]], [0, 1e-4, 0.1, 1, 10], 1e-4),
    ([[1.0, 2, 3, 4, 5], [-2, -3, -1, 0, 1]], [0, 5e-2, 0.1, 1, 10], 2e-4),
]


@pytest.mark.parametrize(("mean_dirs", "kappas", "atol"), TFP_CASES)
def test_tfp_log_prob_float32(mean_dirs, kappas, atol):
    """float32 log_prob of TFP's cases against its ive formula, at TFP's tolerances."""
    mu = np.asarray(mean_dirs, np.float64)
    mu /= np.linalg.norm(mu, axis=-1, keepdims=True)
    dim = mu.shape[-1]
    conc = np.asarray(kappas, np.float64)[:, None]  # batch (5, 2) as TFP's
    rng = np.random.default_rng(dim)
    x = rng.standard_normal((10, 5, 2, dim))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    with jax.enable_x64(False):
        vmf = VonMisesFisher(jnp.asarray(mu, jnp.float32), jnp.asarray(conc, jnp.float32))
        draws = vmf.sample(jax.random.key(dim), (10,))
        points = np.concatenate([x.astype(np.float32), np.asarray(draws)])
        log_prob = vmf.log_prob(jnp.asarray(points))
        assert log_prob.dtype == jnp.float32
    got = np.asarray(log_prob, np.float64)
    assert np.isfinite(got).all()
    points = points.astype(np.float64)
    log_area = np.log(2) + dim / 2 * np.log(np.pi) - sc.gammaln(dim / 2)
    safe = np.where(conc > 0, conc, 1.0)
    with np.errstate(divide="ignore"):
        log_c = np.where(
            conc > 0,
            (dim / 2 - 1) * np.log(safe)
            - dim / 2 * np.log(2 * np.pi)
            - np.log(sc.ive(dim / 2 - 1, safe))
            - safe,
            -log_area,
        )
    want = conc * np.sum(points * mu, -1) + log_c
    np.testing.assert_allclose(got, want, atol=atol)
