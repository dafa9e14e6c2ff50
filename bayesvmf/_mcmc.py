"""Shared Markov chain Monte Carlo steps: the random-walk MH update on log kappa.

:func:`log_kappa_mh` is the adaptive random-walk Metropolis-Hastings update of the
concentrations on the log scale, written once for every model that samples them: the two
collapsed Gibbs samplers run it after each label sweep (B-vMFmix, Dirichlet-vMF; sec. 3.1.2
of Gopal & Yang [1]_: a log-normal proposal "around the current iterate"), and the
"sampling" concentration scheme of the variational B-, H- and T-vMFmix draws its Monte Carlo
sample of q(kappa) with it (sec. 3.1.1 of [1]_, ``models/bayesian/_kappa.py``).
The proposal log kappa' = log kappa + exp(log_step) eps, eps ~ N(0, 1), is symmetric on the
log scale, so the acceptance probability is the ratio of the targets (the target must be the
density of log kappa, the Jacobian of the log transform included). Proposals above
``log_kappa_max`` are rejected (outside the range the special functions are tested on), and
so are proposals whose log ratio is NaN (an overflowing target): the chain never carries a
NaN. During warm-up log_step follows a stochastic-approximation recursion towards an
acceptance probability ``target_accept``; its per-step gains are the caller's (a constant
:data:`ADAPT_GAIN` in the Gibbs samplers, the Robbins-Monro 1/sqrt(i) of the variational
scheme) and are 0 afterwards, so the retained draws come from a fixed, valid MH kernel.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["ADAPT_GAIN", "KAPPA_START_MIN", "TARGET_ACCEPT", "MHSteps", "log_kappa_mh"]

#: Gain of the warm-up adaptation of log_step per step of the Gibbs samplers (times the
#: acceptance error).
ADAPT_GAIN = 0.1

#: Floor of the starting concentration of a chain on log kappa (its log must be finite; an
#: estimate of 0, a uniform cluster, starts here).
KAPPA_START_MIN = 1e-3

#: Acceptance probability every warm-up adaptation of a random walk on log kappa aims at (0.44,
#: the optimum of a one-dimensional Gaussian random walk; Roberts, Gelman and Gilks 1997).
TARGET_ACCEPT = 0.44


class MHSteps(NamedTuple):
    """What :func:`log_kappa_mh` records at every step (leading axis: the S steps).

    Attributes
    ----------
    log_kappa : jax.Array of shape (S, K)
        The state after the step (the draws).
    aux : pytree of jax.Array with leading axes (S, K)
        ``target``'s auxiliary output at that state.
    accepted : jax.Array of bool, shape (S, K)
        Whether the step's proposal was accepted.
    accept_prob : jax.Array of shape (S, K)
        Its acceptance probability min(1, exp(log ratio)).
    """

    log_kappa: jax.Array
    aux: object
    accepted: jax.Array
    accept_prob: jax.Array


def log_kappa_mh(
    keys,
    log_kappa,
    current,
    aux,
    log_step,
    target,
    *,
    gain,
    move=1.0,
    log_kappa_max=math.inf,
    target_accept=TARGET_ACCEPT,
    log_uniform=False,
    shared=False,
):
    """Run one MH step on every log kappa_k per key; return the last state and every step.

    Each step draws the proposal, evaluates ``target`` there (once: the target of the
    current point is carried, since nothing else moves during these steps), accepts
    element-wise with probability min(1, exp(proposed - current)) (a NaN log ratio rejects)
    and moves log_step by ``gain * (accept_prob - target_accept)``.

    Parameters
    ----------
    keys : jax.Array of shape (S,)
        One PRNG key per step; each is split into a proposal key and an acceptance key.
    log_kappa : jax.Array of shape (K,)
        Current log concentrations.
    current : jax.Array of shape (K,)
        ``target``'s log density at ``log_kappa`` (-inf: the first step that proposes a
        finite density accepts it).
    aux : pytree of jax.Array with leading axis K
        What ``target`` returned beside the density at ``log_kappa`` (e.g. normalisers the
        caller reuses); replaced element-wise where a proposal is accepted.
    log_step : jax.Array of shape (K,)
        Log of the proposal scale.
    target : callable
        ``target(log_kappa) -> (log density (K,), aux)``: the log density of log kappa_k,
        each k on its own (the update is element-wise).
    gain : float or jax.Array of shape (S,)
        Adaptation gain of log_step at each step: > 0 during warm-up, 0 after (the sampling
        phase is then a fixed Markov kernel).
    move : float or jax.Array of shape (S,), default 1.0
        Multiplies each step's random-walk increment; a step with move 0 proposes the
        current point, i.e. evaluates ``target`` there inside the scan (a caller that starts
        from ``current = -inf`` then needs no call site of the target outside the scan).
    log_kappa_max : float, default inf
        Proposals above it are rejected.
    target_accept : float, default :data:`TARGET_ACCEPT`
        Acceptance probability the adaptation aims at.
    log_uniform : bool, default False
        Accept when log u < log ratio (True) or when u < min(1, exp(log ratio)) (False),
        u ~ U(0, 1) (static). The same test in exact arithmetic; they differ by rounding when
        u is within an ulp of the ratio, so each caller keeps the one its draws were
        recorded with (the variational scheme True, the Gibbs samplers False).
    shared : bool, default False
        The K entries are one concentration (static; ``target`` then gives every entry the
        joint density): one normal and one uniform per step, the first of the K drawn, move
        and accept them together. (A sampler may instead run one (1,) chain and broadcast.)

    Returns
    -------
    (log_kappa, current, aux, log_step) : tuple
        The state after the last step.
    steps : MHSteps
        Every step's state, auxiliary output, acceptance and acceptance probability.
    """

    def step(carry, inputs):
        log_kappa, current, aux, log_step = carry
        key, step_gain, step_move = inputs
        key_prop, key_acc = jax.random.split(key)
        noise = _draw(jax.random.normal, key_prop, log_kappa.shape, shared)
        proposal = log_kappa + step_move * jnp.exp(log_step) * noise
        proposed, proposed_aux = target(proposal)
        log_ratio = jnp.where(proposal > log_kappa_max, -jnp.inf, proposed - current)
        # an overflowing target (nan, or inf - inf) rejects instead of poisoning log_step
        log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
        accept_prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        uniform = _draw(jax.random.uniform, key_acc, log_kappa.shape, shared)
        if log_uniform:
            accept = jnp.log(uniform) < log_ratio
        else:
            accept = uniform < accept_prob

        def keep(new, old):
            return jnp.where(accept, new, old)

        log_kappa = keep(proposal, log_kappa)
        current = keep(proposed, current)
        aux = jax.tree_util.tree_map(keep, proposed_aux, aux)
        log_step = log_step + step_gain * (accept_prob - target_accept)
        return (log_kappa, current, aux, log_step), MHSteps(log_kappa, aux, accept, accept_prob)

    n_steps = keys.shape[0]
    gains = jnp.broadcast_to(gain, (n_steps,))
    moves = jnp.broadcast_to(move, (n_steps,))
    return lax.scan(step, (log_kappa, current, aux, log_step), (keys, gains, moves))


def _draw(sampler, key, shape, shared: bool):
    """``sampler(key, shape)``, or its first value everywhere when ``shared``."""
    values = sampler(key, shape)
    return jnp.broadcast_to(values[0], shape) if shared else values
