"""Tests of models/dirichlet/: the Dirichlet-vMF mixture (VMFMix), VEM and collapsed Gibbs."""

import copy
import functools
import itertools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.special import digamma, gammaln, logsumexp

from bayesvmf import _guards, load, make_vmf_mixture, save, special
from bayesvmf._mixture import TRACE_COUNTS
from bayesvmf.exceptions import ConvergenceWarning, DegenerateRunWarning, NotFittedError
from bayesvmf.models import DirichletVMFMixture as _DirichletVMFMixture
from bayesvmf.models import dirichlet as dv
from bayesvmf.models.dirichlet import _corpus, _gibbs, _svi, _vem

# The tests of this file were written for one concentration per topic, the default before
# shared_kappa=True became it: they pass shared_kappa=False explicitly and keep their numbers
# (shared_kappa and the degeneracy guards: tests/test_dirichlet_guards.py).
DirichletVMFMixture = functools.partial(_DirichletVMFMixture, shared_kappa=False)


# ------------------------------------------------------------------ planted data (NumPy only)
def sample_vmf(rng, mu, kappa, n):
    """Wood (1994) in NumPy: n draws of vMF(mu, kappa) (independent of bayesvmf's sampler)."""
    d = mu.shape[0]
    b = (d - 1) / (2 * kappa + np.sqrt(4 * kappa**2 + (d - 1) ** 2))
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + (d - 1) * np.log(1 - x0**2)
    w = np.empty(n)
    filled = 0
    while filled < n:
        m = 2 * (n - filled) + 10
        z = rng.beta((d - 1) / 2, (d - 1) / 2, size=m)
        ww = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        ok = kappa * ww + (d - 1) * np.log(1 - x0 * ww) - c >= np.log(rng.uniform(size=m))
        take = ww[ok][: n - filled]
        w[filled : filled + len(take)] = take
        filled += len(take)
    v = rng.normal(size=(n, d))
    v -= (v @ mu)[:, None] * mu
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return w[:, None] * mu + np.sqrt(1 - w**2)[:, None] * v


def planted(rng, n_topics=6, d=30, n_docs=300, n_words=40, alpha=0.3, kappa=50.0):
    """Documents drawn from the model itself (section 1 of the paper)."""
    mu = rng.normal(size=(n_topics, d))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    theta = rng.dirichlet(np.full(n_topics, alpha), size=n_docs)
    docs = []
    for i in range(n_docs):
        z = rng.choice(n_topics, size=n_words, p=theta[i])
        x = np.empty((n_words, d))
        for k in np.unique(z):
            x[z == k] = sample_vmf(rng, mu[k], kappa, int((z == k).sum()))
        docs.append(x)
    return docs, mu, theta


def match(truth, estimate):
    """Permutation of the estimated topics that best matches the true ones, and the cosines."""
    cos = truth @ estimate.T
    rows, cols = linear_sum_assignment(-cos)
    return cols, cos[rows, cols]


@pytest.fixture(scope="module")
def planted_data():
    return planted(np.random.default_rng(7))


@pytest.fixture(scope="module")
def planted_fit(planted_data):
    docs, _, _ = planted_data
    return DirichletVMFMixture(6, alpha=0.3, n_init=2, random_state=0).fit(docs)


# ------------------------------------------------------------------ acceptance: planted topics
def test_planted_topics_recovered(planted_data, planted_fit):
    docs, mu, theta = planted_data
    model = planted_fit
    perm, cos = match(mu, model.mean_directions_)
    assert cos.mean() >= 0.95 and cos.min() >= 0.95, cos
    # true kappa is 50; with ~2000 vectors per topic the MLE's sd is ~1.5 (about 3%)
    np.testing.assert_allclose(model.concentrations_[perm], 50.0, rtol=0.1)
    # proportions: a document has 40 vectors, so E[theta_ik | z] has a posterior sd of about
    # sqrt(p(1-p)/41) <= 0.08; the mean absolute error over all entries should be well under
    # half of that even with perfect topics, so 0.05 is a test that a wrong model fails.
    est = model.transform(docs)[:, perm]
    assert np.abs(est - theta).mean() < 0.05
    np.testing.assert_allclose(est.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(est > 0)
    # doc_topic_ (phi of the last VEM iteration) is the converged transform of the training set
    np.testing.assert_allclose(model.doc_topic_[:, perm], est, atol=1e-3)
    assert np.all(np.diff(model.lower_bounds_) >= -1e-9 * np.abs(model.lower_bounds_[1:]))


def test_bound_monotone_from_poor_start(planted_data):
    """Every VEM iteration is exact coordinate ascent: the bound never decreases."""
    docs, _, _ = planted_data
    X, w, offsets = _corpus._check_documents(docs[:100], None, normalize=True, n_features=None)
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        corpus = dv.prepare_corpus(X, w * rng.integers(1, 4, size=w.shape), offsets)
        hyper = dv.VEMHyper(jnp.float64(0.3), jnp.float64(1e6))
        mu = rng.normal(size=(6, X.shape[1]))
        mu /= np.linalg.norm(mu, axis=1, keepdims=True)
        state = dv.VEMState(jnp.asarray(mu), jnp.ones(6), jnp.full((100, 6), 7.0))
        bounds = []
        for _ in range(40):
            state, info = _vem._vem_step(state, corpus, hyper)
            bounds.append(float(info.lower_bound))
    bounds = np.array(bounds)
    # float64 round-off on a sum of ~1e5 terms of size ~1e2: relative 1e-12 is generous
    assert np.all(np.diff(bounds) >= -1e-12 * np.abs(bounds[1:])), np.diff(bounds).min()
    assert bounds[-1] - bounds[0] > 1.0  # it did move (a test that cannot fail otherwise)


def reference_bound(docs, weights, mu, kappa, phi, resp, alpha):
    """Eqs. (5) + (8) of the paper written out document by document (NumPy/SciPy)."""
    K, d = mu.shape
    total = 0.0
    for i, (x, wi) in enumerate(zip(docs, weights, strict=True)):
        p = resp[i]
        elog = digamma(phi[i]) - digamma(phi[i].sum())
        n_ik = (wi[:, None] * p).sum(axis=0)
        total += gammaln(K * alpha) - K * gammaln(alpha)
        total += np.sum((alpha - 1 + n_ik) * elog)
        log_c = np.array([float(special.log_vmf_normalizer(d, k)) for k in kappa])
        total += np.sum(wi[:, None] * p * (log_c + kappa * (x @ mu.T)))
        phi0 = phi[i].sum()
        total += (
            gammaln(phi[i]).sum()
            - gammaln(phi0)
            - np.sum((phi[i] - 1) * digamma(phi[i]))
            + (phi0 - K) * digamma(phi0)
        )
        total -= np.sum(wi[:, None] * p * np.log(p))
    return total


def test_bound_matches_independent_formula(rng):
    docs = [rng.normal(size=(n, 4)) for n in (3, 5, 2)]
    docs = [x / np.linalg.norm(x, axis=1, keepdims=True) for x in docs]
    weights = [rng.integers(1, 5, size=len(x)).astype(float) for x in docs]
    X, w, offsets = _corpus._check_documents(docs, weights, normalize=False, n_features=None)
    mu = rng.normal(size=(2, 4))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    kappa = np.array([2.0, 5.0])
    phi = rng.uniform(0.5, 3.0, size=(3, 2))
    alpha = 0.7
    with jax.enable_x64(True):
        corpus = dv.prepare_corpus(X, w, offsets)
        state = dv.VEMState(jnp.asarray(mu), jnp.asarray(kappa), jnp.asarray(phi))
        new, info = _vem._vem_step(state, corpus, dv.VEMHyper(jnp.float64(alpha), jnp.float64(1e6)))
    # recompute pi with the OLD phi (eq. (9)), then evaluate the bound at the NEW state
    resp = []
    for i, x in enumerate(docs):
        log_c = np.array([float(special.log_vmf_normalizer(4, k)) for k in kappa])
        logits = digamma(phi[i]) + log_c + kappa * (x @ mu.T)
        resp.append(np.exp(logits - logsumexp(logits, axis=1, keepdims=True)))
    new_phi = np.array([alpha + (wi[:, None] * p).sum(0) for wi, p in zip(weights, resp)])
    np.testing.assert_allclose(np.asarray(new.phi), new_phi, rtol=1e-12)
    expected = reference_bound(
        docs, weights, np.asarray(new.mu), np.asarray(new.kappa), new_phi, resp, alpha
    )
    np.testing.assert_allclose(float(info.lower_bound), expected, rtol=1e-10)
    # the M-step solves A_d(kappa) = |r_k| / n_k exactly (not the approximation of eq. (10))
    r = sum((wi[:, None] * p).T @ x for x, wi, p in zip(docs, weights, resp))
    n = sum((wi[:, None] * p).sum(0) for wi, p in zip(weights, resp))
    rbar = np.linalg.norm(r, axis=1) / n
    ratio = np.array([float(special.mean_resultant_length(4, k)) for k in np.asarray(new.kappa)])
    np.testing.assert_allclose(ratio, rbar, rtol=1e-10)


def test_score_is_a_bound_on_the_document_marginal(rng):
    """score_documents <= log p(x_i) (Monte Carlo over theta, exact sum over z)."""
    mu = np.eye(3)[:2]
    kappa = np.array([4.0, 8.0])
    doc = np.vstack([sample_vmf(rng, mu[0], 4.0, 3), sample_vmf(rng, mu[1], 8.0, 2)])
    model = DirichletVMFMixture(2, alpha=0.5)
    model.mean_directions_, model.concentrations_ = mu, kappa
    bound = model.score_documents([doc])[0]
    log_c = np.array([float(special.log_vmf_normalizer(3, k)) for k in kappa])
    loglik = log_c + kappa * (doc @ mu.T)  # (n, K)
    theta = rng.dirichlet([0.5, 0.5], size=200_000)
    log_p = logsumexp(np.log(np.exp(loglik) @ theta.T).sum(axis=0)) - np.log(len(theta))
    assert bound <= log_p + 0.01  # MC error of log_p with 2e5 draws is ~1e-3 here
    assert bound > log_p - 1.0  # and the bound is not vacuous


def test_score_prefers_data_from_the_model(planted_data, planted_fit):
    docs, _, _ = planted_data
    rng = np.random.default_rng(11)
    held_out, _, _ = planted(rng, n_docs=20)  # other topics: not what was fitted
    fitted = planted_fit.score(docs[:20])
    assert np.isfinite(fitted) and fitted > planted_fit.score(held_out) + 1.0


# ------------------------------------------------------------------ behaviour
def test_weights_are_counts(planted_fit, rng):
    docs = [rng.normal(size=(4, 30)) for _ in range(3)]
    counts = [np.array([1, 3, 2, 1]) for _ in docs]
    repeated = [np.repeat(x, c, axis=0) for x, c in zip(docs, counts)]
    np.testing.assert_allclose(
        planted_fit.transform(docs, weights=counts), planted_fit.transform(repeated), rtol=1e-9
    )
    np.testing.assert_allclose(
        planted_fit.score(docs, weights=counts), planted_fit.score(repeated), rtol=1e-10
    )


def test_no_retrace_across_iterations_restarts_and_fits(planted_data):
    docs, _, _ = planted_data
    kwargs = dict(n_init=3, tol=0.0, max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: runs all 5 iterations
        DirichletVMFMixture(6, alpha=0.3, random_state=1, **kwargs).fit(docs[:50])
        DirichletVMFMixture(6, alpha=0.3, random_state=1, **kwargs).fit(docs[:50]).transform(
            docs[:50]
        )
        before = dict(TRACE_COUNTS)
        m = DirichletVMFMixture(6, alpha=0.9, random_state=2, **kwargs).fit(docs[50:100])
        m.transform(docs[:50])
    after = dict(TRACE_COUNTS)
    names = [n for n in after if n.startswith("dirichlet.") and "gibbs" not in n]
    assert {"dirichlet.vem_step", "dirichlet.init", "dirichlet.m_step"} <= set(names)
    for name in names:
        assert after[name] == before[name], name


def test_reproducible_and_best_restart_kept(planted_data, monkeypatch):
    docs = planted_data[0][:60]
    margins, original = [], _guards.select_run

    def select_run(bounds, diagnoses, margin):  # the margin the fit's selection is given
        margins.append(margin)
        return original(bounds, diagnoses, margin)

    monkeypatch.setattr(_guards, "select_run", select_run)  # the module the fit calls
    a = DirichletVMFMixture(6, alpha=0.3, n_init=3, random_state=5).fit(docs)
    b = DirichletVMFMixture(6, alpha=0.3, n_init=3, random_state=5).fit(docs)
    np.testing.assert_array_equal(a.mean_directions_, b.mean_directions_)
    np.testing.assert_array_equal(a.lower_bounds_, b.lower_bounds_)
    # the kept restart (none degenerates here) is the first whose final bound is within
    # tol per unit of vector weight (60 x 40 vectors of weight 1) of the best: restarts that
    # reach one optimum end a few ulps apart, and the choice must not hang on that
    margin = a.tol * sum(len(doc) for doc in docs)
    assert margins == [margin, margin]
    finals = np.array([run[-1] for run in a.lower_bounds_all_])
    kept = int(np.argmax(finals >= finals.max() - margin))
    assert a.n_degenerate_restarts_ == 0
    assert a.lower_bound_ == finals[kept]
    np.testing.assert_array_equal(a.lower_bounds_, a.lower_bounds_all_[kept])


def test_start_weighs_rows_on_plain_and_sharded_corpora():
    """The VEM start: weighted k-means++ seeds, the shared hard passes, one crisp pass.

    Vectors of weight 0 (here a whole third cluster) are never seeds and add nothing to
    the passes, so no topic starts on them; the statistics returned are the crisp ones of
    the start's directions with the real-valued weights; and the start of a corpus laid
    out on a mesh (one device: ``data.map`` under ``shard_map``, sums by ``psum``) is that
    of the plain corpus.
    """
    rng = np.random.default_rng(0)
    centres = np.eye(5)[:3]
    docs = [centres[i % 3] + 0.1 * rng.normal(size=(4, 5)) for i in range(12)]
    weights = [np.zeros(4) if i % 3 == 2 else rng.uniform(0.5, 3.0, 4) for i in range(12)]
    X, w, offsets = _corpus._check_documents(docs, weights, normalize=True, n_features=None)
    with jax.enable_x64(True):
        hyper = _vem.VEMHyper(jnp.float64(0.3), jnp.float64(1e6))
        plain = _vem._init_vem_state_jit(
            jax.random.key(1),
            dv.prepare_corpus(X, w, offsets),
            hyper,
            jnp.arange(len(w), dtype=jnp.int32),
            n_topics=3,
            n_real=len(w),
        )
        sharded = _corpus.shard_documents(X, w, offsets, jax.devices()[:1])
        on_mesh = _vem._init_vem_state_jit(
            jax.random.key(1),
            sharded.corpus,
            hyper,
            sharded.row_id,
            n_topics=3,
            n_real=sharded.n_real,
        )
    mu, resultant, resp_sum, _ = (np.asarray(a) for a in plain)
    assert np.max(mu @ centres[2]) < 0.5 and np.min(np.max(mu @ centres[:2].T, axis=0)) > 0.9
    labels = np.argmax(X @ mu.T, axis=1)
    np.testing.assert_allclose(resp_sum, np.bincount(labels, w, minlength=3), rtol=1e-12)
    expected = np.stack([(w * (labels == k)) @ X for k in range(3)])
    np.testing.assert_allclose(resultant, expected, rtol=1e-12, atol=1e-14)
    for a, b in zip(plain[:3], on_mesh[:3], strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-14)


def test_convergence_warning():
    docs = [np.eye(3)[[0, 1, 0]], np.eye(3)[[2, 2, 1]] + 0.1]
    # three distinct vectors: a topic on one of them runs to the cap (really degenerate)
    with pytest.warns(DegenerateRunWarning, match=r"components \[1\] reached the concentration"):
        with pytest.warns(ConvergenceWarning, match="did not converge in max_iter=1"):
            DirichletVMFMixture(2, max_iter=1, n_init=1, random_state=0).fit(docs)


def test_top_items(planted_fit):
    mu = planted_fit.mean_directions_
    vocab = np.vstack([mu * 3.0, np.zeros((1, mu.shape[1]))])
    labels = [f"w{j}" for j in range(len(vocab))]
    top = planted_fit.top_items(vocab, n=2, labels=labels)
    assert [t[0][0] for t in top] == labels[:6]
    assert all(abs(t[0][1] - 1.0) < 1e-12 for t in top)
    with pytest.raises(ValueError, match=r"vocabulary must have shape \(V, 30\)"):
        planted_fit.top_items(np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"^n must be an int >= 1; got -1\.$"):
        planted_fit.top_items(vocab, n=-1)  # (dropped the last item silently)


def test_save_load_round_trip(planted_data, planted_fit, tmp_path):
    """bayesvmf.save / load (npz + json, no pickle) restore a fitted VEM model exactly."""
    docs = planted_data[0][:20]
    path = tmp_path / "vmfmix.npz"
    save(planted_fit, path)
    again = load(path)
    assert type(again) is _DirichletVMFMixture
    assert again.get_params() == {
        **planted_fit.get_params(),
        "kappa_prior": list(planted_fit.kappa_prior),  # JSON has no tuples
    }
    for name in ("mean_directions_", "concentrations_", "weights_", "doc_topic_", "collapsed_"):
        np.testing.assert_array_equal(getattr(again, name), getattr(planted_fit, name))
    np.testing.assert_array_equal(again.lower_bounds_, planted_fit.lower_bounds_)
    assert len(again.lower_bounds_all_) == len(planted_fit.lower_bounds_all_)
    for a, b in zip(again.lower_bounds_all_, planted_fit.lower_bounds_all_, strict=True):
        np.testing.assert_array_equal(a, b)
    assert (again.lower_bound_, again.n_iter_, again.converged_) == (
        planted_fit.lower_bound_,
        planted_fit.n_iter_,
        planted_fit.converged_,
    )
    np.testing.assert_array_equal(again.transform(docs), planted_fit.transform(docs))
    assert again.score(docs) == planted_fit.score(docs)
    # an unfitted model round-trips too (constructor arguments only)
    save(DirichletVMFMixture(3, alpha=0.5, inference="gibbs"), tmp_path / "unfitted.npz")
    fresh = load(tmp_path / "unfitted.npz")
    assert (fresh.n_topics, fresh.alpha, fresh.inference) == (3, 0.5, "gibbs")
    assert not hasattr(fresh, "mean_directions_")


# ------------------------------------------------------------------ bad input
GOOD = [np.eye(3)[[0, 1]], np.eye(3)[[2, 2, 0]]]


@pytest.mark.parametrize(
    ("docs", "weights", "message"),
    [
        ([], None, "docs is empty: need at least one document"),
        (np.ones((4, 3)), None, "docs must be a list of (n_i, d) arrays, one per document"),
        (
            [np.eye(3), np.ones((2, 4))],
            None,
            "docs[1] has 4 features, expected 3 (the dimension of docs[0])",
        ),
        ([np.eye(3), np.zeros((0, 3))], None, "docs[1]"),
        ([np.eye(3), np.array([[0.0, 0, 0]])], None, "docs[1] has an all-zero row: row 0"),
        (GOOD, [np.ones(2)], "weights has 1 entries but docs has 2 documents"),
        (
            GOOD,
            [np.ones(2), np.ones(2)],
            "weights[1] has shape (2,), expected (3,) to match docs[1]",
        ),
        (
            GOOD,
            [np.ones(2), np.array([1.0, -1.0, 1.0])],
            "weights[1] has a negative value at position 1",
        ),
        (
            GOOD,
            [np.ones(2), np.array([1.0, np.nan, 1.0])],
            "weights[1] has a NaN or infinite value",
        ),
        (GOOD, [np.zeros(2), np.zeros(3)], "weights are all zero"),
    ],
)
def test_bad_input_fit(docs, weights, message):
    copies = [np.array(x, copy=True) for x in docs]
    with pytest.raises(ValueError) as err:
        DirichletVMFMixture(2).fit(docs, weights=weights)
    assert message in str(err.value)
    for x, c in zip(docs, copies):
        np.testing.assert_array_equal(x, c)


def test_pipeline_passes_labels_where_weights_were(planted_fit):
    """scikit-learn passes y second (a classifier after the topics, a supervised scorer);
    weights are keyword-only, and weights in y's place are refused (they were taken as
    weights, so a pipeline failed with "weights[0] has shape ()"). Found by a helper's audit."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(2)
    docs = [rng.normal(size=(4, 3)) + 3 * np.eye(3)[i % 2] for i in range(12)]
    labels = np.arange(12) % 2
    pipe = make_pipeline(DirichletVMFMixture(2, random_state=0), LogisticRegression())
    assert pipe.fit(docs, labels).score(docs, labels) == 1.0
    topics = pipe[0]
    proportions = topics.fit_transform(docs, labels)
    np.testing.assert_array_equal(proportions, topics.transform(docs))
    assert topics.score(docs, labels) == topics.score(docs)
    # a row of labels per document (multi-output) is y, not weights
    assert topics.score(docs, np.stack([labels, labels, labels], axis=1)) == topics.score(docs)
    weights = [np.ones(4)] * 12
    for call in (topics.fit, topics.score):
        with pytest.raises(TypeError, match=r"pass per-vector weights by name, \w+\(docs, weights"):
            call(docs, weights)


def test_sparse_documents_refused_by_name():
    import scipy.sparse as sp

    docs = [GOOD[0], sp.csr_matrix(GOOD[1])]  # failed in NumPy's concatenate before
    message = "docs[1] is a sparse matrix: documents are sets of dense vectors"
    with pytest.raises(TypeError, match=re.escape(message)):
        DirichletVMFMixture(2).fit(docs)
    np.testing.assert_array_equal(docs[1].toarray(), GOOD[1])


def test_bad_input_transform_and_gibbs_counts(planted_fit):
    with pytest.raises(ValueError, match=r"docs\[0\] has 3 features, expected 30 \(the fitted"):
        planted_fit.transform([np.eye(3)])
    with pytest.raises(ValueError, match=r"weights\[1\] must hold whole numbers \(counts\)"):
        DirichletVMFMixture(2, inference="gibbs").fit(
            GOOD, weights=[np.ones(2), np.array([1, 0.5, 1])]
        )
    with pytest.raises(NotFittedError, match="This DirichletVMFMixture instance is not fitted"):
        DirichletVMFMixture(2).transform(GOOD)
    with pytest.raises(
        ValueError, match="The 'inference' parameter of DirichletVMFMixture must be a str among"
    ):
        DirichletVMFMixture(2, inference="mcmc").fit(GOOD)
    with pytest.raises(
        ValueError,
        match=r"The 'alpha' parameter of DirichletVMFMixture must be a float in the range "
        r"\(0.0, inf\). Got 0 instead.",
    ):
        DirichletVMFMixture(2, alpha=0).fit(GOOD)
    with pytest.raises(ValueError, match="fewer than n_topics=9"):
        DirichletVMFMixture(9).fit(GOOD)
    with pytest.raises(ValueError, match="to_arviz needs draws"):
        planted_fit.to_arviz()


def test_normalize_false_requires_unit_rows():
    with pytest.raises(ValueError, match=r"docs\[1\]"):
        DirichletVMFMixture(2, normalize=False).fit([np.eye(3), 2 * np.eye(3)])


# ------------------------------------------------------------------ collapsed Gibbs
def tiny_gibbs_problem():
    x = np.array(
        [
            [1.0, 0.2, 0.0],
            [0.9, -0.3, 0.1],
            [0.1, 1.0, 0.0],
            [0.0, 0.8, 0.5],
            [1.0, 0.0, 0.3],
            [-0.2, 1.0, 0.1],
        ]
    )
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    doc = np.array([0, 0, 0, 1, 1, 1], dtype=np.int32)
    return x, doc


def exact_posterior(x, doc, kappa, alpha, prior_resultant):
    d = x.shape[1]
    probs = {}
    for z in itertools.product(range(2), repeat=len(x)):
        z = np.array(z)
        lp = 0.0
        for i in range(2):
            n_ik = np.bincount(z[doc == i], minlength=2)
            lp += gammaln(2 * alpha) - gammaln(n_ik.sum() + 2 * alpha)
            lp += np.sum(gammaln(n_ik + alpha) - gammaln(alpha))
        for k in range(2):
            s = x[z == k].sum(axis=0)
            lp += (z == k).sum() * float(special.log_vmf_normalizer(d, kappa[k]))
            lp -= float(
                special.log_vmf_normalizer(d, np.linalg.norm(prior_resultant + kappa[k] * s))
            )
        probs[tuple(z)] = lp
    keys = list(probs)
    lps = np.array([probs[k] for k in keys])
    return keys, np.exp(lps - logsumexp(lps))


@pytest.mark.slow
def test_z_sweep_matches_exact_enumeration():
    """With kappa fixed, the sampled partitions follow the exact collapsed posterior."""
    x, doc = tiny_gibbs_problem()
    kappa = np.array([3.0, 6.0])
    prior = np.array([0.0, 0.0, 1.0])  # c0 mu0 = e3: a vMF prior with c0 = 1
    keys, probs = exact_posterior(x, doc, kappa, 0.5, prior)
    with jax.enable_x64(True):
        hyper = dv.GibbsHyper(jnp.float64(0.5), jnp.asarray(prior), 1.0, 0.01, 1e6)
        z0 = jnp.zeros(6, jnp.int32)
        dt, tc, res = _gibbs._statistics(jnp.asarray(x), jnp.asarray(doc), z0, 2, 2)
        state = dv.GibbsState(z0, dt, tc, res, jnp.asarray(kappa), jnp.zeros(2))

        @jax.jit
        def run(key, state):
            def body(state, key):
                state = dv.gibbs_z_sweep(key, state, jnp.asarray(x), jnp.asarray(doc), hyper)
                return state, state

            return jax.lax.scan(body, state, jax.random.split(key, 20_000))[1]

        trace = run(jax.random.key(3), state)
        # the carried statistics equal those recomputed from z after every sweep
        again = jax.vmap(lambda z: _gibbs._statistics(jnp.asarray(x), jnp.asarray(doc), z, 2, 2))(
            trace.z
        )
        np.testing.assert_allclose(np.asarray(trace.doc_topic), np.asarray(again[0]), atol=1e-9)
        np.testing.assert_allclose(np.asarray(trace.resultant), np.asarray(again[2]), atol=1e-9)
    index = {k: j for j, k in enumerate(keys)}
    freq = np.bincount([index[tuple(z)] for z in np.asarray(trace.z)], minlength=len(keys))
    freq = freq / freq.sum()
    # 20,000 correlated sweeps: the total variation distance of the empirical distribution
    # from the truth is ~sum sqrt(p/n_eff); with n_eff >= 5,000 that is below ~0.06.
    assert 0.5 * np.abs(freq - probs).sum() < 0.06


@pytest.mark.slow
def test_gibbs_agrees_with_vem_and_to_arviz(tmp_path):
    rng = np.random.default_rng(5)
    docs, mu, theta = planted(rng, n_topics=3, d=10, n_docs=30, n_words=12, kappa=40.0)
    vem = DirichletVMFMixture(3, alpha=0.3, n_init=2, random_state=0).fit(docs)
    gibbs = DirichletVMFMixture(
        3,
        alpha=0.3,
        inference="gibbs",
        num_chains=2,
        num_warmup=50,
        num_samples=50,
        random_state=0,
    ).fit(docs)
    pv, cv = match(mu, vem.mean_directions_)
    pg, cg = match(mu, gibbs.mean_directions_)
    assert cv.min() >= 0.95 and cg.min() >= 0.95, (cv, cg)
    # ~120 vectors per topic: the kappa posterior sd is ~8% of kappa; VEM's point estimate and
    # the posterior mean agree to within 3 sd
    np.testing.assert_allclose(gibbs.concentrations_[pg], vem.concentrations_[pv], rtol=0.25)
    # document proportions: 12 vectors per document, posterior sd ~0.1; the two methods'
    # estimates of the same posterior mean agree much better than that on average
    assert np.abs(gibbs.doc_topic_[:, pg] - vem.doc_topic_[:, pv]).mean() < 0.05
    accept = gibbs.samples_["kappa_accept"].mean()
    assert 0.2 < accept < 0.7
    idata = gibbs.to_arviz()
    assert idata.posterior["mu"].dims == ("chain", "draw", "topic", "feature")
    assert idata.posterior["kappa"].shape == (2, 50, 3)
    assert idata.sample_stats["lp"].shape == (2, 50)
    np.testing.assert_allclose(gibbs.transform(docs).sum(axis=1), 1.0, rtol=1e-12)
    # the draws survive save / load (npz + json, no pickle)
    save(gibbs, tmp_path / "gibbs.npz")
    again = load(tmp_path / "gibbs.npz")
    assert set(again.samples_) == set(gibbs.samples_)
    for name, value in gibbs.samples_.items():
        np.testing.assert_array_equal(again.samples_[name], value)
    assert np.isnan(again.lower_bound_) and again.lower_bounds_all_ == []
    assert again.to_arviz().posterior["kappa"].shape == (2, 50, 3)


def test_gibbs_draws_of_mu_do_not_move_while_z_does_not():
    """Draws of mu with every z unchanged are equal to the bit. They moved in their last bits at
    every sweep (the sweep's -x, +x on the resultants, and kappa scaling b_k), so ArviZ gave
    R-hat 1.15 for mu and plot_trace failed on the noise (a helper's audit of to_arviz)."""
    data = make_vmf_mixture(150, 5, 3, kappa=30.0, random_state=0)
    X = np.asarray(data.X)
    rng = np.random.default_rng(0)
    docs = [X[rng.choice(150, 10, replace=False)] for _ in range(20)]
    model = DirichletVMFMixture(
        3, inference="gibbs", num_chains=2, num_warmup=30, num_samples=30, random_state=0
    ).fit(docs)
    posterior = model.to_arviz().posterior
    weights, mu = posterior["weights"].values, posterior["mu"].values
    assert np.ptp(weights, axis=(0, 1)).max() == 0  # the case: no token moves after warm-up
    assert np.ptp(posterior["kappa"].values) > 1  # while kappa is still sampled
    assert np.ptp(mu, axis=(0, 1)).max() == 0


# ------------------------------------------------------------------ partial_fit: stochastic VI
#: first chunk small (a batch fit of it alone is > 2% off the batch score on held-out
#: documents, so the 1% check below is decisive), then chunks of 26-28 documents sharing
#: one bucket (32 documents, 1024 rows): the stream compiles two SVI programs, then none
STREAM_SIZES = [10, 26, 27, 28, 27, 28, 27, 27]


@pytest.fixture(scope="module")
def stream_data():
    docs, mu, _ = planted(
        np.random.default_rng(11), n_topics=4, d=10, n_docs=260, n_words=30, kappa=10.0
    )
    return docs[:200], docs[200:]


@pytest.fixture(scope="module")
def stream(stream_data):
    train, test = stream_data
    batch = DirichletVMFMixture(4, alpha=0.3, n_init=2, random_state=0).fit(train)
    model = DirichletVMFMixture(4, alpha=0.3, n_init=2, random_state=0)
    # non-unit rows: partial_fit normalises a copy, the caller's arrays stay as they are
    chunks = [2.0 * x for x in train]
    copies = [x.copy() for x in chunks]
    traces, start, first_score = [], 0, None
    for size in STREAM_SIZES:
        model.partial_fit(chunks[start : start + size], n_sets=len(train))
        start += size
        traces.append(TRACE_COUNTS["dirichlet.svi_step"])
        if first_score is None:
            first_score = model.score(test)
    unchanged = all(np.array_equal(x, c) for x, c in zip(chunks, copies))
    return batch, model, first_score, traces, unchanged


def test_partial_fit_reaches_batch_score(stream_data, stream):
    batch, model, first_score, _, _ = stream
    test = stream_data[1]
    batch_score, stream_score = batch.score(test), model.score(test)
    assert abs(stream_score - batch_score) <= 0.01 * abs(batch_score)
    # the first chunk alone is not enough: the later chunks did the work
    assert abs(first_score - batch_score) > 0.02 * abs(batch_score)
    assert model.n_sets_seen_ == 200 and model.n_steps_ == len(STREAM_SIZES) - 1
    np.testing.assert_allclose(model.weights_.sum(), 1.0)
    assert model.doc_topic_.shape == (STREAM_SIZES[-1], 4)


def test_partial_fit_no_recompilation_and_input_untouched(stream):
    _, _, _, traces, unchanged = stream
    # chunk 1 compiles the first bucket, chunk 2 the common one, later chunks reuse it
    assert traces[1] == traces[0] + 1
    assert traces[2:] == [traces[1]] * (len(STREAM_SIZES) - 2)
    assert unchanged


def test_svi_step_matches_numpy_reference(stream_data, stream):
    """One SVI step on a padded chunk against a NumPy transcription of eqs. (9), (10)."""
    from scipy.special import ive

    train = stream_data[0][:10]  # the first chunk's shapes: no new compilation
    model = stream[1]
    mu, kappa, alpha = model.mean_directions_, model.concentrations_, 0.3
    k, d = mu.shape
    rng = np.random.default_rng(3)
    resp_sum0, resultant0 = rng.uniform(1, 2, k), rng.normal(size=(k, d))
    rho, scale = 0.3, 7.0
    X, w, offsets = _corpus._check_documents(train, None, normalize=True, n_features=d)
    with jax.enable_x64(True):
        corpus, n_docs = dv.padded_corpus(X, w, offsets)
        assert corpus.X.shape[0] > X.shape[0] and corpus.doc_weight.shape[0] > n_docs
        stats, new_mu, new_kappa, _, phi, bound = _svi._svi_step(
            dv.SVIStats(jnp.asarray(resp_sum0), jnp.asarray(resultant0)),
            jnp.asarray(mu),
            jnp.asarray(kappa),
            corpus,
            jnp.int32(n_docs),
            jnp.float64(alpha),
            jnp.float64(1e6),
            jnp.float64(rho),
            jnp.float64(scale),
        )
    # NumPy: local step per document to convergence, then the statistics
    log_c = np.array([float(special.log_vmf_normalizer(d, kk)) for kk in kappa])
    resp_sum, resultant, total_bound = np.zeros(k), np.zeros((k, d)), 0.0
    for i, x in enumerate(train):
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        loglik = log_c + kappa * (x @ mu.T)
        phi_i = np.full(k, alpha + len(x) / k)
        for _ in range(2000):
            logits = digamma(phi_i) + loglik
            pi = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
            phi_i = alpha + pi.sum(axis=0)
        # the local step stops when E[theta_i] moves by <= 1e-10 (max-norm): phi ~ 30 is
        # then within a few 1e-9 of the fixed point
        np.testing.assert_allclose(np.asarray(phi)[i], phi_i, rtol=0, atol=1e-7)
        resp_sum += pi.sum(axis=0)
        resultant += pi.T @ x
        elog = digamma(phi_i) - digamma(phi_i.sum())
        total_bound += (
            gammaln(k * alpha)
            - k * gammaln(alpha)
            + np.sum((alpha - 1 + pi.sum(0)) * elog)
            - (gammaln(phi_i.sum()) - gammaln(phi_i).sum() + np.sum((phi_i - 1) * elog))
            + np.sum(pi * loglik)
            - np.sum(pi * np.log(pi))
        )
    want_n = (1 - rho) * resp_sum0 + rho * scale * resp_sum
    want_r = (1 - rho) * resultant0 + rho * scale * resultant
    np.testing.assert_allclose(np.asarray(stats.resp_sum), want_n, rtol=1e-7)
    np.testing.assert_allclose(np.asarray(stats.resultant), want_r, rtol=1e-7, atol=1e-6)
    norm = np.linalg.norm(want_r, axis=1)
    np.testing.assert_allclose(np.asarray(new_mu), want_r / norm[:, None], rtol=1e-7, atol=1e-9)
    new_kappa = np.asarray(new_kappa)
    a_d = ive(d / 2, new_kappa) / ive(d / 2 - 1, new_kappa)
    np.testing.assert_allclose(a_d, norm / want_n, rtol=1e-7)
    np.testing.assert_allclose(float(bound), total_bound, rtol=1e-9)


def test_partial_fit_bad_chunks(stream):
    model = stream[1]
    seen, steps = model.n_sets_seen_, model.n_steps_
    with pytest.raises(ValueError, match=r"docs\[1\] has 3 features, expected 10 \(the fitted"):
        model.partial_fit([np.eye(10)[:2], np.eye(3)])
    with pytest.raises(ValueError, match="docs is empty"):
        model.partial_fit([])
    with pytest.raises(ValueError, match=r"docs\[0\] has an all-zero row: row 1"):
        model.partial_fit([np.array([[1.0] + [0.0] * 9, [0.0] * 10])])
    with pytest.raises(ValueError, match="n_sets must be None or an int >= 1; got 0"):
        model.partial_fit([np.eye(10)], n_sets=0)
    with pytest.raises(ValueError, match=r"weights\[0\] has a negative value at position 2"):
        model.partial_fit([np.eye(10)[:3]], weights=[np.array([1.0, 1.0, -1.0])])
    # a rejected chunk leaves the stream where it was
    assert (model.n_sets_seen_, model.n_steps_) == (seen, steps)
    with pytest.raises(ValueError, match="partial_fit needs inference='vem'"):
        DirichletVMFMixture(2, inference="gibbs").partial_fit(GOOD)
    with pytest.raises(
        ValueError,
        match=r"The 'learning_decay' parameter of DirichletVMFMixture must be a float in the "
        r"range \(0.5, 1.0\]. Got 0.4 instead.",
    ):
        DirichletVMFMixture(2, learning_decay=0.4).partial_fit(GOOD)


def test_partial_fit_continues_a_vem_fit(stream_data):
    """partial_fit after fit continues from the fit's statistics (it used to refit on the
    chunk and restart the counters). With the whole training corpus as the chunk (scale 1)
    the SVI step is one VEM iteration, so at the converged fit it moves nothing, whatever
    rho_1 = 2^-0.7 is. The fit stops when the bound changes by less than tol per vector,
    not at the exact fixed point: the step moved mu by 6e-5 and kappa by 1.2e-4 (relative)
    after a fit to tol = 1e-6, 1.4e-6 and 2.4e-6 after 1e-9, 1.1e-7 and 1.7e-7 after
    1e-12 (measured), so the fit here runs to tol = 1e-12."""
    train = stream_data[0]
    batch = DirichletVMFMixture(4, alpha=0.3, n_init=2, random_state=0, tol=1e-12).fit(train)
    model = copy.deepcopy(batch)
    stats, mu, kappa = model._online
    # the statistics behind the fit's topics: mu_k = r_k / |r_k|, A_d(kappa_k) = |r_k| / n_k
    norm = np.linalg.norm(np.asarray(stats.resultant), axis=1)
    np.testing.assert_allclose(np.asarray(stats.resultant) / norm[:, None], mu, rtol=1e-12)
    with jax.enable_x64(True):
        a_d = np.asarray(special.mean_resultant_length(10, jnp.asarray(kappa)))
    np.testing.assert_allclose(a_d, norm / np.asarray(stats.resp_sum), rtol=1e-10)
    assert (model.n_sets_seen_, model.n_steps_) == (200, 0)
    model.partial_fit(train, n_sets=200)
    assert (model.n_sets_seen_, model.n_steps_, model.n_iter_) == (400, 1, batch.n_iter_ + 1)
    np.testing.assert_allclose(model.mean_directions_, batch.mean_directions_, atol=1e-6)
    np.testing.assert_allclose(model.concentrations_, batch.concentrations_, rtol=1e-6)
    with pytest.raises(
        ValueError,
        match=r"DirichletVMFMixture.partial_fit: n_topics=5 differs from the stream this model "
        r"carries \(n_topics=4\); restore it, or call fit to start anew\.",
    ):
        model.set_params(n_topics=5).partial_fit(train[:5])
    assert (model.n_sets_seen_, model.n_steps_) == (400, 1)


def test_a_gibbs_fit_forgets_the_stream(stream):
    model = copy.deepcopy(stream[1])
    model.set_params(inference="gibbs", num_chains=1, num_warmup=5, num_samples=5)
    # 10 tokens on 9 distinct vectors for 4 topics: degenerate (which component the guard
    # names first, an empty, one-vector or background topic, depends on the thresholds)
    with pytest.warns(DegenerateRunWarning, match="DirichletVMFMixture: compon"):
        model.fit([np.eye(10)[:4], np.eye(10)[3:9]])
    assert not hasattr(model, "n_sets_seen_") and model._online is None
    with pytest.raises(ValueError, match="Invalid parameter 'topics' for estimator Dirichlet"):
        model.set_params(topics=3)


def test_mixed_dtype_agrees_with_float64(stream_data, stream):
    """dtype="mixed": float32 data products, within the documented accuracy of float64."""
    train, test = stream_data
    batch = stream[0]
    mixed = DirichletVMFMixture(4, alpha=0.3, n_init=2, random_state=0, dtype="mixed").fit(train)
    # the float32 path was taken (bitwise equality would mean it was not) ...
    assert not np.array_equal(mixed.mean_directions_, batch.mean_directions_)
    # ... and lands on the same optimum: cosines carry ~1e-7 relative error
    np.testing.assert_allclose(mixed.mean_directions_, batch.mean_directions_, atol=1e-4)
    np.testing.assert_allclose(mixed.concentrations_, batch.concentrations_, rtol=1e-4)
    np.testing.assert_allclose(mixed.score(test), batch.score(test), rtol=1e-6)
    with pytest.raises(
        ValueError, match="The 'dtype' parameter of DirichletVMFMixture must be a str among"
    ):
        DirichletVMFMixture(2, dtype="half").fit(GOOD)
