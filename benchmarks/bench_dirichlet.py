"""Benchmark of DirichletVMFMixture (VMFMix): Classic3 features and VEM speed.

Writes benchmarks/results/dirichlet.json and dirichlet.md. Run from the project root:

    /work/venv/bin/python benchmarks/bench_dirichlet.py

1. Classic3 (../shared/data): word vectors from the corpus itself (truncated SVD of the
   tf-idf term matrix, unit rows), each document the set of its words with their counts as
   weights; VMFMix topic proportions (transform) feed a logistic regression; macro-F1 on a
   stratified held-out split against bag of words (tf-idf) and a histogram of k-means word
   clusters with the same K.
2. Speed: VEM on 100,000 vectors of dimension 100 with K = 30 (planted, 1,000 documents),
   float64 and ``dtype="mixed"`` (float32 data products); one compiled VEM iteration against
   the floor of the two data products, with a breakdown of where the step's time goes.

``--speed-only`` re-runs part 2 and keeps the Classic3 results of the existing JSON file.
"""

import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from bayesvmf.models import DirichletVMFMixture
from bayesvmf.models import dirichlet as dv
from bayesvmf.models.dirichlet import _corpus, _vem

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results"
N_TOPICS = 20
SVD_DIM = 100
SEED = 0


def classic3():
    if not (DATA / "Classic3.X.npz").exists():
        print(f"skip Classic3: {DATA / 'Classic3.X.npz'} is absent")
        return None
    counts = sp.load_npz(DATA / "Classic3.X.npz").tocsr()
    y = np.load(DATA / "Classic3.y.npy")
    vocab = (DATA / "Classic3.vocab.txt").read_text().split("\n")[: counts.shape[1]]
    tfidf = TfidfTransformer().fit_transform(counts)
    # word vectors: rows of V S from the SVD of the term-document tf-idf matrix
    svd = TruncatedSVD(SVD_DIM, random_state=SEED).fit(tfidf)
    words = svd.components_.T * svd.singular_values_
    keep_word = np.linalg.norm(words, axis=1) > 0
    docs, weights, keep_doc = [], [], []
    for i in range(counts.shape[0]):
        row = counts[i]
        cols = row.indices[keep_word[row.indices]]
        vals = row.data[keep_word[row.indices]]
        if len(cols) == 0:
            continue
        docs.append(words[cols])
        weights.append(vals.astype(float))
        keep_doc.append(i)
    keep_doc = np.array(keep_doc)
    y = y[keep_doc]
    idx_train, idx_test = train_test_split(
        np.arange(len(docs)), test_size=0.3, stratify=y, random_state=SEED
    )
    pick = lambda seq, idx: [seq[i] for i in idx]  # noqa: E731
    rows = {}

    def evaluate(name, f_train, f_test, seconds):
        clf = LogisticRegression(max_iter=2000).fit(f_train, y[idx_train])
        f1 = f1_score(y[idx_test], clf.predict(f_test), average="macro")
        rows[name] = {"macro_f1": round(float(f1), 4), "seconds": round(seconds, 2)}
        print(name, rows[name])

    t = time.perf_counter()
    model = DirichletVMFMixture(N_TOPICS, alpha=0.1, n_init=2, max_iter=100, random_state=SEED).fit(
        pick(docs, idx_train), pick(weights, idx_train)
    )
    fit_s = time.perf_counter() - t
    f_train = model.doc_topic_
    f_test = model.transform(pick(docs, idx_test), pick(weights, idx_test))
    evaluate(f"VMFMix topic proportions (K={N_TOPICS})", f_train, f_test, time.perf_counter() - t)
    top = model.top_items(words, n=6, labels=vocab)
    score = model.score(pick(docs, idx_test), pick(weights, idx_test))

    t = time.perf_counter()
    X = tfidf[keep_doc]
    evaluate("bag of words (tf-idf)", X[idx_train], X[idx_test], time.perf_counter() - t)

    t = time.perf_counter()
    unit = words / np.linalg.norm(words, axis=1, keepdims=True)
    km = KMeans(N_TOPICS, n_init=4, random_state=SEED).fit(unit[keep_word])
    labels = np.full(len(words), -1)
    labels[keep_word] = km.labels_
    onehot = sp.csr_matrix(
        (np.ones(keep_word.sum()), (np.flatnonzero(keep_word), km.labels_)),
        shape=(len(words), N_TOPICS),
    )
    hist = np.asarray((counts[keep_doc] @ onehot).todense())
    hist = hist / hist.sum(axis=1, keepdims=True)
    evaluate(
        f"k-means word-cluster histogram (K={N_TOPICS})",
        hist[idx_train],
        hist[idx_test],
        time.perf_counter() - t,
    )
    return {
        "n_documents": len(docs),
        "n_vectors": int(sum(len(d) for d in docs)),
        "svd_dim": SVD_DIM,
        "vmfmix_fit_seconds": round(fit_s, 2),
        "vmfmix_n_iter": int(model.n_iter_),
        "vmfmix_heldout_score_per_vector": round(score, 4),
        "rows": rows,
        "top_words": [[w for w, _ in t] for t in top[:5]],
    }


def speed():
    sys.path.insert(0, str(ROOT / "tests"))
    rng = np.random.default_rng(SEED)
    n_topics, d, n_docs, n_words = 30, 100, 1000, 100
    mu = rng.normal(size=(n_topics, d))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    theta = rng.dirichlet(np.full(n_topics, 0.3), size=n_docs)
    z = np.array([rng.choice(n_topics, size=n_words, p=t) for t in theta])
    # vMF(mu_k, kappa) draws by the tangent-normal approximation (speed test only)
    kappa = 200.0
    noise = rng.normal(size=(n_docs, n_words, d)) / np.sqrt(kappa)
    x = mu[z] + noise
    docs = list(x / np.linalg.norm(x, axis=2, keepdims=True))
    out = {}
    runs = [
        ("first fit (includes compilation)", {}),
        ("second fit", {}),
        ('dtype="mixed", first fit (includes compilation)', {"dtype": "mixed"}),
        ('dtype="mixed", second fit', {"dtype": "mixed"}),
    ]
    models = {}
    for label, kw in runs:
        t = time.perf_counter()
        model = DirichletVMFMixture(n_topics, alpha=0.3, n_init=1, random_state=SEED, **kw).fit(
            docs
        )
        seconds = time.perf_counter() - t
        out[label] = {
            "seconds": round(seconds, 2),
            "n_iter": int(model.n_iter_),
            "seconds_per_iter": round(seconds / model.n_iter_, 4),
        }
        print(label, out[label])
        models[kw.get("dtype", "float64")] = model
    model = models["float64"]
    cos = mu @ model.mean_directions_.T
    out["mean_best_cosine_to_truth"] = round(float(cos.max(axis=1).mean()), 4)
    cos = mu @ models["mixed"].mean_directions_.T
    out["mixed_mean_best_cosine_to_truth"] = round(float(cos.max(axis=1).mean()), 4)
    timing = iteration_vs_floor(model, docs)
    print(timing)
    return {
        "n_vectors": n_docs * n_words,
        "d": d,
        "K": n_topics,
        "runs": out,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **timing,
    }


def _median_seconds(fn, repeat=7):
    fn()  # warm-up (compilation, page faults)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def iteration_vs_floor(model, docs):
    """Median time of one compiled VEM step against the two data products in NumPy.

    The floor is X @ mu.T (N x d by d x K) plus resp.T @ X (K x N by N x d) in float64
    NumPy/OpenBLAS on one thread (docs/design.md section 5); the step is ``_vem_step`` (E-step,
    M-step with exact kappa, exact bound) timed with ``block_until_ready``, in float64 and
    in mixed mode (float32 data products), all in this run, interleaved, so that the load of
    the shared machine affects them alike. The breakdown times the step's parts alone as
    compiled XLA programs: the two products in float64 and in float32, and one exp over the
    (N, K) table. Also reported: the change of the bound and of mu, kappa after one step
    in mixed mode against float64 from the same state (the documented accuracy).
    """
    X, w, offsets = _corpus._check_documents(docs, None, normalize=True, n_features=None)
    with jax.enable_x64(True):
        corpus = dv.prepare_corpus(X, w, offsets)
        corpus32 = dv.prepare_corpus(X, w, offsets, jax.numpy.float32)
        hyper = dv.VEMHyper(jax.numpy.float64(model.alpha), jax.numpy.float64(model.kappa_max))
        phi = model.alpha + model.doc_topic_ * np.diff(offsets)[:, None]
        state = dv.VEMState(
            jax.numpy.asarray(model.mean_directions_),
            jax.numpy.asarray(model.concentrations_),
            jax.numpy.asarray(phi),
        )
        resp = np.random.default_rng(SEED).dirichlet(np.ones(model.n_topics), size=len(X))
        mu_t = np.ascontiguousarray(model.mean_directions_.T)

        def products():
            return X @ mu_t, resp.T @ X

        def step():
            jax.block_until_ready(_vem._vem_step(state, corpus, hyper))

        def step32():
            jax.block_until_ready(_vem._vem_step(state, corpus32, hyper))

        new64, info64 = _vem._vem_step(state, corpus, hyper)
        new32, info32 = _vem._vem_step(state, corpus32, hyper)
        bound64 = float(info64.lower_bound)
        accuracy = {
            "bound_relative_change": float(abs(float(info32.lower_bound) - bound64) / abs(bound64)),
            "mu_max_abs_change": float(np.max(np.abs(np.asarray(new32.mu - new64.mu)))),
            "kappa_max_relative_change": float(
                np.max(np.abs(np.asarray(new32.kappa / new64.kappa) - 1.0))
            ),
        }
        mu_j, resp_j = state.mu, jax.numpy.asarray(resp)
        dot = jax.jit(lambda X, m: X @ m.T)
        tdot = jax.jit(lambda r, X: r.T @ X)
        exp = jax.jit(jax.numpy.exp)
        parts = {
            "xla_X_mu_float64": lambda: jax.block_until_ready(dot(corpus.X, mu_j)),
            "xla_resp_X_float64": lambda: jax.block_until_ready(tdot(resp_j, corpus.X)),
            "xla_X_mu_float32": lambda: jax.block_until_ready(
                dot(corpus32.X, mu_j.astype(np.float32))
            ),
            "xla_resp_X_float32": lambda: jax.block_until_ready(
                tdot(resp_j.astype(np.float32), corpus32.X)
            ),
            "xla_exp_NK_float64": lambda: jax.block_until_ready(exp(resp_j)),
        }
        steps, steps32, floors = [], [], []
        breakdown = {name: [] for name in parts}
        with threadpool_limits(1, user_api="blas"):
            for _ in range(3):
                steps.append(_median_seconds(step))
                steps32.append(_median_seconds(step32))
                floors.append(_median_seconds(products))
                for name, fn in parts.items():
                    breakdown[name].append(_median_seconds(fn, repeat=3))
    per_iter, per_iter32, floor = (float(np.median(t)) for t in (steps, steps32, floors))
    return {
        "step_seconds": round(per_iter, 4),
        "mixed_step_seconds": round(per_iter32, 4),
        "floor_seconds": round(floor, 4),
        "step_over_floor": round(per_iter / floor, 2),
        "mixed_step_over_floor": round(per_iter32 / floor, 2),
        "breakdown_seconds": {k: round(float(np.median(v)), 4) for k, v in breakdown.items()},
        "mixed_accuracy": accuracy,
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    if "--speed-only" in sys.argv[1:]:
        previous = json.loads((OUT / "dirichlet.json").read_text())
        result = {"speed": speed(), "classic3": previous.get("classic3")}
    else:
        result = {"speed": speed(), "classic3": classic3()}
    (OUT / "dirichlet.json").write_text(json.dumps(result, indent=2))
    lines = ["# DirichletVMFMixture benchmark", "", "## Speed (VEM, one restart)", ""]
    sp_ = result["speed"]
    lines.append(f"{sp_['n_vectors']} vectors, d = {sp_['d']}, K = {sp_['K']}")
    lines += ["", "| run | seconds | iterations | s / iteration |", "|---|---|---|---|"]
    for name, r in sp_["runs"].items():
        if isinstance(r, dict):
            lines.append(f"| {name} | {r['seconds']} | {r['n_iter']} | {r['seconds_per_iter']} |")
    lines.append(
        f"\nmean best cosine to the planted topics: {sp_['runs']['mean_best_cosine_to_truth']}"
    )
    lines.append(
        f'mean best cosine to the planted topics, dtype="mixed": '
        f"{sp_['runs']['mixed_mean_best_cosine_to_truth']}"
    )
    lines.append(
        f"\nOne compiled VEM iteration (`_vem_step`: E-step, M-step with kappa solved exactly, "
        f'exact bound), median: float64 {sp_["step_seconds"]} s, dtype="mixed" (float32 '
        f"data products, the rest float64) {sp_['mixed_step_seconds']} s. The floor, the two "
        f"data products X @ mu.T and resp.T @ X in float64 NumPy/OpenBLAS on one thread, "
        f"measured in the same run: {sp_['floor_seconds']} s. Ratio step / floor: "
        f"**{sp_['step_over_floor']}** (float64), **{sp_['mixed_step_over_floor']}** (mixed); "
        "target 1.5. The fit times above also include the k-means++ initialisation and the "
        "host loop (one float() of the bound per iteration). Timings come from a shared "
        f"2-core machine under load (load average {sp_['load_average']} at the end of the "
        "speed part); compare the ratios, not the seconds."
    )
    lines += ["", "Where the step's time goes (each part alone, compiled XLA, median s):", ""]
    lines += ["| part | seconds |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sp_["breakdown_seconds"].items()]
    acc = sp_["mixed_accuracy"]
    lines.append(
        f"\nAccuracy of one mixed step against float64 from the same state: bound relative "
        f"change {acc['bound_relative_change']:.2e}, max |mu change| "
        f"{acc['mu_max_abs_change']:.2e}, max relative kappa change "
        f"{acc['kappa_max_relative_change']:.2e}."
    )
    c3 = result["classic3"]
    if c3 is not None:
        lines += ["", "## Classic3: macro-F1 of a logistic regression (70/30 stratified split)", ""]
        lines.append(
            f"{c3['n_documents']} documents, {c3['n_vectors']} (word, count) vectors, "
            f"word vectors from a rank-{c3['svd_dim']} SVD of the tf-idf matrix; VMFMix fit "
            f"{c3['vmfmix_fit_seconds']} s ({c3['vmfmix_n_iter']} iterations), held-out "
            f"bound per vector {c3['vmfmix_heldout_score_per_vector']}"
        )
        lines += ["", "| features | macro-F1 | seconds |", "|---|---|---|"]
        for name, r in c3["rows"].items():
            lines.append(f"| {name} | {r['macro_f1']} | {r['seconds']} |")
        lines += ["", "Top words of the first topics:", ""]
        lines += [f"- {', '.join(t)}" for t in c3["top_words"]]
    (OUT / "dirichlet.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
