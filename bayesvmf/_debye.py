"""The Debye polynomials of the uniform asymptotic expansion of I_nu (bayesvmf.special).

u_k(t) (DLMF 10.41.9-10), v_k(t) (10.41.11) and w_k = (v_k - u_k) / (1 - t^2), generated in
exact rational arithmetic (``fractions.Fraction``) and rounded once to float64.
"""

from fractions import Fraction

__all__ = ["debye_coefficients"]


def _poly_add(a, b):
    n = max(len(a), len(b))
    a = a + [Fraction(0)] * (n - len(a))
    b = b + [Fraction(0)] * (n - len(b))
    return [x + y for x, y in zip(a, b, strict=True)]


def _poly_mul(a, b):
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _poly_scale(a, s):
    return [c * s for c in a]


def _poly_deriv(a):
    return [i * c for i, c in enumerate(a)][1:] or [Fraction(0)]


def _poly_integral(a):
    return [Fraction(0)] + [c / (i + 1) for i, c in enumerate(a)]


def _divide_by_one_minus_t2(p):
    """Return the exact quotient q of p(t) = (1 - t^2) q(t); raise if it leaves a remainder."""
    q = [Fraction(0)] * max(len(p) - 2, 1)
    for i in range(len(q)):
        q[i] = p[i] + (q[i - 2] if i >= 2 else 0)
    remainder = _poly_add(p, _poly_scale(_poly_mul([1, 0, -1], q), -1))
    if any(c != 0 for c in remainder):
        raise RuntimeError("Debye polynomial v_k - u_k is not divisible by 1 - t^2")
    return q


def debye_coefficients(n_terms):
    """Return the float64 coefficients of u_1..u_n and w_1..w_n (lowest degree first)."""
    u = [[Fraction(1)]]
    for _ in range(n_terms):
        # u_{k+1} = t^2 (1 - t^2) u_k' / 2 + (1/8) int_0^t (1 - 5 s^2) u_k(s) ds
        first = _poly_scale(_poly_mul([0, 0, 1, 0, -1], _poly_deriv(u[-1])), Fraction(1, 2))
        second = _poly_scale(_poly_integral(_poly_mul([1, 0, -5], u[-1])), Fraction(1, 8))
        u.append(_poly_add(first, second))
    w = []
    for k in range(1, n_terms + 1):
        # v_k = u_k + t (t^2 - 1) (u_{k-1} / 2 + t u_{k-1}')
        inner = _poly_add(_poly_scale(u[k - 1], Fraction(1, 2)), [0] + _poly_deriv(u[k - 1]))
        v_k = _poly_add(u[k], _poly_mul([0, -1, 0, 1], inner))
        w.append(_divide_by_one_minus_t2(_poly_add(v_k, _poly_scale(u[k], -1))))
    as_float = [tuple(float(c) for c in p) for p in u[1:]], [tuple(float(c) for c in p) for p in w]
    return as_float
