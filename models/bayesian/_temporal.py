r"""Temporal vMF mixture (T-vMFmix, section 3.3 of Gopal & Yang [1]_) by mean-field VI.

Generative story: K clusters whose mean directions drift over T time steps,

    pi ~ Dir(alpha),  kappa_k ~ LogNormal(m, s2),
    mu_{0,k} ~ vMF(mu_{-1}, C0),  mu_{t,k} ~ vMF(mu_{t-1,k}, C0)  (t = 1..T-1),
    z_{t,i} ~ Cat(pi),  x_{t,i} ~ vMF(mu_{t,z_{t,i}}, kappa_{z_{t,i}}),

with kappa_k and pi shared over time (times are numbered from 0 here, from 1 in [1]_).

Inference: q(pi) = Dir(rho), q(z_{t,i}) = Cat(lam), q(mu_{t,k}) = vMF(psi_tk, gamma_tk),
q(kappa_k) from :mod:`._kappa`; empirical Bayes of alpha, mu_{-1}, m, s2 (C0 is a user
setting, as [1]_ recommends). Derivations (the supplement is missing):
docs/bayesian_hierarchical_temporal.md.

*Bound.* With E[mu_tk] = A_d(gamma_tk) psi_tk, N_tk = sum_{i at t} lam_ik and
r_tk = sum_{i at t} lam_ik x_i,

    L = sum_k [T log C_d(C0) + C0 mu_{-1}.E[mu_0k] + C0 sum_{t>=1} E[mu_{t-1,k}].E[mu_tk]]
        + sum_k (N_k E[log C_d(kappa_k)] + E[kappa_k] sum_t E[mu_tk].r_tk)
        + (Dirichlet terms of q(pi), as in H-vMFmix) - sum_k KL(q(log kappa_k) || N(m, s2))
        + sum_tk H[q(mu_tk)] + H[q(z)],

with N_k = sum_t N_tk. Mean-field independence makes each chain term bilinear,
E[mu_{t-1}.mu_t] = E[mu_{t-1}].E[mu_t].

*Updates* (exact coordinate maximisers of L):

* q(z): log lam_{t,ik} = E[log pi_k] + E[log C_d(kappa_k)] + E[kappa_k] x_{t,i}.E[mu_tk];
* q(mu_tk) = vMF(R_tk/|R_tk|, |R_tk|),
  R_tk = C0 E[mu_{t-1,k}] + C0 E[mu_{t+1,k}] + E[kappa_k] r_tk (mu_{-1} in place of
  E[mu_{-1,k}] at t = 0; no next term at t = T-1). The neighbours enter through their
  *means* E[mu] = A_d(gamma) psi, not their modes psi: a neighbour known only vaguely pulls
  less. Even times are updated first, then odd times (no two times of one class are
  neighbours, so each class update is exact);
* q(kappa_k): :mod:`._kappa` with weight_k = N_k, dot_k = sum_t E[mu_tk].r_tk;
* q(pi): rho_k = alpha + N_k; empirical Bayes (:mod:`._empirical_bayes`): alpha
  (safeguarded Newton), mu_{-1} the direction of
  sum_k E[mu_0k], (m, s2) the Gaussian MLE of the log kappa moments.

A time step without data is allowed: its r_tk = 0 and q(mu_tk) interpolates between the
neighbouring steps through the C0 terms.

*Prediction.* Inside the fitted range, the predictive density of x at time t integrates
q(mu_tk) in closed form (see :func:`._hierarchical.predictive_log_density`). Beyond the last
fitted time T-1, by h >= 1 steps, mu_{T-1+h,k} = h vMF(., C0) steps from mu_{T-1,k} ~ q. The
paper's closed form int vMF(x | mu, k) vMF(mu | m, C0) dmu = C_d(k) C_d(C0) / C_d(|k x + C0 m|)
is for a known m; chained through q(mu_{T-1,k}) the law of mu_{T-1+h,k} is not vMF, and it is
replaced by the vMF with the same mean direction and mean resultant length: E[mu_{t+1}] =
A_d(C0) E[mu_t] exactly, so A_d(gamma_h) = A_d(gamma_{T-1,k}) A_d(C0)^h. With a certain
q(mu_{T-1}) (gamma -> inf) and h = 1 this is exactly the paper's formula. Its error against
the exact chained integral (Monte Carlo) is measured in tests/test_bayesian_temporal.py.

Symbols (code name <-> paper):

====================  ======================================================================
``times``             time index t of each row, 0..T-1
``psi, gamma``        q(mu_tk) = vMF(psi_tk, gamma_tk), shapes (T, K, d), (T, K)
``rho``               q(pi) = Dir(rho), shape (K,)
``resp_sum``          N_tk, shape (T, K)
``resultant``         r_tk, shape (T, K, d)
``mu0, C0``           mu_{-1} and C0 of the chain
``m, s2``             log-normal prior of kappa_k
====================  ======================================================================

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from bayesvmf import _mixture, _parallel, special
from bayesvmf._mixture import count_trace
from bayesvmf.models.bayesian import _empirical_bayes as _eb
from bayesvmf.models.bayesian import _hierarchical as _h
from bayesvmf.models.bayesian import _kappa

__all__ = [
    "check_times",
    "TState",
    "TemporalVMFMixture",
]


def check_times(times, n_samples: int, *, name: str = "times") -> np.ndarray:
    """Validate time indices and return them as a new int64 array.

    Parameters
    ----------
    times : array-like of int of shape (n_samples,)
        Time step of each row, ``>= 0``.
    n_samples : int
        Number of rows of X.
    name : str
        Argument name for the messages.

    Returns
    -------
    ndarray of int64 of shape (n_samples,)

    Raises
    ------
    TypeError
        If ``times`` is not of integer dtype (floats are refused, even integral ones, so
        that a column of real timestamps is not silently truncated).
    ValueError
        If it is not 1-D of length ``n_samples`` or has a negative entry (the message
        names the first offending row).

    Examples
    --------
    >>> check_times([0, 1, 1, 2], 4).tolist()
    [0, 1, 1, 2]
    >>> check_times([0, -1], 2)
    Traceback (most recent call last):
    ...
    ValueError: times[1] = -1 is negative; time indices start at 0.
    """
    arr = np.asarray(times)
    if arr.dtype == object or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an array of integer time indices; got dtype {arr.dtype}.")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}.")
    if arr.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {arr.shape[0]} entries but X has {n_samples} rows; give one time "
            "index per row."
        )
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        j = int(neg[0])
        raise ValueError(f"{name}[{j}] = {int(arr[j])} is negative; time indices start at 0.")
    return arr.astype(np.int64)


class TState(NamedTuple):
    """Variational state of T-vMFmix.

    Attributes
    ----------
    psi : jax.Array of shape (T, K, d)
    gamma : jax.Array of shape (T, K)
    emu : jax.Array of shape (T, K, d)
        E[mu_tk] = A_d(gamma_tk) psi_tk.
    rho : jax.Array of shape (K,)
    kappa : _kappa.KappaMoments
        Fields of shape (K,).
    priors : _kappa.Priors
        alpha, mu0 (= mu_{-1}), C0, m, s2.
    """

    psi: jax.Array
    gamma: jax.Array
    emu: jax.Array
    rho: jax.Array
    kappa: Any
    priors: Any


class TStats(NamedTuple):
    """q(z) statistics: N_tk (T, K), r_tk (T, K, d) and H[q(z)]."""

    resp_sum: jax.Array
    resultant: jax.Array
    entropy: jax.Array


class TInfo(NamedTuple):
    """Per-iteration diagnostics: the bound and N_k = sum_t N_tk."""

    lower_bound: jax.Array
    resp_sum: jax.Array


def _chain_terms(emu, mu0):
    """Return (previous, next) neighbour means of each time step, (T, K, d) each."""
    prev = jnp.concatenate([jnp.broadcast_to(mu0, emu[:1].shape), emu[:-1]], axis=0)
    nxt = jnp.concatenate([emu[1:], jnp.zeros_like(emu[:1])], axis=0)
    return prev, nxt


def _update_mu(state: TState, resultant, mask):
    """Update q(mu_tk) at the times in ``mask`` (T,) (one colour class), R_tk above."""
    d = state.psi.shape[-1]
    p = state.priors
    prev, nxt = _chain_terms(state.emu, p.mu0)
    R = p.C0 * (prev + nxt) + state.kappa.mean_kappa[None, :, None] * resultant
    psi, gamma = _h.vmf_from_natural(R, state.psi)
    psi = jnp.where(mask[:, None, None], psi, state.psi)
    gamma = jnp.where(mask[:, None], gamma, state.gamma)
    emu = jnp.where(mask[:, None, None], _h.mean_direction(d, psi, gamma), state.emu)
    return state._replace(psi=psi, gamma=gamma, emu=emu)


def _kappa_inputs(emu, stats: TStats):
    return stats.resp_sum.sum(axis=0), jnp.sum(emu * stats.resultant, axis=(0, 2))


def lower_bound(state: TState, stats: TStats):
    """Return the bound L of the module docstring."""
    d = state.psi.shape[-1]
    p, k = state.priors, state.kappa
    n_times, n_comp = state.gamma.shape
    weight, dot = _kappa_inputs(state.emu, stats)
    prev, _ = _chain_terms(state.emu, p.mu0)
    log_c = _mixture.log_normalizer(d, jnp.append(state.gamma.ravel(), p.C0))
    entropy_mu = -log_c[:-1] - state.gamma.ravel() * jnp.linalg.norm(state.emu, axis=-1).ravel()
    return (
        n_times * n_comp * log_c[-1]
        + p.C0 * jnp.sum(prev * state.emu)
        + jnp.sum(weight * k.mean_log_c + k.mean_kappa * dot)
        + _eb.dirichlet_terms(state.rho, weight, p.alpha)
        - jnp.sum(_kappa.kl_normal(k.mean_log_kappa, k.var_log_kappa, p.m, p.s2))
        + jnp.sum(entropy_mu)
        + stats.entropy
    )


def _time_onehot(times, n_times):
    return jax.nn.one_hot(times, n_times, dtype=jnp.float64)


def _row_cosines(data, times, M):
    """x_i . M[t_i, k] for M of shape (T, K, d): one product X @ M^T over all T K columns."""
    n_times, n_comp, d = M.shape
    cos = _mixture.data_dot(data, M.reshape(n_times * n_comp, d).T)
    cos = cos.reshape(-1, n_times, n_comp)
    return jnp.take_along_axis(cos, times[:, None, None], axis=1)[:, 0, :]


def _statistics(data, times, lam, n_times: int, log_lam=None) -> TStats:
    """N_tk, r_tk and H[q(z)] (0 without ``log_lam``: a crisp q(z)) of the rows' lam (n, K).

    ``data`` is plain data or one device's block of :class:`bayesvmf._parallel.RowBlocks`
    (inside ``shard_map``, ``times`` its slice): padding rows weigh 0, so they touch no
    time step's statistics, and the sums are added over the devices (``psum``).
    """
    n_comp = lam.shape[1]
    weighted = lam * data.row_weight[:, None] if isinstance(data, _parallel.RowBlocks) else lam
    rows = _parallel.block_data(data)
    onehot = _time_onehot(times, n_times)
    spread = (onehot[:, :, None] * weighted[:, None, :]).reshape(-1, n_times * n_comp)
    resultant = _mixture.data_tdot(rows, spread).T.reshape(n_times, n_comp, rows.shape[1])
    resp_sum = onehot.T @ weighted
    if log_lam is None:
        entropy = jnp.zeros((), jnp.float64)
    else:
        entropy = -jnp.sum(jnp.where(lam > 0, weighted * log_lam, 0.0))
    return TStats(*_parallel.sum_over_blocks(data, resp_sum, resultant, entropy))


def e_step(data, times, state: TState) -> TStats:
    """Update q(z); return N_tk, r_tk and H[q(z)] (plain data or a block, :func:`_statistics`)."""
    k = state.kappa
    cos = _row_cosines(_parallel.block_data(data), times, state.emu)
    wlp = _eb.expected_log_pi(state.rho) + k.mean_log_c + k.mean_kappa * cos
    log_lam = wlp - logsumexp(wlp, axis=1, keepdims=True)
    return _statistics(data, times, jnp.exp(log_lam), state.psi.shape[0], log_lam)


def m_part(
    rng_key, state: TState, stats: TStats, *, scheme, empirical_bayes, num_samples, num_steps
):
    """Update q(pi), q(mu) (even then odd times), q(kappa) and the priors."""
    d = state.psi.shape[-1]
    p = state.priors
    weight = stats.resp_sum.sum(axis=0)
    state = state._replace(rho=p.alpha + weight)
    even = jnp.arange(state.psi.shape[0]) % 2 == 0
    for mask in (even, ~even):
        state = _update_mu(state, stats.resultant, mask)
    weight, dot = _kappa_inputs(state.emu, stats)
    kappa, _ = _kappa.update(
        scheme,
        rng_key,
        state.kappa.state,
        weight,
        dot,
        p.m,
        p.s2,
        d=d,
        num_samples=num_samples,
        num_warmup=0,
        num_steps=num_steps,
    )
    if empirical_bayes:  # sec. 3.1.3; C0 stays the user's (module docstring)
        alpha = _eb.update_alpha(p.alpha, state.rho)
        mu0, _ = _eb.update_mu0(state.emu[0], p.mu0)
        m, s2 = _eb.update_m_s2(kappa.mean_log_kappa, kappa.var_log_kappa)
        p = p._replace(alpha=alpha, mu0=mu0, m=m, s2=s2)
    return state._replace(kappa=kappa, priors=p)


def vi_step(
    rng_key,
    data,
    times,
    state: TState,
    stats: TStats,
    *,
    scheme,
    empirical_bayes,
    num_samples,
    num_steps,
):
    """One VI iteration (as in H-vMFmix: the q(z) update closes it).

    With row blocks on a mesh of devices (``devices=``; ``times`` laid out like the rows by
    :func:`._hierarchical.row_array`) the step runs under ``shard_map``: every device
    updates q(z) of its rows, the statistics are added with ``psum``, the rest runs
    replicated.
    """
    count_trace("temporal.vi_step")
    body = functools.partial(
        _vi_step_body,
        scheme=scheme,
        empirical_bayes=empirical_bayes,
        num_samples=num_samples,
        num_steps=num_steps,
    )
    return _h.map_row_blocks(body, (rng_key, state, stats), data, times)


def _vi_step_body(args, data, times, **static):
    """:func:`vi_step` on plain data or on one device's block of rows."""
    rng_key, state, stats = args
    state = m_part(rng_key, state, stats, **static)
    info = TInfo(lower_bound(state, stats), stats.resp_sum.sum(axis=0))
    return state, e_step(data, times, state), info


_vi_step = jax.jit(vi_step, static_argnames=_h._STATIC, compiler_options=_mixture.JIT_OPTIONS)


@functools.partial(
    jax.jit,
    static_argnames=("n_times", "n_components", "init"),
    compiler_options=_mixture.JIT_OPTIONS,
)
def _initial_statistics(rng_key, data, times, *, n_times: int, n_components: int, init: str):
    """TStats of the crisp initial assignment: every row to its closest seed by cosine.

    The seeds are K random rows or spherical k-means++ seeds (the same draws on row blocks,
    :data:`bayesvmf._parallel.INIT_METHODS`); each device assigns its own rows.
    """
    count_trace("temporal.initial_statistics")

    def body(rng_key, data, times):
        mu = _parallel.INIT_METHODS[init](rng_key, data, n_components)
        labels = jnp.argmax(_mixture.data_dot(_parallel.block_data(data), mu.T), axis=1)
        lam = jax.nn.one_hot(labels, n_components, dtype=jnp.float64)
        return _statistics(data, times, lam, n_times)

    return _h.map_row_blocks(body, rng_key, data, times)


def forecast_concentration(d: int, gamma, C0, horizon):
    """Concentration gamma_h of the vMF with mean resultant A_d(gamma) A_d(C0)^h.

    The law of mu_{t+h} when mu_t ~ vMF(psi, gamma) and each step is vMF(., C0), matched in
    its mean E[mu_{t+h}] = A_d(C0)^h A_d(gamma) psi (module docstring).
    """
    rbar = special.mean_resultant_length(d, gamma) * special.mean_resultant_length(d, C0) ** (
        horizon
    )
    return special.kappa_from_rbar(d, rbar)


def _log_predictive(data, times, psi, gamma, mean_log_kappa, var_log_kappa, log_weights, C0):
    """Log E[pi_k] + log p(x_i | k, t_i) for each row (in-range or forecast, see module doc)."""
    count_trace("temporal.predictive")
    n_times = psi.shape[0]
    d = psi.shape[-1]
    last = n_times - 1
    horizon = jnp.maximum(times - last, 0)
    clipped = jnp.minimum(times, last)
    cos = _row_cosines(data, clipped, psi)
    gamma_rows = gamma[clipped]  # (n, K)
    forecast = forecast_concentration(d, gamma[last][None, :], C0, horizon[:, None])
    gamma_rows = jnp.where(horizon[:, None] > 0, forecast, gamma_rows)
    return (
        _h.predictive_log_density(d, cos, gamma_rows, mean_log_kappa, var_log_kappa) + log_weights
    )


_log_predictive_jit = jax.jit(_log_predictive, compiler_options=_mixture.JIT_OPTIONS)


@functools.partial(jax.jit, compiler_options=_mixture.JIT_OPTIONS)
def _log_predictive_blocks(data, times, params):
    """:func:`_log_predictive` of the rows of row blocks, each device its rows (padded)."""

    def body(params, data, times):
        return _log_predictive(data.data, times, *params)

    return _h.map_row_blocks(body, params, data, times, per_row=True)


class TemporalVMFMixture(_mixture.BaseVMFMixture):
    r"""Temporal Bayesian vMF mixture (T-vMFmix, section 3.3 of [1]_), mean-field VI.

    Cluster mean directions follow a vMF random walk over the time steps
    (``mu_{t,k} ~ vMF(mu_{t-1,k}, C0)``); concentrations and weights are shared over time.
    Updates, bound and the forecast: module docstring and
    docs/bayesian_hierarchical_temporal.md.

    Parameters
    ----------
    n_components : int
        K.
    C0 : float, default 100.0
        Concentration of each time step around the previous one: large values keep the
        clusters nearly fixed, small ones let them move (not learnt: [1]_ recommends
        setting it by hand).
    kappa_update : {"sampling", "bounding"}, default "sampling"
    alpha : float, default 1.0
    mu0 : array-like of shape (n_features,) or None
        mu_{-1}; None: the direction of the data mean (learnt with ``empirical_bayes``).
    m : float or None, default None
        Mean of log kappa_k; None: the mean log of the initial clusters' concentrations.
    s2 : float, default 1.0
    empirical_bayes : bool, default True
        Update alpha, mu0, m, s2.
    init, n_init, max_iter, tol, kappa_num_samples, kappa_num_steps, normalize,
    random_state, progress_bar
        As in :class:`._hierarchical.HierarchicalVMFMixture`.
    devices : None, int or list of jax devices, default None
        Data-parallel VI (DESIGN.md section 6): the rows of X and their time indices are
        split into one equal block per device (``jax.sharding``; padding rows weigh 0 and
        touch no time step); every device computes q(z) of its rows and their statistics
        (N_tk, r_tk, the entropy of q(z)), which are added with ``psum``; the initial seeds
        are drawn as on one device and each device assigns its own rows; the updates of
        q(pi), q(mu_tk), q(kappa_k) and empirical Bayes run replicated. The result equals
        the one-device fit to floating-point accuracy. An int n means the first n of
        ``jax.devices()``; None is the default device. ``fit`` and ``fit_predict`` shard;
        ``predict``, ``score_samples`` etc. run on the default device.

    Attributes
    ----------
    time_mean_directions_ : ndarray of shape (T, K, d)
        psi_tk, the mean direction of q(mu_tk).
    time_mean_concentrations_ : ndarray of shape (T, K)
        gamma_tk.
    mean_directions_ : ndarray of shape (K, d)
        psi at the last fitted time (the plug-in mixture of :meth:`sample`).
    concentrations_, weights_ : ndarray of shape (K,)
        E[kappa_k], E[pi_k].
    log_kappa_mean_, log_kappa_var_ : ndarray of shape (K,)
    dirichlet_ : ndarray of shape (K,)
    alpha_, mu0_, C0_, m_, s2_
    n_times_ : int
    lower_bounds_ : ndarray

    References
    ----------
    .. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.datasets import make_temporal_vmf_mixture
    >>> X, times, labels, means = make_temporal_vmf_mixture(
    ...     40, n_features=5, n_components=2, n_times=4, kappa=50.0, drift=200.0,
    ...     random_state=0)
    >>> model = TemporalVMFMixture(2, C0=200.0, kappa_update="bounding", tol=1e-4,
    ...                            random_state=0)
    >>> model = model.fit(X, times)
    >>> model.time_mean_directions_.shape
    (4, 2, 5)
    >>> bool(model.score(X[times == 3], np.full(40, 4)) > 0)
    True
    """

    _parameter_constraints: dict[str, Any] = {
        "n_components": _mixture.Interval(int, 1, None),
        **_h.SHARED_CONSTRAINTS,
    }

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "time_mean_directions_",
        "time_mean_concentrations_",
        "log_kappa_mean_",
        "log_kappa_var_",
        "dirichlet_",
        "alpha_",
        "mu0_",
        "C0_",
        "m_",
        "s2_",
        "n_times_",
        "lower_bounds_",
    )

    def __init__(
        self,
        n_components: int = 1,
        *,
        C0: float = 100.0,
        kappa_update: str = "sampling",
        alpha: float = 1.0,
        mu0=None,
        m: float | None = None,
        s2: float = 1.0,
        empirical_bayes: bool = True,
        init: str = "spherical-kmeans++",
        n_init: int = 1,
        max_iter: int = 100,
        tol: float = 1e-6,
        kappa_num_samples: int = 50,
        kappa_num_steps: int = 20,
        normalize: bool = True,
        random_state=None,
        progress_bar: bool = False,
        devices=None,
    ):
        self.n_components = n_components
        self.C0 = C0
        self.kappa_update = kappa_update
        self.alpha = alpha
        self.mu0 = mu0
        self.m = m
        self.s2 = s2
        self.empirical_bayes = empirical_bayes
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.kappa_num_samples = kappa_num_samples
        self.kappa_num_steps = kappa_num_steps
        self.normalize = normalize
        self.random_state = random_state
        self.progress_bar = progress_bar
        self.devices = devices

    def _validate_params(self) -> None:
        super()._validate_params()
        if not _h._OptionalDirection().check(self.mu0):
            raise ValueError(
                f"{type(self).__name__}: parameter 'mu0' must be "
                f"{_h._OptionalDirection().describe()}; got {self.mu0!r}."
            )

    def _n_parameters(self) -> int:
        n_times, k, d = self.time_mean_directions_.shape
        return (k - 1) + n_times * k * (d - 1) + k

    # ---- fitting ----------------------------------------------------------------------------

    def fit(self, X, times) -> TemporalVMFMixture:
        """Fit the model to rows X observed at time steps ``times``.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)
            Time step of each row; the fitted range is 0..max(times). A step without rows
            is allowed (its means interpolate between the neighbouring steps).

        Returns
        -------
        self
        """
        self._validate_params()
        devices = _parallel.resolve_devices(self.devices)  # before the fitted model changes
        Xc = self._check_input(X, reset=True)
        t = check_times(times, Xc.shape[0])
        with jax.enable_x64(True):
            self._fit_times(_h.fit_data(Xc, devices), t, _mixture.make_key(self.random_state))
        return self

    def fit_predict(self, X, times) -> np.ndarray:
        """Fit and return the most probable cluster of each row (``fit(X, times).predict``).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        self._validate_params()
        devices = _parallel.resolve_devices(self.devices)  # before the fitted model changes
        Xc = self._check_input(X, reset=True)
        t = check_times(times, Xc.shape[0])
        with jax.enable_x64(True):
            data = _h.fit_data(Xc, devices)
            self._fit_times(data, t, _mixture.make_key(self.random_state))
            if devices is None:
                return np.asarray(jnp.argmax(self._weighted(data, t), axis=1))
            wlp = _log_predictive_blocks(data, _h.row_array(t, data), self._predictive_params())
            return np.argmax(_h.host_rows(wlp, data), axis=1)

    def _fit_times(self, data, times, rng_key) -> None:
        n, d = data.shape
        K = int(self.n_components)
        n_times = int(times.max()) + 1
        t_dev = _h.row_array(times, data)  # sharded with the rows over devices
        mu0 = _h.resolve_mu0(self.mu0, _h.data_mean_direction(data), d)
        static = dict(
            scheme=self.kappa_update,
            empirical_bayes=bool(self.empirical_bayes),
            num_samples=int(self.kappa_num_samples),
            num_steps=int(self.kappa_num_steps),
        )
        runs = []
        for r, run_key in enumerate(jax.random.split(rng_key, self.n_init)):
            init_key, loop_key = jax.random.split(run_key)
            stats = _initial_statistics(
                init_key, data, t_dev, n_times=n_times, n_components=K, init=self.init
            )
            state = self._initial_state(stats, mu0, d)
            bounds, converged = [], False
            bar = _h.progress(self.progress_bar, self.max_iter, f"T-vMFmix VI {r + 1}")
            for key in jax.random.split(loop_key, self.max_iter):
                state, stats, info = _vi_step(key, data, t_dev, state, stats, **static)
                bounds.append(float(info.lower_bound))
                if bar is not None:
                    bar.update()
                if len(bounds) > 1 and abs(bounds[-1] - bounds[-2]) <= self.tol * n:
                    converged = True
                    break
            if bar is not None:
                bar.close()
            runs.append((state, bounds, converged))
        # the first restart within tol of the best: restarts that reach one optimum tie to
        # rounding, which must not decide between them (one device or several)
        state, bounds, converged = runs[
            _mixture.best_run([run[1][-1] for run in runs], self.tol * n)
        ]
        if not converged:
            _h.warn_not_converged(
                type(self).__name__, self.n_init, self.max_iter, bounds, n, self.tol
            )
        self._store(state, bounds, converged)

    def _initial_state(self, stats: TStats, mu0, d) -> TState:
        """Every time step starts at its cluster's pooled direction and concentration."""
        pooled = np.asarray(stats.resultant.sum(axis=0))
        counts = np.asarray(stats.resp_sum.sum(axis=0))
        norms = np.linalg.norm(pooled, axis=1)
        psi_k = np.where(norms[:, None] > 0, pooled / np.maximum(norms, 1e-300)[:, None], mu0)
        kappa = _h.initial_kappa(d, norms / np.maximum(counts, 1e-300))
        n_times = stats.resp_sum.shape[0]
        psi = jnp.asarray(np.broadcast_to(psi_k, (n_times, *psi_k.shape)).copy())
        # replaced by the first q(mu) update; the concentration of each step's data until then
        gamma = jnp.asarray(
            kappa[None, :] * np.maximum(np.asarray(stats.resp_sum), 1.0) + float(self.C0)
        )
        m = float(np.mean(np.log(kappa))) if self.m is None else float(self.m)
        priors = _kappa.Priors(
            alpha=jnp.float64(self.alpha),
            mu0=jnp.asarray(mu0, jnp.float64),
            C0=jnp.float64(self.C0),
            m=jnp.float64(m),
            s2=jnp.float64(self.s2),
        )
        return TState(
            psi,
            gamma,
            _h.mean_direction(d, psi, gamma),
            jnp.full((counts.size,), float(self.alpha)) + jnp.asarray(counts),
            _h.kappa_moments_at(d, kappa, self.kappa_update),
            priors,
        )

    def _store(self, state: TState, bounds, converged) -> None:
        k = state.kappa
        rho = np.asarray(state.rho)
        self.time_mean_directions_ = np.asarray(state.psi)
        self.time_mean_concentrations_ = np.asarray(state.gamma)
        self.n_times_ = int(state.psi.shape[0])
        self.mean_directions_ = self.time_mean_directions_[-1]
        self.concentrations_ = np.asarray(k.mean_kappa)
        self.log_kappa_mean_ = np.asarray(k.mean_log_kappa)
        self.log_kappa_var_ = np.asarray(k.var_log_kappa)
        self.dirichlet_ = rho
        self.weights_ = rho / rho.sum()
        p = state.priors
        self.alpha_ = float(p.alpha)
        self.mu0_ = np.asarray(p.mu0)
        self.C0_ = float(p.C0)
        self.m_ = float(p.m)
        self.s2_ = float(p.s2)
        self.lower_bounds_ = np.asarray(bounds)
        self.lower_bound_ = float(bounds[-1])
        self.n_iter_ = len(bounds)
        self.converged_ = bool(converged)

    # ---- prediction -------------------------------------------------------------------------

    def _predictive_params(self) -> tuple:
        """Return q(mu_tk), q(kappa_k), log E[pi_k] and C0 as float64 arrays (inside x64)."""
        return (
            jnp.asarray(self.time_mean_directions_, jnp.float64),
            jnp.asarray(self.time_mean_concentrations_, jnp.float64),
            jnp.asarray(self.log_kappa_mean_, jnp.float64),
            jnp.asarray(self.log_kappa_var_, jnp.float64),
            jnp.log(jnp.asarray(self.weights_, jnp.float64)),
            jnp.float64(self.C0_),
        )

    def _weighted(self, data, times) -> jax.Array:
        with jax.enable_x64(True):
            return _log_predictive_jit(data, jnp.asarray(times), *self._predictive_params())

    def _data_times(self, X, times):
        data = self._device_data(X)
        return data, check_times(times, data.shape[0])

    def predict(self, X, times) -> np.ndarray:
        """Return the most probable cluster of each row under the posterior predictive.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)
            Any time >= 0; beyond the fitted range the forecast of :meth:`score_samples`.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            return np.asarray(jnp.argmax(self._weighted(*self._data_times(X, times)), axis=1))

    def predict_proba(self, X, times) -> np.ndarray:
        """Return the predictive cluster probabilities of each row (rows sum to one).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)

        Returns
        -------
        ndarray of shape (n_samples, n_components)
        """
        with jax.enable_x64(True):
            wlp = self._weighted(*self._data_times(X, times))
            return np.asarray(jnp.exp(wlp - logsumexp(wlp, axis=1, keepdims=True)))

    def score_samples(self, X, times) -> np.ndarray:
        r"""Return the held-out log posterior predictive density of each row at its time.

        ``log sum_k E[pi_k] int int vMF(x | mu, kappa_k) q_t(mu) q(kappa_k)``: q_t(mu) is
        q(mu_tk) = vMF(psi_tk, gamma_tk) inside the fitted range and, h steps beyond the
        last fitted time, the vMF(psi_{T-1,k}, gamma_h) with
        A_d(gamma_h) = A_d(gamma_{T-1,k}) A_d(C0)^h (module docstring). The mu integral
        is closed form, C_d(kappa) C_d(gamma) / C_d(|kappa x + gamma psi|); the kappa
        integral uses 20-node Gauss-Hermite quadrature under the log-normal with
        E[log kappa_k], Var[log kappa_k] (q itself under the bounding scheme, its
        moment-matched log-normal under the sampling scheme).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            return np.asarray(logsumexp(self._weighted(*self._data_times(X, times)), axis=1))

    def score(self, X, times) -> float:
        """Return the mean of :meth:`score_samples`.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)

        Returns
        -------
        float
        """
        return float(np.mean(self.score_samples(X, times)))

    def bic(self, X, times) -> float:
        """Bayesian information criterion of the predictive density at ``times``.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)

        Returns
        -------
        float
        """
        from bayesvmf import criteria

        ll = self.score_samples(X, times)
        return criteria.information_criterion(
            "bic", float(ll.sum()), self._n_parameters(), ll.shape[0], self.n_features_in_
        )

    def aic(self, X, times) -> float:
        """Akaike information criterion of the predictive density at ``times``.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,)

        Returns
        -------
        float
        """
        from bayesvmf import criteria

        ll = self.score_samples(X, times)
        return criteria.information_criterion(
            "aic", float(ll.sum()), self._n_parameters(), ll.shape[0], self.n_features_in_
        )

    def top_features(self, component: int, n_top: int = 6, vocabulary=None) -> list:
        """Return the largest coordinates of a cluster's mean direction at every time step.

        The evolution of a cluster's vocabulary, as in Fig. 3 of [1]_.

        Parameters
        ----------
        component : int
            Cluster index k.
        n_top : int, default 6
        vocabulary : sequence of length n_features, optional
            Feature names; by default the feature indices.

        Returns
        -------
        list of T lists of (feature, weight) pairs, largest weight first (ties by index).
        """
        self._check_is_fitted()
        n_times, k, d = self.time_mean_directions_.shape
        if not (isinstance(component, numbers.Integral) and 0 <= component < k):
            raise ValueError(f"component must be an int in 0..{k - 1}; got {component!r}.")
        if not (isinstance(n_top, numbers.Integral) and n_top >= 1):
            raise ValueError(f"n_top must be an int >= 1; got {n_top!r}.")
        if vocabulary is not None and len(vocabulary) != d:
            raise ValueError(
                f"vocabulary has {len(vocabulary)} entries but the model has {d} features."
            )
        out = []
        for t in range(n_times):
            w = self.time_mean_directions_[t, component]
            order = np.argsort(-w, kind="stable")[:n_top]
            out.append(
                [(vocabulary[j] if vocabulary is not None else int(j), float(w[j])) for j in order]
            )
        return out

    def to_arviz(self, num_draws: int = 200, random_state=None):
        """Return draws from q as an ``arviz.InferenceData`` (one chain of ``num_draws``).

        ``posterior`` holds ``mu`` (dims time, component, feature), ``kappa`` and
        ``weights`` (component): mu_tk ~ vMF(psi_tk, gamma_tk), log kappa_k ~
        N(E[log kappa_k], Var[log kappa_k]), pi ~ Dir(rho).
        """
        self._check_is_fitted()
        import arviz as az

        draws = _h.draw_from_q(
            self.time_mean_directions_,
            self.time_mean_concentrations_,
            self.log_kappa_mean_,
            self.log_kappa_var_,
            self.dirichlet_,
            num_draws,
            random_state,
        )
        n_times, k, d = self.time_mean_directions_.shape
        return az.from_dict(
            posterior={name: v[None] for name, v in draws.items()},
            coords={"time": np.arange(n_times), "component": np.arange(k), "feature": np.arange(d)},
            dims={
                "mu": ["time", "component", "feature"],
                "kappa": ["component"],
                "weights": ["component"],
            },
        )
