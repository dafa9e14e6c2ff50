r"""Empirical Bayes of the priors (sec. 3.1.3 of [1]_), one implementation for B-, H-, T-vMFmix.

The three models share the hyper-parameters of :class:`._kappa.Priors`: a symmetric
Dirichlet alpha over the K components (leaves of H-vMFmix), a vMF prior (mu0, C0) on the
top-level mean directions (every mu_k of B-vMFmix, the root of H-vMFmix, mu_{0,k} of
T-vMFmix) and the log-normal (m, s2) of every concentration. Each hyper-parameter appears in
the variational bound only through its own prior's expected log density, so each empirical
Bayes step maximises one term of the bound with q fixed (derivations: ``docs/bayesian_vi.md``,
section "Empirical Bayes", and ``docs/bayesian_hierarchical_temporal.md``):

* alpha (:func:`update_alpha`): f(alpha) = log Gamma(K alpha) - K log Gamma(alpha)
  + (alpha - 1) sum_k E[log pi_k] is concave; Newton steps (as for LDA's alpha, [2]_), each
  halved until f does not decrease and alpha stays in :data:`ALPHA_RANGE` (and below
  :func:`alpha_cap`, where the model passes it), so f never decreases and alpha stays finite;
* mu0 (:func:`update_mu0`): sum_k C0 mu0 . E[mu_k] is maximised on the sphere by the
  direction of M = sum_k E[mu_k]; C0 (:func:`update_mu0_c0`, B-vMFmix only) by the vMF
  maximum likelihood A_d(C0) = |M| / K, capped at :data:`C0_MAX` (in H- and T-vMFmix C0 is
  a user setting: docs/bayesian_hierarchical_temporal.md shows the H update diverges);
* (m, s2) (:func:`update_m_s2`): -sum_j KL(N(a_j, b_j) || N(m, s2)) is maximised by the
  normal maximum likelihood of the moments a_j = E[log kappa_j], b_j = Var[log kappa_j],
  with s2 floored at :data:`S2_MIN`.

The Dirichlet part of the bound (:func:`dirichlet_terms`) and E[log pi] under q(pi)
(:func:`expected_log_pi`) live here as well, since the alpha step and every model's bound
use them. All functions are pure, traceable, float64 (call under ``jax.enable_x64(True)``).
E[log pi] and the entropy of q(pi) call digamma and log Gamma once each, on their arguments
stacked: XLA expands every call site into about 60-90 instructions of its own, which a new
process reads back with each program that holds them (docs/design.md section 5, session 33).
The alpha step keeps its calls apart, so that the values it compares are rounded as a
caller's :func:`dirichlet_prior_terms` rounds them.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
.. [2] D. M. Blei, A. Y. Ng and M. I. Jordan, "Latent Dirichlet allocation", JMLR 3 (2003)
   993-1022 (appendix A.4.2: Newton's method for the Dirichlet parameter).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln, polygamma

from bayesvmf import _mixture

__all__ = [
    "ALPHA_RANGE",
    "ALPHA_NEWTON_STEPS",
    "C0_MAX",
    "S2_MIN",
    "expected_log_pi",
    "dirichlet_prior_terms",
    "dirichlet_terms",
    "alpha_cap",
    "update_alpha",
    "update_mu0",
    "update_mu0_c0",
    "update_m_s2",
]

#: Cap of the empirical-Bayes C0 and floor of the empirical-Bayes s2, range of alpha: EB of a
#: prior's spread can collapse it (all E[mu_k] equal, all kappa_k equal, a uniform q(pi));
#: the cap and floors keep the numbers finite in that limit. C0 is a concentration: its cap
#: is the core's (:data:`bayesvmf._mixture.KAPPA_MAX`).
C0_MAX = _mixture.KAPPA_MAX
S2_MIN = 1e-6
ALPHA_RANGE = (1e-8, 1e8)

#: Newton iterations of the alpha update (each with backtracking, so f never drops).
ALPHA_NEWTON_STEPS = 20

#: Step lengths 2^-s, s = 0..ALPHA_HALVINGS-1, tried by each Newton step of alpha.
ALPHA_HALVINGS = 40


def expected_log_pi(rho):
    """Return E_q[log pi_k] = digamma(rho_k) - digamma(sum_j rho_j) under q(pi) = Dir(rho).

    Parameters
    ----------
    rho : jax.Array of shape (..., K)

    Returns
    -------
    jax.Array of shape (..., K)
    """
    # one digamma call for both terms (one special-function site in the program)
    psi = digamma(jnp.concatenate([rho, jnp.sum(rho, axis=-1, keepdims=True)], axis=-1))
    return psi[..., :-1] - psi[..., -1:]


def dirichlet_prior_terms(alpha, e_log_pi):
    """Return E_q[log Dir(pi | alpha 1_K)], the only term of the bound holding alpha.

    log Gamma(K alpha) - K log Gamma(alpha) + (alpha - 1) sum_k E[log pi_k] (docs/bayesian_vi.md,
    eq. (B3)).

    Parameters
    ----------
    alpha : scalar or jax.Array
        Broadcast against the leading axes of ``e_log_pi``.
    e_log_pi : jax.Array of shape (..., K)

    Returns
    -------
    jax.Array
    """
    k = e_log_pi.shape[-1]
    return gammaln(k * alpha) - k * gammaln(alpha) + (alpha - 1.0) * jnp.sum(e_log_pi, axis=-1)


def dirichlet_terms(rho, resp_sum, alpha):
    """Return E log p(pi) + E log p(z | pi) + H[q(pi)] for q(pi) = Dir(rho), q(z) with N_k.

    = log Gamma(K alpha) - K log Gamma(alpha) - log Gamma(rho_0) + sum_k log Gamma(rho_k)
    + sum_k (alpha + N_k - rho_k) E[log pi_k], rho_0 = sum_k rho_k (docs/bayesian_vi.md,
    (B2) + (B3) + (B7)).

    Parameters
    ----------
    rho, resp_sum : jax.Array of shape (K,)
        Dirichlet parameters of q(pi) and N_k = sum_i lambda_ik.
    alpha : scalar

    Returns
    -------
    jax.Array
        Scalar.
    """
    e_log_pi = expected_log_pi(rho)
    # log Gamma of the rho_k and of rho_0 in one call
    log_gamma = gammaln(jnp.concatenate([rho, jnp.sum(rho, keepdims=True)]))
    entropy = -(log_gamma[-1] - jnp.sum(log_gamma[:-1]) + jnp.sum((rho - 1.0) * e_log_pi))
    return dirichlet_prior_terms(alpha, e_log_pi) + jnp.sum(resp_sum * e_log_pi) + entropy


def alpha_cap(rho, alpha):
    """Return n / K, the largest alpha empirical Bayes may reach (K alpha <= n rows).

    On balanced clusters (counts N_k more even than a multinomial draw gives) the evidence of
    the Dirichlet-multinomial increases all the way to alpha -> infinity, and coordinate
    ascent follows it: each alpha step raises rho = alpha + N_k, which raises the next alpha
    (a fit on three balanced clusters of 80 rows reached alpha ~1,600 and kept creeping, so
    the bound never settled). Capping the prior's total pseudo-count K alpha at the number of
    rows n = sum_k (rho_k - alpha) keeps the prior from outweighing the data; the cap binds
    only where the unconstrained maximiser lies beyond it, and the step stays a maximiser of
    the bound over the feasible alpha, so the bound still never decreases.

    Parameters
    ----------
    rho : jax.Array of shape (K,)
        Parameters of q(pi) = Dir(alpha + N_k).
    alpha : scalar
        The alpha that ``rho`` was computed with.

    Returns
    -------
    jax.Array
        The cap, at least ``ALPHA_RANGE[0]``.
    """
    k = rho.shape[-1]
    return jnp.maximum(jnp.sum(rho - alpha, axis=-1) / k, ALPHA_RANGE[0])


def update_alpha(alpha, rho, alpha_max=None):
    """Empirical Bayes for alpha (sec. 3.1.3 of [1]_): maximise :func:`dirichlet_prior_terms`.

    f(alpha) = log Gamma(K alpha) - K log Gamma(alpha) + (alpha - 1) S, with
    S = sum_k E[log pi_k], is concave (f'' = K^2 psi'(K alpha) - K psi'(alpha) < 0).
    :data:`ALPHA_NEWTON_STEPS` Newton steps from ``alpha`` ([2]_), each halved until f does
    not decrease and alpha stays in :data:`ALPHA_RANGE` (no move if no length qualifies).

    Parameters
    ----------
    alpha : scalar
        Current value (the start of the Newton iteration).
    rho : jax.Array of shape (K,)
        Parameters of q(pi).
    alpha_max : scalar, optional
        A tighter upper end than ``ALPHA_RANGE[1]`` (:func:`alpha_cap`). A current alpha
        above it is not pulled down (that could decrease f); it only cannot grow.

    Returns
    -------
    jax.Array
        The new alpha; f never decreases.
    """
    e_log_pi = expected_log_pi(rho)
    k = rho.shape[-1]
    total = jnp.sum(e_log_pi)
    low, high = ALPHA_RANGE
    if alpha_max is not None:
        high = jnp.minimum(alpha_max, high)
    lengths = 0.5 ** jnp.arange(ALPHA_HALVINGS, dtype=jnp.float64)

    def f(a):
        return dirichlet_prior_terms(a, e_log_pi)

    def body(_, a):
        # the calls stay apart (not stacked as in expected_log_pi): stacked, the values
        # compared here were rounded unlike a caller's dirichlet_prior_terms, which then saw
        # f drop by 2e-14 (session 33)
        grad = k * digamma(k * a) - k * digamma(a) + total
        hess = k * k * polygamma(1, k * a) - k * polygamma(1, a)
        candidates = a - lengths * (grad / hess)
        ok = (candidates >= low) & (candidates <= high) & (f(candidates) >= f(a))
        return jnp.where(jnp.any(ok), candidates[jnp.argmax(ok)], a)

    return jax.lax.fori_loop(0, ALPHA_NEWTON_STEPS, body, jnp.asarray(alpha, jnp.float64))


def update_mu0(mean_mu, mu0):
    """Empirical Bayes for mu0 (sec. 3.1.3 of [1]_): the direction of M = sum_j E_q[mu_j].

    C0 mu0 . M is maximised on the unit sphere by mu0 = M / |M|; where M = 0 every direction
    is a maximiser and ``mu0`` is kept.

    Parameters
    ----------
    mean_mu : jax.Array of shape (J, d)
        E_q[mu_j] = A_d(gamma_j) psi_j of the mean directions drawn from vMF(mu0, C0).
    mu0 : jax.Array of shape (d,)
        Current value.

    Returns
    -------
    mu0 : jax.Array of shape (d,)
    norm : jax.Array
        |M| (what the C0 step needs).
    """
    total = jnp.sum(mean_mu, axis=0)
    norm = jnp.linalg.norm(total)
    safe = jnp.where(norm > 0, norm, 1.0)
    return jnp.where(norm > 0, total / safe, mu0), norm


def update_mu0_c0(mean_mu, mu0, d: int):
    """Empirical Bayes for (mu0, C0) (sec. 3.1.3 of [1]_): the vMF MLE of the E_q[mu_j].

    sum_j E_q[log vMF(mu_j | mu0, C0)] = J log C_d(C0) + C0 mu0 . M with M = sum_j E[mu_j]:
    mu0 by :func:`update_mu0`, then A_d(C0) = |M| / J (concave in C0;
    :func:`bayesvmf._mixture.solve_kappa`, capped at :data:`C0_MAX`).

    Parameters
    ----------
    mean_mu : jax.Array of shape (J, d)
        E_q[mu_j] = A_d(gamma_j) psi_j.
    mu0 : jax.Array of shape (d,)
        Current value (kept where M = 0).
    d : int
        Dimension (static).

    Returns
    -------
    mu0 : jax.Array of shape (d,)
    C0 : jax.Array
    """
    mu0, norm = update_mu0(mean_mu, mu0)
    c0, _ = _mixture.solve_kappa(d, norm / mean_mu.shape[0], C0_MAX)
    return mu0, c0


def update_m_s2(mean_log_kappa, var_log_kappa, pooled=None, s2=None):
    """Empirical Bayes for (m, s2) (sec. 3.1.3 of [1]_): the normal MLE of log kappa_j under q.

    m = mean_j E[log kappa_j]; s2 = mean_j (Var[log kappa_j] + (E[log kappa_j] - m)^2),
    floored at :data:`S2_MIN`: the maximiser of -sum_j KL(N(a_j, b_j) || N(m, s2)).

    With ``pooled`` (a shared concentration, :func:`._kappa.pooled_update`) the pooled entries
    are one concentration and count once (weight 1 / their number), as in
    :func:`._kappa.kl_total`. When that leaves a single concentration (every entry pooled:
    B-vMFmix with ``shared_kappa=True``), s2 is not updated and the given ``s2`` is returned:
    the MLE of a variance from one concentration is that concentration's own posterior
    variance, and iterating it shrinks the prior onto a point (each update of q(kappa) then
    tightens q, the next s2 follows it, down to :data:`S2_MIN`), freezing kappa at its
    current value. m is still its maximiser (m = E[log kappa]).

    Parameters
    ----------
    mean_log_kappa, var_log_kappa : jax.Array of shape (J,)
        E_q[log kappa_j] and Var_q[log kappa_j] (:class:`._kappa.KappaMoments`).
    pooled : jax.Array of bool, shape (J,), optional
        Entries sharing one concentration (None: none).
    s2 : float or jax.Array, optional
        The current s2, returned when a single concentration remains (needed with
        ``pooled``).

    Returns
    -------
    m, s2 : jax.Array
    """
    if pooled is None:
        m = jnp.mean(mean_log_kappa)
        s2_new = jnp.mean(var_log_kappa + (mean_log_kappa - m) ** 2)
        return m, jnp.maximum(s2_new, S2_MIN)
    pooled = jnp.asarray(pooled, bool)
    n_pooled = jnp.sum(pooled)
    weight = jnp.where(pooled, 1.0 / jnp.maximum(n_pooled, 1), 1.0)
    total = jnp.sum(weight)
    m = jnp.sum(weight * mean_log_kappa) / total
    s2_new = jnp.sum(weight * (var_log_kappa + (mean_log_kappa - m) ** 2)) / total
    single = jnp.all(pooled)
    return m, jnp.where(single, jnp.asarray(s2, jnp.float64), jnp.maximum(s2_new, S2_MIN))
