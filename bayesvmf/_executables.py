"""Compiled programs kept on disk as executables, read back with the options of their compilation.

:mod:`bayesvmf._program_cache` keeps each program of the fits as its :mod:`jax.export` trace.
Read back, that trace still costs a new process a lowering (0.12 s for the eight programs
of a B-vMFmix fit, dense 50,000 x 256, K = 32) and a compilation through JAX's cache (its
key, its file, then the deserialisation: 0.31 s). The executable itself, kept in a file of
its own (:func:`path`), is read back by the deserialisation alone (0.25 s for the eight).

What reading an executable back must do that lowering a program did as a side effect, in
jaxlib 0.10.2 on the CPU:

- Give jaxlib's LAPACK kernels their LAPACK functions (:func:`_initialise_lapack`). JAX
  does it when it lowers a linear-algebra operation; a process that reads every program
  back lowers none, and B-vMFmix's bounding scheme (an LU factorisation in its VI step)
  called a null ``dgetrf`` and died with SIGSEGV. Session 22 met that crash, blamed the
  missing compile options (below) and reverted the executables; session 24 found the null
  pointer with gdb.
- Deserialise with the *compile options* the program was compiled with, as JAX's own cache
  does (:func:`jax.experimental.serialize_executable.deserialize_and_load` passes none).
  Each file holds them (:func:`compile_options`; tests/test_executables.py checks that they
  are, byte for byte, what JAX's ``jit`` passes to XLA).

And one defect to avoid: an executable that JAX's persistent cache read back serialises
without its kernels, and running what is read from it fails (``Function ... not found``).
So only an executable XLA compiled in this process is written (:func:`cache_hits` tells
which), and JAX's cache keeps no second copy of these programs (:func:`not_into_jax_cache`),
which would serve a later export of the same program (an edited or upgraded package) and
leave it unwritable.

The file: a header line of JSON (format, compile options), then the executable in the format
of :mod:`jax.experimental.serialize_executable`, a pickle holding machine code. The cache is
trusted code, as JAX's compilation cache is: do not point it at a folder others may write
to. (The estimators' saved models are never pickles: :mod:`bayesvmf.results`.)

JAX has no public interface for the compile options or for deserialising with them; this
module uses private ones (``jax._src.compiler.get_compile_options``, the unpickler of
``serialize_executable``, ``xla_client.CompileOptions`` and the thread-local setting of
:func:`not_into_jax_cache`), within the pinned jax 0.10. If one of them is missing or
fails, :func:`read` and :func:`write` do nothing and the program is compiled through JAX's
cache, as before.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import threading
from pathlib import Path

import jax
import numpy as np

__all__ = ["cache_hits", "compile_options", "not_into_jax_cache", "path", "read", "write"]

#: Format of the executable files (a header line of JSON, then the executable as
#: :mod:`jax.experimental.serialize_executable` writes it). 2: the header holds the compile
#: options (format 1, session 22, had none).
FORMAT = 2


def path(folder: Path, key: str) -> Path:
    """Return the file of program ``key``'s executable for this platform and XLA flags.

    The program key names the backend and the versions of jax and jaxlib; the executable
    also depends on what JAX's own cache key adds: the platform version, the device kind
    and the ``XLA_FLAGS`` of the process.
    """
    return folder / f"{key}.{_tag()}.xla"


def home_device():
    """Return the device programs read back run on: the process's default one."""
    return jax.local_devices()[0]


@functools.cache
def _tag() -> str:
    home = home_device()
    text = repr((home.client.platform_version, home.device_kind, os.environ.get("XLA_FLAGS", "")))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compile_options(options: dict, n_inputs: int, n_outputs: int):
    """Return the compile options ``jax.jit`` compiles a one-device program with.

    What ``jax._src.interpreters.pxla.create_compile_options`` builds for a program on the
    home device whose ``n_inputs`` arguments and ``n_outputs`` results have no sharding
    given (sharding may be propagated to each) and whose ``jit`` has the XLA options
    ``options``: the programs of :func:`bayesvmf._program_cache.persistent_jit`, compiled
    from shapes alone.
    """
    from jax._src import compiler

    home = home_device()
    result = compiler.get_compile_options(
        num_replicas=1,
        num_partitions=1,
        device_assignment=np.array([[home]], dtype=object),
        env_options_overrides=dict(options),
        backend=home.client,
    )
    result.parameter_is_tupled_arguments = False
    build = result.executable_build_options
    build.allow_spmd_sharding_propagation_to_parameters = [True] * n_inputs
    build.allow_spmd_sharding_propagation_to_output = [True] * n_outputs
    return result


def write(file: Path, compiled, exported, options: dict) -> bool:
    """Write ``compiled`` (``exported`` compiled with XLA options ``options``) to ``file``.

    Return False when JAX cannot serialise it or its compile options (constants passed
    beside the arguments, a private interface gone); the caller then lets JAX's cache keep
    the program. A folder that cannot be written is not such a failure: JAX's cache, in the
    same folder, could not keep it either.
    """
    from jax.experimental import serialize_executable

    try:
        blob, _, _ = serialize_executable.serialize(compiled)
        built = compile_options(options, len(exported.in_avals), len(exported.out_avals))
        encoded = base64.b64encode(built.SerializeAsString()).decode("ascii")
    except Exception:  # e.g. constants passed beside the arguments
        return False
    header = json.dumps({"format": FORMAT, "compile_options": encoded}).encode()
    _write_file(file, header + b"\n" + blob)
    return True


def read(file: Path, exported):
    """Return the executable in ``file`` as a ``Compiled`` for the home device, or None.

    None when the file is absent, damaged or of another format (an older one without its
    compile options among them).
    """
    from jax._src.lib import xla_client
    from jax.experimental import serialize_executable

    class Unpickler(serialize_executable._JaxPjrtUnpickler):
        """JAX's unpickler of executables, deserialising with the program's compile options."""

        def __init__(self, handle, backend, devices, options):
            super().__init__(handle, backend, devices)
            self.options = options

        def persistent_load(self, pid):
            if pid[0] == "exec":
                return self.backend.deserialize_executable(
                    pid[1], self.execution_devices, self.options
                )
            return super().persistent_load(pid)

    try:
        header, blob = file.read_bytes().split(b"\n", 1)
        meta = json.loads(header)
        if meta.get("format") != FORMAT:
            return None
        _initialise_lapack()
        options = xla_client.CompileOptions.ParseFromString(
            base64.b64decode(meta["compile_options"])
        )
        home = home_device()
        unpickler = Unpickler(io.BytesIO(blob), home.client, [home], options)
        unloaded, args_info_flat, no_kwargs = unpickler.load()
        args_info = exported.in_tree.unflatten(args_info_flat)
        return jax.stages.Compiled(
            unloaded.load(), [], args_info, exported.out_tree, no_kwargs=no_kwargs
        )
    except Exception:  # absent, damaged or foreign: compile (and overwrite it)
        return None


@functools.cache
def _initialise_lapack() -> None:
    """Give jaxlib's LAPACK kernels their LAPACK functions, as lowering a program would.

    jaxlib's CPU kernels for linear algebra (``lapack_dgetrf_ffi`` and the others) call
    LAPACK through function pointers that ``jaxlib.lapack`` fills only when JAX lowers a
    linear-algebra operation (``prepare_lapack_call``). An executable read back is never
    lowered: in a new process whose programs all came from files, the VI step of B-vMFmix's
    bounding scheme called a null ``dgetrf`` and the process died with SIGSEGV (found in
    session 24 with gdb; session 22 had blamed the compile options, and its check with "the
    options of a fresh lowering" had lowered the program, and so filled the pointers).
    """
    from jaxlib import lapack

    lapack.prepare_lapack_call("getrf_ffi", np.dtype(np.float64))


def _write_file(file: Path, content: bytes) -> None:
    from bayesvmf._program_cache import _write

    _write(file, content)


def not_into_jax_cache():
    """Return a block in which JAX's persistent cache keeps none of this thread's programs.

    Kept twice, a program would also be served by JAX's cache to a later export of the same
    program under another key (an edited or upgraded package), which cannot be written as an
    executable then (module notes). JAX has no public scoped setting for it; where the
    private one (``jax._src.config``, jax 0.10, a setting of this thread) is missing, JAX
    writes the program too, and such later exports keep JAX's cache.
    """
    from jax._src import config

    setting = getattr(config, "persistent_cache_min_compile_time_secs", None)
    return setting(float("inf")) if callable(setting) else contextlib.nullcontext()


#: The event JAX records when its persistent cache serves a compilation.
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

#: An event of our own that tells whether :func:`_note_event` still listens.
_PROBE_EVENT = "/bayesvmf/program_cache/probe"

#: Guards the listener's registration between threads.
_LOCK = threading.Lock()


class _Hits(threading.local):
    """Per thread: the count of JAX cache hits, and whether the probe reached the listener."""

    count = 0
    probed = False


_HITS = _Hits()


def _note_event(event: str, **kwargs) -> None:
    if event == _CACHE_HIT_EVENT:
        _HITS.count += 1
    elif event == _PROBE_EVENT:
        _HITS.probed = True


def cache_hits() -> int:
    """Return how many compilations JAX's persistent cache has served in this thread.

    Through a listener of :mod:`jax.monitoring`, registered on first use and registered
    again if someone cleared the listeners (a probe event finds out): a listener missing
    when a hit happens would let a broken executable be written (module notes). It is never
    unregistered, so that no thread iterates over a list another one shortens.
    """
    _HITS.probed = False
    jax.monitoring.record_event(_PROBE_EVENT)
    if not _HITS.probed:
        with _LOCK:
            jax.monitoring.record_event(_PROBE_EVENT)  # another thread may have registered it
            if not _HITS.probed:
                jax.monitoring.register_event_listener(_note_event)
    return _HITS.count
