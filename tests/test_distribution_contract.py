"""The contract NumPyro's generic distribution tests check, for VonMisesFisher and SphericalUniform.

Written for this project after reading what NumPyro 0.22's ``test/test_distributions.py``
checks for its distributions (shapes, ``expand``, ``to_event``, ``mask``, ``vmap`` with
``vmap_over``, ``jit`` with ``validate_args``, pytree flattening, ``infer_shapes``,
support and constraints, ``log_prob`` gradients, entropy, mean and variance against Monte
Carlo, KL against Monte Carlo, outputs that are arrays), over a table of cases from d = 2 to
1,000 and kappa = 0 to 1e4, in float32 (inside ``jax.enable_x64(False)``) and float64.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.distributions.batch_util import vmap_over
from numpyro.distributions.kl import kl_divergence

from bayesvmf import SphericalUniform, VonMisesFisher, special

Z = 5.0  # Monte Carlo: |estimate - exact| <= Z standard errors
N_MC = 4000

# (d, (kappa of batch member 0, kappa of batch member 1))
CASES = [
    (2, (0.0, 1.0)),
    (3, (1.0, 50.0)),
    (10, (0.0, 100.0)),
    (100, (10.0, 1e4)),
    (1000, (1.0, 500.0)),
]
DTYPES = [pytest.param(False, id="float32"), pytest.param(True, id="float64")]


def _case(d, kappas, x64):
    rng = np.random.default_rng(d)
    loc = rng.standard_normal((2, d))
    loc /= np.linalg.norm(loc, axis=-1, keepdims=True)
    dtype = jnp.float64 if x64 else jnp.float32
    return jnp.asarray(loc, dtype), jnp.asarray(kappas, dtype)


@pytest.mark.parametrize("x64", DTYPES)
@pytest.mark.parametrize(("d", "kappas"), CASES)
def test_contract(d, kappas, x64):
    """Shapes, expand, to_event, mask, vmap/vmap_over, pytree, jit, infer_shapes, support."""
    with jax.enable_x64(x64):
        loc, kappa = _case(d, kappas, x64)
        dtype = loc.dtype
        vmf = VonMisesFisher(loc, kappa, validate_args=True)
        assert vmf.batch_shape == (2,) and vmf.event_shape == (d,)
        assert VonMisesFisher.infer_shapes(loc.shape, kappa.shape) == ((2,), (d,))
        key = jax.random.key(d)
        x = vmf.sample(key, (3,))
        assert x.shape == (3, 2, d) and x.dtype == dtype
        assert bool(jnp.all(vmf.support(x)))
        lp = vmf.log_prob(x)
        assert lp.shape == (3, 2) and lp.dtype == dtype and bool(jnp.all(jnp.isfinite(lp)))
        for name, constraint in vmf.arg_constraints.items():
            assert bool(jnp.all(constraint(getattr(vmf, name))))
        # expand, to_event, mask
        expanded = vmf.expand((4, 2))
        assert expanded.batch_shape == (4, 2) and expanded.sample(key).shape == (4, 2, d)
        assert expanded.log_prob(x[0]).shape == (4, 2)
        independent = vmf.to_event(1)
        assert independent.event_shape == (2, d) and independent.batch_shape == ()
        np.testing.assert_allclose(independent.log_prob(x), lp.sum(-1), rtol=1e-5)
        mask = jnp.array([True, False])
        np.testing.assert_array_equal(vmf.mask(mask).log_prob(x), jnp.where(mask, lp, 0.0))
        # pytree: flatten/unflatten, and a distribution passed through jit
        leaves, tree = jax.tree.flatten(vmf)
        rebuilt = jax.tree.unflatten(tree, leaves)
        assert rebuilt.dimension == d and rebuilt.batch_shape == vmf.batch_shape
        np.testing.assert_array_equal(rebuilt.log_prob(x), lp)
        jitted = jax.jit(lambda dist, x: dist.log_prob(x))(vmf, x)
        np.testing.assert_allclose(jitted, lp, rtol=1e-5 if not x64 else 1e-12, atol=1e-5)
        # vmap over the parameters, with the in-axes vmap_over gives for the output
        mapped = jax.vmap(
            lambda m, k: VonMisesFisher(m, k),
            # the in-axes are a prefix of the unbatched distribution the builder returns
            out_axes=vmap_over(VonMisesFisher(loc[0], kappa[0]), loc=0, concentration=0),
        )(loc, kappa)
        # batch_shape is static metadata: a vmapped distribution keeps its members' (as
        # NumPyro's); the mapped arrays carry the batch
        assert mapped.loc.shape == (2, d) and mapped.dimension == d
        np.testing.assert_allclose(mapped.log_prob(x), lp, rtol=1e-5 if not x64 else 1e-12)
        in_vmap = jax.vmap(
            lambda dist, x: dist.log_prob(x), in_axes=(vmap_over(vmf, loc=0, concentration=0), 1)
        )
        np.testing.assert_allclose(in_vmap(vmf, x).T, lp, rtol=1e-5 if not x64 else 1e-12)
        # outputs are arrays, and every public method says so
        for out in (lp, vmf.mean, vmf.variance, vmf.mode, vmf.entropy(), x):
            assert isinstance(out, jax.Array)
        uniform = SphericalUniform(d)
        assert uniform.infer_shapes(d) == ((), (d,))
        np.testing.assert_array_equal(
            jax.tree.unflatten(*reversed(jax.tree.flatten(uniform))).log_prob(x),
            uniform.log_prob(x),
        )
        # kappa = 0 and the uniform agree exactly (log |S^{d-1}| correctly rounded)
        np.testing.assert_array_equal(
            VonMisesFisher(loc, jnp.zeros(2, dtype)).log_prob(x), uniform.log_prob(x)
        )


def test_return_annotations():
    for cls in (VonMisesFisher, SphericalUniform):
        for name in ("log_prob", "sample", "entropy", "infer_shapes"):
            assert inspect.signature(getattr(cls, name)).return_annotation is not inspect._empty
        for name in ("mean", "variance"):
            assert "return" in getattr(cls, name).fget.__annotations__


def test_validate_args_under_jit_and_infer_shapes_errors():
    """Bad concrete parameters raise inside jax.jit too (NumPyro's classes do); a traced
    parameter cannot be checked and is not; SphericalUniform.infer_shapes refuses shapes."""
    x = jnp.ones(3) / np.sqrt(3.0)
    bad_loc = np.array([1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="VonMisesFisher distribution got invalid loc parameter"):
        jax.jit(lambda x: VonMisesFisher(bad_loc, 1.0, validate_args=True).log_prob(x))(x)
    with pytest.raises(ValueError, match="got invalid concentration parameter"):
        jax.jit(
            lambda x: VonMisesFisher(
                np.eye(3)[0], np.array([1.0, -1.0]), validate_args=True
            ).log_prob(x)
        )(x)
    with pytest.raises(ValueError, match="got invalid concentration parameter"):
        VonMisesFisher(np.eye(3)[0], float("nan"), validate_args=True)
    traced = jax.jit(lambda k: VonMisesFisher(np.eye(3)[0], k, validate_args=True).log_prob(x))
    assert np.isfinite(traced(2.0))
    np.testing.assert_array_equal(bad_loc, [1.0, 1.0, 0.0])  # caller's array untouched
    with pytest.raises(NotImplementedError, match="cannot be inferred from the shape"):
        SphericalUniform.infer_shapes(())


@pytest.mark.parametrize("x64", DTYPES)
@pytest.mark.parametrize(("d", "kappas"), CASES)
def test_moments_entropy_kl_and_gradients(d, kappas, x64):
    """Entropy, mean and variance, and KL against Monte Carlo; log_prob gradients exact."""
    with jax.enable_x64(x64):
        loc, kappa = _case(d, kappas, x64)
        vmf = VonMisesFisher(loc, kappa)
        x = vmf.sample(jax.random.key(d + 1), (N_MC,))
        lp = vmf.log_prob(x)
        other = VonMisesFisher(loc[::-1], kappa[::-1] * 0.5 + 1.0)
        log_ratio = lp - other.log_prob(x)
        entropy, kl = vmf.entropy(), kl_divergence(vmf, other)
        kl_uniform = kl_divergence(vmf, SphericalUniform(d))
        log_uniform = SphericalUniform(d).log_prob(x)
        mean, variance = vmf.mean, vmf.variance
        grad_kappa = jax.grad(lambda k: vmf.__class__(loc, k).log_prob(x[0]).sum())(kappa)
        grad_loc = jax.grad(lambda m: vmf.__class__(m, kappa).log_prob(x[0]).sum())(loc)
        a = special.mean_resultant_length(d, kappa)
    x, lp, log_ratio = (np.asarray(v, np.float64) for v in (x, lp, log_ratio))
    se = lambda v: v.std(0) / np.sqrt(N_MC) + 1e-6 * np.abs(v.mean(0)) + 1e-12  # noqa: E731
    assert np.all(np.abs(-lp.mean(0) - np.asarray(entropy)) <= Z * se(lp)), (entropy, -lp.mean(0))
    assert np.all(np.abs(log_ratio.mean(0) - np.asarray(kl)) <= Z * se(log_ratio)), kl
    kl_u = lp - np.asarray(log_uniform, np.float64)
    assert np.all(np.abs(kl_u.mean(0) - np.asarray(kl_uniform)) <= Z * se(kl_u))
    assert np.all(np.abs(x.mean(0) - np.asarray(mean)) <= Z * se(x))
    sq = (x - np.asarray(mean, np.float64)) ** 2
    assert np.all(np.abs(sq.mean(0) - np.asarray(variance)) <= Z * se(sq))
    # d/dkappa log f = mu.x - A_d(kappa); d/dmu log f = kappa x (log_prob is linear in loc)
    t = np.sum(x[0] * np.asarray(loc, np.float64), -1)
    rtol = 1e-4 if not x64 else 1e-10
    np.testing.assert_allclose(grad_kappa, t - np.asarray(a), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(
        grad_loc, np.asarray(kappa, np.float64)[:, None] * x[0], rtol=rtol, atol=rtol
    )
