"""Batch EM of the sparse vMF mixture (Algorithm 2 of [1]_), for a batch of restarts.

The state of B runs side by side (:class:`EMState`), the M-step (eqs. (20)-(22), the
mu/kappa fixed point), one EM iteration of every run (:func:`em_step`: a data pass compiled
per data shape, :func:`data_pass`, and a step compiled per restarts, K and d,
:func:`close_step`), the
initialisations (Algorithm 4 and spherical k-means++, or given labels) and the loop that
drives the iterations (:func:`run_em`). The estimator is
:class:`bayesvmf.models.sparse.SparseVMFMixture`; symbols as in the package docstring.

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
import numpy as np

from bayesvmf import _compile_cache, _data, _mixture, _parallel, _seeding
from bayesvmf._mixture import Status
from bayesvmf._program_cache import persistent_jit

#: Cap and tolerance of the mu/kappa fixed point inside one M-step (Algorithm 2, inner loop).
FIXED_POINT_MAX_ITER = 100
FIXED_POINT_RTOL = 1e-12

#: :func:`run_em` takes stopped restarts out of the batch (compiling its two programs for the
#: smaller batch, about a second) only when one run's data pass costs at least this many
#: multiply-adds (about 15 ms on one core): the 20-Newsgroups-size corpus at K = 20 costs
#: 6.8e7, the small test problems far less.
COMPACT_MIN_WORK = 2**25


class EMState(NamedTuple):
    """State of a batch of B EM runs (Algorithm 2 of [1]_), one per restart.

    A pytree of device arrays with the batch axis first; :func:`close_step` maps it to the next
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


#: The type of each field of :class:`EMState` (as :func:`fresh_state` makes them).
_STATE_DTYPES = EMState(*(jnp.float64,) * 6, jnp.int64, jnp.bool_, jnp.int64)


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
    _compile_cache.jit, static_argnames=("shared_kappa",), compiler_options=_mixture.JIT_OPTIONS
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


def em_step(state: EMState, data, beta, kappa_max, tol, rtol, max_iter, *, shared_kappa: bool):
    """One EM iteration of every run of a batch (Algorithm 2 of [1]_), as :func:`run_em` does it.

    Per run: a data pass at the current parameters (the log-space E-step of eqs.
    (15)-(17) and the resultants of eq. (23): :func:`data_pass`), then :func:`close_step`:
    the penalised bound of eq. (11), the convergence test (:func:`settled`) and the M-step
    (:func:`m_step`) if the run is still active. A degenerate M-step keeps the previous
    (finite) parameters and sets the run's status. Runs that are converged, degenerate or at
    ``max_iter`` only refresh their data-pass quantities, so after a step in which no run was
    active ``bound``, ``log_likelihood`` and ``resultant`` describe the returned parameters.

    Three compiled calls (not one jitted function: no ``lower`` or ``jitted``):
    ``close_step`` in its ``first`` mode for log C_d(kappa) of the state, the data pass,
    then ``close_step``. :func:`run_em` makes the first only once per fit, since each
    ``close_step`` returns log C_d of its new kappa. The state's arrays are cast to the
    types :func:`fresh_state` makes (float64, int64 counts and status, bool flags), as the
    two branches of ``close_step``'s conditional must agree in type.

    Parameters
    ----------
    state : EMState
        Batch of B runs.
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
        Row blocks on a mesh of devices run the data pass on every device's rows and add
        the statistics over devices (``psum``); the M-step runs replicated.
    beta, kappa_max, tol, rtol : float64 scalars
    max_iter : int64 scalar
    shared_kappa : bool (static)

    Returns
    -------
    state : EMState
    any_active : jax.Array of bool
        Whether some run did an M-step (the caller loops until it is False).
    """
    state = EMState(*(jnp.asarray(a, dtype) for a, dtype in zip(state, _STATE_DTYPES)))
    numbers = (beta, kappa_max, tol, rtol, max_iter)
    log_c = start_log_c(state, data, numbers, shared_kappa=shared_kappa)
    state, any_active, _ = em_iteration(state, log_c, data, numbers, shared_kappa=shared_kappa)
    return state, any_active


def em_iteration(state: EMState, log_c, data, numbers, *, shared_kappa: bool):
    """One EM iteration as :func:`run_em` makes it: :func:`data_pass`, then :func:`close_step`.

    ``log_c``: log C_d(kappa) of the state (:func:`start_log_c`, or the previous
    iteration's); ``numbers``: (beta, kappa_max, tol, rtol, max_iter). Returns the new
    state, whether some run is still active, and the next iteration's log C_d.
    """
    statistics = data_pass(state.log_weights, state.mu, state.kappa, log_c, data)
    n_rows = np.float64(data.shape[0])
    return close_step(
        state, statistics, n_rows, *numbers, np.bool_(False), shared_kappa=bool(shared_kappa)
    )


@persistent_jit(compiler_options=_mixture.JIT_OPTIONS)
def data_pass(log_weights, mu, kappa, log_c, data):
    """E-step statistics of every run of a batch: r_k, N_k and the total log-likelihood.

    The part of an EM iteration that reads the rows (:func:`bayesvmf._parallel.e_statistics`,
    eqs. (9), (15)-(17), (23)), vmapped over the runs; ``log_c`` = log C_d(kappa), of shape
    (B, K), comes from :func:`close_step`, so that no special function is compiled into this
    program: it is the only one of the iteration compiled per number of rows (a new row
    count, as cross-validation folds and scikit-learn's checks make, compiles 0.08 s of
    products instead of a 0.47 s whole step: measured, 50 x 5, K = 3). Row blocks on a mesh
    of devices: every device's rows, the sums added over devices (``psum``); large dense
    data: the sums of chunks of rows, so that the (n, K) arrays are not held whole
    (``data.map_sums``).

    Returns
    -------
    resultant : jax.Array of shape (B, K, d)
    resp_sum : jax.Array of shape (B, K)
    log_likelihood : jax.Array of shape (B,)
    """
    _mixture.count_trace("sparse.data_pass")

    def batch(args, data):
        return jax.vmap(
            lambda log_w, mu, kappa, log_c: _parallel.e_statistics(data, log_w, mu, kappa, log_c)
        )(*args)

    return data.map_sums(batch, (log_weights, mu, kappa, log_c), columns=log_weights.size)


@persistent_jit(static_argnames=("shared_kappa",), compiler_options=_mixture.JIT_OPTIONS)
def close_step(
    state: EMState,
    statistics,
    n_rows,
    beta,
    kappa_max,
    tol,
    rtol,
    max_iter,
    first,
    *,
    shared_kappa: bool,
):
    """Close an EM iteration of every run from its data pass: bound, convergence, M-step.

    ``statistics`` = (resultant, resp_sum, log_likelihood) of :func:`data_pass` at the
    state's parameters; ``n_rows`` the number of rows (traced, float64). Per run: the
    penalised bound of eq. (11) / n, the convergence test (:func:`settled`), then the
    M-step (:func:`_m_step`, eqs. (20)-(22)) if the run is still active. Never sees the
    rows: compiled once per (B, K, d), whatever the number of rows (the special functions
    of the kappa solve are most of an iteration's compile time). ``first`` (a traced bool):
    no iteration to close; the state comes back as it is, with ``any_active`` True.

    Returns
    -------
    state : EMState
    any_active : jax.Array of bool
        Whether some run did an M-step (the caller loops until it is False).
    log_c : jax.Array of shape (B, K)
        log C_d(kappa) of the returned state, for the next :func:`data_pass`.
    """
    _mixture.count_trace("sparse.close_step")
    d = state.mu.shape[-1]
    uniform = _mixture.log_normalizer(d, 0.0)

    def one(s: EMState, resultant, resp_sum, log_likelihood):
        bound = penalised_bound(log_likelihood, s.mu, beta, n_rows)
        healthy = s.status == Status.OK
        converged = s.converged | (
            (~s.converged) & healthy & (s.n_iter > 0) & settled(bound, s.bound, tol, rtol, uniform)
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

    def close(state, statistics):
        new_state, active = jax.vmap(one)(state, *statistics)
        return new_state, jnp.any(active)

    def open_(state, statistics):
        return state, jnp.bool_(True)

    # a conditional, not a select: the first call skips the M-step (its fixed point on the
    # placeholder statistics would cost as much as a real one)
    new_state, any_active = jax.lax.cond(first, open_, close, state, statistics)
    return new_state, any_active, _mixture.log_normalizer(d, new_state.kappa)


def start_log_c(state: EMState, data, numbers, *, shared_kappa: bool):
    """Return log C_d(kappa) of the state, for its first :func:`em_iteration`.

    :func:`close_step`'s ``first`` call: the program of every later call, each of which
    returns the next pass's log C_d itself.
    """
    _, _, log_c = close_step(
        state,
        _no_statistics(state, data),
        np.float64(data.shape[0]),
        *numbers,
        np.bool_(True),
        shared_kappa=bool(shared_kappa),
    )
    return log_c


def _no_statistics(state: EMState, data):
    """Return placeholder statistics for :func:`close_step`'s ``first`` call (ignored there).

    Placed as :func:`data_pass`'s outputs are (:func:`_output_placement`: replicated over
    a mesh of row blocks, or on the directions' device), so that the first call is the
    program of every later one.
    """
    batch, n_components = state.kappa.shape
    statistics = (
        np.zeros(state.mu.shape, np.float64),
        np.zeros((batch, n_components), np.float64),
        np.zeros(batch, np.float64),
    )
    placement = _output_placement(data, state.mu)
    return statistics if placement is None else jax.device_put(statistics, placement)


def settled(bound, previous, tol, rtol, uniform):
    """Convergence test of one run: ``|bound - previous| <= tol + rtol |bound - uniform|``.

    ``bound`` is the penalised log-likelihood per row (eq. (11) / n), ``uniform`` the log
    density of the uniform distribution on the sphere, log C_d(0). The log-likelihood has
    an arbitrary additive scale (the density is relative to the surface measure: log C_d(0)
    is about +344 at d = 256 and +96,000 at d = 26,214), so the relative part compares the
    change with the gain per row over the uniform model, which does not depend on it. An
    absolute threshold alone asks for ever smaller relative changes on concentrated data,
    where EM's last iterations creep (benchmarks/results/vs_sklearn.md: dozens of
    iterations for no better partition). ``rtol = 0`` is the absolute test of earlier
    versions.
    """
    return jnp.abs(bound - previous) <= tol + rtol * jnp.abs(bound - uniform)


@persistent_jit(
    static_argnames=("n_init", "n_components", "init", "refined"),
    compiler_options=_mixture.JIT_OPTIONS,
)
def _seed_batch(rng_key, data, n_init, n_components, init, hard_iter, refined, sample=None):
    """Seeds of every restart (:data:`bayesvmf._seeding.INIT_METHODS`), (B, K, d).

    Without ``refined``, with the crisp statistics of the seeds (Algorithm 4 of [1]_):
    ``(mu, (resultant, resp_sum))``; with it, ``mu`` alone (:func:`_refine_batch` follows).

    Restart b draws with the b-th key of ``jax.random.split(rng_key, n_init)``, split here
    rather than by a program of its own (each program costs a new process's first fit its
    read-back). :func:`bayesvmf._parallel.seeds`: with ``refined``, seeds drawn from a
    subsample of large data (dense rows drawn inside the program; ``sample``, sparse rows
    drawn before it) are refined on that subsample (hard passes, then split-and-merge
    moves), and :func:`_refine_batch` makes only hard passes on all rows.
    """
    _mixture.count_trace("sparse.seeds")
    keys = jax.random.split(rng_key, n_init)

    def batch(args, data):
        keys, hard_iter = args
        passes = hard_iter if refined else None

        def one(key):
            mu = _parallel.seeds(key, data, n_components, init, passes, sample)
            return mu if refined else (mu, _parallel.crisp_statistics(data, mu))

        return jax.vmap(one)(keys)

    return data.map(batch, (keys, hard_iter))


@persistent_jit(static_argnames="moves", compiler_options=_mixture.JIT_OPTIONS)
def _refine_batch(mu, data, hard_iter, moves):
    """Refine every restart's directions (B, K, d): :func:`bayesvmf._parallel.refine`.

    Hard passes, then split-and-merge moves when ``moves`` (not after a subsample's).
    Returns ``(mu, (resultant, resp_sum))``: the refined directions and the crisp
    statistics of the final partition (Algorithm 4 of [1]_), computed here, where the rows
    are, rather than by a program of their own (one program fewer for a new process's
    first fit to read back).
    """
    _mixture.count_trace("sparse.refine")

    def batch(args, data):
        mu, hard_iter = args

        def one(mu):
            mu = _parallel.refine(data, mu, hard_iter, moves)
            return mu, _parallel.crisp_statistics(data, mu)

        return jax.vmap(one)(mu)

    return data.map(batch, (mu, hard_iter))


@persistent_jit(static_argnames=("shared_kappa", "refined"), compiler_options=_mixture.JIT_OPTIONS)
def _init_parameters(mu, resultant, resp_sum, kappa_max, shared_kappa, refined):
    """Parameters of every restart from its crisp statistics (Algorithm 4 of [1]_).

    Never sees the rows: compiled per (B, K, d), whatever the number of rows (the kappa
    solve's special functions are most of its compile time).
    """
    _mixture.count_trace("sparse.init_parameters")

    def one(mu, resultant, resp_sum):
        if refined:
            # the M-step of the final partition (as init_state_from_labels)
            mu = _parallel.normalised(resultant, mu)
        rho = _rho(mu, resultant, resp_sum, shared_kappa)
        kappa, collapsed = _mixture.solve_kappa(mu.shape[-1], rho, kappa_max)
        return _log_weights(resp_sum), mu, kappa, _status(resp_sum, rho, collapsed)

    return jax.vmap(one)(mu, resultant, resp_sum)


def init_state(rng_key, data, *, n_components, n_init, init, shared_kappa, kappa_max, hard_iter=0):
    """Initialise ``n_init`` runs by Algorithm 4 of [1]_ (or spherical k-means++ seeds).

    Seeds become the mean directions; every row is assigned to its closest seed by cosine;
    alpha_k are the cluster proportions and kappa solves eq. (21) with the crisp
    responsibilities and the seeds as mu_k (shared: eq. (27)). With ``hard_iter > 0`` the
    seeds are first refined by at most that many hard spherical k-means passes, then by the
    split-and-merge moves (:func:`bayesvmf._parallel.refine`, which leave the local optima
    of an unlucky seeding), and mu_k are the normalised
    resultants of the final partition. Data of more than max(4096, 128 K) rows (dense; or
    sparse on the CPU kernel, not in row blocks) are seeded from a uniform subsample
    (:func:`bayesvmf._seeding.seeding_sample`, :func:`~bayesvmf._seeding.host_seeding_sample`;
    all restarts share the sparse one), where the
    seeds get the same refinement first: coarse to fine, the moves then cost passes over
    the subsample instead of all rows, and on all rows only the hard passes follow
    (:func:`bayesvmf._parallel.refine`: the moves are made once). Measured, 50,000 x 256
    float32, K = 40 clusters of unequal sizes: with the moves made on all rows too, as
    before session 25, 0.3 s on the subsample, then 1.2-1.7 s on all rows, against 3.7-4.4 s
    on all rows without the subsample's, at one held-out ARI; whole fits then took 1.69 s
    (median of seeds 0-4), against 1.26 s with the moves on the subsample only. Each run
    has its own key; the runs go through three jitted programs, vmapped over them: the
    seeds, the refinement (with ``hard_iter > 0``), the last of the two with the crisp
    statistics of its partition, then the parameters. (Not one: composed
    into one program the seeding and the hard passes were measured slower than apart on
    CPU, 0.52 s against 0.20 + 0.14 s for 50,000 x 256, K = 32, seeding all rows; the
    parameters, whose kappa solve is most of the compile time, never see the rows, so that
    a new row count does not compile them again.)

    Returns
    -------
    EMState
    """
    refined = int(hard_iter) > 0
    sample = _seeding.host_seeding_sample(rng_key, data, int(n_components))
    seeded = _seed_batch(
        rng_key, data, int(n_init), int(n_components), init, np.int64(hard_iter), refined, sample
    )
    if refined:
        # the moves were made on the subsample, if the seeds came from one (_parallel.refine)
        moves = not _seeding.subsamples(data, int(n_components), sample)
        seeded = _refine_batch(seeded, data, np.int64(hard_iter), moves)
    mu, (resultant, resp_sum) = seeded
    log_weights, mu, kappa, status = _init_parameters(
        mu, resultant, resp_sum, np.float64(kappa_max), bool(shared_kappa), refined
    )
    return fresh_state(log_weights, mu, kappa, status)


@persistent_jit(
    static_argnames=("n_components", "shared_kappa"), compiler_options=_mixture.JIT_OPTIONS
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
    # the constant fields as host arrays: built by JAX outside a program, each would be a
    # program of its own, compiled (or read from the cache) in every new process
    return EMState(
        log_weights=log_weights,
        mu=mu,
        kappa=jnp.asarray(kappa, jnp.float64),
        resultant=np.zeros(mu.shape, np.float64),
        bound=np.full(batch, -np.inf),
        log_likelihood=np.full(batch, -np.inf),
        n_iter=np.zeros(batch, np.int64),
        converged=np.zeros(batch, bool),
        status=(np.zeros(batch, np.int64) if status is None else jnp.asarray(status, jnp.int64)),
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
    rtol: float = 0.0,
    progress=None,
) -> EMState:
    """Run Algorithm 2 of [1]_ on a batch of runs until each converges, degenerates or stops.

    A run converges when :func:`settled` (``tol`` absolute, ``rtol`` relative; the default
    ``rtol = 0`` is the absolute test). Each iteration calls the jitted :func:`data_pass`
    (the rows: compiled per data shape) and :func:`close_step` (bound, convergence, M-step:
    compiled per batch size, K and d, whatever the number of rows), as :func:`em_step`
    does, until no run is active; the loop ends with a data pass at the final parameters, so
    ``bound``, ``log_likelihood`` and ``resultant`` always describe the returned
    parameters. This Python loop is the only one (it reads one bool per iteration from the
    device, and the runs' iteration counts when it compacts); every program it calls is
    compiled once per batch size.

    Compaction: a run stops costing work once it has stopped. The restarts share one data
    pass (their products are batched), so without compaction every iteration costs the
    products of all of them until the slowest stops. When one run's data pass is large
    (at least :data:`COMPACT_MIN_WORK` multiply-adds, see :func:`_pass_work`), the runs that
    have stopped are taken out of the batch as soon as the running ones fit in a batch of
    the next power of two below the current size (padded with stopped runs, which stay as
    they are); the two programs compile once for each such size. A stopped run's state is final
    (a run that did no M-step in a step never does one again), so the result is that of
    the full batch up to rounding: a smaller batch may round differently in the last bits.
    Smaller data keeps the whole batch (compiling would cost more than the saved passes).

    Returns
    -------
    EMState
        Device arrays, batch axis first.
    """
    args = (
        np.float64(beta),
        np.float64(kappa_max),
        np.float64(tol),
        np.float64(rtol),
        np.int64(max_iter),
    )
    state = fresh_state(*state[:3], state.status)._replace(
        bound=jnp.asarray(state.bound, jnp.float64),
        n_iter=jnp.asarray(state.n_iter, jnp.int64),
        converged=jnp.asarray(state.converged, bool),
    )
    # every later call takes close_step's outputs: the first call gets the same placement, or
    # its host-made counts and flags would make it a program of its own (one more
    # compilation, or one more read from the cache, per fit)
    placement = _output_placement(data, state.mu)
    if placement is not None:
        state = jax.device_put(state, placement)
    batch = state.mu.shape[0]
    compact = batch > 1 and _pass_work(data, state.mu.shape[1]) >= COMPACT_MIN_WORK
    rows = np.arange(batch)  # the run (index in the caller's batch) of each row of `state`
    stopped: dict[int, EMState] = {}  # final state of the runs taken out of the batch
    n_iter = np.asarray(state.n_iter) if compact else None
    shared_kappa = bool(shared_kappa)
    # one iteration = data_pass (per row count) + close_step (per B, K, d; it returns the
    # log C_d(kappa) of the next pass)
    log_c = start_log_c(state, data, args, shared_kappa=shared_kappa)
    while True:
        state, any_active, log_c = em_iteration(state, log_c, data, args, shared_kappa=shared_kappa)
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
                state, log_c = EMState(*(a[keep] for a in state)), log_c[keep]
                rows, n_iter = rows[keep], n_iter[keep]
    if not stopped:
        return state
    for i, run in enumerate(rows):
        stopped.setdefault(int(run), _take(state, i))
    return EMState(*(jnp.concatenate(parts) for parts in zip(*(stopped[r] for r in range(batch)))))


def _output_placement(data, mu):
    """Where :func:`close_step` places its outputs, or None if that is not known here.

    Replicated over the mesh of sharded rows; otherwise on the device of the directions
    when they are committed to one (the estimators' starts are; directions made on the
    host are not, and the state is then left as it is).
    """
    if getattr(data, "is_sharded", False):
        return jax.sharding.NamedSharding(data.mesh, jax.sharding.PartitionSpec())
    if isinstance(mu, jax.Array) and mu.committed:
        return mu.sharding
    return None


def _pass_work(data, n_components: int) -> int:
    """Multiply-adds of one run's data pass: the two products, 2 K (nnz or n d)."""
    inner = data.block
    if isinstance(inner, _data.SparseData):
        entries = inner.nnz
    else:
        n, d = inner.shape
        entries = n * d
    return 2 * int(n_components) * int(entries)


def _take(state: EMState, i: int) -> EMState:
    """Run ``i`` of a batch, keeping a batch axis of length 1."""
    return EMState(*(a[i : i + 1] for a in state))
