"""Benchmark of DirichletVMFMixture (VMFMix): Classic3 features and VEM speed.

Writes benchmarks/results/dirichlet.json and dirichlet.md. Run from the project root:

    /work/venv/bin/python benchmarks/bench_dirichlet.py

1. Classic3 (../shared/data), the acceptance case of issue 18: word vectors from the corpus
   itself (rank-100 truncated SVD of the tf-idf term matrix, unit rows), each document the
   set of its words with their counts as weights, K = 30. VMFMix with its defaults, once with
   one concentration per topic and once with ``shared_kappa=True``, is fitted to all
   documents (no labels: unsupervised features, as the k-means word clusters below, which
   also see every word); its topic proportions (``doc_topic_``) and the histogram of
   KMeans(30) word clusters (the document's tokens counted per cluster, normalised) feed the
   same logistic regression under the same stratified 5-fold CV (macro-F1, mean and sd).
   Reported per fit: collapsed topics (kappa at the cap), the degenerate topics of the guards
   (collapsed, one word type, background, empty), the largest share, the kappa range.
2. Speed: VEM on 100,000 vectors of dimension 100 with K = 30 (planted, 1,000 documents),
   float64 and ``dtype="mixed"`` (float32 data products); one compiled VEM iteration against
   the floor of the two data products, with a breakdown of where the step's time goes.

``--speed-only`` re-runs part 2 and keeps the Classic3 results of the existing JSON file;
``--classic3-only`` re-runs part 1 and keeps the speed results; ``--report-only`` rewrites
dirichlet.md from dirichlet.json.
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score
from threadpoolctl import threadpool_limits

from bayesvmf.models import DirichletVMFMixture
from bayesvmf.models import dirichlet as dv
from bayesvmf.models.dirichlet import _corpus, _degeneracy, _vem

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results"
N_TOPICS = 30
N_FOLDS = 5
SVD_DIM = 100
SEED = 0


def classic3_corpus():
    """Classic3 as sets of word vectors: (docs, weights, y, words, vocab, counts, tfidf, keep)."""
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
    return docs, weights, y[keep_doc], words, keep_word, vocab, counts[keep_doc], tfidf[keep_doc]


def macro_f1(features, y):
    """Mean and standard deviation of macro-F1 over the folds (one classifier, one CV for all)."""
    cv = StratifiedKFold(N_FOLDS, shuffle=True, random_state=SEED)
    scores = cross_val_score(
        LogisticRegression(max_iter=2000), features, y, cv=cv, scoring="f1_macro"
    )
    return round(float(scores.mean()), 4), round(float(scores.std()), 4)


def classic3():
    if not (DATA / "Classic3.X.npz").exists():
        print(f"skip Classic3: {DATA / 'Classic3.X.npz'} is absent")
        return None
    docs, weights, y, words, keep_word, vocab, counts, tfidf = classic3_corpus()
    rows = {}

    def evaluate(name, features, seconds, **extra):
        f1, sd = macro_f1(features, y)
        rows[name] = {"macro_f1": f1, "macro_f1_sd": sd, "seconds": round(seconds, 2), **extra}
        print(name, rows[name], flush=True)

    top = {}
    for shared in (False, True):
        t = time.perf_counter()
        model = DirichletVMFMixture(N_TOPICS, shared_kappa=shared, random_state=SEED)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(docs, weights=weights)
        seconds = time.perf_counter() - t
        warned = sorted({type(c.message).__name__ for c in caught})
        diag = _degeneracy.diagnose(
            model.weights_,
            float(sum(x.sum() for x in weights)),
            model.concentrations_,
            model.kappa_max,
        )
        kappa = model.concentrations_
        name = f"VMFMix topic proportions, {'shared' if shared else 'per-topic'} kappa"
        evaluate(
            name,
            model.doc_topic_,
            seconds,
            n_iter=int(model.n_iter_),
            converged=bool(model.converged_),
            bound_per_token=round(model.lower_bound_ / sum(x.sum() for x in weights), 3),
            kappa_min=round(float(kappa.min()), 1),
            kappa_median=round(float(np.median(kappa)), 1),
            kappa_max=round(float(kappa.max()), 1),
            n_collapsed=int(diag.at_cap.sum()),
            n_degenerate=len(model.degenerate_components_),
            degenerate_components=model.degenerate_components_.tolist(),
            n_degenerate_restarts=int(model.n_degenerate_restarts_),
            n_background=int(diag.background.sum()),
            n_occupied=int(model.n_occupied_components_),
            largest_share=round(float(model.largest_share_), 3),
            warnings=warned,
        )
        top[name] = [[w for w, _ in t] for t in model.top_items(words, n=6, labels=vocab)[:5]]

    t = time.perf_counter()
    unit = words[keep_word] / np.linalg.norm(words[keep_word], axis=1, keepdims=True)
    km = KMeans(N_TOPICS, n_init=4, random_state=SEED).fit(unit)
    onehot = sp.csr_matrix(
        (np.ones(keep_word.sum()), (np.flatnonzero(keep_word), km.labels_)),
        shape=(len(words), N_TOPICS),
    )
    hist = np.asarray((counts @ onehot).todense())
    hist = hist / hist.sum(axis=1, keepdims=True)
    evaluate(f"k-means word-cluster histogram (K={N_TOPICS})", hist, time.perf_counter() - t)
    evaluate("bag of words (tf-idf), reference", tfidf, 0.0)
    return {
        "n_documents": len(docs),
        "n_vectors": int(sum(len(d) for d in docs)),
        "n_tokens": int(sum(x.sum() for x in weights)),
        "svd_dim": SVD_DIM,
        "n_topics": N_TOPICS,
        "n_folds": N_FOLDS,
        "rows": rows,
        "top_words": top,
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


def classic3_lines(c3):
    lines = [
        "",
        f"## Classic3 word vectors, K = {c3['n_topics']}: topic proportions as document features",
        "",
        f"{c3['n_documents']} documents, {c3['n_vectors']} (word, count) vectors, "
        f"{c3['n_tokens']} tokens, word vectors from a rank-{c3['svd_dim']} SVD of the tf-idf "
        "matrix. VMFMix with its defaults (n_init=4, max_iter=200, alpha=0.1), fitted to all "
        "documents without labels; macro-F1 of one logistic regression under one stratified "
        f"{c3['n_folds']}-fold CV for every feature set (mean, sd over the folds).",
        "",
        "| features | macro-F1 | sd | collapsed topics | degenerate topics (guards) "
        "| degenerate restarts (of 4) | background | largest share | kappa min / median / max "
        "| bound per token | iterations | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in c3["rows"].items():
        if "n_collapsed" in r:
            lines.append(
                f"| {name} | {r['macro_f1']} | {r['macro_f1_sd']} | {r['n_collapsed']} "
                f"| {r['n_degenerate']} {r['degenerate_components']} "
                f"| {r['n_degenerate_restarts']} | {r['n_background']} "
                f"| {r['largest_share']} | {r['kappa_min']} / {r['kappa_median']} / "
                f"{r['kappa_max']} | {r['bound_per_token']} | {r['n_iter']} "
                f"| {r['seconds']} |"
            )
        else:
            lines.append(
                f"| {name} | {r['macro_f1']} | {r['macro_f1_sd']} "
                f"| | | | | | | | | {r['seconds']} |"
            )
    for name, words in c3["top_words"].items():
        lines += ["", f"Top words of the first topics, {name}:", ""]
        lines += [f"- {', '.join(t)}" for t in words]
    return lines


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    if "--speed-only" in sys.argv[1:]:
        previous = json.loads((OUT / "dirichlet.json").read_text())
        result = {"speed": speed(), "classic3": previous.get("classic3")}
    elif "--classic3-only" in sys.argv[1:]:
        previous = json.loads((OUT / "dirichlet.json").read_text())
        result = {"speed": previous["speed"], "classic3": classic3()}
    elif "--report-only" in sys.argv[1:]:
        result = json.loads((OUT / "dirichlet.json").read_text())
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
        lines += classic3_lines(c3)
    (OUT / "dirichlet.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
