"""Pieces shared by the Bayesian family, most of them by H- and T-vMFmix (secs. 3.1-3.3 of [1]_).

The vMF factor q(mu) = vMF(psi, gamma) (its mean, entropy, natural parameter and the
closed-form predictive integral), rows over devices (per-row arrays laid out like the row
blocks), the constructor constraints both estimators share, the initial kappa estimates,
the restart loop with its convergence test, and draws from q for ArviZ. Derivations:
docs/bayesian_hierarchical_temporal.md.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import functools
import warnings
from numbers import Integral, Real
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from jax.scipy.special import logsumexp
from sklearn.utils._param_validation import Interval, StrOptions

from bayesvmf import _arviz, _blocks, _compile_cache, _guards, _mixture, special
from bayesvmf._base import RANDOM_STATE, check_count, make_key
from bayesvmf._mixture import count_trace
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _kappa

#: The static arguments of the jitted VI steps of H- and T-vMFmix.
STATIC_ARGNAMES = ("scheme", "empirical_bayes", "num_samples", "num_steps")

#: Gauss-Hermite nodes of the log-normal q(kappa) in the predictive density (see
#: :func:`predictive_log_density`). The integrand log kappa -> C_d(kappa) C_d(gamma) /
#: C_d(|kappa x + gamma psi|) is smooth; 20 nodes integrate it to ~1e-10 relative in the
#: tests' settings.
N_QUADRATURE = 20

#: Smallest concentration used when initial estimates are 0 (uniform); log kappa must exist.
KAPPA_FLOOR = 1e-2


# --------------------------------------------------------------------------------------------
# Pieces shared with the temporal model
# --------------------------------------------------------------------------------------------


def mean_direction(d: int, psi, gamma):
    """Return E[mu] = A_d(gamma) psi under q(mu) = vMF(psi, gamma) (any batch shape)."""
    return special.mean_resultant_length(d, gamma)[..., None] * psi


def host_mean_direction(d: int, psi, gamma) -> jax.Array:
    """:func:`mean_direction` of concrete arrays, the product taken on the host.

    For the starting states, made outside any program: an eager JAX product is a program
    of its own, compiled per shape (and traced again in every new process).
    """
    a_gamma = np.asarray(special.mean_resultant_length(d, gamma))
    return jnp.asarray(a_gamma[..., None] * np.asarray(psi))


def vmf_entropy(d: int, gamma):
    """Return H[vMF(., gamma)] = -log C_d(gamma) - gamma A_d(gamma)."""
    return -_mixture.log_normalizer(d, gamma) - gamma * special.mean_resultant_length(d, gamma)


def vmf_from_natural(R, psi_old):
    """Return (psi, gamma) = (R/|R|, |R|); keep the old direction where R = 0 (uniform q)."""
    norm = jnp.linalg.norm(R, axis=-1)
    safe = jnp.where(norm > 0, norm, 1.0)[..., None]
    return jnp.where((norm > 0)[..., None], R / safe, psi_old), norm


def quadrature_log_kappa(mean_log_kappa, var_log_kappa):
    """Return Gauss-Hermite nodes kappa_j (..., Q) and log weights (Q,) of LogNormal(a, b)."""
    t, w = np.polynomial.hermite.hermgauss(N_QUADRATURE)
    log_kappa = mean_log_kappa[..., None] + jnp.sqrt(2.0 * var_log_kappa)[..., None] * t
    return jnp.exp(log_kappa), jnp.asarray(np.log(w / np.sqrt(np.pi)))


def predictive_log_density(d: int, cos, gamma, mean_log_kappa, var_log_kappa):
    r"""Return log int int vMF(x | mu, kappa) q(mu) q(kappa) dmu dkappa per row and component.

    The integral over q(mu) = vMF(psi, gamma) is closed form (vMF conjugacy),

    .. math::

        \int \mathrm{vMF}(x \mid \mu, \kappa)\, \mathrm{vMF}(\mu \mid \psi, \gamma)\, d\mu
        = \frac{C_d(\kappa) C_d(\gamma)}{C_d(\lVert \kappa x + \gamma \psi \rVert)},
        \quad \lVert \kappa x + \gamma\psi \rVert^2 = \kappa^2 + \gamma^2
        + 2\kappa\gamma\, x^\top\psi,

    and the integral over q(kappa) = LogNormal(a, b) uses ``N_QUADRATURE`` Gauss-Hermite
    nodes in log kappa (in log space, a logsumexp).

    Parameters
    ----------
    d : int
    cos : jax.Array of shape (n, K)
        x_i . psi_k.
    gamma : jax.Array of shape (K,) or (n, K)
        Concentration of q(mu) (per row when the rows have different q, as in T-vMFmix).
    mean_log_kappa, var_log_kappa : jax.Array of shape (K,)

    Returns
    -------
    jax.Array of shape (n, K)
    """
    kappa, log_w = quadrature_log_kappa(mean_log_kappa, var_log_kappa)  # (K, Q)
    gamma = gamma[..., None]  # (K, 1) or (n, K, 1)
    sq = kappa**2 + gamma**2 + 2.0 * kappa * gamma * cos[..., None]
    norm = jnp.sqrt(jnp.maximum(sq, 0.0))
    # one special-function call for the three (one site to compile: this program is
    # compiled per number of rows)
    log_c_kappa, log_c_gamma, log_c_norm = _mixture.log_normalizers(d, kappa, gamma, norm)
    return logsumexp(log_c_kappa + log_c_gamma - log_c_norm + log_w, axis=-1)


# --------------------------------------------------------------------------------------------
# The variational state and the step
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Rows over devices (devices=): statistics of row blocks
# --------------------------------------------------------------------------------------------


@functools.partial(_compile_cache.jit, compiler_options=_mixture.JIT_OPTIONS)
def _row_sum_blocks(data):
    """sum_i x_i of plain data or of row blocks (padding rows weigh 0, added over devices)."""
    count_trace("hierarchical.row_sum")

    def body(_, data):  # the row weights (plain data: ones; padding rows: 0)
        return data.tdot(data.weigh_rows(jnp.ones((data.block.shape[0], 1))))[:, 0]

    return data.map(body, jnp.zeros(()))


# --------------------------------------------------------------------------------------------
# Estimator
# --------------------------------------------------------------------------------------------


#: A finite number > 0, >= 0, and any finite number (open ends at infinity: an infinite
#: concentration or variance is refused, as a NaN is).
POSITIVE = Interval(Real, 0.0, np.inf, closed="neither")
NONNEGATIVE = Interval(Real, 0.0, np.inf, closed="left")
FINITE = Interval(Real, -np.inf, np.inf, closed="neither")


def check_direction(mu0, name: str = "mu0") -> None:
    """Refuse a prior direction that is not None or a 1-D array of finite numbers."""
    if mu0 is None:
        return
    arr = np.asarray(mu0)
    if arr.ndim != 1 or arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name} must be None or a 1-D finite array of n_features values (normalised to "
            f"unit norm); got {mu0!r}."
        )


#: constructor arguments shared by the hierarchical and the temporal estimators
#: (scikit-learn constraints; ``mu0`` is checked in full by :func:`check_direction`)
SHARED_CONSTRAINTS: dict[str, Any] = {
    "kappa_update": [StrOptions(set(_kappa.SCHEMES))],
    "alpha": [POSITIVE],
    "mu0": [None, "array-like"],
    "C0": [POSITIVE],
    "m": [FINITE, None],
    "s2": [POSITIVE],
    "empirical_bayes": ["boolean"],
    "init": [StrOptions({"random", "spherical-kmeans++"})],
    "n_init": [Interval(Integral, 1, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [NONNEGATIVE],
    "kappa_num_samples": [Interval(Integral, 1, None, closed="left")],
    "kappa_num_steps": [Interval(Integral, 1, None, closed="left")],
    "normalize": ["boolean"],
    "random_state": RANDOM_STATE,
    "verbose": ["verbose"],
    "devices": _blocks.DevicesOption(),
}


def resolve_mu0(mu0, mean_direction_of_data, n_features, name="mu0"):
    """Return the unit prior direction: the data mean direction when ``mu0`` is None."""
    if mu0 is None:
        return np.asarray(mean_direction_of_data, np.float64)
    arr = np.asarray(mu0, np.float64)
    if arr.shape != (n_features,):
        raise ValueError(f"{name} must have shape ({n_features},); got {arr.shape}.")
    norm = np.linalg.norm(arr)
    if norm == 0:
        raise ValueError(f"{name} must not be the zero vector.")
    return arr / norm


def data_mean_direction(data) -> np.ndarray:
    """Return the direction of sum_i x_i (the first basis vector if it is zero)."""
    # one program (the eager product and the ones it multiplies were two, per row count)
    total = np.asarray(_row_sum_blocks(data))
    norm = np.linalg.norm(total)
    if norm == 0:
        total, norm = np.eye(data.shape[1])[0], 1.0
    return total / norm


def initial_kappa(d, rbar):
    """Concentration estimates A_d^{-1}(rbar) (full-precision solve), floored at KAPPA_FLOOR."""
    kappa = special.kappa_from_rbar(d, jnp.clip(jnp.asarray(rbar, jnp.float64), 0.0, 1 - 1e-12))
    return np.maximum(np.asarray(kappa), KAPPA_FLOOR)


def kappa_moments_at(d, kappa, scheme) -> Any:
    """KappaMoments of a point value of kappa (the start of the first kappa update)."""
    kappa = jnp.asarray(kappa, jnp.float64)
    return _kappa.KappaMoments(
        mean_kappa=kappa,
        mean_log_c=_mixture.log_normalizer(int(d), kappa),
        mean_log_kappa=jnp.log(kappa),
        var_log_kappa=jnp.full_like(kappa, 0.01),
        state=_kappa.initial_kappa_state(kappa, scheme),
    )


def update_kappa_priors(
    rng_key,
    state,
    weight,
    dot,
    top_means,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
    pooled=None,
    cap_alpha=False,
):
    """Update q(kappa) and, with ``empirical_bayes``, the priors; return the new state.

    The last two updates of an H- or T-vMFmix iteration (sec. 3.1.1 and 3.1.3 of [1]_):
    q(kappa) by the scheme of :mod:`._kappa` from its ``weight`` and ``dot``, then alpha
    (from q(pi)), mu0 (the direction of ``top_means``, the E[mu] the prior vMF(mu0, C0)
    generates: the root's, or every cluster's at the first time step) and (m, s2) from the
    moments of log kappa. C0 stays the user's (docs/bayesian_hierarchical_temporal.md).
    ``state`` is an HState or a TState (fields ``kappa``, ``priors``, ``rho``). ``pooled``
    (bool (J,), optional): the concentrations that are one shared kappa
    (``shared_kappa=True``; :func:`._kappa.pooled_update`, and (m, s2) count them once).
    ``cap_alpha``: alpha at most n / K (:func:`._empirical_bayes.alpha_cap`).
    """
    p = state.priors
    update = (
        _kappa.update if pooled is None else functools.partial(_kappa.pooled_update, pooled=pooled)
    )
    kappa, _ = update(
        scheme,
        rng_key,
        state.kappa.state,
        weight,
        dot,
        p.m,
        p.s2,
        d=top_means.shape[-1],
        num_samples=num_samples,
        num_warmup=0,
        num_steps=num_steps,
    )
    if empirical_bayes:  # a static switch: fits with and without it are two programs
        cap = _eb.alpha_cap(state.rho, p.alpha) if cap_alpha else None
        alpha = _eb.update_alpha(p.alpha, state.rho, cap)
        mu0, _ = _eb.update_mu0(top_means, p.mu0)
        m, s2 = _eb.update_m_s2(kappa.mean_log_kappa, kappa.var_log_kappa, pooled, p.s2)
        p = p._replace(alpha=alpha, mu0=mu0, m=m, s2=s2)
    return state._replace(kappa=kappa, priors=p)


def fit_restarts(estimator, rng_key, n: int, start, step, desc: str, diagnose=None, advice=""):
    """Run ``estimator.n_init`` restarts of a VI loop; return the kept (state, bounds, converged).

    Each restart splits its key into an initialisation key, given to ``start(key)`` which
    returns (state, q(z) statistics), and one key per iteration, given to
    ``step(key, state, stats)`` which returns (state, stats, info) with the bound
    ``info.lower_bound``. A restart stops when its bound changes by at most
    ``estimator.tol * n`` (``n`` rows) or after ``estimator.max_iter`` iterations. The first
    restart within ``tol * n`` of the best final bound is kept
    (:func:`bayesvmf._mixture.best_run`): restarts that reach one optimum tie to rounding,
    which must not decide between them (one device or several). Warns
    (:class:`~bayesvmf.exceptions.ConvergenceWarning`) when the kept restart did not converge.

    With ``diagnose`` (``diagnose(state, stats) -> _guards.Diagnosis`` of a final state) the
    degeneracy guards run: the kept restart is the best among the non-degenerate ones
    (:func:`bayesvmf._guards.select_run`), the estimator gets the guards' fitted attributes
    and a :class:`~bayesvmf.exceptions.DegenerateRunWarning` with ``advice`` when the kept
    state is degenerate.
    """
    runs = []
    n_init, max_iter, tol = estimator.n_init, estimator.max_iter, estimator.tol
    for r, run_key in enumerate(jax.random.split(rng_key, n_init)):
        init_key, loop_key = jax.random.split(run_key)
        state, stats = start(init_key)
        bounds, converged = [], False
        bar = estimator._progress(max_iter, f"{desc} {r + 1}/{n_init}")
        for key in jax.random.split(loop_key, max_iter):
            state, stats, info = step(key, state, stats)
            bounds.append(float(info.lower_bound))
            if bar is not None:
                bar.update()
            if len(bounds) > 1 and abs(bounds[-1] - bounds[-2]) <= tol * n:
                converged = True
                break
        if bar is not None:
            bar.close()
        runs.append(
            (state, bounds, converged, None if diagnose is None else diagnose(state, stats))
        )
    finals = [run[1][-1] for run in runs]
    if diagnose is None:
        best = _mixture.best_run(finals, tol * n)
    else:
        best = _guards.select_run(finals, [run[3] for run in runs], tol * n)
    state, bounds, converged, diag = runs[best]
    if not converged:
        # one frame deeper than a call from _fit: the warning points at the caller of fit
        warn_not_converged(type(estimator).__name__, n_init, max_iter, bounds, n, tol, stacklevel=6)
    if diag is not None:
        n_bad = sum(run[3].degenerate for run in runs)
        _guards.report(estimator, diag, n_bad)
        name = type(estimator).__name__
        # as the convergence warning: it points at the caller of fit
        _guards.warn_components(
            diag, name, advice, n_runs=n_init, n_degenerate_runs=n_bad, stacklevel=6
        )
    return state, bounds, converged


def store_fit(estimator, state, bounds, converged) -> None:
    """Set the fitted attributes H- and T-vMFmix share: q(pi), the priors and the bounds."""
    rho = np.asarray(state.rho)
    estimator.dirichlet_ = rho
    estimator.weights_ = rho / rho.sum()
    p = state.priors
    estimator.alpha_ = float(p.alpha)
    estimator.mu0_ = np.asarray(p.mu0)
    estimator.C0_ = float(p.C0)
    estimator.m_ = float(p.m)
    estimator.s2_ = float(p.s2)
    estimator.lower_bounds_ = np.asarray(bounds)
    estimator.lower_bound_ = float(bounds[-1])
    estimator.n_iter_ = len(bounds)
    estimator.converged_ = bool(converged)


def warn_not_converged(name, n_init, max_iter, bounds, n, tol, stacklevel=5):
    """Warn (ConvergenceWarning) that the kept restart did not converge."""
    change = abs(bounds[-1] - bounds[-2]) / n if len(bounds) > 1 else np.inf
    warnings.warn(
        f"{name}: the best of {n_init} restarts did not converge in max_iter={max_iter} "
        f"iterations (last bound change {change:.3g} per row > tol={tol}); increase "
        "max_iter or tol (with kappa_update='sampling' the bound is a noisy Monte Carlo "
        "estimate: use a looser tol or more kappa_num_samples).",
        ConvergenceWarning,
        stacklevel=stacklevel,
    )


def q_to_arviz(params, num_draws, random_state, dims, constant_data=None, pooled=None):
    """Return :func:`draw_from_q` of ``params`` as ``arviz.InferenceData`` (one chain).

    ``params`` = (psi, gamma, mean_log_kappa, var_log_kappa, rho); ``dims`` and
    ``constant_data`` as :func:`bayesvmf._arviz.inference_data` takes them. ``pooled``
    (bool, the kappa entries that are one shared concentration): those entries get one draw
    each time.
    """
    draws = draw_from_q(*params, num_draws, random_state)
    if pooled is not None and np.any(pooled):
        kappa = draws["kappa"]
        first = int(np.argmax(pooled))
        draws["kappa"] = np.where(pooled, kappa[..., first : first + 1], kappa)
    posterior = {name: v[None] for name, v in draws.items()}
    return _arviz.inference_data(posterior, dims, constant_data=constant_data)


def draw_from_q(psi, gamma, mean_log_kappa, var_log_kappa, rho, num_draws, random_state):
    """Draw mu ~ vMF(psi, gamma), kappa ~ LogNormal, weights ~ Dir(rho) (host arrays).

    The vMF batch is flattened and padded to a power of two (at least 16), so models of
    similar size share one compilation of the rejection sampler.
    """
    from bayesvmf.distribution import VonMisesFisher

    check_count(num_draws, "num_draws")
    psi = np.asarray(psi, np.float64)
    batch, d = psi.shape[:-1], psi.shape[-1]
    flat_psi, flat_gamma = psi.reshape(-1, d), np.asarray(gamma, np.float64).ravel()
    size = max(16, 1 << int(np.ceil(np.log2(flat_psi.shape[0]))))
    pad = size - flat_psi.shape[0]
    flat_psi = np.concatenate([flat_psi, np.tile(flat_psi[:1], (pad, 1))])
    flat_gamma = np.concatenate([flat_gamma, np.tile(flat_gamma[:1], pad)])
    with jax.enable_x64(True):
        k_mu, k_kappa, k_pi = jax.random.split(make_key(random_state), 3)
        mu = VonMisesFisher(jnp.asarray(flat_psi), jnp.asarray(flat_gamma)).sample(
            k_mu, (num_draws,)
        )
        mu = np.asarray(mu)[:, : size - pad].reshape(num_draws, *batch, d)
        log_kappa = jnp.asarray(mean_log_kappa) + jnp.sqrt(
            jnp.asarray(var_log_kappa)
        ) * jax.random.normal(k_kappa, (num_draws, *np.shape(mean_log_kappa)))
        weights = jax.random.dirichlet(k_pi, jnp.asarray(rho), (num_draws,))
        return {
            "mu": mu,
            "kappa": np.asarray(jnp.exp(log_kappa)),
            "weights": np.asarray(weights),
        }


#: Entries of a (draws, rows, components) block of :func:`pointwise_log_likelihood` (64 MiB
#: of float64; its terms and logsumexp hold three or four such arrays at once), and of the
#: rows' (rows, features) block: rows go through in chunks that keep both below it.
LOG_LIKELIHOOD_BLOCK = 2**23


def pointwise_log_likelihood(rows, mu, kappa, weights, times=None) -> np.ndarray:
    """Return log p(x_i | draw s) of every draw and row, shape (n_draws, n_rows).

    For each draw s of (pi, mu, kappa): log sum_k pi_sk C_d(kappa_sk) exp(kappa_sk mu_sk . x_i),
    the model's likelihood of x_i with z_i summed out (z_i ~ Cat(pi), x_i ~ vMF(mu_{z_i},
    kappa_{z_i}) in [1]_): the ``log_likelihood`` group that ArviZ's ``loo`` and ``waic``
    read.

    Parameters
    ----------
    rows : ndarray or scipy.sparse matrix of shape (n_rows, d)
        Validated unit rows (the estimator's ``_check_input``).
    mu : ndarray of shape (n_draws, K, d), or (n_draws, T, K, d) with ``times``
        Mean directions of each draw (T-vMFmix: of each time step).
    kappa, weights : ndarray of shape (n_draws, K)
    times : ndarray of int of shape (n_rows,), optional
        Each row's time step (an index into the T axis of ``mu``).
    """
    kappa = np.asarray(kappa, np.float64)
    n_draws, n_components = kappa.shape
    d = rows.shape[1]
    with jax.enable_x64(True):
        log_c = np.asarray(_mixture.log_normalizer(d, jnp.asarray(kappa.ravel())))
    with np.errstate(divide="ignore"):  # a weight drawn as 0 is a component of density 0
        base = np.log(np.asarray(weights, np.float64)) + log_c.reshape(kappa.shape)
    steps = np.zeros(rows.shape[0], np.int64) if times is None else np.asarray(times)
    mu = np.asarray(mu, np.float64)
    if times is None:
        mu = mu[:, None]
    chunk = max(1, LOG_LIKELIHOOD_BLOCK // max(n_draws * n_components, d))
    out = np.empty((n_draws, rows.shape[0]))
    for t in np.unique(steps):
        # without times a slice of the rows (a view), with them the chunk's rows of step t
        index = np.arange(rows.shape[0]) if times is None else np.flatnonzero(steps == t)
        directions = mu[:, t].reshape(n_draws * n_components, d)
        for start in range(0, index.size, chunk):
            part = index[start : start + chunk]
            block = rows[start : start + chunk] if times is None else rows[part]
            cos = np.asarray(block @ directions.T).reshape(part.size, n_draws, n_components)
            terms = base[:, None, :] + kappa[:, None, :] * cos.transpose(1, 0, 2)
            out[:, part] = scipy.special.logsumexp(terms, axis=2)
    return out


def with_log_likelihood(idata, rows, *, components=None, times=None):
    """Add :func:`pointwise_log_likelihood` of ``rows`` under ``idata``'s draws to ``idata``.

    The draws are the posterior group's ``mu``, ``kappa`` and ``weights`` (one chain);
    ``components``: the entries of ``mu`` and ``kappa`` that are the mixture's components
    (H-vMFmix: the leaves among the nodes); ``times``: each row's time step (T-vMFmix).
    """
    posterior = idata.posterior
    weights = posterior["weights"].values[0]
    mu, kappa = posterior["mu"].values[0], posterior["kappa"].values[0]
    if components is not None:
        mu, kappa = mu[:, components], kappa[:, components]
    # one shared concentration has no component axis: the same draw for every component
    kappa = np.broadcast_to(kappa.reshape(weights.shape[0], -1), weights.shape)
    values = pointwise_log_likelihood(rows, mu, kappa, weights, times)
    return _arviz.with_log_likelihood(idata, values)
