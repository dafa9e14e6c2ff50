"""Plots of fitted vMF mixtures: pixel maps of the mean directions and beta paths.

The pixel map of sec. 3.5 of [1]_ draws the K mean directions (or the data) as an image whose
pixel (k, j) encodes mu_kj. Columns follow the lexical ordering of eqs. (36)-(38): first by
the number n_j of means using dimension j, then by the nonzero pattern b_kj, then by the total
magnitude sum_k |mu_kj|; rows follow the weights alpha_k, largest first. Each block of
columns with the same n_j gets its own hue. Every function returns a
:class:`matplotlib.figure.Figure` (created with :class:`~matplotlib.figure.Figure`, never
through ``pyplot``'s global state, so it works headless).

===============  ===========================================================
code             paper [1]_
===============  ===========================================================
``support``      b_kj = 1{mu_kj != 0}, eq. (36)
``n_nonzero``    n_j = sum_k b_kj, eq. (37)
``magnitude``    sum_k |mu_kj|, eq. (38)
===============  ===========================================================

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes" (journal version), sec. 3.5 and 5.3.5.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from matplotlib import colors
from matplotlib.figure import Figure

__all__ = [
    "column_order",
    "row_order",
    "pixel_map",
    "data_pixel_map",
    "plot_path",
    "plot_comparison",
]


def _means(model_or_means):
    if hasattr(model_or_means, "mean_directions_"):
        return np.asarray(model_or_means.mean_directions_, np.float64), np.asarray(
            model_or_means.weights_, np.float64
        )
    means = np.asarray(model_or_means, np.float64)
    if means.ndim != 2:
        raise ValueError(f"mean directions must be 2-D (K, d); got shape {means.shape}.")
    return means, np.full(means.shape[0], 1.0 / means.shape[0])


def row_order(weights) -> np.ndarray:
    """Return the components by decreasing weight alpha_k (sec. 3.5 of [1]_; ties: index)."""
    weights = np.asarray(weights, np.float64)
    return np.lexsort((np.arange(len(weights)), -weights))


def column_order(mean_directions, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Order the dimensions by the lexical rule of eqs. (36)-(38) of [1]_.

    Dimension j comes before j' when n_j > n_j' (eq. (37)); for equal n_j, when the first
    component (in row order, see :func:`row_order`) where the patterns b_kj (eq. (36))
    differ has b_kj = 1; for equal patterns, when sum_k |mu_kj| is larger (eq. (38)).
    Remaining ties keep the original index order.

    Parameters
    ----------
    mean_directions : array of shape (n_components, n_features)
    weights : array of shape (n_components,), optional
        Component weights (row order); equal weights keep the given order.

    Returns
    -------
    order : ndarray of int, shape (n_features,)
        Column permutation.
    n_nonzero : ndarray of int, shape (n_features,)
        n_j of each column, in the new order.

    Examples
    --------
    >>> mu = np.array([[0.6, 0.0, 0.8, 0.0], [0.0, 0.6, 0.8, 0.0]])
    >>> column_order(mu)[0].tolist()
    [2, 0, 1, 3]
    """
    mu = np.asarray(mean_directions, np.float64)
    k = mu.shape[0]
    rows = row_order(np.full(k, 1.0) if weights is None else weights)
    support = (mu[rows] != 0).astype(np.int64)  # eq. (36), rows in display order
    n_nonzero = support.sum(axis=0)  # eq. (37)
    magnitude = np.abs(mu).sum(axis=0)  # eq. (38)
    # np.lexsort sorts by the last key first: n_j, then b_1j, ..., b_Kj, then the magnitude
    keys = [np.arange(mu.shape[1]), -magnitude]
    keys += [-support[i] for i in range(k - 1, -1, -1)]
    keys.append(-n_nonzero)
    order = np.lexsort(keys)
    return order, n_nonzero[order]


def _group_rgba(values, n_nonzero, n_components, vmax):
    """Colour each pixel: hue from its column's n_j group, lightness from |value| / vmax."""
    hues = np.linspace(0.0, 1.0, n_components + 1, endpoint=False)
    magnitude = np.clip(np.abs(values) / (vmax if vmax > 0 else 1.0), 0.0, 1.0)
    hsv = np.empty(values.shape + (3,))
    hsv[..., 0] = hues[n_nonzero][None, :]
    # zero is white; a nonzero value is saturated in its group's hue, darker when larger
    hsv[..., 1] = np.where(magnitude > 0, 0.3 + 0.6 * magnitude, 0.0)
    hsv[..., 2] = 1.0 - 0.6 * magnitude
    return colors.hsv_to_rgb(hsv)


def pixel_map(model_or_means, *, ax=None, vmax=None, title=None) -> Figure:
    """Draw the pixel map of the mean directions (sec. 3.5 of [1]_, Figures 25-28).

    Rows are components by decreasing weight, columns are ordered by :func:`column_order`;
    the lightness of a pixel encodes |mu_kj| and the hue its column's n_j group. Zero
    coordinates are white.

    Parameters
    ----------
    model_or_means : fitted estimator or array of shape (n_components, n_features)
        Anything with ``mean_directions_`` and ``weights_``, or the means themselves.
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made otherwise.
    vmax : float, optional
        |mu| mapped to the darkest shade (default: the largest |mu_kj|).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    mu, weights = _means(model_or_means)
    order, n_nonzero = column_order(mu, weights)
    rows = row_order(weights)
    values = mu[rows][:, order]
    vmax = float(np.max(np.abs(values))) if vmax is None else float(vmax)
    fig, ax = _figure_and_axes(ax, (8, 0.4 * mu.shape[0] + 1.5))
    ax.imshow(
        _group_rgba(values, n_nonzero, mu.shape[0], vmax), aspect="auto", interpolation="nearest"
    )
    ax.set_yticks(range(len(rows)), [f"{k} ({weights[k]:.2f})" for k in rows])
    ax.set_ylabel("component (weight)")
    ax.set_xlabel("dimension (ordered by eqs. (36)-(38))")
    _mark_groups(ax, n_nonzero)
    ax.set_title(title or "mean directions")
    return fig


def data_pixel_map(X, model, *, labels=None, ax=None, vmax=None, title=None) -> Figure:
    """Draw the data matrix in the ordering of the means (sec. 3.5 of [1]_, Figure 26).

    Columns follow :func:`column_order` of the model's means; rows are grouped by cluster
    (``model.predict(X)`` unless ``labels`` are given), clusters by decreasing weight, rows
    inside a cluster in their original order (the paper's ordering there is arbitrary).

    Parameters
    ----------
    X : array or scipy.sparse matrix of shape (n_samples, n_features)
    model : fitted estimator
    labels : array of int, shape (n_samples,), optional
    ax : matplotlib Axes, optional
    vmax : float, optional
        |x| mapped to the darkest shade (default: the 99th percentile of the nonzeros).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    mu, weights = _means(model)
    if X.shape[1] != mu.shape[1]:
        raise ValueError(f"X has {X.shape[1]} features, the model {mu.shape[1]}.")
    labels = np.asarray(model.predict(X) if labels is None else labels)
    order, n_nonzero = column_order(mu, weights)
    rank = np.empty(len(weights), np.int64)
    rank[row_order(weights)] = np.arange(len(weights))
    row_idx = np.lexsort((np.arange(len(labels)), rank[labels]))
    dense = X.toarray() if sp.issparse(X) else np.asarray(X, np.float64)
    norms = np.linalg.norm(dense, axis=1, keepdims=True)
    values = (dense / np.where(norms > 0, norms, 1.0))[row_idx][:, order]
    if vmax is None:
        nonzero = np.abs(values[values != 0])
        vmax = float(np.percentile(nonzero, 99)) if nonzero.size else 1.0
    fig, ax = _figure_and_axes(ax, (8, 6))
    ax.imshow(
        _group_rgba(values, n_nonzero, mu.shape[0], vmax), aspect="auto", interpolation="nearest"
    )
    bounds = np.cumsum(np.bincount(rank[labels], minlength=len(weights)))[:-1]
    for b in bounds:
        ax.axhline(b - 0.5, color="black", linewidth=0.8)
    ax.set_ylabel("observation (grouped by cluster)")
    ax.set_xlabel("dimension (ordered by eqs. (36)-(38))")
    _mark_groups(ax, n_nonzero)
    ax.set_title(title or "data")
    return fig


def plot_path(path, criteria=("bic", "aic"), *, fig=None) -> Figure:
    """Plot a beta path (Algorithm 3 of [1]_): sparsity and criteria against beta.

    Parameters
    ----------
    path : SparsePath
        From :meth:`bayesvmf.models.SparseVMFMixture.path`.
    criteria : sequence of str, default ("bic", "aic")
        Criteria of Table 1 of [1]_ to draw (each marks its minimum).
    fig : matplotlib Figure, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = Figure(figsize=(8, 6)) if fig is None else fig
    ax_sparsity, ax_crit = fig.subplots(2, 1, sharex=True)
    betas = np.asarray(path.betas)
    # beta_0 = 0 cannot go on a log axis: use symlog with a linear zone below the first beta
    linthresh = float(betas[1]) if len(betas) > 1 else 1.0
    ax_sparsity.step(betas, path.sparsity, where="post", marker="o", markersize=3)
    ax_sparsity.set_ylabel("sparsity of the means")
    for name in criteria:
        values = path.criterion(name)
        (line,) = ax_crit.plot(betas, values, marker="o", markersize=3, label=name.upper())
        i = int(np.argmin(values))
        ax_crit.plot(betas[i], values[i], "*", markersize=12, color=line.get_color())
    ax_crit.set_ylabel("criterion (lower is better)")
    ax_crit.set_xlabel("beta")
    ax_crit.legend()
    for ax in (ax_sparsity, ax_crit):
        ax.set_xscale("symlog", linthresh=linthresh)
        ax.grid(True, alpha=0.3)
    return fig


def _figure_and_axes(ax, size):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size)
    return fig, fig.add_subplot()


def _mark_groups(ax, n_nonzero):
    """Draw a separator and the n_j label at each block of columns with the same n_j."""
    edges = np.flatnonzero(np.diff(n_nonzero)) + 1
    for e in edges:
        ax.axvline(e - 0.5, color="black", linewidth=0.6)
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [len(n_nonzero)]])
    for s, e in zip(starts, ends, strict=True):
        ax.text((s + e - 1) / 2, -0.7, f"n={n_nonzero[s]}", ha="center", va="bottom", fontsize=7)


def plot_comparison(comparison, *, fig=None) -> Figure:
    """Plot a held-out comparison (:func:`bayesvmf.compare.compare`), one row per model.

    Left: the held-out log-likelihood per test document, mean over seeds with error bars of
    two standard errors. Middle: the difference from the baseline model, paired by seed,
    with the same error bars and a line at 0 (a bar clear of 0 is a difference the seeds
    agree on). Right, when labels were given: NMI and ARI (mean ± two standard errors).
    With one seed there are no error bars.

    Parameters
    ----------
    comparison : bayesvmf.compare.Comparison
    fig : matplotlib Figure, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = comparison.rows()
    has_labels = comparison.nmi is not None
    n_models = len(rows)
    if fig is None:
        fig = Figure(figsize=(4.0 * (3 if has_labels else 2), 1.0 + 0.5 * n_models))
    axes = fig.subplots(1, 3 if has_labels else 2, sharey=True)
    y = np.arange(n_models)

    def bars(ax, key, **kwargs):
        values = np.array([r[key] for r in rows])
        se = np.array([r.get(key + "_se", np.nan) for r in rows])
        err = np.where(np.isfinite(se), 2 * se, 0.0)
        ax.errorbar(values, y, xerr=err, fmt="o", capsize=3, **kwargs)

    bars(axes[0], "log_likelihood")
    axes[0].set_xlabel("held-out log-likelihood / document")
    axes[0].set_yticks(y, [r["model"] for r in rows])
    axes[0].invert_yaxis()
    bars(axes[1], "difference")
    axes[1].axvline(0.0, color="black", linewidth=0.8)
    axes[1].set_xlabel(f"difference from {comparison.baseline}")
    if has_labels:
        bars(axes[2], "nmi", label="NMI")
        bars(axes[2], "ari", label="ARI")
        axes[2].set_xlabel("agreement with the labels")
        axes[2].legend()
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(
        f"{comparison.n_test} test rows, seeds {list(comparison.seeds)} "
        "(error bars: 2 standard errors over seeds)"
    )
    fig.tight_layout()
    return fig
