"""Seeding of the vMF mixtures: random rows (Algorithm 4 of [1]_) and spherical k-means++ [3]_.

Every estimator draws its initial mean directions here (:data:`INIT_METHODS`, the ``init``
options), on any data object of the data layer (plain data or row blocks,
:class:`bayesvmf._blocks.RowBlocks`: ``data.take_rows`` and ``data.dot`` are all they
ask); large data are seeded from a uniform subsample of their rows (:func:`seeding_sample`
inside a program, :func:`host_seeding_sample` on the host). The names are re-exported by
:mod:`bayesvmf._mixture`.

Inside a program the draws are few and plain (:func:`uniform_order`, one sort of random keys;
:func:`inverse_cdf_rows`, k-means++'s draws from uniforms drawn once): every random-number
call site is about a hundred HLO instructions, which a new process reads back with the
program (docs/design.md section 5, session 33).

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes", Neurocomputing (journal version of the ESANN 2021 paper).
.. [3] D. Arthur and S. Vassilvitskii, "k-means++: the advantages of careful seeding",
   SODA 2007 (here with the cosine dissimilarity 1 - x.mu of spherical k-means; its
   section 5 suggests the greedy variant with several candidates per seed).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf._blocks import device_data
from bayesvmf._data import DenseData, SparseData, host_csr

__all__ = [
    "INIT_METHODS",
    "SEEDING_ROWS",
    "SEEDING_ROWS_PER_COMPONENT",
    "greedy_trials",
    "host_seeding_sample",
    "init_random_rows",
    "init_spherical_kmeanspp",
    "inverse_cdf_rows",
    "kmeanspp_pick",
    "seeding_sample",
    "seeding_size",
    "uniform_order",
]


def init_random_rows(rng_key, data, n_components: int) -> jax.Array:
    """Draw K distinct rows of X uniformly as initial mean directions (Algorithm 4 of [1]_).

    Parameters
    ----------
    rng_key : jax.Array
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
    n_components : int

    Returns
    -------
    mu : jax.Array of shape (n_components, n_features)
    """
    idx = jax.random.choice(rng_key, data.shape[0], (n_components,), replace=False)
    return data.take_rows(idx)


#: Spherical k-means++ draws its seeds from a uniform subsample of large data, of
#: max(SEEDING_ROWS, SEEDING_ROWS_PER_COMPONENT K) rows when there are more (as
#: scikit-learn's MiniBatchKMeans seeds on ``init_size`` rows): each seed costs one pass
#: over the rows it draws from, and the hard passes and EM that follow use all rows.
#: Measured (50,000 x 256 float32, K = 32, greedy): seeding 0.20 s on all rows, whole
#: default fits 0.79 s -> 0.41 s (median of 6 seeds), held-out ARI 1.0 both ways.
SEEDING_ROWS = 4096
SEEDING_ROWS_PER_COMPONENT = 128


def seeding_size(n_components: int) -> int:
    """Rows of the seeding subsample: max(SEEDING_ROWS, SEEDING_ROWS_PER_COMPONENT K)."""
    return max(SEEDING_ROWS, SEEDING_ROWS_PER_COMPONENT * n_components)


def subsamples(data, n_components: int, sample=None) -> bool:
    """Whether the seeds of ``data`` come from a subsample of its rows (a static test).

    True when a host-drawn ``sample`` is given (:func:`host_seeding_sample`) or when dense
    data (plain, or dense row blocks) have more than :func:`seeding_size` rows, which
    :func:`seeding_sample` subsamples inside the program.
    """
    if sample is not None:
        return True
    return isinstance(data.block, DenseData) and data.shape[0] > seeding_size(n_components)


def seeding_sample(rng_key, data, n_components: int):
    """Return the rows spherical k-means++ seeds from: a uniform subsample of dense data.

    Dense data (plain, or dense row blocks) of more than :func:`seeding_size` rows give that
    many distinct rows drawn uniformly (the first of :func:`uniform_order`, with the key
    folded with that size), as :class:`~bayesvmf._data.DenseData` in the data's
    dtype (the same on every device); other data are returned as they are (inside a
    program sparse rows are not gathered: the one-hot product that selects them is O(n) per
    row; :func:`host_seeding_sample` draws them before the program).
    """
    if not subsamples(data, n_components):
        return data
    n_samples, size = data.shape[0], seeding_size(n_components)
    idx = uniform_order(jax.random.fold_in(rng_key, size), n_samples)[:size]
    if isinstance(data, DenseData):
        return DenseData(data.X[idx])
    return DenseData(data.take_rows(idx).astype(data.block.X.dtype))


def host_seeding_sample(rng_key, data, n_components: int) -> SparseData | None:
    """Return a uniform subsample of large sparse data to seed from, drawn on the host.

    :func:`seeding_sample` for sparse data of the "scipy" kernel (the CPU default), whose
    CSR matrix is on the host: :func:`seeding_size` distinct rows, drawn with a NumPy
    generator seeded by ``rng_key``, as sparse data of the same kernel and dtype (their
    products cost nnz of the subsample). None for other data or when there are not more
    rows than that (the "segment_sum" kernel is left out: its programs are compiled per
    number of nonzeros, which differs from one subsample to the next).
    """
    size = seeding_size(n_components)
    if not (isinstance(data, SparseData) and data.kernel == "scipy" and data.shape[0] > size):
        return None
    seed = np.asarray(jax.random.key_data(rng_key), np.uint32).ravel()
    idx = np.random.default_rng(seed).choice(data.shape[0], size, replace=False)
    return device_data(host_csr(data)[idx], data.dtype, kernel="scipy")


def uniform_order(rng_key, n: int) -> jax.Array:
    """Return a uniformly random permutation of range(n), int32: the order of random keys.

    Each row gets 64 random bits (two 32-bit keys) and one sort orders the rows by them. A
    tie, of probability about n^2 / 2^65 (2e-11 for n = 50,000), leaves two rows in index
    order. :func:`jax.random.permutation` (and ``jax.random.choice(replace=False)``) sorts
    twice by 32-bit keys instead (a round's ties, of probability about n^2 / 2^33, are
    shuffled by the next): measured, the seeding program of SparseVMFMixture (dense
    50,000 x 256, K = 32) had about 540 of its 3,551 instructions in that draw.
    """
    bits = jax.random.bits(rng_key, (2, n), jnp.uint32)
    return jax.lax.sort((bits[0], bits[1], jax.lax.iota(jnp.int32, n)), num_keys=2)[2]


def inverse_cdf_rows(u, logits) -> jax.Array:
    """Return the rows drawn with probabilities softmax(logits), one per uniform of ``u``.

    Inverse-CDF draws: row i for u F_n in [F_{i-1}, F_i) with F the cumulative sums of the
    weights exp(logits - max), in float64 (:func:`_cumulative_weights`: never decreasing,
    flat at rows of weight 0); a row of probability 0 (logit -inf) is never drawn. Given
    the uniforms, no random draw is made here: :func:`init_spherical_kmeanspp` draws all of
    them at once, where K - 1 categorical draws (Gumbel noise for every row and candidate at
    every seed) were 0.6 ms per seed at 4,096 rows and 4 candidates.

    Parameters
    ----------
    u : jax.Array of shape (m,)
        Uniforms in [0, 1).
    logits : jax.Array of shape (n,)

    Returns
    -------
    jax.Array of shape (m,), int32
    """
    cdf = _cumulative_weights(logits)
    # the number of F_i <= u F_n: a comparison per row, no sequential search. The first F_i
    # above it rose at row i, so row i has a positive weight; u < 1 keeps i < n
    idx = jnp.sum(cdf[None, :] <= (u * cdf[-1])[:, None], axis=1, dtype=jnp.int32)
    return jnp.minimum(idx, logits.shape[0] - 1)


def _cumulative_weights(logits) -> jax.Array:
    """Return F_i = sum_{j <= i} exp(logits_j - max logits), float64, for :func:`inverse_cdf_rows`.

    F never decreases and stays equal across rows of weight 0 (-inf before the first positive
    one). A plain cumulative sum does neither exactly: XLA's CPU cumsum is a blocked scan whose
    partial sums are rounded differently at block boundaries (measured, 20 arrays of 50,000
    rows with 30% weights 0: 2,795 decreasing steps, and zero-weight rows of probability
    about 1e-17 that a draw could hit); the running maximum of the positive rows' sums is
    exact about both.
    """
    weights = jnp.exp(logits.astype(jnp.float64) - jnp.max(logits))
    return jax.lax.cummax(jnp.where(weights > 0, jnp.cumsum(weights), -jnp.inf))


def greedy_trials(n_components: int) -> int:
    """Candidates per seed of greedy k-means++: 2 + floor(ln K), as in scikit-learn."""
    return 2 + int(math.log(n_components))


def kmeanspp_pick(rng_key, best, n_local_trials: int, select, cosines, weights=None, draw=None):
    """Draw the next k-means++ seed; return it and the rows' new best cosines.

    Candidates are drawn with probability proportional to the dissimilarity 1 - best of each
    row to its closest seed so far, times its weight (uniformly, or by weight, when every row
    is a seed); with several candidates (greedy k-means++ [3]_, section 5), the one leaving
    the smallest total (weighted) dissimilarity is kept. With one, the draws are those of
    plain k-means++.

    Parameters
    ----------
    rng_key : jax.Array or None
        The key of the draw (None when ``draw`` needs none).
    best : jax.Array of shape (n_samples,)
        Largest cosine of each row to the seeds so far.
    n_local_trials : int
        Candidates per seed (static).
    select : callable
        ``select(idx)`` returns the rows ``idx`` as a dense (m, d) array.
    cosines : callable
        ``cosines(rows)`` returns X @ rows.T of shape (n_samples, m).
    weights : jax.Array of shape (n_samples,) or None
        Positive row weights (word counts of VMFMix's vectors); None for ones.
    draw : callable or None
        ``draw(rng_key, logits, (n_local_trials,))`` returns the candidates' rows, drawn
        with probabilities softmax(logits); None: :func:`jax.random.categorical`. (VMFMix
        draws by each row's global number, so that a padded or sharded corpus draws alike.)
    """
    dissim = jnp.clip(1.0 - best, 0.0, None)
    if weights is None:
        fallback = jnp.zeros_like(dissim)
    else:
        dissim, fallback = dissim * weights, jnp.log(weights)
    logits = jnp.where(dissim.sum() > 0, jnp.log(dissim), fallback)
    if draw is not None:
        idx = draw(rng_key, logits, (n_local_trials,))
    elif n_local_trials == 1:
        idx = jax.random.categorical(rng_key, logits)[None]
    else:
        idx = jax.random.categorical(rng_key, logits, shape=(n_local_trials,))
    rows = select(idx)
    candidates = jnp.maximum(best[:, None], cosines(rows))
    loss = 1.0 - candidates if weights is None else weights[:, None] * (1.0 - candidates)
    pick = 0 if n_local_trials == 1 else jnp.argmin(jnp.sum(loss, axis=0))
    return rows[pick], candidates[:, pick]


def init_spherical_kmeanspp(
    rng_key, data, n_components: int, n_local_trials: int | None = 1
) -> jax.Array:
    """Seed mean directions by spherical k-means++ ([3]_, cosine dissimilarity 1 - x.mu).

    The first seed is a uniform row; each next seed is a row drawn with probability
    proportional to its dissimilarity to the closest seed so far (:func:`kmeanspp_pick`,
    by :func:`inverse_cdf_rows` from uniforms drawn once with ``rng_key``). Large dense data
    are seeded from a uniform subsample of their rows (:func:`seeding_sample`).

    Parameters
    ----------
    rng_key : jax.Array
    data : DenseData, SparseData or bayesvmf._blocks.RowBlocks
    n_components : int
    n_local_trials : int or None, default 1
        Candidates per seed, the best kept (greedy k-means++); None means
        :func:`greedy_trials`, 2 + floor(ln K).

    Returns
    -------
    mu : jax.Array of shape (n_components, n_features)
    """
    data = seeding_sample(rng_key, data, n_components)
    n, d = data.shape
    trials = greedy_trials(n_components) if n_local_trials is None else int(n_local_trials)
    # every uniform of the seeding in one draw: u[0, 0] the first seed, u[k] seed k's candidates
    u = jax.random.uniform(rng_key, (n_components, trials), jnp.float64)
    first = jnp.minimum(jnp.floor(u[0, 0] * n).astype(jnp.int32), n - 1)
    mu0 = data.take_rows(first[None])
    mu = jnp.zeros((n_components, d), jnp.float64).at[0].set(mu0[0])
    best = data.dot(mu0.T)[:, 0]

    def body(k, carry):
        mu, best = carry

        def draw(_, logits, shape):
            return inverse_cdf_rows(u[k], logits)

        row, best = kmeanspp_pick(
            None, best, trials, lambda idx: data.take_rows(idx), lambda r: data.dot(r.T), draw=draw
        )
        return mu.at[k].set(row), best

    mu, _ = jax.lax.fori_loop(1, n_components, body, (mu, best))
    return mu


#: Seeding methods by name (the ``init`` options of the estimators).
INIT_METHODS = {
    "random": init_random_rows,
    "spherical-kmeans++": init_spherical_kmeanspp,
    "greedy-spherical-kmeans++": functools.partial(init_spherical_kmeanspp, n_local_trials=None),
}
