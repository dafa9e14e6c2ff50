"""Tests of bayesvmf._program_cache: traced programs written to and read from disk."""

import contextlib
import json
import textwrap
import threading
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from conftest import TWO_CPU_DEVICES, run_python

from bayesvmf import _executables, _program_cache
from bayesvmf._compile_cache import ENV_DISABLE, compilation_cache
from bayesvmf._program_cache import PROGRAMS, persistent_jit, prefetching

TRACES = []


class Pair(NamedTuple):
    """A named tuple argument and result (registered for serialisation when met)."""

    left: object
    right: object


@jax.tree_util.register_pytree_node_class
class Scaled:
    """A custom pytree node with JSON-able static data."""

    def __init__(self, values, shape, label):
        self.values, self.shape, self.label = values, tuple(shape), label

    def tree_flatten(self):
        return (self.values,), (self.shape, self.label)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)


@persistent_jit(
    static_argnames=("power",), compiler_options={"xla_llvm_disable_expensive_passes": True}
)
def _program(pair, scaled, power, offset=None):
    TRACES.append(power)
    total = pair.left * scaled.values**power + jnp.sum(pair.right) * len(scaled.shape)
    if offset is not None:
        total = total + offset
    return Pair(total, jnp.cumsum(total)), jnp.float64(scaled.label == "a")


def _arguments():
    pair = Pair(jnp.arange(4.0), jnp.ones(3))
    return pair, Scaled(jnp.linspace(0.5, 2.0, 4), (2, 2), "a")


def _files(folder):
    return sorted((folder / PROGRAMS).glob("*.jaxexport"))


def _executable_files(folder):
    return sorted((folder / PROGRAMS).glob("*.xla"))


def _assert_same(got, want):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)


def _forget():
    """Forget the programs, keys and manifests of this process (as a new process would)."""
    _program_cache._LOADED.clear()
    _program_cache._KEYS.clear()
    _program_cache._MANIFESTS.clear()
    _program_cache._MANIFEST_PATHS.clear()


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(ENV_DISABLE, raising=False)  # the suite turns the cache off
    monkeypatch.setattr(_program_cache, "_LOADED", {})
    monkeypatch.setattr(_program_cache, "_KEYS", {})
    monkeypatch.setattr(_program_cache, "_MANIFESTS", {})
    monkeypatch.setattr(_program_cache, "_MANIFEST_PATHS", {})
    TRACES.clear()


def test_a_program_is_written_then_read_back_without_tracing(tmp_path):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        expected = _program.jitted(pair, scaled, 3)
        TRACES.clear()
        with compilation_cache(folder=tmp_path):
            first = _program(pair, scaled, 3)
            again = _program(pair, scaled, 3)
        assert TRACES == [3] and len(_files(tmp_path)) == 1  # traced once, written once
        _forget()
        with compilation_cache(folder=tmp_path):
            read = _program(pair, scaled, power=3)
        assert TRACES == [3]  # read back: not traced again
    for out in (first, again, read):
        assert isinstance(out[0], Pair)
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
            np.testing.assert_array_equal(a, b)  # the same program as the plain jit


def test_each_static_value_shape_and_tree_is_a_program(tmp_path):
    pair, scaled = _arguments()
    with jax.enable_x64(True), compilation_cache(folder=tmp_path):
        _program(pair, scaled, 2)
        _program(pair, scaled, 3)
        _program(Pair(jnp.arange(5.0), jnp.ones(3)), Scaled(jnp.ones(5), (5,), "b"), 2)
        _program(pair, scaled, 2, offset=jnp.float64(1.0))
        _program(pair, scaled, 2)
    assert TRACES == [2, 3, 2, 2] and len(_files(tmp_path)) == 4


def test_edited_sources_trace_anew(tmp_path, monkeypatch):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        with compilation_cache(folder=tmp_path):
            _program(pair, scaled, 2)
        _forget()
        monkeypatch.setattr(_program_cache, "_source_hash", lambda: "edited")
        with compilation_cache(folder=tmp_path):
            _program(pair, scaled, 2)
    assert TRACES == [2, 2] and len(_files(tmp_path)) == 2


def test_without_a_cache_block_it_is_the_plain_jit(tmp_path):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        _program(pair, scaled, 2)
        with compilation_cache(enabled=False):
            _program(pair, scaled, 2)
    assert not (tmp_path / PROGRAMS).exists() and _program_cache._LOADED == {}


def test_a_damaged_file_is_written_again(tmp_path):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        with compilation_cache(folder=tmp_path):
            expected = _program(pair, scaled, 2)
        (path,) = _files(tmp_path)
        path.write_bytes(b'{"format": 1, "types": []}\nnot a flatbuffer')
        _forget()
        with compilation_cache(folder=tmp_path):
            out = _program(pair, scaled, 2)
    assert TRACES == [2, 2] and path.read_bytes() != b"not a flatbuffer"
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(a, b)


def _refuse_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a program was compiled")

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)


def test_a_later_process_runs_the_executable_without_lowering_or_compiling(tmp_path, monkeypatch):
    """The first call writes the compiled program beside the exported one, and JAX's cache
    keeps no second copy of it; a later process (here: the programs forgotten) runs it."""
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        expected = _program.jitted(pair, scaled, 3)
        with compilation_cache(folder=tmp_path):
            _program(pair, scaled, 3)
        assert len(_executable_files(tmp_path)) == 1
        assert [p.name for p in tmp_path.iterdir()] == [PROGRAMS]  # no entry of JAX's
        _forget()
        _refuse_compiling(monkeypatch)
        with compilation_cache(folder=tmp_path):
            out = _program(pair, scaled, 3)
    _assert_same(out, expected)


def test_a_damaged_executable_is_compiled_and_written_again(tmp_path, monkeypatch):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        with compilation_cache(folder=tmp_path):
            expected = _program(pair, scaled, 2)
        (path,) = _executable_files(tmp_path)
        damage_of_each_kind = (
            b'{"format": 2, "compile_options": ""}\nnot an executable',
            path.read_bytes().replace(b'"format": 2', b'"format": 1', 1),  # no options kept
            b'{"format": 99}\n',
            b"no header",
        )
        for damage in damage_of_each_kind:
            path.write_bytes(damage)
            _forget()
            with compilation_cache(folder=tmp_path):
                _assert_same(_program(pair, scaled, 2), expected)
            _forget()
            with monkeypatch.context() as patch:  # written again: read back, not compiled
                _refuse_compiling(patch)
                with compilation_cache(folder=tmp_path):
                    _assert_same(_program(pair, scaled, 2), expected)


def test_a_program_jax_cache_served_runs_but_is_not_written_as_an_executable(tmp_path, monkeypatch):
    """jaxlib 0.10.2 serialises an executable that JAX's cache read back without its kernels
    (running it fails: "Function ... not found"). A program in JAX's cache (as an older
    bayesvmf left it) is therefore run from there and written nowhere else, also when its
    listener of JAX's events was taken away (a probe registers it again)."""
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        expected = _program.jitted(pair, scaled, 3)
        keep_out = _executables.not_into_jax_cache
        monkeypatch.setattr(_executables, "not_into_jax_cache", contextlib.nullcontext)
        with compilation_cache(folder=tmp_path):
            _program(pair, scaled, 3)  # JAX's cache keeps it too, as before
        monkeypatch.setattr(_executables, "not_into_jax_cache", keep_out)
        (path,) = _executable_files(tmp_path)
        path.unlink()
        _forget()
        hits = _executables.cache_hits()
        jax.monitoring.unregister_event_listener(_executables._note_event)
        with compilation_cache(folder=tmp_path):
            out = _program(pair, scaled, 3)
        assert _executables.cache_hits() == hits + 1  # served by JAX's cache
    assert _executable_files(tmp_path) == []
    _assert_same(out, expected)


def test_a_program_whose_executable_cannot_be_serialised_is_kept_by_jax_cache(
    tmp_path, monkeypatch
):
    """No executable file, but JAX's cache keeps the program (it keeps none of the programs
    written as executables): a later process reads it from there instead of compiling it."""
    from jax.experimental import serialize_executable

    def refuse(compiled):
        raise NotImplementedError("serialize_executables with const_args")

    pair, scaled = _arguments()
    with jax.enable_x64(True):
        expected = _program.jitted(pair, scaled, 3)
        with monkeypatch.context() as patch:
            patch.setattr(serialize_executable, "serialize", refuse)
            with compilation_cache(folder=tmp_path):
                first = _program(pair, scaled, 3)
        assert _executable_files(tmp_path) == []
        assert [p for p in tmp_path.iterdir() if p.name != PROGRAMS]  # JAX's entry
        _forget()
        hits = _executables.cache_hits()
        with compilation_cache(folder=tmp_path):
            again = _program(pair, scaled, 3)
        assert _executables.cache_hits() == hits + 1
    _assert_same(first, expected)
    _assert_same(again, expected)


@persistent_jit
def _with_callback(x):
    TRACES.append("callback")
    host = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return host * 2.0


def test_a_program_export_cannot_hold_falls_back_once(tmp_path):
    x = jnp.linspace(0.0, 1.0, 5)
    with compilation_cache(folder=tmp_path):
        first = _with_callback(x)
        second = _with_callback(x)
    np.testing.assert_allclose(first, 2.0 * np.sin(np.asarray(x)), rtol=1e-6)
    np.testing.assert_array_equal(first, second)
    assert _files(tmp_path) == []  # a host callback cannot be serialised: not written
    assert TRACES == ["callback", "callback"]  # the failed export, then the plain jit once


def test_under_tracing_it_is_the_plain_function(tmp_path):
    @persistent_jit
    def double(x):
        return 2.0 * x

    with compilation_cache(folder=tmp_path):
        out = jax.jit(lambda x: double(x) + 1.0)(jnp.arange(3.0))
    np.testing.assert_array_equal(out, [1.0, 3.0, 5.0])
    assert _files(tmp_path) == []


def test_without_flatbuffers_it_is_the_plain_jit(tmp_path, monkeypatch):
    monkeypatch.setattr(_program_cache, "_serialisation_available", lambda: False)
    pair, scaled = _arguments()
    with jax.enable_x64(True), compilation_cache(folder=tmp_path):
        _program(pair, scaled, 2)
    assert _files(tmp_path) == [] and _program_cache._LOADED == {}


def _square(x):
    return x * x


@persistent_jit(static_argnames="fn")
def _apply(fn, x):
    TRACES.append(fn.__name__)
    return fn(x) + 1.0


def test_static_functions_by_name_and_unnamed_ones_not_kept(tmp_path):
    x = jnp.arange(3.0)
    with compilation_cache(folder=tmp_path):
        np.testing.assert_array_equal(_apply(_square, x), [1.0, 2.0, 5.0])
        assert len(_files(tmp_path)) == 1  # keyed by the function's module and name
        np.testing.assert_array_equal(_apply(lambda v: 2.0 * v, x), [1.0, 3.0, 5.0])
    assert len(_files(tmp_path)) == 1  # a lambda has no name to key it by: plain jit


def _compiling_threads(monkeypatch):
    """Record the name of the thread of every compilation (read back) of a program."""
    names = []
    compile_ = _program_cache._compile

    def compile_and_note(exported, options, folder, key):
        names.append(threading.current_thread().name)
        return compile_(exported, options, folder, key)

    monkeypatch.setattr(_program_cache, "_compile", compile_and_note)
    return names


def _manifests(folder):
    return sorted((folder / PROGRAMS).glob("*.manifest"))


def test_a_later_call_reads_its_programs_ahead_in_a_thread(tmp_path, monkeypatch):
    """The programs a call used are read back by the prefetch thread before the next call of
    that signature (in a new process) asks for them, in the order used, and then run."""
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        expected = [_program.jitted(pair, scaled, p) for p in (3, 2)]
        TRACES.clear()
        with compilation_cache(folder=tmp_path), prefetching("m", (pair, scaled), {}):
            _program(pair, scaled, 3)
            _program(pair, scaled, 2)
            _program(pair, scaled, 3)
        (manifest,) = _manifests(tmp_path)
        entries = json.loads(manifest.read_text())["programs"]
        assert len(entries) == 2 and all(x64 is True for _, _, x64 in entries)
        assert TRACES == [3, 2]
        _forget()
        threads = _compiling_threads(monkeypatch)
        with compilation_cache(folder=tmp_path), prefetching("m", (pair, scaled), {}):
            deadline = time.monotonic() + 60
            while len(_program_cache._LOADED) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)  # the method's own work, before it calls a program
            assert sorted(_program_cache._LOADED) == sorted(key for key, _, _ in entries)
            out = [_program(pair, scaled, p) for p in (3, 2)]
    assert TRACES == [3, 2]  # read back: no tracing
    assert threads == ["bayesvmf-prefetch"] * 2
    assert manifest.read_text() == json.dumps({"format": 1, "programs": entries})
    for got, want in zip(out, expected, strict=True):
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_call_that_raises_writes_no_manifest_and_stops_its_thread(tmp_path, monkeypatch):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        with compilation_cache(folder=tmp_path), prefetching("m", (pair,), {}):
            _program(pair, scaled, 3)
            _program(pair, scaled, 2)
        _forget()
        threads = _compiling_threads(monkeypatch)
        (manifest,) = _manifests(tmp_path)
        before = manifest.read_bytes()
        with pytest.raises(RuntimeError, match="stopped"):
            with compilation_cache(folder=tmp_path), prefetching("m", (pair,), {}):
                _program(pair, Scaled(jnp.ones(4), (4,), "b"), 5)  # another program
                raise RuntimeError("stopped")
    assert not any(t.name == "bayesvmf-prefetch" for t in threading.enumerate())
    assert manifest.read_bytes() == before and len(_manifests(tmp_path)) == 1
    # the thread stops after the program it is reading: nothing is read after the block
    assert len(threads) <= 3 and len(_program_cache._PENDING) == 0


@pytest.mark.parametrize(
    "damage",
    [b"[not json", b'{"format": 1, "programs": [[1, 2]]}', b'{"format": 1, "programs": 3}'],
)
def test_a_damaged_manifest_reads_nothing_ahead_and_is_written_again(tmp_path, monkeypatch, damage):
    pair, scaled = _arguments()
    with jax.enable_x64(True):
        with compilation_cache(folder=tmp_path), prefetching("m", (pair,), {}):
            _program(pair, scaled, 3)
        (manifest,) = _manifests(tmp_path)
        good = manifest.read_bytes()
        manifest.write_bytes(damage)
        _forget()
        threads = _compiling_threads(monkeypatch)
        with compilation_cache(folder=tmp_path), prefetching("m", (pair,), {}):
            _program(pair, scaled, 3)
    assert threads == ["MainThread"] and manifest.read_bytes() == good


def test_a_call_that_read_no_program_itself_writes_no_manifest(tmp_path):
    """Calls whose programs an earlier call of the process loaded (predict on batches of
    many sizes, rows bucketed into few programs) leave no file of their own."""
    pair, scaled = _arguments()
    with jax.enable_x64(True), compilation_cache(folder=tmp_path):
        with prefetching("m", (pair,), {}):
            _program(pair, scaled, 3)
        for size in (5, 6, 7):
            with prefetching("m", (np.ones(size), pair), {}):
                _program(pair, scaled, 3)
    assert len(_manifests(tmp_path)) == 1


def test_the_signature_is_shapes_and_settings_not_seed_or_values():
    from bayesvmf.models import BayesianVMFMixture

    signature = _program_cache._signature
    X = np.ones((5, 3))
    assert signature((BayesianVMFMixture(3, random_state=0), X)) == signature(
        (BayesianVMFMixture(3, random_state=1), 2.0 * X)
    )
    assert signature((BayesianVMFMixture(3), X)) != signature((BayesianVMFMixture(4), X))
    assert signature(X) != signature(X[:4]) != signature(X.astype(np.float32))
    A = scipy.sparse.random(5, 3, density=0.5, random_state=0, format="csr")
    B = scipy.sparse.random(5, 3, density=0.2, random_state=0, format="csr")
    assert signature(A) != signature(B)  # stored entries shape the sparse programs
    assert signature([X, X[:2]]) != signature([X[:2], X])
    # nested lists are data: their numbers by type, a long list by length and first element
    rows = np.random.default_rng(0).normal(size=(40, 3))
    assert signature(rows.tolist()) == signature((2.0 * rows).tolist())
    assert signature(rows.tolist()) != signature(rows[:39].tolist())
    assert signature([1.0, 2.0]) == signature([3.0, 4.0]) != signature([3.0, 4.0, 5.0])
    # but a parameter or a keyword's value counts
    assert signature({"n_samples": 5}) != signature({"n_samples": 6})


def test_outside_a_cache_block_it_records_and_reads_nothing(tmp_path):
    pair, scaled = _arguments()
    with jax.enable_x64(True), prefetching("m", (pair,), {}):
        _program(pair, scaled, 3)
    assert not (tmp_path / PROGRAMS).exists() and _program_cache._MANIFESTS == {}


def test_arguments_on_another_device_take_the_plain_jit(tmp_path):
    """A program read back runs on the default device: an argument committed to another one,
    or a default device set by the caller, takes the plain jit (run where JAX would)."""
    script = textwrap.dedent(
        """
        import sys
        import jax, jax.numpy as jnp
        from bayesvmf._compile_cache import compilation_cache
        from bayesvmf._program_cache import persistent_jit

        @persistent_jit
        def double(x):
            return 2.0 * x

        other = jax.devices()[1]
        with compilation_cache(folder=sys.argv[1]):
            home = double(jnp.arange(3.0))
            there = double(jax.device_put(jnp.arange(3.0), other))
            with jax.default_device(other):
                default = double(jnp.arange(3.0))
        print(home.devices() == {jax.devices()[0]}, there.devices() == {other},
              default.devices() == {other}, there.tolist())
        """
    )
    env = {ENV_DISABLE: None, **TWO_CPU_DEVICES}
    out = run_python(script, tmp_path, env=env)
    assert out.split() == ["True", "True", "True", "[0.0,", "2.0,", "4.0]"]


class _Unshaped:
    """An argument whose shape cannot be read (its description raises)."""

    dtype = "float64"

    @property
    def shape(self):
        raise RuntimeError("no shape")


def test_scalar_arguments_by_value_and_undescribable_ones_read_nothing(tmp_path):
    pair, scaled = _arguments()
    with jax.enable_x64(True), compilation_cache(folder=tmp_path):
        for power in (2, 3):  # sample(2), sample(3): two signatures, two manifests
            with prefetching("m", (power,), {}):
                _program(pair, scaled, power)
        assert len(_manifests(tmp_path)) == 2
        with prefetching("m", (_Unshaped(),), {}):  # the method runs; nothing is recorded
            _program(pair, scaled, 4)
    assert len(_manifests(tmp_path)) == 2 and TRACES == [2, 3, 4]
