"""The T-vMFmix estimator (sec. 3.3 of Gopal & Yang [1]_).

The model, the bound, the updates and the forecast: :mod:`._temporal_vi`.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import numbers
from numbers import Integral
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from sklearn.utils._param_validation import Interval, StrOptions

from bayesvmf import _blocks, _guards, _mixture, _seeding, special
from bayesvmf._base import check_fits_in_memory, make_key
from bayesvmf.models.bayesian import _kappa
from bayesvmf.models.bayesian import _shared as _s
from bayesvmf.models.bayesian._temporal_vi import (
    TState,
    TStats,
    _initial_statistics,
    _log_predictive_blocks,
    _log_predictive_jit,
    vi_step,
)

__all__ = ["check_times", "TemporalVMFMixture"]


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
        If ``times`` is not of integer dtype, or an object array of Python ints (floats are
        refused, even integral ones, so that a column of real timestamps is not silently
        truncated).
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
    if arr.dtype == object and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr.ravel()
    ):
        # Python ints in an object array (a pandas object column, scikit-learn's checks)
        arr = arr.astype(np.int64)
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


def _time_index(name: str, y, times):
    """Return the time index given as ``y`` or as ``times`` (None if neither); refuse both."""
    if y is not None and times is not None:
        raise ValueError(f"{name}: the time index was given twice, as y and as times; give one.")
    return times if y is None else y


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
    C0 : float or None, default None
        Concentration of each time step around the previous one: large values keep the
        clusters nearly fixed, small ones let them move. None (the default): learnt by
        empirical Bayes, A_d(C0) matched at every iteration to the agreement of consecutive
        means taken from a structured (forward-backward) view of the chain (module docstring of
        :mod:`._temporal_vi`, *Learning C0*; the fitted value is ``C0_``), whether or not
        ``empirical_bayes`` is set. A float fixes it ([1]_ sets it by hand). A fixed C0 has to
        suit the dimension: consecutive means have expected cosine A_d(C0), 0.0036 for
        C0 = 100 in d = 28,000, so a value that looks large can make them unrelated and the
        forecast of the next time step the uniform density.
    kappa_update : {"sampling", "bounding"}, default "sampling"
    shared_kappa : bool, default True
        One concentration kappa for all clusters (and all times), updated from their pooled
        statistics (sum_k N_k, sum_k sum_t E[mu_tk].r_tk: :func:`._kappa.pooled_update`),
        with the same meaning as :class:`~bayesvmf.models.SparseVMFMixture`'s and the same
        default as :class:`BayesianVMFMixture`'s. False: one kappa_k per cluster, the
        paper's model. Per-cluster kappa is the better density model, a shared kappa the
        better clustering: with one kappa per cluster a broad, low-kappa "background"
        cluster tends to absorb the rows no other cluster fits (issue 18), which a shared
        kappa rules out; hence the default. Empirical Bayes then updates m and keeps s2.
    alpha : float, default 1.0
        Dirichlet parameter of pi (learnt with ``empirical_bayes``, at most n / K:
        :func:`._empirical_bayes.alpha_cap`).
    mu0 : array-like of shape (n_features,) or None
        mu_{-1}; None: the direction of the data mean (learnt with ``empirical_bayes``).
    m : float or None, default None
        Mean of log kappa_k; None: the mean log of the initial clusters' concentrations.
    s2 : float, default 1.0
    empirical_bayes : bool, default True
        Update alpha, mu0, m, s2.
    init : str, default "greedy-spherical-kmeans++"
        "greedy-spherical-kmeans++", "spherical-kmeans++" or "random".
        Seeds of the initial crisp assignment (every row to its closest direction by
        cosine, whatever its time step), as in
        :class:`~bayesvmf.models.BayesianVMFMixture`.
    kmeans_iter : int, default 20
        Hard spherical k-means passes, then split-and-merge moves, refining the seeds before
        VI, as in :class:`~bayesvmf.models.BayesianVMFMixture` (seeds of large data drawn
        from a subsample; 0: the seeds themselves, the
        behaviour of earlier versions with ``init="spherical-kmeans++"``).
    n_init, max_iter, tol, kappa_num_samples, kappa_num_steps, normalize, random_state, verbose
        As in :class:`._hierarchical.HierarchicalVMFMixture`.
    devices : None, int or list of jax devices, default None
        Data-parallel VI (docs/design.md section 6): the rows of X and their time indices are
        split into one equal block per device (``jax.sharding``; padding rows weigh 0 and
        touch no time step); every device computes q(z) of its rows and their statistics
        (N_tk, r_tk, the entropy of q(z)), which are added with ``psum``; the initial seeds
        are drawn as on one device and each device assigns its own rows; the updates of
        q(pi), q(mu_tk), q(kappa_k) and empirical Bayes run replicated. The result equals
        the one-device fit to floating-point accuracy (except the seeds of sparse data of
        more than max(4096, 128 K) rows: one CPU device draws them from a subsample, row
        blocks from all rows; docs/design.md section 6). An int n means the first n of
        ``jax.devices()``; None is the default device. ``fit`` and ``fit_predict`` shard;
        ``predict``, ``score_samples`` etc. run on the default device.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        The cluster of each training row at its time (``fit_predict``'s result).
    lower_bound_, n_iter_, converged_, n_features_in_ : float, int, bool, int
        The bound per row of the kept restart, its iterations, whether it converged, and d.
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
        Priors at the end of the fit (``C0_`` the learnt C0, or the user's).
    C_first_ : float
        Concentration of the first time step's means around ``mu0_``: learnt separately
        when C0 is learnt (:mod:`._temporal_vi`, *Learning C0*), else ``C0_``.
    n_times_ : int
    lower_bounds_ : ndarray
    n_occupied_components_ : int
        Clusters holding at least one row's weight (:mod:`bayesvmf._guards`).
    largest_share_ : float
        The largest fraction of the rows held by one cluster.
    degenerate_components_ : ndarray of int
        The kept fit's degenerate clusters (empty, carried by one row, or a near-uniform
        background holding a large share); a :class:`~bayesvmf.exceptions.DegenerateRunWarning`
        names them. Restarts are chosen by the bound among the non-degenerate ones.
    n_degenerate_restarts_ : int
        Restarts that ended degenerate, kept or not.

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
        "n_components": [Interval(Integral, 1, None, closed="left")],
        **_s.SHARED_CONSTRAINTS,
        "init": [StrOptions(set(_seeding.INIT_METHODS))],
        "kmeans_iter": [Interval(Integral, 0, None, closed="left")],
        "C0": [_s.POSITIVE, None],
        "shared_kappa": ["boolean"],
    }

    #: The C0 update when ``C0`` is None (:data:`._temporal_vi.C0_UPDATES`); "mean-field"
    #: is the bound's own maximiser, kept for comparison (benchmarks/bench_temporal.py).
    _c0_update = "structured"

    #: Agreement A_d(C0) of the C0 a learnt fit starts from: consecutive means nearly equal
    #: (the static mixture), which the data then loosens.
    _c0_start_agreement = 0.99

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "time_mean_directions_",
        "time_mean_concentrations_",
        "log_kappa_mean_",
        "log_kappa_var_",
        "dirichlet_",
        "alpha_",
        "mu0_",
        "C0_",
        "C_first_",
        "m_",
        "s2_",
        "n_times_",
        "lower_bounds_",
    )

    def __init__(
        self,
        n_components: int = 1,
        *,
        C0: float | None = None,
        kappa_update: str = "sampling",
        shared_kappa: bool = True,
        alpha: float = 1.0,
        mu0=None,
        m: float | None = None,
        s2: float = 1.0,
        empirical_bayes: bool = True,
        init: str = "greedy-spherical-kmeans++",
        kmeans_iter: int = 20,
        n_init: int = 1,
        max_iter: int = 100,
        tol: float = 1e-6,
        kappa_num_samples: int = 50,
        kappa_num_steps: int = 20,
        normalize: bool = True,
        random_state=None,
        verbose: int = 0,
        devices=None,
    ):
        self.n_components = n_components
        self.C0 = C0
        self.kappa_update = kappa_update
        self.shared_kappa = shared_kappa
        self.alpha = alpha
        self.mu0 = mu0
        self.m = m
        self.s2 = s2
        self.empirical_bayes = empirical_bayes
        self.init = init
        self.kmeans_iter = kmeans_iter
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.kappa_num_samples = kappa_num_samples
        self.kappa_num_steps = kappa_num_steps
        self.normalize = normalize
        self.random_state = random_state
        self.verbose = verbose
        self.devices = devices

    def _validate_params(self) -> None:
        super()._validate_params()
        _s.check_direction(self.mu0)

    def _n_parameters(self) -> int:
        n_times, k, d = self.time_mean_directions_.shape
        return (k - 1) + n_times * k * (d - 1) + (1 if self.shared_kappa else k)

    # ---- fitting ----------------------------------------------------------------------------

    def fit(self, X, y=None, *, times=None) -> TemporalVMFMixture:
        """Fit the model to rows X observed at time steps ``y`` (or ``times``).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : array-like of int of shape (n_samples,) or None, default None
            The time step of each row, in the place scikit-learn gives ``y`` (so that a
            pipeline, a cross-validation or a grid search splits it with the rows, and
            ``fit(X, times)`` reads as before); the fitted range is 0..max. A step without
            rows is allowed (its means interpolate between the neighbouring steps). None
            (with ``times`` None): every row at time 0, one time step: the model of a plain
            X.
        times : array-like of int of shape (n_samples,) or None, default None
            The same, by name; give ``y`` or ``times``, not both.

        Returns
        -------
        self
            With ``labels_``, the cluster of each training row at its time (scikit-learn's
            :class:`~sklearn.base.ClusterMixin` convention).
        """
        self.fit_predict(X, y, times=times)  # (which sets labels_)
        return self

    def fit_predict(self, X, y=None, *, times=None) -> np.ndarray:
        """Fit and return the most probable cluster of each row (``fit(X, y).predict``).

        The result is kept in ``labels_`` too, as :meth:`fit` keeps it.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y, times : array-like of int of shape (n_samples,) or None, default None
            The time step of each row, as in :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        data, t = self._fit_rows(X, y, times)
        with jax.enable_x64(True):
            if not data.is_sharded:
                weighted = self._weighted(data, t)
                self.labels_ = np.argmax(np.asarray(weighted), axis=1)  # on the host
            else:
                wlp = _log_predictive_blocks(data, data.row_array(t), self._predictive_params())
                self.labels_ = np.argmax(data.host_rows(wlp), axis=1)
            return self.labels_

    def _fit_rows(self, X, y, times):
        """Validate, then fit; return the device data and the checked times."""
        t = _time_index(type(self).__name__, y, times)
        self._validate_params()
        _blocks.resolve_devices(self.devices)  # before the fitted model changes
        Xc = self._check_input(X, reset=True)
        t = self._fit_times_of(t, Xc.shape[0])
        # every step 0..max(times) holds K means of d values, their statistics and their
        # posterior parameters (three such arrays, float64), whether or not rows fall there
        n_times, d = int(t.max()) + 1, Xc.shape[1]
        check_fits_in_memory(
            3 * 8.0 * n_times * int(self.n_components) * d,
            f"times up to {n_times - 1}",  # (given as y or times: the other messages' name)
            f"{n_times:,} time steps of {self.n_components} means in R^{d} (three float64 "
            "arrays: every step from 0 is fitted, rows or none)",
        )
        with jax.enable_x64(True):
            data = _blocks.device_data(Xc, devices=self.devices)
            self._fit_times(data, t, make_key(self.random_state))
        return data, t

    def _fit_times(self, data, times, rng_key) -> None:
        n, d = data.shape
        K = int(self.n_components)
        n_times = int(times.max()) + 1
        t_dev = data.row_array(times)  # sharded with the rows over devices
        mu0 = _s.resolve_mu0(self.mu0, _s.data_mean_direction(data), d)
        static = dict(
            scheme=self.kappa_update,
            empirical_bayes=bool(self.empirical_bayes),
            num_samples=int(self.kappa_num_samples),
            num_steps=int(self.kappa_num_steps),
            c0_update="fixed" if self.C0 is not None else self._c0_update,
            shared_kappa=bool(self.shared_kappa),
        )

        def start(init_key):
            passes = np.int64(self.kmeans_iter) if self.kmeans_iter > 0 else None
            sample = _seeding.host_seeding_sample(init_key, data, K)  # large sparse data
            stats = _initial_statistics(
                init_key,
                data,
                t_dev,
                passes,
                sample,
                n_times=n_times,
                n_components=K,
                init=self.init,
            )
            # placed as vi_step's outputs are (on every device of a mesh): one program
            return data.replicate((self._initial_state(stats, mu0, d), stats))

        def step(key, state, stats):
            return vi_step(key, data, t_dev, state, stats, **static)

        def diagnose(state, stats):
            counts = np.asarray(stats.resp_sum).sum(axis=0)
            square = np.asarray(stats.resp_square)
            # effective rows N_k^2 / sum_i lam_ik^2 (_guards.effective_counts from the sums)
            effective = np.where(square > 0, counts**2 / np.where(square > 0, square, 1.0), 0.0)
            kappa = np.asarray(state.kappa.mean_kappa)
            # each component's directions at every time step, one unit vector of T d values:
            # 1 - cos of two such is the mean over the steps of 1 - cos, so two components are
            # flagged when they agree on average over the steps (at one step they may then
            # differ by up to T times the guard's gap)
            psi = np.asarray(state.psi)
            paths = np.transpose(psi, (1, 0, 2)).reshape(psi.shape[1], -1) / np.sqrt(psi.shape[0])
            return _guards.diagnose(
                counts,
                n_rows=n,
                kappa=kappa,
                kappa_max=_kappa.REPORTED_CAP,
                effective_rows=effective,
                mean_directions=paths,
            )

        advice = (
            "Try fewer components (n_components) or another random_state."
            if self.shared_kappa
            else "Try shared_kappa=True (one concentration for all clusters) or fewer components."
        )
        state, bounds, converged = _s.fit_restarts(
            self, rng_key, n, start, step, "T-vMFmix VI", diagnose, advice
        )
        self._store(state, bounds, converged)

    def _initial_state(self, stats: TStats, mu0, d) -> TState:
        """Every time step starts at its cluster's pooled direction and concentration."""
        # sums over the time steps on the host (eager JAX sums: a program per shape)
        pooled = np.asarray(stats.resultant).sum(axis=0)
        counts = np.asarray(stats.resp_sum).sum(axis=0)
        norms = np.linalg.norm(pooled, axis=1)
        psi_k = np.where(norms[:, None] > 0, pooled / np.maximum(norms, 1e-300)[:, None], mu0)
        if self.shared_kappa:  # the classical shared estimate, A_d(kappa) = sum_k |r_k| / n
            kappa = np.full(
                counts.size, _s.initial_kappa(d, norms.sum() / max(counts.sum(), 1e-300))
            )
        else:
            kappa = _s.initial_kappa(d, norms / np.maximum(counts, 1e-300))
        n_times = stats.resp_sum.shape[0]
        if self.C0 is None:
            C0 = float(special.kappa_from_rbar(d, self._c0_start_agreement))
        else:
            C0 = float(self.C0)
        psi = jnp.asarray(np.broadcast_to(psi_k, (n_times, *psi_k.shape)).copy())
        # replaced by the first q(mu) update; the concentration of each step's data until then
        gamma = jnp.asarray(kappa[None, :] * np.maximum(np.asarray(stats.resp_sum), 1.0) + C0)
        m = float(np.mean(np.log(kappa))) if self.m is None else float(self.m)
        priors = _kappa.Priors(
            alpha=jnp.float64(self.alpha),
            mu0=jnp.asarray(mu0, jnp.float64),
            C0=jnp.float64(C0),
            m=jnp.float64(m),
            s2=jnp.float64(self.s2),
        )
        return TState(
            psi,
            gamma,
            _s.host_mean_direction(d, psi, gamma),
            jnp.asarray(float(self.alpha) + counts),
            _s.kappa_moments_at(d, kappa, self.kappa_update),
            priors,
            None if self.C0 is not None else jnp.float64(C0),
        )

    def _store(self, state: TState, bounds, converged) -> None:
        k = state.kappa
        _s.store_fit(self, state, bounds, converged)
        self.time_mean_directions_ = np.asarray(state.psi)
        self.time_mean_concentrations_ = np.asarray(state.gamma)
        self.C_first_ = float(state.priors.C0 if state.c_first is None else state.c_first)
        self.n_times_ = int(state.psi.shape[0])
        self.mean_directions_ = self.time_mean_directions_[-1]
        self.concentrations_ = np.asarray(k.mean_kappa)
        self.log_kappa_mean_ = np.asarray(k.mean_log_kappa)
        self.log_kappa_var_ = np.asarray(k.var_log_kappa)

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

    @staticmethod
    def _fit_times_of(times, n: int) -> np.ndarray:
        """Return the checked time index of a fit: ``times``, or 0 for every row (None)."""
        return np.zeros(n, np.int64) if times is None else check_times(times, n)

    def _times_of(self, times, n: int) -> np.ndarray:
        """Return the checked time steps of n rows (None: the last fitted time step)."""
        if times is None:
            return np.full(n, self.n_times_ - 1, np.int64)
        return check_times(times, n)

    def _data_times(self, X, times):
        """Return device data and the checked times (None: the last fitted time step)."""
        data = self._device_data(X)
        return data, self._times_of(times, data.shape[0])

    def predict(self, X, times=None) -> np.ndarray:
        """Return the most probable cluster of each row under the posterior predictive.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,) or None, default None
            Any time >= 0; beyond the fitted range the forecast of :meth:`score_samples`.
            None (here and in the other prediction methods): the last fitted time step.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            weighted = self._weighted(*self._data_times(X, times))
        return np.argmax(np.asarray(weighted), axis=1)  # on the host: no eager program

    def predict_proba(self, X, times=None) -> np.ndarray:
        """Return the predictive cluster probabilities of each row (rows sum to one).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,) or None, default None

        Returns
        -------
        ndarray of shape (n_samples, n_components)
        """
        with jax.enable_x64(True):
            wlp = self._weighted(*self._data_times(X, times))
        return _mixture.host_responsibilities(np.asarray(wlp))

    def score_samples(self, X, times=None) -> np.ndarray:
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
        times : array-like of int of shape (n_samples,) or None, default None

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            wlp = self._weighted(*self._data_times(X, times))
        return scipy.special.logsumexp(np.asarray(wlp), axis=1)  # on the host

    def score(self, X, y=None, *, times=None) -> float:
        """Return the mean of :meth:`score_samples`.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y, times : array-like of int of shape (n_samples,) or None, default None
            The time step of each row (give one; as in :meth:`fit`); None: the last fitted
            time step.

        Returns
        -------
        float
        """
        return float(np.mean(self.score_samples(X, _time_index(type(self).__name__, y, times))))

    def bic(self, X, times=None) -> float:
        """Bayesian information criterion of the predictive density at ``times``.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,) or None, default None

        Returns
        -------
        float
        """
        return self._criterion("bic", X, times)

    def aic(self, X, times=None) -> float:
        """Akaike information criterion of the predictive density at ``times``.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        times : array-like of int of shape (n_samples,) or None, default None

        Returns
        -------
        float
        """
        return self._criterion("aic", X, times)

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

    def to_arviz(self, num_draws: int = 200, random_state=0, X=None, times=None):
        """Return draws from q as an ``arviz.InferenceData`` (one chain of ``num_draws``).

        ``posterior`` holds ``mu`` (dims time, component, feature), ``kappa`` and
        ``weights`` (component): mu_tk ~ vMF(psi_tk, gamma_tk), log kappa_k ~
        N(E[log kappa_k], Var[log kappa_k]), pi ~ Dir(rho). With ``shared_kappa`` kappa is
        one concentration: one draw, equal across the clusters.

        Parameters
        ----------
        num_draws : int, default 200
        random_state : None, int, numpy RandomState or Generator, or jax key, default 0
            Seed of the draws from q: by default the same draws at every call, as
            :meth:`BayesianVMFMixture.to_arviz` gives (None: new draws each call).
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features), optional
            Rows whose log-likelihood under each draw, log sum_k pi_k vMF(x_i | mu_{t_i k},
            kappa_k) at each row's time step t_i, makes the ``log_likelihood`` group
            (variable ``x``, dims ``chain``, ``draw``, ``row``), which ArviZ's ``loo`` and
            ``waic`` read. The draws are from q, an approximation of the posterior.
        times : array-like of int of shape (n_samples,), optional
            The time step of each row of X, within the fitted steps 0 .. ``n_times_`` - 1
            (q has no draws of later means); None: the last fitted step.

        Returns
        -------
        arviz.InferenceData
        """
        self._check_is_fitted()
        rows = None
        if X is not None:
            rows = self._check_input(X, reset=False)
            steps = self._times_of(times, rows.shape[0])
            if steps.max() >= self.n_times_:
                raise ValueError(
                    f"times: the log-likelihood of a draw needs the rows' time steps within "
                    f"the fitted steps 0..{self.n_times_ - 1}; got time {int(steps.max())}."
                )
        elif times is not None:
            raise ValueError("times: give X too (the rows whose time steps these are).")
        params = (
            self.time_mean_directions_,
            self.time_mean_concentrations_,
            self.log_kappa_mean_,
            self.log_kappa_var_,
            self.dirichlet_,
        )
        k = self.time_mean_directions_.shape[1]
        idata = _s.q_to_arviz(
            params,
            num_draws,
            random_state,
            dims={
                "mu": ["time", "component", "feature"],
                "kappa": ["component"],
                "weights": ["component"],
            },
            pooled=np.ones(k, bool) if self.shared_kappa else None,
        )
        return idata if rows is None else _s.with_log_likelihood(idata, rows, times=steps)
