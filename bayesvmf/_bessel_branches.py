r"""The two evaluation branches behind :mod:`bayesvmf.special`, pointwise and without JVPs.

* Order :math:`\nu \ge 20`: the Debye (uniform asymptotic) expansion of :math:`I_\nu`
  (:func:`_debye`, :func:`_debye_scaled`, :func:`_debye_log_normalizer_ratio`, from the
  polynomials of :mod:`bayesvmf._debye`).
* Order :math:`\nu < 20`: the downward recurrence of the ratio started from the Debye values
  (:func:`_recurrence`) and the power series of :math:`{}_0F_1`
  (:func:`_log_hypergeometric_0f1_minus_one`).

The method and its accuracy are in the docstring of :mod:`bayesvmf.special`, which selects
the branch, adds the custom JVPs and holds the public functions. These kernels are a file
of their own so that special.py stays under the project's 800 lines; they import nothing
from it (special imports them).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ._debye import debye_coefficients

#: Orders at or above this use the Debye expansion directly.
DEBYE_MIN_ORDER = 20.0
#: Number of terms u_k, k = 1..13, of the Debye series (error < 3e-15 at order 20).
DEBYE_TERMS = 13
#: Below DEBYE_MIN_ORDER the recurrence starts this many orders up.
RECURRENCE_SHIFT = 20
#: Below DEBYE_MIN_ORDER, arguments up to this use the power series of 0F1.
SERIES_MAX_ARG = 30.0
SERIES_TERMS = 64

_LOG_2PI = float(np.log(2.0 * np.pi))


# Debye polynomials u_k(t), w_k(t) (bayesvmf._debye), generated once at import.
_DEBYE_U, _DEBYE_W = debye_coefficients(DEBYE_TERMS)
# One (2 K, degree + 1) matrix: rows u_1..u_K then w_1..w_K, columns by degree. Evaluating
# all 2 K polynomials with one rolled Horner loop keeps the compiled program small.
_DEBYE_DEGREE = max(len(p) for p in _DEBYE_U + _DEBYE_W)
_DEBYE_MATRIX = np.array([list(p) + [0.0] * (_DEBYE_DEGREE - len(p)) for p in _DEBYE_U + _DEBYE_W])


def _debye_sums(t, inv_nu):
    """(U - 1, W) = (sum_k u_k(t) nu^-k, sum_k w_k(t) nu^-k), k = 1..DEBYE_TERMS.

    ``inv_nu`` is either a scalar (one order for every argument: the usual case, a model's
    dimension) or an array of the shape of ``t``.
    """
    matrix = jnp.asarray(_DEBYE_MATRIX, dtype=t.dtype)
    if jnp.ndim(inv_nu) == 0:
        # One order for all: fold the powers of 1/nu into the coefficients once,
        # c_j = sum_k p_kj nu^-k (Horner in 1/nu over k = K..1), then evaluate the two
        # polynomials sum_j c_j t^j per argument: 2 D multiply-adds per argument instead of
        # 2 K D (K = DEBYE_TERMS, D = _DEBYE_DEGREE). Rounding is of the same order: each
        # c_j t^j is the same sum of p_kj nu^-k t^j, grouped differently.
        folded = jnp.zeros((2, _DEBYE_DEGREE), t.dtype)
        for k in range(DEBYE_TERMS - 1, -1, -1):
            folded = (folded + matrix[k::DEBYE_TERMS]) * inv_nu
        t = t[..., None]

        def horner_folded(j, acc):
            return acc * t + folded[:, _DEBYE_DEGREE - 1 - j]

        values = lax.fori_loop(
            0, _DEBYE_DEGREE, horner_folded, jnp.zeros(t.shape[:-1] + (2,), t.dtype)
        )
        return values[..., 0], values[..., 1]
    t = t[..., None]

    def horner(j, acc):
        return acc * t + matrix[:, _DEBYE_DEGREE - 1 - j]

    shape = t.shape[:-1] + (2 * DEBYE_TERMS,)
    values = lax.fori_loop(0, _DEBYE_DEGREE, horner, jnp.zeros(shape, t.dtype))
    # Horner in 1/nu over k = K..1: (((p_K / nu + p_{K-1}) / nu + ...) + p_1) / nu, for the
    # u and the w polynomials side by side.
    inv_nu = inv_nu[..., None]
    total = jnp.zeros(shape[:-1] + (2,), t.dtype)
    for k in range(DEBYE_TERMS - 1, -1, -1):
        total = (total + values[..., k::DEBYE_TERMS]) * inv_nu
    return total[..., 0], total[..., 1]


def _debye_variables(nu, x):
    """Return z = x / nu, s = sqrt(1 + z^2), t = 1 / s and the Debye sums U - 1, W at nu.

    The common start of the Debye pieces below (t broadcast against an array of orders).
    """
    z = x / nu
    s = jnp.sqrt(1.0 + z * z)
    t = 1.0 / s
    inv_nu = 1.0 / nu
    if jnp.ndim(inv_nu) != 0:  # one order per argument
        t, inv_nu = jnp.broadcast_arrays(t, inv_nu)
    big_u, big_w = _debye_sums(t, inv_nu)
    return z, s, t, big_u, big_w


def _debye(nu, x):
    """Debye pieces at order nu >= 20: log I_nu(x), A = I_{nu+1}/I_nu, 1 - A, log C part.

    Returns ``(log_iv, ratio, one_minus_ratio, log_normalizer_nu)`` where the last is
    log C at the order nu (dimension 2 nu + 2) assembled without cancellation.
    """
    z, s, t, big_u, big_w = _debye_variables(nu, x)
    log_u = jnp.log1p(big_u)
    w_over_u = big_w / (1.0 + big_u)
    # log I_nu(nu z) = -log(2 pi nu)/2 + nu eta - log(1 + z^2)/4 + log U, DLMF 10.41.3
    eta_minus_log_z = s - jnp.log1p(s)
    log_z = jnp.log(jnp.where(z > 0, z, 1.0))
    log_iv = jnp.where(
        z > 0,
        -0.5 * jnp.log(2.0 * jnp.pi * nu)
        + nu * (eta_minus_log_z + log_z)
        - 0.25 * jnp.log1p(z * z)
        + log_u,
        -jnp.inf,
    )
    ratio = z * (1.0 / (1.0 + s) + t * w_over_u)
    one_minus_ratio = (1.0 + z / (1.0 + s)) / (z + s) - z * t * w_over_u
    # nu log kappa - nu eta = nu (log nu + log(1 + s) - s): the log z terms cancel exactly.
    log_normalizer = (
        nu * (jnp.log(nu) - eta_minus_log_z)
        - (nu + 1.0) * _LOG_2PI
        + 0.5 * jnp.log(2.0 * jnp.pi * nu)
        + 0.25 * jnp.log1p(z * z)
        - log_u
    )
    return log_iv, ratio, one_minus_ratio, log_normalizer


def _debye_scaled(nu, x):
    r"""Debye pieces shifted by the argument: (log I_nu(x) - x, log C + x) at order nu >= 20.

    With :math:`x = \nu z`, :math:`\nu s - x = \nu/(s + z)` and
    :math:`\log z - \log(1+s) = -\mathrm{log1p}((1 + 1/(s+z))/z)`, so neither value is a
    difference of two terms of size x (they are of size :math:`\nu \log(x/\nu)`).
    """
    z, s, _, big_u, _ = _debye_variables(nu, x)
    log_u = jnp.log1p(big_u)
    nu_over_s_plus_z = nu / (s + z)  # nu s - x
    z_safe = jnp.where(z > 0, z, 1.0)
    log_iv_minus_x = jnp.where(
        z > 0,
        -0.5 * jnp.log(2.0 * jnp.pi * nu)
        + nu_over_s_plus_z
        - nu * jnp.log1p((1.0 + 1.0 / (s + z)) / z_safe)
        - 0.25 * jnp.log1p(z * z)
        + log_u,
        -jnp.inf,
    )
    # log C + x = nu (log nu + log(1 + s)) - (nu s - x) - (nu + 1) log 2 pi + ...
    log_normalizer_plus_x = (
        nu * (jnp.log(nu) + jnp.log1p(s))
        - nu_over_s_plus_z
        - (nu + 1.0) * _LOG_2PI
        + 0.5 * jnp.log(2.0 * jnp.pi * nu)
        + 0.25 * jnp.log1p(z * z)
        - log_u
    )
    return log_iv_minus_x, log_normalizer_plus_x


def _log_hypergeometric_0f1_minus_one(b, y):
    """Return log 0F1(; b; y) as log1p(sum_{k>=1} y^k / (k! (b)_k)), for 0 <= y <= 225."""

    def body(k, carry):
        term, total = carry
        k = k.astype(y.dtype)
        term = term * y / (k * (b + k - 1.0))
        return term, total + term

    b, y = jnp.broadcast_arrays(b, y)
    _, total = lax.fori_loop(1, SERIES_TERMS + 1, body, (jnp.ones_like(y), jnp.zeros_like(y)))
    return jnp.log1p(total)


def _recurrence(nu, x, scaled=False):
    r"""Ratio A = I_{nu+1}/I_nu, 1 - A and log I_nu for nu < 20 by downward recurrence.

    Starts from the Debye values at order nu + RECURRENCE_SHIFT. The returned log I_nu is
    accurate for x > SERIES_MAX_ARG (below it, the series branch is used); with ``scaled``
    it is :math:`\log I_\nu(x) - x` instead.
    """
    top = nu + RECURRENCE_SHIFT
    log_iv_top, ratio, one_minus_ratio, _ = _debye(top, x)
    if scaled:  # log I_nu(x) - x, from log I_top(x) - x without the cancellation
        log_iv_top = _debye_scaled(top, x)[0]

    def body(j, carry):
        ratio, one_minus_ratio, sum_log_ratio = carry
        v = top - j.astype(x.dtype)  # A_{v-1} from A_v
        denominator = 2.0 * v + x * ratio
        ratio = x / denominator
        one_minus_ratio = (2.0 * v - x * one_minus_ratio) / denominator
        log_ratio = jnp.where(
            ratio < 0.5, jnp.log(jnp.where(ratio > 0, ratio, 1.0)), jnp.log1p(-one_minus_ratio)
        )
        return ratio, one_minus_ratio, sum_log_ratio + log_ratio

    ratio, one_minus_ratio, log_iv_top = jnp.broadcast_arrays(ratio, one_minus_ratio, log_iv_top)
    ratio, one_minus_ratio, sum_log_ratio = lax.fori_loop(
        0, RECURRENCE_SHIFT, body, (ratio, one_minus_ratio, jnp.zeros_like(ratio))
    )
    return ratio, one_minus_ratio, log_iv_top - sum_log_ratio


#: Stirling series of lgamma(nu + 1) - (nu log nu - nu + log(2 pi nu) / 2) in 1/nu:
#: B_2k / (2k (2k - 1)) for k = 1..6 (next term below 1e-17 at nu = 20).
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360)


def _debye_log_normalizer_ratio(nu, x):
    """Return log C_d(x) - log C_d(0) at order nu >= 20, without terms of size nu log nu.

    log C_d(0) = -log|S^{d-1}| = lgamma(nu + 1) - log 2 - (nu + 1) log pi; with Stirling's
    lgamma(nu + 1) = nu log nu - nu + log(2 pi nu)/2 + S(nu) and the Debye form of log C
    (:func:`_debye`) every term of size nu log nu cancels analytically:

        log C_d(nu z) - log C_d(0) = -nu g(z) + log1p(z^2)/4 - log U - S(nu),
        g(z) = s - 1 - log((1 + s)/2) = q - log1p(q/2),  q = s - 1 = z^2/(1 + s),

    a value of size nu z^2/4 for small z (log U -> -S(nu) as z -> 0, DLMF 10.41.3).
    """
    z, s, _, big_u, _ = _debye_variables(nu, x)
    q = z * z / (1.0 + s)
    inv_nu = 1.0 / nu
    inv_nu2 = inv_nu * inv_nu
    stirling = 0.0
    for coefficient in reversed(_STIRLING):
        stirling = stirling * inv_nu2 + coefficient
    return (
        -nu * (q - jnp.log1p(0.5 * q))
        + 0.25 * jnp.log1p(z * z)
        - jnp.log1p(big_u)
        - (stirling * inv_nu)
    )
