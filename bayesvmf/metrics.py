"""Clustering and density metrics shared by every estimator.

External clustering scores (ARI, NMI, purity, macro-F1 after matching clusters to classes)
are computed with scikit-learn and SciPy; the held-out log-likelihood uses the estimator's
own ``score_samples`` (log p(x_i) of eq. (7) of [1]_ for a fitted vMF mixture).

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes" (journal version).
.. [2] L. Hubert and P. Arabie, "Comparing partitions", Journal of Classification 2 (1985).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn import metrics as _sk

__all__ = [
    "held_out_log_likelihood",
    "adjusted_rand",
    "normalized_mutual_info",
    "purity",
    "macro_f1",
    "clustering_scores",
    "check_labels",
]


def held_out_log_likelihood(model, X, *, per_sample: bool = True) -> float:
    """Return the log-likelihood of held-out rows under a fitted model.

    Parameters
    ----------
    model : fitted estimator with ``score_samples``
    X : array or scipy.sparse matrix of shape (n_samples, n_features)
    per_sample : bool, default True
        Mean per row (comparable across test sets of different sizes) instead of the sum.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If X has no rows, or ``score_samples`` gives NaN for a row.
    """
    log_p = np.asarray(model.score_samples(X), np.float64)
    if log_p.size == 0:
        raise ValueError("X has no rows: a held-out log-likelihood needs at least one.")
    if np.isnan(log_p).any():  # a mean would hide it (and a comparison would rank it)
        row = int(np.flatnonzero(np.isnan(log_p))[0])
        raise ValueError(
            f"{type(model).__name__}.score_samples gave NaN for row {row} of X (of "
            f"{int(np.isnan(log_p).sum())} rows): the model's parameters are not finite."
        )
    return float(log_p.mean() if per_sample else log_p.sum())


def check_labels(y, name: str) -> np.ndarray:
    """Return labels ``y`` as a 1-D array; refuse an empty one or a NaN label, naming ``name``.

    A NaN label was counted as a class of its own by ``purity`` and ``macro_f1``.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {y.shape}.")
    if y.size == 0:
        raise ValueError(f"{name} is empty: need at least one label.")
    if y.dtype.kind == "f":
        missing = np.flatnonzero(np.isnan(y))
    elif y.dtype.kind == "O":
        missing = [i for i, v in enumerate(y) if isinstance(v, float) and v != v]
    else:
        missing = []
    if len(missing):
        raise ValueError(f"{name} has a NaN label in row {int(missing[0])}.")
    return y


def _labels(y_true, y_pred):
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.ndim != 1 or y_true.shape != y_pred.shape:
        raise ValueError(
            f"y_true and y_pred must be 1-D of the same length; got {y_true.shape} and "
            f"{y_pred.shape}."
        )
    return check_labels(y_true, "y_true"), check_labels(y_pred, "y_pred")


def adjusted_rand(y_true, y_pred) -> float:
    """Return the adjusted Rand index [2]_ (1 = identical partitions, about 0 = chance)."""
    return float(_sk.adjusted_rand_score(*_labels(y_true, y_pred)))


def normalized_mutual_info(y_true, y_pred) -> float:
    """Return the normalised mutual information (arithmetic mean normalisation)."""
    return float(_sk.normalized_mutual_info_score(*_labels(y_true, y_pred)))


def purity(y_true, y_pred) -> float:
    """Return the fraction of rows whose cluster's majority class is their class."""
    table = _sk.cluster.contingency_matrix(*_labels(y_true, y_pred))
    return float(table.max(axis=0).sum() / table.sum())


def macro_f1(y_true, y_pred) -> float:
    """Return the macro-F1 after the one-to-one cluster-class matching of largest agreement.

    Clusters are matched to classes by the Hungarian algorithm on the contingency table;
    unmatched classes (more classes than clusters) score F1 = 0, unmatched clusters count
    as errors.
    """
    y_true, y_pred = _labels(y_true, y_pred)
    classes, true_idx = np.unique(y_true, return_inverse=True)
    clusters, pred_idx = np.unique(y_pred, return_inverse=True)
    table = _sk.cluster.contingency_matrix(true_idx, pred_idx)
    rows, cols = linear_sum_assignment(-table)
    mapping = np.full(len(clusters), -1)
    mapping[cols] = rows
    return float(
        _sk.f1_score(true_idx, mapping[pred_idx], average="macro", labels=np.arange(len(classes)))
    )


def clustering_scores(y_true, y_pred) -> dict[str, float]:
    """Return ARI, NMI, purity and macro-F1 as a dict.

    Examples
    --------
    >>> scores = clustering_scores([0, 0, 1, 1], [1, 1, 0, 0])
    >>> {k: round(v, 3) for k, v in scores.items()}
    {'ari': 1.0, 'nmi': 1.0, 'purity': 1.0, 'macro_f1': 1.0}
    """
    return {
        "ari": adjusted_rand(y_true, y_pred),
        "nmi": normalized_mutual_info(y_true, y_pred),
        "purity": purity(y_true, y_pred),
        "macro_f1": macro_f1(y_true, y_pred),
    }
