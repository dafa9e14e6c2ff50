"""Synthetic vMF mixtures: the simulation protocol of Rossi & Barbaro [1]_, section 4.1.

:func:`make_vmf_mixture` draws data sets from a vMF mixture:

1. draw ``20 K`` candidate directions uniformly on the sphere S^{d-1};
2. keep ``K`` of them, chosen greedily to minimise their pairwise inner products;
3. optionally sparsify them (a random subset of coordinates set to zero, renormalised);
4. choose a base concentration kappa for a target *overlap* (error rate of the crisp MAP
   assignments made with the true parameters), or take it as given;
5. jitter it per component, kappa_k ~ N(kappa, (0.025 kappa)^2);
6. adjust it for separability, kappa'_k = 2 kappa_k / (1 - max_{l != k} mu_k . mu_l)
   (eq. (39) of [1]_);

and then draws the labels from the mixture weights and each observation from its
component with :class:`bayesvmf.distribution.VonMisesFisher`.
:func:`make_temporal_vmf_mixture` draws time-indexed data whose means drift (the setting of
the temporal mixture), and :func:`mixture_overlap` estimates the overlap of step 4. The
public names are re-exported by :mod:`bayesvmf.data` (and :mod:`bayesvmf.datasets`), the
place to import them from.

Symbols
-------
=========================  ========================================================
code                       symbol
=========================  ========================================================
``mean_directions``        mu_k, the unit mean direction of component k, (K, d)
``concentrations``         kappa'_k, the final concentrations, (K,)
``base_concentrations``    kappa_k, before the separability adjustment, (K,)
``weights``                alpha_k, the mixture weights, (K,)
``overlap``                error rate of the crisp MAP assignments, true parameters
=========================  ========================================================

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes", Neurocomputing (journal version of the ESANN 2021 paper), section 4.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from bayesvmf import _compile_cache
from bayesvmf.distribution import VonMisesFisher
from bayesvmf.special import log_vmf_normalizer

__all__ = [
    "VMFMixtureSample",
    "make_temporal_vmf_mixture",
    "make_vmf_mixture",
    "mixture_overlap",
]


@dataclass(frozen=True)
class VMFMixtureSample:
    """A data set drawn by :func:`make_vmf_mixture`, with the parameters that made it.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
        The observations, float64 rows of unit norm (to about 1e-16).
    labels : ndarray of shape (n_samples,)
        The component each row was drawn from, int64 in ``[0, n_components)``.
    mean_directions : ndarray of shape (n_components, n_features)
        The unit mean directions mu_k (sparse if ``sparsity > 0``).
    concentrations : ndarray of shape (n_components,)
        The concentrations kappa'_k the rows were drawn with (after the jitter and the
        separability adjustment).
    weights : ndarray of shape (n_components,)
        The mixture weights alpha_k.
    base_concentrations : ndarray of shape (n_components,)
        The concentrations kappa_k after the jitter of step 5 and before the separability
        adjustment of eq. (39) of [1]_ (equal to ``concentrations`` when the adjustment is
        off).
    """

    X: np.ndarray
    labels: np.ndarray
    mean_directions: np.ndarray
    concentrations: np.ndarray
    weights: np.ndarray
    base_concentrations: np.ndarray


def _as_key(random_state: Any) -> jax.Array:
    """Turn ``random_state`` (None, int >= 0, np.random.Generator or a JAX key) into a key.

    Call inside ``jax.enable_x64(True)``. A Generator is advanced by one draw, so reusing
    it gives a new data set each time, as in scikit-learn.
    """
    if isinstance(random_state, jax.Array) and jnp.issubdtype(
        random_state.dtype, jax.dtypes.prng_key
    ):
        return random_state
    if random_state is None:
        seed = int(np.random.default_rng().integers(2**32))
    elif isinstance(random_state, np.random.Generator):
        seed = int(random_state.integers(2**32))
    elif isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        seed = int(random_state)
        if not 0 <= seed < 2**63:
            raise ValueError(f"random_state must be in [0, 2**63), got {random_state}")
    else:
        raise ValueError(
            "random_state must be None, a non-negative int, a numpy.random.Generator or a "
            f"JAX PRNG key, got {random_state!r}"
        )
    return jax.random.key(seed)


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _greedy_separated(candidates: np.ndarray, n_components: int) -> np.ndarray:
    """Pick ``n_components`` candidates with small pairwise inner products (step 2).

    Greedy, as in [1]_ (section 4.1, step 2): start from the pair with the smallest inner
    product, then repeatedly add the candidate whose *largest* inner product with the
    vectors already chosen is smallest. The max (rather than the sum) is the quantity the
    separability adjustment of eq. (39) looks at, so this is the greedy choice that keeps
    each component's nearest neighbour far away.
    """
    if n_components == 1:
        return np.array([0])  # the candidates are i.i.d. uniform: any one will do
    gram = candidates @ candidates.T
    np.fill_diagonal(gram, np.inf)
    first, second = np.unravel_index(np.argmin(gram), gram.shape)
    chosen = [int(first), int(second)]
    worst = np.maximum(gram[first], gram[second])  # max inner product with the chosen set
    for _ in range(n_components - 2):
        worst[chosen] = np.inf
        nxt = int(np.argmin(worst))
        chosen.append(nxt)
        worst = np.maximum(worst, gram[nxt])
    return np.array(chosen)


def _max_other_inner_product(mean_directions: np.ndarray) -> np.ndarray:
    """max_{l != k} mu_k . mu_l for each k; -1 when K = 1 (no other component)."""
    gram = mean_directions @ mean_directions.T
    np.fill_diagonal(gram, -np.inf)
    # With K = 1 there is no l != k; -1 (an antipodal neighbour, the best separation
    # possible) makes eq. (39) the identity, kappa'_k = kappa_k.
    return np.maximum(gram.max(axis=1), -1.0)


def _separability_adjustment(kappa: np.ndarray, mean_directions: np.ndarray) -> np.ndarray:
    """Eq. (39) of [1]_: kappa'_k = 2 kappa_k / (1 - max_{l != k} mu_k . mu_l).

    [1]_ gives no derivation. For concentrated components the angular spread is about
    sqrt(d / kappa), so keeping a component equally distinguishable from a mean at angle
    theta needs kappa proportional to 1 / theta^2 ~ 1 / (2 (1 - cos theta)): the factor
    of eq. (39), which is 1 for an antipodal nearest mean and 2 for an orthogonal one.
    It makes a base kappa mean a similar overlap however close the nearest mean is.
    """
    return 2.0 * kappa / (1.0 - _max_other_inner_product(mean_directions))


def _sparsify(rng: np.random.Generator, mean_directions: np.ndarray, n_zero: int) -> np.ndarray:
    """Set ``n_zero`` random coordinates of each mean to zero and renormalise (step 3).

    [1]_ (section 4.1, step 3) zeroes "a randomly selected subset" of coordinates (not
    the smallest ones) and makes sure the means stay nonzero and distinct: each mean keeps
    ``n_features - n_zero >= 1`` coordinates of a vector with no zero coordinate (almost
    surely), and subsets are redrawn until the K means are distinct.
    """
    n_components, n_features = mean_directions.shape
    for _ in range(100):
        # an independent uniformly random subset of n_zero coordinates for each mean
        order = np.argsort(rng.uniform(size=(n_components, n_features)), axis=1)
        sparse = mean_directions.copy()
        np.put_along_axis(sparse, order[:, :n_zero], 0.0, axis=1)
        sparse /= np.linalg.norm(sparse, axis=1, keepdims=True)
        if n_components == 1 or _max_other_inner_product(sparse).max() < 1.0 - 1e-12:
            return sparse
    raise ValueError(
        f"could not draw {n_components} distinct means with {n_zero} of {n_features} "
        "coordinates set to zero (100 attempts); lower sparsity"
    )


def _chunk_rows(n_features: int) -> int:
    """Rows drawn per sampler call: a fixed number for each dimension.

    Every draw (the data and the Monte Carlo of the overlap) goes through
    ``VonMisesFisher(...).sample`` on batches of exactly this many rows, so the jitted
    sampler compiles once per dimension and process, not once per ``n_samples`` or per
    calibration step (compiling the rejection loop takes seconds). 2**21 floats (16 MB in
    float64) per batch, between 16 and 4096 rows.
    """
    return max(16, min(4096, 2**21 // n_features))


def _draw_rows(key, mean_directions, concentrations, components):
    """Yield ``(components_chunk, X_chunk)``: one vMF draw per entry of ``components``.

    Chunk ``i`` uses the key ``fold_in(key, i)``, so the draws of a chunk do not depend
    on how many chunks follow. The last chunk is padded (with component 0) to the
    fixed batch size and cut back.
    """
    n_features = mean_directions.shape[1]
    rows = _chunk_rows(n_features)
    # gathered in NumPy: eager JAX ops on new shapes would each compile
    mu = np.asarray(mean_directions, dtype=np.float64)
    kappa = np.asarray(concentrations, dtype=np.float64)
    for i, start in enumerate(range(0, len(components), rows)):
        comp = components[start : start + rows]
        padded = np.zeros(rows, dtype=np.int64)
        padded[: len(comp)] = comp
        vmf = VonMisesFisher(mu[padded], kappa[padded])
        x = vmf.sample(jax.random.fold_in(key, i))
        yield comp, np.asarray(x)[: len(comp)]


@_compile_cache.jit
def _misassigned(x, components, mean_directions, concentrations, log_weights):
    """Flag the draws whose MAP component (with the true parameters) is not their own."""
    n_features = mean_directions.shape[1]
    # log alpha_l + log C_d(kappa_l) + kappa_l mu_l . x for every draw and every l
    scores = (
        (x @ mean_directions.T) * concentrations
        + log_vmf_normalizer(n_features, concentrations)
        + log_weights
    )
    return jnp.argmax(scores, axis=-1) != components


def _overlap(key, mean_directions, concentrations, weights, n_draws):
    """Monte Carlo crisp error rate; the same ``key`` gives common random numbers."""
    n_components, n_features = mean_directions.shape
    rows = _chunk_rows(n_features)
    # whole batches, and at least one draw per component
    n_total = rows * math.ceil(max(n_draws, n_components) / rows)
    # Components in turn (stratified): n_total / K draws each, weighted by alpha_k below.
    components = np.arange(n_total) % n_components
    mu = np.asarray(mean_directions, dtype=np.float64)
    kappa = np.asarray(concentrations, dtype=np.float64)
    log_w = np.log(np.asarray(weights, dtype=np.float64))
    errors = np.zeros(n_components)
    for comp, x in _draw_rows(key, mean_directions, concentrations, components):
        wrong = np.asarray(_misassigned(x, comp, mu, kappa, log_w))
        errors += np.bincount(comp, weights=wrong, minlength=n_components)
    draws = np.bincount(components, minlength=n_components)
    # sum_k alpha_k P(MAP label != k | x ~ vMF(mu_k, kappa_k))
    return float(np.dot(weights, errors / draws))


def mixture_overlap(
    mean_directions: Any,
    concentrations: Any,
    weights: Any = None,
    *,
    n_draws: int = 100_000,
    random_state: Any = None,
) -> float:
    r"""Estimate the overlap of a vMF mixture: the error rate of its MAP assignments.

    The overlap of [1]_ (section 4.1, step 4) is the error rate of the crisp assignments
    made with the true parameters,

    .. math::

        \sum_k \alpha_k \Pr\big(\arg\max_l\, [\log\alpha_l + \log C_d(\kappa_l)
        + \kappa_l \mu_l^\top x] \ne k \;\big|\; x \sim \mathrm{vMF}(\mu_k, \kappa_k)\big),

    estimated by Monte Carlo with about ``n_draws / K`` draws from each component
    (rounded up to whole chunks). Its standard error is about
    ``sqrt(overlap / n_draws)``: 5e-4 for an overlap of 2.5 % with the default 1e5 draws.

    Parameters
    ----------
    mean_directions : array-like of shape (n_components, n_features)
        Unit mean directions mu_k.
    concentrations : array-like of shape (n_components,)
        Concentrations kappa_k >= 0.
    weights : array-like of shape (n_components,) or None, default=None
        Mixture weights alpha_k; None means equal weights.
    n_draws : int, default=100_000
        Total number of Monte Carlo draws.
    random_state : None, int, numpy.random.Generator or JAX key, default=None
        Seed of the draws; the same seed gives the same value.

    Returns
    -------
    float
        The estimated overlap, in [0, 1).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.data import mixture_overlap
    >>> mu = np.eye(2, 5)  # two components at right angles in R^5
    >>> near = mixture_overlap(mu, [1.0, 1.0], n_draws=20_000, random_state=0)
    >>> far = mixture_overlap(mu, [50.0, 50.0], n_draws=20_000, random_state=0)
    >>> bool(0.2 < near < 0.5 and far < 1e-3)
    True
    """
    mu = np.asarray(mean_directions, dtype=np.float64)
    kappa = np.broadcast_to(np.asarray(concentrations, dtype=np.float64), mu.shape[:1])
    w = np.full(mu.shape[0], 1.0 / mu.shape[0]) if weights is None else np.asarray(weights)
    with jax.enable_x64(True):
        return _overlap(_as_key(random_state), mu, kappa, w, _check_int(n_draws, "n_draws", 1))


def _calibrate_base_kappa(key, mean_directions, jitter, weights, overlap, adjust, n_draws):
    """Find the base kappa whose final mixture has the requested overlap (step 4 of [1]_).

    The overlap of the final mixture (jitter and separability adjustment applied) decreases
    with the base kappa, from ``1 - max(weights)`` at kappa = 0 to 0. Each phase reuses
    one key for all its evaluations (common random numbers), so the Monte Carlo estimate
    moves little between nearby kappas and Brent's method sees a nearly monotone function.

    Sampling dominates the cost, so the search runs in two phases: a coarse one with an
    eighth of the draws (double an upper end until the overlap falls below the target,
    then Brent to 1 %), and a fine one with all the draws in a bracket grown geometrically
    around the coarse root (usually one or two evaluations), then Brent to a relative
    1e-3. That is below the Monte Carlo error of the result: near the paper's values
    d log(overlap) / d log(kappa) is about -5, so an overlap known to 2 % (1e5 draws at
    2.5 %) fixes kappa to about 0.4 %.
    """
    max_overlap = 1.0 - float(np.max(weights))  # kappa = 0: the heaviest component wins

    def make_excess(phase_key, n):
        cache = {0.0: max_overlap - overlap}

        def excess(base: float) -> float:
            if base not in cache:
                kappa = base * jitter
                if adjust:
                    kappa = _separability_adjustment(kappa, mean_directions)
                rate = _overlap(phase_key, mean_directions, kappa, weights, n)
                cache[base] = rate - overlap
            return cache[base]

        return excess

    key_coarse, key_fine = jax.random.split(key)
    coarse = make_excess(key_coarse, min(n_draws, max(n_draws // 8, 2_000)))
    low, high = 0.0, 1.0
    while coarse(high) > 0.0:
        low, high = high, 2.0 * high
        if high > 1e7:
            raise ValueError(
                f"overlap={overlap} needs a concentration above 1e7, beyond what a Monte "
                f"Carlo estimate with n_overlap_draws={n_draws} can resolve; ask for a "
                "larger overlap"
            )
    guess = scipy.optimize.brentq(coarse, low, high, rtol=1e-2)

    fine = make_excess(key_fine, n_draws)
    factor = 1.05
    if fine(guess) > 0.0:
        low, high = guess, guess * factor
        while fine(high) > 0.0:
            low, high, factor = high, high * factor, factor * factor
    else:
        low, high = guess / factor, guess
        while fine(low) <= 0.0:
            low, high, factor = low / factor, low, factor * factor
    return scipy.optimize.brentq(fine, low, high, rtol=1e-3)


def make_vmf_mixture(
    n_samples: int,
    n_features: int,
    n_components: int,
    *,
    kappa: Any = None,
    overlap: float | None = None,
    sparsity: float = 0.0,
    weights: Any = None,
    kappa_noise: float = 0.025,
    separability_adjustment: bool = True,
    n_candidates: int | None = None,
    n_overlap_draws: int = 100_000,
    random_state: Any = None,
) -> VMFMixtureSample:
    r"""Draw a data set from a vMF mixture built by the simulation protocol of [1]_.

    The parameters follow section 4.1 of [1]_:

    1. ``n_candidates`` (default ``20 K``) directions uniform on the sphere S^{d-1};
    2. the K means mu_k picked from them greedily, minimising their largest pairwise
       inner product (start from the closest-to-antipodal pair, then add the candidate
       whose largest inner product with those chosen is smallest);
    3. if ``sparsity > 0``, ``round(sparsity * n_features)`` coordinates of each mean,
       chosen at random (as in [1]_, not the smallest ones), set to zero, renormalised,
       redrawn until the means are distinct;
    4. the base concentration kappa: given, or calibrated so that the *final* mixture has
       the requested ``overlap`` (the error rate of the MAP assignments made with the true
       parameters, :func:`mixture_overlap`), by a Monte Carlo estimate with common random
       numbers and a bracketed root find (Brent);
    5. jitter, kappa_k = kappa (1 + ``kappa_noise`` e_k) with e_k ~ N(0, 1), i.e.
       N(kappa, (0.025 kappa)^2) with the paper's default;
    6. the separability adjustment of eq. (39) of [1]_,

       .. math::

           \kappa'_k = \frac{2 \kappa_k}{1 - \max_{l \ne k} \mu_k^\top \mu_l};

    then labels z_i ~ Categorical(weights) and x_i ~ vMF(mu_{z_i}, kappa'_{z_i}), drawn
    with :class:`bayesvmf.distribution.VonMisesFisher`. [1]_ uses equal weights (the
    default) and, at d = 100 with K = 4, a base kappa of 17.34 for an overlap of 2.5 % and
    15.09 for 5 % (and 5.37 for 5 % at d = 10, section 4.2). The means are random, so a
    calibration lands near these values, not on them: with dense means, no jitter and the
    default 1e5 draws we measured 17.0-17.5 and 14.9-15.2 over four seeds at d = 100, and
    5.2-5.5 at d = 10 (see ``tests/test_data.py``). A calibration costs 10-20 overlap
    evaluations, i.e. a few million vMF draws.

    Parameters
    ----------
    n_samples : int
        Number of observations, >= 1.
    n_features : int
        Dimension d of the ambient space, >= 2.
    n_components : int
        Number of components K, >= 1.
    kappa : float or array-like of shape (n_components,), optional
        Base concentration(s), >= 0, before jitter and adjustment. Exactly one of
        ``kappa`` and ``overlap`` must be given.
    overlap : float, optional
        Target error rate of the MAP assignments with the true parameters, in
        ``(0, 1 - max(weights))``. A single base kappa is calibrated for it.
    sparsity : float, default=0.0
        Fraction of the coordinates of each mean set to zero, in [0, 1); it must leave at
        least one nonzero coordinate.
    weights : array-like of shape (n_components,), optional
        Mixture weights, positive, summing to 1 (to 1e-8); default equal weights.
    kappa_noise : float, default=0.025
        Relative standard deviation of the per-component jitter of kappa (step 5 of
        [1]_); 0 gives every component the base kappa.
    separability_adjustment : bool, default=True
        Apply eq. (39) of [1]_. With K = 1 it is the identity.
    n_candidates : int, optional
        Number of candidate directions; default ``20 * n_components`` as in [1]_.
    n_overlap_draws : int, default=100_000
        Monte Carlo draws per overlap evaluation in the calibration: the overlap of the
        result has a Monte Carlo error of about ``sqrt(overlap / n_overlap_draws)``.
    random_state : None, int, numpy.random.Generator or JAX key, default=None
        The same int (or key) gives a bit-identical data set. The parameters and the
        draws use separate keys, so changing ``n_samples`` or ``sparsity`` keeps the
        (dense) means.

    Returns
    -------
    VMFMixtureSample
        ``X`` (n_samples, n_features) float64 unit rows, ``labels`` (n_samples,),
        ``mean_directions`` (n_components, n_features), ``concentrations``
        (n_components,), ``weights`` (n_components,) and ``base_concentrations``
        (n_components,).

    Raises
    ------
    ValueError
        On a bad parameter; the message names it and its value.

    References
    ----------
    .. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
       prototypes", section 4.1.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.data import make_vmf_mixture
    >>> data = make_vmf_mixture(50, 5, 3, kappa=20.0, sparsity=0.2, random_state=0)
    >>> data.X.shape, data.labels.shape, data.mean_directions.shape
    ((50, 5), (50,), (3, 5))
    >>> bool(np.allclose(np.linalg.norm(data.X, axis=1), 1.0))
    True
    >>> (data.mean_directions == 0).sum(axis=1).tolist()  # round(0.2 * 5) zeros per mean
    [1, 1, 1]
    """
    n_samples = _check_int(n_samples, "n_samples", 1)
    n_features = _check_int(n_features, "n_features", 2)
    n_components = _check_int(n_components, "n_components", 1)
    n_overlap_draws = _check_int(n_overlap_draws, "n_overlap_draws", 1)
    n_candidates = 20 * n_components if n_candidates is None else n_candidates
    n_candidates = _check_int(n_candidates, "n_candidates", n_components)

    if weights is None:
        w = np.full(n_components, 1.0 / n_components)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n_components,):
            raise ValueError(f"weights must have shape ({n_components},), got shape {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(f"weights must be positive and finite, got {w.tolist()}")
        if abs(w.sum() - 1.0) > 1e-8:
            raise ValueError(f"weights must sum to 1, got sum {w.sum():.10g} ({w.tolist()})")
        w = w / w.sum()  # remove the rounding left in a user's weights

    if not (isinstance(sparsity, float | int | np.floating) and 0.0 <= sparsity < 1.0):
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity!r}")
    n_zero = int(round(sparsity * n_features))
    if n_zero > n_features - 1:
        raise ValueError(
            f"sparsity={sparsity} zeroes {n_zero} of n_features={n_features} coordinates; "
            "each mean needs at least one nonzero coordinate"
        )
    if not (np.isfinite(kappa_noise) and kappa_noise >= 0):
        raise ValueError(f"kappa_noise must be finite and >= 0, got {kappa_noise!r}")

    if (kappa is None) == (overlap is None):
        raise ValueError(
            f"give exactly one of kappa and overlap, got kappa={kappa!r}, overlap={overlap!r}"
        )
    if kappa is not None:
        base = np.asarray(kappa, dtype=np.float64)
        if base.ndim > 1 or base.size not in (1, n_components):
            raise ValueError(
                f"kappa must be a scalar or have shape ({n_components},), got shape {base.shape}"
            )
        if not np.all(np.isfinite(base)) or np.any(base < 0):
            raise ValueError(f"kappa must be finite and >= 0, got {kappa!r}")
        base = np.broadcast_to(base.reshape(-1), (n_components,))
    else:
        max_overlap = 1.0 - w.max()
        if not 0.0 < overlap < max_overlap:
            raise ValueError(
                f"overlap must be in (0, 1 - max(weights)) = (0, {max_overlap:.6g}), "
                f"got {overlap!r}"
            )

    with jax.enable_x64(True):
        key = _as_key(random_state)
        # The vMF draws use JAX keys; the parameters and labels (small arrays of shapes
        # that change with every call) come from NumPy generators seeded from the key:
        # eager JAX random calls would compile for each new shape. One stream per step,
        # split up front, so that each step's draws do not depend on the options of the
        # others (e.g. the dense means are the same for every sparsity).
        k_params, k_overlap, k_x = jax.random.split(key, 3)
        seed = np.asarray(jax.random.bits(k_params, (4,), jnp.uint32))
        rng_means, rng_sparse, rng_jitter, rng_labels = (
            np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)
        )

        # steps 1-2: candidates uniform on the sphere, K greedily separated among them
        candidates = rng_means.standard_normal((n_candidates, n_features))
        candidates /= np.linalg.norm(candidates, axis=1, keepdims=True)
        mu = candidates[_greedy_separated(candidates, n_components)]
        # step 3: sparse means
        if n_zero > 0:
            mu = _sparsify(rng_sparse, mu, n_zero)

        # step 5's jitter factors, drawn before step 4 so that the calibration sees them;
        # clipped at 0 (reached only 40 standard deviations out with the default).
        jitter = np.maximum(1.0 + kappa_noise * rng_jitter.standard_normal(n_components), 0.0)
        # step 4: the base kappa
        if kappa is None:
            base = _calibrate_base_kappa(
                k_overlap, mu, jitter, w, overlap, separability_adjustment, n_overlap_draws
            )
        base_kappa = base * jitter
        # step 6: eq. (39)
        final_kappa = (
            _separability_adjustment(base_kappa, mu) if separability_adjustment else base_kappa
        )

        labels = rng_labels.choice(n_components, size=n_samples, p=w).astype(np.int64)
        X = np.concatenate([np.asarray(x) for _, x in _draw_rows(k_x, mu, final_kappa, labels)])
    # The sampler's rows are unit norm to rounding; one more division makes them exactly
    # what check_directional(normalize=False) expects, whatever the sampler's last step.
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return VMFMixtureSample(
        X=X,
        labels=labels,
        mean_directions=mu,
        concentrations=np.asarray(final_kappa, dtype=np.float64),
        weights=w,
        base_concentrations=np.asarray(base_kappa, dtype=np.float64),
    )


def make_temporal_vmf_mixture(
    n_samples_per_time: int,
    *,
    n_features: int,
    n_components: int,
    n_times: int,
    kappa: float = 50.0,
    drift: float = 100.0,
    weights=None,
    random_state=None,
):
    """Draw temporal data from the T-vMFmix model with drifting cluster means.

    mu_{0,k} uniform on the sphere, mu_{t,k} ~ vMF(mu_{t-1,k}, drift) (the model's C0),
    labels ~ Cat(weights), x ~ vMF(mu_{t,z}, kappa).

    Parameters
    ----------
    n_samples_per_time : int
        Rows drawn at each time step.
    n_features, n_components, n_times : int
    kappa : float or array of shape (n_components,), default 50.0
    drift : float, default 100.0
        Concentration of each step of the mean random walk (smaller: faster drift).
    weights : array of shape (n_components,), optional
        Mixing weights (default uniform).
    random_state : None or int

    Returns
    -------
    X : ndarray of shape (n_times * n_samples_per_time, n_features)
    times : ndarray of int64 of shape (n_times * n_samples_per_time,)
    labels : ndarray of int64
    means : ndarray of shape (n_times, n_components, n_features)
    """
    for name, value, low in (
        ("n_samples_per_time", n_samples_per_time, 1),
        ("n_features", n_features, 2),
        ("n_components", n_components, 1),
        ("n_times", n_times, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an int >= {low}; got {value!r}.")
    # checked here, so that a bad value is named (not reported by the vMF sampler or NumPy)
    bad_kappa = f"kappa must be a positive finite number or {n_components} of them; got {kappa!r}."
    try:
        kappas = np.asarray(kappa, np.float64)
    except (TypeError, ValueError):
        raise ValueError(bad_kappa) from None
    if kappas.shape not in ((), (n_components,)) or not np.all(np.isfinite(kappas) & (kappas > 0)):
        raise ValueError(bad_kappa)
    kappas = np.broadcast_to(kappas, (n_components,))
    real = isinstance(drift, int | float | np.integer | np.floating) and not isinstance(drift, bool)
    if not (real and np.isfinite(drift) and drift > 0):
        raise ValueError(f"drift must be a positive finite number; got {drift!r}.")
    if weights is None:
        w = np.full(n_components, 1.0 / n_components)
    else:
        w = np.asarray(weights, np.float64)
        if w.shape != (n_components,) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
            raise ValueError(
                f"weights must be {n_components} nonnegative numbers summing to 1; got {weights!r}."
            )
    rng = np.random.default_rng(random_state)
    with jax.enable_x64(True):
        key = jax.random.key(int(rng.integers(2**31)))
        keys = jax.random.split(key, 2 * n_times)
        start = rng.normal(size=(n_components, n_features))
        means = [start / np.linalg.norm(start, axis=1, keepdims=True)]
        for t in range(1, n_times):
            step = VonMisesFisher(jnp.asarray(means[-1]), jnp.float64(drift))
            means.append(np.asarray(step.sample(keys[t])))
        means = np.stack(means)
        labels = rng.choice(n_components, size=(n_times, n_samples_per_time), p=w)
        X = []
        for t in range(n_times):
            dist = VonMisesFisher(jnp.asarray(means[t][labels[t]]), jnp.asarray(kappas[labels[t]]))
            X.append(np.asarray(dist.sample(keys[n_times + t])))
    times = np.repeat(np.arange(n_times, dtype=np.int64), n_samples_per_time)
    return np.concatenate(X), times, labels.ravel().astype(np.int64), means
