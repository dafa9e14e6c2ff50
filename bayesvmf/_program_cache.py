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
3. runs it through ``jax.jit(exported.call)`` with the function's compiler options (those
   of the call's size, :func:`bayesvmf._compile_cache.jit`), whose compilation the
   compilation cache holds.

The first process runs the exported program too, so that every process runs the same
compiled program (and the compilation cache finds it). Outside such a block (the cache
off, the session's own cache folder, ``BAYESVMF_NO_COMPILATION_CACHE=1``), under tracing,
for arrays on several devices, or for a program :mod:`jax.export` cannot serialise (a host
callback), the function is the plain ``jax.jit`` of before; a failure is remembered for the
rest of the process, so it costs one trace.

The key of a program: the function's module and name, its static arguments, the tree of its
other arguments with the shape, dtype and weak type of every leaf, the x64 setting, the
backend, the versions of jax and jaxlib, the compiler options, and a hash of the sources of
the package (``bayesvmf`` and ``bayesvmf.models``), so that an edited package never runs a
program traced from older code. Pytree node types of the arguments and results (the data classes,
the states of the fits) are registered for serialisation when first met: named tuples as
such, other nodes with their static data written as JSON (a node whose static data is not
JSON, such as a device mesh, makes the program fall back). The names of these types head
the file, so that a later process registers them before reading it.

The cache is trusted code, as JAX's compilation cache is: do not point it at a folder
others may write to.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax

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
    """Register a pytree node type for :mod:`jax.export` serialisation (once)."""
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
    returns uncommitted ones for uncommitted arguments: such an output (the restarts' keys
    of :func:`bayesvmf._seeding.split_keys`) passed beside rows sharded over several devices
    would make the plain jit refuse the call ("incompatible devices"); placed on every
    device, as the plain jit places an uncommitted argument, it is accepted.
    """
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return tree
    everywhere = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())

    def place(leaf):
        if _devices(leaf) == 1 and leaf.committed:
            return jax.device_put(leaf, everywhere)
        return leaf

    return jax.tree.map(place, tree)


def _leaf_key(leaf) -> tuple | None:
    """(shape, dtype, weak type) of a concrete leaf on at most one device; None otherwise."""
    if isinstance(leaf, jax.core.Tracer) or _devices(leaf) > 1:
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
        if any(s is None for s in shapes) or any(r is None for _, r in static_key):
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
        if key not in _LOADED:
            _LOADED[key] = _load_or_export(
                fun, static, dynamic, treedef, folder / PROGRAMS, key, variants[tier]
            )
        program = _LOADED[key]
        if program is None:
            return jitted(*args, **kwargs)
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
        return jax.jit(exported.call, compiler_options=options or None)

    def _export(fun, static, dynamic, treedef, path, options):
        def program(arguments):
            return fun(**static, **arguments)

        from bayesvmf import _host_kernel

        try:
            for typ in _node_types(treedef):
                _register(typ)
            exported = jax.export.export(
                jax.jit(program, compiler_options=options or None),
                disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(_host_kernel.TARGET)],
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
