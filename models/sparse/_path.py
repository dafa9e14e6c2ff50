"""The beta path of the sparse vMF mixture (Algorithm 3 of [1]_) and model selection.

:class:`SparsePath` holds the points of :meth:`SparseVMFMixture.path`;
:func:`select_sparse_model` applies the methodology of sec. 3.6 of [1]_ (K on the dense
models, then beta on that K's path, by information criteria).

References
----------
.. [1] Rossi and Barbaro, sparse vMF mixture (in full: :mod:`bayesvmf.models.sparse`).
.. [2] Banerjee, Dhillon, Ghosh and Sra, JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from bayesvmf import _arviz, criteria
from bayesvmf._mixture import Status
from bayesvmf.models.sparse._estimator import SparseVMFMixture

__all__ = ["SparsePath", "SparseSelection", "select_sparse_model"]


@dataclasses.dataclass(frozen=True, eq=False)
class SparsePath:
    """A beta path of the sparse vMF mixture (Algorithm 3 of [1]_), one entry per point.

    Attributes
    ----------
    betas : ndarray of shape (P,)
        Starting at 0, strictly increasing.
    sparsity : ndarray of shape (P,)
        Fraction of zero coordinates of the mean directions.
    log_likelihood : ndarray of shape (P,)
        Total unpenalised log-likelihood, eq. (9).
    penalized_log_likelihood : ndarray of shape (P,)
        Eq. (11).
    n_iter : ndarray of shape (P,)
        EM iterations at each point (warm-started after the first).
    converged : ndarray of bool, shape (P,)
    n_parameters : ndarray of shape (P,)
        Eqs. (33)-(34).
    weights : ndarray of shape (P, K)
    mean_directions : ndarray of shape (P, K, d)
    concentrations : ndarray of shape (P, K)
    n_samples, n_features : int
    estimator_params : dict
        Constructor arguments of the estimator that made the path.
    stop_reason : str
        "max_steps", "max_sparsity", "interrupted" or the degenerate outcome that ended it.
    feature_names : ndarray of str or None
        The DataFrame column names the path was fitted on (None otherwise): the
        ``feature_names_in_`` of its models.
    """

    betas: np.ndarray
    sparsity: np.ndarray
    log_likelihood: np.ndarray
    penalized_log_likelihood: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray
    n_parameters: np.ndarray
    weights: np.ndarray
    mean_directions: np.ndarray
    concentrations: np.ndarray
    n_samples: int
    n_features: int
    estimator_params: dict
    stop_reason: str
    feature_names: np.ndarray | None = None

    @classmethod
    def _from_records(cls, records, **kwargs) -> SparsePath:
        def col(name, dtype=None):
            return np.asarray([r[name] for r in records], dtype=dtype)

        return cls(
            betas=col("beta", np.float64),
            sparsity=col("sparsity", np.float64),
            log_likelihood=col("log_likelihood", np.float64),
            penalized_log_likelihood=col("penalized_log_likelihood", np.float64),
            n_iter=col("n_iter", np.int64),
            converged=col("converged", bool),
            n_parameters=col("n_parameters", np.int64),
            weights=col("weights", np.float64),
            mean_directions=col("mean_directions", np.float64),
            concentrations=col("concentrations", np.float64),
            **kwargs,
        )

    def __len__(self) -> int:
        return len(self.betas)

    @property
    def n_components(self) -> int:
        """K."""
        return int(self.weights.shape[1])

    def criterion(self, name: str, gamma: float = 0.5) -> np.ndarray:
        """Return an information criterion at each point (eq. (32), Table 1 of [1]_).

        Parameters
        ----------
        name : {"aic", "bic", "ric", "ricc", "ebic"}
        gamma : float, default 0.5
            EBIC parameter.

        Returns
        -------
        ndarray of shape (P,)
        """
        return np.atleast_1d(
            criteria.information_criterion(
                name,
                self.log_likelihood,
                self.n_parameters,
                self.n_samples,
                self.n_features,
                gamma,
            )
        )

    def to_arviz(self):
        """Return the path as an ``arviz.InferenceData``, one entry per beta (dim ``penalty``).

        ``posterior`` holds ``mu`` (dims ``penalty``, ``component``, ``feature``), ``kappa``
        and ``weights``; ``sample_stats`` holds ``beta``, ``sparsity``, ``total_log_likelihood``
        (eq. (9) of [1]_) and ``lp`` (eq. (11)); one chain and one draw (a MAP path, not
        posterior draws).

        Returns
        -------
        arviz.InferenceData
        """
        stats = {
            "beta": self.betas,
            "sparsity": self.sparsity,
            "total_log_likelihood": self.log_likelihood,
            "lp": self.penalized_log_likelihood,
        }
        return _arviz.inference_data(
            {
                "mu": self.mean_directions[None, None],
                "kappa": self.concentrations[None, None],
                "weights": self.weights[None, None],
            },
            {
                "mu": ["penalty", "component", "feature"],
                "kappa": ["penalty", "component"],
                "weights": ["penalty", "component"],
                **{name: ["penalty"] for name in stats},
            },
            sample_stats={name: value[None, None] for name, value in stats.items()},
        )

    def best_index(self, name: str = "bic") -> int:
        """Index of the point minimising criterion ``name``."""
        return int(np.argmin(self.criterion(name)))

    def best(self, name: str = "bic") -> SparseVMFMixture:
        """Return a fitted :class:`SparseVMFMixture` at the point selected by ``name``."""
        i = self.best_index(name)
        return self.model_at(i)

    def model_at(self, i: int) -> SparseVMFMixture:
        """Return a fitted :class:`SparseVMFMixture` holding the parameters of point ``i``.

        ``i`` counts from 0 (negative values from the end, as in a list); another type or a
        point outside the path is a TypeError or IndexError naming ``i`` and the path's
        length (NumPy's indexing errors before).
        """
        n_points = len(self.betas)
        if isinstance(i, bool | np.bool_) or not isinstance(i, numbers.Integral):
            raise TypeError(f"i must be an int (a point of the path); got {i!r}")
        if not -n_points <= i < n_points:
            raise IndexError(f"i={i} is outside the path's {n_points} points")
        i = int(i) % n_points
        model = SparseVMFMixture(**{**self.estimator_params, "beta": float(self.betas[i])})
        model.weights_ = self.weights[i].copy()
        model.mean_directions_ = self.mean_directions[i].copy()
        model.concentrations_ = self.concentrations[i].copy()
        model.n_iter_ = int(self.n_iter[i])
        model.converged_ = bool(self.converged[i])
        model.log_likelihood_ = float(self.log_likelihood[i])
        model.lower_bound_ = float(self.penalized_log_likelihood[i] / self.n_samples)
        model.sparsity_ = float(self.sparsity[i])
        model.status_ = Status.OK
        model.run_statuses_ = np.zeros(1, np.int64)
        model.run_lower_bounds_ = np.array([model.lower_bound_])
        model.run_n_iter_ = np.array([model.n_iter_])
        model.n_features_in_ = int(self.n_features)
        if self.feature_names is not None:  # (a DataFrame of reordered columns is refused)
            model.feature_names_in_ = self.feature_names.copy()
        return model


@dataclasses.dataclass(frozen=True, eq=False)
class SparseSelection:
    """Outcome of :func:`select_sparse_model` (the methodology of sec. 3.6 of [1]_).

    Attributes
    ----------
    table : dict of str -> ndarray
        One row per path point and K: ``n_components``, ``step``, ``beta``, ``sparsity``,
        ``log_likelihood``, ``n_parameters`` and one column per criterion.
    paths : dict of int -> SparsePath
    n_components : int
        K chosen on the dense models by ``k_criterion``.
    beta : float
        beta chosen on that K's path by ``beta_criterion``.
    model : SparseVMFMixture
        The fitted model at (n_components, beta).
    k_criterion, beta_criterion : str
    """

    table: dict
    paths: dict
    n_components: int
    beta: float
    model: SparseVMFMixture
    k_criterion: str
    beta_criterion: str


def _check_candidates(n_components) -> list[int]:
    """Return the candidate K as ints >= 1, refusing anything else by name.

    (``[2.7]`` was truncated to K = 2; an int, None, strings and NaN failed inside ``int``.)
    """
    message = f"n_components must be an iterable of candidate K (ints >= 1); got {n_components!r}"
    if isinstance(n_components, str | bytes | numbers.Number) or n_components is None:
        raise TypeError(message)
    try:
        values = list(n_components)
    except TypeError:
        raise TypeError(message) from None
    for k in values:
        if isinstance(k, bool | np.bool_) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"n_components must hold ints >= 1; got {k!r} in {values!r}")
    return [int(k) for k in values]


def select_sparse_model(
    X,
    n_components,
    *,
    k_criterion: str = "ebic",
    beta_criterion: str = "bic",
    max_steps: int | None = None,
    min_rel_increase: float = 1e-2,
    **estimator_params,
) -> SparseSelection:
    """Choose K and beta by the methodology of sec. 3.6 of [1]_.

    For each candidate K run the beta path (Algorithm 3); choose K on the dense models
    (beta = 0) with ``k_criterion`` (EBIC or RIC on text, sec. 5.3.4), then beta on that K's
    path with ``beta_criterion`` (BIC or AIC).

    Parameters
    ----------
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
    n_components : iterable of int
        Candidate values of K.
    k_criterion, beta_criterion : {"aic", "bic", "ric", "ricc", "ebic"}
    max_steps, min_rel_increase
        Passed to :meth:`SparseVMFMixture.path`.
    **estimator_params
        Passed to :class:`SparseVMFMixture` (e.g. ``shared_kappa=True``, ``n_init``).

    Returns
    -------
    SparseSelection
    """
    for name in (k_criterion, beta_criterion):
        if str(name).lower() not in criteria.CRITERIA:
            raise ValueError(
                f"unknown criterion {name!r}; expected one of {', '.join(criteria.CRITERIA)}."
            )
    candidates = _check_candidates(n_components)
    if not candidates:
        raise ValueError("n_components must hold at least one candidate K.")
    paths = {}
    rows: dict[str, list] = {
        key: []
        for key in (
            "n_components",
            "step",
            "beta",
            "sparsity",
            "log_likelihood",
            "n_parameters",
            *criteria.CRITERIA,
        )
    }
    for k in candidates:
        path = SparseVMFMixture(k, **estimator_params).path(
            X, max_steps=max_steps, min_rel_increase=min_rel_increase
        )
        paths[k] = path
        rows["n_components"] += [k] * len(path)
        rows["step"] += list(range(len(path)))
        rows["beta"] += list(path.betas)
        rows["sparsity"] += list(path.sparsity)
        rows["log_likelihood"] += list(path.log_likelihood)
        rows["n_parameters"] += list(path.n_parameters)
        for name in criteria.CRITERIA:
            rows[name] += list(path.criterion(name))
    table = {key: np.asarray(value) for key, value in rows.items()}
    dense_scores = [paths[k].criterion(k_criterion)[0] for k in candidates]
    best_k = candidates[int(np.argmin(dense_scores))]
    path = paths[best_k]
    i = path.best_index(beta_criterion)
    return SparseSelection(
        table=table,
        paths=paths,
        n_components=best_k,
        beta=float(path.betas[i]),
        model=path.model_at(i),
        k_criterion=k_criterion,
        beta_criterion=beta_criterion,
    )
