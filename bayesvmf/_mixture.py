"""Shared machinery of the von Mises-Fisher mixture estimators.

Every vMF mixture in bayesvmf (the penalised EM of ``models/sparse/``, the variational and
Gibbs algorithms of ``models/bayesian/`` and ``models/dirichlet/``) touches the data through
the same two products (docs/design.md section 2), the log-likelihood matrix ``X @ mu.T``
(n x K) and the resultants ``resp.T @ X`` (K x d), which live in the data layer
(:mod:`bayesvmf._data`). This module holds the log-space responsibilities, the kappa solve,
the crisp statistics of a start (the seedings are in :mod:`bayesvmf._seeding`), the restart
rule and the scikit-learn-style mixture base class.

Symbols (code name <-> paper):

===================  =====================================================================
``mu``               mean directions mu_k, shape (K, d), unit rows
``kappa``            concentrations kappa_k, shape (K,) (one repeated value when shared)
``log_weights``      log alpha_k, shape (K,)
``resp``             responsibilities tau_ik of eq. (17) of [1]_, shape (n, K)
``resp_sum``         N_k = sum_i tau_ik
``resultant``        r_k = sum_i tau_ik x_i, eq. (23) of [1]_, shape (K, d)
``rho``              mean resultant length fed to the kappa solve, eqs. (21), (26), (27)
===================  =====================================================================

Numerics: the estimators run their steps inside a scoped ``jax.enable_x64(True)`` block
(never a global flag). Log-normalisers, kappa solves and likelihood sums are float64; the two
data products run in the dtype of the stored data values (:mod:`bayesvmf._data`) and are
cast back to float64.

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes", Neurocomputing (journal version of the ESANN 2021 paper).
.. [2] A. Banerjee, I. S. Dhillon, J. Ghosh and S. Sra, "Clustering on the unit hypersphere
   using von Mises-Fisher distributions", JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
import scipy.special
from sklearn.base import ClusterMixin, DensityMixin
from sklearn.utils import _param_validation as pv

from bayesvmf import _blocks, _guards, special
from bayesvmf._base import (
    RANDOM_STATE,
    BaseVMFEstimator,
    check_count,
    check_fits_in_memory,
    feature_names_state,
    make_key,
    restore_feature_names,
)
from bayesvmf._compile_cache import JIT_OPTIONS, TRACE_COUNTS, count_trace
from bayesvmf._program_cache import persistent_jit
from bayesvmf.exceptions import ConvergenceWarning, DegenerateRunWarning, NotFittedError

__all__ = [
    "best_run",
    "make_key",
    "ConvergenceWarning",
    "DegenerateRunWarning",
    "NotFittedError",
    "log_likelihood_matrix",
    "e_step",
    "resultants",
    "RHO_ONE",
    "KAPPA_MAX",
    "solve_kappa",
    "log_normalizer",
    "log_normalizers",
    "Status",
    "describe_status",
    "BaseVMFMixture",
    # re-exported from bayesvmf._compile_cache (every model compiles with them)
    "JIT_OPTIONS",
    "TRACE_COUNTS",
    "count_trace",
]

#: A component whose total responsibility N_k falls below this value is reported as empty
#: ("vanishing", appendix B of [1]_): it holds less than a millionth of one observation.
EMPTY_RESP_SUM = 1e-6


class Status:
    """Bit flags of the status of one EM run (appendix B of [1]_); 0 means healthy."""

    OK = 0
    #: a concentration reached ``kappa_max`` (a component collapsed onto a few points)
    COLLAPSED = 1
    #: a component became empty (N_k -> 0) or uniform (rho_k -> 0, kappa_k -> 0)
    VANISHED = 2
    #: the soft-threshold M-step (eq. (22)) zeroed a whole mean direction (beta too large)
    ZERO_DIRECTION = 4


_STATUS_TEXT = {
    Status.COLLAPSED: "a concentration reached kappa_max (collapsed component; the parameters "
    "of the step before are kept)",
    Status.VANISHED: "a component became empty or uniform (vanishing component)",
    Status.ZERO_DIRECTION: "the l1 penalty zeroed a whole mean direction",
}


def describe_status(status: int) -> str:
    """Return a readable description of a run status (a combination of :class:`Status` bits)."""
    status = int(status)
    if status == Status.OK:
        return "ok"
    return "; ".join(text for bit, text in _STATUS_TEXT.items() if status & bit)


# --------------------------------------------------------------------------------------------
# Log-likelihoods, responsibilities, resultants, kappa
# --------------------------------------------------------------------------------------------


def log_likelihood_matrix(data, mu: jax.Array, kappa: jax.Array, log_c: jax.Array) -> jax.Array:
    """Return log f_k(x_i) = log C_d(kappa_k) + kappa_k mu_k . x_i (eq. (8) of [1]_).

    Parameters
    ----------
    data : DenseData or SparseData
        Data of shape (n_samples, n_features).
    mu : jax.Array of shape (n_components, n_features)
    kappa : jax.Array of shape (n_components,)
    log_c : jax.Array of shape (n_components,)
        log C_d(kappa_k), from :func:`log_normalizer` (computed outside the data programs,
        see :func:`solve_kappa`).

    Returns
    -------
    jax.Array of shape (n_samples, n_components)
    """
    cosines = data.dot(mu.T)
    return cosines * kappa + log_c


def e_step(data, log_weights, mu, kappa, log_c) -> tuple[jax.Array, jax.Array]:
    """Log-space E-step: log responsibilities (eqs. (15), (17) of [1]_) and log p(x_i).

    Parameters
    ----------
    data : DenseData or SparseData
    log_weights : jax.Array of shape (n_components,)
    mu : jax.Array of shape (n_components, n_features)
    kappa, log_c : jax.Array of shape (n_components,)

    Returns
    -------
    log_resp : jax.Array of shape (n_samples, n_components)
    log_norm : jax.Array of shape (n_samples,)
        Per-row log density of the mixture (its sum is eq. (9)).
    """
    wlp = log_likelihood_matrix(data, mu, kappa, log_c) + log_weights
    log_norm = jax.scipy.special.logsumexp(wlp, axis=1)
    return wlp - log_norm[:, None], log_norm


def resultants(data, resp: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Return r_k = sum_i tau_ik x_i (eq. (23) of [1]_) and N_k = sum_i tau_ik.

    Parameters
    ----------
    data : DenseData or SparseData
    resp : jax.Array of shape (n_samples, n_components)

    Returns
    -------
    resultant : jax.Array of shape (n_components, n_features)
    resp_sum : jax.Array of shape (n_components,)
    """
    return data.tdot(resp).T, resp.sum(axis=0)


def host_responsibilities(weighted_log_prob: np.ndarray) -> np.ndarray:
    """Return exp(log alpha_k f_k(x_i) - log p(x_i)) of host log-densities (rows sum to one).

    The predictions' last steps run in NumPy: an eager JAX operation is a program of its
    own, compiled for every new number of rows (and traced again in every new process).
    """
    wlp = np.asarray(weighted_log_prob, np.float64)
    # a row of non-finite log-densities gives NaN, as the JAX version did, without NumPy's
    # warning
    with np.errstate(invalid="ignore"):
        return np.exp(wlp - scipy.special.logsumexp(wlp, axis=1, keepdims=True))


# The special functions run inside the jitted EM steps of the estimators, with the dimension
# d a static Python int (it comes from the data shape), so ``bayesvmf.special`` picks its
# branch (Debye expansion or small-order series) at trace time and each step compiles once
# per data shape.

#: rho at or above this value is treated as rho = 1 (all points on one direction): collapsed.
RHO_ONE = 1.0 - 1e-15

#: Default cap of the concentrations (``kappa_max`` of the estimators, the empirical-Bayes
#: C0): appendix B of [1]_ caps kappa so that a component collapsing onto a few points, whose
#: maximum-likelihood kappa grows without bound, stays finite and is reported as collapsed.
KAPPA_MAX = 1e6


def solve_kappa(n_features: int, rho, kappa_max) -> tuple[jax.Array, jax.Array]:
    """Solve A_d(kappa) = rho (eqs. (21), (27) of [1]_) at full precision, capped at kappa_max.

    Uses :func:`bayesvmf.special.kappa_from_rbar` (Banerjee et al. start, eq. (5), then Newton
    steps), not only the approximation of eq. (25). Following appendix B of [1]_, kappa is
    capped at ``kappa_max``; ``rho >= 1`` (all points on one direction) gives the cap. Pure
    and traceable: call it inside a jitted step with ``n_features`` a Python int, so that the
    special-function branch is chosen at trace time.

    Parameters
    ----------
    n_features : int
        Dimension d (static).
    rho : array
        Mean resultant lengths in [0, 1], any shape.
    kappa_max : float or array
        The cap.

    Returns
    -------
    kappa : jax.Array
        Same shape as ``rho``; 0 where ``rho <= 0``.
    collapsed : jax.Array of bool
        Where the cap was reached.
    """
    rho = jnp.asarray(rho, jnp.float64)
    raw = special.kappa_from_rbar(int(n_features), jnp.clip(rho, 0.0, RHO_ONE))
    collapsed = (rho >= RHO_ONE) | ~(raw < kappa_max)
    kappa = jnp.where(collapsed, kappa_max, raw)
    positive = rho > 0
    return jnp.where(positive, kappa, 0.0), collapsed & positive


def log_normalizer(n_features: int, kappa) -> jax.Array:
    """Return log C_d(kappa) (:func:`bayesvmf.special.log_vmf_normalizer`) for any shape.

    Pure and traceable; ``n_features`` is a Python int (the branch is chosen at trace time).
    """
    return special.log_vmf_normalizer(int(n_features), jnp.asarray(kappa, jnp.float64))


def log_normalizers(n_features: int, *kappas) -> tuple[jax.Array, ...]:
    """Return :func:`log_normalizer` of each of ``kappas`` (arrays of any shapes), in one call.

    The special function inlines a few hundred lines of HLO at every place a program calls
    it, and XLA compiles each: one call on the concatenated values compiles once (a
    posterior predictive density with three calls compiled in 0.71-1.05 s, with one in
    0.35-0.42 s: d = 5, K = 3, 100-150 rows). The values are those of separate calls.
    """
    arrays = [jnp.asarray(k, jnp.float64) for k in kappas]
    flat = log_normalizer(n_features, jnp.concatenate([a.ravel() for a in arrays]))
    out, start = [], 0
    for a in arrays:
        out.append(flat[start : start + a.size].reshape(a.shape))
        start += a.size
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Restarts
# --------------------------------------------------------------------------------------------


def best_run(bounds, margin: float) -> int:
    """Return the restart to keep: the first whose bound is within ``margin`` of the best.

    Restarts that reach one optimum (often with permuted labels) end with bounds that differ
    by convergence noise and rounding; taking the first of them rather than the largest
    keeps the choice stable when the summation order changes (data-parallel fits, another
    BLAS). ``margin`` is the fit's own convergence threshold, in the units of ``bounds``;
    non-finite bounds are never kept unless all are.
    """
    bounds = np.asarray(bounds, dtype=np.float64)
    finite = np.where(np.isfinite(bounds), bounds, -np.inf)
    top = finite.max()
    if not np.isfinite(top):
        return 0
    return int(np.flatnonzero(finite >= top - margin)[0])


def warn_degenerate(
    statuses: np.ndarray, what: str, stacklevel: int = 3, *, shared_kappa: bool = False
) -> None:
    """Warn once about the degenerate runs in ``statuses`` (one status per run).

    The advice leaves out ``shared_kappa=True`` when it is set already, and names a larger
    ``kappa_max`` when a concentration reached it (data that concentrated).
    """
    statuses = np.asarray(statuses)
    bad = statuses != Status.OK
    if not bad.any():
        return
    details = []
    for bit, text in _STATUS_TEXT.items():
        count = int(np.sum((statuses & bit) != 0))
        if count:
            details.append(f"{count} with {text}")
    if bad.all():
        tries = ["a smaller beta", "fewer components", "more restarts (n_init)"]
        if not shared_kappa:
            tries.insert(0, "shared_kappa=True")
        if np.any(statuses & Status.COLLAPSED):
            tries.append("a larger kappa_max if the data are that concentrated")
        msg = (
            f"{what}: all {len(statuses)} runs degenerated ({'; '.join(details)}); the best "
            f"of them is kept but is not a proper fit. Try {', '.join(tries[:-1])} or "
            f"{tries[-1]}."
        )
    else:
        msg = (
            f"{what}: {int(bad.sum())} of {len(statuses)} runs degenerated and were "
            f"discarded ({'; '.join(details)})."
        )
    warnings.warn(msg, DegenerateRunWarning, stacklevel=stacklevel)


# --------------------------------------------------------------------------------------------
# The mixture estimator base
# --------------------------------------------------------------------------------------------


@persistent_jit(compiler_options=JIT_OPTIONS)
def _weighted_log_prob(data, weights, mu, kappa):
    """Return log alpha_k + log f_k(x_i) (eq. (8) of [1]_); d is static (data shape)."""
    count_trace("weighted_log_prob")
    log_c = log_normalizer(data.shape[1], kappa)
    # the log inside the program: outside it, it would be a program of its own
    return log_likelihood_matrix(data, mu, kappa, log_c) + jnp.log(weights)


def _pad_rows(Xc, rows: int):
    """Return checked data with zero rows appended up to ``rows`` (Xc itself when it has them).

    A CSR matrix shares its data and indices (only its row pointers grow); a dense array is
    copied once.
    """
    n = Xc.shape[0]
    if rows <= n:
        return Xc
    if sp.issparse(Xc):
        indptr = np.concatenate([Xc.indptr, np.full(rows - n, Xc.indptr[-1], Xc.indptr.dtype)])
        return sp.csr_matrix((Xc.data, Xc.indices, indptr), shape=(rows, Xc.shape[1]))
    out = np.zeros((rows, Xc.shape[1]), dtype=Xc.dtype)
    out[:n] = Xc
    return out


#: ``n_components``, ``n_init``: an int >= 1
_POSITIVE_INT = [pv.Interval(numbers.Integral, 1, None, closed="left")]


class BaseVMFMixture(DensityMixin, ClusterMixin, BaseVMFEstimator):
    """Base class of the vMF mixture estimators (scikit-learn mixture conventions).

    A :class:`~bayesvmf._base.BaseVMFEstimator` (parameters, tags, input, seeds) with
    scikit-learn's :class:`~sklearn.base.DensityMixin` and
    :class:`~sklearn.base.ClusterMixin`: a density estimator (its tags say so) whose
    ``fit_predict`` gives clusters. Subclasses store their keyword arguments unchanged in
    ``__init__``, extend ``_parameter_constraints`` and implement ``_fit(data, rng_key)``
    (which sets the fitted attributes ``weights_``, ``mean_directions_``,
    ``concentrations_``, ``n_iter_``, ``converged_``, ``lower_bound_``) and
    ``_n_parameters()``. The base class gives ``fit``, ``fit_predict``, ``predict``,
    ``predict_proba``, ``score_samples``, ``score``, ``sample``, ``bic``, ``aic`` and
    persistence hooks for :func:`bayesvmf.save`. Models whose predictive density is not a
    plain vMF mixture (Bayesian posteriors) override ``_estimate_weighted_log_prob``.
    """

    _parameter_constraints: dict[str, Any] = {
        "n_components": _POSITIVE_INT,
        "n_init": _POSITIVE_INT,
        "max_iter": [pv.Interval(numbers.Integral, 0, None, closed="left")],
        "tol": [pv.Interval(numbers.Real, 0.0, None, closed="left")],
        "normalize": ["boolean"],
        "random_state": RANDOM_STATE,
        "verbose": ["verbose"],
    }

    _fitted_check = ("mean_directions_",)

    #: names of the fitted attributes that :func:`bayesvmf.save` stores (those it finds; the
    #: degeneracy diagnosis is what every mixture sets through :func:`bayesvmf._guards.report`;
    #: ``feature_names_in_`` goes to the JSON document, :func:`bayesvmf._base.feature_names_state`)
    _fitted_attributes: tuple[str, ...] = (
        "weights_",
        "mean_directions_",
        "concentrations_",
        "n_iter_",
        "converged_",
        "lower_bound_",
        "n_features_in_",
        "feature_names_in_",
        "labels_",
        *_guards.FITTED_ATTRIBUTES,
    )

    # ---- input ------------------------------------------------------------------------------

    def _check_input(self, X, *, reset: bool):
        """Validate X (:meth:`~bayesvmf._base.BaseVMFEstimator._validate_directions`).

        In ``fit`` (``reset``) X needs ``n_components`` rows. Normalised float64 data (a
        canonical CSR corpus, a C-ordered array) is used in place, read-only (``copy=False``).
        """
        return self._validate_directions(
            X,
            reset=reset,
            min_rows=self.n_components if reset else 1,
            min_rows_name="n_components" if reset else None,
            copy=False,
        )

    def _product_dtype(self):
        return jnp.float32 if getattr(self, "dtype", "float64") == "mixed" else jnp.float64

    # ---- fitting template -------------------------------------------------------------------

    def _fit(self, data, rng_key) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _n_parameters(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def fit(self, X, y=None) -> BaseVMFMixture:
        """Estimate the model parameters.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Directional data (rows rescaled to unit norm when ``normalize=True``).
        y : ignored

        Returns
        -------
        self
            With ``labels_``, the component of each training row (scikit-learn's
            :class:`~sklearn.base.ClusterMixin` convention), besides the fitted parameters.
        """
        self.fit_predict(X)  # (which sets labels_)
        return self

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit the model and return the cluster of each row (eq. (35) of [1]_).

        Ends with one E-step at the final parameters, so the result equals
        ``fit(X).predict(X)``; it is kept in ``labels_`` too, as :meth:`fit` keeps it.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        self._validate_params()
        Xc = self._check_input(X, reset=True)
        with jax.enable_x64(True):
            data = self._training_data(Xc)
            # `data` serves the whole fit: drop this name now, so that a copy made only for
            # the device goes before the fit (the "scipy" kernel's one host block may be Xc
            # itself, kept by `data`)
            del Xc
            self._fit(data, self._make_key())
            # labels_ of this fit, as fit sets them (an earlier fit's were left behind)
            self.labels_ = self._training_labels(data)
            return self.labels_

    def _training_data(self, Xc):
        """Return the checked training data on the device (subclasses shard it)."""
        return _blocks.device_data(Xc, self._product_dtype())

    def _training_labels(self, data) -> np.ndarray:
        """Return the component of each training row at the fitted parameters."""
        weighted_log_prob = self._estimate_weighted_log_prob(data)
        return np.argmax(np.asarray(weighted_log_prob), axis=1)

    # ---- prediction -------------------------------------------------------------------------

    def _estimate_weighted_log_prob(self, data) -> jax.Array:
        """Return log alpha_k + log f_k(x_i) of shape (n_samples, n_components)."""
        with jax.enable_x64(True):
            return _weighted_log_prob(
                data,
                np.asarray(self.weights_, np.float64),
                np.asarray(self.mean_directions_, np.float64),
                np.asarray(self.concentrations_, np.float64),
            )

    def _device_data(self, X):
        self._check_is_fitted()
        Xc = self._check_input(X, reset=False)
        return _blocks.device_data(Xc, self._product_dtype())

    def _prediction_log_prob(self, X) -> tuple[jax.Array, int]:
        """Return log alpha_k + log f_k(x_i) of X's rows, maybe padded, and the row count n.

        For the base's own density (a model that does not override
        :meth:`_estimate_weighted_log_prob`), the rows are padded with zero rows to
        :func:`bayesvmf._blocks.bucket_size` (at most 41% more, two sizes per power of
        two): every program of a prediction then sees one of a few shapes, and predicting
        on batches of varying size compiles a few programs instead of some per size (24
        sizes from 100 to 399 rows: 648 compilations before). A zero row adds a finite row
        (log alpha_k + log C_d(kappa_k)) that the caller drops with ``[:n]``. Other models
        get X as it is.
        """
        self._check_is_fitted()
        Xc = self._check_input(X, reset=False)
        n = Xc.shape[0]
        if type(self)._estimate_weighted_log_prob is BaseVMFMixture._estimate_weighted_log_prob:
            Xc = _pad_rows(Xc, _blocks.bucket_size(n))
        return self._estimate_weighted_log_prob(_blocks.device_data(Xc, self._product_dtype())), n

    def predict(self, X) -> np.ndarray:
        """Return the most probable component of each row (eq. (35) of [1]_).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            wlp, n = self._prediction_log_prob(X)
        # on the host: an eager JAX operation is a program compiled per row count
        return np.argmax(np.asarray(wlp)[:n], axis=1)

    def predict_proba(self, X) -> np.ndarray:
        """Return the responsibilities tau_ik (eq. (17) of [1]_), exponentiated at the end.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_components)
            Rows sum to one.
        """
        with jax.enable_x64(True):
            wlp, n = self._prediction_log_prob(X)
        return host_responsibilities(np.asarray(wlp)[:n])

    def score_samples(self, X) -> np.ndarray:
        """Return log p(x_i) of each row under the fitted mixture (a logsumexp, eq. (7)).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        with jax.enable_x64(True):
            wlp, n = self._prediction_log_prob(X)
        return scipy.special.logsumexp(np.asarray(wlp)[:n], axis=1)

    def score(self, X, y=None) -> float:
        """Return the mean per-row log-likelihood of X.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        float
        """
        return float(np.mean(self.score_samples(X)))

    def bic(self, X) -> float:
        """Bayesian information criterion on X (eq. (32), Table 1 of [1]_); lower is better.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        float
        """
        return self._criterion("bic", X)

    def aic(self, X) -> float:
        """Akaike information criterion on X (eq. (32), Table 1 of [1]_); lower is better.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        float
        """
        return self._criterion("aic", X)

    def _criterion(self, kind: str, X, *score_args) -> float:
        """Return the information criterion ``kind`` ("bic" or "aic") of the model on X.

        ``score_args`` go to ``score_samples`` after X (the time steps of the temporal model).
        """
        from bayesvmf import criteria

        ll = self.score_samples(X, *score_args)
        return criteria.information_criterion(
            kind, float(np.sum(ll)), self._n_parameters(), ll.shape[0], int(self.n_features_in_)
        )

    def sample(self, n_samples: int = 1, random_state=None) -> tuple[np.ndarray, np.ndarray]:
        """Draw samples from the fitted mixture.

        Parameters
        ----------
        n_samples : int, default 1
        random_state : None, int, numpy RandomState or Generator, or jax key, default None
            Seed of the draw; None uses the estimator's ``random_state`` (so, seeded with an
            int, ``sample(n)`` gives the same draws every time; with None, fresh ones).

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            Unit vectors.
        labels : ndarray of shape (n_samples,)
            The component of each draw.

        Raises
        ------
        ValueError
            If ``n_samples`` is not an int >= 1, or the draws alone would take more than
            this machine's memory (draw in batches instead).
        """
        self._check_is_fitted()
        n_samples = check_count(n_samples, "n_samples")
        # the draws, their means and their labels: 2 d + 1 float64 values per draw
        d = int(self.n_features_in_)
        check_fits_in_memory(
            8.0 * n_samples * (2 * d + 1),
            f"n_samples={n_samples}",
            f"{n_samples:,} draws in R^{d}, their means and labels (float64)",
        )
        from bayesvmf.distribution import VonMisesFisher

        with jax.enable_x64(True):
            key_labels, key_draw = jax.random.split(self._make_key(random_state))
            weights = np.asarray(self.weights_, np.float64)
            log_w = jnp.log(jnp.asarray(weights / weights.sum(), jnp.float64))
            labels = jax.random.categorical(key_labels, log_w, shape=(n_samples,))
            # one batched draw (batch shape (n_samples,)), so the sampler compiles once per
            # n_samples instead of once per component count
            dist = VonMisesFisher(
                jnp.asarray(self.mean_directions_, jnp.float64)[labels],
                jnp.asarray(self.concentrations_, jnp.float64)[labels],
            )
            return np.asarray(dist.sample(key_draw)), np.asarray(labels)

    # ---- persistence hooks (bayesvmf.save / bayesvmf.load) ----------------------------------

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return (arrays, json-able scalars) of the fitted attributes, for :func:`save`."""
        arrays, scalars = {}, feature_names_state(self)
        for name in self._fitted_attributes:
            if not hasattr(self, name) or name in scalars:
                continue
            value = getattr(self, name)
            if isinstance(value, np.ndarray | jax.Array):
                arrays[name] = np.asarray(value)
            elif isinstance(value, np.generic):
                scalars[name] = value.item()
            else:
                scalars[name] = value
        if hasattr(self, "_stream_state"):  # (a streaming estimator: partial_fit goes on)
            stream_arrays, stream_scalars = self._stream_state()
            arrays.update(stream_arrays)
            scalars.update(stream_scalars)
        return arrays, scalars

    def _set_state(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Restore the fitted attributes written by :meth:`_get_state`."""
        arrays, scalars = dict(arrays), dict(scalars)
        if hasattr(self, "_restore_stream"):
            self._restore_stream(arrays, scalars)
        for name, value in {**scalars, **arrays}.items():
            if name not in self._fitted_attributes:
                raise ValueError(f"unexpected fitted attribute {name!r}")
            setattr(self, name, value)
        restore_feature_names(self, scalars)
