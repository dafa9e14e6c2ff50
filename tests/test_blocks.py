"""Row blocks cut at given rows (device_data's block_starts), block_array and tdot(as_rows)."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from test_parallel import _run_on_two_devices

from bayesvmf import _blocks
from bayesvmf.data import check_directional

# Two forced CPU devices (set before JAX is imported): 11 rows cut after row 3, so block 0
# holds 3 real rows and block 1 holds 8 (both padded to 8 rows).
CUT_SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from bayesvmf import _blocks
    from bayesvmf.data import check_directional

    rng = np.random.default_rng(0)
    X = check_directional(rng.normal(size=(11, 4)))
    M, idx = rng.normal(size=(4, 2)), jnp.asarray([10, 0, 3, 2])
    out = {"n_devices": len(jax.devices())}
    with jax.enable_x64(True):
        data = _blocks.device_data(X, devices=2, block_starts=[0, 3])
        out["n_blocks"], out["is_sharded"] = data.n_blocks, data.is_sharded
        out["layout"] = np.asarray(data.row_array(np.arange(11.0), edge=True)).tolist()
        out["weights"] = np.asarray(data.row_weight).tolist()
        out["back"] = data.host_rows(data.row_array(np.arange(11.0))).tolist()
        out["table"] = np.asarray(data.block_array(np.arange(1.0, 6.0), (0, 2), 4)).tolist()

        def pieces(M, view, ones):
            rows = view.block
            ones = view.weigh_rows(ones)
            col_sums = view.tdot(ones)
            (as_rows,) = view.sum_over_blocks(rows.tdot(ones, as_rows=True))
            local = rows.dot(M)  # this block's rows, padding included
            return view.dot(M), view.take_rows(idx), col_sums, as_rows, local

        ones = data.row_array(np.ones((11, 1)))
        run = jax.jit(lambda M, d, o: d.map(pieces, M, o,
                                            per_row=(False, False, False, False, True)))
        dot, taken, col_sums, as_rows, local = run(jnp.asarray(M), data, ones)
    out["dot"], out["taken"] = np.asarray(dot).tolist(), np.asarray(taken).tolist()
    out["col_sums"], out["as_rows"] = np.asarray(col_sums).tolist(), np.asarray(as_rows).tolist()
    out["local"] = data.host_rows(local).tolist()
    out["X"], out["M"], out["idx"] = X.tolist(), M.tolist(), np.asarray(idx).tolist()
    print(json.dumps(out))
    """
)


def test_blocks_cut_at_given_rows_over_two_devices():
    """Blocks cut at row 3 of 11 (3 and 8 real rows, both padded to 8): every member of the
    interface sees the real rows in their global order, the padding weighs nothing."""
    out = _run_on_two_devices(CUT_SCRIPT, timeout=240)
    assert out["n_devices"] == 2 and out["n_blocks"] == 2 and out["is_sharded"]
    X, M, idx = np.array(out["X"]), np.array(out["M"]), out["idx"]
    # block 0: rows 0-2 then its padding (edge: the block's last value), block 1: rows 3-10
    assert out["layout"] == [0, 1, 2, 2, 2, 2, 2, 2, *range(3, 11)]
    assert out["weights"] == [1.0] * 3 + [0.0] * 5 + [1.0] * 8
    assert out["back"] == list(range(11))
    assert out["table"] == [1, 2, 0, 0, 3, 4, 5, 0]
    np.testing.assert_allclose(out["dot"], X @ M, rtol=1e-13)
    np.testing.assert_allclose(out["local"], X @ M, rtol=1e-13)
    np.testing.assert_array_equal(out["taken"], X[idx])
    np.testing.assert_allclose(np.array(out["col_sums"])[:, 0], X.sum(axis=0), rtol=1e-13)
    np.testing.assert_allclose(np.array(out["as_rows"])[0], X.sum(axis=0), rtol=1e-13)


def test_block_starts_errors():
    X = check_directional(np.random.default_rng(1).normal(size=(5, 3)))
    with jax.enable_x64(True):
        with pytest.raises(
            ValueError,
            match=r"block_starts must hold 1 increasing rows from 0 to at most 5 \(one per "
            r"block\); got \[1\]",
        ):
            _blocks.device_data(X, block_starts=[1])
        with pytest.raises(ValueError, match=r"block_starts must hold 1 .* got \[0, 2\]"):
            _blocks.device_data(X, devices=1, block_starts=[0, 2])
        with pytest.raises(ValueError, match="block_starts needs dense rows; got a sparse matrix"):
            _blocks.device_data(sp.csr_matrix(X), block_starts=[0])


def test_one_block_cut_row_array_edge_and_block_array():
    X = check_directional(np.random.default_rng(2).normal(size=(5, 3)))
    with jax.enable_x64(True):
        data = _blocks.device_data(X, bucket=True, block_starts=[0])
        assert data.block_rows == 8 and data.n_samples == 5 and not data.is_sharded
        laid = np.asarray(data.row_array(np.arange(1, 6), edge=True))
        table = np.asarray(data.block_array(np.array([7.0, 8.0]), (0,), 4))
        counted = data.counted_by_weight()
    np.testing.assert_array_equal(laid, [1, 2, 3, 4, 5, 5, 5, 5])
    np.testing.assert_array_equal(table, [7.0, 8.0, 0.0, 0.0])
    assert counted.n_samples == 8 and counted.starts is None


@pytest.mark.parametrize("kind", ["dense", "blocks", "scipy", "segment_sum"])
def test_tdot_as_rows_is_the_transposed_product(kind):
    rng = np.random.default_rng(3)
    X = check_directional(np.abs(rng.normal(size=(9, 4))))
    R = rng.random((9, 2))
    with jax.enable_x64(True):
        if kind in ("scipy", "segment_sum"):
            data = _blocks.device_data(sp.csr_matrix(X), kernel=kind)
        else:
            data = _blocks.device_data(X, bucket=kind == "blocks")
        if kind == "blocks":
            R = np.concatenate([R, np.zeros((data.block_rows - 9, 2))])
        rows = data.block
        got = np.asarray(rows.tdot(jnp.asarray(R), as_rows=True))
        plain = np.asarray(rows.tdot(jnp.asarray(R)))
        in32 = rows.tdot(jnp.asarray(R, jnp.float32), as_rows=True)
    assert got.shape == (2, 4) and in32.dtype == jnp.float32
    np.testing.assert_allclose(got, R[:9].T @ X, rtol=1e-13)
    np.testing.assert_allclose(got, plain.T, rtol=1e-13)


@pytest.mark.parametrize("kind", ["dense", "scipy", "segment_sum"])
def test_tdot_as_rows_of_a_batch_transposes_only_the_last_two_axes(kind):
    # a stack of R (restarts), passed whole or vmapped: (b, n, m) -> (b, m, d). The sparse
    # kernels transposed their product with .T, which reverses every axis of a stack
    # (session 38); segment_sum gathers rows of its argument, so it takes stacks by vmap only
    rng = np.random.default_rng(4)
    X = check_directional(np.abs(rng.normal(size=(9, 4))))
    R = rng.random((3, 9, 2))
    want = np.einsum("bnm,nd->bmd", R, X)
    with jax.enable_x64(True):
        data = _blocks.device_data(X if kind == "dense" else sp.csr_matrix(X), kernel=kind)
        rows = data.block
        mapped = jax.vmap(lambda r: rows.tdot(r, as_rows=True))(jnp.asarray(R))
        np.testing.assert_allclose(np.asarray(mapped), want, rtol=1e-13)
        if kind == "segment_sum":  # a stack passed whole is refused, not summed wrongly
            with pytest.raises(ValueError, match=r"one right-hand side .* shape \(3, 9, 2\)"):
                rows.tdot(jnp.asarray(R), as_rows=True)
        else:
            whole = rows.tdot(jnp.asarray(R), as_rows=True)
            assert whole.shape == (3, 2, 4)
            np.testing.assert_allclose(np.asarray(whole), want, rtol=1e-13)


@pytest.mark.parametrize("shape", [(37, 5), (1, 3), (5000, 40)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_plain_dense_data_shares_its_aligned_host_copy(dtype, shape, monkeypatch):
    # the plain case (bayesvmf._data.to_device): the rows, cast on the host into a 64-byte
    # aligned buffer of their own, which the CPU client shares instead of copying; one copy
    # (no transposed one); the values are X.astype(dtype), the caller's array is left alone
    X = check_directional(np.random.default_rng(0).normal(size=shape))
    before = X.copy()
    hosts, device_put = [], jax.device_put

    def spy(x, *args, **kwargs):
        hosts.append(x)
        return device_put(x, *args, **kwargs)

    monkeypatch.setattr(jax, "device_put", spy)
    with jax.enable_x64(True):
        data = _blocks.device_data(X, dtype)
    monkeypatch.undo()
    assert jax.tree.leaves(data) == [data.X] and data.X.dtype == dtype
    np.testing.assert_array_equal(np.asarray(data.X), X.astype(dtype))
    np.testing.assert_array_equal(X, before)
    hosts = [h for h in hosts if isinstance(h, np.ndarray)]
    assert len(hosts) == 1
    host = hosts[0]
    assert host.ctypes.data % 64 == 0 and not np.shares_memory(host, X)
    assert host.flags.c_contiguous and host.shape == data.X.shape
    if jax.default_backend() == "cpu":  # shared, not copied
        assert data.X.unsafe_buffer_pointer() == host.ctypes.data


def test_host_copies_of_deleted_data_are_released_before_new_ones(host_buffers):
    # a JAX array that shares a NumPy buffer queues its reference when deleted, until JAX's
    # next garbage collection; the copies of the fit before must be gone before a new fit
    # allocates its own (else two fits back to back hold both, and the second touches fresh
    # memory). Checked when each buffer is allocated, with Python's collector off so that
    # its callback (which also releases them) cannot run in between.
    X = check_directional(np.random.default_rng(2).normal(size=(3000, 40)))
    with jax.enable_x64(True):
        data = _blocks.device_data(X, jnp.float32)
        float(data.X.sum())  # used by a program, as a fit does
        assert host_buffers.alive() == 1
        del data
        host_buffers.collect_cycles()
        again = _blocks.device_data(X, jnp.float32)
    assert host_buffers.alive_at_allocation == [0, 0], host_buffers.alive_at_allocation
    np.testing.assert_array_equal(np.asarray(again.X), X.astype(np.float32))


def test_plain_dense_data_float64_without_x64_keeps_jax_cast_and_warning():
    # a dtype JAX does not keep (float64 with x64 off) goes through jnp.asarray: float32
    # and JAX's warning, as before the aligned host copies
    X = check_directional(np.random.default_rng(1).normal(size=(6, 3)))
    with jax.enable_x64(False):
        with pytest.warns(UserWarning, match="float64"):
            data = _blocks.device_data(X, jnp.float64)
    assert data.X.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(data.X), X.astype(np.float32))


# ---- DenseData.map_sums (sum_over_chunks): E-step statistics over chunks of rows ----------


def _statistics_reference(X, log_weights, mu, kappa, log_c):
    """r_k, N_k and sum_i log p(x_i) of one run, in NumPy float64 (eqs. (9), (23))."""
    wlp = X @ (kappa[:, None] * mu).T + log_c + log_weights
    log_norm = np.logaddexp.reduce(wlp, axis=1)
    resp = np.exp(wlp - log_norm[:, None])
    return resp.T @ X, resp.sum(0), log_norm.sum()


@pytest.mark.parametrize("n", [64, 65, 127, 192, 199, 320])
def test_dense_map_sums_over_chunks_equal_numpy(n):
    """Chunks of 64 rows (the last one ending at the last row, its shared rows weighing 0),
    the sums of two runs added over them: NumPy's sums over all rows, at every remainder.

    Several sizes: jaxlib 0.10.2 miscompiles some CPU reductions at one size and not at
    another (jax-ml/jax 39103, 39257), so a loop that is right at one n proves nothing of
    the next."""
    from bayesvmf import _data, _parallel

    rng = np.random.default_rng(n)
    X = check_directional(rng.normal(size=(n, 5)))
    runs = 2
    mu = rng.normal(size=(runs, 3, 5))
    mu /= np.linalg.norm(mu, axis=-1, keepdims=True)
    kappa = rng.uniform(1.0, 20.0, size=(runs, 3))
    log_c = rng.normal(size=(runs, 3))
    log_weights = np.log(rng.dirichlet(np.ones(3), size=runs))

    def batch(args, data):
        return jax.vmap(lambda *a: _parallel.e_statistics(data, *a))(*args)

    with jax.enable_x64(True):
        data = _data.to_device(X)
        args = tuple(jnp.asarray(a) for a in (log_weights, mu, kappa, log_c))
        chunked = jax.jit(lambda a, d: d.map_sums(batch, a, columns=6, chunk_rows=64))(args, data)
        whole = jax.jit(batch)(args, data)
    for run in range(runs):
        want = _statistics_reference(X, log_weights[run], mu[run], kappa[run], log_c[run])
        for got, one, ref in zip(chunked, whole, want):
            np.testing.assert_allclose(np.asarray(got)[run], ref, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(
                np.asarray(got)[run], np.asarray(one)[run], rtol=1e-12, atol=1e-12
            )


def test_dense_map_sums_default_chunks_and_one_chunk():
    """The default chunks: one pass while the values (32 bytes x n x columns) fit in
    SUM_WHOLE_BYTES or a chunk would hold more than half of them (wide rows); else about
    SUM_CHUNK_BYTES of rows and values, at least SUM_CHUNK_MIN_ROWS rows, evened out (the
    last chunk shares fewer rows than there are chunks). Data the rule leaves whole reach
    fn as they are; a chunk of no rows is refused."""
    from bayesvmf import _data

    rows = _blocks.sum_chunk_rows  # (n, bytes of a row, columns)
    assert rows(50_000, 256 * 4, 32) == 3847  # 13 chunks of about 4,096 rows
    assert rows(30_000, 256 * 4, 32) is None  # 30.7 MB of values: under 32 MiB
    assert rows(20_000, 5_000 * 4, 16) is None  # wide rows, few values
    assert rows(200_000, 50_000 * 4, 16) is None  # a chunk of 256 rows holds 51 MB
    assert rows(10**6, 256 * 4, 10**4) == _blocks.SUM_CHUNK_MIN_ROWS  # 3,907 chunks of 256
    for n in (33_000, 50_000, 123_457, 500_000):
        for columns in (32, 320):
            size = rows(n, 1024, columns)
            n_chunks = -(-n // size)
            assert size >= _blocks.SUM_CHUNK_MIN_ROWS and 0 <= n_chunks * size - n < n_chunks
            assert size * (1024 + 32 * columns) <= 2 * _blocks.SUM_CHUNK_BYTES
    seen = []
    X = check_directional(np.random.default_rng(0).normal(size=(64, 3)))
    with jax.enable_x64(True):
        data = _data.to_device(X)
        out = data.map_sums(
            lambda r, d: seen.append(d) or d.X.sum(), None, columns=1, chunk_rows=64
        )
    assert seen == [data]
    np.testing.assert_allclose(float(out), X.sum(), rtol=1e-13)
    for bad in (0, -3):
        with pytest.raises(
            ValueError, match=f"chunk_rows must be a positive number of rows, got {bad}"
        ):
            data.map_sums(lambda r, d: d.X.sum(), None, columns=1, chunk_rows=bad)
