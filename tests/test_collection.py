"""The suite collects the same tests in the same order whatever the hash seed.

pytest-xdist refuses to run when its workers collect different test ids; every worker has
its own ``PYTHONHASHSEED``, so a parametrize id built from a set (a scikit-learn
``StrOptions`` message, say) fails CI at random.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _collect(seed):
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_collection_is_independent_of_the_hash_seed():
    first, second = _collect(1), _collect(2)
    assert len(first) > 1000
    changed = [(a, b) for a, b in zip(first, second) if a != b]
    assert first == second, f"ids that depend on the hash seed: {changed[:5]}"
