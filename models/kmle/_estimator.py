r"""The k-MLE estimator :class:`KMLEMixture` (Algorithms 2-3 of [1]_).

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
"""

from __future__ import annotations

import numbers
import warnings
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.special
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

from bayesvmf import _guards, _mixture
from bayesvmf._base import (
    RANDOM_STATE,
    BaseVMFEstimator,
    feature_names_state,
    make_key,
    restore_feature_names,
    seed_from,
)
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models.kmle._kernel import (
    _MIN_ROWS,
    VMF_DENSE,
    VMF_SPARSE,
    WISHART,
    VMFParams,
    _bucket,
    _complete_log_likelihood,
    _hartigan_sweep,
    _mixture_log_lik,
    _pad_data,
    _set_weights,
    _start,
    _visit_orders,
)
from bayesvmf.models.kmle._seeding import (
    _point_divergence,
    _seeding_geometry,
    dp_kmle_gain,
    dp_kmle_pp,
)
from bayesvmf.models.kmle._wishart import WishartParams, _check_spd_matrices


def _ell_from_csr(X):
    """Pad a CSR matrix to ELL form: (cols, vals) of shape (N, max row nnz)."""
    nnz = np.diff(X.indptr)
    width = max(int(nnz.max()), 1)
    cols = np.zeros((X.shape[0], width), dtype=np.int32)
    vals = np.zeros((X.shape[0], width), dtype=np.float64)
    pos = np.arange(X.nnz) - np.repeat(X.indptr[:-1], nnz)
    rows = np.repeat(np.arange(X.shape[0]), nnz)
    cols[rows, pos] = X.indices
    vals[rows, pos] = X.data
    return cols, vals


# ---------------------------------------------------------------------------------------------


class KMLEMixture(BaseVMFEstimator):
    r"""Wishart or vMF mixture fitted by k-MLE with Hartigan moves (Algorithms 2-3 of [1]_).

    Maximises the complete log-likelihood :math:`\sum_i \log w_{z_i} + \log
    p_F(X_i; \theta_{z_i})` over hard partitions, seeded by DP-k-MLE++ (``n_components``
    None: the number of clusters is chosen by ``lam``) or by k-MLE++ (``n_components``
    given). See the module docstring for the algorithmic choices.

    Parameters
    ----------
    family : {"wishart", "vmf"}, default="wishart"
        Wishart: ``X`` of shape (n_samples, d, d), SPD. vMF: ``X`` of shape
        (n_samples, n_features), dense or scipy.sparse, rows rescaled to unit norm when
        ``normalize`` is True.
    n_components : int or None, default=None
        Number of clusters; None lets DP-k-MLE++ choose it with ``lam``.
    lam : float, default=0.25
        DP-k-MLE++ threshold :math:`\lambda \in (0, 1]`; larger values give fewer clusters,
        1 gives one cluster. Its meaning depends on ``dp_rule``. Ignored when
        ``n_components`` is given.
    dp_rule : {"gain", "share"}, default="gain"
        How DP-k-MLE++ decides to add a cluster (``n_components=None`` only).

        * ``"gain"`` (default, :func:`dp_kmle_gain`): add the best of a few D-sampled
          candidates while it removes more than a fraction :math:`\lambda` of the current
          seeding loss, with all clusters refined by Bregman k-means (fitted centroids)
          before and after. Measured (``benchmarks/results/kmle.md``, 40 seeds each):
          with :math:`\lambda \in [0.15, 0.4]` it finds K = 3 for every seed on three
          synthetic sets of 3 x 3 Wishart matrices (equal sizes with overlapping scales,
          equal sizes far apart, sizes 150/40/10), and K = 1 for every seed on two
          one-component samples of 300 matrices. 0.25 sits in the middle of that range.
          **What the threshold assumes:** splitting one homogeneous cluster in two removes
          roughly :math:`2/(\pi p)` of its loss for :math:`p` free coordinates
          (:math:`p = d(d+1)/2` for Wishart, :math:`d - 1` for vMF), more for small
          samples: in the benchmark at most 0.15 for :math:`d = 3` and 60 matrices, but
          up to 0.27 for :math:`d = 2` and 0.65 for :math:`d = 1`. There (and for vMF
          on low-dimensional spheres) the default can invent clusters; in the benchmark it
          did on every :math:`d = 1` sample and on one of four :math:`d = 2` samples.
          Raise ``lam`` above the single-cluster split gain, or pass ``n_components``.
          Clusters that overlap so much that adding one removes at most 25 % of the loss
          are merged by the default; lower ``lam`` to find them.
        * ``"share"``: Algorithm 3 as printed in [1]_ (:func:`dp_kmle_pp`): add a seed while
          some point carries more than a share :math:`\lambda` of the loss (6) to the
          nearest *seed point*; about :math:`1/N` is the sensible minimum (sec. 3.3).
          **This rule rarely recovers K.** A cluster of :math:`m` points that has no seed
          yet spreads its loss over those points, so each carries at most about
          :math:`1/m` of the total (:math:`K/N` for equal sizes). Once every cluster has a
          seed, the largest share is still about 3-5 times :math:`1/N`, because the
          divergence to a single seed point is heavy-tailed. The two ranges overlap and no
          :math:`\lambda` separates them: on the same three sets, K = 3 is found for at
          most 25 % of the seeds over :math:`\lambda N \in \{1, 2, 3, 5, 10, 15\}`. It is
          kept for reproducing the paper.
    max_iter : int, default=100
        Maximum number of weight updates (outer iterations of Algorithm 2).
    tol : float, default=1e-9
        Smallest gain in a point's log-likelihood term that counts as an improving
        transfer (guards against cycling on numerical ties).
    max_dof : float, default=1e6
        Cap on the Wishart degrees of freedom (reached by clusters of identical matrices,
        e.g. singletons, whose likelihood is otherwise unbounded).
    min_dof : float or None, default=None
        Lower bound on every Wishart component's degrees of freedom; None means
        :math:`d + 1`; a value must exceed :math:`d` (and stay below ``max_dof``). **Why:**
        the Cauchy-Schwarz integral :math:`\int p_j p'_{j'}` is finite only if
        :math:`n_j + n'_{j'} > 2d` (module docstring), and :math:`\int m^2` needs it for
        :math:`j = j'`, so :math:`n_j > d` for every component is exactly what makes
        :func:`cauchy_schwarz_divergence` finite between any two fitted mixtures of one
        dimension. The unconstrained MLE can fall below it (5.98 for :math:`d = 6` on
        windows of BasicMotions). :math:`d + 1` keeps a margin: pairs then sum to at least
        :math:`2d + 2`, one unit from the pole of :math:`\Gamma_d`, and every component has
        :math:`\theta_n \ge 0` (a bounded density with a mode :math:`(n - d - 1)S`). The
        constrained estimate is the exact maximiser over :math:`n \ge` ``min_dof``, so
        k-MLE stays monotone.
    kappa_max : float, default=1e6
        Cap on the vMF concentration (same reason).
    normalize : bool, default=True
        vMF only: rescale rows to unit norm (otherwise they must be unit norm).
    random_state : int, RandomState, Generator, JAX key or None, default=None
        Seed of the seeding and of the pass permutations; the same int gives identical
        results (a NumPy ``RandomState`` / ``Generator`` gives one seed drawn from it).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Final partition.
    weights_ : ndarray of shape (n_components_,)
    n_components_ : int
    seeds_ : ndarray of int
        Indices of the observations chosen as seeds (the first one uniform; with
        ``dp_rule="gain"`` the others are the candidates that opened clusters 2, ..., K, and
        the first partition is their Bregman k-means refinement).
    dof_, scale_ : ndarrays of shape (n_components_,) and (n_components_, d, d)
        Wishart parameters :math:`n_j, S_j` (Wishart family).
    mean_directions_, concentrations_ : ndarrays of shape (n_components_, d) and (n_components_,)
        vMF parameters (vMF family).
    lower_bound_ : float
        Final mean complete log-likelihood.
    lower_bounds_ : list of float
        Mean complete log-likelihood after the first assignment and after each outer
        iteration (non-decreasing).
    n_iter_ : int
    converged_ : bool
    n_transfers_ : int
        Total number of Hartigan transfers.
    n_occupied_components_, largest_share_, degenerate_components_, n_degenerate_restarts_
        The degeneracy diagnosis of the partition (:mod:`bayesvmf._guards`): clusters with
        at least one row, the largest cluster's share, the clusters carried by a single
        matrix (their degrees of freedom or concentration sit at the cap) or, for vMF, at
        ``kappa_max`` or a near-uniform background; a :class:`DegenerateRunWarning` names
        them. k-MLE runs once, so ``n_degenerate_restarts_`` is 0.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import wishart
    >>> X = np.concatenate([wishart(20, np.eye(2)).rvs(30, random_state=0),
    ...                     wishart(20, 9 * np.eye(2)).rvs(30, random_state=1)])
    >>> model = KMLEMixture(n_components=2, random_state=0).fit(X)
    >>> sorted(np.bincount(model.labels_).tolist())
    [30, 30]
    """

    _parameter_constraints = {
        "family": [StrOptions({"wishart", "vmf"})],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "lam": [Interval(numbers.Real, 0, 1, closed="right")],
        "dp_rule": [StrOptions({"gain", "share"})],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, np.inf, closed="neither")],
        "max_dof": [Interval(numbers.Real, 0, np.inf, closed="neither")],
        "min_dof": [Interval(numbers.Real, 0, np.inf, closed="neither"), None],
        "kappa_max": [Interval(numbers.Real, 0, np.inf, closed="neither")],
        "normalize": ["boolean"],
        "random_state": RANDOM_STATE,
    }
    _fitted_check = ("labels_",)

    def __sklearn_tags__(self):
        """Return the tags: vMF takes 2-D (or sparse) rows, Wishart (n, d, d) SPD matrices."""
        tags = super().__sklearn_tags__()
        if self.family == "wishart":
            tags.input_tags.two_d_array = False
            tags.input_tags.three_d_array = True
            tags.input_tags.sparse = False
        return tags

    def __init__(
        self,
        *,
        family: str = "wishart",
        n_components: int | None = None,
        lam: float = 0.25,
        dp_rule: str = "gain",
        max_iter: int = 100,
        tol: float = 1e-9,
        max_dof: float = 1e6,
        min_dof: float | None = None,
        kappa_max: float = _mixture.KAPPA_MAX,
        normalize: bool = True,
        random_state: int | None = None,
    ) -> None:
        self.family = family
        self.n_components = n_components
        self.lam = lam
        self.dp_rule = dp_rule
        self.max_iter = max_iter
        self.tol = tol
        self.max_dof = max_dof
        self.min_dof = min_dof
        self.kappa_max = kappa_max
        self.normalize = normalize
        self.random_state = random_state

    # -- validation ---------------------------------------------------------------------------

    def _min_dof(self, d):
        """Return the lower bound on the degrees of freedom: ``min_dof``, or d + 1 if None."""
        return d + 1.0 if self.min_dof is None else float(self.min_dof)

    def _prepare(self, X, *, fitting):
        """Check X; return (host data for seeding, device tuple, family, dimension)."""
        if self.family == "wishart":
            X, log_det = _check_spd_matrices(X)
            d = X.shape[1]
            if fitting and self.min_dof is not None and self.min_dof <= d:
                raise ValueError(
                    f"min_dof must exceed d = {d} (otherwise the Cauchy-Schwarz divergence "
                    f"between fitted mixtures can diverge); got min_dof={self.min_dof!r}"
                )
            if fitting and self._min_dof(d) >= self.max_dof:
                raise ValueError(
                    f"max_dof must exceed min_dof = {self._min_dof(d)!r}; "
                    f"got max_dof={self.max_dof!r}"
                )
            if not fitting and d != self.n_features_in_:
                k = self.n_features_in_
                raise ValueError(f"X holds {d} x {d} matrices; the model was fitted on {k} x {k}")
            # n_features_in_ = d: scikit-learn's count of X.shape[1]
            validate_data(self, X, reset=fitting, skip_check_array=True)
            stats = np.concatenate([log_det[:, None], X.reshape(len(X), -1)], axis=1)
            return stats, (jnp.asarray(stats),), WISHART, d
        X = self._validate_directions(X, reset=fitting, normalize=self.normalize)
        d = X.shape[1]
        if scipy.sparse.issparse(X):
            cols, vals = _ell_from_csr(X)
            data = (jnp.asarray(cols), jnp.asarray(vals), jnp.zeros((d,)))
            return X, data, VMF_SPARSE, d
        return X, (jnp.asarray(X),), VMF_DENSE, d

    # -- fitting ------------------------------------------------------------------------------

    def fit(self, X, y=None):
        """Fit the mixture by DP-k-MLE++ seeding and k-MLE with Hartigan moves.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) (Wishart) or (n_samples, n_features) (vMF)
            The sample; never modified.
        y : ignored

        Returns
        -------
        self
        """
        del y
        self._validate_params()
        with jax.enable_x64(True):
            host, data, family, d = self._prepare(X, fitting=True)
            n = host.shape[0]
            if self.n_components is not None and n < self.n_components:
                raise ValueError(f"X has {n} samples, fewer than n_components={self.n_components}")
            seed = seed_from(self.random_state)  # an int seed gives the same fit as ever
            if isinstance(seed, jax.Array):  # a JAX key: its key data seeds NumPy
                seed = np.asarray(jax.random.key_data(make_key(seed)))
            rng = np.random.default_rng(seed)
            geometry = _seeding_geometry(family, host)
            if self.n_components is None and self.dp_rule == "gain":
                seeds, labels = dp_kmle_gain(geometry, n, rng, lam=self.lam)
            else:
                divergence = partial(_point_divergence, geometry)
                seeds, labels = dp_kmle_pp(
                    divergence, n, rng, lam=self.lam, n_components=self.n_components
                )
            k = len(seeds)
            if family is WISHART:
                cap = jnp.asarray([self._min_dof(d), float(self.max_dof)])
            else:
                cap = jnp.asarray(float(self.kappa_max))
            tol = jnp.asarray(float(self.tol))
            max_transfers = jnp.asarray(np.iinfo(np.int32).max, jnp.int32)
            # rows and components are padded to bucketed sizes (see _bucket) so that fits
            # of nearby sizes reuse one compiled program; padding never changes the result.
            data, state = _start(family, data, labels, k, cap)
            n_pad = state.labels.shape[0]
            bounds = [float(_complete_log_likelihood(state))]
            converged, n_transfers, it = k == 1, 0, 0  # one cluster: no move is possible
            for it in range(1, (self.max_iter if k > 1 else 0) + 1):
                moved, done = 0, False
                while not done:  # lines 8-17: passes until one makes no transfer
                    perms = _visit_orders(rng, n, n_pad)
                    state, info = _hartigan_sweep(
                        family, state, data, perms, cap, tol, max_transfers
                    )
                    moved += int(info.n_transfers)
                    done = bool(info.done)
                n_transfers += moved
                if moved == 0:  # line 21: need_update_w is False
                    converged = True
                    bounds.append(float(_complete_log_likelihood(state)))
                    break
                state = _set_weights(state)  # line 18
                bounds.append(float(_complete_log_likelihood(state)))
            self._store(state, family, d, k, n)
        self.seeds_ = seeds
        self.lower_bounds_ = bounds
        self.lower_bound_ = bounds[-1]
        self.n_iter_ = it
        self.converged_ = converged
        self.n_transfers_ = n_transfers
        self._check_degenerate(family)
        if not converged:
            warnings.warn(
                f"KMLEMixture did not converge: transfers still improved the complete "
                f"log-likelihood after max_iter={self.max_iter} weight updates; increase max_iter",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _store(self, state, family, d, k, n):
        self._family_ops = family
        self._params = jax.tree_util.tree_map(lambda a: np.asarray(a)[:k], state.params)
        counts = np.asarray(state.counts)[:k]
        self.labels_ = np.asarray(state.labels)[:n].astype(np.int64)
        self.n_components_ = k
        self.weights_ = counts / counts.sum()
        if family is WISHART:
            p = self._params
            scatter = np.asarray(state.agg)[:k, 1:].reshape(k, d, d)
            self.dof_ = p.dof.copy()
            self.scale_ = scatter / (counts * p.dof)[:, None, None]  # eq. (4)
        else:
            self.mean_directions_ = self._params.mu.copy()
            self.concentrations_ = self._params.kappa.copy()

    def _check_degenerate(self, family):
        """Diagnose the fitted partition (bayesvmf._guards) and warn on degenerate clusters.

        Hard assignments make a cluster's effective number of rows its size: a singleton is
        carried by one vector (its Wishart degrees of freedom or vMF concentration then sit
        at the cap). The vMF family also checks the concentrations (cap, background).
        """
        counts = np.bincount(self.labels_, minlength=self.n_components_).astype(np.float64)
        vmf = family is not WISHART
        diagnosis = _guards.diagnose(
            counts,
            n_rows=self.labels_.size,
            kappa=self.concentrations_ if vmf else None,
            kappa_max=float(self.kappa_max) if vmf else None,
            effective_rows=counts,
            mean_directions=self.mean_directions_ if vmf else None,
        )
        _guards.report(self, diagnosis)
        _guards.warn_components(
            diagnosis,
            type(self).__name__,
            "Pass a smaller n_components, or raise lam so that DP-k-MLE++ opens fewer clusters.",
            stacklevel=4,
        )

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_`` (equal to ``fit(X).predict(X)`` at convergence)."""
        return self.fit(X, y).labels_

    # -- prediction ---------------------------------------------------------------------------

    def _weighted_log_lik(self, X):
        self._check_is_fitted()
        with jax.enable_x64(True):
            host, data, family, _ = self._prepare(X, fitting=False)
            n = host.shape[0]
            data = _pad_data(family, data, _bucket(n, _MIN_ROWS))
            params = jax.tree_util.tree_map(jnp.asarray, self._params)
            log_weights = jnp.log(jnp.asarray(self.weights_))
            return np.asarray(_mixture_log_lik(family, data, params, log_weights))[:n]

    def predict(self, X):
        r"""Return :math:`\arg\max_j \log w_j + \log p_F(X_i; \theta_j)` for every row.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) or (n_samples, n_features)

        Returns
        -------
        ndarray of int of shape (n_samples,)
        """
        return np.argmax(self._weighted_log_lik(X), axis=1)

    def predict_proba(self, X):
        """Return the posterior component probabilities of the fitted mixture.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) or (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_components_)
        """
        wll = self._weighted_log_lik(X)
        return np.exp(wll - scipy.special.logsumexp(wll, axis=1, keepdims=True))

    def score_samples(self, X):
        r"""Return the mixture log-density :math:`\log \sum_j w_j p_F(X_i; \theta_j)` per row.

        Parameters
        ----------
        X : array-like of shape (n_samples, d, d) or (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return scipy.special.logsumexp(self._weighted_log_lik(X), axis=1)

    def score(self, X, y=None):
        """Return the mean of :meth:`score_samples`."""
        del y
        return float(np.mean(self.score_samples(X)))

    def to_numpyro(self):
        """Return the fitted mixture as a NumPyro ``MixtureSameFamily`` distribution.

        Wishart components are ``numpyro.distributions.Wishart(dof, rate_matrix=theta_S)``;
        vMF components are the shared :class:`bayesvmf.distribution.VonMisesFisher`.
        Build and use it under ``jax.enable_x64(True)`` for float64.
        """
        import numpyro.distributions as dist

        self._check_is_fitted()
        mixing = dist.Categorical(probs=jnp.asarray(self.weights_))
        if self.family == "wishart":
            comp = dist.Wishart(
                jnp.asarray(self.dof_), rate_matrix=jnp.asarray(self._params.theta_s)
            )
        else:
            from bayesvmf.distribution import VonMisesFisher

            comp = VonMisesFisher(
                jnp.asarray(self.mean_directions_), jnp.asarray(self.concentrations_)
            )
        return dist.MixtureSameFamily(mixing, comp)

    # -- persistence (bayesvmf.save / bayesvmf.load) --------------------------------------------

    #: JSON scalars of a fitted model, written by :func:`bayesvmf.save`.
    _fitted_scalars = ("n_components_", "lower_bound_", "n_iter_", "converged_", "n_transfers_")
    #: Fitted arrays of both families, then those of each family. The component parameters
    #: the predictions use are stored too (``params_<field>``), so that a loaded model
    #: predicts and scores exactly as the saved one, without re-deriving them from ``scale_``.
    _fitted_arrays = ("labels_", "weights_", "seeds_", "lower_bounds_")
    #: Saved when present (files written before them load without them): the degeneracy
    #: diagnosis (:func:`bayesvmf._guards.report`) and, in the JSON document, the feature names
    #: of a DataFrame (vMF family).
    _optional_fitted = _guards.FITTED_ATTRIBUTES
    _family_arrays = {
        "wishart": ("dof_", "scale_", *(f"params_{f}" for f in WishartParams._fields)),
        "vmf": ("mean_directions_", "concentrations_", *(f"params_{f}" for f in VMFParams._fields)),
    }

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return (arrays, JSON scalars) of the fitted attributes, for :func:`bayesvmf.save`."""
        if not hasattr(self, "labels_"):
            return {}, {}
        arrays = {name: np.asarray(getattr(self, name)) for name in self._fitted_arrays}
        for name, value in self._params._asdict().items():
            arrays[f"params_{name}"] = np.asarray(value)
        for name in self._family_arrays[self.family][:2]:
            arrays[name] = np.asarray(getattr(self, name))
        scalars = feature_names_state(self)
        for name in self._fitted_scalars:
            value = getattr(self, name)
            scalars[name] = value.item() if isinstance(value, np.generic) else value
        for name in self._optional_fitted:
            value = getattr(self, name, None)
            if isinstance(value, np.ndarray):
                arrays[name] = value
            elif value is not None:
                scalars[name] = value.item() if isinstance(value, np.generic) else value
        return arrays, scalars

    def _set_state(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Restore the fitted attributes written by :meth:`_get_state` (checked, not trusted)."""
        if not arrays and not scalars:
            return  # saved before fit
        if self.family not in self._family_arrays:
            raise ValueError(f"family must be 'wishart' or 'vmf'; got family={self.family!r}")
        expected = self._fitted_arrays + self._family_arrays[self.family]
        optional = (*self._optional_fitted, "feature_names_in_")
        for name in [*arrays, *scalars]:
            if name not in expected + self._fitted_scalars + optional:
                raise ValueError(f"unexpected fitted attribute {name!r}")
        missing = [n for n in expected + self._fitted_scalars if n not in {**arrays, **scalars}]
        if missing:
            raise ValueError(f"missing fitted attribute {missing[0]!r}")
        k = scalars["n_components_"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"n_components_ must be a positive integer; got {k!r}")
        per_component = ("weights_", *self._family_arrays[self.family])
        for name in per_component:
            if arrays[name].ndim < 1 or arrays[name].shape[0] != k:
                raise ValueError(
                    f"{name} has shape {arrays[name].shape}; expected {k} components "
                    f"(n_components_={k})"
                )
        fields = WishartParams if self.family == "wishart" else VMFParams
        params = fields(*(np.asarray(arrays[f"params_{f}"]) for f in fields._fields))
        self._params = params
        self.n_features_in_ = (
            params.theta_s.shape[-1] if self.family == "wishart" else params.mu.shape[-1]
        )
        for name in self._fitted_arrays + self._family_arrays[self.family][:2]:
            setattr(self, name, np.asarray(arrays[name]))
        self.lower_bounds_ = [float(b) for b in self.lower_bounds_]
        for name in self._fitted_scalars:
            setattr(self, name, scalars[name])
        for name in self._optional_fitted:
            if name in arrays or name in scalars:
                setattr(self, name, arrays[name] if name in arrays else scalars[name])
        restore_feature_names(self, scalars)
