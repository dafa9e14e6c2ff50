r"""Sampling the von Mises-Fisher distribution: Wood's algorithm [1]_, a Householder rotation [4]_.

:meth:`bayesvmf.distribution.VonMisesFisher.sample` draws the cosine :math:`w = \mu^\top x`
from its one-dimensional marginal (Wood's rejection sampler, exact inversion when
:math:`d = 3`), a tangent direction uniformly, and rotates :math:`e_1` onto :math:`\mu` with a
Householder reflection. Moved here from ``distribution.py`` (session 27), unchanged, so that
each module stays readable at one sitting.

References
----------
.. [1] Wood, A. T. A. (1994). Simulation of the von Mises Fisher distribution.
   *Communications in Statistics - Simulation and Computation*, 23(1), 157-164.
.. [2] Mardia, K. V. and Jupp, P. E. (2000). *Directional Statistics*. Wiley. Section 9.3.
.. [3] Ulrich, G. (1984). Computer generation of distributions on the m-sphere. *Journal of
   the Royal Statistical Society, Series C (Applied Statistics)*, 33(2), 158-163.
.. [4] Davidson, T. R., Falorsi, L., De Cao, N., Kipf, T. and Tomczak, J. M. (2018).
   Hyperspherical variational auto-encoders. *Proceedings of the 34th Conference on
   Uncertainty in Artificial Intelligence (UAI)*. Algorithm 1 and Appendix.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from bayesvmf import _compile_cache

#: Cap on the rounds of Wood's rejection loop. Each round accepts a proposal with probability
#: above 0.65 for every (d, kappa) (measured; section 3 of [1]), so a million draws need some
#: 13-20 rounds and the chance that one draw needs 200 is below 1e-86; the cap only guards
#: against an endless loop on bad input (NaN concentration).
_MAX_REJECTION_ROUNDS = 200


def _unfused(x):
    """Return ``x`` behind ``lax.optimization_barrier``, so XLA cannot fuse it with its users.

    jaxlib 0.10.2 on CPU miscompiles some jitted fusions of a reduction over the last axis
    with a broadcast of its result back against the reduced array (YNNPACK fusions, past
    about 2^15 elements; jax-ml/jax issues 39103 and 39257): the Householder step of the
    sampler, written as one such fusion, returned wrong draws at d = 3, n = 33,000 and d = 6,
    n = 10,000 in float32 (mean cosine 12-32 standard errors off). Every reduction of the
    jitted sampling paths whose result is broadcast back goes through here, so the reduction
    and the elementwise step that uses it compile as separate kernels; the barrier is the
    identity for values, gradients and ``vmap``.
    """
    return lax.optimization_barrier(x)


def _safe_normalize(x):
    """Return ``x / |x|`` along the last axis, with the norm clipped at ``finfo.tiny``."""
    norm = _unfused(jnp.linalg.norm(x, axis=-1, keepdims=True))
    return x / jnp.maximum(norm, jnp.finfo(x.dtype).tiny)


@partial(_compile_cache.jit, static_argnums=(3,))
def _sample_vmf(key, loc, kappa, sample_shape):
    """Sample shape ``sample_shape + kappa.shape + (d,)``; loc has shape kappa.shape + (d,)."""
    dimension = loc.shape[-1]
    shape = sample_shape + kappa.shape
    key_w, key_v = jax.random.split(key)
    kappa = jnp.broadcast_to(kappa, shape)
    if dimension == 3:
        one_minus_w, sin_w = _sample_cosine_d3(key_w, kappa)
    else:
        one_minus_w, sin_w = _sample_cosine_wood(key_w, kappa, dimension)
    v = _uniform_tangent(key_v, shape, dimension, kappa.dtype)
    return _reflect(1.0 - one_minus_w, sin_w, v, loc)


def _uniform_tangent(key, shape, dimension, dtype):
    """Directions of R^(d-1) with a uniform direction (tangent to the sphere at e_1; step 2 of [1]).

    A random sign for d = 2, an angle for d = 3 (one uniform instead of two normals): unit
    vectors. Standard Gaussians otherwise: those are not normalised here, :func:`_reflect`
    divides by their norm.
    """
    if dimension == 2:
        return jnp.where(jax.random.bernoulli(key, 0.5, shape), 1.0, -1.0).astype(dtype)[..., None]
    if dimension == 3:
        angle = (2.0 * jnp.pi) * jax.random.uniform(key, shape, dtype=dtype)
        return jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=-1)
    return jax.random.normal(key, shape + (dimension - 1,), dtype=dtype)


#: Row sums over a last axis this short (the tangent of d <= 3) are written out as sums of
#: columns: elementwise code, which fuses freely and has no reduction to miscompile. Longer
#: ones are reductions behind a barrier: from d = 4 on they were measured faster than the
#: unrolled sums in float64 (d = 5, 10, 16 at n = 1e6: 10-20%; float32 within noise).
_UNROLLED_SUM_MAX = 2


def _row_sums(*pairs):
    """``sum(a * b, axis=-1)`` for each pair ``(a, b)``, never fused with what uses them.

    Short rows (up to ``_UNROLLED_SUM_MAX``) as an unrolled sum of columns; longer ones as
    reductions behind one :func:`_unfused` barrier (the reductions share their input and may
    share a kernel; the elementwise step that uses them may not).
    """
    if pairs[0][0].shape[-1] <= _UNROLLED_SUM_MAX:
        sums = []
        for a, b in pairs:
            total = a[..., 0] * b[..., 0]
            for i in range(1, a.shape[-1]):
                total = total + a[..., i] * b[..., i]
            sums.append(total)
        return tuple(sums)
    return _unfused(tuple(jnp.sum(a * b, axis=-1) for a, b in pairs))


def _reflect(w, sin_w, v, loc):
    r"""Return :math:`w \mu + \sqrt{1 - w^2}\, v / \lVert v \rVert` rotated (v unit for d <= 3).

    The reflection with :math:`u = e_1 + \sigma \mu`, :math:`\sigma = \operatorname{sign}
    \mu_1` (+1 at :math:`\mu_1 = 0`), maps :math:`-\sigma e_1` onto :math:`\mu`; it is applied
    to :math:`y = (-\sigma w, \sqrt{1-w^2}\, \hat v)`, :math:`\hat v = v / \lVert v \rVert`.
    Choosing the sign keeps :math:`\lVert u \rVert^2 = 2 (1 + |\mu_1|) \ge 2` (up to
    rounding of :math:`\lVert\mu\rVert`), so the normaliser never vanishes, including at
    :math:`\mu = \pm e_1`: this is the reflection of [4]_ with the sign chosen as in a
    stable QR factorisation. A reflection fixing :math:`\mu` leaves the vMF invariant, so
    the image of the uniform tangent direction is again uniform.

    Written out with :math:`u_1 = 1 + |\mu_1|`, :math:`p = \mu_{2:d}^\top \hat v` and
    :math:`k = 2 (\sqrt{1-w^2}\, p - w u_1) / \lVert u\rVert^2`, the image is
    :math:`x = (\sigma(-w - k u_1),\ \sqrt{1-w^2}\, \hat v - k \mu_{2:d})`, of norm
    :math:`\lVert y \rVert = 1` up to rounding (a reflection is an isometry). The only
    reductions, :math:`\lVert v \rVert^2`, :math:`\mu_{2:d}^\top v` and
    :math:`\lVert u \rVert^2`, go through :func:`_row_sums`: jaxlib 0.10.2 miscompiles
    the fusion of such a reduction with the elementwise step that broadcasts it back (the
    previous form of this function, see :func:`_unfused`). For d <= 3 the tangent is a unit
    vector (:func:`_uniform_tangent`), so :math:`\lVert v \rVert` is not computed.
    """
    sigma = jnp.where(loc[..., 0] >= 0, 1.0, -1.0).astype(loc.dtype)
    u_1 = 1.0 + jnp.abs(loc[..., 0])
    loc_rest = loc[..., 1:]
    (rest_sq,) = _row_sums((loc_rest, loc_rest))
    u_sq = u_1 * u_1 + rest_sq
    loc_rest_v = jnp.broadcast_to(loc_rest, v.shape)
    if v.shape[-1] <= 2:  # d <= 3: the tangent of _uniform_tangent is a unit vector already
        (proj,) = _row_sums((v, loc_rest_v))
        scale = sin_w
    else:
        v_sq, proj = _row_sums((v, v), (v, loc_rest_v))
        scale = sin_w / jnp.sqrt(jnp.maximum(v_sq, jnp.finfo(v.dtype).tiny))  # sqrt(1-w^2)/|v|
    k = 2.0 * (scale * proj - w * u_1) / jnp.maximum(u_sq, jnp.finfo(loc.dtype).tiny)
    first = sigma * (-w - k * u_1)
    return jnp.concatenate([first[..., None], scale[..., None] * v - k[..., None] * loc_rest], -1)


def _sample_cosine_d3(key, kappa):
    r"""Exact inversion of the CDF of :math:`w` for d = 3 (density :math:`\propto e^{\kappa w}`).

    :math:`w = 1 + \log(u + (1-u) e^{-2\kappa}) / \kappa` with :math:`u \sim U(0, 1)` (eq. 4
    of [1]_, section 9.3.3 of [2]_). Returns :math:`(1 - w, \sqrt{1 - w^2})`, computed as
    :math:`-\log1p((1-u)\,\mathrm{expm1}(-2\kappa))/\kappa` for :math:`\kappa < 1` (with the
    limit :math:`2(1-u)` at :math:`\kappa \to 0`) and as
    :math:`-\mathrm{logaddexp}(\log u, \log(1-u) - 2\kappa)/\kappa` for :math:`\kappa \ge 1`.
    """
    dtype = kappa.dtype
    u = jax.random.uniform(key, kappa.shape, dtype=dtype)
    tiny_kappa = math.sqrt(jnp.finfo(dtype).tiny)
    small = kappa < 1.0
    k_small = jnp.where(kappa > tiny_kappa, kappa, 1.0)
    e_small = jnp.where(
        kappa > tiny_kappa,
        -jnp.log1p((1.0 - u) * jnp.expm1(-2.0 * k_small)) / k_small,
        2.0 * (1.0 - u),
    )
    k_large = jnp.where(small, 1.0, kappa)
    e_large = -jnp.logaddexp(jnp.log(u), jnp.log1p(-u) - 2.0 * k_large) / k_large
    one_minus_w = jnp.clip(jnp.where(small, e_small, e_large), 0.0, 2.0)
    return one_minus_w, jnp.sqrt(one_minus_w * (2.0 - one_minus_w))


def _sample_cosine_wood(key, kappa, dimension):
    r"""Sample the cosine w by Wood's rejection sampler.

    The density of :math:`w` is :math:`\propto (1-w^2)^{(d-3)/2} e^{\kappa w}`. Section 3 of
    [1]_, written without cancellation. With :math:`m = d - 1`:

    * :math:`b = m / (2\kappa + \sqrt{4\kappa^2 + m^2})` (the rationalised form of Wood's
      :math:`(-2\kappa + \sqrt{4\kappa^2 + m^2})/m`), :math:`x_0 = (1-b)/(1+b)` and
      :math:`a = 1 - x_0 = 2b/(1+b)`;
    * proposal :math:`z \sim \mathrm{Beta}(m/2, m/2)` by Ulrich's formula ([3]_, Theorem 3):
      :math:`z = (1 + r \cos 2\pi v)/2` with :math:`r = \sqrt{1 - u^{2/(d-2)}}`, computed
      together with :math:`1 - z` so neither loses digits;
    * :math:`w = (1 - (1+b)z) / (1 - (1-b)z)` is kept as :math:`1 - w = 2bz / ((1-z) + bz)`
      and :math:`1 + w = 2(1-z) / ((1-z) + bz)`;
    * accept when :math:`\log U \le \kappa(w - x_0) + m \log\frac{1 - x_0 w}{1 - x_0^2}`,
      evaluated as :math:`\kappa(a - (1-w)) + m\,\mathrm{log1p}\bigl(x_0((1-w) - a) /
      (a(1 + x_0))\bigr)` (Wood's test minus its constant :math:`c`, rearranged).

    At :math:`\kappa = 0`, :math:`b = 1` and every proposal is accepted (the uniform case).
    A proposal is accepted with probability above 0.65 for every (d, kappa) (0.656 is the
    infimum, d = 2 and kappa -> infinity). The rounds run in a ``lax.while_loop`` with a
    per-element done mask and a cap, as ``von_mises_centered`` in NumPyro: a million
    elements need about 13 rounds over all of them. (Compacting the undone elements into
    smaller arrays after each round cuts that to about 1.7 proposals per element, but each
    level of compaction adds seconds of XLA compilation, which costs more than it saves for
    one-off draws; it was measured and left out.)

    Returns :math:`(1 - w, \sqrt{1 - w^2})`.
    """
    dtype = kappa.dtype
    shape = kappa.shape
    kappa = jnp.ravel(kappa)
    n = kappa.shape[0]
    m = dimension - 1.0
    b = m / (2.0 * kappa + jnp.hypot(2.0 * kappa, m))
    a = 2.0 * b / (1.0 + b)
    x0 = (1.0 - b) / (1.0 + b)
    params = (kappa, b, a, x0)

    def propose(key, params):
        kappa, b, a, x0 = params
        # one call for the three uniforms of a proposal (less code to compile than three)
        u_r, u_t, u_acc = jax.random.uniform(key, (3,) + kappa.shape, dtype=dtype)
        angle = jnp.pi * u_t
        cos2 = jnp.cos(angle) ** 2
        sin2 = jnp.sin(angle) ** 2  # not 1 - cos2: 1 - z must keep its digits near z = 1
        if dimension == 2:  # Beta(1/2, 1/2): r = 1
            r, one_minus_r = 1.0, 0.0
        else:
            log_p = 2.0 * jnp.log(u_r) / (dimension - 2)
            r = jnp.sqrt(-jnp.expm1(log_p))
            one_minus_r = jnp.exp(log_p) / (1.0 + r)  # 1 - r = (1 - r^2) / (1 + r)
        z = 0.5 * one_minus_r + r * cos2
        one_minus_z = 0.5 * one_minus_r + r * sin2
        denom = one_minus_z + b * z
        one_minus_w = 2.0 * b * z / denom
        one_plus_w = 2.0 * one_minus_z / denom
        log_ratio = kappa * (a - one_minus_w) + m * jnp.log1p(
            x0 * (one_minus_w - a) / (a * (1.0 + x0))
        )
        accept = jnp.log1p(-u_acc) <= log_ratio
        return one_minus_w, jnp.sqrt(one_minus_w * one_plus_w), accept

    def one_round(key, params, state):
        """One masked round: elements not yet done take a new proposal and its verdict."""
        one_minus_w, sin_w, done = state
        e_new, s_new, accept = propose(key, params)
        return (
            jnp.where(done, one_minus_w, e_new),
            jnp.where(done, sin_w, s_new),
            done | accept,
        )

    def rejection_loop(key, params, state, max_rounds):
        """Masked rounds in a ``lax.while_loop`` until every element is done (or the cap)."""

        def cond_fn(loop_state):
            i, _, (_, _, done) = loop_state
            return (i < max_rounds) & ~jnp.all(done)

        def body_fn(loop_state):
            i, key, state = loop_state
            key, key_round = jax.random.split(key)
            return i + 1, key, one_round(key_round, params, state)

        return lax.while_loop(cond_fn, body_fn, (jnp.array(0), key, state))[2]

    state = (jnp.zeros(n, dtype), jnp.zeros(n, dtype), jnp.zeros(n, bool))
    state = rejection_loop(key, params, state, _MAX_REJECTION_ROUNDS)
    one_minus_w, sin_w, _ = state
    return one_minus_w.reshape(shape), sin_w.reshape(shape)
