"""The degeneracy diagnosis shared by every mixture (bayesvmf._guards)."""

import warnings

import numpy as np
import pytest

from bayesvmf import _guards
from bayesvmf.exceptions import DegenerateRunWarning


def test_healthy_state_is_not_degenerate():
    d = _guards.diagnose([30.0, 40.0, 30.0], n_rows=100, kappa=[200.0, 150.0, 400.0], kappa_max=1e6)
    assert not d.degenerate
    assert d.n_occupied == 3
    assert d.largest_share == pytest.approx(0.4)
    assert d.describe() == ""


def test_background_component_is_flagged():
    # CNAE-9's case: one broad cluster (kappa 116) with 21% of the rows, ~730 elsewhere
    counts = np.r_[21.0, np.full(29, 79.0 / 29)]
    kappa = np.r_[116.0, np.linspace(650.0, 800.0, 29)]
    d = _guards.diagnose(counts, n_rows=1080, kappa=kappa, kappa_max=1e6)
    assert d.background.tolist() == [True] + [False] * 29
    assert "component 0 holds 21.0% of the data with kappa 116" in d.describe()
    # the same concentrations with a balanced share are not a background
    d = _guards.diagnose(np.ones(30), n_rows=1080, kappa=kappa, kappa_max=1e6)
    assert not d.background.any()


def test_shared_kappa_never_flags_a_background():
    d = _guards.diagnose([80.0, 10.0, 10.0], n_rows=100, kappa=50.0, kappa_max=1e6)
    assert not d.degenerate


def test_collapsed_single_and_empty_components():
    resp = np.zeros((50, 4))
    resp[:, 0] = 1.0
    resp[0] = [0.0, 1.0, 0.0, 0.0]  # one row carries component 1
    resp[1:3, 0] = 0.5
    resp[1:3, 2] = 0.5
    counts = resp.sum(axis=0)
    d = _guards.diagnose(
        counts,
        n_rows=50,
        kappa=[100.0, 1e6, 120.0, 90.0],
        kappa_max=1e6,
        effective_rows=_guards.effective_counts(resp),
    )
    assert d.at_cap.tolist() == [False, True, False, False]
    assert d.single.tolist() == [False, True, False, False]
    assert d.empty.tolist() == [False, False, False, True]
    assert d.n_occupied == 3
    assert np.flatnonzero(d.bad).tolist() == [1, 3]
    text = d.describe()
    assert "components [1] reached the concentration cap" in text
    assert "components [3] are empty" in text
    assert "single distinct vector" not in text  # the collapsed one is named once


def test_effective_counts():
    w = np.array([[1.0, 0.5, 0.0], [0.0, 0.5, 0.0], [0.0, 0.5, 0.0]])
    np.testing.assert_allclose(_guards.effective_counts(w), [1.0, 3.0, 0.0])


def test_select_run_skips_degenerate_runs():
    healthy = _guards.diagnose([50.0, 50.0], n_rows=100)
    collapsed = _guards.diagnose([50.0, 50.0], n_rows=100, kappa=[1e6, 10.0], kappa_max=1e6)
    # the collapsed run has the higher bound but is never kept while a healthy one exists
    assert _guards.select_run([-10.0, -5.0, -7.0], [healthy, collapsed, healthy], 0.0) == 2
    assert _guards.select_run([-10.0, -5.0], [collapsed, collapsed], 0.0) == 1


def test_warning_names_components_and_advice():
    collapsed = _guards.diagnose([50.0, 50.0], n_rows=100, kappa=[1e6, 10.0], kappa_max=1e6)
    with pytest.warns(DegenerateRunWarning) as record:
        _guards.warn_components(
            collapsed, "Model", "Try shared_kappa=True.", n_runs=3, n_degenerate_runs=3
        )
    assert str(record[0].message) == (
        "Model: components [0] reached the concentration cap (collapsed). "
        "All 3 restarts degenerated; the best of them is kept. Try shared_kappa=True."
    )
    healthy = _guards.diagnose([50.0, 50.0], n_rows=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _guards.warn_components(healthy, "Model", "advice", n_runs=3, n_degenerate_runs=2)


def test_report_sets_fitted_attributes():
    class Est:
        pass

    est = Est()
    d = _guards.diagnose([60.0, 40.0, 0.0], n_rows=100)
    _guards.report(est, d, n_degenerate_runs=2)
    assert est.n_occupied_components_ == 2
    assert est.largest_share_ == pytest.approx(0.6)
    assert est.degenerate_components_.tolist() == [2]
    assert est.n_degenerate_restarts_ == 2


def test_one_rows_weight_read_through_rounding_is_not_empty():
    # a topic holding one token's weight, summed from responsibilities: 0.99999992 tokens
    d = _guards.diagnose([0.99999992, 99.0], n_rows=100, kappa=[1e6, 50.0], kappa_max=1e6)
    assert d.empty.tolist() == [False, False]
    assert d.at_cap.tolist() == [True, False]


def test_empty_components_do_not_disqualify_a_run():
    """A Bayesian mixture's prior empties the components the data do not need, at a higher
    bound: such a run is kept over a lower one that holds a spurious small component, and
    its empty components are still reported and warned about."""
    pruned = _guards.diagnose([150.0, 150.0, 0.0], n_rows=300, kappa=[50.0, 60.0, 55.0])
    spread = _guards.diagnose([140.0, 150.0, 10.0], n_rows=300, kappa=[50.0, 60.0, 55.0])
    assert not pruned.degenerate and pruned.bad.tolist() == [False, False, True]
    assert _guards.select_run([-12.0, -10.0], [spread, pruned], 0.0) == 1
    with pytest.warns(DegenerateRunWarning, match=r"components \[2\] are empty"):
        _guards.warn_components(pruned, "Model", "Try fewer components.")


def test_select_run_ignores_healthy_runs_without_a_finite_bound():
    healthy = _guards.diagnose([50.0, 50.0], n_rows=100)
    collapsed = _guards.diagnose([50.0, 50.0], n_rows=100, kappa=[1e6, 10.0], kappa_max=1e6)
    assert _guards.select_run([-np.inf, -5.0], [healthy, collapsed], 0.0) == 1


def test_coinciding_components_are_flagged():
    """Two occupied components with the same mean direction (kappa (1 - cos) < 1e-3) are one
    cluster fitted twice: the later one is flagged, its run is degenerate and the warning says
    so. B-vMFmix(2) ended so on 199 rows and an outlier, with every row in one cluster and
    no warning (a helper's audit)."""
    mu = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    kappa = np.array([50.0, 50.0, 50.0])
    diagnosis = _guards.diagnose([100, 100, 50], n_rows=250, kappa=kappa, mean_directions=mu)
    assert diagnosis.duplicates.tolist() == [False, True, False] and diagnosis.degenerate
    assert "components [1] coincide with a component of lower index" in diagnosis.describe()
    # apart by more than the gap (kappa (1 - cos) = 0.05), or without directions: not flagged
    apart = mu.copy()
    apart[1] = [np.cos(0.045), np.sin(0.045), 0.0]
    counts = [100, 100, 50]
    assert not _guards.diagnose(counts, n_rows=250, kappa=kappa, mean_directions=apart).degenerate
    assert not _guards.diagnose(counts, n_rows=250, kappa=kappa).degenerate
    # an empty component coinciding with an occupied one is reported empty only
    empty = _guards.diagnose([250, 0, 0], n_rows=250, kappa=kappa, mean_directions=mu)
    assert not empty.duplicates.any() and empty.empty.tolist() == [False, True, True]
