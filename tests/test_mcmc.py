"""bayesvmf._mcmc.log_kappa_mh: the one MH update on log kappa (Gibbs samplers, VI sampling)."""

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf import _mcmc


def _normal_target(log_kappa):
    """Standard normal density of log kappa, NaN above 1 (an overflowing target)."""
    density = -0.5 * log_kappa**2
    return jnp.where(log_kappa > 1.0, jnp.nan, density), 2.0 * log_kappa


def test_nan_target_rejects_and_move_zero_evaluates_the_start():
    """A NaN target is a rejection (log_step stays finite while adapting); a move-0 first
    step from current = -inf accepts the start itself, with its density and aux."""
    n_steps = 200
    start = jnp.array([0.5, -0.3, 0.9])
    with jax.enable_x64(True):
        (last, current, aux, log_step), steps = jax.jit(
            lambda keys: _mcmc.log_kappa_mh(
                keys,
                start,
                jnp.full(3, -jnp.inf),
                jnp.zeros(3),
                jnp.zeros(3),
                _normal_target,
                gain=jnp.full(n_steps, 0.05),
                move=jnp.arange(n_steps) > 0,
            )
        )(jax.random.split(jax.random.key(0), n_steps))
    np.testing.assert_array_equal(steps.log_kappa[0], start)
    np.testing.assert_array_equal(steps.aux[0], 2.0 * start)
    assert steps.accepted[0].all()
    draws = np.asarray(steps.log_kappa)
    # proposals into the NaN region were made (the scale is large enough) and all rejected
    assert np.all(draws <= 1.0) and np.isfinite(np.asarray(log_step)).all()
    assert np.isfinite(np.asarray(steps.accept_prob)).all()
    rejected_high = ~np.asarray(steps.accepted[1:]) & (np.asarray(steps.accept_prob[1:]) == 0.0)
    assert rejected_high.any()
    np.testing.assert_array_equal(current, -0.5 * np.asarray(last) ** 2)
    np.testing.assert_array_equal(aux, 2.0 * np.asarray(last))
