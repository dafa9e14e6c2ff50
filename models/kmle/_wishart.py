r"""The Wishart distribution as an exponential family and its MLE (sec. 2 of [1]_).

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.special
from jax import lax
from jax.scipy.special import gammaln as jax_gammaln

from bayesvmf import _compile_cache
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models.kmle._special import (
    _T_LO,
    _mdigamma_of_t,
    _multigammaln,
    _solve_increasing,
    inverse_multivariate_digamma,
)


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


@_compile_cache.jit
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


@_compile_cache.jit
def _wishart_natural_params(dof, scale):
    d = scale.shape[-1]
    chol = jnp.linalg.cholesky(scale)
    eye = jnp.broadcast_to(jnp.eye(d, dtype=chol.dtype), chol.shape)
    chol_inv = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)
    theta_s = jnp.swapaxes(chol_inv, -1, -2) @ chol_inv
    theta_s = 0.5 * (theta_s + jnp.swapaxes(theta_s, -1, -2))
    return (dof - d - 1) / 2, theta_s


def _wishart_log_normalizer_logdet(theta_n, log_det_theta_s, d, gammaln=jax_gammaln):
    """F of eq. (1) given log|theta_S| (JAX, or NumPy with ``gammaln=scipy.special.gammaln``)."""
    x = theta_n + (d + 1) / 2
    return x * (d * math.log(2.0) - log_det_theta_s) + _multigammaln(x, d, gammaln)


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


@_compile_cache.jit
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


@_compile_cache.jit
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


def wishart_mle_from_stats(count, sum_log_det, scatter, max_dof=1e6, min_dof=None):
    r"""Return the Wishart MLE from summed sufficient statistics (fixed point of Algorithm 1).

    With :math:`a = \frac1N\sum_i \log|X_i| - \log|\frac1N\sum_i X_i| \le 0`, the fixed point
    of eqs. (4)-(5) of [1]_ satisfies :math:`\Psi_d(n/2) - d\log(n/2) = a`, solved by the
    bracketed root finder for :math:`n \in [\text{min\_dof}, \text{max\_dof}]`; then eq. (4)
    gives :math:`\theta_S = N n (\sum_i X_i)^{-1}` (module docstring). The profile
    likelihood in :math:`n` is unimodal (it increases while :math:`\Psi_d(n/2) - d\log(n/2)
    < a`), so a root outside the interval is replaced by the nearer end, the exact
    constrained maximiser. Vectorised over a leading axis of clusters.

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
    min_dof : float or None, default=None
        Lower bound on :math:`n`, above :math:`d - 1`; None leaves only the family's own
        :math:`n > d - 1` (the unconstrained MLE). :class:`KMLEMixture` passes
        :math:`d + 1` by default so that every Cauchy-Schwarz integral between fitted
        mixtures is finite (:data:`bayesvmf.models.kmle` module docstring).

    Returns
    -------
    WishartParams
        Degrees of freedom, natural parameters and log-normalisers.

    Raises
    ------
    ValueError
        If ``min_dof`` is not above :math:`d - 1` or not below ``max_dof``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([np.eye(2), np.diag([2.0, 1.0]), np.diag([1.0, 3.0])])
    >>> logdet = np.log(np.linalg.det(X))
    >>> p = wishart_mle_from_stats(np.array([3.0]), logdet.sum()[None], X.sum(0)[None])
    >>> bool(p.dof[0] > 1.0)
    True
    >>> p = wishart_mle_from_stats(
    ...     np.array([3.0]), logdet.sum()[None], X.sum(0)[None], min_dof=30.0
    ... )
    >>> round(float(p.dof[0]), 3)  # float32 unless jax.enable_x64
    30.0
    """
    scatter = jnp.asarray(scatter)
    d = scatter.shape[-1]
    if min_dof is None:
        min_dof = d - 1
    elif not d - 1 < min_dof < max_dof:
        raise ValueError(
            f"min_dof must lie in (d - 1, max_dof) = ({d - 1}, {max_dof}); got min_dof={min_dof!r}"
        )
    bounds = jnp.asarray([min_dof, max_dof], scatter.dtype)
    return _wishart_mle_from_stats(jnp.asarray(count), jnp.asarray(sum_log_det), scatter, bounds)


@_compile_cache.jit
def _wishart_mle_from_stats(count, sum_log_det, scatter, bounds):
    """Return the MLE with ``bounds = (min_dof, max_dof)``; ``min_dof = d - 1``: unconstrained."""
    dtype = scatter.dtype
    count = count.astype(dtype)
    d = scatter.shape[-1]
    chol = jnp.linalg.cholesky(scatter)
    log_det_scatter = _logdet_from_cholesky(chol)
    a = sum_log_det / count - log_det_scatter + d * jnp.log(count)
    # t = log(n/2 - (d-1)/2): min_dof = d - 1 maps to -inf, i.e. to the finder's own floor
    t_lo, t_hi = jnp.log(bounds.astype(dtype) / 2 - (d - 1) / 2)
    t_lo = jnp.maximum(t_lo, _T_LO)
    t = _solve_increasing(lambda s: _wishart_profile_of_t(s, d), a, t_lo, t_hi)
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


@_compile_cache.jit
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
