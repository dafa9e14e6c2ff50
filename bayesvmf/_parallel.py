"""Statistics of plain or blocked data, and the initialisations shared by the mixtures.

The EM of a vMF mixture touches the data only through its sufficient statistics: the counts
N_k = sum_i tau_ik, the resultants r_k = sum_i tau_ik x_i (eq. (23) of [1]_) and the total
log-likelihood sum_i log p(x_i) (eq. (9)). The functions here compute them on any data
object of the data layer (:func:`bayesvmf._blocks.device_data`: plain data or
:class:`bayesvmf._blocks.RowBlocks`, whose padding rows weigh 0 and whose partial sums are
added over the devices, docs/design.md section 6).

The initialisations work on plain or blocked data alike: the seeding methods
(:data:`bayesvmf._seeding.INIT_METHODS`, which take row blocks too) and the hard
spherical k-means passes that refine them (:func:`spherical_kmeans`, Banerjee et al. [2]_),
shared by the classical and the Bayesian mixtures.

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes", Neurocomputing (journal version of the ESANN 2021 paper).
.. [2] A. Banerjee, I. S. Dhillon, J. Ghosh and S. Sra, "Clustering on the unit hypersphere
   using von Mises-Fisher distributions", JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf import _mixture, _seeding
from bayesvmf._blocks import RowBlocks

__all__ = [
    "initial_directions",
    "refine",
    "seeds",
    "split_gains",
    "split_merge",
    "weighted_resultants",
    "e_statistics",
    "crisp_statistics",
    "HARD_RTOL",
    "normalised",
    "spherical_kmeans",
    "weighted_log_prob",
]


# --------------------------------------------------------------------------------------------
# Statistics (traceable; call inside jit, through data.map for sharded data)
# --------------------------------------------------------------------------------------------


def e_statistics(data, log_weights, mu, kappa, log_c):
    """E-step statistics of one run: r_k, N_k and the total log-likelihood (eqs. (9), (23)).

    For plain data this is :func:`bayesvmf._mixture.e_step` followed by
    :func:`bayesvmf._mixture.resultants` and the sum of the per-row log densities. For
    :class:`RowBlocks` the responsibilities and log densities of padding rows are weighted
    by 0, and on a device's block the three sums are added over devices (``psum``).

    Returns
    -------
    resultant : jax.Array of shape (K, d)
    resp_sum : jax.Array of shape (K,)
    log_likelihood : jax.Array, scalar
    """
    if not isinstance(data, RowBlocks):
        log_resp, log_norm = _mixture.e_step(data, log_weights, mu, kappa, log_c)
        resultant, resp_sum = _mixture.resultants(data, jnp.exp(log_resp))
        return resultant, resp_sum, jnp.sum(log_norm)
    w = data.row_weight
    log_resp, log_norm = _mixture.e_step(data.block, log_weights, mu, kappa, log_c)
    resultant, resp_sum = _mixture.resultants(data.block, data.weigh_rows(jnp.exp(log_resp)))
    log_likelihood = jnp.sum(jnp.where(w > 0, log_norm, 0.0))
    return data.sum_over_blocks(resultant, resp_sum, log_likelihood)


def crisp_statistics(data, mu: jax.Array, weights: jax.Array | None = None):
    """Crisp assignment to the closest seed by cosine, and its statistics (Algorithm 4 of [1]_).

    On row blocks padding rows weigh 0 and the sums are added over devices.

    Parameters
    ----------
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
    mu : jax.Array of shape (n_components, n_features)
    weights : jax.Array of shape (n_rows,) or None
        Weight of each row a device sees (laid out by ``data.row_array``): 0 or 1 to
        restrict the statistics to some rows (H-vMFmix's top-down start), or any
        nonnegative weights (the vectors' weights of DirichletVMFMixture's start); None:
        every row 1.

    Returns
    -------
    resultant : jax.Array of shape (n_components, n_features)
    resp_sum : jax.Array of shape (n_components,)
    """
    labels = jnp.argmax(data.block.dot(mu.T), axis=1)
    onehot = jax.nn.one_hot(labels, mu.shape[0], dtype=jnp.float64)
    if weights is not None:
        onehot = onehot * weights[:, None]
    return weighted_resultants(data, onehot)


def weighted_resultants(data, weights: jax.Array):
    """Return sum_i w_ik x_i and sum_i w_ik over the real rows of plain or blocked data.

    :func:`bayesvmf._mixture.resultants` with padding rows weighted by 0 and the sums added
    over devices; ``weights`` (n_rows, K) are those of the rows a device sees.
    """
    return data.sum_over_blocks(*_mixture.resultants(data.block, data.weigh_rows(weights)))


#: Hard passes stop early when one raises the spherical k-means objective sum_i max_k x_i.mu_k
#: by at most this fraction (Lloyd's iterations never lower it).
HARD_RTOL = 1e-6


def normalised(resultant, fallback):
    """Rows of ``resultant`` scaled to unit norm; ``fallback``'s row where a row is zero."""
    norm = jnp.linalg.norm(resultant, axis=-1, keepdims=True)
    tiny = jnp.finfo(resultant.dtype).tiny
    return jnp.where(norm > 0, resultant / jnp.maximum(norm, tiny), fallback)


def seeds(key, data, n_components: int, init: str, max_passes, sample=None):
    """One restart's seeds by ``init``, refined on the seeding subsample of large data.

    The seeds of :data:`bayesvmf._seeding.INIT_METHODS`. When they are drawn from a
    subsample of the rows (:func:`bayesvmf._seeding.seeding_sample`, large dense data;
    or ``sample``, a subsample drawn before the program by
    :func:`bayesvmf._seeding.host_seeding_sample`) and ``max_passes`` is not None, they are
    refined there first, by :func:`spherical_kmeans` and :func:`split_merge`
    (``max_passes`` passes each): coarse to fine, the local optima of the seeding are left
    on the subsample, where a move costs a few passes over thousands of rows instead of all
    of them.
    """
    if sample is None:
        sample = _seeding.seeding_sample(key, data, n_components)
    mu = _seeding.INIT_METHODS[init](key, sample, n_components)
    if max_passes is None or sample is data:
        return mu
    return refine(sample, mu, max_passes)


def initial_directions(key, data, n_components: int, init: str, kmeans_iter, sample=None):
    """One restart's initial directions: seeds by ``init``, then hard spherical k-means.

    The seeds of :func:`seeds` are refined by at most ``kmeans_iter`` passes of
    :func:`spherical_kmeans` (traced; ``None`` for none, the program of earlier versions),
    then by the split-and-merge moves of :func:`split_merge` unless :func:`seeds` made them
    on a subsample (:func:`refine`), on plain or blocked data: the
    start of B- and T-vMFmix, the one SparseVMFMixture makes with ``kmeans_iter > 0`` (so
    that the Bayesian models start where the classical mixture they are compared with
    starts). Measured (CSTR, K = 30, 10 restarts, seeds 0-2), B-vMFmix's mean NMI: 0.419
    without the moves, 0.439 with them (k-means 0.439, the classical mixture 0.434).
    """
    mu = seeds(key, data, n_components, init, kmeans_iter, sample)
    if kmeans_iter is None:
        return mu
    moves = not _seeding.subsamples(data, n_components, sample)
    return refine(data, mu, kmeans_iter, moves=moves)


def refine(data, mu, max_passes, moves: bool = True):
    """Directions ``mu`` refined by hard spherical k-means, then split-and-merge moves.

    At most ``max_passes`` passes of :func:`spherical_kmeans`, then (with ``moves``)
    :func:`split_merge`, each move followed by at most ``max_passes`` passes: the
    refinement of every start, on the seeding subsample (:func:`seeds`) and on all rows
    (:func:`initial_directions`, SparseVMFMixture's ``_refine_batch``).

    The moves are made once, on the rows the seeds were first refined on: on all rows only
    when the seeds were not refined on a subsample (``moves=False`` after :func:`seeds`
    refined them there; coarse to fine, the passes on all rows then only adjust the
    partition). A move proposal costs about ten data products (:func:`split_gains`' power
    iterations), the same on all rows whether or not a move is made. Measured in 25
    default SparseVMFMixture fits (seeds 0-4 of tf-idf 16,000 x 26,214, K = 20; dense
    50,000 x 256, K = 32 and K = 40 of unequal sizes; SOTU paragraphs, K = 10 and 30):
    moves on all rows after the subsample's were made in 6 fits (1-2 each, five of them
    with K = 40 of unequal sizes); without them every held-out log-likelihood was the
    same to 0.12 nats per row (docs/design.md section 5 has the times; a later SOTU fit at
    K = 100 scored 1.9-2.2 nats per paragraph, 0.006%, lower).
    """
    mu = spherical_kmeans(data, mu, max_passes)
    return split_merge(data, mu, max_passes)[0] if moves else mu


def spherical_kmeans(data, mu, max_passes, weights=None):
    """Refine mean directions by hard spherical k-means passes (Lloyd; Banerjee et al. [2]_).

    Each pass assigns every row to its closest direction by cosine and replaces each
    direction by its cluster's normalised resultant (an empty cluster keeps its direction):
    the limit of EM's steps as every kappa grows alike, at the cost of the same two data
    products without a log-normaliser or a soft assignment. Passes stop after
    ``max_passes`` or once a pass raises the objective sum_k mu_k . r_k by at most
    :data:`HARD_RTOL` relative. On row blocks the statistics are summed over devices before
    the test, so every device runs the same number of passes.

    Parameters
    ----------
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
    mu : jax.Array of shape (K, d)
        Seeds (unit rows).
    max_passes : int64 scalar (traced)
    weights : jax.Array of shape (n_rows,) or None
        Row weights of :func:`crisp_statistics` (0 leaves a row out of the passes).

    Returns
    -------
    mu : jax.Array of shape (K, d)
    """

    def keep_going(carry):
        it, _, gain, score = carry
        return (it < max_passes) & (gain > HARD_RTOL * jnp.abs(score))

    def one_pass(carry):
        it, mu, _, previous = carry
        resultant, _ = crisp_statistics(data, mu, weights)
        # the objective of this assignment at the directions that made it
        score = jnp.sum(mu * resultant)
        return it + 1, normalised(resultant, mu), score - previous, score

    # (gain, score) = (inf, 0): the first pass always runs
    init = (jnp.zeros((), max_passes.dtype), mu, jnp.asarray(jnp.inf), jnp.asarray(0.0))
    return jax.lax.while_loop(keep_going, one_pass, init)[1]


def weighted_log_prob(data: RowBlocks, log_weights, mu, kappa) -> np.ndarray:
    """Log alpha_k + log f_k(x_i) of every real row of blocked data, as a host array (n, K)."""
    return data.map_rows(_weighted_log_prob_rows, (mu, kappa, log_weights))


def _weighted_log_prob_rows(params, block):
    mu, kappa, log_weights = params
    # inside the compiled program: K normalisers, d static from the block
    log_c = _mixture.log_normalizer(block.shape[1], kappa)
    return _mixture.log_likelihood_matrix(block, mu, kappa, log_c) + log_weights


def _cosines(data, mu):
    """X @ mu.T of the rows of this device (padding rows included on row blocks)."""
    return data.block.dot(mu.T)


#: Power iterations of :func:`split_gains` (the leading direction of a merged component's
#: scatter dominates the within-cluster noise by a large factor, so a few suffice).
SPLIT_POWER_ITER = 3


@functools.partial(jax.jit, static_argnames=("d", "dtype"))
def _power_start_draw(d: int, dtype: np.dtype) -> jax.Array:
    """Return N(0, I_d) draws of key 0: one program, so that drawing compiles once."""
    return jax.random.normal(jax.random.PRNGKey(0), (d,), dtype)


@functools.lru_cache(maxsize=32)
def _power_start(d: int, dtype: np.dtype) -> np.ndarray:
    """Return the fixed start of :func:`split_gains`' power iterations: N(0, I_d), key 0.

    Drawn once per process and (d, dtype), when a program is first traced, and kept as a
    read-only NumPy array, so the programs hold d numbers instead of the draw: the draw's
    threefry rounds and inverse error function were 962 of the 3,635 instructions of the
    refinement program of ``SparseVMFMixture`` (n = 40, d = 5, 2 components), compiled for
    every data shape.
    The draw is one program of its own (:func:`_power_start_draw`), compiled and run
    apart from the program being traced: drawn eagerly (``jax.ensure_compile_time_eval``),
    its operations were small programs, one of them compiled twice in one process.
    """
    # compiled and run on its own, also when called inside the trace of another program
    start = np.asarray(_power_start_draw.lower(d=d, dtype=np.dtype(dtype)).compile()())
    start.flags.writeable = False
    return start


def split_gains(data, mu):
    """Objective gain of splitting each hard cluster in two along its principal direction.

    Rows are assigned to their closest direction; the rows of cluster k are split by the sign
    of their projection, centred on the cluster mean, on the leading eigenvector of the
    cluster's scatter (principal direction divisive partitioning: D. Boley, Data Mining and
    Knowledge Discovery 2 (1998) 325-344; a few power
    iterations from a fixed direction, all clusters at once). The gain is
    |r_k1| + |r_k2| - |r_k| for the resultants of the two halves: the rise of the spherical
    k-means objective sum_i max_k x_i . mu_k if both halves had their own direction.

    Returns
    -------
    gains : jax.Array of shape (K,)
    halves : jax.Array of shape (K, 2, d)
        The two halves' resultants.
    resultant, counts : jax.Array of shapes (K, d), (K,)
        Statistics of the hard clusters.
    """
    n_components, d = mu.shape
    onehot = jax.nn.one_hot(jnp.argmax(_cosines(data, mu), axis=1), n_components)
    resultant, counts = weighted_resultants(data, onehot)
    mean = resultant / jnp.maximum(counts, 1.0)[:, None]
    # a fixed start (not parallel to any mean in practice), the same for every cluster
    start = _power_start(d, np.dtype(resultant.dtype))
    v = jnp.broadcast_to(start / jnp.linalg.norm(start), (n_components, d))

    def projections(v):
        # (x_i - m_k) . v_k for each row's own cluster k (zero in the other columns)
        return onehot * (_cosines(data, v) - jnp.sum(mean * v, axis=1))

    def power(_, v):
        # S_k v_k = sum_{i in k} ((x_i - m_k) . v_k) (x_i - m_k)
        p = projections(v)
        sums, p_sums = weighted_resultants(data, p)
        w = sums - p_sums[:, None] * mean
        return normalised(w, v)

    v = jax.lax.fori_loop(0, SPLIT_POWER_ITER, power, v)
    first, _ = weighted_resultants(data, onehot * (projections(v) > 0))
    halves = jnp.stack([first, resultant - first], axis=1)
    norm = jnp.linalg.norm
    gains = norm(halves[:, 0], axis=-1) + norm(halves[:, 1], axis=-1) - norm(resultant, axis=-1)
    return gains, halves, resultant, counts


def split_merge(data, mu, max_passes):
    """Leave local optima of spherical k-means by merging two clusters and splitting one.

    A seeding that puts two seeds in one cluster and none in another ends, after Lloyd's
    passes, at a local optimum: one direction for two clusters, two for one. From the
    hard clusters of ``mu``, the merge that loses least of the objective sum_i max_k x_i.mu_k,
    L_jk = |r_j| + |r_k| - |r_j + r_k|, and the split that gains most (:func:`split_gains`,
    cluster c not j or k) are proposed when the split gains more than the merge loses; the
    moved directions are refined by :func:`spherical_kmeans` and kept only if they raise
    the objective by more than :data:`HARD_RTOL` relative (the
    split-and-merge moves of Ueda et al., Neural Computation 12 (2000) 2109-2128, on the
    hard objective). At a good optimum the merge of two true clusters loses far more than
    any split gains, and no move is made; at most K moves are made.

    Parameters
    ----------
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
    mu : jax.Array of shape (K, d)
        Directions after hard passes.
    max_passes : int64 scalar (traced)
        Passes of :func:`spherical_kmeans` after each move.

    Returns
    -------
    mu : jax.Array of shape (K, d)
    n_moves : jax.Array of int
    """
    n_components = mu.shape[0]

    def propose(mu):
        gains, halves, resultant, _ = split_gains(data, mu)
        norms = jnp.linalg.norm(resultant, axis=-1)
        gram = resultant @ resultant.T
        merged = jnp.sqrt(jnp.maximum(norms[:, None] ** 2 + norms[None, :] ** 2 + 2 * gram, 0.0))
        loss = norms[:, None] + norms[None, :] - merged
        loss = jnp.where(jnp.eye(n_components, dtype=bool), jnp.inf, loss)
        # a flat index is never negative, so truncating division unravels it: jnp.unravel_index
        # handles negative ones too, 465 of the start program's instructions (its read-back
        # time in a new process grows with them; docs/design.md section 5)
        pair = jnp.argmin(loss)
        j, k = jax.lax.div(pair, n_components), jax.lax.rem(pair, n_components)
        gains = jnp.where(
            (jnp.arange(n_components) == j) | (jnp.arange(n_components) == k), -jnp.inf, gains
        )
        c = jnp.argmax(gains)
        moved = (
            mu.at[j]
            .set(normalised(resultant[j] + resultant[k], mu[j]))
            .at[c]
            .set(normalised(halves[c, 0], mu[c]))
            .at[k]
            .set(normalised(halves[c, 1], mu[k]))
        )
        # the objective of mu's own assignment comes with its statistics
        return jnp.sum(mu * resultant), gains[c] > loss[j, k], moved

    def keep_going(carry):
        moves, _, _, worth, _, first = carry
        return first | (worth & (moves < n_components))

    def step(carry):
        # a move was proposed: refine it, keep it if it raised the objective, propose the
        # next. The first step proposes from mu itself (no pass, nothing to keep), so that
        # propose, about a third of the program, is traced once instead of twice.
        moves, mu, score, _, moved, first = carry
        moved = spherical_kmeans(data, moved, jnp.where(first, 0, max_passes))
        new_score, worth, next_move = propose(moved)
        better = ~first & (new_score - score > HARD_RTOL * jnp.abs(score))
        return (
            moves + better.astype(moves.dtype),
            jnp.where(better, moved, mu),
            jnp.where(better | first, new_score, score),
            worth & (better | first),
            next_move,
            jnp.zeros_like(first),
        )

    # (no lax.cond: under vmap it would batch the data, which sparse products refuse)
    score = jnp.zeros((), jax.eval_shape(propose, mu)[0].dtype)  # the first step sets it
    init = (jnp.zeros((), jnp.int32), mu, score, jnp.ones((), bool), mu, jnp.ones((), bool))
    moves, mu, _, _, _, _ = jax.lax.while_loop(keep_going, step, init)
    return mu, moves
