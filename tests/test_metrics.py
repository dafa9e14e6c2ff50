"""Tests of bayesvmf/metrics.py against hand-computed values."""

import numpy as np
import pytest

from bayesvmf import metrics


def test_purity_and_macro_f1_by_hand():
    y_true = [0, 0, 0, 1, 1, 2]
    y_pred = [5, 5, 7, 7, 7, 7]
    # cluster 5 -> class 0 (2 rows), cluster 7 -> majority class 1 (2 of 4 rows)
    assert metrics.purity(y_true, y_pred) == pytest.approx(4 / 6)
    # matching 5 -> 0, 7 -> 1: class 0 P=1 R=2/3, class 1 P=2/4 R=1, class 2 F1=0
    f0 = 2 * 1 * (2 / 3) / (1 + 2 / 3)
    f1 = 2 * 0.5 * 1 / 1.5
    assert metrics.macro_f1(y_true, y_pred) == pytest.approx((f0 + f1 + 0) / 3)


def test_scores_are_permutation_invariant(rng):
    y = rng.integers(0, 4, 200)
    noisy = np.where(rng.random(200) < 0.2, rng.integers(0, 4, 200), y)
    relabelled = np.array([3, 0, 2, 1])[noisy]
    a, b = metrics.clustering_scores(y, noisy), metrics.clustering_scores(y, relabelled)
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-12)
    assert 0.3 < a["ari"] < 1 and a["purity"] >= 0.8 - 0.1


def test_bad_labels():
    with pytest.raises(ValueError, match="same length"):
        metrics.adjusted_rand([0, 1], [0, 1, 1])
    # empty labels scored 1.0 (ARI, NMI) or failed inside NumPy; a NaN label was a class of
    # its own for purity and macro-F1
    for score in (
        metrics.adjusted_rand,
        metrics.normalized_mutual_info,
        metrics.purity,
        metrics.macro_f1,
        metrics.clustering_scores,
    ):
        with pytest.raises(ValueError, match="^y_true is empty: need at least one label"):
            score([], [])
        with pytest.raises(ValueError, match=r"^y_true has a NaN label in row 2\."):
            score([0, 1, np.nan], [0, 1, 1])
        with pytest.raises(ValueError, match=r"^y_pred has a NaN label in row 0\."):
            score(["a", "b"], np.array([np.nan, "x"], dtype=object))
    assert metrics.check_labels(["a", "b"], "y").tolist() == ["a", "b"]


def test_held_out_log_likelihood_uses_score_samples():
    class _M:
        def score_samples(self, X):
            return np.asarray(X, float)[:, 0]

    X = np.array([[1.0], [2.0], [6.0]])
    assert metrics.held_out_log_likelihood(_M(), X) == 3.0
    assert metrics.held_out_log_likelihood(_M(), X, per_sample=False) == 9.0
    # a NaN score (a model with NaN parameters) was averaged into NaN silently
    with pytest.raises(ValueError, match=r"^_M\.score_samples gave NaN for row 1 of X \(of 1"):
        metrics.held_out_log_likelihood(_M(), np.array([[1.0], [np.nan], [6.0]]))
    with pytest.raises(ValueError, match="^X has no rows"):
        metrics.held_out_log_likelihood(_M(), np.zeros((0, 1)))
