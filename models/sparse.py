r"""MAP l1-penalised sparse von Mises-Fisher mixture: EM, beta path and model selection.

Generative story: z_i ~ Categorical(alpha); x_i | z_i = k ~ vMF(mu_k, kappa_k) on the unit
sphere S^{d-1}. The parameters maximise the penalised log-likelihood of eq. (11) of [1]_,

.. math::

    L_p(\Theta \mid X) = \sum_{i=1}^n \log \sum_{k=1}^K \alpha_k C_d(\kappa_k)
        e^{\kappa_k \mu_k^T x_i} - \beta \sum_{k=1}^K \lVert \mu_k \rVert_1,

by the EM of Algorithm 2 (soft-threshold M-step, eq. (22), coupled with the kappa update of
eq. (21) by a fixed point). With beta = 0 it is the classical vMF mixture of Banerjee et al.
[2]_. ``SparseVMFMixture.path`` follows the event-driven beta path of Algorithm 3 (eqs.
(30)-(31)), and :func:`select_sparse_model` applies the methodology of sec. 3.6.

===============  ==================================================================
code             paper
===============  ==================================================================
``weights_``     alpha_k (eq. (20))
``mean_directions_``  mu_k (eq. (22))
``concentrations_``   kappa_k (eq. (21); eq. (27) when shared)
``beta``         beta, the l1 penalty (eq. (11)); ``betas`` on a path
``resultant``    r_k = sum_i tau_ik x_i (eq. (23))
``rho``          rho_k = mu_k . r_k / N_k (eq. (26))
===============  ==================================================================

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes" (journal version; the ESANN 2021 paper "Sparse mixture of von Mises-Fisher
   distribution" by Barbaro and Rossi is the short version).
.. [2] A. Banerjee, I. S. Dhillon, J. Ghosh and S. Sra, "Clustering on the unit hypersphere
   using von Mises-Fisher distributions", JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

from bayesvmf import _mixture, _parallel, criteria
from bayesvmf._base import check_count
from bayesvmf._mixture import Status

__all__ = [
    "EMState",
    "init_state",
    "init_state_from_labels",
    "fresh_state",
    "m_step",
    "run_em",
    "OnlineStats",
    "online_em_step",
    "SparseVMFMixture",
    "SparsePath",
    "SparseSelection",
    "select_sparse_model",
]

#: Cap and tolerance of the mu/kappa fixed point inside one M-step (Algorithm 2, inner loop).
FIXED_POINT_MAX_ITER = 100
FIXED_POINT_RTOL = 1e-12

#: :func:`run_em` takes stopped restarts out of the batch (compiling ``em_step`` for the
#: smaller batch, about a second) only when one run's data pass costs at least this many
#: multiply-adds (about 15 ms on one core): the 20-Newsgroups-size corpus at K = 20 costs
#: 6.8e7, the small test problems far less.
COMPACT_MIN_WORK = 2**25


class EMState(NamedTuple):
    """State of a batch of B EM runs (Algorithm 2 of [1]_), one per restart.

    A pytree of device arrays with the batch axis first; :func:`em_step` maps it to the next
    state.

    Attributes
    ----------
    log_weights : jax.Array of shape (B, K)
        log alpha_k.
    mu : jax.Array of shape (B, K, d)
        Mean directions (unit rows, possibly sparse).
    kappa : jax.Array of shape (B, K)
        Concentrations (all equal when shared).
    resultant : jax.Array of shape (B, K, d)
        r_k = sum_i tau_ik x_i at the parameters of the last data pass (zeros before one).
    bound : jax.Array of shape (B,)
        Penalised log-likelihood per row (eq. (11) / n) at the last data pass (-inf before
        the first one).
    log_likelihood : jax.Array of shape (B,)
        Total log-likelihood (eq. (9)) at the last data pass.
    n_iter : jax.Array of int64, shape (B,)
        Number of M-steps done.
    converged : jax.Array of bool, shape (B,)
    status : jax.Array of int64, shape (B,)
        :class:`bayesvmf._mixture.Status` bits; nonzero stops the run.
    """

    log_weights: jax.Array
    mu: jax.Array
    kappa: jax.Array
    resultant: jax.Array
    bound: jax.Array
    log_likelihood: jax.Array
    n_iter: jax.Array
    converged: jax.Array
    status: jax.Array


def _rho(mu, resultant, resp_sum, shared_kappa: bool):
    """Mean resultant lengths of eq. (26) (free kappa) or eq. (27) (shared kappa)."""
    dots = jnp.sum(mu * resultant, axis=-1)
    tiny = jnp.finfo(dots.dtype).tiny
    if shared_kappa:
        total = jnp.maximum(jnp.sum(resp_sum, axis=-1, keepdims=True), tiny)
        return jnp.broadcast_to(jnp.sum(dots, axis=-1, keepdims=True) / total, dots.shape)
    return dots / jnp.maximum(resp_sum, tiny)


def soft_threshold_directions(resultant, kappa, beta):
    """Return the soft-thresholded mean directions of eq. (22) (eq. (28) when shared).

    mu_kj = sign(r_kj) max(kappa_k |r_kj| - beta, 0) / norm; computed as
    max(|r_kj| - beta / kappa_k, 0), the same direction, so that beta = 0 gives r_k / |r_k|
    bit for bit as in Banerjee et al. [2]_.

    Parameters
    ----------
    resultant : jax.Array of shape (..., K, d)
    kappa : jax.Array of shape (..., K)
    beta : jax.Array, scalar

    Returns
    -------
    mu : jax.Array of shape (..., K, d)
        Unit rows, or zero rows where everything was thresholded.
    norm : jax.Array of shape (..., K)
        Norm before normalisation (0 flags a zero direction).
    """
    tiny = jnp.finfo(resultant.dtype).tiny
    threshold = jnp.where(beta > 0, beta / jnp.maximum(kappa, tiny), 0.0)
    shrunk = jnp.maximum(jnp.abs(resultant) - threshold[..., None], 0.0)
    norm = jnp.linalg.norm(shrunk, axis=-1)
    mu = jnp.sign(resultant) * shrunk / jnp.maximum(norm, tiny)[..., None]
    return mu, norm


def penalised_bound(log_likelihood, mu, beta, n_samples: int):
    """Return eq. (11) divided by n, from the total log-likelihood (eq. (9)) of n rows."""
    return (log_likelihood - beta * jnp.sum(jnp.abs(mu))) / n_samples


def _status(resp_sum, rho, collapsed, norm=None):
    """Status bits (appendix B of [1]_) of one run from its M-step quantities."""
    status = jnp.where(collapsed.any(axis=-1), Status.COLLAPSED, Status.OK)
    vanished = (resp_sum < _mixture.EMPTY_RESP_SUM) | (rho <= 0)
    status |= jnp.where(vanished.any(axis=-1), Status.VANISHED, Status.OK)
    if norm is not None:
        status |= jnp.where((norm <= 0).any(axis=-1), Status.ZERO_DIRECTION, Status.OK)
    return status.astype(jnp.int64)


def _log_weights(resp_sum):
    """Return log alpha_k of eq. (20), floored at log(tiny) for empty components."""
    weights = resp_sum / jnp.sum(resp_sum, axis=-1, keepdims=True)
    return jnp.log(jnp.maximum(weights, jnp.finfo(jnp.float64).tiny))


def _m_step(resultant, resp_sum, kappa, beta, kappa_max, shared_kappa: bool):
    """M-step of one run (traceable; d static from ``resultant``). See :func:`m_step`."""
    d = resultant.shape[-1]

    def directions(kappa):
        # eq. (22) (directions given kappa) and the rho of eq. (26)/(27) they give
        mu, norm = soft_threshold_directions(resultant, kappa, beta)
        return mu, norm, _rho(mu, resultant, resp_sum, shared_kappa)

    def fixed_point(carry):
        # one pass of eq. (22) then eq. (21)/(27) (kappa given directions)
        it, kappa, _ = carry
        new_kappa, _ = _mixture.solve_kappa(d, directions(kappa)[2], kappa_max)
        change = jnp.max(jnp.abs(new_kappa - kappa) / jnp.maximum(jnp.abs(new_kappa), 1.0))
        return it + 1, new_kappa, change

    def keep_going(carry):
        it, _, change = carry
        # beta = 0: mu = r / |r| does not depend on kappa, so the single pass below is exact
        return (beta > 0) & (change > FIXED_POINT_RTOL) & (it < FIXED_POINT_MAX_ITER - 1)

    # The loop carries the K concentrations only, not the (K, d) directions: carrying those
    # cost more than the pass itself (measured 290 -> 125 ms per M-step at B = 4, K = 20,
    # d = 26,214, machine loaded). The final pass computes the directions from the settled
    # kappa and the kappa they give, so mu and kappa always come from one pass.
    init = (jnp.int32(0), kappa, jnp.asarray(jnp.inf, kappa.dtype))
    _, kappa, _ = jax.lax.while_loop(keep_going, fixed_point, init)
    mu, norm, rho = directions(kappa)
    kappa, collapsed = _mixture.solve_kappa(d, rho, kappa_max)
    return _log_weights(resp_sum), mu, kappa, _status(resp_sum, rho, collapsed, norm)


@functools.partial(
    jax.jit, static_argnames=("shared_kappa",), compiler_options=_mixture.JIT_OPTIONS
)
def m_step(resultant, resp_sum, kappa, beta, kappa_max, *, shared_kappa: bool):
    """M-step of Algorithm 2 of [1]_: weights (eq. (20)) and the mu/kappa fixed point.

    Starting from the current kappa, alternate eq. (22) (directions given kappa) and eq. (21)
    (kappa given directions, solved at full precision by
    :func:`bayesvmf._mixture.solve_kappa` and capped) until kappa changes by less than
    ``FIXED_POINT_RTOL`` relative, at most ``FIXED_POINT_MAX_ITER`` times (a
    ``lax.while_loop``). mu is updated before kappa, as the paper requires for consistency
    with beta = 0, where one pass is exact (mu = r / |r| does not depend on kappa).

    Parameters
    ----------
    resultant : jax.Array of shape (B, K, d)
    resp_sum : jax.Array of shape (B, K)
    kappa : jax.Array of shape (B, K)
        Concentrations of the previous iteration (start of the fixed point).
    beta, kappa_max : float
    shared_kappa : bool
        Use eqs. (27)-(29) (one kappa) instead of eqs. (21)-(24).

    Returns
    -------
    log_weights, mu, kappa : jax.Array
        The new parameters.
    status : jax.Array of int64, shape (B,)
        :class:`Status` bits of degenerate outcomes (appendix B of [1]_).
    """
    _mixture.count_trace("sparse.m_step")
    return jax.vmap(lambda r, n, k: _m_step(r, n, k, beta, kappa_max, shared_kappa))(
        resultant, resp_sum, kappa
    )


@functools.partial(
    jax.jit, static_argnames=("shared_kappa",), compiler_options=_mixture.JIT_OPTIONS
)
def em_step(state: EMState, data, beta, kappa_max, tol, max_iter, *, shared_kappa: bool):
    """One EM iteration of every run of a batch (Algorithm 2 of [1]_), one jitted program.

    Per run: a data pass at the current parameters (log C_d(kappa), the log-space E-step of
    eqs. (15)-(17), the resultants of eq. (23), the penalised bound of eq. (11)), the
    convergence test (change of the bound per row at most ``tol``), then the M-step
    (:func:`m_step`) if the run is still active. A degenerate M-step keeps the previous
    (finite) parameters and sets the run's status. Runs that are converged, degenerate or at
    ``max_iter`` only refresh their data-pass quantities, so after a step in which no run was
    active ``bound``, ``log_likelihood`` and ``resultant`` describe the returned parameters.

    Jitted once at module level; d is static (from the data shape), so the special-function
    branch is chosen at trace time, and the numbers ``beta``, ``kappa_max``, ``tol``,
    ``max_iter`` are traced: nothing recompiles across iterations, restarts or path steps.

    Parameters
    ----------
    state : EMState
        Batch of B runs.
    data : DenseData, SparseData or bayesvmf._parallel.RowBlocks
        Row blocks on a mesh of devices run the data pass on every device's rows and add
        the statistics over devices (``psum``); the M-step runs replicated.
    beta, kappa_max, tol : float64 scalars
    max_iter : int64 scalar
    shared_kappa : bool (static)

    Returns
    -------
    state : EMState
    any_active : jax.Array of bool
        Whether some run did an M-step (the caller loops until it is False).
    """
    _mixture.count_trace("sparse.em_step")
    # sharded data (RowBlocks on a mesh): the body runs on every device's block of rows,
    # the E-step statistics are summed over devices (psum), the M-step runs replicated
    return _parallel.map_blocks(
        functools.partial(_em_step_body, shared_kappa=shared_kappa),
        (state, beta, kappa_max, tol, max_iter),
        data,
    )


def _em_step_body(args, data, *, shared_kappa: bool):
    """Body of :func:`em_step` on plain data or on one block of rows (see map_blocks)."""
    state, beta, kappa_max, tol, max_iter = args
    n_samples, n_features = data.shape

    def one(s: EMState):
        log_c = _mixture.log_normalizer(n_features, s.kappa)
        resultant, resp_sum, log_likelihood = _parallel.e_statistics(
            data, s.log_weights, s.mu, s.kappa, log_c
        )
        bound = penalised_bound(log_likelihood, s.mu, beta, n_samples)
        healthy = s.status == Status.OK
        converged = s.converged | (
            (~s.converged) & healthy & (s.n_iter > 0) & (jnp.abs(bound - s.bound) <= tol)
        )
        active = (~converged) & healthy & (s.n_iter < max_iter)
        new_lw, new_mu, new_kappa, new_status = _m_step(
            resultant, resp_sum, s.kappa, beta, kappa_max, shared_kappa
        )
        update = active & (new_status == Status.OK)
        new = EMState(
            log_weights=jnp.where(update, new_lw, s.log_weights),
            mu=jnp.where(update, new_mu, s.mu),
            kappa=jnp.where(update, new_kappa, s.kappa),
            resultant=resultant,
            bound=bound,
            log_likelihood=log_likelihood,
            n_iter=s.n_iter + update.astype(s.n_iter.dtype),
            converged=converged,
            status=jnp.where(active, new_status, s.status),
        )
        return new, active

    new_state, active = jax.vmap(one)(state)
    return new_state, jnp.any(active)


@functools.partial(
    jax.jit,
    static_argnames=("n_components", "init", "shared_kappa"),
    compiler_options=_mixture.JIT_OPTIONS,
)
def _init_batch(keys, data, kappa_max, n_components, init, shared_kappa):
    """Seeds, crisp statistics and parameters of every restart (Algorithm 4 of [1]_)."""
    _mixture.count_trace("sparse.init")

    def batch(args, data):
        keys, kappa_max = args

        def one(key):
            mu = _parallel.INIT_METHODS[init](key, data, n_components)
            resultant, resp_sum = _parallel.crisp_statistics(data, mu)
            rho = _rho(mu, resultant, resp_sum, shared_kappa)
            kappa, collapsed = _mixture.solve_kappa(data.shape[1], rho, kappa_max)
            return _log_weights(resp_sum), mu, kappa, _status(resp_sum, rho, collapsed)

        return jax.vmap(one)(keys)

    # sharded data: seeds and crisp statistics from every device's rows (see em_step)
    return _parallel.map_blocks(batch, (keys, kappa_max), data)


def init_state(rng_key, data, *, n_components, n_init, init, shared_kappa, kappa_max):
    """Initialise ``n_init`` runs by Algorithm 4 of [1]_ (or spherical k-means++ seeds).

    Seeds become the mean directions; every row is assigned to its closest seed by cosine;
    alpha_k are the cluster proportions and kappa solves eq. (21) with the crisp
    responsibilities and the seeds as mu_k (shared: eq. (27)). Each run has its own key;
    all runs are initialised by one vmapped, jitted program.

    Returns
    -------
    EMState
    """
    keys = jax.random.split(rng_key, n_init)
    log_weights, mu, kappa, status = _init_batch(
        keys, data, np.float64(kappa_max), int(n_components), init, bool(shared_kappa)
    )
    return fresh_state(log_weights, mu, kappa, status)


@functools.partial(
    jax.jit, static_argnames=("n_components", "shared_kappa"), compiler_options=_mixture.JIT_OPTIONS
)
def _init_from_labels(data, labels, kappa_max, n_components, shared_kappa):
    """Parameters of the crisp partition ``labels``: the M-step of eqs. (20), (21), (23)."""
    _mixture.count_trace("sparse.init_labels")
    resp = jax.nn.one_hot(labels, n_components, dtype=jnp.float64)
    resultant, resp_sum = _mixture.resultants(data, resp)
    norm = jnp.linalg.norm(resultant, axis=-1)
    mu = resultant / jnp.maximum(norm, jnp.finfo(jnp.float64).tiny)[:, None]
    rho = _rho(mu, resultant, resp_sum, shared_kappa)
    kappa, collapsed = _mixture.solve_kappa(data.shape[1], rho, kappa_max)
    return _log_weights(resp_sum), mu, kappa, _status(resp_sum, rho, collapsed, norm)


def init_state_from_labels(data, labels, *, n_components, shared_kappa, kappa_max):
    """Initialise one run from a given partition (the same start for several estimators).

    alpha_k are the cluster proportions, mu_k the normalised cluster resultants and kappa_k
    solves eq. (21) (shared: eq. (27)) with these crisp responsibilities: the M-step of
    Algorithm 2 of [1]_ applied to the partition.

    Parameters
    ----------
    data : DenseData or SparseData
    labels : ndarray of int, shape (n_samples,)
        Checked labels in ``[0, n_components)``, every component used.

    Returns
    -------
    EMState
        A batch of one run.
    """
    parts = _init_from_labels(
        data,
        jnp.asarray(labels, jnp.int32),
        np.float64(kappa_max),
        int(n_components),
        bool(shared_kappa),
    )
    return fresh_state(*(a[None] for a in parts[:3]), parts[3][None])


def _check_init_labels(init, n_samples: int, n_components: int) -> np.ndarray:
    """Validate an ``init`` label array against the data; return it as int64."""
    labels = np.asarray(init)
    if labels.dtype.kind not in "iu":
        raise ValueError(f"init labels must be integers, got an array of dtype {labels.dtype}")
    if labels.shape != (n_samples,):
        raise ValueError(
            f"init labels must have shape (n_samples,) = ({n_samples},), got shape {labels.shape}"
        )
    bad = (labels < 0) | (labels >= n_components)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"init labels must be in [0, n_components={n_components}); row {row} has label "
            f"{labels[row]}"
        )
    counts = np.bincount(labels, minlength=n_components)
    if (counts == 0).any():
        raise ValueError(
            f"init labels leave component {int(np.flatnonzero(counts == 0)[0])} empty; every "
            f"one of the n_components={n_components} components needs at least one row"
        )
    return labels.astype(np.int64)


def fresh_state(log_weights, mu, kappa, status=None) -> EMState:
    """Build an :class:`EMState` with no iteration done (batch axis first; warm starts)."""
    log_weights = jnp.asarray(log_weights, jnp.float64)
    mu = jnp.asarray(mu, jnp.float64)
    batch = log_weights.shape[0]
    return EMState(
        log_weights=log_weights,
        mu=mu,
        kappa=jnp.asarray(kappa, jnp.float64),
        resultant=jnp.zeros_like(mu),
        bound=jnp.full(batch, -jnp.inf, jnp.float64),
        log_likelihood=jnp.full(batch, -jnp.inf, jnp.float64),
        n_iter=jnp.zeros(batch, jnp.int64),
        converged=jnp.zeros(batch, bool),
        status=(jnp.zeros(batch, jnp.int64) if status is None else jnp.asarray(status, jnp.int64)),
    )


def run_em(
    state: EMState,
    data,
    *,
    beta: float,
    kappa_max: float,
    tol: float,
    max_iter: int,
    shared_kappa: bool,
    progress=None,
) -> EMState:
    """Run Algorithm 2 of [1]_ on a batch of runs until each converges, degenerates or stops.

    Calls the jitted :func:`em_step` until no run is active; the loop ends with a data pass
    at the final parameters, so ``bound``, ``log_likelihood`` and ``resultant`` always
    describe the returned parameters. This Python loop is the only one (it reads one bool
    per iteration from the device, and the runs' iteration counts when it compacts); every
    step it calls is compiled once per batch size.

    Compaction: a run stops costing work once it has stopped. The restarts share one data
    pass (their products are batched), so without compaction every iteration costs the
    products of all of them until the slowest stops. When one run's data pass is large
    (at least :data:`COMPACT_MIN_WORK` multiply-adds, see :func:`_pass_work`), the runs that
    have stopped are taken out of the batch as soon as the running ones fit in a batch of
    the next power of two below the current size (padded with stopped runs, which stay as
    they are); ``em_step`` compiles once for each such size. A stopped run's state is final
    (a run that did no M-step in a step never does one again), so the result is that of
    the full batch up to rounding: a smaller batch may round differently in the last bits.
    Smaller data keeps the whole batch (compiling would cost more than the saved passes).

    Returns
    -------
    EMState
        Device arrays, batch axis first.
    """
    args = (np.float64(beta), np.float64(kappa_max), np.float64(tol), np.int64(max_iter))
    state = fresh_state(*state[:3], state.status)._replace(
        bound=jnp.asarray(state.bound, jnp.float64),
        n_iter=jnp.asarray(state.n_iter, jnp.int64),
        converged=jnp.asarray(state.converged, bool),
    )
    batch = state.mu.shape[0]
    compact = batch > 1 and _pass_work(data, state.mu.shape[1]) >= COMPACT_MIN_WORK
    rows = np.arange(batch)  # the run (index in the caller's batch) of each row of `state`
    stopped: dict[int, EMState] = {}  # final state of the runs taken out of the batch
    n_iter = np.asarray(state.n_iter) if compact else None
    while True:
        state, any_active = em_step(state, data, *args, shared_kappa=bool(shared_kappa))
        if not bool(any_active):
            break
        if progress is not None:
            progress.update(1)
        if compact:
            new_n_iter = np.asarray(state.n_iter)
            running = new_n_iter > n_iter  # did an M-step: needs another data pass
            n_iter = new_n_iter
            size = 1 << max(int(running.sum()) - 1, 0).bit_length()  # next power of two
            if size < len(rows):
                for i in np.flatnonzero(~running):
                    stopped.setdefault(int(rows[i]), _take(state, int(i)))
                # the running rows first, then stopped ones as padding (in batch order)
                keep = np.concatenate([np.flatnonzero(running), np.flatnonzero(~running)])
                keep = np.sort(keep[:size])
                state = EMState(*(a[keep] for a in state))
                rows, n_iter = rows[keep], n_iter[keep]
    if not stopped:
        return state
    for i, run in enumerate(rows):
        stopped.setdefault(int(run), _take(state, i))
    return EMState(*(jnp.concatenate(parts) for parts in zip(*(stopped[r] for r in range(batch)))))


def _pass_work(data, n_components: int) -> int:
    """Multiply-adds of one run's data pass: the two products, 2 K (nnz or n d)."""
    inner = data.data if isinstance(data, _parallel.RowBlocks) else data
    if isinstance(inner, _mixture.SparseData):
        entries = inner.nnz
    else:
        n, d = inner.shape
        entries = n * d
    return 2 * int(n_components) * int(entries)


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
    jax.jit, static_argnames=("shared_kappa",), compiler_options=_mixture.JIT_OPTIONS
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
    data : bayesvmf._parallel.RowBlocks
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
    return _parallel.map_blocks(
        functools.partial(_online_body, shared_kappa=shared_kappa), args, data
    )


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


def _take(state: EMState, i: int) -> EMState:
    """Run ``i`` of a batch, keeping a batch axis of length 1."""
    return EMState(*(a[i : i + 1] for a in state))


# ---- the estimator --------------------------------------------------------------------------

#: Constraints of the arguments of :meth:`SparseVMFMixture.path`.
_PATH_CONSTRAINTS = {
    "max_steps": [Interval(numbers.Integral, 1, None, closed="left"), None],
    "min_rel_increase": [Interval(numbers.Real, 0.0, None, closed="left")],
    "eps": [Interval(numbers.Real, 0.0, None, closed="left")],
}


class SparseVMFMixture(_mixture.BaseVMFMixture):
    """l1-penalised (sparse) mixture of von Mises-Fisher distributions (Rossi & Barbaro).

    Maximises eq. (11) of [1]_ by the EM of Algorithm 2; ``beta = 0`` is the classical vMF
    mixture of Banerjee et al. [2]_. Input may be dense or scipy.sparse; sparse input stays
    sparse on the device (memory O(nnz + K d)).

    Parameters
    ----------
    n_components : int, default 1
        K.
    beta : float, default 0.0
        The l1 penalty beta >= 0 of eq. (11).
    shared_kappa : bool, default False
        One concentration for all components (sec. 3.2.3, eqs. (27)-(29)); recommended when
        n is not much larger than d (the paper's CSTR experiments).
    n_init : int, default 10
        Number of restarts, run side by side (vectorised), each with its own key; among the
        non-degenerate ones, the first whose penalised log-likelihood per row is within
        ``tol`` of the best is kept (:func:`bayesvmf._mixture.best_run`: near-ties are one
        optimum, often with permuted labels, and the choice must not hang on rounding).
    max_iter : int, default 1000
        Maximal number of EM iterations per run.
    tol : float, default 1e-6
        Convergence threshold on the change of the penalised log-likelihood per row.
    init : str or array of int of shape (n_samples,), default "random"
        "random" is Algorithm 4 of [1]_ (K distinct rows, crisp assignment);
        "spherical-kmeans++" seeds by k-means++ on the cosine dissimilarity;
        "greedy-spherical-kmeans++" keeps the best of 2 + floor(ln K) candidates per seed
        (the seeding of scikit-learn's KMeans; benchmarks/results/scale.md compares them).
        An array of labels in ``[0, K)`` (every component used) starts EM from that
        partition (its M-step, see :func:`init_state_from_labels`), so that several
        estimators can start from the same assignments; ``n_init`` is then ignored (one
        run).
    kappa_max : float, default 1e6
        Concentration cap (appendix B of [1]_); reaching it marks the run as collapsed.
    normalize : bool, default True
        Rescale rows to unit norm; with False, non-unit rows raise a ValueError.
    dtype : {"float64", "mixed"}, default "float64"
        "mixed" runs the two data products in float32 (DESIGN.md section 5), everything else
        in float64.
    random_state : None, int, numpy RandomState or Generator, or jax key, default None
        Seed of the restarts' initialisations: an int (reproducible), a NumPy
        ``RandomState`` / ``Generator`` (a seed is drawn from it at each fit), a JAX key,
        or None (a fresh seed). ``sample`` uses it too when called without one.
    verbose : int, default 0
        scikit-learn's verbosity level: 0 is silent, 1 or more shows a progress bar of the
        EM iterations (and of :meth:`path`).
    devices : None, int or list of jax devices, default None
        Data-parallel fits (DESIGN.md section 6): the rows of X are split into one equal
        block per device (``jax.sharding``; padding rows carry weight 0), every device
        computes the E-step statistics of its rows (counts, resultants, log-likelihood),
        which are summed with ``psum``; the M-step runs replicated. The result equals the
        one-device fit to floating-point accuracy. An int n means the first n of
        ``jax.devices()``; None is the default device. ``fit``, ``fit_predict`` and
        ``partial_fit`` shard; ``predict``, ``score`` etc. run on the default device.
    learning_decay : float in (0.5, 1], default 0.7
        The exponent a of the step sizes rho_t = (t + tau)^(-a) of :meth:`partial_fit`.
    learning_offset : float >= 0, default 1.0
        The offset tau of those step sizes.

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,)
    mean_directions_ : ndarray of shape (n_components, n_features)
    concentrations_ : ndarray of shape (n_components,)
        Equal entries when ``shared_kappa``.
    n_iter_ : int
    converged_ : bool
    lower_bound_ : float
        Penalised log-likelihood per row (eq. (11) / n) at the fitted parameters.
    log_likelihood_ : float
        Total unpenalised log-likelihood (eq. (9)) on the training data.
    sparsity_ : float
        Fraction of zero coordinates of the mean directions.
    status_ : int
        :class:`bayesvmf._mixture.Status` of the kept run (0 = healthy).
    run_statuses_, run_lower_bounds_, run_n_iter_ : ndarray of shape (n_init,)
        Status, penalised bound and number of EM iterations of every restart.
    labels_ : ndarray of shape (n_samples,)
        After :meth:`fit`: the component of each training row (``fit_predict``'s result).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The column names of a DataFrame X given to ``fit`` (only then).
    n_samples_seen_, n_steps_ : int
        After :meth:`partial_fit`: rows received and online steps done after the first call.
        There, ``n_iter_`` counts the EM iterations of the first call plus one per call,
        ``converged_`` is that of the first call's batch fit, and ``log_likelihood_`` and
        ``lower_bound_`` are those of the last chunk at the parameters it was given.

    Notes
    -----
    Memory of a batch fit of sparse input on CPU (measured in benchmarks/results/scale.md).
    Besides the caller's X, a fit holds: nothing more of the data when X is a
    unit-normalised float64 CSR matrix (:func:`bayesvmf.data.check_directional` with
    ``copy=False`` shares its arrays read-only, and the "scipy" kernel keeps them on the
    host: the device holds one handle per row block), else a normalised copy; with
    ``dtype="mixed"`` a float32 copy of the values; per restart O(K d) for the directions,
    resultants and the M-step's new directions, and O(n K) for the log-likelihoods and
    responsibilities. Transient: each product hands its dense operand and result across the
    host callback (JAX copies callback operands). glibc keeps such freed blocks per thread
    for reuse, so the resident set grows above the live memory over the first iterations;
    ``MALLOC_MMAP_THRESHOLD_=262144`` in the environment returns them at once, at some
    cost in speed.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.models import SparseVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal([5, 0, 0], 1, (30, 3)), rng.normal([0, 5, 0], 1, (30, 3))])
    >>> model = SparseVMFMixture(2, random_state=0).fit(X)
    >>> sorted(np.bincount(model.predict(X)).tolist())
    [30, 30]
    """

    _parameter_constraints = {
        **_mixture.BaseVMFMixture._parameter_constraints,
        "beta": [Interval(numbers.Real, 0.0, None, closed="left")],
        "shared_kappa": ["boolean"],
        # a seeding method, or labels (checked against the data in fit)
        "init": [StrOptions(set(_mixture.INIT_METHODS)), "array-like"],
        "kappa_max": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "dtype": [StrOptions({"float64", "mixed"})],
        # the former check/describe protocol, until bayesvmf._parallel migrates it
        "devices": _parallel.DevicesOption(),
        "learning_decay": [Interval(numbers.Real, 0.5, 1.0, closed="right")],
        "learning_offset": [Interval(numbers.Real, 0.0, None, closed="left")],
    }

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "log_likelihood_",
        "sparsity_",
        "status_",
        "run_statuses_",
        "run_lower_bounds_",
        "run_n_iter_",
    )

    def __init__(
        self,
        n_components: int = 1,
        *,
        beta: float = 0.0,
        shared_kappa: bool = False,
        n_init: int = 10,
        max_iter: int = 1000,
        tol: float = 1e-6,
        init: str = "random",
        kappa_max: float = 1e6,
        normalize: bool = True,
        dtype: str = "float64",
        random_state=None,
        verbose: int = 0,
        devices=None,
        learning_decay: float = 0.7,
        learning_offset: float = 1.0,
    ):
        self.n_components = n_components
        self.beta = beta
        self.shared_kappa = shared_kappa
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.kappa_max = kappa_max
        self.normalize = normalize
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.devices = devices
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset

    # ---- fitting ------------------------------------------------------------------------

    def _run(self, state, data, beta, progress=None) -> EMState:
        return run_em(
            state,
            data,
            beta=float(beta),
            kappa_max=float(self.kappa_max),
            tol=float(self.tol),
            max_iter=int(self.max_iter),
            shared_kappa=bool(self.shared_kappa),
            progress=progress,
        )

    def _fit(self, data, rng_key, beta: float | None = None) -> None:
        if isinstance(self.init, str):
            state = init_state(
                rng_key,
                data,
                n_components=self.n_components,
                n_init=self.n_init,
                init=self.init,
                shared_kappa=self.shared_kappa,
                kappa_max=float(self.kappa_max),
            )
        else:
            labels = _check_init_labels(self.init, data.shape[0], self.n_components)
            state = init_state_from_labels(
                data,
                labels,
                n_components=self.n_components,
                shared_kappa=self.shared_kappa,
                kappa_max=float(self.kappa_max),
            )
        progress = self._progress(self.max_iter, f"EM ({state.mu.shape[0]} restarts)")
        try:
            state = self._run(state, data, self.beta if beta is None else beta, progress)
        finally:
            if progress is not None:
                progress.close()
        self._set_from_batch(state)

    def _blocks(self, Xc, bucket: bool = False) -> _parallel.RowBlocks:
        """Return checked data as row blocks: one per device of ``devices``, padded."""
        if not isinstance(self.init, str):
            raise ValueError(
                "init as an array of labels cannot be combined with devices= or partial_fit; "
                "use init='random', 'spherical-kmeans++' or 'greedy-spherical-kmeans++' there."
            )
        devices = _parallel.resolve_devices(self.devices)
        return _parallel.row_blocks(Xc, self._product_dtype(), devices=devices, bucket=bucket)

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit the model and return the cluster of each row (eq. (35) of [1]_).

        With ``devices`` the rows are sharded over the devices for the whole fit and the
        final E-step (see the class docstring). Ends with one E-step at the final
        parameters, so the result equals ``fit(X).predict(X)``. Forgets any earlier
        :meth:`partial_fit` state.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        self._online = None
        self._validate_params()
        Xc = self._check_input(X, reset=True)
        with jax.enable_x64(True):
            if self.devices is None:
                data = _mixture.to_device(Xc, self._product_dtype())
            else:
                data = self._blocks(Xc)
            # `data` serves the whole fit: drop this name now, so that a copy made only for
            # the device (segment_sum kernel, devices=) goes before EM (the "scipy" kernel's
            # one host block may be Xc itself, kept by `data`)
            del Xc
            self._fit(data, self._make_key())
            if self.devices is None:
                return np.asarray(jnp.argmax(self._estimate_weighted_log_prob(data), axis=1))
            run = self._best_state
            wlp = _parallel.weighted_log_prob(data, run.log_weights[0], run.mu[0], run.kappa[0])
        return np.argmax(wlp, axis=1)

    def partial_fit(self, X, y=None, *, n_samples: int | None = None) -> SparseVMFMixture:
        """Update the model with one chunk of rows: stepwise (online) EM.

        Online EM of Cappé & Moulines [3]_, as the stepwise EM of Liang & Klein [4]_: the
        chunk's E-step statistics, averaged per row, move running statistics by a step
        rho_t = (t + ``learning_offset``)^(-``learning_decay``) for the t-th update
        (a in (0.5, 1] makes sum rho_t infinite and sum rho_t^2 finite, the conditions of
        the convergence proof), and the parameters are the batch M-step (eqs. (20)-(22) of
        [1]_, the same function, any beta >= 0) of the running statistics; see
        :func:`online_em_step`. The first call initialises from the first chunk: a batch fit
        of it (``n_init`` restarts, ``max_iter``, ``tol``; it needs at least
        ``n_components`` rows; its penalty is beta m / n for the m rows of the chunk standing
        for n rows), whose statistics start the running averages (rho = 1).

        Chunks are padded to a few bucket sizes (rows and nnz, at most 41% padding, weight
        0), so a stream of similar chunks compiles a few programs and then none. With
        ``devices`` each chunk is sharded over the devices. :func:`bayesvmf.streaming.fit_streaming`
        feeds the chunks of a corpus stored as ``.npz`` files.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_chunk, n_features)
        y : ignored
        n_samples : int or None, default None
            Number of rows the l1 penalty is weighed against (eq. (11) penalises the sum
            over n rows): the size of the corpus the chunks come from, as
            :func:`bayesvmf.streaming.fit_streaming` passes it. None uses the rows seen so
            far, ``n_samples_seen_`` (an endless stream). Irrelevant when beta = 0.

        Returns
        -------
        self

        References
        ----------
        .. [3] O. Cappé and E. Moulines, "On-line expectation-maximization algorithm for
           latent data models", J. R. Stat. Soc. B 71 (2009) 593-613.
        .. [4] P. Liang and D. Klein, "Online EM for unsupervised models", NAACL-HLT 2009.
        """
        online = getattr(self, "_online", None)
        first = online is None
        if first:
            self._validate_params()
            # the clusters of an earlier fit's rows do not describe the streamed model
            self.__dict__.pop("labels_", None)
        n_samples = check_count(n_samples, "n_samples", allow_none=True)
        Xc = self._check_input(X, reset=first)
        n_seen = (0 if first else self.n_samples_seen_) + Xc.shape[0]
        weight_rows = n_seen if n_samples is None else n_samples
        with jax.enable_x64(True):
            data = self._blocks(Xc, bucket=True)
            if first:
                # the chunk's rows stand for weight_rows rows: scale the penalty accordingly
                chunk_beta = self.beta * Xc.shape[0] / weight_rows
                self._fit(data, self._make_key(), beta=chunk_beta)
                run = self._best_state
                k, d = run.mu.shape[1:]
                online = _OnlineState(
                    OnlineStats(jnp.zeros(k, jnp.float64), jnp.zeros((k, d), jnp.float64)),
                    jnp.asarray(run.log_weights[0]),
                    jnp.asarray(run.mu[0]),
                    jnp.asarray(run.kappa[0]),
                )
                self.n_samples_seen_, self.n_steps_, step_size = 0, 0, 1.0
            else:
                self.n_steps_ += 1
                step_size = (self.n_steps_ + self.learning_offset) ** (-self.learning_decay)
            self.n_samples_seen_ = n_seen
            stats, log_weights, mu, kappa, status, log_likelihood = online_em_step(
                *online,
                data,
                np.float64(step_size),
                np.float64(weight_rows),
                np.float64(self.beta),
                np.float64(self.kappa_max),
                shared_kappa=bool(self.shared_kappa),
            )
            self._online = _OnlineState(stats, log_weights, mu, kappa)
            mu_host = np.asarray(mu)
        weights = np.exp(np.asarray(log_weights))
        self.weights_ = weights / weights.sum()
        self.mean_directions_ = mu_host
        self.concentrations_ = np.asarray(kappa)
        self.status_ = int(status)
        self.sparsity_ = float(np.mean(mu_host == 0))
        # of this chunk, at the parameters before the update
        self.log_likelihood_ = float(log_likelihood)
        self.lower_bound_ = (
            self.log_likelihood_ - self.beta * float(np.abs(np.asarray(online.mu)).sum())
        ) / Xc.shape[0]
        self.n_iter_ += 1
        if self.status_ != Status.OK:
            warnings.warn(
                f"{type(self).__name__}.partial_fit: the M-step of this chunk degenerated ("
                f"{_mixture.describe_status(self.status_)}); the previous parameters are kept. "
                "Try larger chunks, a smaller beta or shared_kappa=True.",
                _mixture.DegenerateRunWarning,
                stacklevel=2,
            )
        return self

    def _set_from_batch(self, state: EMState) -> int:
        """Keep the best healthy run (largest penalised bound); warn about the others."""
        state = EMState(*(np.asarray(a) for a in state))
        statuses, bound = state.status, state.bound
        healthy = statuses == Status.OK
        candidates = np.where(healthy, bound, -np.inf) if healthy.any() else bound
        best = _mixture.best_run(candidates, float(self.tol))
        _mixture.warn_degenerate(statuses, type(self).__name__, stacklevel=5)
        run = _take(state, best)
        self._best_state = run
        weights = np.exp(np.asarray(run.log_weights[0]))
        self.weights_ = weights / weights.sum()
        self.mean_directions_ = np.asarray(run.mu[0])
        self.concentrations_ = np.asarray(run.kappa[0])
        self.n_iter_ = int(run.n_iter[0])
        self.converged_ = bool(run.converged[0])
        self.status_ = int(run.status[0])
        self.lower_bound_ = float(bound[best])
        self.log_likelihood_ = float(state.log_likelihood[best])
        self.sparsity_ = float(np.mean(self.mean_directions_ == 0))
        self.run_statuses_ = np.asarray(statuses)
        self.run_lower_bounds_ = np.asarray(bound)
        self.run_n_iter_ = np.asarray(state.n_iter)
        if self.status_ == Status.OK and not self.converged_ and self.max_iter > 0:
            warnings.warn(
                f"{type(self).__name__}: the best of {len(statuses)} runs did not converge "
                f"within max_iter={self.max_iter} iterations (tol={self.tol}); increase max_iter "
                "or tol.",
                _mixture.ConvergenceWarning,
                stacklevel=5,
            )
        return best

    def _n_parameters(self) -> int:
        """Count the free parameters, eqs. (33)-(34) of [1]_ (shared-kappa variant too)."""
        self._check_is_fitted()
        return criteria.n_parameters(self.mean_directions_, self.shared_kappa)

    def to_arviz(self):
        """Return the fitted MAP point as an ``arviz.InferenceData`` (one chain, one draw).

        The ``posterior`` group holds ``mu`` (dims ``component``, ``feature``), ``kappa`` and
        ``weights`` (dim ``component``); ``sample_stats`` holds ``lp`` (the penalised
        log-likelihood of eq. (11) of [1]_) and ``n_occupied`` (components with weight > 0).

        Returns
        -------
        arviz.InferenceData
        """
        import arviz as az

        self._check_is_fitted()
        k, d = self.mean_directions_.shape
        return az.from_dict(
            posterior={
                "mu": self.mean_directions_[None, None],
                "kappa": self.concentrations_[None, None],
                "weights": self.weights_[None, None],
            },
            sample_stats={
                "lp": np.array([[self.lower_bound_]]),
                "n_occupied": np.array([[int(np.sum(self.weights_ > 0))]]),
            },
            coords={"component": np.arange(k), "feature": np.arange(d)},
            dims={"mu": ["component", "feature"], "kappa": ["component"], "weights": ["component"]},
            attrs={"beta": float(self.beta), "shared_kappa": bool(self.shared_kappa)},
        )

    # ---- path following -----------------------------------------------------------------

    def path(
        self,
        X,
        max_steps: int | None = None,
        min_rel_increase: float = 1e-2,
        eps: float = 1e-10,
    ) -> SparsePath:
        r"""Follow the beta path of Algorithm 3 of [1]_, from the dense model at beta = 0.

        The dense fit uses this estimator's settings (``n_init`` restarts) with beta = 0. Each
        next value is the smallest beta that zeroes one more coordinate in the first EM
        iteration (eq. (31)),

        .. math::

            \beta_p = \min_{k, j:\ \mu_{kj} \neq 0} \kappa_k |r_{kj}|,

        raised to at least (1 + ``min_rel_increase``) beta_{p-1}; EM restarts from the
        previous solution (warm start), then coordinates with |mu_kj| < ``eps`` are set to
        zero (and the row renormalised). Only means with at least two nonzero coordinates
        provide candidates, so the path can run until one nonzero per mean is left (sec. 3.3).
        The path stops there, after ``max_steps`` points, or at the first degenerate EM run
        (appendix B), which is not recorded. An interrupted path (Ctrl-C) returns the points
        it finished, with a warning.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        max_steps : int or None, default None
            Maximal number of points, the dense one included (P of Algorithm 3).
        min_rel_increase : float, default 1e-2
            Minimal relative increase of beta between steps (the paper uses 1e-3 and 1e-2).
        eps : float, default 1e-10
            Coordinates of mu below this magnitude are set to zero (epsilon of Algorithm 3).

        Returns
        -------
        SparsePath
        """
        validate_parameter_constraints(
            _PATH_CONSTRAINTS,
            {"max_steps": max_steps, "min_rel_increase": min_rel_increase, "eps": eps},
            caller_name=f"{type(self).__name__}.path",
        )
        dense = type(self)(**{**self.get_params(), "beta": 0.0})
        dense._validate_params()
        Xc = dense._check_input(X, reset=True)
        records: list[dict[str, Any]] = []
        stop_reason = "max_steps"
        with jax.enable_x64(True):
            data = _mixture.to_device(Xc, dense._product_dtype())
            del Xc  # the device copy serves the whole path
            n, d = data.shape
            dense._fit(data, self._make_key())
            state = dense._best_state
            beta = 0.0
            records.append(self._record(state, beta))
            progress = self._progress(max_steps, "beta path")
            try:
                while max_steps is None or len(records) < max_steps:
                    # eq. (31): kappa_k |r_kj| at the converged point of the previous beta
                    scores = np.asarray(state.kappa[0])[:, None] * np.abs(
                        np.asarray(state.resultant[0])
                    )
                    nonzero = np.asarray(state.mu[0]) != 0
                    eligible = nonzero & (nonzero.sum(axis=1, keepdims=True) > 1)
                    if not eligible.any():
                        stop_reason = "max_sparsity"
                        break
                    new_beta = max(float(np.min(scores[eligible])), beta * (1 + min_rel_increase))
                    if not new_beta > beta:
                        new_beta = float(np.nextafter(beta, np.inf))
                    warm = fresh_state(state.log_weights, state.mu, state.kappa)
                    new_state = self._run(warm, data, new_beta)
                    if int(new_state.status[0]) != Status.OK:
                        stop_reason = (
                            f"degenerate EM at beta={new_beta:.6g}: "
                            + _mixture.describe_status(int(new_state.status[0]))
                        )
                        break
                    mu_new = np.array(new_state.mu)
                    small = np.abs(mu_new) < eps
                    if small.any() and (mu_new[small] != 0).any():
                        mu_new[small] = 0.0
                        norms = np.linalg.norm(mu_new, axis=-1, keepdims=True)
                        mu_new = mu_new / np.maximum(norms, np.finfo(np.float64).tiny)
                        new_state = new_state._replace(mu=mu_new)
                    beta, state = new_beta, new_state
                    records.append(self._record(state, beta))
                    if progress is not None:
                        progress.update(1)
            except KeyboardInterrupt:
                stop_reason = "interrupted"
                warnings.warn(
                    f"beta path interrupted; returning the {len(records)} finished steps.",
                    UserWarning,
                    stacklevel=2,
                )
            finally:
                if progress is not None:
                    progress.close()
        return SparsePath._from_records(
            records,
            n_samples=n,
            n_features=d,
            estimator_params=self.get_params(),
            stop_reason=stop_reason,
        )

    def _record(self, state: EMState, beta: float) -> dict[str, Any]:
        mu = np.asarray(state.mu[0])
        weights = np.exp(np.asarray(state.log_weights[0]))
        total = float(state.log_likelihood[0])
        bound = float(state.bound[0])
        return {
            "beta": float(beta),
            "log_likelihood": total,
            "penalized_log_likelihood": total - beta * float(np.abs(mu).sum()),
            "lower_bound": bound,
            "n_iter": int(state.n_iter[0]),
            "converged": bool(state.converged[0]),
            "weights": weights / weights.sum(),
            "mean_directions": mu,
            "concentrations": np.asarray(state.kappa[0]),
            "sparsity": float(np.mean(mu == 0)),
            "n_parameters": criteria.n_parameters(mu, self.shared_kappa),
        }


@dataclasses.dataclass(frozen=True, eq=False)
class SparsePath:
    """A beta path of the sparse vMF mixture (Algorithm 3 of [1]_), one entry per point.

    Attributes
    ----------
    betas : ndarray of shape (P,)
        Starting at 0, strictly increasing.
    sparsity : ndarray of shape (P,)
        Fraction of zero coordinates of the mean directions.
    log_likelihood : ndarray of shape (P,)
        Total unpenalised log-likelihood, eq. (9).
    penalized_log_likelihood : ndarray of shape (P,)
        Eq. (11).
    n_iter : ndarray of shape (P,)
        EM iterations at each point (warm-started after the first).
    converged : ndarray of bool, shape (P,)
    n_parameters : ndarray of shape (P,)
        Eqs. (33)-(34).
    weights : ndarray of shape (P, K)
    mean_directions : ndarray of shape (P, K, d)
    concentrations : ndarray of shape (P, K)
    n_samples, n_features : int
    estimator_params : dict
        Constructor arguments of the estimator that made the path.
    stop_reason : str
        "max_steps", "max_sparsity", "interrupted" or the degenerate outcome that ended it.
    """

    betas: np.ndarray
    sparsity: np.ndarray
    log_likelihood: np.ndarray
    penalized_log_likelihood: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray
    n_parameters: np.ndarray
    weights: np.ndarray
    mean_directions: np.ndarray
    concentrations: np.ndarray
    n_samples: int
    n_features: int
    estimator_params: dict
    stop_reason: str

    @classmethod
    def _from_records(cls, records, **kwargs) -> SparsePath:
        def col(name, dtype=None):
            return np.asarray([r[name] for r in records], dtype=dtype)

        return cls(
            betas=col("beta", np.float64),
            sparsity=col("sparsity", np.float64),
            log_likelihood=col("log_likelihood", np.float64),
            penalized_log_likelihood=col("penalized_log_likelihood", np.float64),
            n_iter=col("n_iter", np.int64),
            converged=col("converged", bool),
            n_parameters=col("n_parameters", np.int64),
            weights=col("weights", np.float64),
            mean_directions=col("mean_directions", np.float64),
            concentrations=col("concentrations", np.float64),
            **kwargs,
        )

    def __len__(self) -> int:
        return len(self.betas)

    @property
    def n_components(self) -> int:
        """K."""
        return int(self.weights.shape[1])

    def criterion(self, name: str, gamma: float = 0.5) -> np.ndarray:
        """Return an information criterion at each point (eq. (32), Table 1 of [1]_).

        Parameters
        ----------
        name : {"aic", "bic", "ric", "ricc", "ebic"}
        gamma : float, default 0.5
            EBIC parameter.

        Returns
        -------
        ndarray of shape (P,)
        """
        return np.atleast_1d(
            criteria.information_criterion(
                name,
                self.log_likelihood,
                self.n_parameters,
                self.n_samples,
                self.n_features,
                gamma,
            )
        )

    def to_arviz(self):
        """Return the path as an ``arviz.InferenceData``, one entry per beta (dim ``penalty``).

        ``posterior`` holds ``mu`` (dims ``penalty``, ``component``, ``feature``), ``kappa``
        and ``weights``; ``sample_stats`` holds ``beta``, ``sparsity``, ``total_log_likelihood``
        (eq. (9) of [1]_) and ``lp`` (eq. (11)); one chain and one draw (a MAP path, not
        posterior draws).

        Returns
        -------
        arviz.InferenceData
        """
        import arviz as az

        p, k, d = self.mean_directions.shape
        stats = {
            "beta": self.betas,
            "sparsity": self.sparsity,
            "total_log_likelihood": self.log_likelihood,
            "lp": self.penalized_log_likelihood,
        }
        return az.from_dict(
            posterior={
                "mu": self.mean_directions[None, None],
                "kappa": self.concentrations[None, None],
                "weights": self.weights[None, None],
            },
            sample_stats={name: value[None, None] for name, value in stats.items()},
            coords={"penalty": np.arange(p), "component": np.arange(k), "feature": np.arange(d)},
            dims={
                "mu": ["penalty", "component", "feature"],
                "kappa": ["penalty", "component"],
                "weights": ["penalty", "component"],
                **{name: ["penalty"] for name in stats},
            },
        )

    def best_index(self, name: str = "bic") -> int:
        """Index of the point minimising criterion ``name``."""
        return int(np.argmin(self.criterion(name)))

    def best(self, name: str = "bic") -> SparseVMFMixture:
        """Return a fitted :class:`SparseVMFMixture` at the point selected by ``name``."""
        i = self.best_index(name)
        return self.model_at(i)

    def model_at(self, i: int) -> SparseVMFMixture:
        """Return a fitted :class:`SparseVMFMixture` holding the parameters of point ``i``."""
        model = SparseVMFMixture(**{**self.estimator_params, "beta": float(self.betas[i])})
        model.weights_ = self.weights[i].copy()
        model.mean_directions_ = self.mean_directions[i].copy()
        model.concentrations_ = self.concentrations[i].copy()
        model.n_iter_ = int(self.n_iter[i])
        model.converged_ = bool(self.converged[i])
        model.log_likelihood_ = float(self.log_likelihood[i])
        model.lower_bound_ = float(self.penalized_log_likelihood[i] / self.n_samples)
        model.sparsity_ = float(self.sparsity[i])
        model.status_ = Status.OK
        model.run_statuses_ = np.zeros(1, np.int64)
        model.run_lower_bounds_ = np.array([model.lower_bound_])
        model.run_n_iter_ = np.array([model.n_iter_])
        model.n_features_in_ = int(self.n_features)
        return model


@dataclasses.dataclass(frozen=True, eq=False)
class SparseSelection:
    """Outcome of :func:`select_sparse_model` (the methodology of sec. 3.6 of [1]_).

    Attributes
    ----------
    table : dict of str -> ndarray
        One row per path point and K: ``n_components``, ``step``, ``beta``, ``sparsity``,
        ``log_likelihood``, ``n_parameters`` and one column per criterion.
    paths : dict of int -> SparsePath
    n_components : int
        K chosen on the dense models by ``k_criterion``.
    beta : float
        beta chosen on that K's path by ``beta_criterion``.
    model : SparseVMFMixture
        The fitted model at (n_components, beta).
    k_criterion, beta_criterion : str
    """

    table: dict
    paths: dict
    n_components: int
    beta: float
    model: SparseVMFMixture
    k_criterion: str
    beta_criterion: str


def select_sparse_model(
    X,
    n_components,
    *,
    k_criterion: str = "ebic",
    beta_criterion: str = "bic",
    max_steps: int | None = None,
    min_rel_increase: float = 1e-2,
    **estimator_params,
) -> SparseSelection:
    """Choose K and beta by the methodology of sec. 3.6 of [1]_.

    For each candidate K run the beta path (Algorithm 3); choose K on the dense models
    (beta = 0) with ``k_criterion`` (EBIC or RIC on text, sec. 5.3.4), then beta on that K's
    path with ``beta_criterion`` (BIC or AIC).

    Parameters
    ----------
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
    n_components : iterable of int
        Candidate values of K.
    k_criterion, beta_criterion : {"aic", "bic", "ric", "ricc", "ebic"}
    max_steps, min_rel_increase
        Passed to :meth:`SparseVMFMixture.path`.
    **estimator_params
        Passed to :class:`SparseVMFMixture` (e.g. ``shared_kappa=True``, ``n_init``).

    Returns
    -------
    SparseSelection
    """
    for name in (k_criterion, beta_criterion):
        if str(name).lower() not in criteria.CRITERIA:
            raise ValueError(
                f"unknown criterion {name!r}; expected one of {', '.join(criteria.CRITERIA)}."
            )
    candidates = [int(k) for k in n_components]
    if not candidates:
        raise ValueError("n_components must hold at least one candidate K.")
    paths = {}
    rows: dict[str, list] = {
        key: []
        for key in (
            "n_components",
            "step",
            "beta",
            "sparsity",
            "log_likelihood",
            "n_parameters",
            *criteria.CRITERIA,
        )
    }
    for k in candidates:
        path = SparseVMFMixture(k, **estimator_params).path(
            X, max_steps=max_steps, min_rel_increase=min_rel_increase
        )
        paths[k] = path
        rows["n_components"] += [k] * len(path)
        rows["step"] += list(range(len(path)))
        rows["beta"] += list(path.betas)
        rows["sparsity"] += list(path.sparsity)
        rows["log_likelihood"] += list(path.log_likelihood)
        rows["n_parameters"] += list(path.n_parameters)
        for name in criteria.CRITERIA:
            rows[name] += list(path.criterion(name))
    table = {key: np.asarray(value) for key, value in rows.items()}
    dense_scores = [paths[k].criterion(k_criterion)[0] for k in candidates]
    best_k = candidates[int(np.argmin(dense_scores))]
    path = paths[best_k]
    i = path.best_index(beta_criterion)
    return SparseSelection(
        table=table,
        paths=paths,
        n_components=best_k,
        beta=float(path.betas[i]),
        model=path.model_at(i),
        k_criterion=k_criterion,
        beta_criterion=beta_criterion,
    )
