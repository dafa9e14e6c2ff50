"""The data layer: the one constructor of the estimators' data, and row blocks over devices.

Every mixture of rows asks its data object, never the devices: :func:`device_data` turns
checked rows into plain data (:class:`bayesvmf._data.DenseData`,
:class:`bayesvmf._data.SparseData`) or into :class:`RowBlocks`, and all three answer the
same interface (the document corpus of ``DirichletVMFMixture`` too: its rows are data of
:func:`device_data`, cut into blocks of whole documents with ``block_starts``, and its
document tables are laid out beside them with :meth:`RowBlocks.block_array`):

=====================  ======================================================================
``dot(M)``             ``X @ M`` of every real row (row blocks: gathered over the devices)
``tdot(R)``            ``X.T @ R`` (row blocks: ``R`` of the rows a device holds, summed);
                       ``as_rows=True``: ``R.T @ X``, summed in that orientation
``block``              what a row-wise computation sees: the rows of this device, or the data
``n_samples``          the number of real rows
``weigh_rows(v)``      per-row values with padding rows set to 0 (plain data: unchanged)
``sum_over_blocks``    partial sums added over the devices (``psum``; plain data: unchanged)
``map(fn, r, *rows)``  ``fn(r, data, *rows)``, once per device under ``shard_map`` if sharded
``map_sums(fn, r)``    sums over rows of ``fn(r, data)``: ``map``, or over row chunks (dense)
``map_rows(fn, r)``    ``fn(r, block)`` of every row, gathered into one host array
``row_array(v)``       per-row host values laid out like the rows (padded, sharded)
``block_array``        (row blocks) a model's per-block table laid out like the rows
``host_rows(v)``       per-row device values (as ``map`` returns them) as a host array
``take_rows(idx)``     the rows ``X[idx]``, dense float64 (the seedings)
``is_sharded``         whether the rows lie on a mesh of devices (outside ``shard_map``)
``replicate(tree)``    ``tree`` placed on every device of the mesh (plain data: unchanged)
=====================  ======================================================================

The EM of a vMF mixture touches the data only through its sufficient statistics: the counts
N_k = sum_i tau_ik, the resultants r_k = sum_i tau_ik x_i (eq. (23) of [1]_) and the total
log-likelihood sum_i log p(x_i) (eq. (9)). These are sums over rows, so rows can be split
into blocks, each block's partial sums computed where the block lives, and the partial sums
added (docs/design.md section 6). :class:`RowBlocks` holds data split into equal row blocks
(or blocks cut at given rows, ``block_starts`` of :func:`device_data`):

* with a ``jax.sharding.Mesh`` (``devices=`` of the estimators), one block per device: the
  arrays are sharded along their first axis (``NamedSharding(mesh, P("rows"))``), the data
  pass runs under ``jax.shard_map`` (:meth:`RowBlocks.map`) and the partial statistics are
  reduced with ``jax.lax.psum`` (:meth:`RowBlocks.sum_over_blocks`); everything else (the
  M-step) runs replicated on every device;
* without a mesh, one padded block (the chunks of ``partial_fit``, ``bucket=True``): chunk
  sizes are rounded up to a few bucket sizes (:func:`bucket_size`), so a stream of chunks of
  varying size and nnz reuses a handful of compiled programs instead of compiling one per
  chunk.

Blocks have equal shapes. Dense blocks are padded with zero rows. Sparse blocks are padded
with empty rows. Sharded sparse blocks use the "segment_sum" kernel on every backend (a
program over several devices must not call back into Python: :func:`device_data` says why),
their nnz padded with explicit zeros (value 0.0, which adds exactly 0.0 to both products);
the single block without a mesh may stay a host CSR matrix of the CPU ("scipy") kernel
(:class:`bayesvmf._data.SparseData`). Every padding row has row weight 0, and the
statistics multiply the responsibilities and the per-row log-densities by the row weights
(:meth:`RowBlocks.weigh_rows`), so padding never touches counts, resultants, weights or the
likelihood. Padding rows only ever sit after the real rows of their block: in equal
blocks, global row i is row ``i % block_rows`` of block ``i // block_rows``; in blocks cut
at ``starts``, block b holds rows [starts[b], starts[b + 1]) and then its padding rows.

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes", Neurocomputing (journal version of the ESANN 2021 paper).
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from sklearn.utils import _param_validation as pv

from bayesvmf import _compile_cache, _data
from bayesvmf._compile_cache import JIT_OPTIONS, count_trace
from bayesvmf._data import DenseData, SparseData

__all__ = [
    "AXIS",
    "RowBlocks",
    "DevicesOption",
    "resolve_devices",
    "bucket_size",
    "device_data",
    "make_mesh",
    "place",
    "sum_over_axis",
]

#: Name of the mesh axis the rows are sharded over.
AXIS = "rows"


@jax.tree_util.register_pytree_node_class
class RowBlocks:
    """Data split into padded row blocks (equal, or cut at given rows), a weight (1, 0) per row.

    Built by :func:`device_data`; answers the interface of the module docstring.

    Parameters
    ----------
    data : DenseData or SparseData
        The blocks' arrays concatenated along their first axis (dense rows; the host blocks'
        handles; COO and column-sorted copies), so that splitting every array
        into ``n_blocks`` equal parts gives the blocks. ``data.shape`` is the shape of
        *one* block, ``(block_rows, n_features)``, what a device sees (dense rows outside
        ``shard_map``: the array of every block, so their shape).
    row_weight : jax.Array of shape (n_blocks * block_rows,)
        1.0 for a real row, 0.0 for a padding row.
    n_samples : int
        Number of real rows (static).
    mesh : jax.sharding.Mesh or None
        One block per device of the mesh (static); None for a single local block.
    axis_name : str or None
        Set (to :data:`AXIS`) on the view of one block inside ``shard_map``: the statistics
        of that block are then summed over the devices with ``psum``.
    starts : tuple of int or None
        First real row of each block when the blocks were cut at given rows
        (``device_data(..., block_starts=)``): block b holds the real rows
        [starts[b], starts[b + 1]) (the last up to ``n_samples``), then its padding rows.
        None: equal blocks, global row i is row ``i % block_rows`` of block
        ``i // block_rows``.
    """

    def __init__(self, data, row_weight, n_samples, mesh=None, axis_name=None, starts=None):
        self.data = data
        self.row_weight = row_weight
        self.n_samples = int(n_samples)
        self.mesh = mesh
        self.axis_name = axis_name
        self.starts = None if starts is None else tuple(int(s) for s in starts)

    def tree_flatten(self):
        """Flatten into the arrays (children) and the static sizes and mesh (aux data)."""
        aux = (self.n_samples, self.mesh, self.axis_name, self.starts)
        return (self.data, self.row_weight), aux

    @classmethod
    def tree_unflatten(cls, aux, children):
        """Rebuild from :meth:`tree_flatten` output."""
        return cls(*children, *aux)

    @property
    def shape(self) -> tuple[int, int]:
        """(n_samples, n_features) of the real data (padding excluded)."""
        return self.n_samples, self.data.shape[1]

    @property
    def block_rows(self) -> int:
        """Rows per block, padding included."""
        return self.data.shape[0]

    @property
    def block(self):
        """The arrays a row-wise computation sees: this device's block (padding included)."""
        return self.data

    @property
    def n_blocks(self) -> int:
        """Number of blocks: one per device of the mesh (or of the cut), else 1."""
        if self.starts is not None:
            return len(self.starts)
        return 1 if self.mesh is None else int(self.mesh.devices.size)

    def _padded_rows(self) -> int:
        """Rows of one block, padding included, read from the row weights.

        (``block_rows`` reads the data's arrays, which outside ``shard_map`` hold every
        block of dense data.)
        """
        if self.axis_name is not None:  # one device's view: its own rows
            return self.row_weight.shape[0]
        return self.row_weight.shape[0] // self.n_blocks

    def _real_rows(self) -> np.ndarray:
        """Positions of the real rows, in global order, among the padded rows of all blocks."""
        return _block_positions(self._starts(), self.n_samples, self._padded_rows())

    def _keep_real(self, values):
        """Return the real rows of per-row ``values`` of all blocks (padding dropped)."""
        if self.starts is None:
            return values[: self.n_samples]
        return values[self._real_rows()]

    @property
    def is_sharded(self) -> bool:
        """Whether the blocks lie on a mesh of devices and this is not one device's view."""
        return self.mesh is not None and self.axis_name is None

    def replicate(self, tree):
        """Return ``tree`` replicated over the mesh when the rows are sharded, else as it is.

        A program on sharded rows returns its replicated outputs (statistics, a model's
        state) placed on every device. A loop's first call on a state made on the host would
        find its arguments placed otherwise, and JAX compiles a program per placement of
        the arguments: the start is placed as the later calls' inputs are, so that the loop
        compiles its step once (tests/test_parallel.py counts the traces).
        """
        if not self.is_sharded:
            return tree
        return jax.device_put(tree, NamedSharding(self.mesh, P()))

    def weigh_rows(self, values: jax.Array) -> jax.Array:
        """Return per-row ``values`` (block_rows, ...) times the row weights (padding: 0)."""
        return values * self.row_weight[:, None]

    def sum_over_blocks(self, *values) -> tuple:
        """Add per-block partial sums over the devices (``psum``) on a device's block.

        On a single local block the values are returned as they are (a tuple).
        """
        return sum_over_axis(self.axis_name, *values)

    def dot(self, M: jax.Array) -> jax.Array:
        """Return ``X @ M`` of every real row, in global row order, of shape (n_samples, m).

        On a device's block the products of all blocks are gathered (O(n) per column of
        ``M``), so every device sees the same values: for the few columns of a seeding,
        not for the products of an iteration (those stay per block: ``block.dot``).
        """
        values = self.data.dot(M)
        if self.axis_name is not None:
            values = jax.lax.all_gather(values, self.axis_name, tiled=True)
        return self._keep_real(values)

    def tdot(self, R: jax.Array) -> jax.Array:
        """Return ``X.T @ R`` summed over the blocks; ``R`` holds this block's rows.

        Padding rows are zero rows, so they add 0 for any finite ``R``.
        """
        (out,) = self.sum_over_blocks(self.data.tdot(R))
        return out

    def take_rows(self, idx: jax.Array) -> jax.Array:
        """Return the rows ``X[idx]`` (global row numbers), dense float64.

        With :meth:`dot`, what the seedings of :mod:`bayesvmf._seeding` ask of the data, so
        that one spherical k-means++ serves plain and blocked data with the same keys and
        draws: every device gets the same rows.
        """
        block = jax.lax.axis_index(self.axis_name) if self.axis_name is not None else 0
        if self.starts is None:
            local, size = idx - block * self.block_rows, self.block_rows
        else:
            bounds = jnp.asarray((*self.starts, self.n_samples))
            local, size = idx - bounds[block], bounds[block + 1] - bounds[block]
        if isinstance(self.data, DenseData):
            # dense blocks: each gathers the rows it holds (zero for the others), summed over
            # devices; O(len(idx) d), where the one-hot product below is O(block_rows len(idx))
            held = (local >= 0) & (local < size)
            mine = self.data.X[jnp.clip(local, 0, self.block_rows - 1)].astype(jnp.float64)
            (rows,) = self.sum_over_blocks(jnp.where(held[:, None], mine, 0.0))
            return rows
        # one-hot columns of the rows this block holds (all-zero for the others): X_b.T @ onehot
        local = jnp.where(local < size, local, -1)  # a later block's row: no column here
        onehot = jax.nn.one_hot(local, self.block_rows, dtype=jnp.float64).T
        return self.tdot(onehot).T

    def counted_by_weight(self) -> RowBlocks:
        """Return a view whose static ``n_samples`` is the padded row count, in equal blocks.

        For computations that count rows by their weights and never use ``n_samples`` or
        where the real rows lie (the streaming steps): chunks padded to one bucket size
        then share one compiled program, whatever their real number of rows and, for
        blocks cut at given rows (``block_starts``), wherever the cuts fall. Lay out
        per-row and per-block arrays (:meth:`row_array`, :meth:`block_array`) before.
        """
        return RowBlocks(self.data, self.row_weight, self.row_weight.shape[0], self.mesh)

    def map(self, fn, replicated, *rows, per_row=False):
        """Call ``fn(replicated, data, *rows)``, under ``shard_map`` when the rows are sharded.

        On a mesh, ``fn`` runs once per device on the view of that device's block (a
        :class:`RowBlocks` with ``axis_name`` set, so that :meth:`sum_over_blocks` and the
        statistics of :mod:`bayesvmf._parallel` sum over devices) and its slice of every
        array of ``rows``: per-row arrays laid out by :meth:`row_array`, or any array
        laid out in blocks by :meth:`block_array` (a model's own per-block tables, e.g. the
        documents of a corpus). ``replicated`` (a pytree) is the same on every device. The
        outputs are the same on every device (reduced statistics and what is computed from
        them) or, with ``per_row``, one leading entry per row of the block (rows in global
        order, padding rows included: :meth:`host_rows`). ``per_row`` may also be a pytree
        prefix of the output, of bools: per-block outputs (True) beside replicated ones.
        Otherwise ``fn`` is called directly.
        """
        if not self.is_sharded:
            return fn(replicated, self, *rows)
        n_samples, starts = self.n_samples, self.starts

        def local(replicated, block, weight, *rows):
            view = RowBlocks(block, weight, n_samples, None, AXIS, starts)
            return fn(replicated, view, *rows)

        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(P(), P(AXIS), P(AXIS)) + (P(AXIS),) * len(rows),
            out_specs=jax.tree_util.tree_map(lambda b: P(AXIS) if b else P(), per_row),
            # left off as before this program lost its host callback (measured:
            # SparseVMFMixture and BayesianVMFMixture fits over two devices pass with it on;
            # issue 19)
            check_vma=False,
        )(replicated, self.data, self.row_weight, *rows)

    def map_sums(self, fn, replicated, *, columns: int):
        """Return the sums ``fn(replicated, data)`` over the rows: :meth:`map`, in one piece.

        Each block's rows are not cut into chunks, as plain dense data's are
        (:meth:`bayesvmf._data.DenseData.map_sums`); ``columns`` is unused.
        """
        return self.map(fn, replicated)

    def map_rows(self, fn, replicated) -> np.ndarray:
        """Return ``fn(replicated, block)`` of every block as a host array, padding dropped.

        ``fn`` (hashable: a module-level function, compiled once per shapes) maps the
        :class:`~bayesvmf._data.DenseData` or :class:`~bayesvmf._data.SparseData` of one
        block to an array with one leading entry per row of the block; on a mesh each
        device computes its own rows (``shard_map``) and every process gets all of them,
        as a host array of shape (n_samples, ...).
        """
        with jax.enable_x64(True):
            return self.host_rows(_map_rows(fn, replicated, self))

    def row_array(self, values, *, edge: bool = False) -> jax.Array:
        """Return per-row host ``values`` (n, ...) as a device array laid out like the rows.

        Padded with zeros to the blocks' rows (the padding rows weigh 0), or with ``edge``
        with the last real value of their block (e.g. sorted segment ids that must stay
        sorted), and sharded over the mesh like the rows.
        """
        return self.block_array(values, self._starts(), self._padded_rows(), edge=edge)

    def _starts(self) -> tuple[int, ...]:
        """First real row of each block (equal blocks: multiples of ``block_rows``)."""
        if self.starts is not None:
            return self.starts
        rows = self._padded_rows()
        return tuple(min(b * rows, self.n_samples) for b in range(self.n_blocks))

    def block_array(self, values, starts, size: int, *, edge: bool = False) -> jax.Array:
        """Return host ``values`` (m, ...) laid out in the blocks, one part per device.

        Block b gets entries [starts[b], starts[b + 1]) (the last up to m) at its first
        positions, padded to ``size`` entries with zeros (or, with ``edge``, the block's last
        value; 0 in an empty block), all sharded over the mesh like the rows: per-block
        tables of a model (documents) that :meth:`map` hands to each device with its rows.
        """
        values = np.asarray(values)
        padded = np.zeros((len(starts) * size, *values.shape[1:]), values.dtype)
        bounds = (*starts, values.shape[0])
        for b in range(len(starts)):
            part = values[bounds[b] : bounds[b + 1]]
            padded[b * size : b * size + len(part)] = part
            if edge and len(part):
                padded[b * size + len(part) : (b + 1) * size] = part[-1]
        return place({"rows": padded}, self.mesh)["rows"]

    def host_rows(self, values) -> np.ndarray:
        """Return per-row device ``values`` of every block as a host (n_samples, ...) array."""
        if self.mesh is not None:
            # every process gets every row (several hosts: shards of other processes too)
            values = multihost_utils.process_allgather(values, tiled=True)
        return self._keep_real(np.asarray(values))


@functools.partial(_compile_cache.jit, static_argnames="fn", compiler_options=JIT_OPTIONS)
def _map_rows(fn, replicated, data):
    """Return ``fn(replicated, block)`` of every block (:meth:`RowBlocks.map_rows`)."""
    count_trace("parallel.map_rows")
    if data.mesh is None:
        return fn(replicated, data.data)
    return jax.shard_map(
        fn,
        mesh=data.mesh,
        in_specs=(P(), P(AXIS)),
        out_specs=P(AXIS),
        check_vma=False,
    )(replicated, data.data)


def sum_over_axis(axis_name: str | None, *values):
    """Add partial sums over the devices of mesh axis ``axis_name`` (``psum``).

    For use inside ``shard_map``; with ``axis_name`` None the values are returned as they
    are (a tuple).
    """
    return jax.lax.psum(values, axis_name) if axis_name is not None else values


# --------------------------------------------------------------------------------------------
# Devices and layout
# --------------------------------------------------------------------------------------------


def sum_over_chunks(data: DenseData, fn, replicated, *, columns: int, chunk_rows=None):
    """Return the sums ``fn(replicated, rows)`` over chunks of rows of dense ``data``, in order.

    :meth:`bayesvmf._data.DenseData.map_sums`. An E-step holds a few float64 (rows,
    ``columns``) arrays at once (log-likelihoods, responsibilities). Over all rows they grow
    with n: B-vMFmix's data step held 305 MiB of XLA temporary buffers per call at 500,000 x
    256, K = 32, above glibc's largest threshold for keeping freed memory for reuse (32
    MiB), so every call faulted them in afresh (78,000 page faults a call). Over chunks of
    rows (default :func:`sum_chunk_rows`: a working set of about :data:`SUM_CHUNK_BYTES`,
    which also stays in the caches) they are bounded whatever n (docs/design.md section 5
    has the measurements).

    Each chunk is a :class:`RowBlocks` view of ``chunk_rows`` rows, a weight per row, which
    ``fn`` weighs as it weighs padding rows. The last chunk ends at the last row and weighs
    0 the rows it shares with the chunk before, so every chunk has one shape (one loop body
    in the program). Where :func:`sum_chunk_rows` finds no gain in chunks (or
    ``chunk_rows`` is at least n), ``fn(replicated, data)``: one pass, the program of
    before.
    """
    n = data.shape[0]
    if chunk_rows is None:
        row_bytes = data.X.shape[1] * data.X.dtype.itemsize
        rows = sum_chunk_rows(n, row_bytes, columns)
    else:
        rows = int(chunk_rows)
        if rows < 1:
            raise ValueError(f"chunk_rows must be a positive number of rows, got {chunk_rows!r}")
    if rows is None or n <= rows:
        return fn(replicated, data)
    n_chunks = -(-n // rows)

    def chunk(b):
        start = jnp.minimum(b * rows, n - rows)
        X = jax.lax.dynamic_slice_in_dim(data.X, start, rows, axis=0)
        weight = (start + jnp.arange(rows) >= b * rows).astype(jnp.float64)
        return fn(replicated, RowBlocks(DenseData(X), weight, rows))

    def add(total, b):
        return jax.tree.map(jnp.add, total, chunk(b)), None

    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(chunk, jnp.int32(0)))
    total, _ = jax.lax.scan(add, zeros, jnp.arange(n_chunks, dtype=jnp.int32))
    return total


#: Bytes of the working set of one chunk of :func:`sum_over_chunks`: its rows (XLA
#: copies them out of X) and four float64 values per entry (32 bytes x rows x columns).
#: Measured (the E-step statistics of SparseVMFMixture, 500,000 x 256 float32, K = 32, one
#: run, 2 cores): 160 ms a pass over all rows (200 MB of XLA temporaries, 48,800 page
#: faults a call); over chunks of 1,024 / 2,048 / 4,096 / 6,000 / 16,384 rows 124 / 95 /
#: 83 / 86 / 112 ms, no faults; at 50,000 rows 10.0 ms whole, 14.6 / 10.2 / 9.9 ms over
#: chunks of 1,024 / 2,048 / 4,096 (medians of 7 calls).
SUM_CHUNK_BYTES = 8 << 20

#: A pass whose values, counted as the chunks' are (32 bytes x n x columns), take at most
#: this many bytes runs whole in :func:`sum_over_chunks`: glibc's largest threshold for
#: keeping freed memory, below which a thread's arena can keep a call's temporaries for
#: the next call it runs (50,000 rows at K = 32 count 48.8 MiB: chunked).
SUM_WHOLE_BYTES = 32 << 20

#: Fewest rows of a chunk of :func:`sum_over_chunks`: a floor for very many columns, where
#: chunks of SUM_CHUNK_BYTES would have a few rows each (at d = 256, K = 32 the rule gives
#: up to 4,096 rows, 3,847 at n = 50,000; 1,024 were slower than 4,096 above).
SUM_CHUNK_MIN_ROWS = 256


def sum_chunk_rows(n: int, row_bytes: int, columns: int) -> int | None:
    """Rows of a chunk of :func:`sum_over_chunks` for ``n`` rows, or None: one pass.

    A row costs ``row_bytes`` (its stored values) and four float64 values per column (the
    log-likelihoods, responsibilities and what an E-step computes from them). One pass
    where those values of all rows fit in :data:`SUM_WHOLE_BYTES`, or where a chunk would
    hold more than half of them (wide rows); otherwise chunks of about
    :data:`SUM_CHUNK_BYTES` (at least :data:`SUM_CHUNK_MIN_ROWS` rows), evened out so
    that the last one shares fewer rows than there are chunks.
    """
    values = 32 * max(int(columns), 1)  # bytes of a row's four float64 values per column
    whole, per_row = n * values, int(row_bytes) + values
    target = max(SUM_CHUNK_MIN_ROWS, SUM_CHUNK_BYTES // per_row)
    if whole <= SUM_WHOLE_BYTES or n <= target or 2 * target * per_row > whole:
        return None
    n_chunks = -(-n // target)
    return -(-n // n_chunks)


def resolve_devices(devices, name: str = "devices") -> list | None:
    """Turn ``devices`` (None, an int n or a list of devices) into a device list or None.

    An int means the first n of ``jax.devices()``.

    Raises
    ------
    ValueError
        If an int is out of range or a list is empty or holds a repeated device.
    TypeError
        If ``devices`` is of another type or a list holds something else than devices.
    """
    if devices is None:
        return None
    available = jax.devices()
    if isinstance(devices, numbers.Integral) and not isinstance(devices, bool):
        if not 1 <= int(devices) <= len(available):
            raise ValueError(
                f"{name}={devices!r}: asked for {int(devices)} devices, but JAX sees "
                f"{len(available)} ({jax.default_backend()}); on CPU, set XLA_FLAGS="
                "--xla_force_host_platform_device_count=N before importing jax."
            )
        return available[: int(devices)]
    if isinstance(devices, list | tuple):
        bad = [d for d in devices if not isinstance(d, jax.Device)]
        if bad:
            raise TypeError(f"{name} must hold jax devices; got {bad[0]!r}.")
        if not devices:
            raise ValueError(f"{name} is an empty list.")
        if len(set(devices)) != len(devices):
            raise ValueError(f"{name} holds a device twice: {list(devices)!r}.")
        return list(devices)
    raise TypeError(f"{name} must be None, an int or a list of jax devices; got {devices!r}.")


class DevicesOption(list):
    """The scikit-learn constraints of ``devices=``: None, an int >= 1, a list or a tuple.

    A list of scikit-learn constraints (``[None, Interval(Integral, 1, None), list, tuple]``)
    for ``_parameter_constraints``, checked by
    :meth:`bayesvmf._base.BaseVMFEstimator._validate_params` at ``fit`` (and by
    scikit-learn's estimator checks). Only the type is checked there;
    :func:`resolve_devices` (through :func:`device_data`) checks the items of a list and
    the count against the devices JAX sees.
    """

    def __init__(self):
        super().__init__([None, pv.Interval(numbers.Integral, 1, None, closed="left"), list, tuple])


def make_mesh(devices) -> Mesh:
    """Return a one-axis mesh (axis :data:`AXIS`) over ``devices`` (a list of devices).

    Row blocks build theirs in :func:`device_data`.
    """
    return Mesh(np.asarray(devices, dtype=object), (AXIS,))


def bucket_size(size: int, minimum: int = 8) -> int:
    """Round ``size`` up to the next of minimum * 2^(j/2) (two buckets per power of two).

    At most 41% padding, and a stream whose chunk sizes vary within a factor f compiles at
    most about 2 log2(f) + 2 programs.
    """
    size = max(int(size), 1)
    if size <= minimum:
        return minimum
    j = math.ceil(2 * math.log2(size / minimum) - 1e-9)
    bucket = int(math.ceil(minimum * 2 ** (j / 2)))
    return bucket if bucket >= size else int(math.ceil(minimum * 2 ** ((j + 1) / 2)))


def _pad(a: np.ndarray, size: int, value) -> np.ndarray:
    out = np.full((size, *a.shape[1:]), value, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def _sparse_block(block: sp.csr_matrix, rows: int, nnz: int, dtype):
    """Device arrays of one CSR block for the "segment_sum" kernel (host NumPy), padded.

    ``rows`` rows and ``nnz`` entries; padding entries hold value 0 at (last row, column 0)
    in row order and (row 0, last column) in column order, so both orders stay sorted and
    they add exactly 0 to both products.
    """
    n, d = block.shape
    row_ids = np.repeat(np.arange(n, dtype=np.int32), np.diff(block.indptr))
    csc = block.tocsc()
    t_cols = np.repeat(np.arange(d, dtype=np.int32), np.diff(csc.indptr))
    return {
        "rows": _pad(row_ids, nnz, rows - 1),
        "cols": _pad(block.indices.astype(np.int32), nnz, 0),
        "values": _pad(block.data.astype(dtype), nnz, 0),
        "t_rows": _pad(csc.indices.astype(np.int32), nnz, 0),
        "t_cols": _pad(t_cols, nnz, d - 1),
        "t_values": _pad(csc.data.astype(dtype), nnz, 0),
    }


def place(arrays: dict, mesh: Mesh | None) -> dict:
    """Device arrays: sharded along the first axis over ``mesh``, or plain."""
    if mesh is None:
        return {k: jnp.asarray(v) for k, v in arrays.items()}
    sharding = NamedSharding(mesh, P(AXIS))
    # make_array_from_callback builds only the shards this process addresses (multi-host)
    return {
        k: jax.make_array_from_callback(v.shape, sharding, lambda idx, v=v: v[idx])
        for k, v in arrays.items()
    }


def device_data(
    X,
    dtype=jnp.float64,
    *,
    devices=None,
    bucket: bool = False,
    kernel: str = "auto",
    block_starts=None,
):
    """Return checked rows as the data object a model asks: plain data or row blocks.

    The one constructor of the estimators' data. Call it inside ``jax.enable_x64(True)`` for
    float64 values.

    Parameters
    ----------
    X : ndarray, jax.Array, scipy.sparse matrix or jax.experimental.sparse.BCOO
        Validated data (the output of :func:`bayesvmf.data.check_directional`) of shape
        (n_samples, n_features); not modified.
    dtype : dtype, default float64
        Dtype of the stored values, hence of the two data products.
    devices : None, int or list of jax devices
        The estimators' ``devices`` option (:func:`resolve_devices`): one row block per
        device, sharded over a mesh of them; None: one device.
    bucket : bool, default False
        One local padded block whose rows and nnz are rounded up to :func:`bucket_size`
        (streaming chunks), so that chunks of similar size share compiled programs; with
        ``devices``, the blocks are rounded alike.
    kernel : {"auto", "scipy", "segment_sum"}
        Sparse product kernel (:class:`bayesvmf._data.SparseData`); "auto" is "scipy" on
        CPU and "segment_sum" elsewhere. With ``devices``, "auto" is "segment_sum" on every
        backend and "scipy" is refused (see below).
    block_starts : sequence of int, optional
        Cut the rows at these rows instead of into equal blocks: block b (one per device,
        or the one block without ``devices``) holds rows [block_starts[b],
        block_starts[b + 1]) (the last up to n_samples), padded to the longest block
        (rounded up with ``bucket``). For rows that belong together in groups a block must
        not split (the documents of ``DirichletVMFMixture``). Increasing, from 0.

    Returns
    -------
    DenseData, SparseData or RowBlocks
        Plain data without ``devices`` and ``bucket``, row blocks otherwise.

    Raises
    ------
    ValueError
        If ``devices`` is out of range or repeats a device (:func:`resolve_devices`), if
        ``kernel`` is not one of the names above, or is "scipy" with ``devices``, or if
        ``block_starts`` is not one increasing start per block, from 0.
    TypeError
        If ``devices`` is of another type.

    Notes
    -----
    Programs over several devices never call back into Python, so sparse row blocks on a
    mesh use the "segment_sum" kernel, whose products are XLA operations. The "scipy"
    kernel's ``jax.pure_callback`` deadlocked such programs (issue 19: a Classic3 fit over
    two forced CPU devices aborted in an all-reduce, or hung). JAX hands a callback its
    operands as arrays ``device_put`` on the first CPU device, and reading one waits for
    that copy. XLA's CPU client copies a host buffer of 100 KiB or more asynchronously, as a
    task on the thread pool that also runs the devices' programs (seen in the threads of a
    hung fit: two pool threads on a 2-core machine, each running one device's program).
    When every thread of the pool is held by a device's program, blocked in the callback
    (waiting for the copy) or in a collective (waiting for a device that is in the
    callback), the copy never runs. An operand of d x K float64 values (the first product;
    rows per device x K for the second) reaches 100 KiB at d K >= 12,800 (Classic3:
    d = 4303, K = 3; the tests' n = 101, d = 30 stays far below), so the hang depended on
    the data and on the numbers of cores and devices: nothing a fit could check. Without a
    callback in these programs there is no such wait.
    """
    devices = resolve_devices(devices)
    if devices is None and not bucket and block_starts is None:
        return _data.to_device(X, dtype, kernel=kernel)
    return _row_blocks(X, dtype, devices, kernel, bucket, block_starts)


def _block_positions(starts, n: int, block_rows: int) -> np.ndarray:
    """Positions of rows 0..n-1 among the padded rows of blocks that start at ``starts``."""
    bounds = (*starts, n)
    return np.concatenate(
        [b * block_rows + np.arange(bounds[b + 1] - bounds[b]) for b in range(len(starts))]
    )


def _check_starts(block_starts, n_blocks: int, n: int) -> tuple[int, ...]:
    starts = tuple(int(s) for s in block_starts)
    if len(starts) != n_blocks or starts[0] != 0 or np.any(np.diff((*starts, n)) < 0):
        raise ValueError(
            f"block_starts must hold {n_blocks} increasing rows from 0 to at most {n} "
            f"(one per block); got {list(starts)}"
        )
    return starts


def _row_blocks(X, dtype, devices, kernel: str, bucket: bool, block_starts=None) -> RowBlocks:
    """Split checked data into padded row blocks on the device(s): see :func:`device_data`."""
    n, d = X.shape
    n_blocks = 1 if devices is None else len(devices)
    mesh = None if devices is None else make_mesh(devices)
    rows = -(-n // n_blocks)
    starts = None
    if block_starts is not None:
        starts = _check_starts(block_starts, n_blocks, n)
        rows = max(int(np.max(np.diff((*starts, n)))), 1)
    if bucket:
        rows = bucket_size(rows)
    np_dtype = np.dtype(jnp.dtype(dtype).name)
    if starts is not None:  # every block's real rows, then its padding rows
        if sp.issparse(X):
            raise ValueError("block_starts needs dense rows; got a sparse matrix")
        real = _block_positions(starts, n, rows)
        weight = np.zeros(n_blocks * rows)
        weight[real] = 1.0
        dense = np.zeros((n_blocks * rows, d), np_dtype)
        dense[real] = np.asarray(X, dtype=np_dtype)
        placed = place({"X": dense, "w": weight}, mesh)
        return RowBlocks(DenseData(placed["X"]), placed["w"], n, mesh, starts=starts)
    weight = (np.arange(n_blocks * rows) < n).astype(np.float64)
    if not sp.issparse(X):
        dense = _pad(np.asarray(X, dtype=np_dtype), n_blocks * rows, 0)
        placed = place({"X": dense, "w": weight}, mesh)
        return RowBlocks(DenseData(placed["X"]), placed["w"], n, mesh)
    resolved = _data._resolve_kernel(kernel)  # checks the name
    if mesh is not None:
        if kernel == "scipy":
            raise ValueError(
                "kernel='scipy' cannot shard data over devices: its host callback can "
                "deadlock a program that runs on several devices (see device_data's notes); "
                "use kernel='auto' or 'segment_sum'."
            )
        resolved = "segment_sum"
    csr = sp.csr_matrix(X)
    if resolved == "scipy":
        # one block (no mesh), kept on the host: padded with empty rows only, sharing X's
        # arrays; the device holds its handle
        data = _data.scipy_kernel_data(_data.host_block(csr, np_dtype, rows), dtype)
        return RowBlocks(data, place({"w": weight}, None)["w"], n)
    # an all-padding block (more devices than row blocks) is an empty (0, d) slice
    blocks = [csr] if n_blocks == 1 else [csr[b * rows : (b + 1) * rows] for b in range(n_blocks)]
    nnz = max(max(blk.nnz for blk in blocks), 1)
    if bucket:
        nnz = bucket_size(nnz)
    parts = [_sparse_block(blk, rows, nnz, np_dtype) for blk in blocks]
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    placed = place({**arrays, "w": weight}, mesh)
    data = SparseData(
        placed["rows"],
        placed["cols"],
        placed["values"],
        placed["t_rows"],
        placed["t_cols"],
        placed["t_values"],
        (rows, d),
        None,
        resolved,
    )
    return RowBlocks(data, placed["w"], n, mesh)
