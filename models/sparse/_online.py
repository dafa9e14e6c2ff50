"""Stepwise (online) EM of the sparse vMF mixture: the step behind ``partial_fit``.

Running per-row sufficient statistics (:class:`OnlineStats`) move towards each chunk's by a
step size, and the parameters are the batch M-step of [1]_ (eqs. (20)-(22),
:func:`bayesvmf.models.sparse._em._m_step`, the same function) of those statistics.

References
----------
.. [1] Rossi and Barbaro, sparse vMF mixture (in full: :mod:`bayesvmf.models.sparse`).
.. [2] Banerjee, Dhillon, Ghosh and Sra, JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayesvmf import _compile_cache, _mixture, _parallel
from bayesvmf._mixture import Status
from bayesvmf.models.sparse._em import _m_step


class OnlineStats(NamedTuple):
    """Running sufficient statistics of stepwise (online) EM, per row of data.

    Attributes
    ----------
    resp_sum : jax.Array of shape (K,)
        Running average of tau_ik over the rows seen (N_k / n).
    resultant : jax.Array of shape (K, d)
        Running average of tau_ik x_i (r_k / n, eq. (23)).
    """

    resp_sum: jax.Array
    resultant: jax.Array


@functools.partial(
    _compile_cache.jit, static_argnames=("shared_kappa",), compiler_options=_mixture.JIT_OPTIONS
)
def online_em_step(
    stats: OnlineStats,
    log_weights,
    mu,
    kappa,
    data,
    step_size,
    n_samples,
    beta,
    kappa_max,
    *,
    shared_kappa: bool,
):
    r"""One step of stepwise (online) EM on a chunk of rows (Cappé & Moulines 2009).

    With :math:`\bar s(\text{chunk})` the E-step statistics of the chunk at the current
    parameters averaged over its m rows, :math:`(\sum_i \tau_{ik}, \sum_i \tau_{ik} x_i) / m`,
    the running statistics move by the step size :math:`\rho_t`,

    .. math::

        s_t = (1 - \rho_t)\, s_{t-1} + \rho_t\, \bar s(\text{chunk}),

    and the parameters are the M-step of batch EM (:func:`m_step`: eqs. (20)-(22) of [1]_,
    the same function) applied to the statistics of ``n_samples`` rows, ``n_samples * s_t``
    (the scale only matters for the l1 penalty: eq. (11) weighs beta against n rows). A
    degenerate M-step keeps the incoming parameters and reports its status.

    Parameters
    ----------
    stats : OnlineStats
    log_weights, mu, kappa : jax.Array of shapes (K,), (K, d), (K,)
        Current parameters (one run, no batch axis).
    data : bayesvmf._blocks.RowBlocks
        The chunk (padded; sharded over devices or not).
    step_size, n_samples, beta, kappa_max : float64 scalars
        rho_t, the number of rows the penalty is weighed against, the penalty, the cap.
    shared_kappa : bool (static)

    Returns
    -------
    stats : OnlineStats
    log_weights, mu, kappa : jax.Array
        The new parameters.
    status : jax.Array of int64
        :class:`Status` of the M-step.
    log_likelihood : jax.Array
        Total log-likelihood (eq. (9)) of the chunk at the incoming parameters.
    """
    _mixture.count_trace("sparse.online_em_step")
    args = (stats, log_weights, mu, kappa, step_size, n_samples, beta, kappa_max)
    return data.map(functools.partial(_online_body, shared_kappa=shared_kappa), args)


def _online_body(args, data, *, shared_kappa: bool):
    """Body of :func:`online_em_step` on plain data or on one block of rows."""
    stats, log_weights, mu, kappa, step_size, n_samples, beta, kappa_max = args
    m, d = data.shape
    log_c = _mixture.log_normalizer(d, kappa)
    resultant, resp_sum, log_likelihood = _parallel.e_statistics(
        data, log_weights, mu, kappa, log_c
    )
    new = OnlineStats(
        resp_sum=(1.0 - step_size) * stats.resp_sum + step_size * resp_sum / m,
        resultant=(1.0 - step_size) * stats.resultant + step_size * resultant / m,
    )
    new_lw, new_mu, new_kappa, status = _m_step(
        n_samples * new.resultant, n_samples * new.resp_sum, kappa, beta, kappa_max, shared_kappa
    )
    ok = status == Status.OK
    return (
        new,
        jnp.where(ok, new_lw, log_weights),
        jnp.where(ok, new_mu, mu),
        jnp.where(ok, new_kappa, kappa),
        status,
        log_likelihood,
    )


class _OnlineState(NamedTuple):
    """What ``partial_fit`` carries between calls (device arrays)."""

    stats: OnlineStats
    log_weights: jax.Array
    mu: jax.Array
    kappa: jax.Array
