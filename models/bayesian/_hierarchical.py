"""The H-vMFmix estimator (sec. 3.2 of Gopal & Yang [1]_).

The model, the bound and the updates: :mod:`._hierarchical_vi`; the tree: :mod:`._tree`.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.utils._param_validation import Interval

from bayesvmf import _blocks, _guards, _mixture
from bayesvmf._base import make_key
from bayesvmf.models.bayesian._hierarchical_vi import (
    HState,
    _crisp,
    _leaf_log_predictive,
    _leaf_log_predictive_rows,
    initial_state,
    vi_step,
)
from bayesvmf.models.bayesian._kappa import REPORTED_CAP
from bayesvmf.models.bayesian._shared import (
    SHARED_CONSTRAINTS,
    check_direction,
    data_mean_direction,
    fit_restarts,
    q_to_arviz,
    resolve_mu0,
    store_fit,
    with_log_likelihood,
)
from bayesvmf.models.bayesian._tree import (
    balanced_tree,
    check_parents,
    leaves_of,
    make_tree,
    paths_to_leaves,
    top_down_labels,
)

__all__ = ["HierarchicalVMFMixture", "balanced_tree", "check_parents", "paths_to_leaves"]


class HierarchicalVMFMixture(_mixture.BaseVMFMixture):
    r"""Hierarchical Bayesian vMF mixture (H-vMFmix, section 3.2 of [1]_), mean-field VI.

    The mixture components are the leaves of a fixed tree; each node's mean direction is
    drawn around its parent's (``mu_n ~ vMF(mu_pa(n), kappa_pa(n))``), so nearby leaves are
    shrunk towards each other. Updates and bound: module docstring and
    docs/bayesian_hierarchical_temporal.md.

    Parameters
    ----------
    parents : array-like of int of shape (n_nodes,) or None, default None
        Parent of each node, -1 for the root (e.g. from :func:`balanced_tree`). The leaves
        (nodes without children, in increasing index order) are the mixture components.
        None: a root whose children are ``n_components`` leaves (``balanced_tree((K,))``),
        the smallest tree, so that a plain ``n_components`` (a grid over it) is a model.
    n_components : int or None, default None
        Number of leaves. None: those of ``parents`` (1 without ``parents``). With
        ``parents``, it must be None or equal to the number of leaves of ``parents``.
    kappa_update : {"sampling", "bounding"}, default "sampling"
        The q(kappa) scheme of sec. 3.1.1 (:mod:`._kappa`).
    shared_kappa : bool, default True
        One concentration for all leaves (the mixture components), updated from their pooled
        statistics (:func:`._kappa.pooled_update`), with the same meaning as
        :class:`~bayesvmf.models.SparseVMFMixture`'s; the internal nodes keep one kappa each
        (they govern their children's directions, not the data). False: one kappa per leaf,
        the paper's model. Per-leaf kappa is the better density model, a shared kappa the
        better clustering: with one kappa per component, a broad low-kappa leaf tends to
        absorb the rows no other leaf fits (see :class:`BayesianVMFMixture`), which a
        shared kappa rules out; hence the default.
    alpha : float, default 1.0
        Dirichlet parameter of pi (learnt when ``empirical_bayes``, at most n / L:
        :func:`._empirical_bayes.alpha_cap`).
    mu0 : array-like of shape (n_features,) or None, default None
        Prior direction of the root; None: the direction of the data mean (learnt).
    C0 : float, default 1.0
        Prior concentration of the root around mu0 (fixed, see the module docstring).
    m : float or None, default None
        Mean of log kappa_n; None: the mean over nodes of the log of the initial kappa
        estimates (leaves: the concentration of their initial clusters; internal nodes: of
        their children's initial directions). Learnt when ``empirical_bayes``.
    s2 : float, default 1.0
        Variance of log kappa_n (learnt when ``empirical_bayes``).
    empirical_bayes : bool, default True
        Update alpha, mu0, m and s2 by maximising the bound (sec. 3.1.3).
    init : {"spherical-kmeans++", "random"}, default "spherical-kmeans++"
        Seeds of the initial crisp assignment to the leaves, made top down along the tree
        (:func:`top_down_labels`).
    n_init : int, default 1
        Restarts; among those that did not degenerate (:mod:`bayesvmf._guards`), the first
        whose final bound is within ``tol * n_samples`` of the best is kept
        (:func:`bayesvmf._guards.select_run`).
    max_iter : int, default 100
    tol : float, default 1e-6
        Convergence when the bound changes by less than ``tol * n_samples``.
    kappa_num_samples : int, default 50
        Metropolis-Hastings draws per iteration (sampling scheme).
    kappa_num_steps : int, default 20
        Gradient steps on q(kappa) per iteration (bounding scheme).
    normalize : bool, default True
    random_state : None, int, numpy RandomState or Generator, or jax key, default None
        Seed of a fit (:func:`bayesvmf._base.make_key`).
    verbose : int, default 0
        0 is silent; 1 or more shows a tqdm bar over the iterations (scikit-learn's meaning).
    devices : None, int or list of jax devices, default None
        Data-parallel VI (docs/design.md section 6): the rows of X are split into one equal block
        per device (``jax.sharding``; padding rows weigh 0); every device computes q(z) of
        its rows and their statistics (N_l, r_l, the entropy of q(z)), which are added with
        ``psum``; the updates of q(pi), q(mu_n), q(kappa_n) and empirical Bayes run
        replicated. The result equals the one-device fit to floating-point accuracy; the
        top-down initialisation (:func:`top_down_labels`) runs on the devices too (each
        device's hard k-means statistics added over devices, the seeds drawn alike on
        every device). An int n means the first n of ``jax.devices()``; None is the default
        device. ``fit`` and ``fit_predict`` shard; ``predict``, ``score_samples`` etc. run
        on the default device.

    Attributes
    ----------
    weights_ : ndarray of shape (L,)
        E[pi] = rho / sum(rho).
    labels_ : ndarray of shape (n_samples,)
        The leaf of each training row (``fit_predict``'s result).
    lower_bound_, n_iter_, converged_, n_features_in_ : float, int, bool, int
        The bound per row of the kept restart, its iterations, whether it converged, and d.
    mean_directions_, concentrations_ : ndarray of shapes (L, d), (L,)
        Leaf posterior mean directions psi_l and E[kappa_l].
    node_mean_directions_, node_mean_concentrations_ : ndarray of shapes (N, d), (N,)
        q(mu_n) = vMF(psi_n, gamma_n) of every node.
    node_concentrations_, node_log_kappa_mean_, node_log_kappa_var_ : ndarray of shape (N,)
        E[kappa_n], E[log kappa_n], Var[log kappa_n].
    dirichlet_ : ndarray of shape (L,)
        rho.
    alpha_, mu0_, C0_, m_, s2_
        Priors after empirical Bayes.
    parents_, leaves_ : ndarray of int
        The validated tree and its leaves.
    lower_bounds_ : ndarray
        Bound after each iteration of the kept restart.
    n_occupied_components_ : int
        Leaves holding at least one row's weight (sum_i lambda_il >= 1).
    largest_share_ : float
        The largest fraction of the rows held by one leaf.
    degenerate_components_ : ndarray of int
        Leaves diagnosed degenerate (:mod:`bayesvmf._guards`): empty, carried by a single
        row, or a near-uniform background leaf (per-leaf kappa only); a
        :class:`~bayesvmf.exceptions.DegenerateRunWarning` names them and what to try.
    n_degenerate_restarts_ : int
        Restarts whose final state was degenerate.

    References
    ----------
    .. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> centers = np.eye(4)[[0, 0, 1, 1]] + 0.4 * np.eye(4)[[2, 3, 2, 3]]
    >>> X = np.repeat(centers, 30, axis=0) + 0.05 * rng.normal(size=(120, 4))
    >>> model = HierarchicalVMFMixture(balanced_tree((2, 2)), kappa_update="bounding",
    ...                                tol=1e-4, random_state=0).fit(X)
    >>> paths = model.predict_path(X)  # root, depth-1 node, leaf of each row
    >>> paths.shape, len(set(paths[:60, 1])), len(set(paths[60:, 1])), len(set(paths[:, 2]))
    ((120, 3), 1, 1, 4)
    """

    _parameter_constraints: dict[str, Any] = {
        "parents": [None, "array-like"],
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "shared_kappa": ["boolean"],
        **SHARED_CONSTRAINTS,
    }

    _fitted_attributes = _mixture.BaseVMFMixture._fitted_attributes + (
        "node_mean_directions_",
        "node_mean_concentrations_",
        "node_concentrations_",
        "node_log_kappa_mean_",
        "node_log_kappa_var_",
        "dirichlet_",
        "alpha_",
        "mu0_",
        "C0_",
        "m_",
        "s2_",
        "parents_",
        "leaves_",
        "lower_bounds_",
    )

    def __init__(
        self,
        parents=None,
        *,
        n_components: int | None = None,
        kappa_update: str = "sampling",
        shared_kappa: bool = True,
        alpha: float = 1.0,
        mu0=None,
        C0: float = 1.0,
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
        verbose: int = 0,
        devices=None,
    ):
        self.parents = parents
        self.n_components = n_components
        self.kappa_update = kappa_update
        self.shared_kappa = shared_kappa
        self.alpha = alpha
        self.mu0 = mu0
        self.C0 = C0
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
        self.verbose = verbose
        self.devices = devices

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit the model and return the most probable leaf of each row (``fit(X).predict(X)``).

        With ``devices`` the rows are sharded over the devices for the fit and this final
        assignment (see the class docstring). The result is kept in ``labels_`` (``fit`` calls
        it).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        self._validate_params()
        devices = _blocks.resolve_devices(self.devices)  # before the fitted model changes
        Xc = self._check_input(X, reset=True)
        with jax.enable_x64(True):
            data = _blocks.device_data(Xc, devices=devices)
            self._fit(data, make_key(self.random_state))
            if not data.is_sharded:
                weighted_log_prob = self._estimate_weighted_log_prob(data)
                self.labels_ = np.argmax(np.asarray(weighted_log_prob), axis=1)  # on the host
            else:
                rows = data.map_rows(_leaf_log_predictive_rows, self._predictive_params())
                self.labels_ = np.argmax(rows, axis=1)
            return self.labels_

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Return the constructor arguments; array ``parents``/``mu0`` as lists.

        Lists keep :func:`bayesvmf.save` (which stores parameters as JSON) working for the
        arrays :func:`balanced_tree` returns; both forms mean the same model.
        """
        params = super().get_params(deep)
        for name in ("parents", "mu0"):
            if isinstance(params[name], np.ndarray | jax.Array):
                params[name] = np.asarray(params[name]).tolist()
        return params

    def _tree_parents(self) -> np.ndarray:
        """Return the validated parent array of the fit (see ``parents``, ``n_components``)."""
        if self.parents is None:  # (an integer of any kind: NumPy's, or True, as elsewhere)
            return balanced_tree((self._n_leaves(),))
        parents = check_parents(self.parents)
        n_leaves = int(leaves_of(parents).size)
        if self.n_components is not None and self.n_components != n_leaves:
            raise ValueError(
                f"{type(self).__name__}: n_components={self.n_components} but parents has "
                f"{n_leaves} leaves; set n_components=None (or to {n_leaves}), or parents=None "
                "for a root over n_components leaves."
            )
        return parents

    def _n_leaves(self) -> int:
        """Return the number of mixture components (leaves) of the tree of the next fit."""
        if self.parents is None:  # without building a tree of n_components leaves
            return 1 if self.n_components is None else int(self.n_components)
        return int(leaves_of(self._tree_parents()).size)

    def _check_input(self, X, *, reset: bool):
        """Check X as the base does; a fit needs a row per leaf (``n_components`` may be None)."""
        return self._validate_directions(
            X,
            reset=reset,
            min_rows=self._n_leaves() if reset else 1,
            min_rows_name="n_components" if reset else None,
            copy=False,
        )

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.parents is not None:  # (n_components alone was checked above: the tree of
            self._tree_parents()  # a fit is built after the rows are counted against it)
        check_direction(self.mu0)

    def _n_parameters(self) -> int:
        n_nodes, d = self.node_mean_directions_.shape
        n_kappa = n_nodes - self.leaves_.size + 1 if self.shared_kappa else n_nodes
        return (self.leaves_.size - 1) + n_nodes * (d - 1) + n_kappa

    # ---- fitting ----------------------------------------------------------------------------

    def _fit(self, data, rng_key) -> None:
        """Fit to device data (plain, or row blocks over devices)."""
        parents = self._tree_parents()
        tree = make_tree(parents)
        n, d = data.shape
        L = int(tree.leaves.shape[0])
        mu0 = resolve_mu0(self.mu0, data_mean_direction(data), d)
        static = dict(
            scheme=self.kappa_update,
            empirical_bayes=bool(self.empirical_bayes),
            num_samples=int(self.kappa_num_samples),
            num_steps=int(self.kappa_num_steps),
            shared_kappa=bool(self.shared_kappa),
        )

        def start(init_key):
            labels = top_down_labels(init_key, data, parents, self.init)
            stats = _crisp(data, labels, L)
            # placed as vi_step's outputs are (on every device of a mesh): one program
            return data.replicate((initial_state(tree, parents, d, stats, mu0, self), stats))

        def step(key, state, stats):
            return vi_step(key, data, tree, state, stats, **static)

        def diagnose(state, stats):
            kappa = np.asarray(state.kappa.mean_kappa)[leaves_of(parents)]
            counts, square = np.asarray(stats.resp_sum), np.asarray(stats.resp_square)
            # effective rows N_l^2 / sum_i lambda_il^2 (_guards.effective_counts from the sums)
            effective = np.where(square > 0, counts**2 / np.where(square > 0, square, 1.0), 0.0)
            return _guards.diagnose(
                counts,
                n_rows=n,
                kappa=kappa,
                kappa_max=REPORTED_CAP,
                effective_rows=effective,
                mean_directions=np.asarray(state.psi)[leaves_of(parents)],
            )

        advice = (
            "Try fewer leaves (another tree) or another random_state."
            if self.shared_kappa
            else "Try shared_kappa=True (one concentration for all leaves) or fewer leaves."
        )
        state, bounds, converged = fit_restarts(
            self, rng_key, n, start, step, "H-vMFmix VI", diagnose, advice
        )
        self._store(state, parents, bounds, converged)

    def _store(self, state: HState, parents, bounds, converged) -> None:
        leaves = leaves_of(parents)
        k = state.kappa
        store_fit(self, state, bounds, converged)
        self.parents_ = parents
        self.leaves_ = leaves
        self.node_mean_directions_ = np.asarray(state.psi)
        self.node_mean_concentrations_ = np.asarray(state.gamma)
        self.node_concentrations_ = np.asarray(k.mean_kappa)
        self.node_log_kappa_mean_ = np.asarray(k.mean_log_kappa)
        self.node_log_kappa_var_ = np.asarray(k.var_log_kappa)
        self.mean_directions_ = self.node_mean_directions_[leaves]
        self.concentrations_ = self.node_concentrations_[leaves]

    # ---- prediction -------------------------------------------------------------------------

    def _predictive_params(self) -> tuple:
        """Return the leaves' q(mu), q(kappa) and log E[pi] as float64 arrays (inside x64)."""
        leaves = self.leaves_
        return (
            jnp.asarray(self.mean_directions_, jnp.float64),
            jnp.asarray(self.node_mean_concentrations_[leaves], jnp.float64),
            jnp.asarray(self.node_log_kappa_mean_[leaves], jnp.float64),
            jnp.asarray(self.node_log_kappa_var_[leaves], jnp.float64),
            jnp.log(jnp.asarray(self.weights_, jnp.float64)),
        )

    def _estimate_weighted_log_prob(self, data) -> jax.Array:
        """Return log E[pi_l] + log p(x_i | leaf l, q) (closed form, see score_samples)."""
        with jax.enable_x64(True):
            return _leaf_log_predictive(data, *self._predictive_params())

    def score_samples(self, X) -> np.ndarray:
        r"""Return the held-out log posterior predictive density of each row.

        .. math::

            \log p(x \mid X_{\text{train}}) \approx \log \sum_l E_q[\pi_l]
            \int\!\!\int \mathrm{vMF}(x \mid \mu_l, \kappa_l)\, q(\mu_l)\, q(\kappa_l)\,
            d\mu_l\, d\kappa_l,

        the integral over q(mu_l) = vMF(psi_l, gamma_l) in closed form,
        C_d(kappa) C_d(gamma_l) / C_d(|kappa x + gamma_l psi_l|), and the one over
        q(kappa_l) by 20-node Gauss-Hermite quadrature in log kappa under the log-normal
        with E[log kappa_l] and Var[log kappa_l] (exactly q under the bounding scheme; the
        moment-matched log-normal of the Metropolis draws under the sampling scheme).
        E_q[pi_l] = rho_l / sum(rho) is the exact predictive of z under q(pi).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return super().score_samples(X)

    def node_paths(self, labels) -> np.ndarray:
        """Return the root-to-leaf path of nodes for each leaf label.

        Parameters
        ----------
        labels : array-like of int of shape (n,)
            Leaf (component) indices, e.g. from :meth:`predict`.

        Returns
        -------
        ndarray of int of shape (n, max_depth + 1)
            Node indices from the root to the leaf; shallower leaves are padded with -1.
        """
        self._check_is_fitted()
        return paths_to_leaves(self.parents_, labels)

    def predict_path(self, X) -> np.ndarray:
        """Return the root-to-leaf node path of the most probable leaf of each row.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of int of shape (n_samples, max_depth + 1)
        """
        return self.node_paths(self.predict(X))

    def to_arviz(self, num_draws: int = 200, random_state=0, X=None):
        """Return draws from q as an ``arviz.InferenceData`` (one chain of ``num_draws``).

        ``posterior`` holds ``mu`` (dims node, feature), ``kappa`` (node) and ``weights``
        (component = leaf index); ``constant_data`` holds ``parents`` (node) and
        ``leaf_node`` (component). mu_n ~ vMF(psi_n, gamma_n), log kappa_n ~ N(E[log kappa_n],
        Var[log kappa_n]) (moment-matched for the sampling scheme), pi ~ Dir(rho). With
        ``shared_kappa`` the leaves' kappa is one concentration: one draw, equal across the
        leaves.

        Parameters
        ----------
        num_draws : int, default 200
        random_state : None, int, numpy RandomState or Generator, or jax key, default 0
            Seed of the draws from q: by default the same draws at every call, as
            :meth:`BayesianVMFMixture.to_arviz` gives (None: new draws each call).
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features), optional
            Rows whose log-likelihood under each draw, log sum_l pi_l vMF(x_i | mu_l,
            kappa_l) over the leaves l, makes the ``log_likelihood`` group (variable ``x``,
            dims ``chain``, ``draw``, ``row``), which ArviZ's ``loo`` and ``waic`` read.
            The draws are from q, an approximation of the posterior.

        Returns
        -------
        arviz.InferenceData
        """
        self._check_is_fitted()
        rows = None if X is None else self._check_input(X, reset=False)
        params = (
            self.node_mean_directions_,
            self.node_mean_concentrations_,
            self.node_log_kappa_mean_,
            self.node_log_kappa_var_,
            self.dirichlet_,
        )
        n_nodes = self.node_mean_directions_.shape[0]
        idata = q_to_arviz(
            params,
            num_draws,
            random_state,
            pooled=np.isin(np.arange(n_nodes), self.leaves_) if self.shared_kappa else None,
            constant_data={"parents": self.parents_, "leaf_node": self.leaves_},
            dims={
                "mu": ["node", "feature"],
                "kappa": ["node"],
                "weights": ["component"],
                "parents": ["node"],
                "leaf_node": ["component"],
            },
        )
        if rows is None:
            return idata
        return with_log_likelihood(idata, rows, components=self.leaves_)
