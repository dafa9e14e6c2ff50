r"""Temporal vMF mixture (T-vMFmix, section 3.3 of Gopal & Yang [1]_) by mean-field VI.

Generative story: K clusters whose mean directions drift over T time steps,

    pi ~ Dir(alpha),  kappa_k ~ LogNormal(m, s2),
    mu_{0,k} ~ vMF(mu_{-1}, C0),  mu_{t,k} ~ vMF(mu_{t-1,k}, C0)  (t = 1..T-1),
    z_{t,i} ~ Cat(pi),  x_{t,i} ~ vMF(mu_{t,z_{t,i}}, kappa_{z_{t,i}}),

with kappa_k and pi shared over time (times are numbered from 0 here, from 1 in [1]_).

Inference: q(pi) = Dir(rho), q(z_{t,i}) = Cat(lam), q(mu_{t,k}) = vMF(psi_tk, gamma_tk),
q(kappa_k) from :mod:`._kappa`; empirical Bayes of alpha, mu_{-1}, m, s2, and of C0 unless
the user fixes it ([1]_ recommends setting it by hand; see *Learning C0* below). Derivations
(the supplement is missing): docs/bayesian_hierarchical_temporal.md.

*Bound.* With E[mu_tk] = A_d(gamma_tk) psi_tk, N_tk = sum_{i at t} lam_ik and
r_tk = sum_{i at t} lam_ik x_i,

    L = sum_k [T log C_d(C0) + C0 mu_{-1}.E[mu_0k] + C0 sum_{t>=1} E[mu_{t-1,k}].E[mu_tk]]
        + sum_k (N_k E[log C_d(kappa_k)] + E[kappa_k] sum_t E[mu_tk].r_tk)
        + (Dirichlet terms of q(pi), as in H-vMFmix) - sum_k KL(q(log kappa_k) || N(m, s2))
        + sum_tk H[q(mu_tk)] + H[q(z)],

with N_k = sum_t N_tk. Mean-field independence makes each chain term bilinear,
E[mu_{t-1}.mu_t] = E[mu_{t-1}].E[mu_t].

*Updates* (exact coordinate maximisers of L):

* q(z): log lam_{t,ik} = E[log pi_k] + E[log C_d(kappa_k)] + E[kappa_k] x_{t,i}.E[mu_tk];
* q(mu_tk) = vMF(R_tk/|R_tk|, |R_tk|),
  R_tk = C0 E[mu_{t-1,k}] + C0 E[mu_{t+1,k}] + E[kappa_k] r_tk (mu_{-1} in place of
  E[mu_{-1,k}] at t = 0; no next term at t = T-1). The neighbours enter through their
  *means* E[mu] = A_d(gamma) psi, not their modes psi: a neighbour known only vaguely pulls
  less. Even times are updated first, then odd times (no two times of one class are
  neighbours, so each class update is exact);
* q(kappa_k): :mod:`._kappa` with weight_k = N_k, dot_k = sum_t E[mu_tk].r_tk; with
  ``shared_kappa`` one kappa for all clusters from the pooled sum_k weight_k and
  sum_k dot_k (:func:`._kappa.pooled_update`), one KL term in L, counted once by the
  empirical Bayes of (m, s2);
* q(pi): rho_k = alpha + N_k; empirical Bayes (:mod:`._empirical_bayes`): alpha
  (safeguarded Newton, at most n / K: :func:`._empirical_bayes.alpha_cap`), mu_{-1} the
  direction of
  sum_k E[mu_0k], (m, s2) the Gaussian MLE of the log kappa moments.

*Learning C0.* With C0 learnt, the first link mu_{0,k} ~ vMF(mu_{-1}, C_first) gets its own
concentration: it measures how the K clusters spread around one common direction, not how a
cluster moves, and one value for both made the spread of the clusters pull the drift's C0
low (on generated data with consecutive cosine 0.97 in d = 8, A_d(C0) came out 0.89 with
the shared value). The bound's chain term becomes K log C_d(C_first) + C_first
mu_{-1}.sum_k E[mu_0k] + K (T-1) log C_d(C0) + C0 sum_{t>=1,k} E[mu_{t-1,k}].E[mu_tk], and
its stationarity conditions are

    A_d(C_first) = (1/K) sum_k a_0k,   A_d(C0) = (1 / ((T-1) K)) sum_{t>=1,k} a_tk,   (C0)

    a_0k = mu_{-1}.E[mu_0k],   a_tk = E[mu_{t-1,k} . mu_tk]  (t >= 1),

the mean agreement of consecutive means (with one time step C0 = C_first). Under mean field
a_tk = E[mu_{t-1,k}].E[mu_tk] = A_d(gamma_{t-1,k}) A_d(gamma_tk) psi_{t-1,k}.psi_tk
(``c0_update="mean-field"``, the exact maximiser of L). In high dimension A_d(gamma) is well
below 1 even when the fitted directions agree (d = 28,000: A_d = 0.87 at gamma = 100,000),
so the product of two of them reports consecutive means as less alike than their directions
are, C0 is set low, which lowers gamma, which lowers the next estimate: mean field drives C0
low. The chain's correlation is what mean field drops. ``c0_update="structured"`` (the
estimator's default) takes a_tk from the pair (mu_{t-1,k}, mu_tk) of a structured
(forward-backward) approximation of the chain given q(z) and E[kappa]: the forward belief
f_{t-1} (mu_{t-1} given the data up to t-1: natural parameter E[kappa] r plus the previous
belief carried one vMF(C0) step, mean-matched as in the forecast below, A_d(g) = A_d(|f|)
A_d(C0)) and the backward belief B_t (the data from t on, carried back alike) couple as
p(mu_{t-1}, mu_t) ~ exp(f_{t-1}.mu_{t-1} + C0 mu_{t-1}.mu_t + B_t.mu_t). Given mu_{t-1},
mu_t is vMF(R/|R|, |R|) with R = C0 mu_{t-1} + B_t, so

    E[mu_{t-1}.mu_t | mu_{t-1}] = A_d(|R|) (C0 + mu_{t-1}.B_t) / |R|,

in which mu_{t-1}.mu_{t-1} = 1 exactly where mean field has A_d(gamma_{t-1})^2;
mu_{t-1}.B_t is replaced by its mean under the pair (in high dimension the spread of
mu_{t-1} around its mean is nearly orthogonal to any one vector, so the dot product
concentrates), that mean being the vMF of f_{t-1} plus B_t carried one step back. The
beliefs exclude the link they feed (no information is counted twice): without data the
estimate is A_d(C0) exactly. (Conditioning mu_t on mu_{t-1} and on the mean-field
E[mu_{t+1}], which itself leans on mu_t, counts the link twice and gives A_d(~2 C0) there:
C0 then grows without bound; on SOTU it reached A_d(C0) = 0.99997 and forecast worse than
mean field.) At t = 0, mu_{-1} is a point. One fixed-point step of (C0) per iteration,
after the other updates; the bound is then that of the current C0 (monotone per iteration
only with C0 fixed or under mean field).

A time step without data is allowed: its r_tk = 0 and q(mu_tk) interpolates between the
neighbouring steps through the C0 terms.

*Prediction.* Inside the fitted range, the predictive density of x at time t integrates
q(mu_tk) in closed form (see :func:`._shared.predictive_log_density`). Beyond the last
fitted time T-1, by h >= 1 steps, mu_{T-1+h,k} = h vMF(., C0) steps from mu_{T-1,k} ~ q. The
paper's closed form int vMF(x | mu, k) vMF(mu | m, C0) dmu = C_d(k) C_d(C0) / C_d(|k x + C0 m|)
is for a known m; chained through q(mu_{T-1,k}) the law of mu_{T-1+h,k} is not vMF, and it is
replaced by the vMF with the same mean direction and mean resultant length: E[mu_{t+1}] =
A_d(C0) E[mu_t] exactly, so A_d(gamma_h) = A_d(gamma_{T-1,k}) A_d(C0)^h. With a certain
q(mu_{T-1}) (gamma -> inf) and h = 1 this is exactly the paper's formula. Its error against
the exact chained integral (Monte Carlo) is measured in tests/test_bayesian_temporal.py.

Symbols (code name <-> paper):

====================  ======================================================================
``times``             time index t of each row, 0..T-1
``psi, gamma``        q(mu_tk) = vMF(psi_tk, gamma_tk), shapes (T, K, d), (T, K)
``rho``               q(pi) = Dir(rho), shape (K,)
``resp_sum``          N_tk, shape (T, K)
``resultant``         r_tk, shape (T, K, d)
``mu0, C0``           mu_{-1} and C0 of the chain
``m, s2``             log-normal prior of kappa_k
====================  ======================================================================

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from bayesvmf import _compile_cache, _mixture, _parallel, special
from bayesvmf._mixture import count_trace
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _kappa
from bayesvmf.models.bayesian import _shared as _s

__all__ = [
    "C0_UPDATES",
    "TState",
    "TStats",
    "TInfo",
    "chain_agreement",
    "lower_bound",
    "e_step",
    "m_part",
    "vi_step",
    "m_step",
    "e_step_rows",
]

#: How C0 is set at each iteration: kept ("fixed"), the bound's maximiser under mean field
#: ("mean-field") or from the chain's forward-backward beliefs ("structured"), module
#: docstring *Learning C0*.
C0_UPDATES = ("fixed", "mean-field", "structured")

#: The static arguments of the jitted VI step.
STATIC_ARGNAMES = (*_s.STATIC_ARGNAMES, "c0_update", "shared_kappa")

#: Largest agreement A_d(C0) a learnt C0 may have: C0 stays finite (~ d 5e9) when consecutive
#: means coincide.
MAX_AGREEMENT = 1.0 - 1e-10


class TState(NamedTuple):
    """Variational state of T-vMFmix.

    Attributes
    ----------
    psi : jax.Array of shape (T, K, d)
    gamma : jax.Array of shape (T, K)
    emu : jax.Array of shape (T, K, d)
        E[mu_tk] = A_d(gamma_tk) psi_tk.
    rho : jax.Array of shape (K,)
    kappa : _kappa.KappaMoments
        Fields of shape (K,).
    priors : _kappa.Priors
        alpha, mu0 (= mu_{-1}), C0, m, s2.
    c_first : jax.Array or None
        C_first, the concentration of mu_{0,k} around mu_{-1} when C0 is learnt (module
        docstring, *Learning C0*); None: C0, the model of [1]_ (C0 fixed by the user).
    """

    psi: jax.Array
    gamma: jax.Array
    emu: jax.Array
    rho: jax.Array
    kappa: Any
    priors: Any
    c_first: Any = None


class TStats(NamedTuple):
    """q(z) statistics: N_tk (T, K), r_tk (T, K, d), H[q(z)] and sum_i lam_ik^2 (K,).

    ``resp_square`` gives, with N_k = sum_t N_tk, the effective number of rows carrying
    each cluster (the degeneracy diagnosis of :mod:`bayesvmf._guards`); not in the bound.
    """

    resp_sum: jax.Array
    resultant: jax.Array
    entropy: jax.Array
    resp_square: jax.Array | None = None


class TInfo(NamedTuple):
    """Per-iteration diagnostics: the bound and N_k = sum_t N_tk."""

    lower_bound: jax.Array
    resp_sum: jax.Array


def _chain_terms(emu, mu0):
    """Return (previous, next) neighbour means of each time step, (T, K, d) each."""
    prev = jnp.concatenate([jnp.broadcast_to(mu0, emu[:1].shape), emu[:-1]], axis=0)
    nxt = jnp.concatenate([emu[1:], jnp.zeros_like(emu[:1])], axis=0)
    return prev, nxt


def _previous_weight(state: TState, n_times: int):
    """Concentration linking each time step to the previous one, shape (T,)."""
    C0 = state.priors.C0
    return jnp.full((n_times,), C0).at[0].set(state.c_first)


def _update_mu(state: TState, resultant, mask):
    """Update q(mu_tk) at the times in ``mask`` (T,) (one colour class), R_tk above."""
    d = state.psi.shape[-1]
    p = state.priors
    prev, nxt = _chain_terms(state.emu, p.mu0)
    if state.c_first is None:  # static: the model of [1]_, one C0 for every link
        chain = p.C0 * (prev + nxt)
    else:
        chain = _previous_weight(state, prev.shape[0])[:, None, None] * prev + p.C0 * nxt
    R = chain + state.kappa.mean_kappa[None, :, None] * resultant
    psi, gamma = _s.vmf_from_natural(R, state.psi)
    psi = jnp.where(mask[:, None, None], psi, state.psi)
    gamma = jnp.where(mask[:, None], gamma, state.gamma)
    emu = jnp.where(mask[:, None, None], _s.mean_direction(d, psi, gamma), state.emu)
    return state._replace(psi=psi, gamma=gamma, emu=emu)


def _through_step(d: int, natural, C0):
    """Natural parameter of a vMF belief after one vMF(., C0) step, mean-matched.

    The direction of ``natural`` (..., d) with concentration g, A_d(g) = A_d(|natural|)
    A_d(C0): the law of mu_{t+1} when mu_t ~ vMF(natural), as in the forecast
    (:func:`forecast_concentration`); zero stays zero (no information).
    """
    norm = jnp.linalg.norm(natural, axis=-1, keepdims=True)
    g = forecast_concentration(d, norm, C0, 1)
    return jnp.where(norm > 0, natural * (g / jnp.where(norm > 0, norm, 1.0)), 0.0)


def _chain_messages(state: TState, stats: TStats):
    """Forward and backward beliefs of the chain of means (module docstring, *Learning C0*).

    Returns f (T, K, d), the natural parameter of mu_tk given the data up to t, and
    B (T, K, d), that of the data from t on (E[kappa_k] r_tk plus the message from t+1);
    the links before t = 0 and at t = 0 use mu_{-1} and C_first (C0 when fixed).
    """
    d = state.psi.shape[-1]
    p = state.priors
    c_first = p.C0 if state.c_first is None else state.c_first
    data = state.kappa.mean_kappa[None, :, None] * stats.resultant  # (T, K, d)

    def forward(prev, data_t):
        f = _through_step(d, prev, p.C0) + data_t
        return f, f

    f0 = c_first * jnp.broadcast_to(p.mu0, data[0].shape) + data[0]
    _, f_rest = jax.lax.scan(forward, f0, data[1:])
    f = jnp.concatenate([f0[None], f_rest], axis=0)

    def backward(later, data_t):
        b = _through_step(d, later, p.C0) + data_t  # B_t = data_t + message from t+1
        return b, b

    _, B = jax.lax.scan(backward, jnp.zeros_like(data[0]), data, reverse=True)
    return f, B


def chain_agreement(state: TState, stats: TStats, kind: str):
    """Return a_tk of the module docstring's (C0), shape (T, K), under ``kind``.

    ``kind`` is ``"mean-field"`` (E[mu_{t-1}].E[mu_t]) or ``"structured"`` (the pair
    (mu_{t-1}, mu_t) of the chain's forward-backward beliefs; mu_{-1} = ``mu0`` at t = 0).
    """
    p = state.priors
    prev, _ = _chain_terms(state.emu, p.mu0)
    if kind == "mean-field":
        return jnp.sum(prev * state.emu, axis=-1)
    d = state.psi.shape[-1]
    n_times = prev.shape[0]
    weight = (
        jnp.full((n_times,), p.C0) if state.c_first is None else _previous_weight(state, n_times)
    )[:, None]
    f, B = _chain_messages(state, stats)
    # mean of mu_{t-1} in the pair: its forward belief and the message from B_t
    belief = f[:-1] + _through_step(d, B[1:], p.C0)
    norm = jnp.linalg.norm(belief, axis=-1, keepdims=True)
    mean = special.mean_resultant_length(d, norm) * belief / jnp.where(norm > 0, norm, 1.0)
    mean = jnp.concatenate([jnp.broadcast_to(p.mu0, B[:1].shape), mean], axis=0)
    c = jnp.sum(mean * B, axis=-1)
    norm = jnp.sqrt(jnp.maximum(weight**2 + jnp.sum(B * B, axis=-1) + 2.0 * weight * c, 0.0))
    safe = jnp.where(norm > 0, norm, 1.0)
    return jnp.where(norm > 0, special.mean_resultant_length(d, norm) * (weight + c) / safe, 0.0)


def _concentration_of(d: int, agreement):
    """Return A_d^{-1} of the mean of ``agreement``, clipped to [0, MAX_AGREEMENT].

    Floored at KAPPA_FLOOR: an agreement <= 0 would give 0, and the chain's normaliser must
    stay finite.
    """
    rbar = jnp.clip(jnp.mean(agreement), 0.0, MAX_AGREEMENT)
    return jnp.maximum(special.kappa_from_rbar(d, rbar), _s.KAPPA_FLOOR)


def update_C0(state: TState, stats: TStats, kind: str) -> TState:
    """One fixed-point step of (C0) and of C_first (module docstring, *Learning C0*)."""
    d = state.psi.shape[-1]
    agreement = chain_agreement(state, stats, kind)
    c_first = _concentration_of(d, agreement[0])
    # with one time step there is no transition: C0 (used by forecasts only) is C_first
    C0 = _concentration_of(d, agreement[1:]) if agreement.shape[0] > 1 else c_first
    return state._replace(priors=state.priors._replace(C0=C0), c_first=c_first)


def _kappa_inputs(emu, stats: TStats):
    return stats.resp_sum.sum(axis=0), jnp.sum(emu * stats.resultant, axis=(0, 2))


def _pooled(n_components: int, shared_kappa: bool):
    """Return the clusters that share one kappa (all of them) with ``shared_kappa``, else None."""
    return jnp.ones((n_components,), bool) if shared_kappa else None


def lower_bound(state: TState, stats: TStats, shared_kappa: bool = False):
    """Return the bound L of the module docstring (one KL term for a shared kappa)."""
    d = state.psi.shape[-1]
    p, k = state.priors, state.kappa
    n_times, n_comp = state.gamma.shape
    weight, dot = _kappa_inputs(state.emu, stats)
    prev, _ = _chain_terms(state.emu, p.mu0)
    # log C_d of gamma, C0 and C_first (a learnt C0) in one special-function call site
    firsts = () if state.c_first is None else (state.c_first,)
    log_c_gamma, log_c_c0, *log_c_first = _mixture.log_normalizers(
        d, state.gamma.ravel(), p.C0, *firsts
    )
    entropy_mu = -log_c_gamma - state.gamma.ravel() * jnp.linalg.norm(state.emu, axis=-1).ravel()
    if state.c_first is None:  # static: one C0 for every link
        chain = n_times * n_comp * log_c_c0 + p.C0 * jnp.sum(prev * state.emu)
    else:
        dots = jnp.sum(prev * state.emu, axis=(1, 2))  # (T,)
        chain = (
            n_comp * log_c_first[0]
            + (n_times - 1) * n_comp * log_c_c0
            + jnp.sum(_previous_weight(state, n_times) * dots)
        )
    return (
        chain
        + jnp.sum(weight * k.mean_log_c + k.mean_kappa * dot)
        + _eb.dirichlet_terms(state.rho, weight, p.alpha)
        - _kappa.kl_total(
            k.mean_log_kappa, k.var_log_kappa, p.m, p.s2, _pooled(n_comp, shared_kappa)
        )
        + jnp.sum(entropy_mu)
        + stats.entropy
    )


def _time_onehot(times, n_times):
    return jax.nn.one_hot(times, n_times, dtype=jnp.float64)


def _row_cosines(data, times, M):
    """x_i . M[t_i, k] for M of shape (T, K, d): one product X @ M^T over all T K columns."""
    n_times, n_comp, d = M.shape
    cos = data.dot(M.reshape(n_times * n_comp, d).T)
    cos = cos.reshape(-1, n_times, n_comp)
    return jnp.take_along_axis(cos, times[:, None, None], axis=1)[:, 0, :]


def _statistics(data, times, lam, n_times: int, log_lam=None) -> TStats:
    """N_tk, r_tk and H[q(z)] (0 without ``log_lam``: a crisp q(z)) of the rows' lam (n, K).

    ``data`` is plain data or one device's block of :class:`bayesvmf._blocks.RowBlocks`
    (inside ``shard_map``, ``times`` its slice): padding rows weigh 0, so they touch no
    time step's statistics, and the sums are added over the devices (``psum``).
    """
    n_comp = lam.shape[1]
    weighted = data.weigh_rows(lam)
    rows = data.block
    onehot = _time_onehot(times, n_times)
    spread = (onehot[:, :, None] * weighted[:, None, :]).reshape(-1, n_times * n_comp)
    resultant = rows.tdot(spread).T.reshape(n_times, n_comp, rows.shape[1])
    resp_sum = onehot.T @ weighted
    if log_lam is None:
        entropy = jnp.zeros((), jnp.float64)
    else:
        entropy = -jnp.sum(jnp.where(lam > 0, weighted * log_lam, 0.0))
    square = jnp.sum(weighted * lam, axis=0)
    return TStats(*data.sum_over_blocks(resp_sum, resultant, entropy, square))


def e_step(data, times, state: TState) -> TStats:
    """Update q(z); return its statistics (plain data or a block, :func:`_statistics`)."""
    k = state.kappa
    cos = _row_cosines(data.block, times, state.emu)
    wlp = _eb.expected_log_pi(state.rho) + k.mean_log_c + k.mean_kappa * cos
    log_lam = wlp - logsumexp(wlp, axis=1, keepdims=True)
    return _statistics(data, times, jnp.exp(log_lam), state.psi.shape[0], log_lam)


def m_part(
    rng_key,
    state: TState,
    stats: TStats,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
    c0_update="fixed",
    shared_kappa=False,
):
    """Update q(pi), q(mu) (even then odd times), q(kappa), the priors, then C0."""
    p = state.priors
    weight = stats.resp_sum.sum(axis=0)
    state = state._replace(rho=p.alpha + weight)
    even = jnp.arange(state.psi.shape[0]) % 2 == 0
    for mask in (even, ~even):
        state = _update_mu(state, stats.resultant, mask)
    weight, dot = _kappa_inputs(state.emu, stats)
    state = _s.update_kappa_priors(
        rng_key,
        state,
        weight,
        dot,
        state.emu[0],
        scheme=scheme,
        empirical_bayes=empirical_bayes,
        num_samples=num_samples,
        num_steps=num_steps,
        pooled=_pooled(weight.shape[0], shared_kappa),
        cap_alpha=True,
    )
    if c0_update == "fixed":  # static: fits with a fixed and a learnt C0 are two programs
        return state
    return update_C0(state, stats, c0_update)


def vi_step(rng_key, data, times, state: TState, stats: TStats, **static):
    """One VI iteration (as in H-vMFmix: the q(z) update closes it); two compiled programs.

    :func:`m_step` updates every factor but q(z) and returns the bound at (new state, old
    q(z)); it never sees the rows, so it is compiled once per (T, K, d) and not again per
    number of rows (the special functions of q(kappa), q(mu) and C0 are most of a step's
    compile time). :func:`e_step_rows` then updates q(z), the one program per data shape.
    With row blocks on a mesh of devices (``devices=``; ``times`` laid out like the rows by
    ``data.row_array``) the q(z) update runs under ``shard_map``: every device updates q(z)
    of its rows and the statistics are added with ``psum``; :func:`m_step` runs on the
    (replicated) statistics. ``static``: the keyword arguments of :func:`m_step`.

    Returns
    -------
    state : TState
    stats : TStats
        The q(z) statistics at the new state.
    info : TInfo
    """
    state, info = m_step(rng_key, state, stats, **static)
    return state, e_step_rows(data, times, state), info


@functools.partial(
    _compile_cache.jit, static_argnames=STATIC_ARGNAMES, compiler_options=_mixture.JIT_OPTIONS
)
def m_step(
    rng_key,
    state: TState,
    stats: TStats,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
    c0_update="fixed",
    shared_kappa=False,
):
    """Every update of :func:`vi_step` but q(z), and the bound (no row: compiled per T, K, d)."""
    count_trace("temporal.m_step")
    state = m_part(
        rng_key,
        state,
        stats,
        scheme=scheme,
        empirical_bayes=empirical_bayes,
        num_samples=num_samples,
        num_steps=num_steps,
        c0_update=c0_update,
        shared_kappa=shared_kappa,
    )
    info = TInfo(lower_bound(state, stats, shared_kappa), stats.resp_sum.sum(axis=0))
    return state, info


@functools.partial(_compile_cache.jit, compiler_options=_mixture.JIT_OPTIONS)
def e_step_rows(data, times, state: TState) -> TStats:
    """:func:`e_step` on plain data, or on every device's block of rows (``shard_map``)."""
    count_trace("temporal.e_step")
    return data.map(lambda state, block, times: e_step(block, times, state), state, times)


@functools.partial(
    _compile_cache.jit,
    static_argnames=("n_times", "n_components", "init"),
    compiler_options=_mixture.JIT_OPTIONS,
)
def _initial_statistics(
    rng_key,
    data,
    times,
    kmeans_iter=None,
    sample=None,
    *,
    n_times: int,
    n_components: int,
    init: str,
):
    """TStats of the crisp initial assignment: every row to its closest direction by cosine.

    The seeds are K random rows or (greedy) spherical k-means++ seeds (the same draws on row
    blocks, :data:`bayesvmf._seeding.INIT_METHODS`), refined by at most ``kmeans_iter``
    hard spherical k-means passes (:func:`bayesvmf._parallel.spherical_kmeans`; None: none)
    and split-and-merge moves (:func:`bayesvmf._parallel.initial_directions`; ``sample``: the
    seeding subsample of sparse data); each device assigns its own rows.
    """
    count_trace("temporal.initial_statistics")

    def body(args, data, times):
        rng_key, kmeans_iter = args
        mu = _parallel.initial_directions(rng_key, data, n_components, init, kmeans_iter, sample)
        labels = jnp.argmax(data.block.dot(mu.T), axis=1)
        lam = jax.nn.one_hot(labels, n_components, dtype=jnp.float64)
        return _statistics(data, times, lam, n_times)

    return data.map(body, (rng_key, kmeans_iter), times)


def forecast_concentration(d: int, gamma, C0, horizon):
    """Concentration gamma_h of the vMF with mean resultant A_d(gamma) A_d(C0)^h.

    The law of mu_{t+h} when mu_t ~ vMF(psi, gamma) and each step is vMF(., C0), matched in
    its mean E[mu_{t+h}] = A_d(C0)^h A_d(gamma) psi (module docstring). ``C0`` is a scalar
    (one C0 per fit); ``gamma`` and ``horizon`` broadcast.
    """
    # A_d of gamma and C0 in one call (one special-function site to compile)
    gamma, C0 = jnp.asarray(gamma, jnp.float64), jnp.asarray(C0, jnp.float64).reshape(())
    a = special.mean_resultant_length(d, jnp.append(gamma.ravel(), C0))
    rbar = a[:-1].reshape(gamma.shape) * a[-1] ** horizon
    return special.kappa_from_rbar(d, rbar)


def _log_predictive(data, times, psi, gamma, mean_log_kappa, var_log_kappa, log_weights, C0):
    """Log E[pi_k] + log p(x_i | k, t_i) for each row (in-range or forecast, see module doc)."""
    count_trace("temporal.predictive")
    n_times = psi.shape[0]
    d = psi.shape[-1]
    last = n_times - 1
    horizon = jnp.maximum(times - last, 0)
    clipped = jnp.minimum(times, last)
    cos = _row_cosines(data, clipped, psi)
    gamma_rows = gamma[clipped]  # (n, K)
    forecast = forecast_concentration(d, gamma[last][None, :], C0, horizon[:, None])
    gamma_rows = jnp.where(horizon[:, None] > 0, forecast, gamma_rows)
    return (
        _s.predictive_log_density(d, cos, gamma_rows, mean_log_kappa, var_log_kappa) + log_weights
    )


_log_predictive_jit = _compile_cache.jit(_log_predictive, compiler_options=_mixture.JIT_OPTIONS)


@functools.partial(_compile_cache.jit, compiler_options=_mixture.JIT_OPTIONS)
def _log_predictive_blocks(data, times, params):
    """:func:`_log_predictive` of the rows of row blocks, each device its rows (padded)."""

    def body(params, data, times):
        return _log_predictive(data.block, times, *params)

    return data.map(body, params, times, per_row=True)
