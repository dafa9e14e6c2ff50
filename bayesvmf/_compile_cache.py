"""A persistent compilation cache, on during the estimators' methods and off otherwise.

Most of a first fit in a new Python process is XLA compiling the fit's programs (issue 19:
a B-vMFmix fit took 9.7-16.4 s the first time against 2.8 s after). JAX can keep compiled
programs on disk and read them back in later processes (its persistent compilation cache),
but it is off unless ``jax_compilation_cache_dir`` is set, a global setting that a library
must not change on import. :func:`compilation_cache` turns it on only while a block runs,
in the user cache folder of bayesvmf (:func:`bayesvmf.datasets.cache_dir`, ``/jax``), and
puts every setting back afterwards. Every estimator method that fits or evaluates
(``fit``, ``predict``, ``score_samples``, ... :data:`CACHED_METHODS`) runs inside it
(:func:`cached`, applied by :class:`bayesvmf._base.BaseVMFEstimator` to its subclasses).
The XLA options of the jitted programs (:data:`JIT_OPTIONS`, and :func:`jit`, which adds
:data:`SMALL_PROGRAM_OPTIONS` for small arguments, :data:`TINY_PROGRAM_OPTIONS` too for tiny
ones) and their trace counters
(:func:`count_trace`) live here too, so that every module that compiles a program, the data
layer included, finds them without importing the mixture machinery.

How JAX 0.10 reads and writes the cache (its modules ``compilation_cache`` and ``compiler``),
and why the block does what it does:

* JAX opens the cache folder once, at the first compilation after a reset, with the settings
  of that moment, and keeps it open; :func:`compilation_cache` therefore resets JAX's handle
  on entry and on exit (``reset_cache``), so the folder is used exactly inside the block.
  None of the settings it changes is part of a jitted function's in-memory cache key: a
  program compiled inside the block is reused outside it without a new compilation.
* JAX writes only programs that took at least ``jax_persistent_cache_min_compile_time_secs``
  (default 1 s) to compile; most of a fit's programs take less, so the block sets 0.
* JAX never writes a program that calls back into Python (``jax.pure_callback``: its host
  callbacks cannot be serialised), whatever the settings.
* There is no size bound (JAX's eviction needs the ``filelock`` package); delete the folder
  to reclaim its space.
* Compiled programs are not traces: a new process still traces each program before it finds
  its compilation here. The fit programs made with
  :func:`bayesvmf._program_cache.persistent_jit` keep their traces in the same folder
  (``programs/``), read back inside this block (:func:`program_folder`).

The cache changes nothing when

* the environment variable ``BAYESVMF_NO_COMPILATION_CACHE`` is set to anything but
  ``""`` or ``"0"``, or :func:`set_compilation_cache` turned it off, or an enclosing
  ``compilation_cache(False)`` block did;
* the session already has a cache folder (``jax_compilation_cache_dir``: the user's own, or
  an enclosing :func:`compilation_cache`) or has turned the cache off
  (``jax_enable_compilation_cache=False``);
* the folder cannot be created (a read-only home): the programs are then compiled as usual.

The cache is trusted code: do not point it at a folder that others may write to (JAX's
warning in :func:`jax.experimental.compilation_cache.compilation_cache.set_cache_dir`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

from bayesvmf._program_cache import prefetching

__all__ = [
    "CACHED_METHODS",
    "ENV_DISABLE",
    "JIT_OPTIONS",
    "TRACE_COUNTS",
    "SMALL_PROGRAM_OPTIONS",
    "SMALL_PROGRAM_SIZE",
    "TINY_PROGRAM_OPTIONS",
    "TINY_PROGRAM_SIZE",
    "argument_size",
    "count_trace",
    "cached",
    "compilation_cache",
    "jit",
    "program_tier",
    "set_compilation_cache",
]

#: Trace counters: each jitted step increments its entry when (and only when) it is traced,
#: so tests can assert that nothing recompiles across iterations, restarts or path steps.
TRACE_COUNTS: dict[str, int] = {}


#: XLA options of the jitted EM programs. The special functions inline a few hundred lines of
#: HLO each; skipping LLVM's expensive passes halves the compile time of an EM step (measured:
#: about 8 s -> 4 s on CPU for d = 100, K = 3, 4 restarts) at an unchanged run time (1.05 vs
#: 0.94 ms per step): these programs are memory bound, not limited by vectorised arithmetic.
JIT_OPTIONS: dict[str, Any] = {"xla_llvm_disable_expensive_passes": True}


#: XLA options added for programs on small arguments (:func:`jit`): XLA's elemental IR
#: emitter instead of its MLIR fusion emitters. It compiles about 30% faster (four test
#: files: 248 -> 173 s; in a profiled small B-vMFmix fit the fusion emitters' MLIR passes
#: took 16% of the samples, LLVM 22%) and runs 10-30% slower on large data (dense
#: 50,000 x 256, K = 32: SparseVMFMixture's fit 0.28-0.31 -> 0.33-0.37 s, B-vMFmix's
#: 0.24-0.33 -> 0.32-0.40 s), so it is used where a program's run is short beside its
#: compilation: up to :data:`SMALL_PROGRAM_SIZE`.
SMALL_PROGRAM_OPTIONS: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False}

#: Arguments of at most this many entries (:func:`argument_size`) compile with
#: :data:`SMALL_PROGRAM_OPTIONS` on the CPU (docs/design.md section 5 has the measurements).
SMALL_PROGRAM_SIZE = 2**20

#: XLA options added, on top of :data:`SMALL_PROGRAM_OPTIONS`, for programs on tiny
#: arguments: LLVM's optimisation level 2 instead of XLA's default 3. Small fits of four
#: models and a Gibbs chain (300 x 20, 500 x 50) compiled in 12.3-12.9 s instead of
#: 15.1-16.2 s with it on every program, and their programs ran as fast at this size (500 x
#: 50, per fit after the first: SparseVMFMixture 0.034 s against 0.029 s, B-vMFmix 0.059 s
#: both, the Gibbs chain 0.92 s against 0.95 s). On larger data its programs run slower
#: (SparseVMFMixture on dense 4,000 x 200: 0.15-0.26 s per fit against 0.08-0.15 s), so it
#: stops at :data:`TINY_PROGRAM_SIZE` (docs/design.md section 5).
TINY_PROGRAM_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 2}

#: Arguments of at most this many entries compile with :data:`TINY_PROGRAM_OPTIONS` too.
TINY_PROGRAM_SIZE = 2**16


def argument_size(tree) -> int | None:
    """Return the number of entries of the arrays in ``tree``; None if one is traced.

    An object with a ``program_size`` attribute counts that many: sparse data kept on the
    host, whose entries are not leaves (:class:`bayesvmf._data.SparseData`), and dense
    data, which count their entries twice (:class:`bayesvmf._data.DenseData`); leaves
    without a shape (static arguments, None) count 0.
    """
    total = 0

    def sized(node):
        return hasattr(type(node), "program_size")

    for leaf in jax.tree.leaves(tree, is_leaf=sized):
        if sized(leaf):
            if any(isinstance(inner, jax.core.Tracer) for inner in jax.tree.leaves(leaf)):
                return None
            total += int(leaf.program_size)
        elif isinstance(leaf, jax.core.Tracer):
            return None
        else:
            shape = getattr(leaf, "shape", None)
            total += 0 if shape is None else math.prod(shape)
    return total


@functools.cache
def _on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def _top_level() -> bool:
    """Whether no trace is running: JAX refuses ``compiler_options`` on a nested jit.

    A call inside another function's trace may have no traced argument (NumPy constants),
    so the arguments alone cannot tell. JAX has no public test for this; where its private
    one (``jax._src.core.trace_state_clean``, jax 0.10) is missing, every call is taken as
    nested and gets the options of large arguments.
    """
    from jax._src import core

    clean = getattr(core, "trace_state_clean", None)
    return clean is not None and clean()


def program_tier(tree) -> int:
    """Return which XLA options a program on the arguments ``tree`` compiles with.

    2 (:data:`SMALL_PROGRAM_OPTIONS` and :data:`TINY_PROGRAM_OPTIONS`) on the CPU for
    concrete arguments of at most :data:`TINY_PROGRAM_SIZE` entries, 1
    (:data:`SMALL_PROGRAM_OPTIONS`) up to :data:`SMALL_PROGRAM_SIZE`, outside any trace;
    0 (the options of large arguments) otherwise: larger arguments, calls under tracing
    (the program is then part of another, whose options apply) and other backends.
    """
    if not _on_cpu() or not _top_level():
        return 0
    size = argument_size(tree)
    if size is None or size > SMALL_PROGRAM_SIZE:
        return 0
    return 1 if size > TINY_PROGRAM_SIZE else 2


def jit(fun: Callable | None = None, *, compiler_options: dict | None = None, **jit_kwargs):
    """``jax.jit`` with XLA options chosen per call by the size of the arguments.

    One jitted function per :func:`program_tier`: ``compiler_options`` alone (large
    arguments), with :data:`SMALL_PROGRAM_OPTIONS` added (small ones), and with
    :data:`TINY_PROGRAM_OPTIONS` added to those (tiny ones). A program is compiled per
    argument shape anyway, so the choice costs no compilation; a process that calls one
    function on arguments of several sizes compiles each shape once, as before. Usable as
    ``@jit``, ``@jit(static_argnames=...)`` or ``jit(fun, ...)``; ``lower`` lowers with the
    options the arguments would get, ``variants`` is the tuple (large, small, tiny) of
    jitted functions, ``options`` the tuple of their XLA options, and ``_cache_size``
    counts the programs of all three.
    """
    if fun is None:
        return functools.partial(jit, compiler_options=compiler_options, **jit_kwargs)
    large = dict(compiler_options or {})
    small = {**large, **SMALL_PROGRAM_OPTIONS}
    options = (large, small, {**small, **TINY_PROGRAM_OPTIONS})
    variants = tuple(jax.jit(fun, compiler_options=o or None, **jit_kwargs) for o in options)

    def pick(args, kwargs):
        return variants[program_tier((args, kwargs))]

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return pick(args, kwargs)(*args, **kwargs)

    call.lower = lambda *args, **kwargs: pick(args, kwargs).lower(*args, **kwargs)
    call.variants = variants
    call.options = options
    # programs compiled, every variant (JAX's own counter, which tests read)
    call._cache_size = lambda: sum(v._cache_size() for v in variants)
    return call


def count_trace(name: str) -> None:
    """Increment the trace counter ``name`` (call it inside a function that gets jitted)."""
    TRACE_COUNTS[name] = TRACE_COUNTS.get(name, 0) + 1


#: Environment variable that turns the cache off when set to anything but "" or "0".
ENV_DISABLE = "BAYESVMF_NO_COMPILATION_CACHE"

#: Estimator methods that run inside :func:`compilation_cache` (those that compile programs).
CACHED_METHODS = (
    "fit",
    "fit_predict",
    "fit_transform",
    "partial_fit",
    "path",
    "predict",
    "predict_proba",
    "score_samples",
    "score",
    "transform",
    "sample",
    "bic",
    "aic",
)

#: The JAX settings :func:`compilation_cache` changes, restored on exit. JAX sets the third
#: itself when it opens a cache folder.
_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)

#: The process-wide default of the estimators (:func:`set_compilation_cache`).
_DEFAULT: dict = {"enabled": True, "folder": None}

#: False inside a ``compilation_cache(False)`` block, so that the estimators' own blocks
#: nested in it stay off (``bayesvmf demo --no-cache``); None elsewhere.
_ENCLOSING: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "bayesvmf_compilation_cache", default=None
)


def set_compilation_cache(enabled: bool = True, folder=None) -> None:
    """Turn the estimators' persistent compilation cache on or off, or move it.

    By default every estimator of bayesvmf keeps the programs XLA compiles for it on disk,
    in ``cache_dir() / "jax"`` (:func:`bayesvmf.datasets.cache_dir`: ``$BAYESVMF_CACHE``,
    ``$XDG_CACHE_HOME/bayesvmf`` or ``~/.cache/bayesvmf``), so that a new Python process
    reads them back instead of compiling them again. JAX's own configuration is changed
    only while an estimator method runs, and restored after it. This function sets that
    default for the rest of the process; the environment variable
    ``BAYESVMF_NO_COMPILATION_CACHE=1`` turns the cache off whatever is set here, and a
    ``jax_compilation_cache_dir`` set by the session itself is always used as it is.

    Parameters
    ----------
    enabled : bool, default True
        False: compile every program in each process, write nothing.
    folder : str or path-like, optional
        The folder of the cache; None for the default above.

    Examples
    --------
    (Not run as a doctest: it changes the process-wide default.)

    >>> import bayesvmf
    >>> bayesvmf.set_compilation_cache(False)  # no programs on disk  # doctest: +SKIP
    >>> bayesvmf.set_compilation_cache()  # back to the default  # doctest: +SKIP
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool; got {enabled!r}.")
    _DEFAULT["enabled"] = enabled
    _DEFAULT["folder"] = None if folder is None else Path(folder)


def _disabled_by_environment() -> bool:
    return os.environ.get(ENV_DISABLE, "") not in ("", "0")


@contextlib.contextmanager
def compilation_cache(enabled: bool | None = None, folder=None) -> Iterator[Path | None]:
    """Keep XLA's compiled programs on disk while the block runs; yield the folder in use.

    Every program compiled inside the block is written to the folder, whatever its compile
    time (JAX's own default skips programs that compile in under a second, most of a fit's),
    and programs found there are read instead of compiled. On exit the JAX settings are
    restored and JAX's cache handle reset, so that compilations after the block see the
    session's own configuration again.

    Parameters
    ----------
    enabled : bool or None, default None
        False: change nothing, and keep the blocks nested in this one off. None: the
        enclosing block's choice, else the default of :func:`set_compilation_cache`.
    folder : str or path-like, optional
        Cache folder; default the one of :func:`set_compilation_cache`, else
        ``cache_dir() / "jax"`` (:func:`bayesvmf.datasets.cache_dir`: ``$BAYESVMF_CACHE``,
        ``$XDG_CACHE_HOME/bayesvmf`` or ``~/.cache/bayesvmf``).

    Yields
    ------
    pathlib.Path or None
        The folder the programs are read from and written to: this one, the session's own
        when it already had one, or None when no cache is in use (see the module notes).

    Examples
    --------
    >>> from bayesvmf._compile_cache import compilation_cache
    >>> with compilation_cache(enabled=False) as folder:
    ...     print(folder)
    None
    """
    current = jax.config.jax_compilation_cache_dir
    if current:  # the session's own cache, or an enclosing block's: leave it as it is
        yield Path(current)
        return
    if enabled is None:
        enabled = _ENCLOSING.get()
        enabled = _DEFAULT["enabled"] if enabled is None else enabled
    if not enabled or _disabled_by_environment() or not jax.config.jax_enable_compilation_cache:
        token = _ENCLOSING.set(False) if not enabled else None
        try:
            yield None
        finally:
            if token is not None:
                _ENCLOSING.reset(token)
        return
    if folder is None:
        from bayesvmf.datasets import cache_dir

        folder = _DEFAULT["folder"] or cache_dir() / "jax"
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # not writable: compile as usual
        yield None
        return

    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    before = {name: getattr(jax.config, name) for name in _SETTINGS}
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # JAX opens its cache at the first compilation after a reset, with the settings of then
    jax_cache.reset_cache()
    token = _PROGRAM_FOLDER.set(folder)
    try:
        yield folder
    finally:
        _PROGRAM_FOLDER.reset(token)
        for name, value in before.items():
            jax.config.update(name, value)
        jax_cache.reset_cache()


#: The folder of the innermost :func:`compilation_cache` block that set one (not the
#: session's own): where :mod:`bayesvmf._program_cache` keeps its traced programs.
_PROGRAM_FOLDER: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "bayesvmf_program_folder", default=None
)


def program_folder() -> Path | None:
    """Return the folder of the :func:`compilation_cache` block running now, if it set one.

    None outside such a block, and inside one that found the session's own cache folder
    (programs are then traced as usual: :mod:`bayesvmf._program_cache`).
    """
    return _PROGRAM_FOLDER.get()


#: Weak references (host buffer, JAX array sharing it) to the copies of
#: :func:`bayesvmf._data._device_put_aligned` whose buffers may still be held.
_SHARED: list[tuple[weakref.ref, weakref.ref]] = []
_SHARED_LOCK = threading.Lock()

#: Seconds :func:`cached` waits, when a method returns, for JAX to let go of the host
#: buffers of the copies it deleted (:func:`release_host_buffers`).
RELEASE_WAIT = 1.0


def share_host_buffer(buffer, array) -> None:
    """Record that ``array`` shares the host memory ``buffer`` (see release_host_buffers)."""
    with _SHARED_LOCK:
        _SHARED.append((weakref.ref(buffer), weakref.ref(array)))


def release_host_buffers(*, wait: float = 0.0) -> None:
    """Let go of the host buffers of deleted arrays that JAX has not released yet.

    A JAX array that shares a NumPy buffer (``device_put(..., may_alias=True)``, the data
    copies of :func:`bayesvmf._data._device_put_aligned`) holds a reference to it, and when
    the array is deleted JAX does not drop that reference at once: it queues it until its
    next "garbage collection", which runs on Python's garbage collections (``jax._src.lib``'s
    ``gc`` callback), in ``device_put`` and in jitted calls. A fit's input check and copies
    are NumPy alone, so the copies of the fit before were still held when the next fit
    allocated its own: two fits back to back held both (SparseVMFMixture, dense 50,000 x
    256: 2 x 51 MB of float32 copies), and the second fit's copies went to fresh memory, slow
    to touch the first time (on the 2-core benchmark machine they took 0.17-0.20 s in second
    fits, 0.03 s in later ones; docs/design.md section 5). Called before each new copy and
    when an estimator method returns (:func:`cached`), so that a fit's copies are freed
    then. JAX has no public call for this; where its private one (``collect_garbage`` of
    ``jax._src.lib._jax``, jaxlib 0.10) is missing, this does nothing.

    A deleted array's buffer is queued only once the computations dispatched on it have
    finished, and JAX runs them asynchronously: on a loaded machine one could still be
    running when the method returned (the suite, two workers on two cores: the copy of a
    300-row fit was still held after it, in about one new process of five under three
    busy processes). ``wait`` > 0: while some deleted copy recorded by
    :func:`share_host_buffer` is still held, collect again every millisecond, for at most
    ``wait`` seconds (a copy whose array is alive is not waited for).
    """
    from jax._src import lib

    collect = getattr(getattr(lib, "_jax", None), "collect_garbage", None)
    if collect is None:
        return
    collect()
    deadline = time.monotonic() + wait
    while True:
        with _SHARED_LOCK:
            _SHARED[:] = [pair for pair in _SHARED if pair[0]() is not None]
            pending = any(array() is None for _, array in _SHARED)
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(1e-3)
        collect()


def cached(method: Callable) -> Callable:
    """Return ``method`` running inside :func:`compilation_cache` (its default settings).

    Inside that block, :func:`bayesvmf._program_cache.prefetching` reads the programs the
    last call of the same signature used ahead, in a thread.

    Used by :class:`bayesvmf._base.BaseVMFEstimator` on the :data:`CACHED_METHODS` of its
    subclasses; nested calls (``fit`` calling ``fit_predict``) cost one attribute read.

    The wrapper is a frame of its own between the caller and the method, which would move
    every warning the package emits with a ``stacklevel`` meant for the caller onto the
    wrapper. The outermost call therefore records the warnings and emits each again after
    the method: those raised inside bayesvmf at the caller's line (where their
    ``stacklevel`` meant them to be), the others (JAX's, NumPyro's) where they were raised.
    A warning that the filters turn into an error is raised then, after the method; when
    the method itself raised, its exception is the one that propagates. Because the
    recording and the cache settings are process-wide, the outermost calls of different
    threads run one at a time (a lock): estimator methods are thread-safe but not
    concurrent (JAX parallelises inside each call). When the outermost call ends, the host
    buffers of the arrays it deleted are released (:func:`release_host_buffers`).
    """
    if getattr(method, "_bayesvmf_cached", False):
        return method

    @functools.wraps(method)
    def run_cached(*args, **kwargs):
        if _INSIDE.get():
            return method(*args, **kwargs)
        token = _INSIDE.set(True)
        # catch_warnings and JAX's cache settings are process-wide: one thread at a time
        # (two interleaved recording blocks would leave the process swallowing warnings)
        with _LOCK:
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    with compilation_cache(), prefetching(method.__qualname__, args, kwargs):
                        result = method(*args, **kwargs)
            except BaseException:
                with contextlib.suppress(Warning):
                    _emit_again(caught, sys._getframe(1))
                raise
            finally:
                _INSIDE.reset(token)
                # on return the method's data copies are unreferenced: let JAX drop its hold
                # on their host buffers, so that they are freed now (after an exception the
                # traceback keeps them until it goes), once the computations on them finished
                release_host_buffers(wait=RELEASE_WAIT)
            _emit_again(caught, sys._getframe(1))
        return result

    run_cached._bayesvmf_cached = True
    return run_cached


#: Serialises the outermost wrapped calls of all threads (the recording of warnings and
#: JAX's cache settings are process-wide state).
_LOCK = threading.RLock()

#: True while an estimator method runs inside :func:`cached` (the outermost one records).
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "bayesvmf_cached_method", default=False
)

#: Warnings raised in these files belong to the caller of the estimator method.
_PACKAGE_FILES = (
    str(Path(__file__).resolve().parent) + os.sep,
    str(Path(__file__).resolve().parents[1] / "models") + os.sep,
)


def _emit_again(caught: list, caller) -> None:
    """Emit the recorded warnings again, the package's at the ``caller`` frame's line."""
    registry = caller.f_globals.setdefault("__warningregistry__", {})
    for record in caught:
        if os.path.abspath(record.filename).startswith(_PACKAGE_FILES):
            warnings.warn_explicit(
                record.message,
                record.category,
                caller.f_code.co_filename,
                caller.f_lineno,
                module=caller.f_globals.get("__name__"),
                registry=registry,
            )
        else:
            # where it was raised; passing module=None explicitly would make CPython drop
            # the warning (scikit-learn's feature-name warning vanished that way)
            warnings.warn_explicit(record.message, record.category, record.filename, record.lineno)
