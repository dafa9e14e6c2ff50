"""Streaming: stepwise EM (SparseVMFMixture.partial_fit) and the chunked .npz reader."""

import copy
import re
import warnings

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import ive, logsumexp
from sklearn.utils._param_validation import InvalidParameterError

from bayesvmf import _blocks, _mixture
from bayesvmf.data import check_directional
from bayesvmf.exceptions import DegenerateRunWarning
from bayesvmf.models import SparseVMFMixture
from bayesvmf.models import sparse as S
from bayesvmf.streaming import chunk_rows, fit_streaming, iter_chunks, load_chunk

N, D, K, N_CHUNKS = 1200, 200, 4, 8


def make_corpus(seed=0):
    """Binary bag-of-words: K topics with 40-word vocabularies, half the words shared."""
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, K, N)
    vocab = np.stack([rng.choice(D, 40, replace=False) for _ in range(K)])
    rows = np.repeat(np.arange(N), 20)
    own = rng.random(rows.size) < 0.5
    cols = np.where(
        own, vocab[topic[rows], rng.integers(0, 40, rows.size)], rng.integers(0, D, rows.size)
    )
    X = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(N, D))
    X.data[:] = 1.0  # duplicates summed: binary presence
    return X


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    X = make_corpus()
    folder = tmp_path_factory.mktemp("corpus")
    paths = []
    for i, rows in enumerate(np.array_split(np.arange(N), N_CHUNKS)):
        paths.append(folder / f"part{i}.npz")
        sp.save_npz(paths[-1], X[rows])
    return X, paths


@pytest.fixture(scope="module")
def fits(corpus):
    X, paths = corpus
    batch = SparseVMFMixture(K, n_init=3, random_state=0).fit(X)
    stream = SparseVMFMixture(K, n_init=3, random_state=0)
    chunks = iter_chunks(paths)
    stream.partial_fit(next(chunks))
    first_chunk_ll = stream.score_samples(X).sum()
    for chunk in chunks:
        stream.partial_fit(chunk, n_samples=N)
    return batch, stream, first_chunk_ll


def test_streamed_fit_within_one_percent_of_batch(corpus, fits):
    X, _ = corpus
    batch, stream, first_chunk_ll = fits
    batch_ll = batch.score_samples(X).sum()
    gap = (batch_ll - stream.score_samples(X).sum()) / abs(batch_ll)
    first_gap = (batch_ll - first_chunk_ll) / abs(batch_ll)
    assert abs(gap) < 0.01
    # decisive: the model of the first chunk alone is clearly worse, and streaming the other
    # seven chunks recovers most of the difference
    assert first_gap > 0.003
    assert gap < 0.2 * first_gap
    assert stream.n_samples_seen_ == N and stream.n_steps_ == N_CHUNKS - 1


def test_online_step_is_the_running_average_and_the_batch_m_step(corpus, fits):
    X, paths = corpus
    _, stream, _ = fits
    chunk = check_directional(load_chunk(paths[3]))
    stats0, log_w, mu, kappa = stream._online
    step, n = 0.3, 1000.0
    with jax.enable_x64(True):
        data = _blocks.device_data(chunk, bucket=True)
        stats, new_lw, new_mu, new_kappa, status, ll = S.online_em_step(
            stats0, log_w, mu, kappa, data, step, n, 0.0, 1e6, shared_kappa=False
        )
        log_c = np.asarray(_mixture.log_normalizer(D, kappa))
    # reference E-step in NumPy/SciPy on the unpadded chunk
    wlp = chunk @ np.asarray(mu).T * np.asarray(kappa) + log_c + np.asarray(log_w)
    log_norm = logsumexp(wlp, axis=1)
    resp = np.exp(wlp - log_norm[:, None])
    m = chunk.shape[0]
    want_n = (1 - step) * np.asarray(stats0.resp_sum) + step * resp.sum(0) / m
    want_r = (1 - step) * np.asarray(stats0.resultant) + step * np.asarray(chunk.T @ resp).T / m
    np.testing.assert_allclose(float(ll), log_norm.sum(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(stats.resp_sum), want_n, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(stats.resultant), want_r, rtol=1e-11, atol=1e-15)
    assert int(status) == 0
    # beta = 0: mu_k = r_k / |r_k|, alpha_k = N_k / sum N (eqs. (20), (22))
    np.testing.assert_allclose(
        np.asarray(new_mu), want_r / np.linalg.norm(want_r, axis=1, keepdims=True), rtol=1e-10
    )
    np.testing.assert_allclose(np.exp(np.asarray(new_lw)), want_n / want_n.sum(), rtol=1e-10)
    # kappa solves A_d(kappa) = |r_k| / N_k (eq. (21)); A_d = I_{d/2} / I_{d/2-1} by SciPy
    kappa_new = np.asarray(new_kappa)
    a_d = ive(D / 2, kappa_new) / ive(D / 2 - 1, kappa_new)
    np.testing.assert_allclose(a_d, np.linalg.norm(want_r, axis=1) / want_n, rtol=1e-10)


def test_penalised_streaming_and_no_recompilation(corpus, fits):
    X, paths = corpus
    beta = 300.0
    with warnings.catch_warnings():
        # some of the restarts of the batch fit degenerate at this beta (the best is kept)
        warnings.simplefilter("ignore", DegenerateRunWarning)
        batch = SparseVMFMixture(K, n_init=3, beta=beta, random_state=0).fit(X)
    before = dict(_mixture.TRACE_COUNTS)
    stream = fit_streaming(SparseVMFMixture(K, n_init=3, beta=beta, random_state=0), paths)
    # same chunk shapes, a new penalty (traced): nothing is compiled again
    assert _mixture.TRACE_COUNTS == before

    def objective(model):
        return model.score_samples(X).sum() - beta * np.abs(model.mean_directions_).sum()

    assert batch.sparsity_ > 0.2 and stream.sparsity_ > 0.2
    assert abs(objective(stream) - objective(batch)) < 0.01 * abs(objective(batch))


def test_iter_chunks_checks_files(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, X=np.array([[3.0, 4.0], [0.0, 2.0]]))
    single = tmp_path / "single.npz"
    np.savez(single, np.array([[1.0, 0.0]]))
    assert [c.shape for c in iter_chunks([good, single])] == [(2, 2), (1, 2)]
    np.testing.assert_allclose(next(iter_chunks([good])), [[0.6, 0.8], [0.0, 1.0]])
    assert chunk_rows(good) == 2 and chunk_rows(single) == 1
    wide = tmp_path / "wide.npz"
    np.savez(wide, X=np.ones((2, 3)))
    with pytest.raises(ValueError, match="wide.npz' has 3 columns, but the first chunk has 2"):
        list(iter_chunks([good, wide]))
    two = tmp_path / "two.npz"
    np.savez(two, a=np.ones((2, 2)), b=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"two.npz' holds arrays \['a', 'b'\]"):
        list(iter_chunks([two]))
    with pytest.raises(ValueError, match="two.npz' holds arrays"):
        chunk_rows(two)
    zero = tmp_path / "zero.npz"
    sp.save_npz(zero, sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0]])))
    with pytest.raises(ValueError, match="chunk '.*zero.npz' has an all-zero row: row 1"):
        list(iter_chunks([zero]))
    with pytest.raises(ValueError, match="good.npz'.*row 0"):
        list(iter_chunks([good], normalize=False))
    # what is not an .npz archive is refused by name (NumPy's own errors before: a
    # context-manager TypeError for .npy, advice to unpickle a damaged file)
    bare = tmp_path / "bare.npy"
    np.save(bare, np.ones((2, 2)))
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"not an archive")
    for reader in (chunk_rows, lambda path: list(iter_chunks([path]))):
        with pytest.raises(ValueError, match=r"bare.npy' holds one bare array \(\.npy\)"):
            reader(bare)
        with pytest.raises(ValueError, match="damaged.npz' is not a readable .npz archive"):
            reader(damaged)
        with pytest.raises(TypeError, match="a chunk file must be a str or os.PathLike path"):
            reader(3)


def test_streaming_argument_errors(corpus, fits):
    X, paths = corpus
    _, stream, _ = fits
    with pytest.raises(ValueError, match="n_epochs must be an int >= 1; got 0"):
        fit_streaming(SparseVMFMixture(K), paths, n_epochs=0)
    with pytest.raises(ValueError, match="paths holds no chunk file"):
        fit_streaming(SparseVMFMixture(K), [])
    # one path string was iterated by character (IsADirectoryError on "/")
    with pytest.raises(TypeError, match="paths must be a sequence of chunk files, not one path"):
        fit_streaming(SparseVMFMixture(K), str(paths[0]))
    with pytest.raises(ValueError, match="n_samples must be None or an int >= 1; got 0"):
        stream.partial_fit(X[:10], n_samples=0)
    with pytest.raises(ValueError, match="X has 3 features, but SparseVMFMixture is expecting"):
        stream.partial_fit(np.ones((4, 3)))
    with pytest.raises(ValueError, match="init as an array of labels cannot be combined"):
        SparseVMFMixture(2, init=np.array([0, 1, 0, 1])).partial_fit(np.eye(4))
    with pytest.raises(
        ValueError,
        match=r"The 'learning_decay' parameter of SparseVMFMixture must be a float in the range "
        r"\(0\.5, 1\.0\]\. Got 0\.5 instead\.",
    ):
        SparseVMFMixture(2, learning_decay=0.5).partial_fit(np.eye(4))


def test_sparse_stream_checks_every_call(corpus, fits):
    """partial_fit validates the parameters at every call (set_params may change them
    between calls), refuses a stream whose n_components or shared_kappa changed (it used to
    go on, or fail inside the step), and a refused call or chunk leaves the model as it was;
    fit forgets the stream and its counters."""
    X, _ = corpus
    model = copy.deepcopy(fits[1])
    state = (model.n_samples_seen_, model.n_steps_, model.n_iter_, model._online)
    for change, now in (
        ({"n_components": K + 1}, f"n_components={K + 1}, shared_kappa=False"),
        ({"shared_kappa": True}, f"n_components={K}, shared_kappa=True"),
    ):
        model.set_params(**change)
        with pytest.raises(
            ValueError,
            match="^"
            + re.escape(
                f"SparseVMFMixture.partial_fit: {now} differ from the stream this model carries "
                f"(n_components={K}, shared_kappa=False); restore them, or call fit to start "
                "anew."
            )
            + "$",
        ):
            model.partial_fit(X[:150])
        model.set_params(n_components=K, shared_kappa=False)
    model.set_params(learning_decay=2.0)
    with pytest.raises(
        InvalidParameterError,
        match=r"^The 'learning_decay' parameter of SparseVMFMixture must be a float in the "
        r"range \(0\.5, 1\.0\]\. Got 2\.0 instead\.$",
    ):
        model.partial_fit(X[:150])
    model.set_params(learning_decay=0.7)
    bad = X[:150].toarray()
    bad[2] = 0.0
    with pytest.raises(ValueError, match="all-zero row: row 2"):
        model.partial_fit(bad)
    assert (model.n_samples_seen_, model.n_steps_, model.n_iter_, model._online) == state
    model.partial_fit(X[:150], n_samples=N)
    assert (model.n_samples_seen_, model.n_steps_) == (N + 150, N_CHUNKS)
    model.fit(X)
    assert model._online is None
    assert not hasattr(model, "n_samples_seen_") and not hasattr(model, "n_steps_")


# ---- document chunks: DirichletVMFMixture (stochastic VI over sets of vectors) -------------


def make_documents(seed=1, n_docs=120, d=8, n_topics=3):
    """Documents of 5-15 vectors, each vector near one of 3 directions (its document's mix)."""
    rng = np.random.default_rng(seed)
    centres = check_directional(rng.normal(size=(n_topics, d)))
    docs, weights = [], []
    for _ in range(n_docs):
        n_i = int(rng.integers(5, 16))
        topic = rng.choice(n_topics, n_i, p=rng.dirichlet(np.full(n_topics, 0.3)))
        docs.append(check_directional(centres[topic] + 0.15 * rng.normal(size=(n_i, d))))
        weights.append(rng.integers(1, 4, n_i).astype(float))
    return docs, weights


def test_document_chunks_round_trip(tmp_path):
    from bayesvmf.streaming import chunk_documents, load_document_chunk, save_document_chunk

    docs, weights = make_documents()
    save_document_chunk(tmp_path / "a.npz", docs[:7], weights[:7])
    back, back_weights = load_document_chunk(tmp_path / "a.npz")
    assert chunk_documents(tmp_path / "a.npz") == 7
    for a, b in zip(back, docs[:7], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(back_weights, weights[:7], strict=True):
        np.testing.assert_array_equal(a, b)


def test_fit_streaming_feeds_documents_to_dirichlet(tmp_path):
    """fit_streaming over document chunk files is the partial_fit loop with n_sets = M, and
    the streamed topics find the batch fit's (cosine > 0.99 after matching)."""
    from bayesvmf.models import DirichletVMFMixture
    from bayesvmf.streaming import save_document_chunk

    docs, weights = make_documents()
    paths, chunks = [], []
    for i, idx in enumerate(np.array_split(np.arange(len(docs)), 4)):
        chunks.append(([docs[j] for j in idx], [weights[j] for j in idx]))
        paths.append(tmp_path / f"docs{i}.npz")
        save_document_chunk(paths[-1], *chunks[-1])
    streamed = fit_streaming(DirichletVMFMixture(3, random_state=0), paths, n_epochs=2)
    loop = DirichletVMFMixture(3, random_state=0)
    for _ in range(2):
        for chunk_docs, chunk_weights in chunks:
            loop.partial_fit(chunk_docs, weights=chunk_weights, n_sets=len(docs))
    np.testing.assert_array_equal(streamed.mean_directions_, loop.mean_directions_)
    np.testing.assert_array_equal(streamed.concentrations_, loop.concentrations_)
    assert streamed.n_sets_seen_ == 2 * len(docs) and streamed.n_steps_ == 7
    batch = DirichletVMFMixture(3, random_state=0).fit(docs, weights=weights)
    cosines = batch.mean_directions_ @ streamed.mean_directions_.T
    assert np.all(cosines.max(axis=1) > 0.99), cosines


def test_document_chunk_errors(tmp_path, corpus):
    from bayesvmf.models import DirichletVMFMixture
    from bayesvmf.streaming import load_document_chunk, save_document_chunk

    with pytest.raises(ValueError, match=r"docs\[1\] has shape \(0, 3\)"):
        save_document_chunk(tmp_path / "x.npz", [np.eye(3), np.zeros((0, 3))])
    with pytest.raises(ValueError, match=r"weights\[0\] has shape \(2,\), expected \(3,\)"):
        save_document_chunk(tmp_path / "x.npz", [np.eye(3)], [np.ones(2)])
    np.savez(tmp_path / "bad.npz", X=np.eye(3), lengths=np.array([2, 2]))
    with pytest.raises(ValueError, match="lengths add up to 4 vectors, but X has 3 rows"):
        load_document_chunk(tmp_path / "bad.npz")
    np.savez(tmp_path / "zero.npz", X=np.eye(3), lengths=np.array([3, 0]))
    with pytest.raises(ValueError, match="document 1 has 0 vectors"):
        load_document_chunk(tmp_path / "zero.npz")
    with pytest.raises(ValueError, match="weights has 2 entries but docs has 1 documents"):
        save_document_chunk(tmp_path / "x.npz", [np.eye(3)], [np.ones(3), np.ones(3)])
    with pytest.raises(ValueError, match="docs is empty: a document chunk needs at least one"):
        save_document_chunk(tmp_path / "x.npz", [])
    np.savez(tmp_path / "flat.npz", X=np.ones(3), lengths=np.array([3]))
    with pytest.raises(ValueError, match=r"X has shape \(3,\), expected \(n, d\)"):
        load_document_chunk(tmp_path / "flat.npz")
    np.savez(tmp_path / "float.npz", X=np.eye(3), lengths=np.array([3.0]))
    with pytest.raises(ValueError, match="lengths must be a non-empty 1-D integer array"):
        load_document_chunk(tmp_path / "float.npz")
    np.savez(tmp_path / "w.npz", X=np.eye(3), lengths=np.array([3]), weights=np.ones(2))
    with pytest.raises(ValueError, match=r"weights has shape \(2,\), expected \(3,\)"):
        load_document_chunk(tmp_path / "w.npz")
    # a row chunk given to a model of documents: the file is named, the format explained
    with pytest.raises(ValueError, match="a document chunk holds 'X', 'lengths'"):
        fit_streaming(DirichletVMFMixture(2), corpus[1][:1])


class _WarningStream(SparseVMFMixture):
    """A model whose partial_fit warns at its caller's line, as the package's warnings do."""

    def partial_fit(self, X, y=None, n_samples=None):
        warnings.warn("chunk warning", UserWarning, stacklevel=2)
        return self


def test_fit_streaming_warnings_point_at_its_caller(corpus):
    _, paths = corpus
    with pytest.warns(UserWarning, match="chunk warning") as record:
        fit_streaming(_WarningStream(K), paths[:2])
    # before fit_streaming ran inside the cache wrapper, they pointed at streaming.py
    assert {w.filename for w in record} == {__file__}
