r"""Cauchy-Schwarz divergence between fitted mixtures and motion retrieval (sec. 4 of [1]_).

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
"""

from __future__ import annotations

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.special

from bayesvmf import _compile_cache
from bayesvmf.exceptions import DegenerateRunWarning
from bayesvmf.models.kmle._estimator import KMLEMixture
from bayesvmf.models.kmle._kernel import _MIN_ROWS, _bucket
from bayesvmf.models.kmle._wishart import _wishart_log_normalizer_logdet

# Cauchy-Schwarz divergence between mixtures (sec. 4 of [1], [3])
# ---------------------------------------------------------------------------------------------


#: Elements of the largest block of pairwise parameters formed at once (memory bound).
_CS_BLOCK = 1 << 21


def _stack_mixtures(mixtures):
    """Stack fitted mixtures, padded to the largest K: parameters and log weights.

    Padded components repeat the last real one (finite values) and get log weight -inf,
    so they drop out of every log-sum-exp.
    """
    kmax = max(m.n_components_ for m in mixtures)
    log_w = np.full((len(mixtures), kmax), -np.inf)
    parts = []
    for row, m in enumerate(mixtures):
        k = m.n_components_
        idx = np.minimum(np.arange(kmax), k - 1)
        log_w[row, :k] = np.log(m.weights_)
        parts.append({name: np.asarray(v)[idx] for name, v in m._params._asdict().items()})
    return {name: np.stack([q[name] for q in parts]) for name in parts[0]}, log_w


def _log_component_inner(family, d, pa, pb):
    r"""Return log int p_j p'_j' = F(theta_j + theta'_j') - F(theta_j) - F(theta'_j') (sec. 4).

    ``pa`` and ``pb`` hold stacked component parameters whose leading axes broadcast
    against each other; computed with NumPy/LAPACK on the host (no compilation per shape).
    """
    if family == "wishart":
        theta_n = pa["theta_n"] + pb["theta_n"]
        if np.any(theta_n <= -1):
            # theta_j + theta'_j' leaves the natural parameter space: n_j + n'_j' <= 2 d
            raise ValueError(
                "the Cauchy-Schwarz integral diverges: two components have degrees of freedom "
                f"summing to at most 2 d = {2 * d} (smallest sum "
                f"{float(np.min(2 * theta_n + 2 * (d + 1))):.6g})"
            )
        theta_s = pa["theta_s"] + pb["theta_s"]
        chol = np.linalg.cholesky(theta_s)
        log_det = 2.0 * np.log(np.diagonal(chol, axis1=-2, axis2=-1)).sum(-1)
        # F(theta_j + theta'_j') of eq. (1) of [1]_, in NumPy
        f_sum = _wishart_log_normalizer_logdet(theta_n, log_det, d, scipy.special.gammaln)
        return f_sum - pa["log_normalizer"] - pb["log_normalizer"]
    # int C(k) e^{k mu.x} C(k') e^{k' mu'.x} dx = C(k) C(k') / C(|k mu + k' mu'|)
    ka, kb = pa["kappa"], pb["kappa"]
    dot = np.sum(pa["mu"] * pb["mu"], axis=-1)
    kappa_sum = np.sqrt(np.maximum(ka**2 + kb**2 + 2 * ka * kb * dot, 0.0))
    flat = kappa_sum.ravel()
    size = _bucket(flat.size, _MIN_ROWS)  # one compilation for nearby sizes
    with jax.enable_x64(True):
        padded = jnp.asarray(np.concatenate([flat, np.ones(size - flat.size)]))
        log_c = np.asarray(_log_vmf_normalizer(d, padded))[: flat.size]
    return pa["log_normalizer"] + pb["log_normalizer"] - log_c.reshape(kappa_sum.shape)


@partial(_compile_cache.jit, static_argnums=0)
def _log_vmf_normalizer(d, kappa):
    from bayesvmf import special

    return special.log_vmf_normalizer(d, kappa)


def _check_same_family(mixtures):
    """Check fitted KMLEMixture objects with finite parameters, of one family and dimension."""
    for i, m in enumerate(mixtures):
        if not isinstance(m, KMLEMixture):
            raise TypeError(
                f"the Cauchy-Schwarz divergence is between KMLEMixture models; mixture {i} "
                f"is a {type(m).__name__}"
            )
        m._check_is_fitted()
        arrays = {"weights_": m.weights_, **m._params._asdict()}
        for name, value in arrays.items():  # (a NaN weight gave a NaN divergence silently)
            if not np.all(np.isfinite(np.asarray(value))):
                raise ValueError(f"mixture {i} has a parameter that is not finite ({name})")
    first = mixtures[0]
    for m in mixtures[1:]:
        if m.family != first.family:
            raise ValueError(f"mixtures of different families: {first.family!r} and {m.family!r}")
        if m.n_features_in_ != first.n_features_in_:
            raise ValueError(
                f"mixtures of different dimensions: {first.n_features_in_} and {m.n_features_in_}"
            )
    return first.family, first.n_features_in_


def _log_cross_matrix(mixtures_a, mixtures_b, family, d):
    """Return log int m_i m'_j for every pair: (len(a), len(b)), vectorised in blocks of rows.

    ``family`` and ``d`` as :func:`_check_same_family` returned them for all the mixtures.
    """
    pa, log_wa = _stack_mixtures(mixtures_a)
    pb, log_wb = _stack_mixtures(mixtures_b)
    ka = log_wa.shape[1]
    width = d * d if family == "wishart" else d
    rows = max(1, _CS_BLOCK // (ka * log_wb.size * width))
    pb = {name: v[None, None] for name, v in pb.items()}  # (1, 1, Mb, Kb, ...)
    out = np.empty((len(mixtures_a), len(mixtures_b)))
    for start in range(0, len(mixtures_a), rows):
        block = slice(start, start + rows)
        pa_block = {name: v[block][:, :, None, None] for name, v in pa.items()}
        log_inner = _log_component_inner(family, d, pa_block, pb)
        log_w = log_wa[block][:, :, None, None] + log_wb[None, None]
        out[block] = scipy.special.logsumexp(log_w + log_inner, axis=(1, 3))
    return out


def _log_self_inner(mixtures, family, d):
    """Return log int m_i^2 for every mixture: (len(mixtures),) (``family``, ``d`` checked)."""
    p, log_w = _stack_mixtures(mixtures)
    log_inner = _log_component_inner(
        family, d, {n: v[:, :, None] for n, v in p.items()}, {n: v[:, None] for n, v in p.items()}
    )
    return scipy.special.logsumexp(log_w[:, :, None] + log_w[:, None, :] + log_inner, axis=(1, 2))


def _log_inner_products(a: KMLEMixture, b: KMLEMixture):
    r"""Return the (K_a, K_b) matrix log int p_j q_j' (sec. 4 of [1]_)."""
    family, d = _check_same_family([a, b])
    pa = {n: np.asarray(v)[:, None] for n, v in a._params._asdict().items()}
    pb = {n: np.asarray(v)[None, :] for n, v in b._params._asdict().items()}
    return _log_component_inner(family, d, pa, pb)


def cauchy_schwarz_divergence(a: KMLEMixture, b: KMLEMixture) -> float:
    r"""Return the closed-form Cauchy-Schwarz divergence between two fitted mixtures.

    .. math::

        CS(m : m') = -\log \frac{\int m m'}{\sqrt{\int m^2 \int m'^2}}, \qquad
        \int m m' = \sum_{j,j'} w_j w'_{j'} \exp\{F(\theta_j + \theta'_{j'}) - F(\theta_j)
        - F(\theta'_{j'})\}

    (sec. 4 of [1]_, [3]_), in log space (log-sum-exp). The square root, missing in the
    paper's display, makes :math:`CS(m:m) = 0`; :math:`CS \ge 0` by the Cauchy-Schwarz
    inequality and it is symmetric. For Wishart mixtures every pair of components must
    have :math:`n_j + n'_{j'} > 2d` (otherwise :math:`\theta_j + \theta'_{j'}` leaves the
    natural parameter space and the integral diverges); :class:`KMLEMixture` guarantees it
    by fitting every :math:`n_j \ge` ``min_dof`` :math:`> d`, so the divergence is finite
    between any two mixtures it fitted on matrices of one dimension.

    Parameters
    ----------
    a, b : KMLEMixture
        Fitted mixtures of the same family and dimension.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If ``a`` or ``b`` is not a :class:`KMLEMixture`.
    ValueError
        Different families or dimensions, weights that are not finite, or a divergent
        integral.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import wishart
    >>> X = wishart(10, np.eye(2)).rvs(60, random_state=0)
    >>> m = KMLEMixture(n_components=2, random_state=0).fit(X)
    >>> abs(cauchy_schwarz_divergence(m, m)) < 1e-10
    True
    """
    return float(cauchy_schwarz_matrix([a], [b])[0, 0])


def cauchy_schwarz_matrix(mixtures_a, mixtures_b=None):
    """Return the matrix of :func:`cauchy_schwarz_divergence` between two lists of mixtures.

    Parameters
    ----------
    mixtures_a : sequence of KMLEMixture
    mixtures_b : sequence of KMLEMixture, optional
        Defaults to ``mixtures_a``.

    Returns
    -------
    ndarray of shape (len(mixtures_a), len(mixtures_b))
    """
    mixtures_a = list(mixtures_a)
    mixtures_b = mixtures_a if mixtures_b is None else list(mixtures_b)
    for name, mixtures in (("mixtures_a", mixtures_a), ("mixtures_b", mixtures_b)):
        if not mixtures:
            raise ValueError(f"{name} is empty: need at least one fitted mixture")
    # checked once here (types, fitted, finite parameters, one family and dimension)
    family, d = _check_same_family(mixtures_a + mixtures_b)
    self_a = _log_self_inner(mixtures_a, family, d)
    self_b = self_a if mixtures_b is mixtures_a else _log_self_inner(mixtures_b, family, d)
    cross = _log_cross_matrix(mixtures_a, mixtures_b, family, d)
    return 0.5 * self_a[:, None] + 0.5 * self_b[None, :] - cross


# ---------------------------------------------------------------------------------------------
# Motion retrieval (sec. 4 of [1])
# ---------------------------------------------------------------------------------------------


def windowed_cross_products(series, window_sizes, step, shrinkage=1e-3):
    r"""Return the cross-product matrices of column-centred windows of one series.

    For each window length :math:`w` in ``window_sizes`` and each start
    :math:`0, s, 2s, \dots` the window :math:`\mathbb X` (:math:`w \times d`) is centred
    column-wise (footnote 3 of [1]_) and :math:`X = \mathbb X^\top \mathbb X` is kept;
    a window longer than the series is replaced by the whole series. Shrinkage
    :math:`X + \epsilon\, \mathrm{tr}(X)/d\, I` makes rank-deficient windows SPD.

    **Short windows.** A centred window of :math:`w` samples has rank at most
    :math:`w - 1`, so it is positive definite only for :math:`w \ge d + 1`. Shorter windows
    (and series shorter than the window and than :math:`d + 1`, e.g. 134 of the 640
    JapaneseVowels series, :math:`d = 12`) are accepted when ``shrinkage > 0``: their
    matrices are then SPD through the shrinkage alone, and the Wishart fit of
    :class:`KMLEMixture` stays well posed (its ``min_dof`` > d, not the window length, is
    what keeps the Cauchy-Schwarz divergence finite). With ``shrinkage=0`` they raise a
    ``ValueError`` naming the window length and :math:`d`.

    Parameters
    ----------
    series : array of shape (n_times, d)
        At least 2 time steps, finite.
    window_sizes : sequence of int
        Window lengths, each at least 2.
    step : int
        Stride between window starts, at least 1.
    shrinkage : float, default=1e-3
        :math:`\epsilon \ge 0`.

    Returns
    -------
    ndarray of shape (n_windows, d, d)

    Raises
    ------
    ValueError
        For a series that is not 2-D, is shorter than 2 samples or not finite, a window
        length below 2, a step below 1, a negative shrinkage, or (with ``shrinkage=0``) a
        window of fewer than :math:`d + 1` samples.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(50, 3))
    >>> windowed_cross_products(x, window_sizes=(20, 50), step=10).shape
    (5, 3, 3)
    """
    series = np.asarray(series, dtype=np.float64)
    if series.ndim != 2:
        raise ValueError(f"series must be 2-D (n_times, d); got shape {series.shape}")
    n_times, d = series.shape
    if n_times < 2:
        raise ValueError(f"series has {n_times} time steps; a centred window needs at least 2")
    if not np.isfinite(series).all():
        raise ValueError("series contains NaN or infinity")
    sizes = [int(w) for w in window_sizes]
    if not sizes or min(sizes) < 2:
        raise ValueError(f"window_sizes must be integers of at least 2; got {window_sizes!r}")
    if int(step) < 1:
        raise ValueError(f"step must be a positive integer; got step={step!r}")
    if not (np.isfinite(shrinkage) and shrinkage >= 0):
        raise ValueError(f"shrinkage must be a finite number >= 0; got shrinkage={shrinkage!r}")
    mats = []
    for w in sizes:
        w = min(w, n_times)
        if w < d + 1 and shrinkage == 0:
            raise ValueError(
                f"a window of {w} samples has a centred cross-product of rank at most {w - 1} "
                f"< d = {d}: not positive definite. Use windows of at least d + 1 = {d + 1} "
                "samples or shrinkage > 0"
            )
        for start in range(0, n_times - w + 1, int(step)):
            window = series[start : start + w]
            window = window - window.mean(axis=0)
            mats.append(window.T @ window)
    mats = np.unique(np.asarray(mats), axis=0)  # whole-series windows may repeat
    trace = np.trace(mats, axis1=1, axis2=2)
    return mats + (shrinkage * trace / d)[:, None, None] * np.eye(d)


def nearest_neighbor_retrieval(
    train_series,
    y_train,
    test_series,
    *,
    window_sizes,
    step,
    shrinkage=1e-3,
    n_components=None,
    lam=0.25,
    dp_rule="gain",
    max_dof=1e6,
    min_dof=None,
    random_state=0,
):
    """Classify series by 1-NN under the Cauchy-Schwarz divergence between Wishart mixtures.

    The pipeline of sec. 4 of [1]_: every series becomes its windowed cross-product
    matrices (:func:`windowed_cross_products`), a Wishart mixture is fitted to them by
    :class:`KMLEMixture`, and each test series takes the label of the training series
    whose mixture is closest in :func:`cauchy_schwarz_divergence`. With ``n_components``
    given, series with fewer windows use as many components as they have windows.

    Parameters
    ----------
    train_series, test_series : sequence of arrays of shape (n_times, d)
    y_train : array of shape (n_train,)
    window_sizes, step, shrinkage
        See :func:`windowed_cross_products`.
    n_components, lam, dp_rule, max_dof, min_dof, random_state
        See :class:`KMLEMixture`.

    Returns
    -------
    y_pred : ndarray of shape (n_test,)
    divergences : ndarray of shape (n_test, n_train)
    """

    def fit_one(s):
        mats = windowed_cross_products(s, window_sizes, step, shrinkage)
        k = None if n_components is None else min(n_components, len(mats))
        model = KMLEMixture(
            n_components=k,
            lam=lam,
            dp_rule=dp_rule,
            max_dof=max_dof,
            min_dof=min_dof,
            random_state=random_state,
        )
        # A series with few windows routinely gives a singleton cluster: its degrees of
        # freedom sit at max_dof, which keeps the divergence finite, so the per-series
        # DegenerateRunWarning would only be noise here (one per series).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateRunWarning)
            return model.fit(mats)

    train = [fit_one(s) for s in train_series]
    test = [fit_one(s) for s in test_series]
    div = cauchy_schwarz_matrix(test, train)
    return np.asarray(y_train)[np.argmin(div, axis=1)], div
