r"""B-vMFmix: the Bayesian vMF mixture of Gopal & Yang (sec. 3.1 of [1]_) by variational inference.

Generative model (sec. 3.1 of [1]_)::

    pi ~ Dir(alpha),  mu_k ~ vMF(mu0, C0),  kappa_k ~ LogNormal(m, s2),
    z_i ~ Cat(pi),    x_i ~ vMF(mu_{z_i}, kappa_{z_i}).

Mean-field variational inference (sec. 3.1.1): q(pi) = Dir(rho), q(mu_k) = vMF(psi_k,
gamma_k), q(z_i) = Cat(lambda_i), and q(kappa_k) by one of the two schemes of
:mod:`bayesvmf.models.bayesian._kappa` (MH draws from the conditional of eq. (1), or a
log-normal fitted by maximising a lower bound built on eqs. (2)-(3)). Empirical Bayes
(sec. 3.1.3) updates alpha, mu0, C0, m, s2 by the maximisers of
:mod:`bayesvmf.models.bayesian._empirical_bayes` (shared with H- and T-vMFmix).
``inference="gibbs"`` runs the collapsed Gibbs
sampler of sec. 3.1.2 (:mod:`bayesvmf.models.bayesian._gibbs`). The derivations (every term
of the bound, every update, the empirical Bayes steps) are in ``docs/bayesian_vi.md``.

=====================  ====================================================================
code                   paper (sec. 3.1)
=====================  ====================================================================
``rho``                rho, q(pi) = Dir(rho), shape (K,)
``psi``, ``gamma``     psi_k, gamma_k, q(mu_k) = vMF(psi_k, gamma_k)
``lambda`` / ``resp``  lambda_ik = E_q[z_ik]
``resultant``          r_k = sum_i lambda_ik x_i, shape (K, d)
``resp_sum``           N_k = sum_i lambda_ik
``kappa_state``        the q(kappa) state of :mod:`._kappa` (log kappa, or (a, log b))
``priors``             :class:`._kappa.Priors` (alpha, mu0, C0, m, s2)
=====================  ====================================================================

One VI iteration (:func:`vi_iterations`, all restarts vmapped): rho, then q(mu), then
q(kappa), then the empirical Bayes updates, then q(z) with one pass over the data
(``X @ E[mu].T``) and the resultants (``lambda.T @ X``) (:func:`data_step`), then the bound
(:func:`update_step`, which then makes the next iteration's updates): two programs per
iteration, so that only the data pass is compiled per number of rows. Each
update maximises the bound over its factor given the others (q(kappa) by bounding: increases
it), so with ``kappa_update="bounding"`` the bound never decreases.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp, xlogy

from bayesvmf import _compile_cache, _mixture, _parallel, special
from bayesvmf._program_cache import persistent_jit
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _kappa
from bayesvmf.models.bayesian._kappa import KappaMoments, Priors

__all__ = [
    "VIState",
    "Posterior",
    "Statistics",
    "elbo",
    "vi_iterations",
    "update_step",
    "data_step",
    "StreamState",
    "svi_step",
]

#: Gauss-Hermite nodes for E_q[.] over a log-normal q(kappa) (bounding scheme) in
#: score_samples; the integrand is smooth in log kappa, 32 nodes are exact to rounding for
#: the variances seen in practice (b << 1).
HERMITE_NODES = 32


class Posterior(NamedTuple):
    """The variational factors q(pi), q(mu), q(kappa) of one run (sec. 3.1.1 of [1]_)."""

    rho: jax.Array
    psi: jax.Array
    gamma: jax.Array
    kappa: KappaMoments


class Statistics(NamedTuple):
    """What the bound needs from q(z): r_k, N_k and the entropy -sum lambda log lambda.

    ``resp_square`` (sum_i lambda_ik^2, (K,)) is not in the bound: with N_k it gives the
    effective number of rows carrying each component, N_k^2 / sum_i lambda_ik^2 (the
    degeneracy diagnosis of :mod:`bayesvmf._guards`); None where no one needs it.
    """

    resultant: jax.Array
    resp_sum: jax.Array
    resp_entropy: jax.Array
    resp_square: jax.Array | None = None


class VIState(NamedTuple):
    """State of a batch of B variational runs (batch axis first), one per restart.

    Attributes
    ----------
    post : Posterior
        rho (B, K), psi (B, K, d), gamma (B, K), kappa moments (B, K) with state (B, K) or
        (B, K, 2).
    stats : Statistics
        r (B, K, d), N (B, K), entropy of q(z) (B,), at the last q(z) update.
    priors : Priors
        Current hyper-parameters (B,) each, mu0 (B, d) (empirical Bayes changes them).
    key : jax.Array of shape (B,)
        MH key of the run (the same at every iteration: common random numbers, see
        :class:`BayesianVMFMixture`).
    bound : jax.Array of shape (B,)
        Variational bound per row at the last iteration (-inf before one).
    accept_rate : jax.Array of shape (B, K)
        MH acceptance of the last kappa update (sampling scheme; 1 for bounding).
    n_iter : jax.Array of int64, shape (B,)
    converged : jax.Array of bool, shape (B,)
    """

    post: Posterior
    stats: Statistics
    priors: Priors
    key: jax.Array
    bound: jax.Array
    accept_rate: jax.Array
    n_iter: jax.Array
    converged: jax.Array


# --------------------------------------------------------------------------------------------
# The bound (docs/bayesian_vi.md)
# --------------------------------------------------------------------------------------------


def elbo(
    post: Posterior, stats: Statistics, priors: Priors, d: int, a_gamma=None, shared_kappa=False
):
    """Return the variational lower bound (VLB of sec. 3.1.1 of [1]_), total over the rows.

    Sum of (docs/bayesian_vi.md, eq. (B1)-(B8)): E log p(X | z, mu, kappa),
    E log p(z | pi), E log p(pi), E log p(mu), -KL(q(kappa) || p(kappa)), H(q(z)),
    H(q(pi)), H(q(mu)). E_q[log C_d(kappa)] is the scheme's (MC average or lower bound) and
    the q(kappa) terms are those of the log-normal with the moments of q (exact for bounding,
    moment-matched for sampling).

    Parameters
    ----------
    post : Posterior
    stats : Statistics
    priors : Priors
    d : int
        Dimension (static).
    a_gamma : jax.Array of shape (K,), optional
        A_d(gamma_k) when the caller has it (saves a Bessel ratio).
    shared_kappa : bool, default False
        One concentration for every component (equal moments): its KL term counts once
        (:func:`._kappa.kl_total`).

    Returns
    -------
    jax.Array
        Scalar.
    """
    rho, psi, gamma, kappa = post
    if a_gamma is None:
        a_gamma = special.mean_resultant_length(d, gamma)
    # log C_d(gamma_k) and log C_d(C0) in one call (one special-function site to compile)
    log_c_gamma, log_c_c0 = _mixture.log_normalizers(d, gamma, priors.C0)
    psi_dot_r = jnp.sum(psi * stats.resultant, axis=-1)
    likelihood = jnp.sum(stats.resp_sum * kappa.mean_log_c + kappa.mean_kappa * a_gamma * psi_dot_r)
    pi_terms = _eb.dirichlet_terms(rho, stats.resp_sum, priors.alpha)  # (B2) + (B3) + (B7)
    prior_mu = jnp.sum(log_c_c0 + priors.C0 * a_gamma * (psi @ priors.mu0))
    kappa_terms = -_kappa.kl_total(
        kappa.mean_log_kappa, kappa.var_log_kappa, priors.m, priors.s2, _pooled(rho, shared_kappa)
    )
    entropy_mu = -jnp.sum(log_c_gamma + gamma * a_gamma)
    return likelihood + pi_terms + prior_mu + kappa_terms + stats.resp_entropy + entropy_mu


# --------------------------------------------------------------------------------------------
# One iteration
# --------------------------------------------------------------------------------------------


def _update_mu(data_natural, priors: Priors):
    """q(mu_k) = vMF(psi_k, gamma_k) with R_k = E[kappa_k] r_k + C0 mu0 (sec. 3.1.1, (U2)).

    ``data_natural`` is the data part E[kappa_k] r_k of the natural parameter, (K, d).
    """
    natural = data_natural + priors.C0 * priors.mu0
    gamma = jnp.linalg.norm(natural, axis=-1)
    tiny = jnp.finfo(jnp.float64).tiny
    # gamma = 0 (an empty component under a uniform prior): q(mu_k) is uniform, psi arbitrary
    psi = jnp.where(gamma[:, None] > tiny, natural / jnp.maximum(gamma, tiny)[:, None], priors.mu0)
    return psi, gamma


def _log_resp_unnormalised(data, post: Posterior, a_gamma):
    """Return E log pi_k + E log C_d(kappa_k) + E[kappa_k] x_i . E[mu_k] (log lambda_ik + c)."""
    mean_mu = (a_gamma * post.kappa.mean_kappa)[:, None] * post.psi
    log_pi = _eb.expected_log_pi(post.rho)
    return data.block.dot(mean_mu.T) + post.kappa.mean_log_c + log_pi


def _statistics(data, log_resp):
    """r_k, N_k and the entropy of q(z) from log lambda (rows of plain data or of a block).

    On row blocks (:class:`bayesvmf._blocks.RowBlocks`) padding rows weigh 0 and, on a
    device's block, the three sums are added over the devices (``psum``).
    """
    resp = jnp.exp(log_resp)
    weighted = data.weigh_rows(resp)
    resultant, resp_sum = _mixture.resultants(data.block, weighted)
    entropy = -jnp.sum(xlogy(weighted, resp))
    square = jnp.sum(weighted * resp, axis=0)
    return Statistics(*data.sum_over_blocks(resultant, resp_sum, entropy, square))


def _pooled(rho, shared_kappa: bool):
    """Return the pooled-concentration mask of :mod:`._kappa` (every component), or None."""
    return jnp.ones(rho.shape[-1], bool) if shared_kappa else None


def _update_kappa_priors(key, kappa, weight, dot, rho, mean_mu, priors, cfg, empirical_bayes):
    """q(kappa) (U3) from its weight and dot, then the empirical Bayes updates (U4).

    With a shared concentration (``cfg``) q(kappa) is the pooled update of
    :func:`._kappa.pooled_update` (weight sum_k N_k, dot sum_k delta_k) and (m, s2) the
    empirical Bayes of one concentration (m follows it, s2 is kept: :func:`._eb.update_m_s2`).
    """
    scheme, d, num_samples, num_warmup, num_steps, shared_kappa = cfg
    pooled = _pooled(rho, shared_kappa)
    update = (
        _kappa.update if pooled is None else functools.partial(_kappa.pooled_update, pooled=pooled)
    )
    kappa, accept = update(
        scheme,
        key,
        kappa.state,
        weight,
        dot,
        priors.m,
        priors.s2,
        d=d,
        num_samples=num_samples,
        num_warmup=num_warmup,
        num_steps=num_steps,
    )
    # empirical Bayes (sec. 3.1.3) is a traced switch, so fits with and without it share
    # one program
    mu0, c0 = _eb.update_mu0_c0(mean_mu, priors.mu0, d)
    m, s2 = _eb.update_m_s2(kappa.mean_log_kappa, kappa.var_log_kappa, pooled, priors.s2)
    alpha = _eb.update_alpha(priors.alpha, rho, _eb.alpha_cap(rho, priors.alpha))
    updated = Priors(alpha, mu0, c0, m, s2)
    priors = jax.tree_util.tree_map(
        lambda new, old: jnp.where(empirical_bayes, new, old), updated, priors
    )
    return kappa, accept, priors


def _global_update(s: VIState, cfg, empirical_bayes):
    """q(pi), q(mu), q(kappa) and the priors of one run from its last q(z) statistics.

    Returns (the posterior, the priors, the MH acceptance, A_d(gamma)).
    """
    d = cfg[1]
    stats, priors = s.stats, s.priors
    rho = priors.alpha + stats.resp_sum
    psi, gamma = _update_mu(s.post.kappa.mean_kappa[:, None] * stats.resultant, priors)
    a_gamma = special.mean_resultant_length(d, gamma)
    dot = a_gamma * jnp.sum(psi * stats.resultant, axis=-1)
    kappa, accept, priors = _update_kappa_priors(
        s.key,
        s.post.kappa,
        stats.resp_sum,
        dot,
        rho,
        a_gamma[:, None] * psi,
        priors,
        cfg,
        empirical_bayes,
    )
    return Posterior(rho, psi, gamma, kappa), priors, accept, a_gamma


def vi_iterations(
    state: VIState,
    data,
    tol,
    max_iter,
    empirical_bayes,
    *,
    scheme: str,
    num_samples: int,
    num_warmup: int,
    num_steps: int,
    shared_kappa: bool = False,
):
    """Run VI iterations of every active run of a batch; yield the state after each.

    Stops when no run is active (converged, or at ``max_iter``); runs that stopped are
    carried unchanged. Each iteration (module docstring) is two compiled programs, so
    that only the cheap one is compiled per number of rows: :func:`data_step` (q(z) and
    its statistics, per data shape) and :func:`update_step` (the bound of the iteration,
    its convergence test, then q(pi), q(mu), q(kappa) and the priors of the next one: the
    special functions, most of a step's compile time, compiled once per (batch size, K, d,
    scheme, static sizes)). The first call of :func:`update_step` only makes the first
    iteration's global updates. The numbers ``tol``, ``max_iter``, ``empirical_bayes``,
    the row count and the priors are traced, so nothing recompiles across iterations,
    restarts or fits that differ only in those.

    Parameters
    ----------
    state : VIState
        Batch of B runs.
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
        Row blocks on a mesh of devices (``devices=``) run the data pass on every device's
        rows and add the statistics over devices (``psum``); :func:`update_step` runs on
        the (replicated) statistics.
    tol : float64 scalar
        Convergence threshold on the change of the bound per row.
    max_iter : int64 scalar
    empirical_bayes : bool scalar
        Update the priors (sec. 3.1.3) at every iteration (traced).
    scheme : {"sampling", "bounding"} (static)
    num_samples, num_warmup : int (static)
        MH draws and warm-up per kappa update (sampling).
    num_steps : int (static)
        Ascent steps per kappa update (bounding).
    shared_kappa : bool (static), default False
        One concentration for every component (:func:`._kappa.pooled_update`).

    Yields
    ------
    state : VIState
    """
    static = dict(
        scheme=scheme,
        num_samples=num_samples,
        num_warmup=num_warmup,
        num_steps=num_steps,
        shared_kappa=shared_kappa,
    )
    numbers = (np.float64(data.shape[0]), tol, max_iter, empirical_bayes)
    # placeholders of the previous iteration's update and statistics: the first call makes
    # the first update and leaves the state as it is (a host array: no eager JAX operation,
    # which a later process would compile, tests/test_compile_cache.py)
    a_gamma = np.zeros(state.post.gamma.shape, np.float64)
    none = (state.post, state.priors, state.accept_rate, a_gamma)
    # placed as update_step's outputs are (on every device of a mesh): one program, not two
    state, none = data.replicate((state, none))
    state, _, update = update_step(state, none, state.stats, *numbers, np.bool_(True), **static)
    active = True
    while active:
        stats = data_step(data, update[0], update[3])
        state, any_active, update = update_step(
            state, update, stats, *numbers, np.bool_(False), **static
        )
        active = bool(any_active)
        yield state


@persistent_jit(
    static_argnames=("scheme", "num_samples", "num_warmup", "num_steps", "shared_kappa"),
    compiler_options=_mixture.JIT_OPTIONS,
)
def update_step(
    state: VIState,
    update,
    stats: Statistics,
    n_rows,
    tol,
    max_iter,
    empirical_bayes,
    first,
    *,
    scheme: str,
    num_samples: int,
    num_warmup: int,
    num_steps: int,
    shared_kappa: bool = False,
):
    """Close one VI iteration of every run of the batch, then make the next one's updates.

    ``update`` (posterior, priors, MH acceptance, A_d(gamma)) and ``stats`` are the global
    factors and the q(z) statistics of the iteration (:func:`data_step`); ``n_rows`` the
    number of rows (traced, float64). The bound per row, the convergence test and the new
    state of every active run (runs that had converged or reached ``max_iter`` keep their
    state), then q(pi), q(mu), q(kappa) and the priors from the new state. ``first`` (a
    traced bool): no iteration to close, only the updates.

    Returns
    -------
    state : VIState
    any_active : jax.Array of bool
        Whether some run needs another iteration.
    update : tuple
        The next iteration's (posterior, priors, MH acceptance, A_d(gamma)), batch first.
    """
    _mixture.count_trace("bayesian.update_step")
    d = state.post.psi.shape[-1]
    cfg = (scheme, d, num_samples, num_warmup, num_steps, shared_kappa)

    def one(s: VIState, post, priors, accept, a_gamma, stats):
        active = (~s.converged) & (s.n_iter < max_iter) & ~first
        bound = elbo(post, stats, priors, d, a_gamma, shared_kappa) / n_rows
        n_iter = s.n_iter + 1
        converged = jnp.abs(bound - s.bound) <= tol
        new = VIState(post, stats, priors, s.key, bound, accept, n_iter, converged)
        out = jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), new, s)
        still = active & ~converged & (n_iter < max_iter)
        return out, still, _global_update(out, cfg, empirical_bayes)

    new_state, active, update = jax.vmap(one)(state, *update, stats)
    return new_state, first | jnp.any(active), update


@persistent_jit(compiler_options=_mixture.JIT_OPTIONS)
def data_step(data, post: Posterior, a_gamma) -> Statistics:
    """q(z) of every run at ``post`` and its statistics over the rows (vmapped).

    On row blocks over devices every device computes its rows' statistics, added with
    ``psum`` (:func:`_statistics`); large dense data add those of chunks of rows, so that
    the (n, K) arrays of q(z) are not held whole (``data.map_sums``).
    """
    _mixture.count_trace("bayesian.data_step")
    return data.map_sums(_data_step_body, (post, a_gamma), columns=post.rho.size)


def _data_step_body(args, data):
    """Body of :func:`data_step` on plain data or on one block of rows (see ``data.map``)."""

    def one(post, a_gamma):
        wlp = _log_resp_unnormalised(data, post, a_gamma)
        return _statistics(data, wlp - logsumexp(wlp, axis=1, keepdims=True))

    return jax.vmap(one)(*args)


class StreamState(NamedTuple):
    """Global state of stochastic variational inference (:meth:`BayesianVMFMixture.partial_fit`).

    The natural parameters of the global factors (docs/bayesian_vi.md, "Stochastic
    variational inference"), each an estimate for the whole corpus of ``n_samples`` rows.

    Attributes
    ----------
    resp_sum : jax.Array of shape (K,)
        N_k: rho_k - alpha (q(pi)) and the weight w_k of q(kappa_k).
    natural : jax.Array of shape (K, d)
        E[kappa_k] r_k, the data part of the natural parameter R_k of q(mu_k).
    dot : jax.Array of shape (K,)
        delta_k = E[mu_k] . r_k, the other natural parameter of q(kappa_k).
    post : Posterior
        The global factors q(pi), q(mu), q(kappa) at these parameters.
    priors : Priors
    key : jax.Array
        MH key of the sampling scheme (fixed: common random numbers, as in :func:`vi_iterations`).
    """

    resp_sum: jax.Array
    natural: jax.Array
    dot: jax.Array
    post: Posterior
    priors: Priors
    key: jax.Array


@functools.partial(
    _compile_cache.jit,
    static_argnames=("scheme", "num_samples", "num_warmup", "num_steps", "shared_kappa"),
    compiler_options=_mixture.JIT_OPTIONS,
)
def svi_step(
    state: StreamState,
    data,
    step_size,
    scale,
    empirical_bayes,
    *,
    scheme: str,
    num_samples: int,
    num_warmup: int,
    num_steps: int,
    shared_kappa: bool = False,
):
    r"""One step of stochastic variational inference on a chunk (Hoffman et al. 2013).

    Local step: q(z_i) of the chunk's rows at the current global factors ((U5)). Global
    step: each natural parameter moves towards its estimate from the chunk, the chunk's
    statistics scaled by ``scale`` = n / m (n rows of the corpus, m of the chunk),

    .. math::

        \lambda_t = (1 - \rho_t)\, \lambda_{t-1} + \rho_t\, \hat\lambda(\text{chunk}),

    for N_k (so rho_k = alpha + N_k), E[kappa_k] r_k (so R_k = E[kappa_k] r_k + C0 mu0) and
    delta_k = E[mu_k] . r_k (E[mu_k] after the q(mu) step); then q(kappa_k) by the scheme from
    (N_k, delta_k) and the empirical Bayes updates (``empirical_bayes``, traced), as in
    :func:`vi_iterations`. With one chunk holding all the rows and rho_t = 1 this is one VI
    iteration.

    Parameters
    ----------
    state : StreamState
    data : bayesvmf._blocks.RowBlocks
        The chunk, padded to a bucket size (:func:`bayesvmf._blocks.device_data`); on a
        mesh of devices each device takes the local step of its rows and the statistics are
        added over devices (``psum``). Rows are counted by their weights, never by
        ``data.n_samples`` (:meth:`~bayesvmf._blocks.RowBlocks.counted_by_weight`).
    step_size, scale : float64 scalars
        rho_t and n / m.
    empirical_bayes : bool scalar
    scheme, num_samples, num_warmup, num_steps, shared_kappa : static, as in :func:`vi_iterations`.

    Returns
    -------
    state : StreamState
    bound : jax.Array
        Estimate of the bound per row: :func:`elbo` at the new global factors with the
        chunk's q(z) statistics scaled by n / m, divided by n.
    accept_rate : jax.Array of shape (K,)
    effective_rows : jax.Array of shape (K,)
        The chunk's effective number of rows per component, (sum_i lambda_ik)^2 /
        sum_i lambda_ik^2 (:func:`bayesvmf._guards.effective_counts`), for the guards.
    """
    _mixture.count_trace("bayesian.svi_step")
    cfg = (scheme, data.shape[1], num_samples, num_warmup, num_steps, shared_kappa)
    return data.map(
        functools.partial(_svi_step_body, cfg=cfg), (state, step_size, scale, empirical_bayes)
    )


def _svi_step_body(args, data, *, cfg):
    """Body of :func:`svi_step` on one block of rows (see ``data.map``)."""
    state, step_size, scale, empirical_bayes = args
    d = data.shape[1]
    post, priors = state.post, state.priors
    a_gamma = special.mean_resultant_length(d, post.gamma)
    wlp = _log_resp_unnormalised(data, post, a_gamma)
    log_resp = wlp - logsumexp(wlp, axis=1, keepdims=True)
    resultant, resp_sum, entropy, square = _statistics(data, log_resp)

    def move(old, estimate):
        return (1.0 - step_size) * old + step_size * estimate

    big_n = move(state.resp_sum, scale * resp_sum)
    natural = move(state.natural, scale * post.kappa.mean_kappa[:, None] * resultant)
    rho = priors.alpha + big_n
    psi, gamma = _update_mu(natural, priors)
    a_gamma = special.mean_resultant_length(d, gamma)
    dot = move(state.dot, scale * a_gamma * jnp.sum(psi * resultant, axis=-1))
    kappa, accept, priors = _update_kappa_priors(
        state.key,
        post.kappa,
        big_n,
        dot,
        rho,
        a_gamma[:, None] * psi,
        priors,
        cfg,
        empirical_bayes,
    )
    post = Posterior(rho, psi, gamma, kappa)
    stats = Statistics(scale * resultant, scale * resp_sum, scale * entropy)
    (real_rows,) = data.sum_over_blocks(jnp.sum(data.row_weight))
    n = scale * real_rows
    bound = elbo(post, stats, priors, d, a_gamma, cfg[-1]) / n
    # the chunk's effective rows per component, N_k^2 / sum_i lambda_ik^2 (the guards)
    effective = jnp.where(square > 0, resp_sum**2 / jnp.where(square > 0, square, 1.0), 0.0)
    return StreamState(big_n, natural, dot, post, priors, state.key), bound, accept, effective


class FitKeys(NamedTuple):
    """The random keys of one fit (:func:`_fit_keys`)."""

    init: jax.Array  # the seeding subsample of large sparse data
    runs: jax.Array  # (B,): each run's seeding (VI) or initial labels (Gibbs)
    fit: jax.Array  # the Gibbs sweeps
    mh: jax.Array  # (B,): each VI run's Metropolis-Hastings draws of kappa
    draws: jax.Array  # the predictive draws of the kept run


@persistent_jit(static_argnames="batch")
def _fit_keys(rng_key, batch: int) -> FitKeys:
    """Derive every key of a fit of ``batch`` runs from the estimator's key.

    One program instead of an eager split per key: each eager operation is a program of its
    own, traced and lowered again in every new process (the first fit's wait).
    """
    key_init, key_fit = jax.random.split(rng_key)
    key_mh, key_draws = jax.random.split(key_fit)
    return FitKeys(
        key_init,
        jax.random.split(key_init, batch),
        key_fit,
        jax.random.split(key_mh, batch),
        key_draws,
    )


@persistent_jit(static_argnames=("n_components", "init"), compiler_options=_mixture.JIT_OPTIONS)
def _init_labels(keys, data, n_components: int, init: str, kmeans_iter=None, sample=None):
    """Crisp labels of every restart: closest initial direction by cosine.

    The directions are those of :func:`bayesvmf._parallel.initial_directions` (``sample``:
    the seeding subsample of sparse data, :func:`bayesvmf._seeding.host_seeding_sample`).
    """
    _mixture.count_trace("bayesian.init_labels")

    def one(key):
        mu = _parallel.initial_directions(key, data, n_components, init, kmeans_iter, sample)
        return jnp.argmax(data.dot(mu.T), axis=1)

    return jax.vmap(one)(keys)


@persistent_jit(static_argnames=("n_components", "init"), compiler_options=_mixture.JIT_OPTIONS)
def _seed_statistics(keys, data, n_components: int, init: str, kmeans_iter=None, sample=None):
    """(r_k, N_k) of every restart's crisp assignment to its seeds, shapes (B, K, d), (B, K).

    The initial directions and the assignment of :func:`_init_labels` (the same draws),
    computed on row blocks as well: each device assigns its own rows, the sums are added
    over devices.
    """
    _mixture.count_trace("bayesian.seed_statistics")

    def body(args, data):
        keys, kmeans_iter = args

        def one(key):
            mu = _parallel.initial_directions(key, data, n_components, init, kmeans_iter, sample)
            return _parallel.crisp_statistics(data, mu)

        return jax.vmap(one)(keys)

    return data.map(body, (keys, kmeans_iter))


@persistent_jit(static_argnames="n_components", compiler_options=_mixture.JIT_OPTIONS)
def _label_statistics(labels, data, n_components: int):
    """(r_k, N_k) of one crisp labelling (n,) of plain data.

    Computed as a batch of one, as :func:`_seed_statistics` computes the restarts': XLA's
    CPU product over the rows of dense data takes another kernel for a batch than for one
    right-hand side (float32 sums that differ in their last bits), and a fit from given
    labels is to be the fit from seeds that give those labels.
    """
    _mixture.count_trace("bayesian.label_statistics")
    onehot = jax.nn.one_hot(labels, n_components, dtype=jnp.float64)
    resultant, resp_sum = jax.vmap(_mixture.resultants, in_axes=(None, 0))(data, onehot[None])
    return resultant[0], resp_sum[0]


@persistent_jit(static_argnames=("scheme", "shared_kappa"), compiler_options=_mixture.JIT_OPTIONS)
def _init_state(resultant, resp_sum, keys, priors: Priors, scheme: str, shared_kappa=False):
    """VIState of every restart from the statistics of its crisp assignment, (B, K, d), (B, K).

    q(z) is the one-hot assignment; q(kappa) starts at the classical per-component estimate
    (A_d(kappa_k) = |r_k| / N_k), exp(m) for an empty component, or with ``shared_kappa`` at
    the classical shared estimate (A_d(kappa) = sum_k |r_k| / n, eq. (27) of the sparse
    mixture); q(pi), q(mu) are set by the first iteration.
    """
    _mixture.count_trace("bayesian.init_state")
    n_components, d = resultant.shape[1:]

    def one(resultant, resp_sum, key, pri):
        # a crisp assignment: sum_i lambda_ik^2 = N_k
        stats = Statistics(resultant, resp_sum, jnp.zeros((), jnp.float64), resp_sum)
        norms = jnp.linalg.norm(stats.resultant, axis=-1)
        if shared_kappa:
            total = jnp.maximum(jnp.sum(stats.resp_sum), 1.0)
            rbar = jnp.full(n_components, jnp.sum(norms) / total)
        else:
            rbar = norms / jnp.maximum(stats.resp_sum, 1.0)
        kappa0, _ = _mixture.solve_kappa(d, rbar, _eb.C0_MAX)
        # one concentration: every component, empty or not, starts at the shared estimate
        used = (jnp.sum(stats.resp_sum) if shared_kappa else stats.resp_sum) > 0
        kappa0 = jnp.where(used & (kappa0 > 0), kappa0, jnp.exp(pri.m))
        kstate = _kappa.initial_kappa_state(kappa0, scheme)
        moments = KappaMoments(
            mean_kappa=kappa0,
            mean_log_c=_mixture.log_normalizer(d, kappa0),
            mean_log_kappa=jnp.log(kappa0),
            var_log_kappa=jnp.full_like(kappa0, 0.01),
            state=kstate,
        )
        post = Posterior(
            rho=pri.alpha + stats.resp_sum,
            psi=jnp.zeros((n_components, d), jnp.float64),
            gamma=jnp.zeros(n_components, jnp.float64),
            kappa=moments,
        )
        return VIState(
            post,
            stats,
            pri,
            key,
            jnp.array(-jnp.inf, jnp.float64),
            jnp.ones(n_components),
            jnp.zeros((), jnp.int64),
            jnp.zeros((), bool),
        )

    return jax.vmap(one)(resultant, resp_sum, keys, priors)


@persistent_jit(compiler_options=_mixture.JIT_OPTIONS)
def _weighted_log_resp(data, rho, psi, gamma, mean_kappa, mean_log_c):
    _mixture.count_trace("bayesian.log_resp")
    return _log_resp_rows((rho, psi, gamma, mean_kappa, mean_log_c), data)


def _log_resp_rows(params, data):
    """Log lambda_ik + const of the rows of plain data (or of one block, ``data.map_rows``)."""
    rho, psi, gamma, mean_kappa, mean_log_c = params
    kappa = KappaMoments(mean_kappa, mean_log_c, mean_log_c, mean_log_c, mean_log_c)
    a_gamma = special.mean_resultant_length(data.shape[1], gamma)
    return _log_resp_unnormalised(data, Posterior(rho, psi, gamma, kappa), a_gamma)


@persistent_jit(compiler_options=_mixture.JIT_OPTIONS)
def _log_predictive(data, rho, psi, gamma, kappa_draws, log_draw_weights):
    """Log posterior predictive per row (:meth:`BayesianVMFMixture.score_samples`)."""
    _mixture.count_trace("bayesian.log_predictive")
    d = data.shape[1]
    cosines = data.dot(psi.T)  # (n, K)
    kappa = kappa_draws[:, None, :]  # (S, 1, K)
    norm_sq = kappa**2 + gamma**2 + 2.0 * kappa * gamma * cosines[None]
    norm = jnp.sqrt(jnp.maximum(norm_sq, 0.0))
    # one special-function call (one site to compile: this program is compiled per row count)
    log_c_kappa, log_c_gamma, log_c_norm = _mixture.log_normalizers(d, kappa_draws, gamma, norm)
    terms = (
        log_c_kappa[:, None, :]
        + log_c_gamma
        - log_c_norm
        + log_draw_weights[:, None, None]
        + jnp.log(rho / jnp.sum(rho))
    )
    return logsumexp(terms, axis=(0, 2))


# --------------------------------------------------------------------------------------------
# Small programs of the estimator's fit (BayesianVMFMixture in _bvmf.py)
# --------------------------------------------------------------------------------------------


@persistent_jit(static_argnames="d")
def _pooled_kappa(resultant, n_rows, *, d: int):
    """Return the concentration of run 0's crisp statistics (the prior's location on log kappa).

    ``sum_k |r_k| / n`` solved for kappa (eq. (21) with one kappa), capped at the empirical
    Bayes bound ``C0_MAX``; one program (op by op, each operation would be a program of its
    own in every new process).
    """
    rbar = jnp.sum(jnp.linalg.norm(resultant[0], axis=-1)) / n_rows
    return _mixture.solve_kappa(d, rbar, _eb.C0_MAX)[0]


@persistent_jit(static_argnames="d")
def _kept_run(state, best, *, d: int):
    """Return the kept restart of a VI batch and its global natural parameters (one program).

    Returns the run, E[kappa_k] r_k and delta_k = A_d(gamma_k) psi_k . r_k, what
    ``partial_fit`` continues from.
    """
    run = jax.tree_util.tree_map(lambda a: a[best], state)
    post, stats = run.post, run.stats
    dot = special.mean_resultant_length(d, post.gamma) * jnp.sum(
        post.psi * stats.resultant, axis=-1
    )
    return run, post.kappa.mean_kappa[:, None] * stats.resultant, dot
