"""Sparse vMF mixture benchmark: EM iteration vs the sparse-product floor, fits, CSTR, paths.

Writes benchmarks/results/sparse.json and sparse.md. Run: python benchmarks/bench_sparse.py
All ratios are measured in one run of this script (docs/design.md section 5). The estimators'
persistent compilation cache is off here (``BAYESVMF_NO_COMPILATION_CACHE=1`` unless the
environment sets it), so that the "first call" and "first fit" columns are compilations,
whatever an earlier run left in the user's cache folder (bench_vs_sklearn.py measures first
fits that read the cache back).
"""

import json
import os
import platform
import time
import warnings
from pathlib import Path

os.environ.setdefault("BAYESVMF_NO_COMPILATION_CACHE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from bayesvmf import _data
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models import SparseVMFMixture
from bayesvmf.models import sparse as S

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
N_DOCS, N_TERMS, NNZ, K = 18_846, 26_214, 1_700_000, 20
#: sparse-product kernels of bayesvmf._data.SparseData ("scipy" is the default on CPU)
KERNELS = ("scipy", "segment_sum")


def make_corpus(seed=0):
    """A 20-Newsgroups-size tf-idf corpus: 20 topics, Zipf vocabularies, ~90 terms per doc.

    Each document reads a token stream (half of the tokens from its topic's vocabulary, half
    from the shared one) until it holds its target number of *distinct* terms (Poisson, mean
    NNZ / N_DOCS); repeated tokens raise the term count (tf) instead of merging away entries,
    so the matrix has about NNZ nonzeros.
    """
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, K, N_DOCS)
    zipf = 1.0 / np.arange(1, N_TERMS + 1) ** 1.1
    zipf /= zipf.sum()
    perms = np.stack([rng.permutation(N_TERMS) for _ in range(K)])
    lengths = rng.poisson(NNZ / N_DOCS, N_DOCS).clip(5)
    # an oversampled token stream per document (3x: enough distinct terms for every document)
    rows = np.repeat(np.arange(N_DOCS), 3 * lengths)
    draws = rng.choice(N_TERMS, size=rows.size, p=zipf)
    own = rng.random(rows.size) < 0.5
    cols = np.where(own, perms[topic[rows], draws], draws)
    # distinct (doc, term) pairs, their count and first position in the stream
    keys, first, tf = np.unique(
        rows.astype(np.int64) * N_TERMS + cols, return_index=True, return_counts=True
    )
    doc, term = keys // N_TERMS, keys % N_TERMS
    # keep each document's first `lengths` distinct terms (in order of first appearance)
    order = np.lexsort((first, doc))
    doc, term, tf = doc[order], term[order], tf[order]
    starts = np.searchsorted(doc, np.arange(N_DOCS))
    keep = np.arange(doc.size) - starts[doc] < lengths[doc]
    doc, term, tf = doc[keep], term[keep], tf[keep]
    counts = sp.csr_matrix((tf.astype(np.float64), (doc, term)), shape=(N_DOCS, N_TERMS))
    df = np.bincount(counts.indices, minlength=N_TERMS)
    counts.data = np.log1p(counts.data) * np.log(N_DOCS / np.maximum(df, 1))[counts.indices]
    counts.eliminate_zeros()
    return counts, topic


def best_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def bench_iteration(X, out, rounds=15):
    """Time one EM iteration against the floor, interleaved so both see the same load.

    Each round times the two scipy float64 products once, then one EM iteration of each
    (kernel, dtype) configuration as ``run_em`` makes it (the jitted ``data_pass`` and
    ``close_step``; the "first call" column is ``em_step``'s, compiling both); ratios are
    medians of the per-round ratios (the machine is shared, and its load changes within
    seconds).
    """
    rng = np.random.default_rng(1)
    n, d = X.shape
    Xc = X.tocsr().astype(np.float64)
    M = rng.normal(size=(d, K))
    R = rng.random((n, K))
    Xn = sp.csr_matrix(Xc.multiply(1 / np.sqrt(Xc.multiply(Xc).sum(axis=1))))
    args = (np.float64(0.0), np.float64(1e6), np.float64(-1.0), np.float64(0.0), np.int64(10**6))
    steps = {}
    with jax.enable_x64(True):
        for kernel in KERNELS:
            for dtype, jdtype in (("mixed", np.float32), ("float64", np.float64)):
                data = _data.to_device(Xn, jdtype, kernel=kernel)
                state = S.init_state(
                    jax.random.key(0),
                    data,
                    n_components=K,
                    n_init=1,
                    init="random",
                    shared_kappa=True,
                    kappa_max=1e6,
                )
                t = time.perf_counter()
                state, _ = S.em_step(state, data, *args, shared_kappa=True)
                jax.block_until_ready(state)
                out[f"em_step_first_call_{kernel}_{dtype}_s"] = time.perf_counter() - t
                # one iteration of run_em: the data pass, then the closing step (which also
                # gives the next pass's log C_d; em_step computes the start's first)
                log_c = S.start_log_c(state, data, args, shared_kappa=True)

                def step(state=state, data=data, log_c=log_c):
                    jax.block_until_ready(
                        S.em_iteration(state, log_c, data, args, shared_kappa=True)
                    )

                step()
                steps[f"{kernel}_{dtype}"] = step
        floors, times = [], {key: [] for key in steps}
        for _ in range(rounds):
            floors.append(best_time(lambda: (Xc @ M, Xc.T @ R), 1))
            for key, step in steps.items():
                times[key].append(best_time(step, 1))
    floors = np.asarray(floors)
    out["floor_two_scipy_products_s"] = float(np.median(floors))
    for key, ts in times.items():
        out[f"em_iteration_{key}_s"] = float(np.median(ts))
        out[f"em_iteration_{key}_ratio"] = float(np.median(np.asarray(ts) / floors))


def bench_fit(X, y, out):
    for dtype in ("mixed", "float64"):
        model = SparseVMFMixture(
            K,
            shared_kappa=True,
            n_init=1,
            max_iter=100,
            tol=0.0,
            rtol=0.0,
            # a random start without hard passes: this times EM's iterations (the default
            # start, refined by hard passes and moves, leaves EM 1-2 iterations here)
            init="random",
            kmeans_iter=0,
            dtype=dtype,
            random_state=0,
        )
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X)
        out[f"fit_100_iterations_{dtype}_s"] = time.perf_counter() - t
        out[f"fit_100_iterations_{dtype}_n_iter"] = model.n_iter_
        out[f"fit_100_iterations_{dtype}_ari"] = adjusted_rand_score(y, model.predict(X))


def bench_cstr(out):
    X = sp.load_npz(DATA / "CSTR.X.npz")
    y = np.load(DATA / "CSTR.y.npy")
    rows = []
    for enc, Xe in (("tf-idf (published file)", X), ("binary (X > 0)", (X > 0) * 1.0)):
        for shared in (True, False):
            aris, times = [], []
            for seed in range(3):
                t = time.perf_counter()
                m = SparseVMFMixture(4, shared_kappa=shared, n_init=50, random_state=seed)
                aris.append(adjusted_rand_score(y, m.fit(Xe).predict(Xe)))
                times.append(time.perf_counter() - t)
            rows.append(
                dict(
                    encoding=enc,
                    kappa="shared" if shared else "free",
                    aris=aris,
                    first_fit_s=times[0],
                    later_fit_s=float(np.mean(times[1:])),
                )
            )
        t = time.perf_counter()
        path = SparseVMFMixture(4, shared_kappa=True, n_init=50, random_state=0).path(
            Xe, min_rel_increase=1e-2
        )
        path_s = time.perf_counter() - t
        i = path.best_index("bic")
        rows.append(
            dict(
                encoding=enc,
                kappa="shared, path",
                path_points=len(path),
                path_s=path_s,
                stop_reason=path.stop_reason,
                bic_beta=float(path.betas[i]),
                bic_sparsity=float(path.sparsity[i]),
                bic_ari=adjusted_rand_score(y, path.best("bic").predict(Xe)),
                dense_ari=adjusted_rand_score(y, path.model_at(0).predict(Xe)),
            )
        )
    out["cstr"] = rows


def bench_small(out):
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(3, 5))
    X = np.vstack([c + 0.15 * rng.normal(size=(60, 5)) for c in centres])
    for label in ("first (compiles)", "second"):
        t = time.perf_counter()
        SparseVMFMixture(3, n_init=4, beta=0.5, random_state=0).fit(X)
        fit_s = time.perf_counter() - t
        t = time.perf_counter()
        path = SparseVMFMixture(3, n_init=4, random_state=0).path(
            X, max_steps=10, min_rel_increase=0.0
        )
        out.setdefault("small", []).append(
            dict(
                run=label,
                fit_beta_0_5_s=fit_s,
                path_s=time.perf_counter() - t,
                path_points=len(path),
            )
        )


def main():
    out = {"machine": platform.platform(), "jax": jax.__version__}
    t = time.perf_counter()
    X, y = make_corpus()
    out["corpus"] = dict(shape=list(X.shape), nnz=int(X.nnz), build_s=time.perf_counter() - t)
    print(out["corpus"], flush=True)
    bench_iteration(X, out)
    print({k: v for k, v in out.items() if k.startswith(("em_", "floor"))}, flush=True)
    bench_fit(X, y, out)
    print({k: v for k, v in out.items() if k.startswith("fit")}, flush=True)
    bench_small(out)
    print(out["small"], flush=True)
    if (DATA / "CSTR.X.npz").exists():
        bench_cstr(out)
    OUT.mkdir(exist_ok=True)
    (OUT / "sparse.json").write_text(json.dumps(out, indent=1))
    (OUT / "sparse.md").write_text(to_markdown(out))
    print(to_markdown(out))


def to_markdown(out):
    c = out["corpus"]
    lines = [
        "# Sparse vMF mixture benchmark (models/sparse/)",
        "",
        f"Machine: `{out['machine']}`, JAX {out['jax']}, CPU (2 cores shared with other jobs).",
        "",
        f"## EM on a generated 20-Newsgroups-size corpus ({c['shape'][0]} x {c['shape'][1]}, "
        f"{c['nnz']:,} nonzeros, K = {K}, shared kappa)",
        "",
        "Floor: the two scipy float64 sparse-dense products of one iteration, `X @ M` and "
        f"`X.T @ R` (median {out['floor_two_scipy_products_s'] * 1e3:.1f} ms). Floor and EM "
        "steps are timed in interleaved rounds; a ratio is the median of the per-round ratios.",
        "",
        "Kernels (`bayesvmf._data.SparseData`): `scipy` is a `jax.pure_callback` into "
        "SciPy's CSR/CSC products (the default on CPU), `segment_sum` the pure-XLA sorted "
        "`segment_sum` kernel (the default on GPU/TPU, and the kernel of every earlier "
        "version). The fits use the default kernel.",
        "",
        "| kernel | data products | one EM iteration, ms | ratio to floor "
        "| first call (compile), s |",
        "|---|---|---|---|---|",
    ]
    names = {"mixed": "float32 (dtype='mixed')", "float64": "float64"}
    for kernel in KERNELS:
        for dt in ("mixed", "float64"):
            key = f"{kernel}_{dt}"
            lines.append(
                f"| {kernel} | {names[dt]} | {out[f'em_iteration_{key}_s'] * 1e3:.1f} "
                f"| {out[f'em_iteration_{key}_ratio']:.2f} "
                f"| {out[f'em_step_first_call_{key}_s']:.1f} |"
            )
    lines += [
        "",
        "| data products | fit from random rows, at most 100 EM iterations, incl. compile, s "
        "| ARI vs generating topics |",
        "|---|---|---|",
    ]
    for dt in ("mixed", "float64"):
        lines.append(
            f"| {names[dt]} | {out[f'fit_100_iterations_{dt}_s']:.1f} "
            f"({out[f'fit_100_iterations_{dt}_n_iter']} it.) "
            f"| {out[f'fit_100_iterations_{dt}_ari']:.3f} |"
        )
    lines += [
        "",
        "## Small problem (180 x 5, K = 3, 4 restarts): compile once, then fast",
        "",
        "| run | fit (beta = 0.5), s | path (max_steps = 10), s | path points |",
        "|---|---|---|---|",
    ]
    for r in out["small"]:
        lines.append(
            f"| {r['run']} | {r['fit_beta_0_5_s']:.2f} | {r['path_s']:.2f} | {r['path_points']} |"
        )
    if "cstr" in out:
        lines += [
            "",
            "## CSTR (475 x 1000), K = 4, best of 50 initialisations (seeds 0, 1, 2)",
            "",
            "Paper (Table 3): shared kappa 0.804 +- 0.012, free 0.519; BIC path point 0.808.",
            "",
            "| encoding | kappa | ARI per seed | first fit incl. compile, s | later fits, s |",
            "|---|---|---|---|---|",
        ]
        for r in out["cstr"]:
            if "aris" in r:
                aris = ", ".join(f"{a:.3f}" for a in r["aris"])
                lines.append(
                    f"| {r['encoding']} | {r['kappa']} | {aris} | {r['first_fit_s']:.1f} "
                    f"| {r['later_fit_s']:.1f} |"
                )
        lines += [
            "",
            "| encoding | path points | path time, s | BIC beta | BIC sparsity | BIC ARI "
            "| dense ARI | stop |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in out["cstr"]:
            if "path_points" in r:
                lines.append(
                    f"| {r['encoding']} | {r['path_points']} | {r['path_s']:.1f} "
                    f"| {r['bic_beta']:.1f} | {r['bic_sparsity']:.3f} | {r['bic_ari']:.3f} "
                    f"| {r['dense_ari']:.3f} | {r['stop_reason']} |"
                )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
