"""Tests of bayesvmf._executables: compiled programs kept on disk with their compile options."""

import base64
import json
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_python
from jax._src import compiler

from bayesvmf import _compile_cache, _executables, _program_cache
from bayesvmf._compile_cache import ENV_DISABLE, compilation_cache
from bayesvmf._program_cache import PROGRAMS


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """The cache on (the suite turns it off), no program of an earlier test in memory."""
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    monkeypatch.setattr(_program_cache, "_LOADED", {})
    monkeypatch.setattr(_program_cache, "_KEYS", {})
    monkeypatch.setattr(_program_cache, "_MANIFESTS", {})
    monkeypatch.setattr(_program_cache, "_MANIFEST_PATHS", {})


def test_the_executable_file_names_the_xla_flags(tmp_path, monkeypatch):
    """XLA_FLAGS change what XLA compiles (JAX's cache key holds them): another file."""
    _executables._tag.cache_clear()
    try:
        monkeypatch.delenv("XLA_FLAGS", raising=False)
        plain = _executables.path(tmp_path, "key")
        _executables._tag.cache_clear()
        monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
        flagged = _executables.path(tmp_path, "key")
    finally:
        _executables._tag.cache_clear()
    assert plain != flagged and plain.parent == flagged.parent == tmp_path
    assert plain.name.startswith("key.") and plain.suffix == ".xla"


def _passed_to_xla(monkeypatch):
    """Note the compile options JAX passes to XLA (serialised) for every compilation."""
    passed = []
    compile_or_get_cached = compiler.compile_or_get_cached

    def noting(backend, computation, devices, compile_options, *args, **kw):
        passed.append(compile_options.SerializeAsString())
        return compile_or_get_cached(backend, computation, devices, compile_options, *args, **kw)

    monkeypatch.setattr(compiler, "compile_or_get_cached", noting)
    return passed


def _kept_options(folder):
    """Return the compile options each executable file in ``folder`` holds (serialised)."""
    kept = []
    for file in sorted((folder / PROGRAMS).glob("*.xla")):
        header = json.loads(file.read_bytes().split(b"\n", 1)[0])
        assert header["format"] == _executables.FORMAT
        kept.append(base64.b64decode(header["compile_options"]))
    return kept


@_program_cache.persistent_jit
def _three_in_two_out(x, scale, shift):
    return jnp.sin(x) * scale + shift, jnp.sum(x**2)


@pytest.mark.parametrize("entries", [100, _compile_cache.TINY_PROGRAM_SIZE + 1, 2**20 + 1])
def test_a_file_holds_the_compile_options_jax_compiled_it_with(tmp_path, monkeypatch, entries):
    """Byte for byte what JAX's jit passed to XLA, for each tier of XLA options (the tiers
    differ in them: a file of one tier read with another's options would crash, session 22)."""
    with jax.enable_x64(True):
        x, shift = np.linspace(0.0, 1.0, entries), np.float64(1.0)
        passed = _passed_to_xla(monkeypatch)  # (after the arguments: no program of theirs)
        with compilation_cache(folder=tmp_path):
            _three_in_two_out(x, 2.0, shift)
    (kept,) = _kept_options(tmp_path)
    assert passed == [kept]


def test_every_program_of_a_fit_holds_its_compile_options(tmp_path, monkeypatch):
    """The programs of a B-vMFmix fit by the bounding scheme (whose VI step crashed a later
    process when read back without its options) on 300 x 256 rows (the small tier): pytrees
    of many arguments and results, each file's options among those JAX passed to XLA."""
    from bayesvmf.exceptions import ConvergenceWarning
    from bayesvmf.models import BayesianVMFMixture

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 256)) + 4 * np.repeat(np.eye(256)[:3], 100, axis=0)
    passed = _passed_to_xla(monkeypatch)
    with compilation_cache(folder=tmp_path), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # three iterations
        BayesianVMFMixture(3, kappa_update="bounding", max_iter=3, random_state=0).fit(X)
    kept = _kept_options(tmp_path)
    assert len(kept) >= 3 and set(kept) <= set(passed)


def test_a_file_without_compile_options_is_not_read(tmp_path):
    """Session 22's files (format 1) held no compile options: compiled again, not run."""
    with jax.enable_x64(True), compilation_cache(folder=tmp_path):
        _three_in_two_out(np.linspace(0.0, 1.0, 10), 2.0, np.float64(1.0))
    (file,) = sorted((tmp_path / PROGRAMS).glob("*.xla"))
    (exported_file,) = sorted((tmp_path / PROGRAMS).glob("*.jaxexport"))
    exported = _program_cache._read(exported_file)
    assert _executables.read(file, exported) is not None
    header, blob = file.read_bytes().split(b"\n", 1)
    file.write_bytes(json.dumps({"format": 1}).encode() + b"\n" + blob)
    assert _executables.read(file, exported) is None


LAPACK_SCRIPT = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from bayesvmf import _program_cache
    from bayesvmf._compile_cache import compilation_cache

    @_program_cache.persistent_jit
    def solve(a, b):
        return jnp.linalg.solve(a, b)  # an LU factorisation: jaxlib's LAPACK kernel

    a = np.array([[4.0, 1.0], [2.0, 3.0]])
    with jax.enable_x64(True), compilation_cache(folder=sys.argv[1]):
        print(np.asarray(solve(a, np.array([1.0, 2.0]))).tolist())
    """
)


def test_an_executable_calling_lapack_runs_in_a_process_that_lowered_nothing(tmp_path):
    """jaxlib's LAPACK kernels get their LAPACK functions when JAX lowers a linear-algebra
    operation; a later process that reads every program back lowers none. Without
    _executables._initialise_lapack it calls a null dgetrf and dies with SIGSEGV (B-vMFmix's
    bounding scheme did, sessions 22 and 24)."""
    env = {ENV_DISABLE: None}
    first = run_python(LAPACK_SCRIPT, tmp_path, env=env)
    assert len(list((tmp_path / PROGRAMS).glob("*.xla"))) == 1
    second = run_python(LAPACK_SCRIPT, tmp_path, env=env)
    assert first == second
    np.testing.assert_allclose(json.loads(second), [0.1, 0.6], rtol=1e-14)
