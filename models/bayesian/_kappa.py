r"""The two concentration schemes of Gopal & Yang (sec. 3.1.1 of [1]_), shared by every model.

Every Bayesian vMF model of this package (B-, H- and T-vMFmix) needs, for J concentrations
kappa_j at once, the mean-field factor q(kappa_j) whose optimal form is the "conditional" of
eq. (1) of [1]_, written generically as

.. math::

    \log f_j(\kappa) = w_j \log C_d(\kappa) + \kappa\, \delta_j
        + \log \mathrm{LogNormal}(\kappa \mid m, s^2) + \text{const},

where ``weight`` :math:`w_j` counts the observations (or children) the concentration
governs and ``dot`` :math:`\delta_j` is the expected inner product of the mean direction with
their resultant (B-vMFmix: :math:`w_k = \sum_i \lambda_{ik}`,
:math:`\delta_k = E[\mu_k] \cdot \sum_i \lambda_{ik} x_i`). In the variable
:math:`t = \log\kappa` the target is :math:`h_j(t) = w_j \log C_d(e^t) + e^t \delta_j
- (t - m)^2 / (2 s^2)` (the log-normal prior in kappa is the normal prior in t, Jacobian
included), see :func:`log_target`.

Two schemes:

**Sampling** (:func:`kappa_sampling_update`, the paper's reported method). Random-walk
Metropolis-Hastings on t = log kappa, i.e. a log-normal proposal around the current kappa,
all J chains side by side in one ``lax.scan``. Each chain starts at the mode t_0 of h, found by
:data:`MODE_NEWTON_STEPS` safeguarded Newton steps from the ``state`` (the mean log kappa of
the previous call's draws), with proposal standard deviation
``step_size / sqrt(max(-h''(t_0), 1/s^2))``: ``step_size`` times the Laplace standard deviation
(2.4 is the optimal random-walk scale of a one-dimensional normal target). Starting at the
mode makes the draws a function of the target and the key only, so a model that reuses one
key at every iteration (common random numbers) sees frozen Monte Carlo noise. During
the ``num_warmup`` discarded steps the log scale follows a Robbins-Monro recursion towards an
acceptance probability of :data:`TARGET_ACCEPT`; it is frozen for the retained draws, so
those come from a fixed, valid MH kernel. The moments are Monte Carlo
averages over the ``num_samples`` retained draws: E[kappa], E[log C_d(kappa)], E[log kappa],
Var[log kappa] (floored at :data:`VAR_FLOOR`).

**Bounding** (:func:`kappa_bounding_update`). q(kappa_j) = LogNormal(a_j, b_j) (``b`` is the
variance of log kappa). The expectation E_q[log C_d(kappa)] has no closed form; it is bounded
below (:func:`log_c_lower_bound`) through Amos's bound
:math:`I_{\nu+1}(u)/I_\nu(u) \le u/(\lambda + \sqrt{u^2+\lambda^2})`, :math:`\lambda = \nu + 1/2`,
a Turan-type inequality tighter than eq. (2) of [1]_ (Baricz et al.,
:math:`I'_\nu/I_\nu \le \sqrt{u^2+\nu^2}/u`, which misses the :math:`-\tfrac12\log u` of
:math:`\log I_\nu` and drove every concentration to ~0 at d = 2). Integrating from 0, where
:math:`I_\nu(u) \sim (u/2)^\nu / \Gamma(\nu+1)`,

.. math::

    \log I_\nu(u) \le \nu\log\frac{u}{2} - \log\Gamma(\nu+1) + \sqrt{u^2+\lambda^2} - \lambda
        - \lambda \log\frac{\lambda + \sqrt{u^2+\lambda^2}}{2\lambda},

above :math:`\log I_\nu` by at most 0.42 for every u and :math:`\nu \ge 0`
(docs/bayesian_vi.md). The paper then takes expectations by the delta method (eq. (3)),
which is an approximation, not a bound. Here the two nonlinear expectations are bounded
instead, so the result is a guaranteed bound:
:math:`E\sqrt{\kappa^2+\lambda^2} \le \sqrt{E\kappa^2 + \lambda^2}` (concavity of the square
root, :math:`E\kappa^2 = e^{2a+2b}`) and
:math:`E\log(\lambda + \sqrt{\kappa^2+\lambda^2}) \ge \log(\lambda + \sqrt{e^{2a}+\lambda^2})`
(convex in t = log kappa). With
:math:`\log C_d = \nu\log\kappa - (\nu+1)\log 2\pi - \log I_\nu` the :math:`\nu\log\kappa`
terms cancel:

.. math::

    E_q[\log C_d(\kappa)] \ge -(\nu+1)\log 2\pi + \nu\log 2 + \log\Gamma(\nu+1)
        - \frac{e^{2a+2b}}{\lambda + \sqrt{e^{2a+2b}+\lambda^2}}
        + \lambda \log\frac{1 + \sqrt{1 + e^{2a}/\lambda^2}}{2},

exact at kappa -> 0 (the uniform density). The
objective (the part of the variational bound that depends on q(kappa_j), :func:`bounding_objective`)

.. math::

    F_j(a, b) = w_j\, \underline{E}[\log C_d] + \delta_j e^{a + b/2}
        - \mathrm{KL}\big(N(a, b) \,\|\, N(m, s^2)\big)

is maximised over (a, log b) by ``num_steps`` ascent steps. Each step takes the
Levenberg-damped Newton direction of the 2 x 2 problem (``jax.grad`` and ``jax.hessian``;
the damping makes it an ascent direction, the plain gradient when the Hessian is not
negative definite) and backtracks over the step lengths 1, 1/2, ..., 2^-(max_halvings-1),
keeping the longest that does not decrease F_j (no move otherwise). So F_j never decreases
and the variational bound of a model that uses it is monotone.

Final signatures (stable; the other Bayesian modules import them)::

    class Priors(NamedTuple):
        alpha: float; mu0: Array (d,); C0: float; m: float; s2: float
    class KappaMoments(NamedTuple):
        mean_kappa, mean_log_c, mean_log_kappa, var_log_kappa: Array (J,); state: Array
    log_target(log_kappa, weight, dot, m, s2, *, d) -> Array (J,)
    kappa_sampling_update(rng_key, state, weight, dot, m, s2, *, d, num_samples,
                          num_warmup=0, step_size=2.4) -> (KappaMoments, accept_rate (J,))
    kappa_sampling_draws(same arguments, pooled=False) -> (log kappa draws (num_samples, J),
                         accept_rate)
    log_c_lower_bound(a, b, *, d) -> Array
    kl_normal(a, b, m, s2) -> Array   (KL(N(a, b) || N(m, s2)), the q(kappa) term of a bound)
    bounding_objective(state, weight, dot, m, s2, *, d) -> Array (J,)
    kappa_bounding_update(state, weight, dot, m, s2, *, d, num_steps,
                          max_halvings=30) -> (KappaMoments, objective (J,))
    update(scheme, rng_key, state, weight, dot, m, s2, *, d, num_samples, num_warmup,
           num_steps) -> (KappaMoments, accept_rate (J,))   (either scheme; ones for bounding)
    initial_kappa_state(kappa, scheme, var_log_kappa=0.01) -> state
    moments_from_state(state, scheme, *, d) -> KappaMoments   (bounding only: closed form)
    pooled_update(scheme, rng_key, state, weight, dot, m, s2, pooled, *, d, num_samples,
                  num_warmup, num_steps) -> (KappaMoments (J,), accept_rate (J,))
    kl_total(mean_log_kappa, var_log_kappa, m, s2, pooled=None) -> scalar

**Shared concentration** (``shared_kappa=True`` of the models; :func:`pooled_update`). The
entries j with ``pooled[j]`` share one concentration kappa: its conditional is the product of
their likelihood factors and one prior, i.e. the target above with the pooled statistics
:math:`w = \sum_{j \in P} w_j`, :math:`\delta = \sum_{j \in P} \delta_j` (the same pooling
as SparseVMFMixture's eq. (27) of Banerjee et al.). One extra chain (sampling) or one extra
ascent (bounding) runs on the pooled target and its moments are copied into every pooled
entry, so the moments keep shape (J,) and the models' likelihood terms are unchanged; the
prior appears once, so the bound counts KL(q(kappa) || prior) once for the pooled entries
(:func:`kl_total`). The bounding ascent is monotone in the pooled objective, which is the
part of the bound that depends on the shared q(kappa): the bound stays monotone.

**The cap** :data:`LOG_KAPPA_MAX` (log of ``bayesvmf._mixture.KAPPA_MAX`` = 1e6, the
classical mixture's default ``kappa_max``; collapsed Gibbs caps kappa at 1e7). Rows that
coincide, or a cluster tighter than any real one, make the target increase without bound in t: kappa
grew to 1e33-1e42 and the fits ended with NaN weights, bounds and scores (a helper's audit,
session 27). Both schemes keep log kappa at or below the cap: the sampling scheme's target is
-inf above it (its mode search stops there, proposals above are rejected): q(kappa) is
the optimal factor restricted to kappa <= KAPPA_MAX; the bounding scheme's ascent projects
a = E[log kappa] onto a <= LOG_KAPPA_MAX, from a start brought there (each step still never
decreases F_j, now over that set; E[kappa] = exp(a + b/2) may exceed 1e6 by the factor
exp(b/2)). A concentration held there is reported at the cap (the models' degeneracy
diagnosis).

``state`` is (J,) for sampling (where the next call's mode search starts: the mean log
kappa of the draws) and (J, 2) for bounding ((a, log b)). ``weight``, ``dot`` are (J,);
``m``, ``s2`` scalars or (J,). ``d``, ``num_samples``, ``num_warmup``, ``num_steps``,
``max_halvings`` are static; everything else is traced, so a model calls these inside its own
jitted step without recompiling when the priors change (empirical Bayes). They are jitted without
``compiler_options`` (JAX accepts those only on a top-level jit, and these run nested).
All arrays float64 (call under ``jax.enable_x64(True)``).

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
.. [2] A. Baricz, S. Ponnusamy and M. Vuorinen, "Functional inequalities for modified Bessel
   functions", Expositiones Mathematicae 29 (2011) 399-414.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayesvmf import _mcmc, _mixture, special
from bayesvmf._mixture import count_trace
from bayesvmf._program_cache import persistent_jit

__all__ = [
    "SCHEMES",
    "VAR_FLOOR",
    "Priors",
    "KappaMoments",
    "log_target",
    "kappa_sampling_draws",
    "kappa_sampling_update",
    "log_c_lower_bound",
    "kl_normal",
    "bounding_objective",
    "kappa_bounding_update",
    "update",
    "initial_kappa_state",
    "moments_from_state",
    "pooled_update",
    "kl_total",
]

#: The two schemes of sec. 3.1.1 of [1]_.
SCHEMES = ("sampling", "bounding")

#: Acceptance probability the warm-up adapts the proposal scale to (the core's,
#: :data:`bayesvmf._mcmc.TARGET_ACCEPT`).
TARGET_ACCEPT = _mcmc.TARGET_ACCEPT

#: Floor of the Monte Carlo Var[log kappa] (all proposals of a short chain rejected would
#: give 0, and the entropy of the moment-matched log-normal would be -inf).
VAR_FLOOR = 1e-12

_LOG_2PI = math.log(2.0 * math.pi)


class Priors(NamedTuple):
    """Hyper-parameters of B-vMFmix (sec. 3.1 of [1]_); a pytree, so it can be traced.

    Attributes
    ----------
    alpha : float
        Symmetric Dirichlet parameter of pi, > 0.
    mu0 : jax.Array of shape (d,)
        Mean direction of the vMF prior of every mu_k (unit vector).
    C0 : float
        Concentration of that prior, >= 0 (0: uniform on the sphere).
    m, s2 : float
        Mean and variance (> 0) of the normal prior of log kappa_k (LogNormal(m, s2)).
    """

    alpha: jax.Array
    mu0: jax.Array
    C0: jax.Array
    m: jax.Array
    s2: jax.Array


class KappaMoments(NamedTuple):
    """What a model needs from q(kappa_j), j = 1..J.

    Attributes
    ----------
    mean_kappa : jax.Array of shape (J,)
        E_q[kappa_j].
    mean_log_c : jax.Array of shape (J,)
        E_q[log C_d(kappa_j)]: the Monte Carlo average (sampling) or the lower bound of
        :func:`log_c_lower_bound` (bounding).
    mean_log_kappa, var_log_kappa : jax.Array of shape (J,)
        E_q[log kappa_j] and Var_q[log kappa_j] (empirical Bayes of m, s2 and the
        -KL(q || prior) term of the bound use these two).
    state : jax.Array
        Where the next update starts: shape (J,) (sampling) or (J, 2) (bounding, (a, log b)).
    """

    mean_kappa: jax.Array
    mean_log_c: jax.Array
    mean_log_kappa: jax.Array
    var_log_kappa: jax.Array
    state: jax.Array


def log_target(log_kappa, weight, dot, m, s2, *, d: int):
    """Return the unnormalised log density h(t) of t = log kappa (eq. (1) of [1]_).

    h(t) = weight log C_d(e^t) + e^t dot - (t - m)^2 / (2 s2), i.e. eq. (1) with the log-normal
    prior, written as the density of log kappa (the Jacobian of t = log kappa is included).

    Parameters
    ----------
    log_kappa, weight, dot, m, s2 : array
        Broadcast together.
    d : int
        Dimension (static).

    Returns
    -------
    jax.Array
    """
    kappa = jnp.exp(log_kappa)
    log_prior = -0.5 * (log_kappa - m) ** 2 / s2
    return weight * _mixture.log_normalizer(d, kappa) + kappa * dot + log_prior


#: Newton iterations locating the mode of h (the start of every MH chain).
MODE_NEWTON_STEPS = 12

#: The cap on log kappa of both schemes (module docstring, "The cap").
LOG_KAPPA_MAX = math.log(_mixture.KAPPA_MAX)

#: What the models' degeneracy diagnosis takes for the cap (``kappa_max`` of
#: :func:`bayesvmf._guards.diagnose`): a q(kappa) held at the cap has E[kappa] a little below
#: it (the sampling scheme's draws lie below the cap: 0.96-0.998 of it on identical or
#: 1e-6-tight rows), so a mean within 10% of the cap counts as at the cap.
REPORTED_CAP = 0.9 * _mixture.KAPPA_MAX


def _mode_and_precision(log_kappa, weight, dot, m, s2, d):
    """Mode of h(t) by safeguarded Newton from ``log_kappa``, and the Laplace precision there.

    h'(t) = kappa (dot - w A) - (t - m)/s2 and h''(t) = kappa (dot - w A) - w kappa^2 A'
    - 1/s2 with A' = 1 - A^2 - (d - 1) A / kappa (kappa = e^t); steps are capped at 1 in t and
    go uphill even where h'' >= 0. One Bessel ratio per iteration (each special-function
    call site adds about a second of XLA compile time to the programs using it). The
    precision is max(-h'', 1/s2) at the last iterate.
    """

    def derivatives(t):
        kappa = jnp.exp(t)
        ratio = special.mean_resultant_length(d, kappa)
        slope = 1.0 - ratio**2 - (d - 1.0) * ratio / kappa
        drift = kappa * (dot - weight * ratio)
        first = drift - (t - m) / s2
        second = drift - weight * kappa**2 * slope - 1.0 / s2
        return first, second

    def body(_, carry):
        t, _ = carry
        first, second = derivatives(t)
        newton = jnp.where(second < 0, -first / jnp.minimum(second, -1e-300), jnp.sign(first))
        step = jnp.clip(jnp.where(jnp.isfinite(newton), newton, 0.0), -1.0, 1.0)
        return jnp.minimum(t + step, LOG_KAPPA_MAX), second  # (the mode on t <= the cap)

    start = jnp.minimum(log_kappa, LOG_KAPPA_MAX)
    t, second = jax.lax.fori_loop(0, MODE_NEWTON_STEPS, body, (start, jnp.zeros_like(start)))
    precision = jnp.where(jnp.isfinite(second), jnp.maximum(-second, 1.0 / s2), 1.0 / s2)
    return t, precision


def _broadcast(state, *arrays):
    shape = state.shape[:1]
    return tuple(jnp.broadcast_to(jnp.asarray(a, jnp.float64), shape) for a in arrays)


def _mh_chains(rng_key, state, weight, dot, m, s2, d, num_samples, num_warmup, step_size):
    """Random-walk MH on log kappa; return the retained draws, their log C_d, acceptance.

    The steps are :func:`bayesvmf._mcmc.log_kappa_mh` (the Gibbs samplers' update), with
    this scheme's start, gains and acceptance test (module docstring).
    """
    state = jnp.asarray(state, jnp.float64)
    weight, dot, m, s2 = _broadcast(state, weight, dot, m, s2)
    # start at the mode: the draws are then a function of the target (and of the key) alone,
    # not of the previous call's draws, so a model iterating with a fixed key can converge
    start, precision = _mode_and_precision(state, weight, dot, m, s2, d)
    scale = step_size / jnp.sqrt(precision)

    def target(t):
        kappa = jnp.exp(t)
        log_c = _mixture.log_normalizer(d, kappa)
        lp = weight * log_c + kappa * dot - 0.5 * (t - m) ** 2 / s2
        # overflowing kappa gives nan or inf, and kappa above the cap is outside q's support:
        # such proposals are rejected
        return jnp.where(jnp.isnan(lp) | (t > LOG_KAPPA_MAX), -jnp.inf, lp), log_c

    # step 0 "proposes" the start itself (move = 0) from lp = -inf: it evaluates the target
    # at the start inside the scan (one call site of the special functions, not two); the
    # warm-up steps adapt the log scale with the Robbins-Monro gains 1/sqrt(i), the retained
    # ones with gain 0
    total = 1 + num_warmup + num_samples
    keys = jax.random.split(rng_key, total)
    index = jnp.arange(total, dtype=jnp.float64) - 1.0
    gains = jnp.where((index >= 0) & (index < num_warmup), 1.0 / jnp.sqrt(index + 1.0), 0.0)
    moves = jnp.where(index >= 0, 1.0, 0.0)
    _, steps = _mcmc.log_kappa_mh(
        keys,
        start,
        jnp.full_like(start, -jnp.inf),
        jnp.zeros_like(start),
        jnp.log(scale),
        target,
        gain=gains,
        move=moves,
        log_uniform=True,
    )
    draws, log_c, accepted = steps.log_kappa, steps.aux, steps.accepted
    kept = slice(1 + num_warmup, None)
    accept_rate = jnp.mean(accepted[kept].astype(jnp.float64), axis=0)
    return draws[kept], log_c[kept], accept_rate


@persistent_jit(static_argnames=("d", "num_samples", "num_warmup", "pooled"))
def kappa_sampling_draws(
    rng_key,
    state,
    weight,
    dot,
    m,
    s2,
    *,
    d: int,
    num_samples: int,
    num_warmup: int = 0,
    step_size=2.4,
    pooled: bool = False,
):
    """Return the retained MH draws of log kappa_j from eq. (1) of [1]_ (sampling scheme).

    The chains of :func:`kappa_sampling_update` (same arguments), before any averaging.
    ``pooled=True``: one chain for a concentration shared by all J entries, on the pooled
    weight and dot from the first entry's state (the target of :func:`pooled_update`),
    pooled inside the program (not by eager operations, each a program of its own).

    Returns
    -------
    draws : jax.Array of shape (num_samples, J), or (num_samples, 1) pooled
        log kappa draws.
    accept_rate : jax.Array of shape (J,), or (1,) pooled
        Fraction of accepted proposals among the retained steps.
    """
    count_trace("bayesian.kappa_sampling_draws")
    if pooled:
        weight, dot, state = jnp.sum(weight)[None], jnp.sum(dot)[None], state[:1]
    draws, _, accept_rate = _mh_chains(
        rng_key, state, weight, dot, m, s2, d, num_samples, num_warmup, step_size
    )
    return draws, accept_rate


@functools.partial(
    jax.jit,
    static_argnames=("d", "num_samples", "num_warmup"),
)
def kappa_sampling_update(
    rng_key,
    state,
    weight,
    dot,
    m,
    s2,
    *,
    d: int,
    num_samples: int,
    num_warmup: int = 0,
    step_size=2.4,
):
    """Draw every kappa_j from eq. (1) of [1]_ by MH and return the moments (sampling scheme).

    Random-walk Metropolis-Hastings on log kappa (a log-normal proposal around the current
    kappa), the J chains vectorised in one ``lax.scan`` of ``num_warmup + num_samples`` steps.
    Chain j starts at the mode of the target, found by Newton from ``state[j]``, with the
    proposal standard deviation ``step_size / sqrt(max(-h''(mode), 1/s2))``, adapted during
    the warm-up (module docstring).

    Parameters
    ----------
    rng_key : jax.Array
    state : jax.Array of shape (J,)
        Where the mode search of each chain starts (log kappa), e.g. ``moments.state`` of
        the previous call or :func:`initial_kappa_state`.
    weight, dot : jax.Array of shape (J,)
        w_j and delta_j of the target (module docstring).
    m, s2 : float or jax.Array of shape (J,)
        Log-normal prior.
    d : int
        Dimension (static).
    num_samples : int
        Retained draws per chain (static).
    num_warmup : int, default 0
        Discarded draws before them (static).
    step_size : float, default 2.4
        Initial proposal scale in units of the Laplace standard deviation at the mode.

    Returns
    -------
    moments : KappaMoments
        Monte Carlo averages over the retained draws; ``state`` is their mean log kappa.
    accept_rate : jax.Array of shape (J,)
        Fraction of accepted proposals among the retained steps.
    """
    count_trace("bayesian.kappa_sampling")
    draws, log_c, accept_rate = _mh_chains(
        rng_key, state, weight, dot, m, s2, d, num_samples, num_warmup, step_size
    )
    kappa = jnp.exp(draws)
    mean_log_kappa = jnp.mean(draws, axis=0)
    moments = KappaMoments(
        mean_kappa=jnp.mean(kappa, axis=0),
        mean_log_c=jnp.mean(log_c, axis=0),
        mean_log_kappa=mean_log_kappa,
        var_log_kappa=jnp.maximum(jnp.var(draws, axis=0), VAR_FLOOR),
        state=mean_log_kappa,
    )
    return moments, accept_rate


def log_c_lower_bound(a, b, *, d: int):
    """Lower bound on E[log C_d(kappa)] under kappa ~ LogNormal(a, b) (module docstring).

    Amos's bound on I_{nu+1}/I_nu integrated (docs/bayesian_vi.md, (E1)), a Turan-type
    inequality tighter than eq. (2) of [1]_, with the expectations bounded by Jensen's
    inequality instead of the delta method of eq. (3), so it is a true bound; loose by at
    most 0.42 nats for every d and kappa as b -> 0 (the paper's bound loses
    (1/2) log(kappa / nu)); the Jensen steps add about kappa (e^b - e^{b/2}) for large kappa.

    Parameters
    ----------
    a, b : array
        Mean and variance (> 0) of log kappa.
    d : int
        Dimension (static), d >= 2.

    Returns
    -------
    jax.Array
    """
    nu = 0.5 * d - 1.0
    lam = nu + 0.5
    a = jnp.asarray(a, jnp.float64)
    b = jnp.asarray(b, jnp.float64)
    const = -(nu + 1.0) * _LOG_2PI + nu * math.log(2.0) + math.lgamma(nu + 1.0)
    log_lam = math.log(lam)
    second_moment = jnp.exp(2.0 * a + 2.0 * b)
    root = jnp.exp(0.5 * jnp.logaddexp(2.0 * a + 2.0 * b, 2.0 * log_lam))
    # sqrt(E k^2 + lam^2) - lam written without cancellation (lam >> kappa at large d)
    excess = second_moment / (lam + root)
    ratio = jnp.exp(0.5 * jnp.logaddexp(2.0 * a - 2.0 * log_lam, 0.0))
    return const - excess + lam * jnp.log(0.5 * (1.0 + ratio))


def kl_normal(a, b, m, s2):
    """Return KL(N(a, b) || N(m, s2)) (variances b, s2), elementwise.

    -KL(q(log kappa) || prior) is every model's q(kappa) term of the bound: the 1/kappa
    Jacobians of the two log-normal densities cancel (docs/bayesian_vi.md, eq. (B5)). For the
    sampling scheme (a, b) are the Monte Carlo moments of the draws (moment matching).
    """
    return 0.5 * (jnp.log(s2) - jnp.log(b) + (b + (a - m) ** 2) / s2 - 1.0)


def bounding_objective(state, weight, dot, m, s2, *, d: int):
    """Return the part of the bound that depends on q(kappa_j) = LogNormal(a_j, b_j).

    F_j = weight_j LB_j + dot_j E[kappa_j] - KL(N(a_j, b_j) || N(m, s2)), with LB_j from
    :func:`log_c_lower_bound` and E[kappa_j] = exp(a_j + b_j / 2).

    Parameters
    ----------
    state : jax.Array of shape (J, 2)
        (a_j, log b_j).
    weight, dot : jax.Array of shape (J,)
    m, s2 : float or jax.Array of shape (J,)
    d : int
        Dimension (static).

    Returns
    -------
    jax.Array of shape (J,)
    """
    a, b = state[..., 0], jnp.exp(state[..., 1])
    return (
        weight * log_c_lower_bound(a, b, d=d) + dot * jnp.exp(a + 0.5 * b) - kl_normal(a, b, m, s2)
    )


@functools.partial(
    jax.jit,
    static_argnames=("d", "num_steps", "max_halvings"),
)
def kappa_bounding_update(
    state, weight, dot, m, s2, *, d: int, num_steps: int, max_halvings: int = 30
):
    """Bounding scheme: ``num_steps`` monotone ascent steps on :func:`bounding_objective`.

    Each step: damped Newton direction of the 2 x 2 problem in (a, log b), then backtracking
    over the step lengths 2^-s, s = 0..max_halvings-1; the longest step that does not decrease
    the objective is taken, none if all decrease it (module docstring). The objective of each
    j never decreases.

    Parameters
    ----------
    state : jax.Array of shape (J, 2)
        (a_j, log b_j) to start from.
    weight, dot : jax.Array of shape (J,)
    m, s2 : float or jax.Array of shape (J,)
    d : int
        Dimension (static).
    num_steps : int
        Ascent steps (static).
    max_halvings : int, default 30
        Step lengths tried per step (static).

    Returns
    -------
    moments : KappaMoments
        E[kappa] = exp(a + b/2), the lower bound on E[log C_d], a, b, and the new state.
    objective : jax.Array of shape (J,)
        The objective at the new state.
    """
    count_trace("bayesian.kappa_bounding")
    state = jnp.asarray(state, jnp.float64)
    weight, dot, m, s2 = _broadcast(state, weight, dot, m, s2)

    def one(p, w, dt, mm, ss):
        return bounding_objective(p, w, dt, mm, ss, d=d)

    value_and_grad = jax.vmap(jax.value_and_grad(one))
    hessian = jax.vmap(jax.hessian(one))
    lengths = 0.5 ** jnp.arange(max_halvings, dtype=jnp.float64)

    def step(carry, _):
        p, value = carry
        _, grad = value_and_grad(p, weight, dot, m, s2)
        neg_h = -hessian(p, weight, dot, m, s2)
        # smallest eigenvalue of the symmetric 2 x 2 matrix -H; damp so -H + lam I is PD
        half_trace = 0.5 * (neg_h[:, 0, 0] + neg_h[:, 1, 1])
        det = neg_h[:, 0, 0] * neg_h[:, 1, 1] - neg_h[:, 0, 1] * neg_h[:, 1, 0]
        eig_min = half_trace - jnp.sqrt(jnp.maximum(half_trace**2 - det, 0.0))
        size = jnp.maximum(jnp.abs(half_trace), 1.0)
        lam = jnp.where(eig_min > 1e-8 * size, 0.0, 1e-8 * size - eig_min)
        sys = neg_h + lam[:, None, None] * jnp.eye(2)
        direction = jnp.linalg.solve(sys, grad[..., None])[..., 0]
        # a trust region of 5 in each coordinate keeps exp(.) finite on the first tries
        direction = direction * jnp.minimum(1.0, 5.0 / jnp.max(jnp.abs(direction), axis=1))[:, None]
        candidates = p[None] + lengths[:, None, None] * direction[None]
        # projected onto a <= LOG_KAPPA_MAX (the cap, module docstring)
        candidates = candidates.at[..., 0].min(LOG_KAPPA_MAX)
        values = jax.vmap(lambda c: one(c, weight, dot, m, s2))(candidates)
        ok = values >= value[None]  # nan compares False: such candidates are never taken
        first = jnp.argmax(ok, axis=0)
        any_ok = jnp.any(ok, axis=0)
        pick = jnp.take_along_axis(candidates, first[None, :, None], axis=0)[0]
        picked_value = jnp.take_along_axis(values, first[None], axis=0)[0]
        p = jnp.where(any_ok[:, None], pick, p)
        value = jnp.where(any_ok, picked_value, value)
        return (p, value), None

    # a start above the cap (H- and T-vMFmix start from the rows' rbar, uncapped: 1e12 on
    # identical rows) is brought to it first, or no clipped candidate would ever be accepted
    state = state.at[..., 0].min(LOG_KAPPA_MAX)
    value0 = one(state, weight, dot, m, s2)
    (state, value), _ = jax.lax.scan(step, (state, value0), None, length=num_steps)
    return moments_from_state(state, "bounding", d=d), value


def update(
    scheme: str,
    rng_key,
    state,
    weight,
    dot,
    m,
    s2,
    *,
    d: int,
    num_samples: int,
    num_warmup: int,
    num_steps: int,
):
    """Update q(kappa_j) by ``scheme``: the one call every model's VI iteration makes.

    Dispatches to :func:`kappa_sampling_update` (``rng_key``, ``num_samples``,
    ``num_warmup``) or :func:`kappa_bounding_update` (``num_steps``); ``scheme`` and the
    sizes are static.

    Returns
    -------
    moments : KappaMoments
    accept_rate : jax.Array of shape (J,)
        MH acceptance of the retained steps (sampling); ones (bounding).
    """
    if scheme == "sampling":
        return kappa_sampling_update(
            rng_key,
            state,
            weight,
            dot,
            m,
            s2,
            d=d,
            num_samples=num_samples,
            num_warmup=num_warmup,
        )
    moments, _ = kappa_bounding_update(state, weight, dot, m, s2, d=d, num_steps=num_steps)
    return moments, jnp.ones_like(moments.mean_kappa)


def moments_from_state(state, scheme: str, *, d: int) -> KappaMoments:
    """Closed-form moments of q(kappa) = LogNormal(a, b) from a bounding state (J, 2).

    Parameters
    ----------
    state : jax.Array of shape (J, 2)
        (a, log b).
    scheme : {"bounding"}
        The sampling scheme's moments exist only as Monte Carlo averages of a call of
        :func:`kappa_sampling_update`.
    d : int
        Dimension (static).

    Returns
    -------
    KappaMoments
    """
    if scheme != "bounding":
        raise ValueError(
            f"moments_from_state needs the bounding scheme's state; got scheme={scheme!r}."
        )
    a, b = state[..., 0], jnp.exp(state[..., 1])
    return KappaMoments(
        mean_kappa=jnp.exp(a + 0.5 * b),
        mean_log_c=log_c_lower_bound(a, b, d=d),
        mean_log_kappa=a,
        var_log_kappa=b,
        state=state,
    )


def initial_kappa_state(kappa, scheme: str, var_log_kappa: float = 0.01):
    """Return the starting state of a scheme for concentrations ``kappa`` (J,).

    Parameters
    ----------
    kappa : array of shape (J,)
        Positive starting concentrations (e.g. the classical M-step's).
    scheme : {"sampling", "bounding"}
    var_log_kappa : float, default 0.01
        Starting b (variance of log kappa) of the bounding scheme.

    Returns
    -------
    jax.Array of shape (J,) (sampling: log kappa) or (J, 2) (bounding: (log kappa, log b))
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}; got {scheme!r}.")
    log_kappa = jnp.log(jnp.asarray(kappa, jnp.float64))
    if scheme == "sampling":
        return log_kappa
    log_b = jnp.full_like(log_kappa, jnp.log(var_log_kappa))
    return jnp.stack([log_kappa, log_b], axis=-1)


def pooled_update(
    scheme: str,
    rng_key,
    state,
    weight,
    dot,
    m,
    s2,
    pooled,
    *,
    d: int,
    num_samples: int,
    num_warmup: int,
    num_steps: int,
):
    """:func:`update` where the entries in ``pooled`` share one concentration (module doc).

    The shared q(kappa) is the scheme's update of the target with the pooled weight
    sum_{j in P} w_j and dot sum_{j in P} delta_j and one log-normal prior, started from the
    state of the first pooled entry; its moments, state and acceptance are copied into every
    pooled entry. The other entries are updated on their own, as by :func:`update` (one
    chain or ascent per entry, run side by side with the pooled one).

    Parameters
    ----------
    scheme, rng_key, state, weight, dot, m, s2
        As :func:`update`; ``state`` (J,) or (J, 2), ``m``, ``s2`` scalars (the pooled
        concentration has one prior).
    pooled : jax.Array of bool, shape (J,)
        The entries that share the concentration (traced); at least one.
    d, num_samples, num_warmup, num_steps : int
        As :func:`update` (static).

    Returns
    -------
    moments : KappaMoments
        Fields of shape (J,) (state (J,) or (J, 2)), equal across the pooled entries.
    accept_rate : jax.Array of shape (J,)
    """
    state = jnp.asarray(state, jnp.float64)
    pooled = jnp.asarray(pooled, bool)
    weight, dot = _broadcast(state, weight, dot)
    first = jnp.argmax(pooled)
    # entry J (appended) is the shared concentration with the pooled statistics
    stacked_state = jnp.concatenate([state, state[first][None]])
    stacked_weight = jnp.append(weight, jnp.sum(jnp.where(pooled, weight, 0.0)))
    stacked_dot = jnp.append(dot, jnp.sum(jnp.where(pooled, dot, 0.0)))
    moments, accept = update(
        scheme,
        rng_key,
        stacked_state,
        stacked_weight,
        stacked_dot,
        m,
        s2,
        d=d,
        num_samples=num_samples,
        num_warmup=num_warmup,
        num_steps=num_steps,
    )

    def spread(values):
        shape = (pooled.shape[0],) + (1,) * (values.ndim - 1)
        return jnp.where(pooled.reshape(shape), values[-1], values[:-1])

    return jax.tree_util.tree_map(spread, moments), spread(accept)


def kl_total(mean_log_kappa, var_log_kappa, m, s2, pooled=None):
    """Return the sum of KL(q(kappa) || prior) over the distinct concentrations.

    Every entry counts once (per-component concentrations) except the ``pooled`` entries,
    which hold one shared concentration (equal moments, :func:`pooled_update`) and count
    once together: the bound has one prior term for it.

    Parameters
    ----------
    mean_log_kappa, var_log_kappa : jax.Array of shape (J,)
    m, s2 : float or jax.Array
    pooled : jax.Array of bool, shape (J,), optional
        None: no entry is pooled.

    Returns
    -------
    jax.Array
        Scalar.
    """
    kl = kl_normal(mean_log_kappa, var_log_kappa, m, s2)
    if pooled is None:
        return jnp.sum(kl)
    pooled = jnp.asarray(pooled, bool)
    n_pooled = jnp.sum(pooled)
    shared = jnp.sum(jnp.where(pooled, kl, 0.0)) / jnp.maximum(n_pooled, 1)
    return jnp.sum(jnp.where(pooled, 0.0, kl)) + shared
