import math

import numpy as np
import pytest

from bayesvmf import criteria


@pytest.mark.parametrize(
    ("name", "phi"),
    [
        ("aic", lambda n, d: 2.0),
        ("bic", lambda n, d: math.log(n)),
        ("ric", lambda n, d: 2 * math.log(d)),
        ("ricc", lambda n, d: 2 * (math.log(d) + math.log(math.log(d)))),
        ("ebic", lambda n, d: math.log(n) + 2 * 0.5 * math.log(d)),
    ],
)
def test_table1_coefficients(name, phi):
    for n, d in [(475, 1000), (1000, 100), (18846, 26214)]:
        assert criteria.penalty_coefficient(name, n, d) == pytest.approx(phi(n, d), rel=1e-15)
        ll, c = -1234.5, 77
        expected = phi(n, d) * c - 2 * ll
        assert criteria.information_criterion(name, ll, c, n, d) == pytest.approx(
            expected, rel=1e-15
        )
        assert getattr(criteria, name)(ll, c, n, d) == pytest.approx(expected, rel=1e-15)


def test_parameter_count_dense_and_sparse():
    rng = np.random.default_rng(0)
    K, d = 4, 10
    mu = rng.normal(size=(K, d))
    # dense: (K - 1) weights + K (d - 1) directions + K kappas (sec. 3.4)
    assert criteria.n_parameters(mu) == (K - 1) + K * (d - 1) + K
    assert criteria.n_parameters(mu, shared_kappa=True) == (K - 1) + K * (d - 1) + 1
    mu[0, :7] = 0  # 3 nonzeros -> 2 free (eq. 33)
    mu[1, :9] = 0  # 1 nonzero -> max(1, 0) = 1
    expected = (2 * K - 1) + 2 + 1 + 2 * (d - 1)  # eq. (34)
    assert criteria.n_parameters(mu) == expected


def test_errors():
    with pytest.raises(
        ValueError, match="unknown criterion 'hqc'; expected one of aic, bic, ric, ricc, ebic."
    ):
        criteria.penalty_coefficient("hqc", 10, 10)
    with pytest.raises(ValueError, match=r"mean_directions must be 2-D; got shape \(3,\)."):
        criteria.n_parameters(np.ones(3))
    # EBIC's gamma: NaN gave NaN criteria (and a silent pick of the first model), "x" a
    # TypeError from inside the arithmetic
    for gamma in (np.nan, -1.0, 2.0, "x", True):
        with pytest.raises(ValueError, match=r"^gamma must be a number in \[0, 1\] \(EBIC\)"):
            criteria.penalty_coefficient("ebic", 10, 10, gamma=gamma)
    assert criteria.penalty_coefficient("ebic", 10, 10, gamma=1) == pytest.approx(3 * np.log(10))


def test_vectorised_over_a_path():
    ll = np.array([-10.0, -11.0, -12.5])
    c = np.array([30, 20, 10])
    out = criteria.information_criterion("bic", ll, c, 100, 50)
    np.testing.assert_allclose(out, np.log(100) * c - 2 * ll, rtol=1e-15)
