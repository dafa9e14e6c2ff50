r"""k-MLE with Hartigan moves for Wishart and vMF mixtures, DP-k-MLE++, Cauchy-Schwarz.

A mixture :math:`m(x) = \sum_j w_j p_F(x; \theta_j)` of one exponential family
:math:`p_F(x; \theta) = \exp\{\langle t(x), \theta\rangle + k(x) - F(\theta)\}` is fitted by
k-MLE [1]_, [2]_: a hard partition :math:`z` of the sample and one maximum-likelihood
estimate per cluster, so that the *complete* log-likelihood

.. math::

    \ell(z, w, \theta) = \sum_{i=1}^N \log w_{z_i} + \log p_F(X_i; \theta_{z_i})

increases at every step (the minimisation of :math:`\mathrm{kmeans}_{F^*, \log w}` in sec.
3.1 of [1]_). Two families are provided: the Wishart distribution on symmetric positive
definite (SPD) matrices (sec. 2 of [1]_) and the von Mises-Fisher (vMF) distribution on the
unit sphere (through the package's shared :mod:`bayesvmf.special`, the functions that
:class:`bayesvmf.distribution.VonMisesFisher` uses).

Symbols (paper -> code)
-----------------------
=======================  ==================  ==========================================
paper [1]_               code                meaning
=======================  ==================  ==========================================
:math:`X_i`              ``X[i]``            an SPD matrix (Wishart) / unit vector (vMF)
:math:`n`                ``dof``             Wishart degrees of freedom, :math:`n > d-1`
:math:`S`                ``scale``           Wishart scale matrix
:math:`\theta_n`         ``theta_n``         :math:`(n - d - 1)/2`
:math:`\theta_S`         ``theta_s``         :math:`S^{-1}` (the precision)
:math:`t(X)`             ``stats``           :math:`(\log|X|, -X/2)`, stored as
                                             :math:`(\log|X|, X)` rows
:math:`F`                ``log_normalizer``  eq. (1)
:math:`\Psi_d`           multivariate        :math:`\frac{d}{dx}\log\Gamma_d(x)`
                         digamma
:math:`w_j`              ``weights``         mixture weights :math:`|C_j|/N`
:math:`z_i`              ``labels``          hard assignment
:math:`|C_j|`            ``counts``          cluster sizes
:math:`\lambda`          ``lam``             DP-k-MLE++ threshold (Algorithm 3)
:math:`\mu, \kappa`      ``mu, kappa``       vMF mean direction and concentration
=======================  ==================  ==========================================

Implementation choices
----------------------
* **Wishart MLE.** Algorithm 1 of [1]_ alternates the scale step (eq. 4) and the
  degrees-of-freedom step (eq. 5) and is provided as :func:`wishart_mle`. Substituting
  eq. (4) into eq. (5) shows that its fixed point solves the one-dimensional equation
  :math:`\Psi_d(n/2) - d\log(n/2) = \overline{\log|X|} - \log|\bar X|` (the right side is
  :math:`\le 0` by concavity of log-det, the left side increases from :math:`-\infty` to
  0). The alternation converges only linearly with rate :math:`1 - O(1/n)` (hundreds of
  sweeps for :math:`n \approx 100`), so k-MLE, which needs a cluster MLE after every
  transfer, solves that equation directly with the same bracketed root finder
  (:func:`wishart_mle_from_stats`); the tests check that both give the same estimate and
  that it maximises the likelihood. A cluster of identical matrices (e.g. a singleton)
  has an unbounded likelihood (:math:`n \to \infty`), so ``dof`` is capped at ``max_dof``;
  the capped value is the exact constrained maximiser (the profile likelihood in
  :math:`n` is unimodal), so monotonicity is kept.
* **Hartigan moves (Algorithm 2).** Sec. 3.2 of [1]_ replaces the unknown
  :math:`B_{F^*}(t(X_i) : \eta_j) - \log w_j` by :math:`-\log p_F(X_i; \theta_j) - \log
  w_j`, which is what is done here for both families. A move of :math:`X_i` to the
  cluster maximising :math:`\log w_j + \log p_F(X_i;\theta_j)` raises :math:`\ell` by the
  gain, re-estimating the two clusters' MLEs raises it further, and updating the weights
  after a pass raises it again, so :math:`\ell` never decreases (tested after every
  single transfer). Points of singleton clusters never move (line 11).
* **Where the work runs.** The whole inner loop of Algorithm 2 (random permutation, the
  next point that wants to move, the transfer, the incremental update of the two
  clusters' summed sufficient statistics, their MLEs and the two columns of the
  :math:`N \times K` log-likelihood matrix) is one jitted ``lax.while_loop``
  (:func:`hartigan_sweep`), run in float64 under a scoped ``jax.enable_x64(True)``. The
  visit order of the paper is kept exactly: all points whose best move does not improve
  are skipped at once with a vectorised mask, because the parameters do not change
  between their visits. Per transfer the cost is :math:`O(NK + Np)` vectorised work
  (:math:`p = 1 + d^2` for Wishart) and no host round-trip; a pass without transfers
  costs :math:`O(NK)`. The Wishart log-likelihood matrix is one matrix product of the
  rows :math:`(\log|X_i|, \mathrm{vec} X_i)` with the natural parameters, i.e. the
  exponential-family form :math:`\langle t(X), \theta\rangle - F(\theta)`. The seeding
  (Algorithm 3) is sequential in :math:`K` and small, so it runs in NumPy/SciPy.
* **Compilation.** XLA compiles one program per array shape, which costs seconds, while a
  fit of a few hundred matrices runs in milliseconds. The state is therefore padded to
  bucketed sizes, both rows (:math:`N`, at most 25 % more, minimum 16) and components
  (:math:`K`, minimum 4). Padded rows are masked out, and unused components have weight 0,
  so they never receive a point. Fits of nearby sizes (series of different lengths,
  DP-k-MLE++ choosing different K) then reuse one compiled program, and the result is
  unchanged. Input checks (Cholesky) and the Cauchy-Schwarz matrices run on the host in
  NumPy/LAPACK, vectorised over all pairs of mixtures.
* **Seeding divergence.** Algorithm 3 needs :math:`B_{F^*}` between single observations,
  where the full-family MLE is degenerate. Following sec. 3.2 of [1]_ ("mixing
  :math:`B_{F^*}` and :math:`B_{F^*_{\underline n}}`"), the seeding uses the Bregman
  divergence of the sub-family whose shape parameter is held fixed: for Wishart (fixed
  :math:`n`) that is :math:`\frac n2 [\mathrm{tr}(X_s^{-1}X_i) - \log|X_s^{-1}X_i| - d]`,
  for vMF (fixed :math:`\kappa`) :math:`\kappa(1 - \mu_s^\top x_i)`. The positive factor
  cancels in the shares :math:`p_i` of Algorithm 3, so no value of :math:`n` or
  :math:`\kappa` has to be chosen.
* **Choosing K (DP-k-MLE++).** Algorithm 3 as printed (``dp_rule="share"``) adds a seed
  while one point's share of the loss (6) exceeds :math:`\lambda`; measured on three
  synthetic Wishart clusters it recovers K = 3 for at most 25 % of the seeds for any
  :math:`\lambda` (``benchmarks/results/kmle.md``; the reason is under ``lam`` in
  :class:`KMLEMixture`). The default ``dp_rule="gain"`` (:func:`dp_kmle_gain`) keeps the
  greedy, D-sampled seeding and the loss (6) but changes what is compared with
  :math:`\lambda`: the fraction of the current loss that a new cluster removes, with the
  clusters refined by Bregman k-means (Lloyd's iterations; the cluster mean is the Bregman
  centroid of the same divergence) before and after the addition. This is the DP-means
  criterion [4]_ (a new cluster must pay for itself), made scale free. Against fitted
  centroids the divergence is no longer heavy-tailed, and a missing cluster removes a
  large fraction of the loss (at least 0.476 on the benchmark's three sets of 3 x 3
  matrices) while splitting a found one removes little (at most 0.129 there).
* **Cauchy-Schwarz divergence** (sec. 4 of [1]_) uses the square root in the
  denominator, :math:`CS(m:m') = -\log \int m m' / \sqrt{\int m^2 \int m'^2}`, so that
  :math:`CS(m:m) = 0`; the paper prints it without the root, which is neither zero on
  the diagonal nor scale invariant.
* **Never an explicit inverse.** Log-determinants come from Cholesky factors; the natural
  parameter :math:`\theta_S = N n (\sum_i X_i)^{-1}` of eq. (4) is formed from the
  Cholesky factor of the scatter by a triangular solve.

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
.. [2] F. Nielsen, "k-MLE: A fast algorithm for learning statistical mixture models",
   ICASSP, 2012, pp. 869-872.
.. [3] F. Nielsen, "Closed-form information-theoretic divergences for statistical
   mixtures", ICPR, 2012, pp. 1723-1726.
.. [4] B. Kulis and M. I. Jordan, "Revisiting k-means: new algorithms via Bayesian
   nonparametrics", ICML, 2012.
"""

from __future__ import annotations

import inspect
import math
import numbers
import warnings
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.special
from jax import lax
from jax.scipy.special import gammaln

from bayesvmf.exceptions import ConvergenceWarning

__all__ = [
    "KMLEMixture",
    "KMLEState",
    "SeedingGeometry",
    "SweepInfo",
    "cauchy_schwarz_divergence",
    "cauchy_schwarz_matrix",
    "dp_kmle_gain",
    "dp_kmle_pp",
    "hartigan_sweep",
    "inverse_multivariate_digamma",
    "multivariate_digamma",
    "nearest_neighbor_retrieval",
    "windowed_cross_products",
    "wishart_log_normalizer",
    "wishart_log_prob",
    "wishart_mle",
    "wishart_mle_from_stats",
    "wishart_natural_params",
    "wishart_sufficient_stats",
]

#: Lower limit of the root finder's variable t = log(x - (d-1)/2): x - (d-1)/2 = 2e-22.
_T_LO = -50.0
_ROOT_MAX_ITER = 200
#: Random visit orders handed to one call of the jitted inner loop (a static shape).
_PASSES_PER_CALL = 8
#: Smallest padded sizes (rows, components) of the k-MLE state; see ``_bucket``.
_MIN_ROWS = 16
_MIN_COMPONENTS = 4
#: DP-k-MLE++ "gain" rule: candidates per addition, Lloyd iterations per refinement.
_GAIN_CANDIDATES = 3
_LLOYD_MAX_ITER = 50


# ---------------------------------------------------------------------------------------------
# Bracketed root finder and the multivariate digamma function
# ---------------------------------------------------------------------------------------------


def _solve_increasing(fun, target, t_lo, t_hi, max_iter=_ROOT_MAX_ITER):
    """Solve ``fun(t) = target`` elementwise for an increasing ``fun`` on ``[t_lo, t_hi]``.

    A safeguarded Newton method (``rtsafe``): Newton steps while they stay inside the
    current bracket, bisection otherwise, the bracket shrinking at every step. A target
    above ``fun(t_hi)`` gives ``t_hi`` (the constrained solution); one below ``fun(t_lo)``
    converges to ``t_lo`` by bisection (callers choose ``t_lo`` so that this cannot
    happen in practice).
    ``fun`` returns ``(value, derivative)``.
    """
    f_hi, _ = fun(t_hi)
    t0 = jnp.clip(0.5 * (t_lo + t_hi), t_lo, t_hi)

    def cond(carry):
        _, _, _, it, done = carry
        return (it < max_iter) & ~jnp.all(done)

    def body(carry):
        lo, hi, t, it, done = carry
        f, df = fun(t)
        r = f - target
        lo = jnp.where(r < 0, t, lo)
        hi = jnp.where(r > 0, t, hi)
        t_new = t - r / df
        outside = ~((t_new > lo) & (t_new < hi))
        t_new = jnp.where(outside, 0.5 * (lo + hi), t_new)
        scale = 1.0 + jnp.abs(t)
        step_done = (jnp.abs(t_new - t) <= 4 * jnp.finfo(t.dtype).eps * scale) | (r == 0)
        t_new = jnp.where(done, t, t_new)
        return lo, hi, t_new, it + 1, done | step_done

    lo = jnp.broadcast_to(t_lo, jnp.shape(target)).astype(t0.dtype)
    hi = jnp.broadcast_to(t_hi, jnp.shape(target)).astype(t0.dtype)
    t0 = jnp.broadcast_to(t0, jnp.shape(target))
    above = target >= f_hi
    _, _, t, _, _ = lax.while_loop(cond, body, (lo, hi, t0, jnp.int32(0), above))
    return jnp.where(above, hi, t)


def _digamma(x):
    """psi(x) for x > 0: ten recurrence steps, then the asymptotic series at x + 10 >= 10.

    The first omitted term is below 1e-15 relative; the tests compare with
    ``scipy.special.digamma``. Written out because it compiles several times faster than
    ``jax.scipy.special.digamma`` and sits inside every root-finder iteration.
    """
    x = jnp.asarray(x)
    shifts = jnp.arange(10, dtype=x.dtype)
    head = jnp.sum(1.0 / (x[..., None] + shifts), axis=-1)
    y = x + 10.0
    z = 1.0 / (y * y)
    # Bernoulli numbers: B_2k / (2k) for k = 1..6
    series = z * (
        1 / 12 + z * (-1 / 120 + z * (1 / 252 + z * (-1 / 240 + z * (1 / 132 - z * 691 / 32760))))
    )
    return jnp.log(y) - 0.5 / y - series - head


def _trigamma(x):
    """psi'(x) for x > 0: six recurrence steps, then the asymptotic series at x + 6 >= 6.

    Absolute error below 1e-10; used only for Newton steps inside the bracket, so it
    affects the speed of the root finder, never the root (the stopping rule is on the
    step). Cheaper to compile than ``jax.scipy.special.polygamma``.
    """
    shifts = jnp.arange(6, dtype=x.dtype)
    head = jnp.sum(1.0 / (x[..., None] + shifts) ** 2, axis=-1)
    y = x + 6.0
    z = 1.0 / (y * y)
    tail = (1.0 + (0.5 + (1 / 6 - (1 / 30 - (1 / 42 - z / 30) * z) * z) / y) / y) / y
    return head + tail


def _multigammaln(x, d):
    """Log Gamma_d(x) = d(d-1)/4 log pi + sum_j log Gamma(x - (j-1)/2)."""
    j = jnp.arange(d, dtype=x.dtype)
    return d * (d - 1) / 4 * math.log(math.pi) + jnp.sum(gammaln(x[..., None] - j / 2), axis=-1)


def _offsets(d, dtype):
    """Return the shifts (d - 1 - j)/2, j = 0..d-1, so that x - j/2 = e^t + shift."""
    return (d - 1 - jnp.arange(d, dtype=dtype)) / 2


def multivariate_digamma(x, d: int):
    r"""Return the multivariate digamma :math:`\Psi_d(x) = \sum_{j=1}^d \psi(x - (j-1)/2)`.

    The derivative of :math:`\log\Gamma_d(x)` (eq. 3 of [1]_), defined for
    :math:`x > (d-1)/2`.

    Parameters
    ----------
    x : float or array
        Argument, :math:`x > (d - 1)/2`.
    d : int
        Dimension (static).

    Returns
    -------
    array
        :math:`\Psi_d(x)`, same shape as ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.special import digamma
    >>> bool(np.isclose(multivariate_digamma(3.0, 2), digamma(3.0) + digamma(2.5)))
    True
    """
    return _multivariate_digamma(jnp.asarray(x), d)


@partial(jax.jit, static_argnums=1)
def _multivariate_digamma(x, d):
    dtype = jnp.result_type(x.dtype, jnp.float32)
    j = jnp.arange(d, dtype=dtype)
    return jnp.sum(_digamma(x.astype(dtype)[..., None] - j / 2), axis=-1)


def _mdigamma_of_t(t, d):
    """(Psi_d(x), dPsi_d/dt) at x = (d-1)/2 + e^t, with exact arguments e^t + shift."""
    e = jnp.exp(t)[..., None]
    args = e + _offsets(d, t.dtype)
    return jnp.sum(_digamma(args), -1), jnp.sum(_trigamma(args), -1) * e[..., 0]


def inverse_multivariate_digamma(y, d: int):
    r"""Solve :math:`\Psi_d(x) = y` for :math:`x > (d-1)/2` (the inverse used in eq. 5 of [1]_).

    :math:`\Psi_d` increases from :math:`-\infty` to :math:`\infty` on
    :math:`((d-1)/2, \infty)`, so a bracketed root finder applies: a safeguarded Newton
    method in :math:`t = \log(x - (d-1)/2)` on the bracket
    :math:`t \in [-50, \log(e^{y/d} + 1)]`. The upper end is valid because
    :math:`\psi(s + 1) > \log(s + 1/2)` gives :math:`\Psi_d(x) \ge d\,\psi(x - (d-1)/2) > y`
    there.

    Parameters
    ----------
    y : float or array
        Target value(s).
    d : int
        Dimension (static).

    Returns
    -------
    array
        :math:`\Psi_d^{-1}(y)`, same shape as ``y``.

    Examples
    --------
    >>> import numpy as np
    >>> x = inverse_multivariate_digamma(multivariate_digamma(np.float64(4.2), 3), 3)
    >>> bool(np.isclose(x, 4.2, rtol=1e-12 if x.dtype == np.float64 else 1e-5))
    True
    """
    return _inverse_multivariate_digamma(jnp.asarray(y), d)


@partial(jax.jit, static_argnums=1)
def _inverse_multivariate_digamma(y, d):
    dtype = jnp.result_type(y.dtype, jnp.float32)
    y = y.astype(dtype)
    # clip y/d so that exp does not overflow; Psi_d(x) ~ d log x, so x < e^700 suffices.
    t_hi = jnp.log(jnp.exp(jnp.minimum(y / d, 700.0)) + 1.0)
    t = _solve_increasing(lambda s: _mdigamma_of_t(s, d), y, jnp.asarray(_T_LO, dtype), t_hi)
    return (d - 1) / 2 + jnp.exp(t)


# ---------------------------------------------------------------------------------------------
# The Wishart distribution as an exponential family (sec. 2.1 of [1])
# ---------------------------------------------------------------------------------------------


def _logdet_from_cholesky(chol):
    """log|A| = 2 sum log diag L for A = L L^T."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)


def wishart_sufficient_stats(X):
    r"""Return the Wishart sufficient statistics :math:`t(X) = (\log|X|, -X/2)` (eq. 1 of [1]_).

    Parameters
    ----------
    X : array of shape (..., d, d)
        SPD matrices.

    Returns
    -------
    log_det : array of shape (...,)
        :math:`\log|X|`, from the Cholesky factor.
    minus_half_x : array of shape (..., d, d)
        :math:`-X/2`.

    Examples
    --------
    >>> import numpy as np
    >>> log_det, minus_half_x = wishart_sufficient_stats(np.diag([1.0, 2.0]))
    >>> bool(np.isclose(log_det, np.log(2.0)))
    True
    """
    return _wishart_sufficient_stats(jnp.asarray(X))


@jax.jit
def _wishart_sufficient_stats(X):
    return _logdet_from_cholesky(jnp.linalg.cholesky(X)), -0.5 * X


def wishart_natural_params(dof, scale):
    r"""Return the natural parameters :math:`(\theta_n, \theta_S) = ((n-d-1)/2, S^{-1})`.

    :math:`S^{-1}` is formed from the Cholesky factor of :math:`S` by a triangular solve
    (:math:`S^{-1} = L^{-\top} L^{-1}`), never by a general inverse.

    Parameters
    ----------
    dof : float or array of shape (...,)
        Degrees of freedom :math:`n > d - 1`.
    scale : array of shape (..., d, d)
        SPD scale matrices :math:`S`.

    Returns
    -------
    theta_n : array of shape (...,)
    theta_s : array of shape (..., d, d)

    Examples
    --------
    >>> import numpy as np
    >>> theta_n, theta_s = wishart_natural_params(5.0, 2.0 * np.eye(2))
    >>> float(theta_n), np.round(np.asarray(theta_s), 6).tolist()
    (1.0, [[0.5, 0.0], [0.0, 0.5]])
    """
    return _wishart_natural_params(jnp.asarray(dof), jnp.asarray(scale))


@jax.jit
def _wishart_natural_params(dof, scale):
    d = scale.shape[-1]
    chol = jnp.linalg.cholesky(scale)
    eye = jnp.broadcast_to(jnp.eye(d, dtype=chol.dtype), chol.shape)
    chol_inv = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)
    theta_s = jnp.swapaxes(chol_inv, -1, -2) @ chol_inv
    theta_s = 0.5 * (theta_s + jnp.swapaxes(theta_s, -1, -2))
    return (dof - d - 1) / 2, theta_s


def _wishart_log_normalizer_logdet(theta_n, log_det_theta_s, d):
    """F of eq. (1) given log|theta_S|."""
    x = theta_n + (d + 1) / 2
    return x * (d * math.log(2.0) - log_det_theta_s) + _multigammaln(x, d)


def wishart_log_normalizer(theta_n, theta_s):
    r"""Return the Wishart log-normaliser :math:`F(\theta_n, \theta_S)` (eq. 1 of [1]_).

    .. math::

        F(\theta_n, \theta_S) = \Big(\theta_n + \frac{d+1}{2}\Big)
        \big(d \log 2 - \log|\theta_S|\big) + \log\Gamma_d\Big(\theta_n + \frac{d+1}{2}\Big),

    with :math:`\log|\theta_S|` from a Cholesky factor. Finite for :math:`\theta_n > -1`
    and SPD :math:`\theta_S`.

    Parameters
    ----------
    theta_n : float or array of shape (...,)
    theta_s : array of shape (..., d, d)

    Returns
    -------
    array of shape (...,)

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.special import gammaln
    >>> F = wishart_log_normalizer(0.0, np.eye(1))  # chi-square with 2 dof
    >>> bool(np.isclose(F, np.log(2.0) + gammaln(1.0)))
    True
    """
    return _wishart_log_normalizer(jnp.asarray(theta_n), jnp.asarray(theta_s))


@jax.jit
def _wishart_log_normalizer(theta_n, theta_s):
    d = theta_s.shape[-1]
    log_det = _logdet_from_cholesky(jnp.linalg.cholesky(theta_s))
    return _wishart_log_normalizer_logdet(theta_n, log_det, d)


def wishart_log_prob(X, theta_n, theta_s):
    r"""Return :math:`\log W_d(X; n, S) = \langle t(X), \theta\rangle - F(\theta)` (eq. 1 of [1]_).

    .. math::

        \log W_d(X) = \theta_n \log|X| - \tfrac12 \mathrm{tr}(\theta_S X) - F(\theta_n,
        \theta_S),

    the carrier measure being zero in this decomposition.

    Parameters
    ----------
    X : array of shape (..., d, d)
        SPD matrices.
    theta_n : float or array
        Natural parameter :math:`(n - d - 1)/2`, broadcasting against ``X.shape[:-2]``.
    theta_s : array of shape (..., d, d)
        Natural parameter :math:`S^{-1}`.

    Returns
    -------
    array
        Log-densities, shape ``broadcast(X.shape[:-2], theta_n.shape, theta_s.shape[:-2])``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import wishart
    >>> X = np.array([[2.0, 0.3], [0.3, 1.0]])
    >>> theta_n, theta_s = wishart_natural_params(4.0, np.eye(2))
    >>> bool(np.isclose(wishart_log_prob(X, theta_n, theta_s), wishart(4, np.eye(2)).logpdf(X)))
    True
    """
    return _wishart_log_prob(jnp.asarray(X), jnp.asarray(theta_n), jnp.asarray(theta_s))


@jax.jit
def _wishart_log_prob(X, theta_n, theta_s):
    log_det, minus_half_x = _wishart_sufficient_stats(X)
    inner = jnp.sum(minus_half_x * theta_s, axis=(-2, -1))
    return theta_n * log_det + inner - _wishart_log_normalizer(theta_n, theta_s)


def _wishart_profile_of_t(t, d):
    """(g, dg/dt) with g(x) = Psi_d(x) - d log x at x = (d-1)/2 + e^t."""
    psi, dpsi = _mdigamma_of_t(t, d)
    e = jnp.exp(t)
    x = (d - 1) / 2 + e
    return psi - d * jnp.log(x), dpsi - d * e / x


class WishartParams(NamedTuple):
    r"""Wishart component parameters (leading axis: components).

    Attributes
    ----------
    dof : array of shape (K,)
        Degrees of freedom :math:`n_j`.
    theta_n : array of shape (K,)
        :math:`(n_j - d - 1)/2`.
    theta_s : array of shape (K, d, d)
        :math:`S_j^{-1}`.
    log_normalizer : array of shape (K,)
        :math:`F(\theta_j)` of eq. (1).
    """

    dof: Any
    theta_n: Any
    theta_s: Any
    log_normalizer: Any


def wishart_mle_from_stats(count, sum_log_det, scatter, max_dof=1e6):
    r"""Return the Wishart MLE from summed sufficient statistics (fixed point of Algorithm 1).

    With :math:`a = \frac1N\sum_i \log|X_i| - \log|\frac1N\sum_i X_i| \le 0`, the fixed point
    of eqs. (4)-(5) of [1]_ satisfies :math:`\Psi_d(n/2) - d\log(n/2) = a`, solved by the
    bracketed root finder for :math:`n \in (d - 1, \text{max\_dof}]`; then eq. (4) gives
    :math:`\theta_S = N n (\sum_i X_i)^{-1}` (module docstring). Vectorised over a leading
    axis of clusters.

    Parameters
    ----------
    count : array of shape (K,)
        Cluster sizes :math:`N_j \ge 1`.
    sum_log_det : array of shape (K,)
        :math:`\sum_{i \in C_j} \log|X_i|`.
    scatter : array of shape (K, d, d)
        :math:`\sum_{i \in C_j} X_i`.
    max_dof : float, default=1e6
        Cap on :math:`n` (reached by clusters of identical matrices, e.g. singletons).

    Returns
    -------
    WishartParams
        Degrees of freedom, natural parameters and log-normalisers.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([np.eye(2), np.diag([2.0, 1.0]), np.diag([1.0, 3.0])])
    >>> logdet = np.log(np.linalg.det(X))
    >>> p = wishart_mle_from_stats(np.array([3.0]), logdet.sum()[None], X.sum(0)[None])
    >>> bool(p.dof[0] > 1.0)
    True
    """
    return _wishart_mle_from_stats(
        jnp.asarray(count), jnp.asarray(sum_log_det), jnp.asarray(scatter), jnp.asarray(max_dof)
    )


@jax.jit
def _wishart_mle_from_stats(count, sum_log_det, scatter, max_dof):
    dtype = scatter.dtype
    count = count.astype(dtype)
    d = scatter.shape[-1]
    chol = jnp.linalg.cholesky(scatter)
    log_det_scatter = _logdet_from_cholesky(chol)
    a = sum_log_det / count - log_det_scatter + d * jnp.log(count)
    t_hi = jnp.log(max_dof.astype(dtype) / 2 - (d - 1) / 2)
    t = _solve_increasing(lambda s: _wishart_profile_of_t(s, d), a, jnp.asarray(_T_LO, dtype), t_hi)
    dof = (d - 1) + 2 * jnp.exp(t)
    # eq. (4): theta_S = N n (sum X)^{-1} = N n L^{-T} L^{-1}
    eye = jnp.broadcast_to(jnp.eye(d, dtype=dtype), chol.shape)
    chol_inv = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)
    factor = (count * dof)[:, None, None]
    theta_s = factor * (jnp.swapaxes(chol_inv, -1, -2) @ chol_inv)
    theta_s = 0.5 * (theta_s + jnp.swapaxes(theta_s, -1, -2))
    theta_n = (dof - d - 1) / 2
    log_det_theta_s = d * jnp.log(count * dof) - log_det_scatter
    log_norm = _wishart_log_normalizer_logdet(theta_n, log_det_theta_s, d)
    return WishartParams(dof, theta_n, theta_s, log_norm)


@jax.jit
def _wishart_mle_alternating(n_samples, mean_log_det, scatter, tol, max_iter):
    # Algorithm 1 needs only N, mean log|X_i| and sum X_i, so the compiled loop depends on d
    # alone (not on N or max_iter): one compilation serves every sample of d x d matrices.
    d = scatter.shape[-1]
    chol = jnp.linalg.cholesky(scatter)
    log_det_scatter = _logdet_from_cholesky(chol)
    trace_term = n_samples * d  # tr(theta_S sum X) / n = N d by eq. (4)

    def mean_loglik(dof):
        # mean log W_d(X_i; dof, S) with S = scatter / (N dof) (eq. 4 applied)
        theta_n = (dof - d - 1) / 2
        log_det_theta_s = d * jnp.log(n_samples * dof) - log_det_scatter
        log_norm = _wishart_log_normalizer_logdet(theta_n, log_det_theta_s, d)
        return theta_n * mean_log_det - 0.5 * dof * trace_term / n_samples - log_norm

    def body(carry):
        dof, ll, _, it = carry
        # eq. (5) with S from eq. (4): mean log|X| - log|2S|, S = scatter / (N dof)
        log_det_2s = d * math.log(2.0) + log_det_scatter - d * jnp.log(n_samples * dof)
        new_dof = 2 * inverse_multivariate_digamma(mean_log_det - log_det_2s, d)
        new_ll = mean_loglik(new_dof)
        return new_dof, new_ll, jnp.abs(new_ll - ll) <= tol * (1 + jnp.abs(new_ll)), it + 1

    def cond(carry):
        _, _, converged, it = carry
        return (~converged) & (it < max_iter)

    dof0 = jnp.asarray(d, scatter.dtype)  # line 1 of Algorithm 1: theta_n = -1/2, i.e. n = d
    carry = (dof0, mean_loglik(dof0), jnp.asarray(False), jnp.int32(0))
    dof, ll, converged, n_iter = lax.while_loop(cond, body, carry)
    return dof, scatter / (n_samples * dof), ll, converged, n_iter


def wishart_mle(X, *, tol=1e-13, max_iter=100_000):
    r"""Fit one Wishart distribution by Algorithm 1 of [1]_ (alternating eqs. 4 and 5).

    Starts from :math:`\theta_n = -1/2` (:math:`n = d`) and alternates

    .. math::

        \hat\theta_S = N n \Big(\sum_i X_i\Big)^{-1} \quad\text{(eq. 4)}, \qquad
        \hat\theta_n = \Psi_d^{-1}\Big(\frac1N\sum_i\log|X_i| - \log|2S|\Big) - \frac{d+1}2
        \quad\text{(eq. 5)},

    :math:`\Psi_d^{-1}` by :func:`inverse_multivariate_digamma`, until the mean
    log-likelihood changes by less than ``tol`` (relative). The alternation converges
    linearly and slowly for large :math:`n`; :func:`wishart_mle_from_stats` solves for its
    fixed point directly.

    Parameters
    ----------
    X : array of shape (n_samples, d, d)
        SPD matrices.
    tol : float, default=1e-13
        Relative tolerance on the change of the mean log-likelihood.
    max_iter : int, default=100000
        Maximum number of alternations.

    Returns
    -------
    dof : float
        :math:`\hat n`.
    scale : ndarray of shape (d, d)
        :math:`\hat S`.
    n_iter : int
        Number of alternations performed.

    Raises
    ------
    ValueError
        If ``X`` is not a stack of finite symmetric positive definite matrices (the checks
        of :class:`KMLEMixture`).

    Warns
    -----
    ConvergenceWarning
        If ``max_iter`` alternations did not meet ``tol``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import wishart
    >>> X = wishart(df=8, scale=np.eye(2)).rvs(500, random_state=0)
    >>> dof, scale, n_iter = wishart_mle(X)
    >>> bool(abs(dof - 8) < 1.0)
    True
    """
    X, log_det = _check_spd_matrices(X)
    with jax.enable_x64(True):
        dof, scale, _, converged, n_iter = _wishart_mle_alternating(
            jnp.asarray(float(len(X))),
            jnp.asarray(log_det.mean()),
            jnp.asarray(X.sum(axis=0)),
            jnp.asarray(float(tol)),
            jnp.asarray(min(int(max_iter), np.iinfo(np.int32).max), jnp.int32),
        )
        dof, scale, n_iter = float(dof), np.asarray(scale), int(n_iter)
    if not bool(converged):
        warnings.warn(
            f"wishart_mle stopped after max_iter={max_iter} alternations of Algorithm 1 "
            f"before the log-likelihood changed by less than tol={tol}; increase max_iter",
            ConvergenceWarning,
            stacklevel=2,
        )
    return dof, scale, n_iter


# ---------------------------------------------------------------------------------------------
# Families for k-MLE: summed statistics -> MLE, log-likelihood matrix, seeding divergence
# ---------------------------------------------------------------------------------------------


class Family(NamedTuple):
    """The operations k-MLE needs from an exponential family (static, hashable).

    Attributes
    ----------
    name : str
    row : callable
        ``row(data, i) -> (p,)``: the summed-statistics increment of observation ``i``.
    mle : callable
        ``mle(counts (K,), agg (K, p), cap) -> params`` (leading axis K).
    log_lik : callable
        ``log_lik(data, params) -> (N, K)`` log-densities.
    n_row_arrays : int
        How many leading arrays of ``data`` have one row per observation (padded with
        zero rows to a bucketed size).
    """

    name: str
    row: Any
    mle: Any
    log_lik: Any
    n_row_arrays: int


def _wishart_split_agg(agg):
    d = math.isqrt(agg.shape[-1] - 1)
    return agg[..., 0], agg[..., 1:].reshape(*agg.shape[:-1], d, d)


def _wishart_mle_agg(counts, agg, cap):
    sum_log_det, scatter = _wishart_split_agg(agg)
    return _wishart_mle_from_stats(counts, sum_log_det, scatter, cap)


def _wishart_log_lik(data, params):
    # <t(X_i), theta_j> - F(theta_j) with rows (log|X_i|, vec X_i): one matrix product.
    stats = data[0]
    k = params.theta_n.shape[0]
    coef = jnp.concatenate([params.theta_n[:, None], -0.5 * params.theta_s.reshape(k, -1)], 1)
    return stats @ coef.T - params.log_normalizer


def _row_dense(data, i):
    return data[0][i]


WISHART = Family("wishart", _row_dense, _wishart_mle_agg, _wishart_log_lik, 1)


class VMFParams(NamedTuple):
    r"""vMF component parameters (leading axis: components).

    Attributes
    ----------
    mu : array of shape (K, d)
        Mean directions.
    kappa : array of shape (K,)
        Concentrations.
    log_normalizer : array of shape (K,)
        :math:`\log C_d(\kappa_j)`.
    """

    mu: Any
    kappa: Any
    log_normalizer: Any


def _vmf_mle_agg(counts, agg, cap):
    from bayesvmf import special

    d = agg.shape[-1]
    norm = jnp.sqrt(jnp.sum(agg**2, axis=-1))
    tiny = jnp.finfo(agg.dtype).tiny
    mu = agg / jnp.maximum(norm, tiny)[:, None]
    rbar = norm / counts.astype(agg.dtype)
    kappa = special.kappa_from_rbar(d, rbar, kappa_max=cap)
    return VMFParams(mu, kappa, special.log_vmf_normalizer(d, kappa))


def _vmf_log_lik_dense(data, params):
    # log vMF(x | mu, kappa) = log C_d(kappa) + kappa mu.x, as in VonMisesFisher.log_prob
    return data[0] @ (params.kappa[:, None] * params.mu).T + params.log_normalizer


def _vmf_row_ell(data, i):
    cols, vals, d = data[0], data[1], data[2].shape[0]
    return jnp.zeros((d,), vals.dtype).at[cols[i]].add(vals[i])


def _vmf_log_lik_ell(data, params):
    cols, vals = data[0], data[1]
    v = (params.kappa[:, None] * params.mu).T  # (d, K)
    return jnp.einsum("nm,nmk->nk", vals, v[cols]) + params.log_normalizer


VMF_DENSE = Family("vmf", _row_dense, _vmf_mle_agg, _vmf_log_lik_dense, 1)
VMF_SPARSE = Family("vmf", _vmf_row_ell, _vmf_mle_agg, _vmf_log_lik_ell, 2)


# ---------------------------------------------------------------------------------------------
# k-MLE with Hartigan moves (Algorithm 2 of [1])
# ---------------------------------------------------------------------------------------------


class KMLEState(NamedTuple):
    r"""State of k-MLE (Algorithm 2 of [1]_), possibly padded to a bucketed shape.

    Arrays may be longer than the sample (``N_pad >= N`` rows) and carry more components
    than are in use (``K_pad >= K``), so that fits of nearby sizes share one compiled
    program: padded rows have ``valid`` False and are never counted or moved; unused
    components have ``counts == 0``, hence :math:`\log w_j = -\infty`, and can never
    receive a point.

    Attributes
    ----------
    labels : int array of shape (N_pad,)
        The partition :math:`z` (0 on padded rows).
    valid : bool array of shape (N_pad,)
        True for the rows of the sample, False for padding.
    counts : int array of shape (K_pad,)
        Cluster sizes :math:`|C_j|` (0 for unused components).
    agg : array of shape (K_pad, p)
        Summed sufficient statistics per cluster (Wishart: :math:`(\sum\log|X_i|,
        \mathrm{vec}\sum X_i)`; vMF: the resultant :math:`\sum x_i`).
    params : WishartParams or VMFParams
        Cluster MLEs (leading axis K_pad; unused components hold a finite placeholder).
    log_lik : array of shape (N_pad, K_pad)
        :math:`\log p_F(X_i; \theta_j)`.
    log_weights : array of shape (K_pad,)
        :math:`\log w_j`, held fixed during a sweep (updated after it, line 18).
    """

    labels: Any
    valid: Any
    counts: Any
    agg: Any
    params: Any
    log_lik: Any
    log_weights: Any


class SweepInfo(NamedTuple):
    """What a :func:`hartigan_sweep` did.

    Attributes
    ----------
    n_transfers : int array
        Number of points moved.
    n_passes : int array
        Number of passes completed.
    done : bool array
        True if the last pass made no transfer (the inner loop of Algorithm 2 converged).
    """

    n_transfers: Any
    n_passes: Any
    done: Any


def _log_weights(counts, dtype):
    """Line 4 / 18 of Algorithm 2: log w_j = log(|C_j| / N); -inf for unused components."""
    return jnp.log(counts / jnp.sum(counts)).astype(dtype)


def init_state(family: Family, data, labels, valid, n_components: int, cap) -> KMLEState:
    """Build the k-MLE state of a partition: cluster statistics, MLEs, weights (lines 2-4).

    Parameters
    ----------
    family : Family
        Static.
    data : tuple of arrays
        The family's device representation of the sample (``N_pad`` rows).
    labels : int array of shape (N_pad,)
        A partition of the valid rows with labels in ``[0, K)``; components ``K`` to
        ``n_components - 1`` stay empty (padding).
    valid : bool array of shape (N_pad,)
        True for the rows of the sample.
    n_components : int
        ``K_pad`` (static).
    cap : float
        ``max_dof`` (Wishart) or ``kappa_max`` (vMF).

    Returns
    -------
    KMLEState
    """
    labels = jnp.asarray(labels, jnp.int32)
    valid = jnp.asarray(valid, bool)
    n = labels.shape[0]
    counts = jax.ops.segment_sum(valid.astype(jnp.int32), labels, num_segments=n_components)
    rows = jax.vmap(lambda i: family.row(data, i))(jnp.arange(n))
    rows = jnp.where(valid[:, None], rows, 0.0)
    agg = jax.ops.segment_sum(rows, labels, num_segments=n_components)
    # unused components get a finite placeholder (a copy of component 0, never empty) so
    # that no NaN enters the log-likelihood matrix; their weight is 0, so they never win.
    used = counts > 0
    safe_counts = jnp.where(used, counts, counts[0])
    safe_agg = jnp.where(used[:, None], agg, agg[0])
    params = family.mle(safe_counts, safe_agg, cap)
    log_lik = family.log_lik(data, params)
    log_weights = _log_weights(counts, log_lik.dtype)
    return KMLEState(labels, valid, counts, agg, params, log_lik, log_weights)


def complete_log_likelihood(state: KMLEState):
    r"""Return the mean complete log-likelihood :math:`\frac1N \ell(z, w, \theta)`.

    :math:`\ell = \sum_i \log w_{z_i} + \log p_F(X_i; \theta_{z_i})` over the valid rows;
    maximising it is minimising :math:`\mathrm{kmeans}_{F^*, \log w}` (sec. 3.1 of [1]_).
    """
    idx = state.labels[:, None]
    own = jnp.take_along_axis(state.log_lik + state.log_weights, idx, axis=1)[:, 0]
    own = jnp.where(state.valid, own, 0.0)
    return jnp.sum(own) / jnp.sum(state.valid)


def hartigan_sweep(family: Family, state: KMLEState, data, perms, cap, tol, max_transfers):
    r"""Run the inner loop of Algorithm 2 of [1]_ (lines 8-17) with the weights fixed.

    Passes over the sample in the orders given by ``perms`` (line 10); a point
    :math:`X_i` in a cluster with more than one point (line 11) moves to
    :math:`z_i^* = \arg\max_j \log w_j + \log p_F(X_i; \theta_j)` when that improves its
    term by more than ``tol`` (line 13), and the two affected clusters' summed statistics
    and MLEs are updated at once (line 15). Stops after a pass without transfers (then
    ``info.done`` is True), when the passes in ``perms`` are used up, or after
    ``max_transfers`` transfers. Within a pass, all points up to the next one that wants
    to move are skipped with one vectorised test: the parameters do not change between
    their visits, so this is the paper's sequential order exactly. Padded rows
    (``state.valid`` False) never move; unused components (weight 0) never receive.

    Parameters
    ----------
    family : Family
        Static.
    state : KMLEState
    data : tuple of arrays
    perms : int array of shape (n_passes, N_pad)
        Visit orders, one row per pass (random permutations drawn by the caller).
    cap : float array
        ``max_dof`` or ``kappa_max``.
    tol : float array
        Smallest gain, in log-likelihood units, that counts as an improvement.
    max_transfers : int array
        Cap on the number of transfers in this call.

    Returns
    -------
    state : KMLEState
    info : SweepInfo
    """
    n = state.labels.shape[0]
    n_perms = perms.shape[0]
    positions = jnp.arange(n)
    zero = jnp.int32(0)

    def cond(c):
        _, p, _, _, n_transfers, done = c
        return (~done) & (n_transfers < max_transfers) & (p < n_perms)

    def transfer(c, j, best):
        st, p, _, pass_transfers, n_transfers, done = c
        i = perms[p, j]
        a, b = st.labels[i], best[i].astype(jnp.int32)
        row = family.row(data, i)
        counts = st.counts.at[a].add(-1).at[b].add(1)
        agg = st.agg.at[a].add(-row).at[b].add(row)
        ab = jnp.stack([a, b])
        new = family.mle(counts[ab], agg[ab], cap)
        params = jax.tree_util.tree_map(lambda q, r: q.at[ab].set(r), st.params, new)
        log_lik = st.log_lik.at[:, ab].set(family.log_lik(data, new))
        labels = st.labels.at[i].set(b)
        st = KMLEState(labels, st.valid, counts, agg, params, log_lik, st.log_weights)
        return st, p, j + 1, pass_transfers + 1, n_transfers + 1, done

    def end_pass(c):
        st, p, _, pass_transfers, n_transfers, _ = c
        return st, p + 1, zero, zero, n_transfers, pass_transfers == 0

    def body(c):
        st, p, pos = c[0], c[1], c[2]
        score = st.log_lik + st.log_weights
        best = jnp.argmax(score, axis=1)
        gain = jnp.max(score, axis=1) - jnp.take_along_axis(score, st.labels[:, None], 1)[:, 0]
        movable = (gain > tol) & (st.counts[st.labels] > 1) & st.valid
        candidate = movable[perms[p]] & (positions >= pos)
        j = jnp.argmax(candidate).astype(jnp.int32)
        return lax.cond(candidate[j], lambda c: transfer(c, j, best), end_pass, c)

    carry = (state, zero, zero, zero, zero, jnp.asarray(False))
    state, p, _, _, n_transfers, done = lax.while_loop(cond, body, carry)
    return state, SweepInfo(n_transfers, p, done)


_hartigan_sweep = jax.jit(hartigan_sweep, static_argnums=0)
_init_state = jax.jit(init_state, static_argnums=(0, 4))
_complete_log_likelihood = jax.jit(complete_log_likelihood)


@jax.jit
def _set_weights(state: KMLEState):
    """Line 18 of Algorithm 2: w_j = |C_j| / N."""
    return state._replace(log_weights=_log_weights(state.counts, state.log_lik.dtype))


@partial(jax.jit, static_argnums=0)
def _mixture_log_lik(family: Family, data, params, log_weights):
    """Return log w_j + log p_F(X_i; theta_j), the matrix behind predict and score_samples."""
    return family.log_lik(data, params) + log_weights


def _bucket(size: int, minimum: int) -> int:
    """Round ``size`` up to ``minimum``, or above it to one of 4 sizes per octave (<= 25 %).

    k-MLE compiles one program per (rows, components) shape; rounding both up to a few
    bucketed sizes lets fits of nearby sizes (series of different lengths, DP-k-MLE++
    choosing different K, test fixtures) reuse one compilation.
    """
    if size <= minimum:
        return minimum
    step = 1 << max((size - 1).bit_length() - 3, 0)
    return -(-size // step) * step


def _pad_rows(a, n_pad):
    a = jnp.asarray(a)
    return jnp.concatenate([a, jnp.zeros((n_pad - a.shape[0], *a.shape[1:]), a.dtype)])


def _pad_data(family: Family, data, n_pad):
    """Pad the per-row arrays of ``data`` (the first ``family.n_row_arrays``) with zeros."""
    k = family.n_row_arrays
    return tuple(_pad_rows(a, n_pad) for a in data[:k]) + tuple(data[k:])


def _visit_orders(rng, n, n_pad, n_passes=None):
    """Random visit orders (line 10): permutations of the n rows, padding appended last."""
    n_passes = _PASSES_PER_CALL if n_passes is None else n_passes
    perms = rng.permuted(np.tile(np.arange(n), (n_passes, 1)), axis=1)
    pad = np.broadcast_to(np.arange(n, n_pad), (n_passes, n_pad - n))
    return jnp.asarray(np.concatenate([perms, pad], axis=1))


def _start(family: Family, data, labels, n_components: int, cap):
    """Pad data and labels to bucketed shapes and build the initial state (lines 2-4)."""
    n = len(labels)
    n_pad = _bucket(n, _MIN_ROWS)
    k_pad = _bucket(n_components, _MIN_COMPONENTS)
    data = _pad_data(family, data, n_pad)
    labels = np.concatenate([np.asarray(labels, np.int32), np.zeros(n_pad - n, np.int32)])
    valid = np.arange(n_pad) < n
    return data, _init_state(family, data, labels, valid, k_pad, cap)


# ---------------------------------------------------------------------------------------------
# DP-k-MLE++ (Algorithm 3 of [1])
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------


def _check_spd_matrices(X, name="X"):
    """Validate (n, d, d) SPD input; return float64 copy and its Cholesky log-dets."""
    if scipy.sparse.issparse(X):
        raise TypeError(f"{name} must be a dense array of SPD matrices; got a sparse matrix")
    X = np.array(X, dtype=np.float64, copy=True)
    if X.ndim != 3:
        raise ValueError(
            f"{name} must be a 3-D array of shape (n_samples, d, d); got shape {X.shape}"
        )
    if X.shape[1] != X.shape[2] or X.shape[1] == 0:
        raise ValueError(f"{name} must hold square d x d matrices with d >= 1; got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no matrices (shape {X.shape})")
    finite = np.isfinite(X).all(axis=(1, 2))
    if not finite.all():
        raise ValueError(
            f"{name} contains NaN or infinity (first in matrix {int(np.argmin(finite))})"
        )
    asym = np.abs(X - np.swapaxes(X, 1, 2)).max(axis=(1, 2))
    size = np.abs(X).max(axis=(1, 2))
    bad = asym > 1e-10 * np.maximum(size, np.finfo(np.float64).tiny)
    if bad.any():
        raise ValueError(f"{name}[{int(np.argmax(bad))}] is not symmetric")
    X = 0.5 * (X + np.swapaxes(X, 1, 2))
    # LAPACK Cholesky on the host: no compilation per input shape. A batch that fails is
    # factorised matrix by matrix to name the first matrix that is not SPD.
    try:
        chol = np.linalg.cholesky(X)
    except np.linalg.LinAlgError:
        for i, matrix in enumerate(X):
            try:
                np.linalg.cholesky(matrix)
            except np.linalg.LinAlgError:
                raise ValueError(
                    f"{name}[{i}] is not symmetric positive definite "
                    "(its Cholesky factorisation failed)"
                ) from None
        raise  # pragma: no cover (the batch failed, so one matrix fails)
    log_det = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
    return X, log_det


def _ell_from_csr(X):
    """Pad a CSR matrix to ELL form: (cols, vals) of shape (N, max row nnz)."""
    nnz = np.diff(X.indptr)
    width = max(int(nnz.max()), 1)
    cols = np.zeros((X.shape[0], width), dtype=np.int32)
    vals = np.zeros((X.shape[0], width), dtype=np.float64)
    pos = np.arange(X.nnz) - np.repeat(X.indptr[:-1], nnz)
    rows = np.repeat(np.arange(X.shape[0]), nnz)
    cols[rows, pos] = X.indices
    vals[rows, pos] = X.data
    return cols, vals


# ---------------------------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------------------------


class KMLEMixture:
    r"""Wishart or vMF mixture fitted by k-MLE with Hartigan moves (Algorithms 2-3 of [1]_).

    Maximises the complete log-likelihood :math:`\sum_i \log w_{z_i} + \log
    p_F(X_i; \theta_{z_i})` over hard partitions, seeded by DP-k-MLE++ (``n_components``
    None: the number of clusters is chosen by ``lam``) or by k-MLE++ (``n_components``
    given). See the module docstring for the algorithmic choices.

    Parameters
    ----------
    family : {"wishart", "vmf"}, default="wishart"
        Wishart: ``X`` of shape (n_samples, d, d), SPD. vMF: ``X`` of shape
        (n_samples, n_features), dense or scipy.sparse, rows rescaled to unit norm when
        ``normalize`` is True.
    n_components : int or None, default=None
        Number of clusters; None lets DP-k-MLE++ choose it with ``lam``.
    lam : float, default=0.25
        DP-k-MLE++ threshold :math:`\lambda \in (0, 1]`; larger values give fewer clusters,
        1 gives one cluster. Its meaning depends on ``dp_rule``. Ignored when
        ``n_components`` is given.
    dp_rule : {"gain", "share"}, default="gain"
        How DP-k-MLE++ decides to add a cluster (``n_components=None`` only).

        * ``"gain"`` (default, :func:`dp_kmle_gain`): add the best of a few D-sampled
          candidates while it removes more than a fraction :math:`\lambda` of the current
          seeding loss, with all clusters refined by Bregman k-means (fitted centroids)
          before and after. Measured (``benchmarks/results/kmle.md``, 40 seeds each):
          with :math:`\lambda \in [0.15, 0.4]` it finds K = 3 for every seed on three
          synthetic sets of 3 x 3 Wishart matrices (equal sizes with overlapping scales,
          equal sizes far apart, sizes 150/40/10), and K = 1 for every seed on two
          one-component samples of 300 matrices. 0.25 sits in the middle of that range.
          **What the threshold assumes:** splitting one homogeneous cluster in two removes
          roughly :math:`2/(\pi p)` of its loss for :math:`p` free coordinates
          (:math:`p = d(d+1)/2` for Wishart, :math:`d - 1` for vMF), more for small
          samples: in the benchmark at most 0.15 for :math:`d = 3` and 60 matrices, but
          up to 0.27 for :math:`d = 2` and 0.65 for :math:`d = 1`. There (and for vMF
          on low-dimensional spheres) the default can invent clusters; in the benchmark it
          did on every :math:`d = 1` sample and on one of four :math:`d = 2` samples.
          Raise ``lam`` above the single-cluster split gain, or pass ``n_components``.
          Clusters that overlap so much that adding one removes at most 25 % of the loss
          are merged by the default; lower ``lam`` to find them.
        * ``"share"``: Algorithm 3 as printed in [1]_ (:func:`dp_kmle_pp`): add a seed while
          some point carries more than a share :math:`\lambda` of the loss (6) to the
          nearest *seed point*; about :math:`1/N` is the sensible minimum (sec. 3.3).
          **This rule rarely recovers K.** A cluster of :math:`m` points that has no seed
          yet spreads its loss over those points, so each carries at most about
          :math:`1/m` of the total (:math:`K/N` for equal sizes). Once every cluster has a
          seed, the largest share is still about 3-5 times :math:`1/N`, because the
          divergence to a single seed point is heavy-tailed. The two ranges overlap and no
          :math:`\lambda` separates them: on the same three sets, K = 3 is found for at
          most 25 % of the seeds over :math:`\lambda N \in \{1, 2, 3, 5, 10, 15\}`. It is
          kept for reproducing the paper.
    max_iter : int, default=100
        Maximum number of weight updates (outer iterations of Algorithm 2).
    tol : float, default=1e-9
        Smallest gain in a point's log-likelihood term that counts as an improving
        transfer (guards against cycling on numerical ties).
    max_dof : float, default=1e6
        Cap on the Wishart degrees of freedom (reached by clusters of identical matrices,
        e.g. singletons, whose likelihood is otherwise unbounded).
    kappa_max : float, default=1e6
        Cap on the vMF concentration (same reason).
    normalize : bool, default=True
        vMF only: rescale rows to unit norm (otherwise they must be unit norm).
    random_state : int or None, default=None
        Seed of the seeding and of the pass permutations; the same int gives identical
        results.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Final partition.
    weights_ : ndarray of shape (n_components_,)
    n_components_ : int
    seeds_ : ndarray of int
        Indices of the observations chosen as seeds (the first one uniform; with
        ``dp_rule="gain"`` the others are the candidates that opened clusters 2, ..., K, and
        the first partition is their Bregman k-means refinement).
    dof_, scale_ : ndarrays of shape (n_components_,) and (n_components_, d, d)
        Wishart parameters :math:`n_j, S_j` (Wishart family).
    mean_directions_, concentrations_ : ndarrays of shape (n_components_, d) and (n_components_,)
        vMF parameters (vMF family).
    lower_bound_ : float
        Final mean complete log-likelihood.
    lower_bounds_ : list of float
        Mean complete log-likelihood after the first assignment and after each outer
        iteration (non-decreasing).
    n_iter_ : int
    converged_ : bool
    n_transfers_ : int
        Total number of Hartigan transfers.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import wishart
    >>> X = np.concatenate([wishart(20, np.eye(2)).rvs(30, random_state=0),
    ...                     wishart(20, 9 * np.eye(2)).rvs(30, random_state=1)])
    >>> model = KMLEMixture(n_components=2, random_state=0).fit(X)
    >>> sorted(np.bincount(model.labels_).tolist())
    [30, 30]
    """

    def __init__(
        self,
        *,
        family: str = "wishart",
        n_components: int | None = None,
        lam: float = 0.25,
        dp_rule: str = "gain",
        max_iter: int = 100,
        tol: float = 1e-9,
        max_dof: float = 1e6,
        kappa_max: float = 1e6,
        normalize: bool = True,
        random_state: int | None = None,
    ) -> None:
        self.family = family
        self.n_components = n_components
        self.lam = lam
        self.dp_rule = dp_rule
        self.max_iter = max_iter
        self.tol = tol
        self.max_dof = max_dof
        self.kappa_max = kappa_max
        self.normalize = normalize
        self.random_state = random_state

    # -- validation ---------------------------------------------------------------------------

    def _check_parameters(self):
        if self.family not in ("wishart", "vmf"):
            raise ValueError(f"family must be 'wishart' or 'vmf'; got family={self.family!r}")
        k = self.n_components
        if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
            raise ValueError(
                f"n_components must be a positive integer or None; got n_components={k!r}"
            )
        if k is None:
            lam = self.lam
            if isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not 0 < lam <= 1:
                raise ValueError(f"lam must be a number in (0, 1]; got lam={lam!r}")
            if self.dp_rule not in ("gain", "share"):
                raise ValueError(f"dp_rule must be 'gain' or 'share'; got dp_rule={self.dp_rule!r}")
        m = self.max_iter
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1:
            raise ValueError(f"max_iter must be a positive integer; got max_iter={m!r}")
        for name in ("tol", "max_dof", "kappa_max"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, numbers.Real)
                or not (v > 0 and np.isfinite(v))
            ):
                raise ValueError(f"{name} must be a positive finite number; got {name}={v!r}")
        rs = self.random_state
        if rs is not None and (
            isinstance(rs, bool) or not isinstance(rs, numbers.Integral) or rs < 0
        ):
            raise ValueError(
                f"random_state must be a non-negative integer or None; got random_state={rs!r}"
            )

    def _prepare(self, X, *, fitting):
        """Check X; return (host data for seeding, device tuple, family, dimension)."""
        if self.family == "wishart":
            X, log_det = _check_spd_matrices(X)
            d = X.shape[1]
            if fitting and self.max_dof <= d - 1:
                raise ValueError(
                    f"max_dof must exceed d - 1 = {d - 1}; got max_dof={self.max_dof!r}"
                )
            if not fitting and d != self._dim:
                raise ValueError(
                    f"X holds {d} x {d} matrices; the model was fitted on {self._dim} x {self._dim}"
                )
            stats = np.concatenate([log_det[:, None], X.reshape(len(X), -1)], axis=1)
            return stats, (jnp.asarray(stats),), WISHART, d
        from bayesvmf.data import check_directional

        X = check_directional(X, normalize=self.normalize)
        d = X.shape[1]
        if not fitting and d != self._dim:
            raise ValueError(f"X has {d} features; the model was fitted on {self._dim}")
        if scipy.sparse.issparse(X):
            cols, vals = _ell_from_csr(X)
            data = (jnp.asarray(cols), jnp.asarray(vals), jnp.zeros((d,)))
            return X, data, VMF_SPARSE, d
        return X, (jnp.asarray(X),), VMF_DENSE, d

    # -- fitting ------------------------------------------------------------------------------

    def fit(self, X, y=None):
        """Fit the mixture by DP-k-MLE++ seeding and k-MLE with Hartigan moves.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) (Wishart) or (n_samples, n_features) (vMF)
            The sample; never modified.
        y : ignored

        Returns
        -------
        self
        """
        del y
        self._check_parameters()
        with jax.enable_x64(True):
            host, data, family, d = self._prepare(X, fitting=True)
            n = host.shape[0]
            if self.n_components is not None and n < self.n_components:
                raise ValueError(f"X has {n} samples, fewer than n_components={self.n_components}")
            rng = np.random.default_rng(self.random_state)
            geometry = _seeding_geometry(family, host)
            if self.n_components is None and self.dp_rule == "gain":
                seeds, labels = dp_kmle_gain(geometry, n, rng, lam=self.lam)
            else:
                divergence = partial(_point_divergence, geometry)
                seeds, labels = dp_kmle_pp(
                    divergence, n, rng, lam=self.lam, n_components=self.n_components
                )
            k = len(seeds)
            cap = jnp.asarray(float(self.max_dof if family is WISHART else self.kappa_max))
            tol = jnp.asarray(float(self.tol))
            max_transfers = jnp.asarray(np.iinfo(np.int32).max, jnp.int32)
            # rows and components are padded to bucketed sizes (see _bucket) so that fits
            # of nearby sizes reuse one compiled program; padding never changes the result.
            data, state = _start(family, data, labels, k, cap)
            n_pad = state.labels.shape[0]
            bounds = [float(_complete_log_likelihood(state))]
            converged, n_transfers, it = k == 1, 0, 0  # one cluster: no move is possible
            for it in range(1, (self.max_iter if k > 1 else 0) + 1):
                moved, done = 0, False
                while not done:  # lines 8-17: passes until one makes no transfer
                    perms = _visit_orders(rng, n, n_pad)
                    state, info = _hartigan_sweep(
                        family, state, data, perms, cap, tol, max_transfers
                    )
                    moved += int(info.n_transfers)
                    done = bool(info.done)
                n_transfers += moved
                if moved == 0:  # line 21: need_update_w is False
                    converged = True
                    bounds.append(float(_complete_log_likelihood(state)))
                    break
                state = _set_weights(state)  # line 18
                bounds.append(float(_complete_log_likelihood(state)))
            self._store(state, family, d, k, n)
        self.seeds_ = seeds
        self.lower_bounds_ = bounds
        self.lower_bound_ = bounds[-1]
        self.n_iter_ = it
        self.converged_ = converged
        self.n_transfers_ = n_transfers
        if not converged:
            warnings.warn(
                f"KMLEMixture did not converge: transfers still improved the complete "
                f"log-likelihood after max_iter={self.max_iter} weight updates; increase max_iter",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _store(self, state, family, d, k, n):
        self._family_ops = family
        self._dim = d
        self._params = jax.tree_util.tree_map(lambda a: np.asarray(a)[:k], state.params)
        counts = np.asarray(state.counts)[:k]
        self.labels_ = np.asarray(state.labels)[:n].astype(np.int64)
        self.n_components_ = k
        self.weights_ = counts / counts.sum()
        if family is WISHART:
            p = self._params
            scatter = np.asarray(state.agg)[:k, 1:].reshape(k, d, d)
            self.dof_ = p.dof.copy()
            self.scale_ = scatter / (counts * p.dof)[:, None, None]  # eq. (4)
        else:
            self.mean_directions_ = self._params.mu.copy()
            self.concentrations_ = self._params.kappa.copy()

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_`` (equal to ``fit(X).predict(X)`` at convergence)."""
        return self.fit(X, y).labels_

    # -- prediction ---------------------------------------------------------------------------

    def _check_is_fitted(self):
        if not hasattr(self, "labels_"):
            raise RuntimeError("this KMLEMixture is not fitted yet; call fit(X) first")

    def _weighted_log_lik(self, X):
        self._check_is_fitted()
        with jax.enable_x64(True):
            host, data, family, _ = self._prepare(X, fitting=False)
            n = host.shape[0]
            data = _pad_data(family, data, _bucket(n, _MIN_ROWS))
            params = jax.tree_util.tree_map(jnp.asarray, self._params)
            log_weights = jnp.log(jnp.asarray(self.weights_))
            return np.asarray(_mixture_log_lik(family, data, params, log_weights))[:n]

    def predict(self, X):
        r"""Return :math:`\arg\max_j \log w_j + \log p_F(X_i; \theta_j)` for every row.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) or (n_samples, n_features)

        Returns
        -------
        ndarray of int of shape (n_samples,)
        """
        return np.argmax(self._weighted_log_lik(X), axis=1)

    def predict_proba(self, X):
        """Return the posterior component probabilities of the fitted mixture.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) or (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_components_)
        """
        wll = self._weighted_log_lik(X)
        return np.exp(wll - scipy.special.logsumexp(wll, axis=1, keepdims=True))

    def score_samples(self, X):
        r"""Return the mixture log-density :math:`\log \sum_j w_j p_F(X_i; \theta_j)` per row.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) or (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return scipy.special.logsumexp(self._weighted_log_lik(X), axis=1)

    def score(self, X, y=None):
        """Return the mean of :meth:`score_samples`."""
        del y
        return float(np.mean(self.score_samples(X)))

    def to_numpyro(self):
        """Return the fitted mixture as a NumPyro ``MixtureSameFamily`` distribution.

        Wishart components are ``numpyro.distributions.Wishart(dof, rate_matrix=theta_S)``;
        vMF components are the shared :class:`bayesvmf.distribution.VonMisesFisher`.
        Build and use it under ``jax.enable_x64(True)`` for float64.
        """
        import numpyro.distributions as dist

        self._check_is_fitted()
        mixing = dist.Categorical(probs=jnp.asarray(self.weights_))
        if self.family == "wishart":
            comp = dist.Wishart(
                jnp.asarray(self.dof_), rate_matrix=jnp.asarray(self._params.theta_s)
            )
        else:
            from bayesvmf.distribution import VonMisesFisher

            comp = VonMisesFisher(
                jnp.asarray(self.mean_directions_), jnp.asarray(self.concentrations_)
            )
        return dist.MixtureSameFamily(mixing, comp)

    # -- persistence (bayesvmf.save / bayesvmf.load) --------------------------------------------

    #: JSON scalars of a fitted model, written by :func:`bayesvmf.save`.
    _fitted_scalars = ("n_components_", "lower_bound_", "n_iter_", "converged_", "n_transfers_")
    #: Fitted arrays of both families, then those of each family. The component parameters
    #: the predictions use are stored too (``params_<field>``), so that a loaded model
    #: predicts and scores exactly as the saved one, without re-deriving them from ``scale_``.
    _fitted_arrays = ("labels_", "weights_", "seeds_", "lower_bounds_")
    _family_arrays = {
        "wishart": ("dof_", "scale_", *(f"params_{f}" for f in WishartParams._fields)),
        "vmf": ("mean_directions_", "concentrations_", *(f"params_{f}" for f in VMFParams._fields)),
    }

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Return the constructor arguments as a dict (scikit-learn convention)."""
        del deep
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return {name: getattr(self, name) for name in names}

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return (arrays, JSON scalars) of the fitted attributes, for :func:`bayesvmf.save`."""
        if not hasattr(self, "labels_"):
            return {}, {}
        arrays = {name: np.asarray(getattr(self, name)) for name in self._fitted_arrays}
        for name, value in self._params._asdict().items():
            arrays[f"params_{name}"] = np.asarray(value)
        for name in self._family_arrays[self.family][:2]:
            arrays[name] = np.asarray(getattr(self, name))
        scalars = {}
        for name in self._fitted_scalars:
            value = getattr(self, name)
            scalars[name] = value.item() if isinstance(value, np.generic) else value
        return arrays, scalars

    def _set_state(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Restore the fitted attributes written by :meth:`_get_state` (checked, not trusted)."""
        if not arrays and not scalars:
            return  # saved before fit
        if self.family not in self._family_arrays:
            raise ValueError(f"family must be 'wishart' or 'vmf'; got family={self.family!r}")
        expected = self._fitted_arrays + self._family_arrays[self.family]
        for name in [*arrays, *scalars]:
            if name not in expected + self._fitted_scalars:
                raise ValueError(f"unexpected fitted attribute {name!r}")
        missing = [n for n in expected + self._fitted_scalars if n not in {**arrays, **scalars}]
        if missing:
            raise ValueError(f"missing fitted attribute {missing[0]!r}")
        k = scalars["n_components_"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"n_components_ must be a positive integer; got {k!r}")
        per_component = ("weights_", *self._family_arrays[self.family])
        for name in per_component:
            if arrays[name].ndim < 1 or arrays[name].shape[0] != k:
                raise ValueError(
                    f"{name} has shape {arrays[name].shape}; expected {k} components "
                    f"(n_components_={k})"
                )
        fields = WishartParams if self.family == "wishart" else VMFParams
        params = fields(*(np.asarray(arrays[f"params_{f}"]) for f in fields._fields))
        self._params = params
        self._dim = params.theta_s.shape[-1] if self.family == "wishart" else params.mu.shape[-1]
        for name in self._fitted_arrays + self._family_arrays[self.family][:2]:
            setattr(self, name, np.asarray(arrays[name]))
        self.lower_bounds_ = [float(b) for b in self.lower_bounds_]
        for name in self._fitted_scalars:
            setattr(self, name, scalars[name])


# ---------------------------------------------------------------------------------------------
# Cauchy-Schwarz divergence between mixtures (sec. 4 of [1], [3])
# ---------------------------------------------------------------------------------------------


#: Elements of the largest block of pairwise parameters formed at once (memory bound).
_CS_BLOCK = 1 << 21


def _stack_mixtures(mixtures):
    """Stack fitted mixtures, padded to the largest K: parameters and log weights.

    Padded components repeat the last real one (finite values) and get log weight -inf,
    so they drop out of every log-sum-exp.
    """
    kmax = max(m.n_components_ for m in mixtures)
    log_w = np.full((len(mixtures), kmax), -np.inf)
    parts = []
    for row, m in enumerate(mixtures):
        k = m.n_components_
        idx = np.minimum(np.arange(kmax), k - 1)
        log_w[row, :k] = np.log(m.weights_)
        parts.append({name: np.asarray(v)[idx] for name, v in m._params._asdict().items()})
    return {name: np.stack([q[name] for q in parts]) for name in parts[0]}, log_w


def _log_component_inner(family, d, pa, pb):
    r"""Return log int p_j p'_j' = F(theta_j + theta'_j') - F(theta_j) - F(theta'_j') (sec. 4).

    ``pa`` and ``pb`` hold stacked component parameters whose leading axes broadcast
    against each other; computed with NumPy/LAPACK on the host (no compilation per shape).
    """
    if family == "wishart":
        theta_n = pa["theta_n"] + pb["theta_n"]
        if np.any(theta_n <= -1):
            # theta_j + theta'_j' leaves the natural parameter space: n_j + n'_j' <= 2 d
            raise ValueError(
                "the Cauchy-Schwarz integral diverges: two components have degrees of freedom "
                f"summing to at most 2 d = {2 * d} (smallest sum "
                f"{float(np.min(2 * theta_n + 2 * (d + 1))):.6g})"
            )
        theta_s = pa["theta_s"] + pb["theta_s"]
        chol = np.linalg.cholesky(theta_s)
        log_det = 2.0 * np.log(np.diagonal(chol, axis1=-2, axis2=-1)).sum(-1)
        x = theta_n + (d + 1) / 2  # eq. (1) of [1]_
        j = np.arange(d)
        log_gamma_d = d * (d - 1) / 4 * math.log(math.pi) + scipy.special.gammaln(
            x[..., None] - j / 2
        ).sum(-1)
        f_sum = x * (d * math.log(2.0) - log_det) + log_gamma_d
        return f_sum - pa["log_normalizer"] - pb["log_normalizer"]
    # int C(k) e^{k mu.x} C(k') e^{k' mu'.x} dx = C(k) C(k') / C(|k mu + k' mu'|)
    ka, kb = pa["kappa"], pb["kappa"]
    dot = np.sum(pa["mu"] * pb["mu"], axis=-1)
    kappa_sum = np.sqrt(np.maximum(ka**2 + kb**2 + 2 * ka * kb * dot, 0.0))
    flat = kappa_sum.ravel()
    size = _bucket(flat.size, _MIN_ROWS)  # one compilation for nearby sizes
    with jax.enable_x64(True):
        padded = jnp.asarray(np.concatenate([flat, np.ones(size - flat.size)]))
        log_c = np.asarray(_log_vmf_normalizer(d, padded))[: flat.size]
    return pa["log_normalizer"] + pb["log_normalizer"] - log_c.reshape(kappa_sum.shape)


@partial(jax.jit, static_argnums=0)
def _log_vmf_normalizer(d, kappa):
    from bayesvmf import special

    return special.log_vmf_normalizer(d, kappa)


def _check_same_family(mixtures):
    for m in mixtures:
        m._check_is_fitted()
    first = mixtures[0]
    for m in mixtures[1:]:
        if m.family != first.family:
            raise ValueError(f"mixtures of different families: {first.family!r} and {m.family!r}")
        if m._dim != first._dim:
            raise ValueError(f"mixtures of different dimensions: {first._dim} and {m._dim}")
    return first.family, first._dim


def _log_cross_matrix(mixtures_a, mixtures_b):
    """Return log int m_i m'_j for every pair: (len(a), len(b)), vectorised in blocks of rows."""
    family, d = _check_same_family(list(mixtures_a) + list(mixtures_b))
    pa, log_wa = _stack_mixtures(mixtures_a)
    pb, log_wb = _stack_mixtures(mixtures_b)
    ka = log_wa.shape[1]
    width = d * d if family == "wishart" else d
    rows = max(1, _CS_BLOCK // (ka * log_wb.size * width))
    pb = {name: v[None, None] for name, v in pb.items()}  # (1, 1, Mb, Kb, ...)
    out = np.empty((len(mixtures_a), len(mixtures_b)))
    for start in range(0, len(mixtures_a), rows):
        block = slice(start, start + rows)
        pa_block = {name: v[block][:, :, None, None] for name, v in pa.items()}
        log_inner = _log_component_inner(family, d, pa_block, pb)
        log_w = log_wa[block][:, :, None, None] + log_wb[None, None]
        out[block] = scipy.special.logsumexp(log_w + log_inner, axis=(1, 3))
    return out


def _log_self_inner(mixtures):
    """Return log int m_i^2 for every mixture: (len(mixtures),)."""
    family, d = _check_same_family(list(mixtures))
    p, log_w = _stack_mixtures(mixtures)
    log_inner = _log_component_inner(
        family, d, {n: v[:, :, None] for n, v in p.items()}, {n: v[:, None] for n, v in p.items()}
    )
    return scipy.special.logsumexp(log_w[:, :, None] + log_w[:, None, :] + log_inner, axis=(1, 2))


def _log_inner_products(a: KMLEMixture, b: KMLEMixture):
    r"""Return the (K_a, K_b) matrix log int p_j q_j' (sec. 4 of [1]_)."""
    family, d = _check_same_family([a, b])
    pa = {n: np.asarray(v)[:, None] for n, v in a._params._asdict().items()}
    pb = {n: np.asarray(v)[None, :] for n, v in b._params._asdict().items()}
    return _log_component_inner(family, d, pa, pb)


def cauchy_schwarz_divergence(a: KMLEMixture, b: KMLEMixture) -> float:
    r"""Return the closed-form Cauchy-Schwarz divergence between two fitted mixtures.

    .. math::

        CS(m : m') = -\log \frac{\int m m'}{\sqrt{\int m^2 \int m'^2}}, \qquad
        \int m m' = \sum_{j,j'} w_j w'_{j'} \exp\{F(\theta_j + \theta'_{j'}) - F(\theta_j)
        - F(\theta'_{j'})\}

    (sec. 4 of [1]_, [3]_), in log space (log-sum-exp). The square root, missing in the
    paper's display, makes :math:`CS(m:m) = 0`; :math:`CS \ge 0` by the Cauchy-Schwarz
    inequality and it is symmetric. For Wishart mixtures every pair of components must
    have :math:`n_j + n'_{j'} > 2d` (otherwise :math:`\theta_j + \theta'_{j'}` leaves the
    natural parameter space and the integral diverges).

    Parameters
    ----------
    a, b : KMLEMixture
        Fitted mixtures of the same family and dimension.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Different families or dimensions, or a divergent integral.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import wishart
    >>> X = wishart(10, np.eye(2)).rvs(60, random_state=0)
    >>> m = KMLEMixture(n_components=2, random_state=0).fit(X)
    >>> abs(cauchy_schwarz_divergence(m, m)) < 1e-10
    True
    """
    return float(cauchy_schwarz_matrix([a], [b])[0, 0])


def cauchy_schwarz_matrix(mixtures_a, mixtures_b=None):
    """Return the matrix of :func:`cauchy_schwarz_divergence` between two lists of mixtures.

    Parameters
    ----------
    mixtures_a : sequence of KMLEMixture
    mixtures_b : sequence of KMLEMixture, optional
        Defaults to ``mixtures_a``.

    Returns
    -------
    ndarray of shape (len(mixtures_a), len(mixtures_b))
    """
    mixtures_a = list(mixtures_a)
    mixtures_b = mixtures_a if mixtures_b is None else list(mixtures_b)
    _check_same_family(mixtures_a + mixtures_b)
    self_a = _log_self_inner(mixtures_a)
    self_b = self_a if mixtures_b is mixtures_a else _log_self_inner(mixtures_b)
    cross = _log_cross_matrix(mixtures_a, mixtures_b)
    return 0.5 * self_a[:, None] + 0.5 * self_b[None, :] - cross


# ---------------------------------------------------------------------------------------------
# Motion retrieval (sec. 4 of [1])
# ---------------------------------------------------------------------------------------------


def windowed_cross_products(series, window_sizes, step, shrinkage=1e-3):
    r"""Return the cross-product matrices of column-centred windows of one series.

    For each window length :math:`w` in ``window_sizes`` and each start
    :math:`0, s, 2s, \dots` the window :math:`\mathbb X` (:math:`w \times d`) is centred
    column-wise (footnote 3 of [1]_) and :math:`X = \mathbb X^\top \mathbb X` is kept;
    a window longer than the series is replaced by the whole series. Shrinkage
    :math:`X + \epsilon\, \mathrm{tr}(X)/d\, I` makes rank-deficient windows (fewer time
    steps than channels) SPD.

    Parameters
    ----------
    series : array of shape (n_times, d)
    window_sizes : sequence of int
    step : int
        Stride between window starts.
    shrinkage : float, default=1e-3
        :math:`\epsilon \ge 0`.

    Returns
    -------
    ndarray of shape (n_windows, d, d)

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(50, 3))
    >>> windowed_cross_products(x, window_sizes=(20, 50), step=10).shape
    (5, 3, 3)
    """
    series = np.asarray(series, dtype=np.float64)
    if series.ndim != 2:
        raise ValueError(f"series must be 2-D (n_times, d); got shape {series.shape}")
    n_times, d = series.shape
    mats = []
    for w in window_sizes:
        w = min(int(w), n_times)
        for start in range(0, n_times - w + 1, step):
            window = series[start : start + w]
            window = window - window.mean(axis=0)
            mats.append(window.T @ window)
    mats = np.unique(np.asarray(mats), axis=0)  # whole-series windows may repeat
    trace = np.trace(mats, axis1=1, axis2=2)
    return mats + (shrinkage * trace / d)[:, None, None] * np.eye(d)


def nearest_neighbor_retrieval(
    train_series,
    y_train,
    test_series,
    *,
    window_sizes,
    step,
    shrinkage=1e-3,
    n_components=None,
    lam=0.25,
    dp_rule="gain",
    max_dof=1e6,
    random_state=0,
):
    """Classify series by 1-NN under the Cauchy-Schwarz divergence between Wishart mixtures.

    The pipeline of sec. 4 of [1]_: every series becomes its windowed cross-product
    matrices (:func:`windowed_cross_products`), a Wishart mixture is fitted to them by
    :class:`KMLEMixture`, and each test series takes the label of the training series
    whose mixture is closest in :func:`cauchy_schwarz_divergence`. With ``n_components``
    given, series with fewer windows use as many components as they have windows.

    Parameters
    ----------
    train_series, test_series : sequence of arrays of shape (n_times, d)
    y_train : array of shape (n_train,)
    window_sizes, step, shrinkage
        See :func:`windowed_cross_products`.
    n_components, lam, dp_rule, max_dof, random_state
        See :class:`KMLEMixture`.

    Returns
    -------
    y_pred : ndarray of shape (n_test,)
    divergences : ndarray of shape (n_test, n_train)
    """

    def fit_one(s):
        mats = windowed_cross_products(s, window_sizes, step, shrinkage)
        k = None if n_components is None else min(n_components, len(mats))
        model = KMLEMixture(
            n_components=k, lam=lam, dp_rule=dp_rule, max_dof=max_dof, random_state=random_state
        )
        return model.fit(mats)

    train = [fit_one(s) for s in train_series]
    test = [fit_one(s) for s in test_series]
    div = cauchy_schwarz_matrix(test, train)
    return np.asarray(y_train)[np.argmin(div, axis=1)], div
