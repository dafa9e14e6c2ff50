"""Traced programs kept on disk beside the compiled ones, so that a new process skips tracing.

The persistent compilation cache (:mod:`bayesvmf._compile_cache`) saves XLA's *compilation*
in a new Python process, not what comes before it: tracing the Python function into a
jaxpr and lowering that to StableHLO. Measured (dense 50,000 x 256, K = 32, a second process
after one that filled the cache): the first ``SparseVMFMixture(32).fit`` took 1.8 s against
0.4 s for the next, most of the difference tracing and lowering; the seeding program alone
took 0.65 s the first time against 0.06 s after, and 0.23 s when read back as below.

:func:`persistent_jit` is ``jax.jit`` for the programs of the fits, with one more level of
cache. Inside an estimator's :func:`bayesvmf._compile_cache.compilation_cache` block with a
folder of its own, a call with concrete arrays

1. looks for the program of its key (below) in this process, then in ``<folder>/programs``:
   a program serialised by :mod:`jax.export` (StableHLO, its argument and result trees and
   shapes; a flatbuffer, not pickle), read back with ``jax.export.deserialize``;
2. otherwise traces and lowers the function once with ``jax.export.export`` and writes it
   there;
3. reads its compiled executable back from ``<folder>/programs`` (:func:`_compile`), or
   compiles it ahead of time for the shapes it was exported with (``jax.jit(exported.call)
   .lower(shapes).compile()``) with the function's compiler options (those of the call's
   size, :func:`bayesvmf._compile_cache.jit`) and writes the executable there, and runs
   that.

The first process runs the exported program too, so that every process runs the same
compiled program. Outside such a block (the cache
off, the session's own cache folder, ``BAYESVMF_NO_COMPILATION_CACHE=1``), under tracing,
for arrays on several devices or committed to a device other than the default one, under a
``jax.default_device`` of the caller, or for a program :mod:`jax.export` cannot serialise (a
host callback), the function is the plain ``jax.jit`` of before; a failure is remembered
for the rest of the process, so it costs one trace.

Reading a program back still costs a new process time: XLA rebuilds the compiled program
from its executable file (:mod:`bayesvmf._executables`; 0.25-0.30 s for the eight programs of
a B-vMFmix fit, dense 50,000 x 256, K = 32), each when first called. :func:`prefetching`,
around every estimator method, reads them ahead in a thread (manifests, below) while the
method validates and copies its data and runs its first programs.

The files of ``<folder>/programs``: ``<key>.jaxexport`` (the exported program), ``<key>.<tag>
.xla`` (its executable, for the platform and XLA flags of ``<tag>``, with the compile options
it was compiled with) and ``<hash>.manifest`` (below). JAX's own cache keeps no second copy
of these programs.

The key of a program: the function's module and name, its static arguments, the tree of its
other arguments with the shape, dtype and weak type of every leaf, the x64 setting, the
backend, the versions of jax and jaxlib, the compiler options, and a hash of the sources of
the package (``bayesvmf`` and ``bayesvmf.models``), so that an edited package never runs a
program traced from older code. Pytree node types of the arguments and results (the data classes,
the states of the fits) are registered for serialisation when first met: named tuples as
such, other nodes with their static data written as JSON (a node whose static data is not
JSON, such as a device mesh, makes the program fall back). The names of these types head
the file, so that a later process registers them before reading it.

A manifest (``programs/<hash>.manifest``, JSON) lists the programs one estimator method used
with arguments of one :func:`_signature` (the estimator's class and parameters but its
seed, the shapes, dtypes and stored entries of its data), by key, compiler options and
x64 setting, in the order first called; it is written when the method returns, if it
changed.

The cache is trusted code, as JAX's compilation cache is: do not point it at a folder
others may write to. An executable file is machine code, which runs when called, in JAX's
format for executables, a pickle (:mod:`bayesvmf._executables`); the estimators' saved
models are never pickles (:mod:`bayesvmf.results`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import jax

from bayesvmf import _executables

__all__ = ["PROGRAMS", "persistent_jit"]

#: Subfolder of the compilation cache folder that holds the exported programs.
PROGRAMS = "programs"

#: Format of the program files (a header line of JSON, then the flatbuffer).
_FORMAT = 1

#: key -> the callable of an exported program, or None: the plain jit (export failed).
_LOADED: dict[str, Callable | None] = {}

#: (function, static arguments, argument tree and shapes, x64) -> file key, in this process.
_KEYS: dict[tuple, str] = {}

#: Pytree node types registered for serialisation in this process.
_REGISTERED: set[type] = set()

#: Marks a program not in :data:`_LOADED` (None there means: the plain jit).
_ABSENT = object()

#: key -> Future of a program some thread is reading or exporting now.
_PENDING: dict[str, concurrent.futures.Future] = {}

#: Guards :data:`_LOADED`, :data:`_PENDING` and :data:`_REGISTERED` between the caller's
#: thread and the prefetch thread (reentrant: registering happens inside a load).
_LOCK = threading.RLock()

#: Format of the manifests (JSON: the programs an estimator method used, in order).
_MANIFEST_FORMAT = 1


class _Recording:
    """What an estimator method has done with programs, for its manifest.

    ``used``: the programs it called, key -> (XLA options, x64), in order; ``read``: whether
    it had to read or export one itself (one not loaded when it called it).
    """

    def __init__(self):
        self.used: dict[str, tuple[dict, bool]] = {}
        self.read = False


#: The recording of the running estimator method (:func:`prefetching`).
_RECORDING: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar(
    "bayesvmf_programs_used", default=None
)

#: manifest path -> its entries, as read or written in this process.
_MANIFESTS: dict[Path, list] = {}

#: (folder, method, signatures of the arguments) -> the path of its manifest.
_MANIFEST_PATHS: dict[tuple, Path] = {}


def _active_folder() -> Path | None:
    """Return the folder of programs in use now, or None (plain ``jax.jit``)."""
    from bayesvmf._compile_cache import program_folder

    folder = program_folder()
    return folder if folder is not None and _serialisation_available() else None


@functools.cache
def _serialisation_available() -> bool:
    """Whether :mod:`jax.export` can serialise here (it needs the ``flatbuffers`` package)."""
    return importlib.util.find_spec("flatbuffers") is not None


@functools.cache
def _source_hash() -> str:
    """SHA-256 of the package's Python sources (``bayesvmf`` and ``bayesvmf.models``)."""
    import bayesvmf
    import bayesvmf.models

    digest = hashlib.sha256()
    for package in (bayesvmf, bayesvmf.models):
        root = Path(package.__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _type_name(typ: type) -> str:
    return f"{typ.__module__}:{typ.__qualname__}"


def _node_types(treedef) -> list[type]:
    """Return the pytree node types of ``treedef`` (custom nodes, named tuples), depth first."""
    found, stack = [], [treedef]
    while stack:
        node = stack.pop()
        data = node.node_data()
        if data is not None and data[0] not in (tuple, list, dict, type(None)):
            found.append(data[0])
        stack.extend(node.children())
    return found


def _to_tuples(value):
    """JSON lists back to the tuples pytree static data holds."""
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value


def _register(typ: type) -> None:
    """Register a pytree node type for :mod:`jax.export` serialisation (once, in any thread)."""
    with _LOCK:  # the prefetch thread reads files too: JAX refuses a second registration
        if typ in _REGISTERED:
            return
        name = _type_name(typ)
        if issubclass(typ, tuple) and hasattr(typ, "_fields"):
            jax.export.register_namedtuple_serialization(typ, serialized_name=name)
        else:
            jax.export.register_pytree_node_serialization(
                typ,
                serialized_name=name,
                serialize_auxdata=lambda aux: json.dumps(aux).encode(),
                deserialize_auxdata=lambda blob: _to_tuples(json.loads(blob.decode())),
            )
        _REGISTERED.add(typ)


def _import_type(name: str) -> type:
    module, qualname = name.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _static_repr(value) -> str | None:
    """Return a static argument as one text in every process (None: it has none).

    Functions (static callables) by their module and name; other values by ``repr``, unless
    it holds a memory address (an object without a stable text: the call is then not kept).
    """
    if callable(value) and hasattr(value, "__qualname__"):
        if "<" in value.__qualname__:  # a lambda or a local function: no stable name
            return None
        return f"{value.__module__}.{value.__qualname__}"
    text = repr(value)
    return None if " at 0x" in text else text


def _devices(leaf) -> int:
    """Return the number of devices a concrete array lies on (0: a tracer, not a JAX array)."""
    if not isinstance(leaf, jax.Array) or isinstance(leaf, jax.core.Tracer):
        return 0
    return len(leaf.sharding.device_set)


def _replicated(tree, sharding):
    """``tree`` with its committed one-device arrays replicated over ``sharding``'s mesh.

    A program read back from disk returns arrays committed to its device, where ``jax.jit``
    returns uncommitted ones for uncommitted arguments: such an output (the restarts' seeds,
    which the sparse mixture refines in a second program) passed beside rows sharded over
    several devices would make the plain jit refuse the call ("incompatible devices");
    placed on every device, as the plain jit places an uncommitted argument, it is accepted.
    """
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return tree
    everywhere = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())

    def place(leaf):
        if _devices(leaf) == 1 and leaf.committed:
            return jax.device_put(leaf, everywhere)
        return leaf

    return jax.tree.map(place, tree)


@functools.cache
def _home() -> frozenset:
    """Return the device set of a program read back: :func:`bayesvmf._executables.home_device`."""
    return frozenset([_executables.home_device()])


def _leaf_key(leaf) -> tuple | None:
    """(shape, dtype, weak type) of a concrete leaf the home device can take; None otherwise.

    None for a tracer, an array on several devices, and an array committed to a device
    other than the process's default one: a program read back is compiled for that device
    (:func:`_compile`), and XLA refuses arguments placed elsewhere.
    """
    if isinstance(leaf, jax.Array):
        if isinstance(leaf, jax.core.Tracer):
            return None
        if leaf.committed and leaf.sharding.device_set != _home():
            return None
    aval = jax.typeof(leaf)
    return tuple(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False))


def persistent_jit(
    fun: Callable | None = None,
    *,
    static_argnames: tuple[str, ...] | str = (),
    compiler_options: dict | None = None,
):
    """``jax.jit(fun, static_argnames=..., compiler_options=...)``, kept on disk (module notes).

    Usable as ``@persistent_jit`` or ``@persistent_jit(static_argnames=..., ...)``. Static
    arguments are named (``static_argnames``); they may be passed by position or keyword.
    The compiler options are chosen per call by the size of the arguments, as
    :func:`bayesvmf._compile_cache.jit` does; the plain jitted function of large arguments is
    the attribute ``jitted`` of the result.
    """
    if fun is None:
        return functools.partial(
            persistent_jit, static_argnames=static_argnames, compiler_options=compiler_options
        )
    from bayesvmf import _compile_cache

    statics = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    # the plain jits and XLA options of each size of arguments, as everywhere else
    sized = _compile_cache.jit(fun, static_argnames=statics, compiler_options=compiler_options)
    jitted_by_size, variants = sized.variants, sized.options
    signature = inspect.signature(fun)
    name = f"{fun.__module__}.{fun.__qualname__}"

    @functools.wraps(fun)
    def call(*args, **kwargs):
        tier = _compile_cache.program_tier((args, kwargs))
        jitted = jitted_by_size[tier]
        folder = _active_folder()
        if folder is None:
            return jitted(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        static = {k: v for k, v in bound.arguments.items() if k in statics}
        dynamic = {k: v for k, v in bound.arguments.items() if k not in statics}
        leaves, treedef = jax.tree.flatten(dynamic)
        shapes = [_leaf_key(leaf) for leaf in leaves]
        static_key = sorted((k, _static_repr(v)) for k, v in static.items())
        if (
            any(s is None for s in shapes)
            or any(r is None for _, r in static_key)
            or jax.config.jax_default_device is not None  # a program read back runs at home
        ):
            sharded = next((leaf for leaf in leaves if _devices(leaf) > 1), None)
            if sharded is not None:  # row blocks: the plain jit, with the rest beside them
                bound.arguments.update(_replicated(dynamic, sharded.sharding))
                return jitted(*bound.args, **bound.kwargs)
            return jitted(*args, **kwargs)
        # the file key (a hash over texts) once per call signature: EM calls its step every
        # iteration with the same one
        # (sparse data on the host: its entries, which choose the options, are not a shape)
        signature_key = (
            name,
            tier,
            tuple(static_key),
            treedef,
            tuple(shapes),
            jax.config.jax_enable_x64,
        )
        key = _KEYS.get(signature_key)
        if key is None:
            key = _KEYS[signature_key] = _file_key(static_key, treedef, shapes, variants[tier])
        program = _LOADED.get(key, _ABSENT)
        recording = _RECORDING.get()
        if program is _ABSENT:
            if recording is not None:
                recording.read = True
            program = _obtain(
                key,
                lambda: _load_or_export(
                    fun, static, dynamic, treedef, folder / PROGRAMS, key, variants[tier]
                ),
            )
        if program is None:
            return jitted(*args, **kwargs)
        if recording is not None and key not in recording.used:
            recording.used[key] = (variants[tier], bool(jax.config.jax_enable_x64))
        return program(dynamic)

    def _file_key(static_key, treedef, shapes, options):
        return hashlib.sha256(
            repr(
                (
                    name,
                    static_key,
                    str(treedef),
                    [_type_name(t) for t in _node_types(treedef)],
                    shapes,
                    bool(jax.config.jax_enable_x64),
                    jax.default_backend(),
                    jax.__version__,
                    _jaxlib_version(),
                    sorted(options.items()),
                    _source_hash(),
                )
            ).encode()
        ).hexdigest()

    def _load_or_export(fun, static, dynamic, treedef, folder, key, options):
        path = folder / f"{key}.jaxexport"
        exported = _read(path)
        if exported is None:
            exported = _export(fun, static, dynamic, treedef, path, options)
        if exported is None:
            return None
        return _compile(exported, options, folder, key)

    def _export(fun, static, dynamic, treedef, path, options):
        def program(arguments):
            return fun(**static, **arguments)

        from bayesvmf import _host_kernel

        try:
            for typ in _node_types(treedef):
                _register(typ)
            exported = jax.export.export(
                jax.jit(program, compiler_options=options or None),
                disabled_checks=[
                    jax.export.DisabledSafetyCheck.custom_call(target)
                    for target in _host_kernel.TARGETS
                ],
            )(dynamic)
            for typ in _node_types(exported.out_tree):
                _register(typ)
            blob = exported.serialize()
        except Exception:  # a program export cannot hold (a host callback, a mesh): plain jit
            return None
        types = sorted(
            {_type_name(t) for t in _node_types(exported.in_tree) + _node_types(exported.out_tree)}
        )
        _write(path, json.dumps({"format": _FORMAT, "types": types}).encode() + b"\n" + blob)
        # run what later processes will read: a program read back lowers to other text than
        # the one just traced (its locations), and XLA's cache keys the text, so calling the
        # traced one would leave the next process a compilation to do
        return jax.export.deserialize(bytearray(blob))

    call.jitted = jitted_by_size[0]
    return call


def _compile(exported, options: dict, folder: Path, key: str):
    """Return ``exported`` compiled for its own argument shapes on the home device (``Compiled``).

    Read back from its executable file (:mod:`bayesvmf._executables`) when there is one: no
    lowering, no cache key, one deserialisation. Otherwise compiled ahead of the call, from
    shapes alone (so that the prefetch thread can do it before the arguments exist), and
    written to that file when XLA compiled it here (jaxlib 0.10.2 serialises an executable
    that JAX's cache read back without its kernels: such a program stays in JAX's cache).
    JAX's cache is looked up (it may hold the program from an older version of the package)
    but keeps nothing, unless the executable cannot be written: then the program is
    compiled once more for JAX's cache to keep, so that later processes do not compile it.
    """
    file = _executables.path(folder, key)
    compiled = _executables.read(file, exported)
    if compiled is not None:
        return compiled
    shapes = [
        jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
        for aval in exported.in_avals
    ]
    args, kwargs = jax.tree.unflatten(exported.in_tree, shapes)
    lowered = jax.jit(exported.call, compiler_options=options or None).lower(*args, **kwargs)
    hits = _executables.cache_hits()
    with _executables.not_into_jax_cache():
        compiled = lowered.compile()
    if _executables.cache_hits() == hits and not _executables.write(
        file, compiled, exported, options
    ):  # compiled here but not serialisable: a new lowering, compiled into JAX's cache
        jax.jit(exported.call, compiler_options=options or None).lower(*args, **kwargs).compile()
    return compiled


def _obtain(key: str, load: Callable):
    """Return the program ``key``: loaded, being loaded by another thread, or ``load()``.

    ``load`` returns the program, None (the plain jit) or :data:`_ABSENT` (no file to read:
    nothing is kept, a later caller loads it itself). One thread loads a key at a time; the
    others wait for its result.
    """
    while True:
        with _LOCK:
            if key in _LOADED:
                return _LOADED[key]
            future = _PENDING.get(key)
            mine = future is None
            if mine:
                future = _PENDING[key] = concurrent.futures.Future()
        if not mine:
            with contextlib.suppress(Exception):  # its load failed: load it here
                program = future.result()
                if program is not _ABSENT:
                    return program
            continue
        try:
            program = load()
        except BaseException as error:
            with _LOCK:
                del _PENDING[key]
            future.set_exception(error)
            raise
        with _LOCK:
            del _PENDING[key]
            if program is not _ABSENT:
                _LOADED[key] = program
        future.set_result(program)
        if program is not _ABSENT:
            return program


def _signature(value, depth: int = 0, inside_data: bool = False):
    """Return what of a method's argument chooses its programs: shapes, types, settings.

    Arrays (NumPy, JAX, SciPy sparse) by type, shape, dtype and stored entries; sequences
    element by element, up to :data:`_SEQUENCE_ITEMS` of them (longer ones by their length
    and first element; numbers inside them by their type, not their value: nested lists are
    data); mappings item by item; functions and classes by module and name, as static
    arguments (:func:`_static_repr`); an estimator by its class and its parameters but the
    seed; other objects by their type. Three levels deep.
    """
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        nnz = getattr(value, "nnz", None)
        return (type(value).__name__, tuple(value.shape), str(value.dtype), nnz)
    if isinstance(value, bool | int | float | complex | str | bytes | type(None)):
        return type(value).__name__ if inside_data else value
    if depth < 3 and isinstance(value, list | tuple):
        if len(value) > _SEQUENCE_ITEMS:
            return (type(value).__name__, len(value), _signature(value[0], depth + 1, True))
        return (type(value).__name__, tuple(_signature(v, depth + 1, True) for v in value))
    if depth < 3 and isinstance(value, dict):
        return tuple(sorted((str(k), _signature(v, depth + 1)) for k, v in value.items()))
    if callable(value) and hasattr(value, "__qualname__"):  # a function or a class
        return _static_repr(value) or _type_name(type(value))  # a lambda: no stable name
    if depth < 3 and hasattr(value, "_get_param_names"):
        # get_params(deep=False) without its inspection of the signature at every call
        params = {name: getattr(value, name, None) for name in _param_names(type(value))}
        params.pop("random_state", None)  # a seed changes the draws, not the programs
        return (_type_name(type(value)), _signature(params, depth + 1))
    return _type_name(type(value))


#: Sequences longer than this enter a signature by their length and first element.
_SEQUENCE_ITEMS = 32


@functools.cache
def _param_names(cls: type) -> tuple[str, ...]:
    """Return the parameters of an estimator class (scikit-learn's ``_get_param_names``)."""
    return tuple(cls._get_param_names())


def _read_manifest(path: Path) -> list:
    """Return the entries of the manifest ``path`` ([] when absent, damaged or foreign)."""
    if path not in _MANIFESTS:
        try:
            content = json.loads(path.read_bytes())
            entries = content["programs"] if content.get("format") == _MANIFEST_FORMAT else []
            if not all(_valid_entry(entry) for entry in entries):
                entries = []
        except Exception:  # absent, damaged or foreign: nothing to read ahead
            entries = []
        _MANIFESTS[path] = entries
    return _MANIFESTS[path]


def _valid_entry(entry) -> bool:
    """Whether ``entry`` is [key, [[option, value], ...], x64], as :func:`prefetching` writes."""
    if not (isinstance(entry, list) and len(entry) == 3):
        return False
    key, options, x64 = entry
    return (
        isinstance(key, str)
        and isinstance(x64, bool)
        and isinstance(options, list)
        and all(isinstance(o, list) and len(o) == 2 and isinstance(o[0], str) for o in options)
    )


@contextlib.contextmanager
def prefetching(method: str, args: tuple, kwargs: dict) -> Iterator[None]:
    """Read, in a thread, the programs the last run of this call used, while it runs.

    A first fit in a new process spends most of its overhead reading its compiled programs
    back, each when first called (module notes). The calls of one method with arguments of
    one :func:`_signature` use the same programs, so the block's exit writes their keys (a
    manifest) and a later block with that signature reads them ahead, in the order they
    were first called, while the method validates and copies its data and runs its first
    programs. XLA releases the interpreter lock while it deserialises. A program the method
    calls before the thread has it is read by the method itself, or waited for when the
    thread is reading it (:func:`_obtain`). On exit the thread stops after the program it
    is reading and is joined, so that nothing reads the cache after the block that opened
    it. The manifest is written only by a call that read or exported a program itself, so
    that calls of one method on many shapes whose programs are shared (bucketed rows) leave
    one file, not one per shape. Outside a :func:`bayesvmf._compile_cache.compilation_cache`
    block with a folder of its own it does nothing; when every program of the manifest is
    loaded already (any later call in the process) it starts no thread, and costs about
    20 us.

    Measured (dense 50,000 x 256, K = 32, defaults, 2 cores; new processes after one that
    filled the cache, the two ways alternated, four processes each): the first
    ``BayesianVMFMixture(32).fit`` took 0.63-0.78 s against 0.92-1.18 s without it, the
    first ``SparseVMFMixture(32).fit`` 0.47-0.64 s against 0.58-1.09 s; later fits took
    0.24-0.47 s either way. One thread is enough on two cores: a second one read the
    programs no sooner (the fit's own programs use both cores).
    """
    folder = _active_folder()
    if folder is None:
        yield
        return
    try:
        # each argument on its own: a scalar argument by its value (sample(5), sample(10))
        described = tuple(_signature(a) for a in args), _signature(kwargs)
        signature = (folder, method, *described)
    except Exception:  # an argument without a stable description: nothing read or written
        yield
        return
    path = _MANIFEST_PATHS.get(signature)
    if path is None:
        text = repr((signature[1:], _source_hash(), jax.__version__))
        name = f"{hashlib.sha256(text.encode()).hexdigest()}.manifest"
        path = _MANIFEST_PATHS[signature] = folder / PROGRAMS / name
    entries = _read_manifest(path)
    stop = threading.Event()
    thread = None
    if any(entry[0] not in _LOADED for entry in entries):
        thread = threading.Thread(
            target=_prefetch, args=(folder / PROGRAMS, entries, stop), name="bayesvmf-prefetch"
        )
        thread.daemon = True
        thread.start()
    recording = _Recording()
    token = _RECORDING.set(recording)
    try:
        yield
    finally:
        _RECORDING.reset(token)
        stop.set()
        if thread is not None:
            thread.join()
    # reached only when the method returned: a failed call may have stopped halfway. A call
    # that found all its programs loaded writes nothing: another signature's call of this
    # process read them (predict on batches of many sizes would leave a file per size)
    found = [
        [key, [[name, value] for name, value in sorted(options.items())], x64]
        for key, (options, x64) in recording.used.items()
    ]
    if recording.read and found != entries:
        _MANIFESTS[path] = found
        with contextlib.suppress(TypeError, ValueError):  # options JSON cannot hold: no file
            text = json.dumps({"format": _MANIFEST_FORMAT, "programs": found})
            _write(path, text.encode())


def _prefetch(folder: Path, entries: list, stop: threading.Event) -> None:
    """Body of the prefetch thread: read ``entries``' programs until ``stop`` is set."""

    def read(key, options, x64):
        with jax.enable_x64(x64):  # the caller's scoped setting is not this thread's
            exported = _read(folder / f"{key}.jaxexport")
            return _ABSENT if exported is None else _compile(exported, dict(options), folder, key)

    for key, options, x64 in entries:
        if stop.is_set():
            return
        # a failure here is the caller's to meet, if it calls the program at all
        with contextlib.suppress(Exception):
            _obtain(key, functools.partial(read, key, options, x64))


@functools.cache
def _jaxlib_version() -> str:
    import jaxlib

    return jaxlib.__version__


def _read(path: Path):
    """Return the exported program in ``path``, or None (absent, unreadable, other format)."""
    try:
        content = path.read_bytes()
        header, blob = content.split(b"\n", 1)
        meta = json.loads(header)
        if meta.get("format") != _FORMAT:
            return None
        for name in meta["types"]:
            _register(_import_type(name))
        return jax.export.deserialize(bytearray(blob))
    except Exception:  # a damaged or foreign file: export again (and overwrite it)
        return None


def _write(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` atomically (another process may read it meanwhile)."""
    with contextlib.suppress(OSError):  # a read-only folder: the program stays in memory
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".jaxexport")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
