r"""Bracketed root finder, digamma and the multivariate digamma function of k-MLE (eq. 3 of [1]_).

The Wishart degrees-of-freedom equation (eq. 5 of [1]_ and its profile form, see
:mod:`bayesvmf.models.kmle`) is solved by :func:`_solve_increasing` on
:math:`t = \log(x - (d-1)/2)`.


References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
"""

from __future__ import annotations

import math
from functools import partial

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln

from bayesvmf import _compile_cache

#: Lower limit of the root finder's variable t = log(x - (d-1)/2): x - (d-1)/2 = 2e-22.
_T_LO = -50.0
_ROOT_MAX_ITER = 200


def _solve_increasing(fun, target, t_lo, t_hi, max_iter=_ROOT_MAX_ITER):
    """Solve ``fun(t) = target`` elementwise for an increasing ``fun`` on ``[t_lo, t_hi]``.

    A safeguarded Newton method (``rtsafe``): Newton steps while they stay inside the
    current bracket, bisection otherwise, the bracket shrinking at every step. A target
    above ``fun(t_hi)`` gives ``t_hi`` and one at or below ``fun(t_lo)`` gives ``t_lo``: the
    solution constrained to the bracket, which is the constrained maximiser wherever
    ``fun(t) = target`` is the stationarity condition of a unimodal objective (the
    Wishart degrees of freedom, :func:`~bayesvmf.models.kmle._wishart.wishart_mle_from_stats`).
    ``fun`` returns ``(value, derivative)``.
    """
    f_hi, _ = fun(t_hi)
    f_lo, _ = fun(t_lo)
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
    below = target <= f_lo
    _, _, t, _, _ = lax.while_loop(cond, body, (lo, hi, t0, jnp.int32(0), above | below))
    return jnp.where(above, hi, jnp.where(below, lo, t))


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


def _multigammaln(x, d, gammaln=gammaln):
    """Log Gamma_d(x) = d(d-1)/4 log pi + sum_j log Gamma(x - (j-1)/2).

    ``gammaln`` is JAX's by default; the Cauchy-Schwarz matrices pass SciPy's to evaluate
    the same formula on the host in NumPy (no compilation per shape).
    """
    j = np.arange(d, dtype=x.dtype)
    return d * (d - 1) / 4 * math.log(math.pi) + gammaln(x[..., None] - j / 2).sum(axis=-1)


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


@partial(_compile_cache.jit, static_argnums=1)
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


@partial(_compile_cache.jit, static_argnums=1)
def _inverse_multivariate_digamma(y, d):
    dtype = jnp.result_type(y.dtype, jnp.float32)
    y = y.astype(dtype)
    # clip y/d so that exp does not overflow; Psi_d(x) ~ d log x, so x < e^700 suffices.
    t_hi = jnp.log(jnp.exp(jnp.minimum(y / d, 700.0)) + 1.0)
    t = _solve_increasing(lambda s: _mdigamma_of_t(s, d), y, jnp.asarray(_T_LO, dtype), t_hi)
    return (d - 1) / 2 + jnp.exp(t)
