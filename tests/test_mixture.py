"""Tests of the shared mixture machinery (bayesvmf/_mixture.py), on small problems."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.special
import scipy.stats

from bayesvmf import _data, _mixture, _parallel, _seeding, special

N, D, K = 40, 7, 3


@pytest.fixture(scope="module")
def X():
    """A small sparse-ish matrix with unit rows (about half of the entries zero)."""
    rng = np.random.default_rng(3)
    A = rng.random((N, D)) * (rng.random((N, D)) < 0.5)
    A[:, 0] += 0.1  # no zero row
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def _all_data(X, dtype=jnp.float64):
    """The same matrix as dense data and as sparse data with each kernel."""
    Xs = sp.csr_matrix(X)
    return {
        "dense": _data.to_device(X, dtype),
        "scipy": _data.to_device(Xs, dtype, kernel="scipy"),
        "segment_sum": _data.to_device(Xs, dtype, kernel="segment_sum"),
    }


def test_to_device_kernels_and_input_unmodified(X):
    Xs = sp.coo_matrix(X)
    before = Xs.copy()
    assert _data.to_device(Xs, kernel="scipy").kernel == "scipy"
    assert _data.to_device(Xs, kernel="segment_sum").kernel == "segment_sum"
    assert _data.to_device(Xs).kernel == "scipy"  # "auto" on the CPU test backend
    assert _data.to_device(Xs).nnz == Xs.nnz
    assert (Xs != before).nnz == 0
    with pytest.raises(ValueError, match="kernel"):
        _data.to_device(Xs, kernel="bcsr")


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_data_dot_and_tdot_match_scipy(X, dtype):
    rng = np.random.default_rng(0)
    M, R = rng.normal(size=(D, K)), rng.normal(size=(N, K))
    Xs = sp.csr_matrix(X)
    tol = 1e-13 if dtype == jnp.float64 else 1e-5
    for name, data in _all_data(X, dtype).items():
        dot = data.dot(jnp.asarray(M))
        tdot = data.tdot(jnp.asarray(R))
        assert dot.dtype == jnp.float64 and tdot.dtype == jnp.float64, name
        np.testing.assert_allclose(dot, Xs @ M, atol=tol, err_msg=name)
        np.testing.assert_allclose(tdot, Xs.T @ R, atol=tol, err_msg=name)


@pytest.mark.parametrize("kernel", ["scipy", "segment_sum"])
def test_products_jit_and_vmap_over_right_hand_sides(X, kernel):
    """Restarts vmap the products over their right-hand side (B of them at once)."""
    rng = np.random.default_rng(1)
    Ms, Rs = rng.normal(size=(4, D, K)), rng.normal(size=(4, N, K))
    data = _data.to_device(sp.csr_matrix(X), kernel=kernel)
    dot = jax.jit(jax.vmap(lambda d, m: d.dot(m), in_axes=(None, 0)))(data, jnp.asarray(Ms))
    tdot = jax.jit(jax.vmap(lambda d, r: d.tdot(r), in_axes=(None, 0)))(data, jnp.asarray(Rs))
    np.testing.assert_allclose(dot, np.einsum("nd,bdk->bnk", X, Ms), atol=1e-13)
    np.testing.assert_allclose(tdot, np.einsum("nd,bnk->bdk", X, Rs), atol=1e-13)


@pytest.mark.parametrize("shape", [(1, 3), (37, 5), (5000, 40), (20011, 256)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_dense_second_product_at_many_sizes(shape, dtype):
    """Dense ``X.T @ R`` sums over the rows of X as stored (no transposed copy): jitted,
    plain, as rows, vmapped over restarts and with the restarts as a leading axis, at sizes
    from one row to a prime number of rows (jaxlib 0.10.2 miscompiles some CPU reductions at
    some sizes only), against float64 NumPy. float32 data and products: within 2e-6 of the
    terms' scale (sum_i |x_i| |r_i|), float64: 1e-14."""
    rng = np.random.default_rng(shape[0])
    X = rng.normal(size=shape)
    R = rng.normal(size=(3, shape[0], 4))
    with jax.enable_x64(True):
        data = _data.to_device(X, dtype)
        Rd = jnp.asarray(R, dtype)
        got = {
            "plain": jax.jit(lambda d, r: d.tdot(r))(data, Rd[0]),
            "as_rows": jax.jit(lambda d, r: d.tdot(r, as_rows=True).T)(data, Rd[0]),
            "vmapped": jax.jit(jax.vmap(lambda d, r: d.tdot(r), in_axes=(None, 0)))(data, Rd),
            "batched": jax.jit(lambda d, r: d.tdot(r))(data, Rd),
        }
    Xq = np.asarray(data.X, np.float64)  # the stored values: the cast is not the product
    Rq = np.asarray(Rd, np.float64)
    want = np.einsum("nd,bnk->bdk", Xq, Rq)
    scale = np.einsum("nd,bnk->bdk", np.abs(Xq), np.abs(Rq))
    tol = 2e-6 if dtype == jnp.float32 else 1e-14
    for name, value in got.items():
        assert value.dtype == dtype, name  # in the dtype of R
        value = np.asarray(value, np.float64)
        batched = value.ndim == 3
        assert value.shape == (want.shape if batched else want.shape[1:]), name
        err = np.abs(value - (want if batched else want[0])) / (scale if batched else scale[0])
        assert err.max() <= tol, (name, err.max())


@pytest.mark.parametrize("dense_bytes", [1, 2 * D * K * 8, 10**9])
def test_scipy_products_in_groups_of_restarts(X, dense_bytes, monkeypatch):
    """Restarts beyond PRODUCT_DENSE_BYTES take separate passes: one per restart, two groups
    of 2 (the last one short: 5 restarts) or one pass; the result is the same."""
    monkeypatch.setattr(_data, "PRODUCT_DENSE_BYTES", dense_bytes)
    rng = np.random.default_rng(2)
    Ms, Rs = rng.normal(size=(5, D, K)), rng.normal(size=(5, N, K))
    Xs = sp.csr_matrix(X)
    with jax.enable_x64(True):
        data = _data.to_device(Xs, kernel="scipy")
        # a fresh jit per case: the host function is looked up when the program runs
        dot = jax.jit(jax.vmap(lambda d, m: d.dot(m), in_axes=(None, 0)))
        tdot = jax.jit(jax.vmap(lambda d, r: d.tdot(r), in_axes=(None, 0)))
        got_dot, got_tdot = dot(data, jnp.asarray(Ms)), tdot(data, jnp.asarray(Rs))
    np.testing.assert_allclose(got_dot, np.einsum("nd,bdk->bnk", X, Ms), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(got_tdot, np.einsum("nd,bnk->bdk", X, Rs), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("n_blocks", [1, 2, 3])
def test_scipy_products_in_row_blocks(n_blocks, monkeypatch):
    """The "scipy" kernel multiplies row blocks of about equal nnz side by side: X @ B has
    exactly the rows of one product, X.T @ R the same sums up to rounding, and the blocks
    are forgotten with their host matrix."""
    import gc

    monkeypatch.setattr(_data, "PRODUCT_BLOCKS", n_blocks)
    monkeypatch.setattr(_data, "THREADED_MIN_NNZ", 0)
    rng = np.random.default_rng(8)
    dense = sp.random(61, 9, density=0.4, random_state=rng).toarray()
    dense[:5] = 0.0  # empty rows at a block's start
    A = sp.csr_matrix(dense)
    M, R = rng.normal(size=(9, 4)), rng.normal(size=(61, 4))
    with jax.enable_x64(True):
        data = _data.to_device(A, kernel="scipy")
        handle = data.handle
        key = int(np.asarray(handle)[0])
        dot = _data._host_product(handle, M, shape=A.shape, transpose=False, bits=False)
        tdot = _data._host_product(handle, R, shape=A.shape, transpose=True, bits=False)
        blocks = _data._ROW_BLOCKS.get(key, {}).get(n_blocks, [])
        assert (key in _data._ROW_BLOCKS) == (n_blocks > 1)
        del data, handle
        gc.collect()
    np.testing.assert_array_equal(dot, A @ M)
    np.testing.assert_allclose(tdot, A.T @ R, rtol=1e-14, atol=1e-14)
    if n_blocks > 1:
        assert blocks[0][0] == 0 and blocks[-1][1] == 61 and len(blocks) == n_blocks
        assert sum(b[2].nnz for b in blocks) == A.nnz
    assert key not in _data._ROW_BLOCKS


def test_fit_with_products_in_row_blocks_equals_one_block(monkeypatch):
    """A whole fit on "scipy"-kernel data, its products in two row blocks inside the
    compiled programs (the custom call and the thread pool), equals the fit with one block
    to rounding: the same labels and parameters."""
    from bayesvmf.models import SparseVMFMixture

    rng = np.random.default_rng(9)
    centres = np.abs(rng.normal(size=(3, 12))) * (rng.random((3, 12)) < 0.5) + 0.05
    y = rng.integers(0, 3, 300)
    Xs = sp.csr_matrix(np.abs(centres[y] + 0.1 * rng.normal(size=(300, 12))) * (centres[y] > 0.1))
    fits = []
    for n_blocks in (1, 2):
        monkeypatch.setattr(_data, "PRODUCT_BLOCKS", n_blocks)
        monkeypatch.setattr(_data, "THREADED_MIN_NNZ", 0)
        fits.append(SparseVMFMixture(3, dtype="float64", random_state=0).fit(Xs))
    one, two = fits
    np.testing.assert_array_equal(two.labels_, one.labels_)
    np.testing.assert_allclose(two.mean_directions_, one.mean_directions_, atol=1e-12)
    np.testing.assert_allclose(two.concentrations_, one.concentrations_, rtol=1e-10)


def test_e_step_matches_direct_formula(X):
    rng = np.random.default_rng(2)
    mu = rng.normal(size=(K, D))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    kappa = np.array([2.0, 10.0, 50.0])
    log_w = np.log([0.2, 0.3, 0.5])
    log_c = np.asarray(_mixture.log_normalizer(D, kappa))
    # direct: responsibilities tau_ik proportional to alpha_k C_d(kappa_k) exp(kappa_k mu_k.x_i)
    dens = np.exp(log_w + log_c + kappa * (X @ mu.T))
    resp = dens / dens.sum(axis=1, keepdims=True)
    for name, data in _all_data(X).items():
        log_resp, log_norm = _mixture.e_step(data, log_w, mu, kappa, log_c)
        np.testing.assert_allclose(np.exp(log_resp), resp, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(log_norm, np.log(dens.sum(axis=1)), rtol=1e-12, err_msg=name)


def test_log_normalizer_matches_scipy():
    kappa = np.array([0.5, 5.0, 80.0])
    nu = D / 2 - 1
    direct = (
        nu * np.log(kappa) - D / 2 * np.log(2 * np.pi) - np.log(scipy.special.ive(nu, kappa))
    ) - kappa
    np.testing.assert_allclose(_mixture.log_normalizer(D, kappa), direct, rtol=1e-12)


@pytest.mark.parametrize("d", [3, 50, 5000])
def test_log_normalizers_equal_separate_calls(d):
    # values over every branch of the special function (tiny, moderate, huge kappa), in
    # arrays of three shapes; one call on the concatenation, compiled, against one call each
    rng = np.random.default_rng(0)
    kappas = [
        np.array([0.0, 1e-8, 0.5]),
        10.0 ** rng.uniform(-3, 6, size=(2, 1)),
        10.0 ** rng.uniform(-3, 6, size=(4, 3, 5)),
    ]
    with jax.enable_x64(True):
        together = jax.jit(lambda *k: _mixture.log_normalizers(d, *k))(*kappas)
        for kappa, value in zip(kappas, together, strict=True):
            alone = jax.jit(lambda k: _mixture.log_normalizer(d, k))(kappa)
            assert value.shape == kappa.shape
            np.testing.assert_allclose(value, alone, rtol=1e-14, atol=0)


def test_resultants_dense_sparse_scipy_agree(X):
    resp = np.random.default_rng(4).dirichlet(np.ones(K), size=N)
    expected = sp.csr_matrix(X).T.dot(resp).T
    for name, data in _all_data(X).items():
        resultant, resp_sum = _mixture.resultants(data, jnp.asarray(resp))
        np.testing.assert_allclose(resultant, expected, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(resp_sum, resp.sum(axis=0), rtol=1e-13, err_msg=name)


def _seeds(init, data, n_keys=5):
    """Seeds of ``n_keys`` keys, by one jitted, vmapped call (as the estimators run them)."""
    keys = jax.random.split(jax.random.key(0), n_keys)
    return np.asarray(jax.jit(jax.vmap(lambda k, data: init(k, data, K), (0, None)))(keys, data))


@pytest.mark.parametrize("kernel", ["dense", "scipy", "segment_sum"])
def test_init_random_rows_picks_distinct_rows(X, kernel):
    for mu in _seeds(_seeding.init_random_rows, _all_data(X)[kernel]):
        # every seed is a row of X, and the K rows are distinct
        match = np.all(np.isclose(mu[:, None, :], X[None], atol=1e-14), axis=-1)
        assert (match.sum(axis=1) >= 1).all()
        idx = match.argmax(axis=1)
        assert len(set(idx.tolist())) == K


def test_crisp_statistics_assign_to_closest_seed(X):
    data = _all_data(X)["scipy"]
    mu = np.asarray(_seeding.init_random_rows(jax.random.key(0), data, K))
    resultant, resp_sum = _parallel.crisp_statistics(data, mu)
    labels = np.argmax(X @ mu.T, axis=1)
    onehot = np.eye(K)[labels]
    np.testing.assert_allclose(resultant, onehot.T @ X, atol=1e-13)
    np.testing.assert_array_equal(resp_sum, onehot.sum(axis=0))


def test_weighted_hard_passes_are_the_passes_over_those_rows(X):
    """Row weights 0/1 in spherical_kmeans (H-vMFmix's top-down start) give the passes over
    the rows of weight 1 alone; weights all 1 give the unweighted passes exactly."""
    data = _all_data(X)["scipy"]
    keep = np.arange(N) % 3 != 0
    mu = _seeding.init_random_rows(jax.random.key(0), data, K)
    passes = np.int64(20)
    weighted = _parallel.spherical_kmeans(data, mu, passes, jnp.asarray(keep, jnp.float64))
    alone = _parallel.spherical_kmeans(_all_data(X[keep])["scipy"], mu, passes)
    every = _parallel.spherical_kmeans(data, mu, passes)
    np.testing.assert_allclose(weighted, alone, atol=1e-13)
    assert np.abs(np.asarray(weighted) - np.asarray(every)).max() > 1e-3
    ones = _parallel.spherical_kmeans(data, mu, passes, jnp.ones(N))
    np.testing.assert_array_equal(ones, every)


@pytest.mark.parametrize("method", ["spherical-kmeans++", "greedy-spherical-kmeans++"])
def test_kmeanspp_seeds_are_distinct_rows(X, method):
    for mu in _seeds(_seeding.INIT_METHODS[method], _all_data(X)["scipy"]):
        match = np.all(np.isclose(mu[:, None, :], X[None], atol=1e-14), axis=-1)
        assert (match.sum(axis=1) >= 1).all()
        # distinct directions: a seed equal to an earlier one has dissimilarity 0, weight 0
        assert np.all(np.abs(mu @ mu.T - np.eye(K)).max(axis=1) < 1 - 1e-12)


def test_greedy_kmeanspp_leaves_less_dissimilarity():
    """Greedy k-means++ keeps, at every seed, the candidate of least total dissimilarity
    sum_i (1 - max_k x_i.mu_k): over 20 keys its seeds leave less than plain k-means++'s,
    and one candidate per seed is plain k-means++ itself (the same draws)."""
    rng = np.random.default_rng(4)
    centres = rng.normal(size=(6, 12))
    A = np.abs(centres[rng.integers(0, 6, 300)] + 0.5 * rng.normal(size=(300, 12)))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    with jax.enable_x64(True):
        data = _data.to_device(sp.csr_matrix(A), kernel="scipy")
        keys = jax.random.split(jax.random.key(1), 20)

        def loss(init):
            mu = np.asarray(jax.jit(jax.vmap(lambda k: init(k, data, 6)))(keys))
            return np.sum(1.0 - np.max(np.einsum("nd,bkd->bnk", A, mu), axis=2), axis=1)

        plain = loss(_seeding.INIT_METHODS["spherical-kmeans++"])
        greedy = loss(_seeding.INIT_METHODS["greedy-spherical-kmeans++"])
        one = loss(lambda k, data, n: _seeding.init_spherical_kmeanspp(k, data, n, 1))
    assert _seeding.greedy_trials(6) == 3 and _seeding.greedy_trials(20) == 4
    np.testing.assert_array_equal(one, plain)
    assert greedy.mean() < 0.9 * plain.mean() and np.median(greedy) < np.median(plain)


def test_uniform_order_is_a_uniform_permutation():
    """Every key gives a permutation of range(n), and over 12,000 keys each element takes
    each position equally often (chi-square against the uniform table, 25 cells)."""
    n, draws = 5, 12_000
    keys = jax.random.split(jax.random.key(7), draws)
    orders = np.asarray(jax.jit(jax.vmap(lambda k: _seeding.uniform_order(k, n)))(keys))
    assert orders.dtype == np.int32
    np.testing.assert_array_equal(np.sort(orders, axis=1), np.tile(np.arange(n), (draws, 1)))
    table = np.zeros((n, n))
    np.add.at(table, (orders, np.tile(np.arange(n), (draws, 1))), 1)
    assert scipy.stats.chisquare(table.ravel()).pvalue > 1e-3


def test_inverse_cdf_rows_draws_by_softmax_of_the_logits():
    """Draws from uniforms follow softmax(logits) (chi-square over 20,000 draws); rows of
    logit -inf are never drawn, at either end of [0, 1) either."""
    p = np.array([0.0, 0.1, 0.0, 0.25, 0.4, 0.0, 0.25])
    with np.errstate(divide="ignore"):
        logits = jnp.asarray(np.log(p) + 3.0)
    u = np.random.default_rng(8).random(20_000)
    with jax.enable_x64(True):
        rows = np.asarray(jax.jit(_seeding.inverse_cdf_rows)(jnp.asarray(u), logits))
        ends = np.asarray(_seeding.inverse_cdf_rows(jnp.asarray([0.0, 1.0 - 2.0**-52]), logits))
    counts = np.bincount(rows, minlength=p.size)
    assert counts[p == 0].sum() == 0
    assert scipy.stats.chisquare(counts[p > 0], p[p > 0] * u.size).pvalue > 1e-3
    np.testing.assert_array_equal(ends, [1, 6])


def test_inverse_cdf_rows_never_draws_a_zero_weight_row_at_any_boundary():
    """4,096 rows (XLA's CPU cumsum is a blocked scan there, rounded unlike one sum), 30% of
    weight 0 over eleven decades: the cumulative weights never decrease and are flat at the
    zero rows, and a draw at every boundary F_{i-1} / F_n (where a rising zero row would be
    drawn; a helper's review found one, probability 3e-17) gives a row of positive weight."""
    rng = np.random.default_rng(1)
    n = 4096
    with jax.enable_x64(True):
        draw = jax.jit(_seeding.inverse_cdf_rows)
        cumulative = jax.jit(_seeding._cumulative_weights)
        for _ in range(5):
            w = rng.random(n) * 10.0 ** rng.uniform(-8, 3, n)
            w[rng.random(n) < 0.3] = 0.0
            with np.errstate(divide="ignore"):
                logits = jnp.asarray(np.log(w))
            cdf = np.asarray(cumulative(logits))
            finite = np.isfinite(cdf)
            assert np.all(np.diff(cdf[finite]) >= 0)
            assert np.all(np.diff(cdf)[(w[1:] == 0) & finite[:-1]] == 0)
            u = np.clip(cdf[:-1][finite[:-1]] / cdf[-1], 0.0, np.nextafter(1.0, 0.0))
            rows = np.asarray(draw(jnp.asarray(u), logits))
            assert np.all(w[rows] > 0)


def test_kmeanspp_draws_follow_the_dissimilarity():
    """Plain spherical k-means++ with two seeds on four rows: the first is uniform, the
    second is row j with probability (1 - x_i.x_j) / sum_l (1 - x_i.x_l) given the first i
    (Arthur & Vassilvitskii's D^2 weighting with the cosine dissimilarity); chi-square of the
    joint counts of 8,000 keys against those probabilities."""
    angles = np.array([0.0, 0.3, 1.2, 2.5])
    A = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    dissim = 1.0 - A @ A.T
    expected = 0.25 * dissim / dissim.sum(axis=1, keepdims=True)
    keys = jax.random.split(jax.random.key(9), 8000)
    with jax.enable_x64(True):
        data = _data.to_device(A)
        seeds = np.asarray(
            jax.jit(jax.vmap(lambda k: _seeding.init_spherical_kmeanspp(k, data, 2)))(keys)
        )
    rows = np.argmax(np.einsum("bkd,nd->bkn", seeds, A), axis=2)
    np.testing.assert_allclose(seeds, A[rows], atol=1e-14)
    table = np.zeros((4, 4))
    np.add.at(table, (rows[:, 0], rows[:, 1]), 1)
    assert np.all(table[np.eye(4, dtype=bool)] == 0)
    off = ~np.eye(4, dtype=bool)
    assert scipy.stats.chisquare(table[off], expected[off] * len(keys)).pvalue > 1e-3


def test_seeding_sample_draws_distinct_rows_of_large_dense_data(monkeypatch):
    """Dense data of more than max(SEEDING_ROWS, SEEDING_ROWS_PER_COMPONENT K) rows are
    seeded from that many distinct rows, in the data's dtype; smaller or sparse data are
    seeded from all rows, and k-means++'s seeds are then rows of the subsample."""
    monkeypatch.setattr(_seeding, "SEEDING_ROWS", 50)
    monkeypatch.setattr(_seeding, "SEEDING_ROWS_PER_COMPONENT", 20)
    rng = np.random.default_rng(5)
    A = np.abs(rng.normal(size=(90, 5)))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    key = jax.random.key(3)
    with jax.enable_x64(True):
        for dtype in (jnp.float32, jnp.float64):
            sample = _seeding.seeding_sample(key, _data.to_device(A, dtype), 2)  # 50 rows
            assert isinstance(sample, _data.DenseData) and sample.X.dtype == dtype
            rows = np.asarray(sample.X, np.float64)
            assert rows.shape == (50, 5) and len(np.unique(rows, axis=0)) == 50
            match = np.isclose(rows[:, None, :], A[None], atol=1e-7).all(axis=-1)
            assert (match.sum(axis=1) == 1).all()
        # 3 components: 60 rows; 5: 100 > 90, all rows; sparse data: all rows
        assert _seeding.seeding_sample(key, _data.to_device(A), 3).shape == (60, 5)
        dense = _data.to_device(A)
        assert _seeding.seeding_sample(key, dense, 5) is dense
        sparse = _data.to_device(sp.csr_matrix(A))
        assert _seeding.seeding_sample(key, sparse, 2) is sparse
        # the seeds are rows of the sample the same key draws
        sample = np.asarray(_seeding.seeding_sample(key, dense, 2).X)
        mu = np.asarray(_seeding.INIT_METHODS["greedy-spherical-kmeans++"](key, dense, 2))
    assert np.isclose(mu[:, None, :], sample[None], atol=1e-14).all(axis=-1).any(axis=1).all()


def test_host_seeding_sample_draws_distinct_rows_of_large_sparse_data(monkeypatch):
    """Sparse data of the "scipy" kernel with more rows than seeding_size give that many
    distinct rows of X, drawn on the host (the same for one key, others for another), as
    "scipy" sparse data of the same dtype; other data, or fewer rows, give None."""
    monkeypatch.setattr(_seeding, "SEEDING_ROWS", 50)
    monkeypatch.setattr(_seeding, "SEEDING_ROWS_PER_COMPONENT", 20)
    rng = np.random.default_rng(6)
    A = np.abs(rng.normal(size=(90, 5))) * (rng.random((90, 5)) < 0.6)
    A[:, 0] += 0.1
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    with jax.enable_x64(True):
        data = _data.to_device(sp.csr_matrix(A), jnp.float32, kernel="scipy")
        sample = _seeding.host_seeding_sample(jax.random.key(1), data, 2)
        again = _seeding.host_seeding_sample(jax.random.key(1), data, 2)
        other = _seeding.host_seeding_sample(jax.random.key(2), data, 2)
        assert sample.kernel == "scipy" and sample.dtype == jnp.float32
        rows = _data.host_csr(sample).toarray().astype(np.float64)
        assert rows.shape == (50, 5) and len(np.unique(rows, axis=0)) == 50
        match = np.isclose(rows[:, None, :], A[None], atol=1e-7).all(axis=-1)
        assert (match.sum(axis=1) == 1).all()
        assert (_data.host_csr(again) != _data.host_csr(sample)).nnz == 0
        assert (_data.host_csr(other) != _data.host_csr(sample)).nnz > 0
        for none in (
            _seeding.host_seeding_sample(jax.random.key(1), data, 5),  # 100 rows > 90
            _seeding.host_seeding_sample(jax.random.key(1), _data.to_device(A), 2),
            _seeding.host_seeding_sample(
                jax.random.key(1), _data.to_device(sp.csr_matrix(A), kernel="segment_sum"), 2
            ),
        ):
            assert none is None


def test_kmeanspp_falls_back_when_all_rows_equal():
    Xe = np.tile(np.eye(D)[:1], (10, 1))
    mu = _seeds(_seeding.init_spherical_kmeanspp, _data.to_device(Xe), 1)[0]
    assert np.isfinite(mu).all()
    np.testing.assert_allclose(mu, np.tile(Xe[:1], (K, 1)))


def test_solve_kappa_matches_special_with_cap():
    rho = np.array([0.0, 1e-3, 0.3, 0.9, 0.999, 1 - 1e-13, 1.0, 1.2])
    kappa_max = 1e5
    kappa, collapsed = _mixture.solve_kappa(D, rho, kappa_max)
    kappa, collapsed = np.asarray(kappa), np.asarray(collapsed)
    raw = np.asarray(special.kappa_from_rbar(D, jnp.asarray(np.clip(rho, 0, 1 - 1e-15))))
    below = (rho > 0) & (rho < 0.999)
    np.testing.assert_allclose(kappa[below], raw[below], rtol=1e-14)
    # A_d(kappa) = rho at the solution (ive ratio, eq. (21))
    a_d = scipy.special.ive(D / 2, kappa[below]) / scipy.special.ive(D / 2 - 1, kappa[below])
    np.testing.assert_allclose(a_d, rho[below], rtol=1e-10)
    assert kappa[0] == 0.0 and not collapsed[0]
    assert not collapsed[below].any()
    # rho close to or at 1 (and beyond): the cap, flagged as collapsed
    np.testing.assert_array_equal(kappa[5:], kappa_max)
    assert collapsed[5:].all()
    assert kappa[4] < kappa_max and not collapsed[4]


def test_describe_status():
    S = _mixture.Status
    assert _mixture.describe_status(S.OK) == "ok"
    text = _mixture.describe_status(S.COLLAPSED | S.ZERO_DIRECTION)
    assert "kappa_max" in text and "zeroed" in text and "empty" not in text


def test_scipy_kernel_float64_under_scoped_x64_only():
    """float64 products stay float64 when only a scoped ``enable_x64`` is on (the estimators'
    set-up): XLA may run the callback on a thread where x64 is off (regression test)."""
    rng = np.random.default_rng(5)
    Xs = sp.random(300, 2000, density=0.05, random_state=5, format="csr")
    R = rng.normal(size=(4, 300, K))
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        with jax.enable_x64(True):
            for dtype in (jnp.float32, jnp.float64, jnp.float64):
                data = _data.to_device(Xs, dtype, kernel="scipy")
                f = jax.jit(jax.vmap(lambda d, r: d.tdot(r), in_axes=(None, 0)))
                for _ in range(3):
                    out = np.asarray(f(data, jnp.asarray(R)))
            assert out.dtype == np.float64
            np.testing.assert_allclose(out[1], Xs.T @ R[1], atol=1e-13)
    finally:
        jax.config.update("jax_enable_x64", previous)


def test_best_run_keeps_the_first_near_tie():
    # restarts 1 and 3 reached one optimum (bounds equal to rounding): the first is kept,
    # whichever of the two rounding made larger
    assert _mixture.best_run([-5.0, 2.0 + 1e-12, 1.0, 2.0], margin=1e-6) == 1
    assert _mixture.best_run([-5.0, 2.0, 1.0, 2.0 + 1e-12], margin=1e-6) == 1
    # a better restart beyond the margin wins; non-finite bounds are never kept
    assert _mixture.best_run([2.0, np.nan, 2.1, -np.inf], margin=1e-6) == 2
    assert _mixture.best_run([np.nan, np.nan], margin=1e-6) == 0


def test_scipy_kernel_keeps_the_csr_on_the_host_without_copying(X):
    Xs = sp.csr_matrix(X)
    Xs.indices = Xs.indices.astype(np.int32)
    with jax.enable_x64(True):
        data = _data.to_device(Xs, jnp.float64, kernel="scipy")
        mixed = _data.to_device(Xs, jnp.float32, kernel="scipy")
    # the program holds one int32 handle per block; float64 values, indices and row
    # pointers are the caller's arrays, float32 ("mixed") values a cast copy
    assert data.cols is None and data.values is None and data.handle.shape == (1,)
    (block,) = _data.host_blocks(data)
    for attr in ("data", "indices", "indptr"):
        assert np.shares_memory(getattr(block, attr), getattr(Xs, attr))
    (block32,) = _data.host_blocks(mixed)
    assert block32.dtype == np.float32 and np.shares_memory(block32.indices, Xs.indices)
    assert data.nnz == Xs.nnz and data.dtype == jnp.float64 and mixed.dtype == jnp.float32


def test_host_block_lives_while_its_handle_does(X):
    """The registry entry outlives the SparseData while a handle array (as an enqueued
    program holds it) is alive, and is released with the last of them."""
    import gc

    with jax.enable_x64(True):
        data = _data.to_device(sp.csr_matrix(X), kernel="scipy")
        handle = data.handle
        key = int(np.asarray(handle)[0])
        del data
        gc.collect()
        assert key in _data._HOST_BLOCKS  # the handle's buffer keeps its block alive
        out = _data._host_product(handle, np.eye(D), shape=(N, D), transpose=False, bits=False)
        np.testing.assert_allclose(out, X, rtol=1e-15)
        del handle
        gc.collect()
        assert key not in _data._HOST_BLOCKS
        with pytest.raises(RuntimeError, match=f"the host CSR block {key} of a sparse product"):
            _data._host_product(
                np.array([key], np.int32), np.eye(D), shape=(N, D), transpose=False, bits=False
            )


def test_with_device_csr_adds_the_arrays_gibbs_reads(X):
    Xs = sp.csr_matrix(X)
    with jax.enable_x64(True):
        data = _data.with_device_csr(_data.to_device(Xs, kernel="scipy"))
        np.testing.assert_array_equal(np.asarray(data.indptr), Xs.indptr)
        np.testing.assert_array_equal(np.asarray(data.cols), Xs.indices)
        np.testing.assert_array_equal(np.asarray(data.values), Xs.data)
        # the products still run on the host block
        np.testing.assert_allclose(np.asarray(data.tdot(jnp.eye(N))), X.T)
