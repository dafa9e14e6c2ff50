"""DirichletVMFMixture: one concentration for all topics (shared_kappa) and degeneracy guards."""

import warnings

import numpy as np
import pytest
from scipy.special import ive

from bayesvmf.exceptions import ConvergenceWarning, DegenerateRunWarning
from bayesvmf.models import DirichletVMFMixture
from bayesvmf.models.dirichlet import _degeneracy, _gibbs, _vem


def clusters(rng, n_clusters=3, d=8, n_docs=40, n_words=15, spread=0.15):
    """Documents of noisy copies of a few unit directions (each document mostly one cluster)."""
    centers = rng.normal(size=(n_clusters, d))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    docs = []
    for i in range(n_docs):
        main = i % n_clusters
        z = np.where(rng.uniform(size=n_words) < 0.8, main, rng.integers(n_clusters, size=n_words))
        x = centers[z] + spread * rng.normal(size=(n_words, d))
        docs.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return docs, centers


def with_frequent_word(docs, rng, count=30.0):
    """Add one frequent word type (the same vector, weight ``count``) to every document."""
    d = docs[0].shape[1]
    said = rng.normal(size=d)
    said /= np.linalg.norm(said)
    out = [np.vstack([x, said]) for x in docs]
    weights = [np.r_[np.ones(len(x)), count] for x in docs]
    return out, weights, said


def mean_resultant(d, kappa):
    """A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa), from SciPy (independent of bayesvmf)."""
    return ive(d / 2, kappa) / ive(d / 2 - 1, kappa)


# ------------------------------------------------------------------ shared_kappa
def test_shared_kappa_m_step_is_the_pooled_maximiser(rng):
    d, n_topics = 8, 4
    resultant = rng.normal(size=(n_topics, d))
    resp_sum = np.linalg.norm(resultant, axis=1) / rng.uniform(0.3, 0.9, size=n_topics)
    mu, kappa, collapsed, _ = _vem._m_step_jit(
        resultant, resp_sum, np.zeros((n_topics, d)), np.ones(n_topics), 1e6, shared_kappa=True
    )
    kappa = np.asarray(kappa)
    assert np.all(kappa == kappa[0]) and not np.asarray(collapsed).any()
    # A_d(kappa) = sum_k |r_k| / sum_k n_k, the stationary point of the pooled vMF term
    rbar = np.linalg.norm(resultant, axis=1).sum() / resp_sum.sum()
    assert mean_resultant(d, kappa[0]) == pytest.approx(rbar, rel=1e-12)

    # ... and its maximiser: sum_k n_k log c_d(kappa) + kappa |r_k| is lower on either side
    def pooled(k):
        log_c = (
            (d / 2 - 1) * np.log(k) - (d / 2) * np.log(2 * np.pi) - np.log(ive(d / 2 - 1, k)) - k
        )
        return resp_sum.sum() * log_c + k * np.linalg.norm(resultant, axis=1).sum()

    assert pooled(kappa[0]) > max(pooled(0.99 * kappa[0]), pooled(1.01 * kappa[0]))


def test_shared_kappa_vem_bound_monotone_and_one_concentration(rng):
    docs, _ = clusters(rng)
    model = DirichletVMFMixture(
        3, alpha=0.3, n_init=1, max_iter=25, tol=0.0, shared_kappa=True, random_state=0
    )
    with warnings.catch_warnings():  # tol=0 may run out of iterations: not the point here
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(docs)
    kappa = model.concentrations_
    assert np.all(kappa == kappa[0]) and kappa[0] > 0
    bounds = model.lower_bounds_
    # every iteration is a cycle of exact coordinate maximisations: never decreases
    assert np.all(np.diff(bounds) >= -1e-9 * np.abs(bounds[1:]))
    assert model.n_occupied_components_ == 3
    assert model.degenerate_components_.tolist() == []
    assert model.n_degenerate_restarts_ == 0
    # the shared kappa is the pooled M-step of the final statistics of the fit
    stats = model._online[0]
    norms = np.linalg.norm(np.asarray(stats.resultant), axis=1)
    assert mean_resultant(8, kappa[0]) == pytest.approx(
        norms.sum() / np.asarray(stats.resp_sum).sum(), rel=1e-10
    )


def test_shared_kappa_partial_fit_and_gibbs(rng):
    docs, _ = clusters(rng)
    model = DirichletVMFMixture(3, alpha=0.3, n_init=1, max_iter=5, shared_kappa=True)
    model.set_params(random_state=0, tol=1e-2)
    model.partial_fit(docs[:20]).partial_fit(docs[20:])
    kappa = model.concentrations_
    assert np.all(kappa == kappa[0]) and model.n_steps_ == 1
    gibbs = DirichletVMFMixture(
        3,
        alpha=0.3,
        inference="gibbs",
        num_chains=1,
        num_warmup=10,
        num_samples=15,
        shared_kappa=True,
        random_state=0,
    ).fit(docs[:12])
    draws = gibbs.samples_["kappa"]
    # one concentration per draw, and it moves (the MH step on the pooled target accepts)
    assert np.all(draws == draws[..., :1])
    assert np.unique(draws[0, :, 0]).size > 1
    assert np.isfinite(gibbs.samples_["lp"]).all()


def test_shared_kappa_log_joint_counts_the_prior_once(rng):
    docs, _ = clusters(rng, n_docs=6, n_words=5)
    X = np.concatenate(docs)
    z = np.arange(len(X)) % 3
    onehot = np.eye(3)[z]
    doc = np.repeat(np.arange(6), 5)
    state = _gibbs.GibbsState(
        z,
        np.stack([onehot[doc == i].sum(0) for i in range(6)]),
        onehot.sum(0),
        onehot.T @ X,
        np.full(3, 20.0),
        np.zeros(3),
    )
    hyper = _gibbs.GibbsHyper(0.3, np.zeros(X.shape[1]), 2.0, 0.1, 1e6)
    per_topic = float(_gibbs.collapsed_log_joint(state, hyper, X.shape[1]))
    shared = float(_gibbs.collapsed_log_joint(state, hyper, X.shape[1], shared_kappa=True))
    one_prior = (2.0 - 1.0) * np.log(20.0) - 0.1 * 20.0
    assert per_topic - shared == pytest.approx(2 * one_prior, rel=1e-12)


# ------------------------------------------------------------------ guards
def test_topic_collapsed_on_a_frequent_word_warns(rng):
    docs, _ = clusters(rng)
    docs, weights, said = with_frequent_word(docs, rng)
    model = DirichletVMFMixture(
        4, alpha=0.3, n_init=2, max_iter=30, shared_kappa=False, random_state=0
    )
    with pytest.warns(DegenerateRunWarning) as record:
        model.fit(docs, weights=weights)
    k = int(np.argmax(model.mean_directions_ @ said))
    assert model.concentrations_[k] == 1e6  # per-topic kappa runs to the cap on one vector
    assert model.degenerate_components_.tolist() == [k]
    assert model.n_degenerate_restarts_ == 2
    message = str(record[0].message)
    assert f"components [{k}] reached the concentration cap (collapsed)" in message
    assert "All 2 restarts degenerated" in message
    assert "try shared_kappa=True" in message
    assert model.n_occupied_components_ == 4


def test_topic_on_one_word_type_with_shared_kappa_warns(rng):
    docs, _ = clusters(rng)
    docs, weights, said = with_frequent_word(docs, rng)
    model = DirichletVMFMixture(
        4, alpha=0.3, n_init=1, max_iter=30, shared_kappa=True, random_state=0
    )
    with pytest.warns(DegenerateRunWarning, match="carried by a single distinct vector"):
        model.fit(docs, weights=weights)
    k = int(np.argmax(model.mean_directions_ @ said))
    assert model.concentrations_[k] < 1e6  # not at the cap: found by its word types alone
    assert model.degenerate_components_.tolist() == [k]
    # the topic holds many tokens (30 per document) but one word type
    assert model.weights_[k] > 0.3


def test_background_topic_warns(rng):
    docs, _ = clusters(rng, n_docs=60, n_words=12, d=10, spread=0.05)
    # 16 of every document's 28 tokens from one broad bump: a low-kappa topic with 57%
    broad = rng.normal(size=10)
    broad = broad / np.linalg.norm(broad) + 0.5 * rng.normal(size=(60, 16, 10))
    broad /= np.linalg.norm(broad, axis=2, keepdims=True)
    docs = [np.vstack([x, b]) for x, b in zip(docs, broad, strict=True)]
    model = DirichletVMFMixture(
        4, alpha=0.3, n_init=1, max_iter=100, tol=1e-4, shared_kappa=False, random_state=0
    )
    with pytest.warns(DegenerateRunWarning, match="a near-uniform background component"):
        model.fit(docs)
    k = int(np.argmin(model.concentrations_))
    assert model.degenerate_components_.tolist() == [k]
    assert model.largest_share_ == pytest.approx(model.weights_[k])
    assert model.largest_share_ > 0.5
    assert model.concentrations_[k] < 0.25 * np.median(np.delete(model.concentrations_, k))


def test_empty_topic_after_a_stream_moves_away_warns(rng):
    docs, centers = clusters(rng)
    model = DirichletVMFMixture(3, alpha=0.3, n_init=1, max_iter=30, random_state=0)
    model.set_params(learning_offset=0.0, tol=1e-4).fit(docs)
    k = int(np.argmax(model.mean_directions_ @ centers[0]))
    # a chunk without cluster 0; rho_1 = 1 replaces the running statistics by the chunk's
    chunk = [x[np.argmax(x @ centers.T, axis=1) != 0] for x in docs]
    chunk = [x for x in chunk if len(x)]
    with pytest.warns(DegenerateRunWarning, match=rf"components \[{k}\] are empty"):
        model.partial_fit(chunk)
    assert model.n_occupied_components_ == 2
    assert k in model.degenerate_components_.tolist()


def test_word_types_and_type_counts(rng):
    X = rng.normal(size=(4, 3))
    X = np.vstack([X, X[1], X[1], X[3]])
    type_id, n_types = _degeneracy.word_types(X)
    assert n_types == 4
    assert type_id[4] == type_id[5] == type_id[1] and type_id[6] == type_id[3]
    w = np.arange(1.0, 8.0)
    offsets = np.array([0, 3, 7])
    mu = np.eye(3)[:2]
    counts = _degeneracy.type_counts(
        X / np.linalg.norm(X, axis=1, keepdims=True),
        w,
        offsets,
        np.ones((2, 2)),
        mu,
        np.array([1.0, 2.0]),
        type_id,
        n_types,
    )
    # every type's weight is split over the topics, all of it
    np.testing.assert_allclose(counts.sum(axis=1), np.bincount(type_id, weights=w))


def test_bad_shared_kappa():
    with pytest.raises(ValueError, match="The 'shared_kappa' parameter of DirichletVMFMixture"):
        DirichletVMFMixture(2, shared_kappa="yes").fit([np.eye(3)])


def test_a_degenerate_restart_is_never_kept(rng, monkeypatch):
    docs, _ = clusters(rng)
    diagnose = _degeneracy.diagnose
    calls = []

    def first_restart_collapsed(counts, n_tokens, kappa, kappa_max, *args):
        calls.append(len(calls))
        if len(calls) == 1:  # restart 0 diagnosed as collapsed: its kappa reads as capped
            kappa = np.full_like(np.asarray(kappa), kappa_max)
        return diagnose(counts, n_tokens, kappa, kappa_max, *args)

    monkeypatch.setattr(_degeneracy, "diagnose", first_restart_collapsed)
    model = DirichletVMFMixture(3, alpha=0.3, n_init=2, max_iter=60, random_state=0).fit(docs)
    first, second = (run[-1] for run in model.lower_bounds_all_)
    # both restarts reach one optimum: the first would be kept, were it not degenerate
    assert first == pytest.approx(second, rel=1e-9)
    np.testing.assert_array_equal(model.lower_bounds_, model.lower_bounds_all_[1])
    assert model.n_degenerate_restarts_ == 1
    assert model.degenerate_components_.tolist() == []


def test_advice_leaves_out_what_is_set():
    """The warning advised shared_kappa=True to a model that had it (the default; a helper's
    audit)."""

    assert "shared_kappa=True" not in _degeneracy.advice(True)
    assert "try shared_kappa=True (one concentration for all topics), " in _degeneracy.advice(False)


@pytest.mark.filterwarnings("ignore::bayesvmf.exceptions.ConvergenceWarning")  # max_iter=5
@pytest.mark.parametrize("how", ["fit", "stream", "gibbs"])
def test_every_fit_hands_the_topic_directions_to_the_coincidence_guard(rng, diagnose_calls, how):
    """VEM, the stream's running topics and Gibbs pass the topics' mean directions to
    bayesvmf._guards.diagnose, so that two topics of one direction are reported as the
    other models' components are (before, only counts and concentrations reached it)."""
    calls = diagnose_calls
    docs, _ = clusters(rng)
    if how == "gibbs":
        model = DirichletVMFMixture(
            3, inference="gibbs", num_chains=1, num_warmup=10, num_samples=15, random_state=0
        ).fit(docs[:12])
    else:
        model = DirichletVMFMixture(3, n_init=1, max_iter=5, random_state=0)
        if how == "stream":  # the first call diagnoses its VEM fit, the second the stream
            model.partial_fit(docs[:20])
            calls.clear()
            model.partial_fit(docs[20:])
        else:
            model.fit(docs)
    assert len(calls) == 1
    np.testing.assert_allclose(calls[0]["mean_directions"], model.mean_directions_, atol=1e-12)
    np.testing.assert_allclose(calls[0]["kappa"], model.concentrations_, rtol=1e-12)


def test_two_topics_of_one_direction_are_coincident():
    mu = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    kappa = np.array([50.0, 60.0, 50.0])
    diagnosis = _degeneracy.diagnose(np.array([40.0, 30.0, 30.0]), 100.0, kappa, 1e6, None, mu)
    assert diagnosis.coincident.tolist() == [False, True, False] and diagnosis.degenerate
    mu[1] = [0.0, 0.0, 1.0]
    apart = _degeneracy.diagnose(np.array([40.0, 30.0, 30.0]), 100.0, kappa, 1e6, None, mu)
    assert not apart.coincident.any() and not apart.degenerate
