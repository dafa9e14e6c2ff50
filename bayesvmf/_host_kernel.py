"""The SciPy products of the "scipy" sparse kernel as an XLA custom call that can be cached.

On CPU the sparse data products ``X @ B`` and ``X.T @ B`` run in SciPy's compiled CSR
kernels (:class:`bayesvmf._data.SparseData`). Reached through ``jax.pure_callback``,
every program that holds such a product is a program with host callbacks, and JAX never
writes those to its persistent compilation cache (a Python callback cannot be serialised):
each new process compiled a sparse fit again (Classic3, 3,891 x 4,303: a fresh process's
first fit 10.2 s against 2.0 s for the next, 3 of its 16 programs uncacheable).

Here the product is a custom call of XLA's classic API (``API_VERSION_STATUS_RETURNING_
UNIFIED``) to a C function pointer made by :mod:`ctypes` from a Python function, registered
under a fixed name when this module is imported. The program holds only that name and an
ASCII description of the operands (``backend_config``), the same in every process, so the
compiled program is written to the cache and a later process reads it back; the name is
resolved to this process's function when the program is loaded. The function receives the
raw operand and result buffers: the registry handle of the host block (int32), then B; it
calls :func:`bayesvmf._data._host_product` on a view of B (no copy) and writes the
product into the result buffer. :mod:`ctypes` takes the GIL for the call.

A second target, ``bayesvmf_scipy_csr_rows``, returns rows ``X[idx]`` dense (the seeds of
k-means++ and of random rows): read from the CSR matrix, they cost the nonzeros of those
rows, where ``X.T @ onehot(idx)`` through the product costs a pass over all of X.

An error in the host function (a released host block) cannot be reported through XLA's
status from Python: the result is filled with NaN and the exception is printed by
:mod:`ctypes` ("Exception ignored on calling ctypes callback function"), never silent.
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

__all__ = ["ROWS_TARGET", "TARGET", "TARGETS", "available", "scipy_product", "scipy_rows"]

#: Names of the custom call targets (registered for the CPU platform at import).
TARGET = "bayesvmf_scipy_csr_product"
ROWS_TARGET = "bayesvmf_scipy_csr_rows"
#: Every custom-call target of this module: a program holding them is exported
#: (:func:`bayesvmf._program_cache.persistent_jit`) with their check disabled, since each name
#: is resolved to this process's function when the program is loaded.
TARGETS = (TARGET, ROWS_TARGET)

#: XLA's ``CustomCallApiVersion.API_VERSION_STATUS_RETURNING_UNIFIED``: the target is
#: ``void(void* out, const void** in, const char* opaque, size_t opaque_len, void* status)``.
_API_VERSION = 3

_SIGNATURE = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
)


def _describe(shape, transpose: bool, b_aval, out_aval) -> str:
    """Return the ``backend_config`` of one product: block shape, transpose, dtype, shapes."""

    def dims(s):
        return ",".join(str(int(v)) for v in s)

    return f"{dims(shape)};{int(transpose)};{b_aval.dtype.name};{dims(b_aval.shape)};" + dims(
        out_aval.shape
    )


@functools.cache
def _parse(config: bytes):
    shape, transpose, dtype, b_shape, out_shape = config.decode().split(";")

    def dims(s):
        return tuple(int(v) for v in s.split(",") if v)

    dtype = np.dtype(dtype)
    pointer = ctypes.POINTER(np.ctypeslib.as_ctypes_type(dtype))
    return dims(shape), transpose == "1", pointer, dims(b_shape), dims(out_shape)


def _target(name: str, compute):
    """Register the custom call target ``name`` and return its C function pointer.

    ``compute(handle, operand, shape, transpose, pointer, operand_shape)`` returns what fills
    the result buffer (see the module notes); it runs on an XLA thread. An error fills the
    result with NaN and is printed by :mod:`ctypes` (it cannot reach XLA's status from
    Python). Keep the pointer for the life of the process: XLA holds its address.
    """

    def run(out, operands, opaque, opaque_len, status):  # pragma: no cover - called by XLA
        config = _parse(ctypes.string_at(opaque, opaque_len))
        shape, transpose, pointer, operand_shape, out_shape = config
        result = np.ctypeslib.as_array(ctypes.cast(out, pointer), shape=out_shape)
        try:
            handle = ctypes.cast(operands[0], ctypes.POINTER(ctypes.c_int32))[0]
            result[...] = compute(handle, operands[1], shape, transpose, pointer, operand_shape)
        except BaseException:
            result[...] = np.nan
            raise

    function = _SIGNATURE(run)
    jax.ffi.register_ffi_target(
        name,
        jax.ffi.pycapsule(ctypes.cast(function, ctypes.c_void_p).value),
        platform="cpu",
        api_version=0,  # XLA's classic custom call registry, not the typed FFI
    )
    return function


def _product(handle, operand, shape, transpose, pointer, b_shape):
    """Return X @ B or X.T @ B of the registered block (the product target)."""
    from bayesvmf._data import _host_product

    B = np.ctypeslib.as_array(ctypes.cast(operand, pointer), shape=b_shape)
    return _host_product(np.array([handle]), B, shape=shape, transpose=transpose, bits=False)


def _rows(handle, operand, shape, transpose, pointer, idx_shape):
    """Return X[idx] of the registered block, dense (the rows target)."""
    from bayesvmf._data import _host_rows

    idx = np.ctypeslib.as_array(ctypes.cast(operand, ctypes.POINTER(ctypes.c_int32)), idx_shape)
    return _host_rows(handle, idx, shape=shape)


#: The C function pointers: kept for the life of the process (XLA holds their addresses).
_FUNCTIONS = (_target(TARGET, _product), _target(ROWS_TARGET, _rows))

_product_p = Primitive("bayesvmf_scipy_csr_product")


@_product_p.def_abstract_eval
def _abstract_eval(handle, B, *, shape, transpose):
    rows = shape[1] if transpose else shape[0]
    return jax.core.ShapedArray((*B.shape[:-2], rows, B.shape[-1]), B.dtype)


def _lowering(ctx, handle, B, *, shape, transpose):
    config = _describe(shape, transpose, ctx.avals_in[1], ctx.avals_out[0])
    # row-major operands and result (the default layouts of ffi_lowering)
    return jax.ffi.ffi_lowering(TARGET, backend_config=config, api_version=_API_VERSION)(
        ctx, handle, B
    )


mlir.register_lowering(_product_p, _lowering, platform="cpu")


_rows_p = Primitive("bayesvmf_scipy_csr_rows")


@_rows_p.def_abstract_eval
def _rows_abstract_eval(handle, idx, *, shape, dtype):
    return jax.core.ShapedArray((*idx.shape, shape[1]), np.dtype(dtype))


def _rows_lowering(ctx, handle, idx, *, shape, dtype):
    # the product's description with transpose 0; the dtype is the result's
    out_aval = ctx.avals_out[0]
    config = _describe(shape, False, out_aval, out_aval).split(";")
    config[3] = ",".join(str(int(v)) for v in ctx.avals_in[1].shape)
    return jax.ffi.ffi_lowering(
        ROWS_TARGET, backend_config=";".join(config), api_version=_API_VERSION
    )(ctx, handle, idx)


mlir.register_lowering(_rows_p, _rows_lowering, platform="cpu")


def _register(primitive) -> None:
    """Register the eager call and the batching rule of a host-block primitive.

    Outside a program the primitive is compiled alone (as every jax primitive is). Only the
    second operand (B, or the row numbers) may be batched: its leading axes become batches
    of the result, served by shared passes over X; the host block cannot be.
    """

    def impl(handle, operand, **params):
        return jax.jit(functools.partial(primitive.bind, **params))(handle, operand)

    def batch(args, dims, **params):
        handle, operand = args
        if dims[0] is not None:
            raise ValueError("the sparse data of a product cannot be batched (vmapped)")
        return primitive.bind(handle, jnp.moveaxis(operand, dims[1], 0), **params), 0

    primitive.def_impl(impl)
    batching.primitive_batchers[primitive] = batch


_register(_product_p)
_register(_rows_p)


def available() -> bool:
    """Whether the custom call serves the products: programs placed on the CPU backend."""
    return jax.default_backend() == "cpu"


def scipy_product(handle, B, *, shape: tuple[int, int], transpose: bool):
    """Return ``X @ B`` (or ``X.T @ B``) for the registered host block ``handle`` (CPU).

    Parameters
    ----------
    handle : jax.Array of int32, shape (1,)
        :func:`bayesvmf._data.register_host_block`'s handle of X.
    B : jax.Array of shape (..., r, m)
        float32 or float64, the dtype of X's stored values; r is n_features when
        ``transpose`` else n_samples. Leading axes are batches (vmapped restarts).
    shape : tuple of int
        (n_samples, n_features) of X, static.
    transpose : bool
        Static.

    Returns
    -------
    jax.Array of shape (..., rows, m)
        In B's dtype; rows is n_samples, or n_features with ``transpose``.
    """
    shape = (int(shape[0]), int(shape[1]))
    return _product_p.bind(handle, B, shape=shape, transpose=bool(transpose))


def scipy_rows(handle, idx, *, shape: tuple[int, int], dtype) -> jax.Array:
    """Return the rows ``X[idx]`` of the registered host block ``handle``, dense (CPU).

    Parameters
    ----------
    handle : jax.Array of int32, shape (1,)
    idx : jax.Array of int, shape (..., m)
        Row numbers in [0, n_samples). Leading axes are batches (vmapped restarts).
    shape : tuple of int
        (n_samples, n_features) of X, static.
    dtype : dtype of X's stored values (that of the result)

    Returns
    -------
    jax.Array of shape (..., m, n_features)
    """
    shape = (int(shape[0]), int(shape[1]))
    return _rows_p.bind(
        handle, jnp.asarray(idx, jnp.int32), shape=shape, dtype=np.dtype(dtype).name
    )
