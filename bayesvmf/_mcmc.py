"""Shared Markov chain Monte Carlo steps of the Gibbs samplers (B-vMFmix, Dirichlet-vMF).

:func:`log_kappa_mh` is the adaptive random-walk Metropolis-Hastings update of the
concentrations on the log scale that both collapsed Gibbs samplers run after each label
sweep (sec. 3.1.2 of Gopal & Yang [1]_: a log-normal proposal "around the current iterate").
The proposal log kappa' = log kappa + exp(log_step) eps, eps ~ N(0, 1), is symmetric on the
log scale, so the acceptance probability is the ratio of the targets (the target must be the
density of log kappa, the Jacobian of the log transform included). Proposals above
``log_kappa_max`` are rejected (outside the range the special functions are tested on).

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["ADAPT_GAIN", "KAPPA_START_MIN", "TARGET_ACCEPT", "log_kappa_mh"]

#: Gain of the warm-up adaptation of log_step per step (times the acceptance error).
ADAPT_GAIN = 0.1

#: Floor of the starting concentration of a chain on log kappa (its log must be finite; an
#: estimate of 0, a uniform cluster, starts here).
KAPPA_START_MIN = 1e-3

#: Acceptance probability every warm-up adaptation of a random walk on log kappa aims at (0.44,
#: the optimum of a one-dimensional Gaussian random walk; Roberts, Gelman and Gilks 1997).
TARGET_ACCEPT = 0.44


def log_kappa_mh(
    keys,
    log_kappa,
    current,
    aux,
    log_step,
    target,
    adapt,
    *,
    log_kappa_max,
    target_accept,
    shared=False,
):
    """Run one MH step on every log kappa_k per key; return the last state and acceptances.

    Each step draws the proposal, evaluates ``target`` there (once: the target of the
    current point is carried, since nothing else moves during these steps), accepts
    element-wise with probability min(1, exp(proposed - current)) and, scaled by ``adapt``,
    moves log_step by ``ADAPT_GAIN * (accept_prob - target_accept)``.

    Parameters
    ----------
    keys : jax.Array of shape (S,)
        One PRNG key per step; each is split into a proposal key and an acceptance key.
    log_kappa : jax.Array of shape (K,)
        Current log concentrations.
    current : jax.Array of shape (K,)
        ``target``'s log density at ``log_kappa``.
    aux : pytree of jax.Array with leading axis K
        What ``target`` returned beside the density at ``log_kappa`` (e.g. normalisers the
        caller reuses); replaced element-wise where a proposal is accepted.
    log_step : jax.Array of shape (K,)
        Log of the proposal scale.
    target : callable
        ``target(log_kappa) -> (log density (K,), aux)``: the log density of log kappa_k,
        each k on its own (the update is element-wise).
    adapt : float or jax.Array
        1 during warm-up, 0 after (the sampling phase is then a fixed Markov kernel).
    log_kappa_max : float
        Proposals above it are rejected.
    target_accept : float
        Acceptance probability the adaptation aims at.
    shared : bool, default False
        The K entries are one concentration (static; ``target`` then gives every entry the
        joint density): one normal and one uniform per step, the first of the K drawn, move
        and accept them together. (A sampler may instead run one (1,) chain and broadcast.)

    Returns
    -------
    (log_kappa, current, aux, log_step) : tuple
        The state after the last step.
    accept_prob : jax.Array of shape (S, K)
        Acceptance probability of every step.
    """

    def step(carry, key):
        log_kappa, current, aux, log_step = carry
        key_prop, key_acc = jax.random.split(key)
        noise = _draw(jax.random.normal, key_prop, log_kappa.shape, shared)
        proposal = log_kappa + jnp.exp(log_step) * noise
        proposed, proposed_aux = target(proposal)
        log_ratio = jnp.where(proposal > log_kappa_max, -jnp.inf, proposed - current)
        accept_prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        accept = _draw(jax.random.uniform, key_acc, log_kappa.shape, shared) < accept_prob

        def keep(new, old):
            return jnp.where(accept, new, old)

        log_kappa = keep(proposal, log_kappa)
        current = keep(proposed, current)
        aux = jax.tree_util.tree_map(keep, proposed_aux, aux)
        log_step = log_step + adapt * ADAPT_GAIN * (accept_prob - target_accept)
        return (log_kappa, current, aux, log_step), accept_prob

    return lax.scan(step, (log_kappa, current, aux, log_step), keys)


def _draw(sampler, key, shape, shared: bool):
    """``sampler(key, shape)``, or its first value everywhere when ``shared``."""
    values = sampler(key, shape)
    return jnp.broadcast_to(values[0], shape) if shared else values
