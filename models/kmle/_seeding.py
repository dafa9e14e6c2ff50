r"""DP-k-MLE++ (Algorithm 3 of [1]_) and the greedy gain rule that chooses K.

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.special

from bayesvmf.models.kmle._kernel import WISHART, Family

#: DP-k-MLE++ "gain" rule: candidates per addition, Lloyd iterations per refinement.
_GAIN_CANDIDATES = 3
_LLOYD_MAX_ITER = 50


def _wishart_divergence_to(stats_np, centres):
    """Burg divergences tr(M_j^{-1} X_i) - log|M_j^{-1} X_i| - d, shape (n, k).

    The Bregman divergence of the fixed-n Wishart sub-family up to the factor n/2 (module
    docstring); ``stats_np`` rows are (log|X_i|, vec X_i), ``centres`` has shape (k, d, d).
    """
    k, d, _ = centres.shape
    chol = np.linalg.cholesky(centres)
    log_det = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
    precision = np.linalg.solve(centres, np.broadcast_to(np.eye(d), centres.shape))  # a solve
    trace = stats_np[:, 1:] @ precision.reshape(k, -1).T
    return np.maximum(trace - stats_np[:, :1] + log_det - d, 0.0)


def _wishart_point(stats_np, i):
    d = math.isqrt(stats_np.shape[1] - 1)
    return stats_np[i, 1:].reshape(d, d)


def _wishart_centroids(stats_np, labels, k):
    """Cluster means of X: the right-sided Bregman centroids of the Burg divergence."""
    d = math.isqrt(stats_np.shape[1] - 1)
    sums = np.zeros((k, d * d))
    np.add.at(sums, labels, stats_np[:, 1:])
    return (sums / np.bincount(labels, minlength=k)[:, None]).reshape(k, d, d)


def _vmf_divergence_to(X, centres):
    """1 - mu_j . x_i, shape (n, k): the fixed-kappa sub-family's divergence up to kappa."""
    return np.maximum(1.0 - np.asarray(X @ centres.T), 0.0)


def _vmf_point(X, i):
    return X[i].toarray().ravel() if scipy.sparse.issparse(X) else np.asarray(X[i])


def _vmf_centroids(X, labels, k):
    """Normalised cluster sums: the spherical k-means centroids (the vMF mean directions)."""
    n = X.shape[0]
    member = scipy.sparse.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(k, n))
    sums = member @ X
    sums = sums.toarray() if scipy.sparse.issparse(sums) else np.asarray(sums)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    # a cluster whose directions cancel has no mean direction: a zero centre gives every
    # point divergence 1, the value for a direction orthogonal to all of them
    return sums / np.where(norms > 0, norms, 1.0)


class SeedingGeometry(NamedTuple):
    """The Bregman divergence that DP-k-MLE++ works with, as three host (NumPy) callables.

    ``point(i)`` is the centre at observation ``i``, ``centroids(labels, k)`` the Bregman
    centroids of a partition into ``k`` non-empty clusters (shape ``(k, ...)``), and
    ``divergence(centres)`` the ``(n_samples, k)`` divergences :math:`B(y_i : c_j)`.
    """

    point: Any
    centroids: Any
    divergence: Any


def _seeding_geometry(family: Family, host) -> SeedingGeometry:
    if family is WISHART:
        return SeedingGeometry(
            partial(_wishart_point, host),
            partial(_wishart_centroids, host),
            partial(_wishart_divergence_to, host),
        )
    return SeedingGeometry(
        partial(_vmf_point, host), partial(_vmf_centroids, host), partial(_vmf_divergence_to, host)
    )


def _point_divergence(geometry: SeedingGeometry, s):
    """B(y_i : y_s) for every i: the divergence to the seed point y_s (Algorithm 3, line 5)."""
    return geometry.divergence(geometry.point(s)[None])[:, 0]


def _wishart_seed_divergence(stats_np, s):
    """Burg divergence tr(X_s^{-1} X_i) - log|X_s^{-1} X_i| - d from every X_i to X_s."""
    return _point_divergence(_seeding_geometry(WISHART, stats_np), s)


def _bregman_kmeans(geometry: SeedingGeometry, centres, max_iter):
    """Lloyd's iterations for the right-sided Bregman divergence (the centroid is the mean).

    Returns (centres, labels, divergence of each point to its centre), or None when a
    cluster empties (the new centre captured no point). The loss never increases.
    """
    k = len(centres)
    div = geometry.divergence(centres)
    labels = div.argmin(1)
    for _ in range(max_iter):
        if np.bincount(labels, minlength=k).min() == 0:
            return None
        centres = geometry.centroids(labels, k)
        div = geometry.divergence(centres)
        new = div.argmin(1)
        if np.array_equal(new, labels):
            break
        labels = new
    if np.bincount(labels, minlength=k).min() == 0:
        return None
    return centres, labels, div[np.arange(len(labels)), labels]


def dp_kmle_gain(
    geometry: SeedingGeometry,
    n_samples: int,
    rng: np.random.Generator,
    *,
    lam,
    n_candidates: int = _GAIN_CANDIDATES,
    max_iter: int = _LLOYD_MAX_ITER,
):
    r"""Choose K by the loss gain of an added cluster under fitted centroids (DP-k-MLE++, "gain").

    A variant of Algorithm 3 of [1]_ that measures what a new cluster *removes* from the
    :math:`\mathrm{kmeans}_{F^*}` loss of eq. (6) rather than one point's share of it, and
    measures it against fitted clusters rather than single seed points. The first seed is
    uniform (line 1); with :math:`k` clusters, Bregman k-means (Lloyd's iterations; the
    right-sided Bregman centroid of a cluster is its mean) gives the loss
    :math:`L_k = \sum_i \min_j B(y_i : c_j)`. ``n_candidates`` points are drawn with
    probability :math:`p_i` of line 5 (as in greedy k-means++), each is added as a
    :math:`(k+1)`-th centre and refined by Lloyd's iterations, and the best is kept if

    .. math::

        L_k - L_{k+1} > \lambda L_k ,

    i.e. if it removes more than a fraction :math:`\lambda` of the current loss; otherwise
    the seeding stops. This is DP-means [4]_ (add a cluster when it pays more than a
    penalty) with a penalty relative to the current loss, so it does not depend on the scale
    of the data. :math:`\lambda \ge 1` gives one cluster, :math:`\lambda \to 0` many. A
    candidate whose cluster empties during the refinement is rejected.

    Parameters
    ----------
    geometry : SeedingGeometry
        The divergence, its centroids and the centre at an observation.
    n_samples : int
    rng : numpy.random.Generator
    lam : float
        Threshold :math:`\lambda` in (0, 1].
    n_candidates : int, default=3
        Candidates drawn per addition; the one with the lowest refined loss is tried.
    max_iter : int, default=50
        Maximum number of Lloyd iterations per refinement.

    Returns
    -------
    seeds : ndarray of int
        The first seed and the candidates that opened clusters 2, ..., K.
    labels : ndarray of int of shape (n_samples,)
        The Bregman k-means partition with K clusters (the first assignment of line 3).

    Examples
    --------
    Two pairs on a line with the squared distance: the second cluster removes almost all of
    the loss, a third (splitting a pair) half of what is left.

    >>> import numpy as np
    >>> x = np.array([0.0, 0.1, 10.0, 10.1])
    >>> geometry = SeedingGeometry(
    ...     point=lambda i: x[i],
    ...     centroids=lambda labels, k: np.bincount(labels, x, k) / np.bincount(labels, None, k),
    ...     divergence=lambda centres: (x[:, None] - centres[None, :]) ** 2,
    ... )
    >>> seeds, labels = dp_kmle_gain(geometry, 4, np.random.default_rng(0), lam=0.6)
    >>> len(seeds), bool(labels[0] == labels[1] != labels[2] == labels[3])
    (2, True)
    >>> len(dp_kmle_gain(geometry, 4, np.random.default_rng(0), lam=0.4)[0])
    4
    """
    seeds = [int(rng.integers(n_samples))]
    centres, labels, best = _bregman_kmeans(geometry, geometry.point(seeds[0])[None], max_iter)
    while len(seeds) < n_samples:
        loss = best.sum()
        if not (loss > 0 and np.isfinite(loss)):
            break
        trial = None
        for c in rng.choice(n_samples, size=n_candidates, p=best / loss):
            grown = np.concatenate([centres, geometry.point(c)[None]])
            fitted = _bregman_kmeans(geometry, grown, max_iter)
            if fitted is not None and (trial is None or fitted[2].sum() < trial[3].sum()):
                trial = (int(c), *fitted)
        if trial is None or loss - trial[3].sum() <= lam * loss:
            break
        seeds.append(trial[0])
        _, centres, labels, best = trial
    return np.asarray(seeds), labels


def dp_kmle_pp(
    divergence, n_samples: int, rng: np.random.Generator, *, lam=None, n_components=None
):
    r"""Choose seeds by DP-k-MLE++ (Algorithm 3 of [1]_) or k-MLE++ (fixed K).

    The first seed is uniform (line 1). With ``lam``, a new seed is drawn with probability

    .. math::

        p_i = \frac{\min_j B(y_i : \eta_j)}{\sum_{i'} \min_j B(y_{i'} : \eta_j)}

    (line 5) as long as some :math:`p_i > \lambda` (line 7); with ``n_components``, seeds
    are drawn that way until there are ``n_components`` (k-MLE++ of [2]_). Chosen points
    have :math:`p_i = 0`, so seeds are distinct. Also returns the first assignment of
    line 3 (each point to its closest seed).

    Parameters
    ----------
    divergence : callable
        ``divergence(s) -> (n_samples,)``: :math:`B(y_i : y_s)` for every ``i``.
    n_samples : int
    rng : numpy.random.Generator
    lam : float, optional
        Threshold :math:`\lambda` in (0, 1].
    n_components : int, optional
        Number of seeds (exactly one of ``lam``, ``n_components`` is used; ``n_components``
        wins when both are given).

    Returns
    -------
    seeds : ndarray of int
        Indices of the seeds, in the order chosen.
    labels : ndarray of int of shape (n_samples,)
        Index of the closest seed of every point.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([0.0, 0.1, 10.0, 10.1])
    >>> seeds, labels = dp_kmle_pp(lambda s: (x - x[s]) ** 2, 4, np.random.default_rng(0),
    ...                            n_components=2)
    >>> len(seeds), bool(labels[0] == labels[1] != labels[2] == labels[3])
    (2, True)
    >>> len(dp_kmle_pp(lambda s: (x - x[s]) ** 2, 4, np.random.default_rng(0), lam=1.0)[0])
    1

    With ``lam``, the number of seeds depends on the shares of single points. Here no
    ``lam`` gives the two pairs: ``lam < 0.5`` ends with four seeds, and ``lam > 0.505``
    with one (see ``dp_rule`` in :class:`KMLEMixture`; :func:`dp_kmle_gain` finds them).
    """
    seeds = [int(rng.integers(n_samples))]
    best = divergence(seeds[0])
    labels = np.zeros(n_samples, dtype=np.int64)
    while True:
        if n_components is not None and len(seeds) >= n_components:
            break
        total = best.sum()
        if total <= 0 or not np.isfinite(total):
            if n_components is None:
                break
            # every point coincides with a seed: draw the rest uniformly among the others
            p = np.ones(n_samples)
            p[seeds] = 0.0
            p /= p.sum()
        else:
            p = best / total
            p[seeds] = 0.0
            if n_components is None and not np.any(p > lam):
                break
            p /= p.sum()
        s = int(rng.choice(n_samples, p=p))
        seeds.append(s)
        div = divergence(s)
        closer = div < best
        labels[closer] = len(seeds) - 1
        best = np.where(closer, div, best)
    labels[seeds] = np.arange(len(seeds))
    return np.asarray(seeds), labels
