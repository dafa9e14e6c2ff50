"""Tests of bayesvmf/plotting.py: the column ordering of eqs. (36)-(38) and headless figures."""

import matplotlib
import numpy as np
import pytest
import scipy.sparse as sp
from matplotlib.figure import Figure

from bayesvmf import plotting

matplotlib.use("Agg")


def test_column_order_follows_eqs_36_to_38():
    # columns: 0 used by both (small), 1 only by row 1, 2 by both (large), 3 by none,
    # 4 only by row 0, 5 only by row 0 (larger than 4)
    mu = np.array(
        [
            [0.1, 0.0, 0.5, 0.0, 0.2, 0.3],
            [0.2, 0.4, 0.6, 0.0, 0.0, 0.0],
        ]
    )
    order, n_nonzero = plotting.column_order(mu, weights=[0.6, 0.4])
    # n_j = 2 first (larger magnitude first), then n_j = 1 with row 0's pattern before row
    # 1's (rule 2a), larger magnitude first inside a pattern (rule 2b), then n_j = 0
    assert order.tolist() == [2, 0, 5, 4, 1, 3]
    assert n_nonzero.tolist() == [2, 2, 1, 1, 1, 0]


def test_column_order_uses_weight_order_of_rows():
    mu = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert plotting.column_order(mu, weights=[0.3, 0.7])[0].tolist() == [1, 0]
    assert plotting.column_order(mu, weights=[0.7, 0.3])[0].tolist() == [0, 1]


def test_row_order_by_decreasing_weight():
    assert plotting.row_order([0.2, 0.5, 0.3]).tolist() == [1, 2, 0]


class _Model:
    def __init__(self, mu, weights):
        self.mean_directions_ = np.asarray(mu)
        self.weights_ = np.asarray(weights)

    def predict(self, X):
        X = X.toarray() if sp.issparse(X) else X
        return np.argmax(X @ self.mean_directions_.T, axis=1)


@pytest.fixture
def model():
    mu = np.array([[0.8, 0.6, 0.0, 0.0], [0.0, 0.6, 0.8, 0.0], [0.0, 0.0, 0.6, 0.8]])
    return _Model(mu, [0.5, 0.3, 0.2])


def test_pixel_map_pixels_are_the_ordered_means(model):
    fig = plotting.pixel_map(model)
    assert isinstance(fig, Figure)
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (3, 4, 3)
    order, _ = plotting.column_order(model.mean_directions_, model.weights_)
    # zero coordinates are white, nonzero ones are not
    ordered = model.mean_directions_[[0, 1, 2]][:, order]
    white = np.all(np.isclose(image, 1.0), axis=-1)
    np.testing.assert_array_equal(white, ordered == 0)
    fig.savefig(__import__("io").BytesIO(), format="png")


def test_data_pixel_map_groups_rows_by_cluster(model, rng):
    X = np.abs(rng.normal(size=(30, 4)))
    fig = plotting.data_pixel_map(sp.csr_matrix(X), model)
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (30, 4, 3)
    with pytest.raises(ValueError, match="X has 3 features, the model 4"):
        plotting.data_pixel_map(X[:, :3], model)


def test_plot_path_draws_sparsity_and_criteria():
    class _Path:
        betas = np.array([0.0, 1.0, 2.0, 4.0])
        sparsity = np.array([0.0, 0.1, 0.3, 0.5])

        def criterion(self, name):
            return {"bic": np.array([4.0, 3.0, 1.0, 2.0]), "aic": np.array([1.0, 2, 3, 4])}[name]

    fig = plotting.plot_path(_Path())
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    lines = fig.axes[0].get_lines()
    np.testing.assert_array_equal(lines[0].get_ydata(), _Path.sparsity)
    # the BIC minimum is marked at beta = 2
    marks = [ln for ln in fig.axes[1].get_lines() if ln.get_marker() == "*"]
    assert [float(m.get_xdata()[0]) for m in marks] == [2.0, 0.0]
