r"""Special functions of the von Mises-Fisher distribution, exact at high dimension.

The vMF density on the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d` is
:math:`f(x \mid \mu, \kappa) = C_d(\kappa) \exp(\kappa \mu^\top x)` with

.. math::

    C_d(\kappa) = \frac{\kappa^{\nu}}{(2\pi)^{\nu + 1} I_{\nu}(\kappa)}, \qquad \nu = d/2 - 1,

and its mean resultant length is :math:`A_d(\kappa) = I_{d/2}(\kappa) / I_{d/2-1}(\kappa)`.
:math:`I_\nu(\kappa)` overflows double precision for :math:`\kappa > 713`, and underflows
for :math:`\nu \gg \kappa`, so nothing here ever forms it: every quantity is computed in
log space or as a ratio.

========================================  ==========================================
code name                                 symbol
========================================  ==========================================
``d``                                     dimension of the ambient space (sphere S^{d-1})
``nu``                                    order of the Bessel function, d/2 - 1
``kappa``, ``x``                          concentration, Bessel argument
``rbar``                                  mean resultant length of the data
``log_vmf_normalizer(d, kappa)``          :math:`\log C_d(\kappa)`
``mean_resultant_length(d, kappa)``       :math:`A_d(\kappa)`
``one_minus_mean_resultant_length``       :math:`1 - A_d(\kappa)`
========================================  ==========================================

Method
------
* Order :math:`\nu \ge 20`: the uniform asymptotic (Debye) expansion of :math:`I_\nu(\nu z)`
  and of its derivative, eqs. 10.41.3-10.41.4 of [1]_, with 13 terms. The ratio
  :math:`I_{\nu+1}/I_\nu = I'_\nu/I_\nu - \nu/x` is written so that no two large terms
  cancel: with :math:`s = \sqrt{1+z^2}`, :math:`t = 1/s`,
  :math:`U = \sum_k u_k(t)\nu^{-k}`, :math:`V = \sum_k v_k(t)\nu^{-k}` and the polynomials
  :math:`w_k = (v_k - u_k)/(1 - t^2)` (exact polynomial division: :math:`v_k(1) = u_k(1)`),

  .. math::

      A = z\Big(\frac{1}{1+s} + \frac{t W}{U}\Big), \qquad
      1 - A = \frac{1 + z/(1+s)}{z+s} - \frac{z t W}{U},

  which keep full relative precision for :math:`\kappa \ll d` (A ~ kappa/d) and for
  :math:`\kappa \gg d` (1 - A ~ (d-1)/(2 kappa)). The truncation error at
  :math:`\nu = 20` is below 3e-15 (checked against mpmath when the threshold was chosen).
* Order :math:`\nu < 20`: the ratio and its complement by the downward recurrence
  :math:`A_{v-1} = x / (2v + x A_v)`, :math:`(1-A_{v-1}) = (2v - x(1-A_v))/(2v + xA_v)`,
  started from the Debye values at order :math:`\nu + 20` (downward recurrence is the
  stable direction for :math:`I_\nu`, Miller's algorithm, sec. 3.6 of [1]_). Then
  :math:`\log I_\nu = \log I_{\nu+20} - \sum \log A_v` for :math:`x > 30`, and the power
  series :math:`\log I_\nu(x) = \nu\log(x/2) - \log\Gamma(\nu+1) + \log {}_0F_1(;\nu+1;x^2/4)`
  for :math:`x \le 30` (64 terms, all positive).
* :math:`\log C_d` is assembled so that the :math:`\nu\log\kappa` terms cancel analytically,
  never numerically: :math:`\log C_d(\kappa) = -\log|S^{d-1}| - \log {}_0F_1(;d/2;\kappa^2/4)`
  on the series branch (exact at :math:`\kappa = 0`), and
  :math:`\nu(\log\nu + \log(1+s) - s) - (\nu+1)\log 2\pi + \tfrac12\log 2\pi\nu
  + \tfrac14\log(1+z^2) - \log U` on the Debye branch.

The pointwise evaluations of the two branches (Debye expansion, recurrence, series) are in
:mod:`bayesvmf._bessel_branches`; this module selects the branch, adds the custom JVPs and
holds the public functions.

Accuracy
--------
float64, against mpmath quadrature of the definition at 45 digits, confirmed at 55
(``tests/data/special_table.csv``, 30 significant digits stored, written by
``tests/data/make_special_table.py``) over :math:`2 \le d \le 10^5` and
:math:`0 \le \kappa \le 10^7`: :math:`\log C_d` and :math:`\log I_\nu` to
``1e-12 * max(1, |value|)`` (an absolute 1e-12 where the value is below 1 in magnitude,
which is a relative 1e-12 on the density itself), :math:`A_d` and :math:`1 - A_d` to
relative 1e-12. float32 stays finite over the whole range; its measured error on the same
table is below ``5e-6 * max(1, |value|)`` for the logs (measured 3.5e-6 at d = 41,
kappa = 41, where log C ~ 1 is assembled from terms of size nu log nu ~ 60), relative 1e-5
for :math:`A_d`, and relative 1e-4 for :math:`1 - A_d` (measured 6e-5 at d = 2,
kappa = 3000: the recurrence for small d amplifies rounding up to ~400-fold)
(``tests/test_special.py::test_float32``).

Gradients: ``jax.grad`` of :func:`log_vmf_normalizer` in ``kappa`` is :math:`-A_d(\kappa)`
(a custom JVP, so it is as exact as :math:`A_d`); :func:`log_bessel_iv` in ``x`` is
:math:`A + \nu/x`; :func:`kappa_from_rbar` in ``rbar`` is :math:`1/A_d'(\kappa)` by the
implicit function theorem. Derivatives in ``d`` or ``nu`` are not implemented and raise.

References
----------
.. [1] NIST Digital Library of Mathematical Functions, chapter 10 (Bessel functions),
   https://dlmf.nist.gov/10.41 and sec. 3.6 (linear recurrences).
.. [2] A. Banerjee, I. S. Dhillon, J. Ghosh, S. Sra (2005). Clustering on the unit
   hypersphere using von Mises-Fisher distributions. JMLR 6, 1345-1382 (eq. 4.4).
.. [3] S. Sra (2012). A short note on parameter approximation for von Mises-Fisher
   distributions. Computational Statistics 27, 177-190.
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.scipy.special import gammaln
from scipy.special import gammaln as _host_gammaln

from bayesvmf import _compile_cache

from ._bessel_branches import (
    _LOG_2PI,
    DEBYE_MIN_ORDER,
    SERIES_MAX_ARG,
    _debye,
    _debye_log_normalizer_ratio,
    _debye_scaled,
    _log_hypergeometric_0f1_minus_one,
    _recurrence,
)

__all__ = [
    "banerjee_kappa",
    "kappa_from_rbar",
    "log_bessel_iv",
    "log_sphere_area",
    "log_vmf_normalizer",
    "log_vmf_normalizer_plus_kappa",
    "log_vmf_normalizer_ratio",
    "mean_resultant_length",
    "one_minus_mean_resultant_length",
]


def _promote(order_like, x):
    """Turn (order or dimension, argument) into floating arrays of a common dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    order_like = jnp.asarray(order_like, dtype=x.dtype)
    return order_like, x


def _check_no_tangent(tangent, name):
    if not isinstance(tangent, SymbolicZero):
        raise NotImplementedError(f"the derivative with respect to {name} is not implemented")


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------
def log_sphere_area(d):
    r"""Return :math:`\log|S^{d-1}| = \log 2 + (d/2)\log\pi - \log\Gamma(d/2)`.

    The two last terms nearly cancel (at d = 20 they are 11.4 and 12.8 for a value of
    -0.66), so a static ``d`` (a Python or NumPy number or array, the usual case) is
    evaluated in float64 on the host and rounded once to the working precision: correctly
    rounded in float32 too, where the float32 formula is up to ~50 ulp off. A traced ``d``
    uses the formula in the working precision.

    Parameters
    ----------
    d : float or array
        Dimension of the ambient space, ``d >= 2`` (the circle is ``d = 2``).

    Examples
    --------
    >>> import numpy as np
    >>> bool(np.isclose(log_sphere_area(3), np.log(4 * np.pi)))
    True
    """
    if _order_of(d) is not None:
        d_host = np.asarray(d, dtype=np.float64)
        value = np.log(2.0) + 0.5 * d_host * np.log(np.pi) - _host_gammaln(0.5 * d_host)
        floating = isinstance(d, np.ndarray | np.generic) and np.issubdtype(d.dtype, np.floating)
        return jnp.asarray(value, dtype=d.dtype if floating else jnp.result_type(float))
    d = jnp.asarray(d)
    if not jnp.issubdtype(d.dtype, jnp.floating):
        d = d.astype(jnp.result_type(float))
    return jnp.log(2.0) + 0.5 * d * jnp.log(jnp.pi) - gammaln(0.5 * d)


# Each function below comes in three compiled variants, one per branch set: "debye"
# (nu >= 20), "small" (nu < 20) and "both" (order known only at run time). The public
# function picks the variant at trace time from a static d or nu, so that the common case
# (a Python-int dimension) evaluates one branch only.
_BRANCHES = ("debye", "small", "both")


def _select(branch, nu, debye, small):
    """Evaluate debye(nu) and/or small(nu) (arrays or tuples of arrays) as the branch needs."""
    if branch == "debye":
        return debye(nu)
    if branch == "small":
        return small(nu)
    use_debye = nu >= DEBYE_MIN_ORDER
    return jax.tree.map(
        lambda a, b: jnp.where(use_debye, a, b),
        debye(jnp.where(use_debye, nu, DEBYE_MIN_ORDER)),
        small(jnp.where(use_debye, 0.0, nu)),
    )


def _ratio_pair(branch, nu, x):
    """Return (A, 1 - A) with A = I_{nu+1}(x)/I_nu(x)."""
    return _select(branch, nu, lambda n: _debye(n, x)[1:3], lambda n: _recurrence(n, x)[:2])


def _make_log_bessel_iv(branch):
    @jax.custom_jvp
    def log_iv(nu, x):
        def small(nu):
            x_series = jnp.where(x > 0, x, 1.0)
            series = (
                nu * jnp.log(0.5 * x_series)
                - gammaln(nu + 1.0)
                + _log_hypergeometric_0f1_minus_one(nu + 1.0, 0.25 * x * x)
            )
            return jnp.where(x <= SERIES_MAX_ARG, series, _recurrence(nu, x)[2])

        value = _select(branch, nu, lambda n: _debye(n, x)[0], small)
        at_zero = jnp.where(nu == 0, 0.0, -jnp.inf).astype(x.dtype)
        return jnp.where(x == 0, at_zero, value)

    def log_iv_jvp(primals, tangents):
        nu, x = primals
        nu_dot, x_dot = tangents
        _check_no_tangent(nu_dot, "the order nu")
        value = log_iv(nu, x)
        if isinstance(x_dot, SymbolicZero):
            return value, jnp.zeros_like(value)
        ratio, _ = _ratio_pair(branch, nu, x)
        # d/dx log I_nu(x) = I_{nu+1}/I_nu + nu/x (DLMF 10.29.2); 0 for nu = 0 at x = 0.
        nu_over_x = jnp.where(nu == 0, 0.0, nu / x)
        return value, (ratio + nu_over_x) * x_dot

    log_iv.defjvp(log_iv_jvp, symbolic_zeros=True)
    return log_iv


def _make_log_vmf_normalizer(branch, scaled):
    """Return log C_d(kappa) (``scaled`` False) or log C_d(kappa) + kappa (``scaled`` True).

    The scaled form is evaluated without forming log C_d: the Debye branch uses
    nu s - kappa = nu / (s + z), the recurrence starts from the exponentially scaled
    log I_nu(kappa) - kappa.
    """

    @jax.custom_jvp
    def log_normalizer(d, kappa, log_area):
        nu = 0.5 * d - 1.0

        def small(nu):
            # -log|S^{d-1}| - log 0F1(; d/2; kappa^2/4): nu log kappa cancels analytically.
            lead = kappa - log_area if scaled else -log_area
            series = lead - _log_hypergeometric_0f1_minus_one(nu + 1.0, 0.25 * kappa * kappa)
            kappa_safe = jnp.where(kappa > 0, kappa, 1.0)
            recurrence = (
                nu * jnp.log(kappa_safe)
                - (nu + 1.0) * _LOG_2PI
                - _recurrence(nu, kappa, scaled=scaled)[2]
            )
            return jnp.where(kappa <= SERIES_MAX_ARG, series, recurrence)

        if scaled:
            value = _select(branch, nu, lambda n: _debye_scaled(n, kappa)[1], small)
        else:
            value = _select(branch, nu, lambda n: _debye(n, kappa)[3], small)
        return jnp.where(kappa == 0, -log_area, value)

    def log_normalizer_jvp(primals, tangents):
        d, kappa, log_area = primals
        d_dot, kappa_dot, area_dot = tangents
        _check_no_tangent(d_dot, "the dimension d")
        _check_no_tangent(area_dot, "the dimension d")
        value = log_normalizer(d, kappa, log_area)
        if isinstance(kappa_dot, SymbolicZero):
            return value, jnp.zeros_like(value)
        # d/dkappa log C_d(kappa) = -A_d(kappa) and d/dkappa (log C_d + kappa) = 1 - A_d,
        # both exactly (no difference of large terms).
        ratio, one_minus_ratio = _ratio_pair(branch, 0.5 * d - 1.0, kappa)
        return value, (one_minus_ratio if scaled else -ratio) * kappa_dot

    log_normalizer.defjvp(log_normalizer_jvp, symbolic_zeros=True)
    return log_normalizer


def _order_of(d):
    """Return nu = d/2 - 1 for a static d (Python or NumPy number/array); None if traced."""
    if isinstance(d, numbers.Real | np.ndarray | np.generic):
        return 0.5 * np.asarray(d, dtype=float) - 1.0
    return None


def _branch_of_order(nu):
    """Return the branch set a static order needs (None: traced, both branches)."""
    if nu is None:
        return "both"
    if np.all(nu >= DEBYE_MIN_ORDER):
        return "debye"
    if np.all(nu < DEBYE_MIN_ORDER):
        return "small"
    return "both"


# jitted once here, so that eager calls do not re-trace the loops (each call would otherwise
# build new loop-body closures and compile them again).
_LOG_BESSEL_IV = {b: _compile_cache.jit(_make_log_bessel_iv(b)) for b in _BRANCHES}


def _make_log_vmf_normalizer_ratio(branch):
    """Return log C_d(kappa) - log C_d(0) (see :func:`log_vmf_normalizer_ratio`)."""
    log_c_small = _make_log_vmf_normalizer("small", False)

    @jax.custom_jvp
    def log_ratio(d, kappa, log_area):
        def small(nu):  # orders below 20: log C and log|S| are at most ~20 in size
            return log_c_small(2.0 * nu + 2.0, kappa, log_area) + log_area

        value = _select(
            branch, 0.5 * d - 1.0, lambda n: _debye_log_normalizer_ratio(n, kappa), small
        )
        return jnp.where(kappa == 0, 0.0, value)

    def log_ratio_jvp(primals, tangents):
        d, kappa, log_area = primals
        d_dot, kappa_dot, area_dot = tangents
        _check_no_tangent(d_dot, "the dimension d")
        _check_no_tangent(area_dot, "the dimension d")
        value = log_ratio(d, kappa, log_area)
        if isinstance(kappa_dot, SymbolicZero):
            return value, jnp.zeros_like(value)
        ratio, _ = _ratio_pair(branch, 0.5 * d - 1.0, kappa)  # d/dkappa log C_d = -A_d
        return value, -ratio * kappa_dot

    log_ratio.defjvp(log_ratio_jvp, symbolic_zeros=True)
    return log_ratio


_LOG_VMF_NORMALIZER = {
    (b, scaled): _compile_cache.jit(_make_log_vmf_normalizer(b, scaled))
    for b in _BRANCHES
    for scaled in (False, True)
}
_RATIO_PAIR = {b: _compile_cache.jit(functools.partial(_ratio_pair, b)) for b in _BRANCHES}
_LOG_VMF_NORMALIZER_RATIO = {
    b: _compile_cache.jit(_make_log_vmf_normalizer_ratio(b)) for b in _BRANCHES
}


def _normalizer(d, kappa, scaled):
    """Evaluate log C_d(kappa) (+ kappa if ``scaled``) with the branch a static d needs."""
    branch = _branch_of_order(_order_of(d))
    # log|S^{d-1}| (the series branch and kappa = 0) on the host for a static d: correctly
    # rounded, and the same value as log_sphere_area(d), so kappa = 0 is exactly the uniform
    log_area = log_sphere_area(d)
    d, kappa = _promote(d, kappa)
    return _LOG_VMF_NORMALIZER[branch, scaled](d, kappa, jnp.asarray(log_area, kappa.dtype))


def log_bessel_iv(nu, x):
    r"""Return :math:`\log I_\nu(x)`, the log of the modified Bessel function of the first kind.

    Never overflows or underflows for :math:`0 \le \nu \le 10^5` and
    :math:`0 \le x \le 10^7` (Debye expansion for :math:`\nu \ge 20`; power series or
    downward recurrence below; see the module docstring). ``jax.grad`` in ``x`` is
    :math:`I_{\nu+1}/I_\nu + \nu/x`.

    Parameters
    ----------
    nu : float or array
        Order, ``nu >= 0``. Not differentiable. A Python or NumPy number lets the branch be
        chosen at trace time; a traced ``nu`` evaluates both branches.
    x : float or array
        Argument, ``x >= 0``. ``log I_0(0) = 0`` and ``log I_nu(0) = -inf`` for ``nu > 0``.

    Returns
    -------
    array
        Broadcast shape of ``nu`` and ``x``, dtype of ``x`` (float64 under x64).

    Examples
    --------
    >>> import numpy as np, scipy.special as sc
    >>> bool(np.isclose(log_bessel_iv(2.5, 3.0), np.log(sc.iv(2.5, 3.0))))
    True
    >>> bool(np.isfinite(log_bessel_iv(5e4, 1e7)))
    True
    """
    branch = _branch_of_order(None if _order_of(nu) is None else np.asarray(nu, dtype=float))
    nu, x = _promote(nu, x)
    return _LOG_BESSEL_IV[branch](nu, x)


def log_vmf_normalizer(d, kappa):
    r"""Return :math:`\log C_d(\kappa)`, the log normalising constant of the vMF density.

    .. math::

        \log C_d(\kappa) = \nu\log\kappa - (\nu+1)\log(2\pi) - \log I_\nu(\kappa),
        \quad \nu = d/2 - 1,

    evaluated without forming :math:`I_\nu` and with the :math:`\nu\log\kappa` terms
    cancelled analytically (module docstring). ``kappa = 0`` gives exactly
    :math:`-\log|S^{d-1}|` (the uniform distribution). ``jax.grad`` in ``kappa`` is
    :math:`-A_d(\kappa)` (custom JVP).

    Parameters
    ----------
    d : int, float or array
        Dimension, ``2 <= d`` (accuracy tested up to 1e5). A Python or NumPy number lets the
        branch be chosen at trace time; a traced ``d`` evaluates both branches.
    kappa : float or array
        Concentration, ``kappa >= 0`` (accuracy tested up to 1e7).

    Returns
    -------
    array
        Broadcast shape of ``d`` and ``kappa``, dtype of ``kappa``.

    Examples
    --------
    >>> import numpy as np
    >>> kappa = 2.0  # on S^2, C_3(kappa) = kappa / (4 pi sinh kappa)
    >>> bool(np.isclose(log_vmf_normalizer(3, kappa), np.log(kappa / (4 * np.pi * np.sinh(kappa)))))
    True
    """
    return _normalizer(d, kappa, scaled=False)


def log_vmf_normalizer_ratio(d, kappa):
    r"""Return :math:`\log C_d(\kappa) - \log C_d(0) = \log C_d(\kappa) + \log|S^{d-1}|`.

    The log normaliser relative to the uniform distribution's, for differences of log
    normalisers (the KL divergences of :mod:`bayesvmf.distribution`). At large d both
    :math:`\log C_d(\kappa)` and :math:`\log|S^{d-1}|` are of size :math:`\nu\log\nu`
    while this value is of size :math:`\kappa^2/(2d)` for :math:`\kappa \ll d`: the Debye
    branch (:math:`\nu \ge 20`) cancels those terms analytically (Stirling's series of
    :math:`\log\Gamma(\nu + 1)`), so float32 keeps its relative precision (a difference of
    two float32 log normalisers at d = 1000 lost three digits). ``kappa = 0`` gives exactly
    0. ``jax.grad`` in ``kappa`` is :math:`-A_d(\kappa)` (custom JVP).

    Parameters
    ----------
    d : int, float or array
        Dimension, ``2 <= d``.
    kappa : float or array
        Concentration, ``kappa >= 0``.

    Returns
    -------
    array
        Broadcast shape of ``d`` and ``kappa``, dtype of ``kappa``.

    Examples
    --------
    >>> import numpy as np
    >>> d, kappa = 1000, 10.0
    >>> direct = log_vmf_normalizer(d, kappa) + log_sphere_area(d)
    >>> bool(np.isclose(log_vmf_normalizer_ratio(d, kappa), direct, rtol=1e-10))
    True
    """
    branch = _branch_of_order(_order_of(d))
    log_area = log_sphere_area(d)
    d, kappa = _promote(d, kappa)
    return _LOG_VMF_NORMALIZER_RATIO[branch](d, kappa, jnp.asarray(log_area, kappa.dtype))


def log_vmf_normalizer_plus_kappa(d, kappa):
    r"""Return :math:`\log C_d(\kappa) + \kappa`, the log normaliser of the scaled density.

    :math:`\log C_d(\kappa) \approx -\kappa` for large :math:`\kappa`, so the log density at
    a point near the mode, :math:`\log C_d + \kappa t`, and the entropy,
    :math:`-\log C_d - \kappa A_d`, are small differences of large terms. Written as
    :math:`(\log C_d + \kappa) - \kappa (1 - t)` and
    :math:`-(\log C_d + \kappa) + \kappa (1 - A_d)` with this function, nothing cancels:
    it is evaluated without forming :math:`\log C_d` (module docstring; the Debye branch
    uses :math:`\nu s - \kappa = \nu / (s + z)`, the recurrence starts from
    :math:`\log I_{\nu}(\kappa) - \kappa`, i.e. the exponentially scaled Bessel function).
    ``kappa = 0`` gives exactly ``-log_sphere_area(d)``. ``jax.grad`` in ``kappa`` is
    :math:`1 - A_d(\kappa)` (custom JVP).

    Parameters
    ----------
    d : int, float or array
        Dimension, ``2 <= d``.
    kappa : float or array
        Concentration, ``kappa >= 0``.

    Returns
    -------
    array
        Broadcast shape of ``d`` and ``kappa``, dtype of ``kappa``.

    Examples
    --------
    >>> import numpy as np
    >>> kappa = 2000.0  # on S^2, C_3(kappa) e^kappa = kappa / (2 pi (1 - e^(-2 kappa)))
    >>> bool(np.isclose(log_vmf_normalizer_plus_kappa(3, kappa), np.log(kappa / (2 * np.pi))))
    True
    """
    return _normalizer(d, kappa, scaled=True)


def _ratio_from_dimension(d, kappa):
    branch = _branch_of_order(_order_of(d))
    d, kappa = _promote(d, kappa)
    return _RATIO_PAIR[branch](0.5 * d - 1.0, kappa)


def mean_resultant_length(d, kappa):
    r"""Return :math:`A_d(\kappa) = I_{d/2}(\kappa)/I_{d/2-1}(\kappa)`, in :math:`[0, 1)`.

    Computed as a ratio (Debye expansion of :math:`I'_\nu/I_\nu` or downward recurrence,
    module docstring), never as the exponential of a difference of two log-Bessel values.
    It is :math:`E[\mu^\top x]` under :math:`\mathrm{vMF}(\mu, \kappa)` and
    :math:`-\frac{d}{d\kappa}\log C_d(\kappa)`. Differentiable in ``kappa`` by ordinary
    autodiff through the stable formulas.

    Parameters
    ----------
    d : int, float or array
        Dimension, ``d >= 2``.
    kappa : float or array
        Concentration, ``kappa >= 0``; ``A_d(0) = 0``.

    Examples
    --------
    >>> import numpy as np
    >>> kappa = 3.0  # on S^2, A_3(kappa) = coth(kappa) - 1/kappa
    >>> bool(np.isclose(mean_resultant_length(3, kappa), 1 / np.tanh(kappa) - 1 / kappa))
    True
    """
    return _ratio_from_dimension(d, kappa)[0]


def one_minus_mean_resultant_length(d, kappa):
    r"""Return :math:`1 - A_d(\kappa)` without cancellation (accurate when kappa >> d).

    For large :math:`\kappa`, :math:`1 - A_d(\kappa) \approx (d-1)/(2\kappa)`; computing
    it as ``1 - mean_resultant_length(d, kappa)`` would lose every digit below 1e-16.

    Parameters
    ----------
    d : int, float or array
        Dimension, ``d >= 2``.
    kappa : float or array
        Concentration, ``kappa >= 0``.

    Examples
    --------
    >>> import numpy as np
    >>> bool(np.isclose(one_minus_mean_resultant_length(3, 1e9) * 1e9, 1.0, rtol=1e-5))
    True
    """
    return _ratio_from_dimension(d, kappa)[1]


def banerjee_kappa(d, rbar):
    r"""Return the approximation :math:`\kappa \approx \bar r (d - \bar r^2)/(1 - \bar r^2)`.

    Eq. (4.4) of [2]_; the starting point of :func:`kappa_from_rbar`. Its relative error
    is a few percent at worst.

    Parameters
    ----------
    d : float or array
        Dimension.
    rbar : float or array
        Mean resultant length in ``[0, 1)``.

    Examples
    --------
    >>> round(float(banerjee_kappa(3, 0.5)), 6)  # 0.5 (3 - 0.25) / 0.75
    1.833333
    """
    d, rbar = _promote(d, rbar)
    return rbar * (d - rbar * rbar) / ((1.0 - rbar) * (1.0 + rbar))


#: Newton steps on the log scale after the Banerjee start (quadratic convergence: 2-3 are
#: enough from the start's few-percent error; the rest make every regime safe).
KAPPA_NEWTON_STEPS = 8


#: Half-width, in log kappa, of the central difference that gives the log-slope of
#: ``1 - A_d`` where the analytic slope cancels (below 64 bits and kappa > 10 (d + 1)):
#: the difference's bias is ~h^2/6 of the slope's third derivative (1e-4 relative) and its
#: noise ~(error of 1 - A) / (2 h) (about 2e-3 relative in float32).
LOG_SLOPE_HALF_WIDTH = 0.02


def _upper_log_slope(branch, nu, kappa):
    """-d log(1 - A) / d log kappa by a central difference in log kappa (see above)."""
    h = LOG_SLOPE_HALF_WIDTH
    above = _ratio_pair(branch, nu, kappa * jnp.exp(h))[1]
    below = _ratio_pair(branch, nu, kappa * jnp.exp(-h))[1]
    return (jnp.log(below) - jnp.log(above)) / (2.0 * h)


def _differenced(d, kappa):
    """Where the analytic slope of A_d is noise below 64 bits: kappa > 10 (d + 1).

    A'(kappa) = (1 - A)(1 + A) - (d - 1) A / kappa: for kappa >> d the two terms, each
    ~(d - 1) / kappa, cancel to ~(d - 1) / (2 kappa^2), so the relative error of 1 - A
    (up to 1e-4 in float32) becomes ~2e-4 kappa in the slope: wrong steps and gradients
    off by factors once kappa ~ 1e4 (float32 1 - rbar = 7.2e-6 at d = 2 gave 6.2 times the
    root).
    In float64 (error ~1e-14) the cancellation is harmless up to kappa / d ~ 1e10, so
    callers difference only below 64 bits.
    """
    return kappa > 10.0 * (d + 1.0)


def _make_kappa_from_rbar(branch):
    def solve(d, rbar):
        nu = 0.5 * d - 1.0
        tiny = jnp.finfo(rbar.dtype).tiny
        eps = jnp.finfo(rbar.dtype).eps
        rbar_clipped = jnp.clip(rbar, tiny, 1.0 - eps)
        one_minus_rbar = 1.0 - rbar_clipped
        # Newton on u = log kappa for g(u) = log A(kappa) - log rbar (rbar <= 1/2) or
        # h(u) = log(1 - rbar) - log(1 - A(kappa)) (rbar > 1/2): both are nearly linear in u
        # (A ~ kappa/d for small kappa, 1 - A ~ (d-1)/(2 kappa) for large kappa), so Newton
        # converges in a few steps and never leaves kappa > 0.
        upper = rbar_clipped > 0.5

        def body(_, log_kappa):
            kappa = jnp.exp(log_kappa)
            ratio, one_minus_ratio = _ratio_pair(branch, nu, kappa)
            residual = jnp.where(
                upper,
                jnp.log(one_minus_rbar) - jnp.log(one_minus_ratio),
                jnp.log(ratio) - jnp.log(rbar_clipped),
            )
            # A'(kappa) = 1 - A^2 - (d - 1) A / kappa = (1 - A)(1 + A) - (d - 1) A / kappa.
            # For kappa >> d its two terms cancel to a relative error ~ eps kappa / d: harmless
            # in float64, since only the residual sets the precision of the root; below 64
            # bits the log-slope is then a difference of 1 - A (_differenced). It is kept
            # inside its true range (0, ~1.5] so that a poor slope only slows a step.
            slope = one_minus_ratio * (1.0 + ratio) - (d - 1.0) * ratio / kappa
            log_slope = kappa * slope / jnp.where(upper, one_minus_ratio, ratio)
            if jnp.finfo(rbar.dtype).bits < 64:
                log_slope = jnp.where(
                    upper & _differenced(d, kappa), _upper_log_slope(branch, nu, kappa), log_slope
                )
            step = residual / jnp.clip(log_slope, 0.05, 2.0)
            # the clip only guards the first step of a poor start; it never binds near the root
            return log_kappa - jnp.clip(step, -2.0, 2.0)

        start = banerjee_kappa(d, rbar_clipped)
        log_kappa = lax.fori_loop(0, KAPPA_NEWTON_STEPS, body, jnp.log(start))
        return jnp.where(rbar <= 0, 0.0, jnp.exp(log_kappa))

    solve = jax.custom_jvp(solve)

    def solve_jvp(primals, tangents):
        d, rbar = primals
        d_dot, rbar_dot = tangents
        _check_no_tangent(d_dot, "the dimension d")
        kappa = solve(d, rbar)
        if isinstance(rbar_dot, SymbolicZero):
            return kappa, jnp.zeros_like(kappa)
        # Implicit function theorem on A_d(kappa) = rbar: dkappa/drbar = 1 / A_d'(kappa).
        nu = 0.5 * d - 1.0
        (_, one_minus_ratio), (slope, _) = jax.jvp(
            lambda k: _ratio_pair(branch, nu, k), (kappa,), (jnp.ones_like(kappa),)
        )
        if jnp.finfo(kappa.dtype).bits < 64:
            # A' = (1 - A) (-d log(1 - A) / d log kappa) / kappa where it cancels (above)
            slope = jnp.where(
                _differenced(d, kappa),
                one_minus_ratio * _upper_log_slope(branch, nu, kappa) / kappa,
                slope,
            )
        return kappa, rbar_dot / slope

    solve.defjvp(solve_jvp, symbolic_zeros=True)
    return solve


_KAPPA_FROM_RBAR = {b: _compile_cache.jit(_make_kappa_from_rbar(b)) for b in _BRANCHES}


def kappa_from_rbar(d, rbar, kappa_max=None):
    r"""Solve :math:`A_d(\kappa) = \bar r` for the concentration, to full precision.

    The maximum-likelihood concentration of a vMF sample with mean resultant length
    :math:`\bar r` (M-step of [2]_). Starts from the Banerjee et al. approximation
    (:func:`banerjee_kappa`, eq. 4.4 of [2]_) and takes ``KAPPA_NEWTON_STEPS`` Newton steps
    on :math:`\log\kappa` (Sra 2012 [3]_ takes Newton steps on :math:`\kappa`; the log scale
    keeps every step positive when :math:`\kappa \gg d`). The residual is formed from
    :math:`1 - A_d` when :math:`\bar r > 1/2`, so :math:`\bar r` close to 1 loses nothing.

    Clipping (documented behaviour, not an error): ``rbar <= 0`` gives ``kappa = 0`` (the
    uniform distribution); ``rbar`` is clipped to ``1 - eps`` of its dtype, so
    ``rbar >= 1`` gives the finite ``kappa ~ (d - 1) / (2 eps)``; the result is then
    clipped to ``kappa_max`` when it is given. ``jax.grad`` in ``rbar`` is
    :math:`1/A_d'(\kappa)` (implicit function theorem).

    Parameters
    ----------
    d : int, float or array
        Dimension, ``d >= 2``.
    rbar : float or array
        Mean resultant length :math:`|\sum_i x_i| / n`.
    kappa_max : float, optional
        Upper bound on the result (estimators cap components this way).

    Examples
    --------
    >>> import numpy as np
    >>> kappa = kappa_from_rbar(100, 0.9)
    >>> bool(np.isclose(mean_resultant_length(100, kappa), 0.9, rtol=1e-14))
    True
    """
    branch = _branch_of_order(_order_of(d))
    d, rbar = _promote(d, rbar)
    kappa = _KAPPA_FROM_RBAR[branch](d, rbar)
    if kappa_max is not None:
        kappa = jnp.minimum(kappa, kappa_max)
    return kappa
