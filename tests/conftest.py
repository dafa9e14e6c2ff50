"""Shared test set-up: float64 JAX on the CPU, seeded generators, the shared data folder.

The estimators' persistent compilation cache (bayesvmf._compile_cache) is off in the suite
(``BAYESVMF_NO_COMPILATION_CACHE=1`` unless the environment sets it): tests/test_mixture.py
and tests/test_streaming.py in one process took 87.9 s with a cache folder of the process
and 85.8 s without (2 shared cores; the modules compile different programs, and writing
each costs). Its folder is a temporary one of this process, removed at exit, so the tests
that turn the cache on (tests/test_compile_cache.py), or a run with the variable set to 0,
never write to the user's cache folder.

The package itself never flips a global JAX flag; the test suite does (as NumPyro's own
suite does) so that the float64 accuracy contract of docs/design.md section 3 is what is tested.
float32 behaviour is tested explicitly inside ``jax.enable_x64(False)`` blocks.
"""

import atexit
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("BAYESVMF_NO_COMPILATION_CACHE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from bayesvmf import set_compilation_cache  # noqa: E402

jax.config.update("jax_enable_x64", True)

#: This process's compilation cache folder, when it is on (each xdist worker imports this
#: file: one folder each, so no two processes write one file at once; JAX writes its cache
#: files in place, unlocked).
_COMPILATION_CACHE = tempfile.mkdtemp(prefix="bayesvmf-test-jax-cache-")
atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)
set_compilation_cache(True, _COMPILATION_CACHE)

#: ``../shared/data`` beside the project root (present in CI, absent on a user's machine).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared_data_or_skip(*names: str) -> Path:
    """Return the shared data folder, or skip the test saying which file is missing."""
    for name in names:
        if not (SHARED_DATA / name).exists():
            pytest.skip(f"reproduction data {SHARED_DATA / name} is absent (needs ../shared/data)")
    return SHARED_DATA


#: Environment of a new process with two CPU devices (for ``run_python``'s ``env``): JAX
#: reads these before its first import, so a test process cannot change its own devices.
TWO_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}


def run_python(script: str, *args, env: dict | None = None, timeout: float = 300) -> str:
    """Run ``script`` in a new Python process; return its stdout (a failure fails the test).

    ``env``: changes to this process's environment (a value of None removes the variable).
    A run that takes longer than ``timeout`` seconds fails the test instead of stalling
    the suite.
    """
    environment = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, *map(str, args)],
            capture_output=True,
            text=True,
            env=environment,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = (exc.stderr or b"")[-3000:]  # bytes, whatever text= says
        pytest.fail(f"the script run with {args} did not finish in {timeout} s: {stderr!r}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def numpy_lloyd(X, mu, passes):
    """Hard spherical k-means (Banerjee et al. 2005) in NumPy, a fixed number of passes: the
    reference for the package's jitted passes (tests of SparseVMFMixture and B-vMFmix)."""
    for _ in range(passes):
        labels = np.argmax(X @ mu.T, axis=1)
        resultant = np.eye(len(mu))[labels].T @ X
        norm = np.linalg.norm(resultant, axis=1, keepdims=True)
        mu = np.where(norm > 0, resultant / np.where(norm > 0, norm, 1.0), mu)
    return mu


def scipy_mixture_log_likelihood(X, mu, kappa, weights):
    """log sum_k w_k vMF(x_i | mu_k, kappa_k) of unit rows X, from scipy.stats.vonmises_fisher
    (the reference of the log_likelihood groups of to_arviz, independent of bayesvmf)."""
    from scipy.special import logsumexp
    from scipy.stats import vonmises_fisher

    terms = [
        np.log(w) + vonmises_fisher(m, k).logpdf(X)
        for m, k, w in zip(mu, kappa, weights, strict=True)
    ]
    return logsumexp(np.stack(terms, axis=1), axis=1)


@pytest.fixture
def diagnose_calls(monkeypatch):
    """The keyword arguments of every call of bayesvmf._guards.diagnose in the test (the
    guard still runs): what the degeneracy guards are given."""
    from bayesvmf import _guards

    calls = []
    diagnose = _guards.diagnose

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return diagnose(*args, **kwargs)

    monkeypatch.setattr(_guards, "diagnose", recording)
    return calls


class HostBuffers:
    """The host buffers :func:`bayesvmf._data._device_put_aligned` allocated in a test."""

    def __init__(self):
        self.buffers = []  # weak references, in the order allocated
        self.alive_at_allocation = []  # how many earlier ones were alive at each allocation

    def alive(self) -> int:
        """How many of the recorded buffers are alive now."""
        return sum(ref() is not None for ref in self.buffers)

    @staticmethod
    def collect_cycles() -> None:
        """Free unreachable reference cycles without the collector's callbacks.

        With the collector off, an array caught in a cycle (a frame kept by a traceback
        inside JAX's dispatch) would stay alive, which a running program's collector frees;
        the callbacks (JAX's among them) are left out so that they cannot release the
        queued host buffers instead of the package.
        """
        callbacks = gc.callbacks[:]
        gc.callbacks.clear()
        try:
            gc.collect()
        finally:
            gc.callbacks[:] = callbacks


@pytest.fixture
def host_buffers(monkeypatch):
    """Record the host buffers of the data copies JAX shares, with Python's collector off.

    The collector's callback also makes JAX let go of such buffers (bayesvmf._compile_cache.
    release_host_buffers), so it is off for the whole test: what is freed, the package freed.
    """
    import weakref

    from bayesvmf import _data

    record, allocate = HostBuffers(), _data._host_buffer

    def recording(nbytes):
        record.alive_at_allocation.append(record.alive())
        raw = allocate(nbytes)
        record.buffers.append(weakref.ref(raw))
        return raw

    monkeypatch.setattr(_data, "_host_buffer", recording)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield record
    finally:
        if enabled:
            gc.enable()


@pytest.fixture
def rng():
    """A NumPy generator with a fixed seed, new for every test."""
    return np.random.default_rng(20140621)


@pytest.fixture
def rng_key():
    """A JAX PRNG key with a fixed seed."""
    return jax.random.key(0)


#: The kernel's limit on memory mappings per process (Linux; None elsewhere).
try:
    _MAX_MAP_COUNT = int(Path("/proc/sys/vm/max_map_count").read_text())
except (OSError, ValueError):
    _MAX_MAP_COUNT = None


def _memory_maps() -> int:
    with open("/proc/self/maps", "rb") as maps:
        return sum(1 for _ in maps)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module."""
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True)
def _stay_below_the_map_count_limit():
    """Drop JAX's compiled programs before a test when the process nears ``vm.max_map_count``.

    XLA's CPU compiler maps every compiled program's code into memory regions of its own:
    during scikit-learn's estimator checks (a program per data shape) a process gained
    ~190 mappings a second (sampled from /proc), at which rate the whole of
    tests/test_base.py in one process reaches the kernel's default limit of 65,530. Workers
    died inside the compiler (SIGSEGV or SIGABRT) in four fresh-clone runs, and
    ``pytest -n 0 tests/test_base.py`` segfaulted at the same check every time; with the
    caches cleared in between (which dropped the count from ~11,000 to ~3,600) it passes.
    """
    if _MAX_MAP_COUNT is not None and _memory_maps() > _MAX_MAP_COUNT // 2:
        jax.clear_caches()
        gc.collect()
    yield
