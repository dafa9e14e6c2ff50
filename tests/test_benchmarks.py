"""The benchmarks' summary: benchmarks/run_all.py reads every results file as it is written.

A benchmark that changes the layout of its JSON (bench_vs_sklearn's first fits: the steady
state instead of a second fit, then one row per case) must not leave the summary reading the
old keys: ``run_all.py --summary-only`` raised KeyError on ``first_over_second`` for a
session before this test.
"""

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
RESULTS = BENCHMARKS / "results"


@pytest.fixture(scope="module")
def run_all():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run_all

        yield run_all
    finally:
        sys.path.remove(str(BENCHMARKS))


def _table_rows(text):
    """The summary's table rows, without the table of benchmark runs (not in the files)."""
    body = text.split("| benchmark run |")[0]
    return [line for line in body.splitlines() if line.startswith("|")]


def test_the_committed_summary_is_built_from_the_committed_results(run_all):
    results = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}
    text = run_all.summarise(results, [])
    assert _table_rows(text) == _table_rows((RESULTS / "summary.md").read_text()), (
        "benchmarks/results/summary.md is stale: run python benchmarks/run_all.py --summary-only"
    )
    # every case and estimator of the first fits has its acceptance row (issue 19)
    first_fits = results["vs_sklearn"]["first_fits"]
    for case, name in {(r["case"], r["estimator"]) for r in first_fits}:
        assert any(f"first_fits, {case}," in row and name in row for row in _table_rows(text))
