"""Run every benchmark and summarise the targets of the speed-and-scale issue.

One command: ``python benchmarks/run_all.py`` runs each ``benchmarks/bench_*.py`` in turn
(each writes its own ``results/<name>.json`` and ``.md``), then writes
``results/summary.md`` from the JSON files: each target met or missed, and by how much.
The summary only reads numbers the benchmarks wrote; it measures nothing itself.

Options: ``--summary-only`` rebuilds the summary from the existing JSON files;
``--only NAME [NAME ...]`` runs only those benchmarks (e.g. ``--only sparse scale``);
``--full`` is passed to benchmarks that accept it (bench_scale.py: the 200,000 x 50,000
corpus with 20M nonzeros).
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: issue 8 targets
ITERATION_TARGET = 1.5  # one EM/VEM/VI iteration within 1.5x of the two-product floor
MEMORY_TARGET = 2.0  # peak memory within 2x of the data plus the parameters
STREAM_TARGET = 0.01  # streamed log-likelihood within 1% of the batch fit
R_SECONDS_PER_ITERATION = 350 / 73  # reference R package, 20-Newsgroups size (issue 8)
#: issue 19 targets (whole fits against scikit-learn's KMeans, bench_vs_sklearn.py)
VS_KMEANS_TARGET = 1.0  # SparseVMFMixture no slower than KMeans
VI_VS_KMEANS_TARGET = 1.5  # BayesianVMFMixture VI within 1.5x of KMeans (dense case)
DENSE_ARI_MARGIN = 0.01  # dense case: ARI >= KMeans' - 0.01
TFIDF_ARI_FRACTION = 0.99  # tf-idf case: ARI >= 0.99 KMeans'
FIRST_FIT_TARGET = 2.0  # a fresh process's first fit, after one earlier process: <= 2x steady

#: keys, anywhere in a results file, holding the ratio of one iteration to its floor
FLOOR_RATIO_KEY = re.compile(r"(over_floor|iteration.*_ratio|ratio_to_floor)$")
#: keys holding the ratio of one Bayesian iteration to one EM iteration (issue 4); the
#: target is the "small factor" the results file states (bench_iterations.py)
EM_RATIO_KEY = re.compile(r"_iteration_over_em$")


def run_benchmarks(names, full: bool) -> list[dict]:
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in names]
    runs = []
    for script in scripts:
        args = [sys.executable, script.name]
        if full and "--full" in script.read_text():
            args.append("--full")
        print(f"== {script.name}", flush=True)
        t = time.perf_counter()
        code = subprocess.call(args, cwd=HERE)
        runs.append(dict(script=script.name, seconds=time.perf_counter() - t, returncode=code))
        print(f"== {script.name}: exit {code} after {runs[-1]['seconds']:.0f} s", flush=True)
    return runs


def _walk(obj, path=()):
    """Yield (path, value) of every scalar in a JSON tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, (*path, str(i)))
    else:
        yield path, obj


def _verdict(value, target, lower_is_better=True):
    if value is None:
        return "not measured"
    met = value <= target if lower_is_better else value >= target
    if met:
        return "met"
    return f"missed ({value / target:.2f}x the target)" if lower_is_better else "missed"


def vs_sklearn_rows(data: dict, source: str = "vs_sklearn") -> list[tuple[str, str, str, str]]:
    """Issue 19's acceptance rows from ``<source>.json`` (best times, mean held-out ARI);
    ``vs_sklearn_gpu`` is the same benchmark run on an accelerator (its device in the file)."""
    rows = []
    for case in data.get("cases", []):
        by_name = {r["estimator"]: r for r in case["rows"]}
        kmeans = by_name.get("KMeans")
        if kmeans is None:
            continue
        dense = case["case"].startswith("Dense")
        checks = [("SparseVMFMixture", VS_KMEANS_TARGET, "no slower than KMeans")]
        if dense:
            checks.append(("BayesianVMFMixture", VI_VS_KMEANS_TARGET, "VI within 1.5x KMeans"))
        for name, target, what in checks:
            r = by_name.get(name)
            if r is None:
                continue
            if dense:
                ari_ok = r["mean_ari"] >= kmeans["mean_ari"] - DENSE_ARI_MARGIN
                ari_text = f"ARI {r['mean_ari']:.3f} vs {kmeans['mean_ari']:.3f} (- 0.01)"
            else:
                ari_ok = r["mean_ari"] >= TFIDF_ARI_FRACTION * kmeans["mean_ari"]
                ari_text = f"ARI {r['mean_ari']:.3f} vs {kmeans['mean_ari']:.3f} (x 0.99)"
            converged = all(r["converged"])
            met = r["ratio_to_kmeans"] <= target and (name != "SparseVMFMixture" or ari_ok)
            met = met and (name != "SparseVMFMixture" or not dense or converged)
            rows.append(
                (
                    f"{name} {what} (issue 19; best of the repeats, defaults but K)",
                    f"{source}.json: {case['case']}",
                    f"{r['ratio_to_kmeans']:.2f}x; {ari_text}; converged {converged}",
                    "met" if met else "missed",
                )
            )
    # (imports JAX: only when summarising)
    from bench_vs_sklearn import FIRST_FIT_REFERENCE, first_fit_medians, first_fit_overheads

    steady = all("first_over_steady" in r for r in data.get("first_fits", []))
    against = "its steady state" if steady else "its second fit"
    overheads = first_fit_overheads(data)
    for (case_name, name), later in first_fit_medians(data).items():
        ratio = statistics.median(later)
        reference = name == FIRST_FIT_REFERENCE
        rows.append(
            (
                f"{name} first fit in a fresh process against {against} (reference: compiles "
                "nothing)"
                if reference
                else f"{name} first fit in a fresh process <= 2x {against} (issue 19)",
                f"{source}.json: first_fits, {case_name}, median of processes 2-{len(later) + 1}",
                f"{ratio:.2f}x ({', '.join(f'{v:.2f}' for v in later)}); first - "
                f"{'steady' if steady else 'second'} "
                f"{statistics.median(overheads[case_name, name]):.2f} s",
                "reference" if reference else _verdict(ratio, FIRST_FIT_TARGET),
            )
        )
    return rows


def summarise(results: dict[str, dict], runs: list[dict]) -> str:
    rows = []  # target, source, measured, verdict

    # iteration vs floor: every such ratio any benchmark wrote
    for name, data in sorted(results.items()):
        for path, value in _walk(data):
            if path and FLOOR_RATIO_KEY.search(path[-1]) and isinstance(value, int | float):
                rows.append(
                    (
                        f"one iteration <= {ITERATION_TARGET}x floor",
                        f"{name}.json: {'.'.join(path)}",
                        f"{value:.2f}x",
                        _verdict(value, ITERATION_TARGET),
                    )
                )

    # iteration vs one EM iteration of the classical mixture (issue 4)
    for name, data in sorted(results.items()):
        factor = data.get("small_factor") if isinstance(data, dict) else None
        for path, value in _walk(data):
            if factor and path and EM_RATIO_KEY.search(path[-1]) and isinstance(value, int | float):
                rows.append(
                    (
                        f"one iteration <= {factor:g}x one EM iteration (issue 4)",
                        f"{name}.json: {'.'.join(path)}",
                        f"{value:.2f}x",
                        _verdict(value, factor),
                    )
                )

    scale = results.get("scale", {})
    mem_rows = scale.get("memory", {}).get("rows", [])
    for r in mem_rows:
        rows.append(
            (
                f"peak memory <= {MEMORY_TARGET}x (data + K d)",
                f"scale.json: memory, {r['corpus']}, "
                f"{'B-vMFmix VI' if r['mode'] == 'bayesian' else r['mode']} fit, "
                f"dtype={r['dtype']}, "
                f"{r['allocator']} allocator",
                f"{r['ratio']:.2f}x",
                _verdict(r["ratio"], MEMORY_TARGET) if r["mode"] != "stream" else "see note",
            )
        )
    for corpus in scale.get("memory", {}).get("corpora", {}):
        for dtype in ("mixed", "float64"):
            pick = [
                r
                for r in mem_rows
                if (r["corpus"], r["dtype"], r["allocator"]) == (corpus, dtype, "default")
            ]
            b = [r for r in pick if r["mode"] == "batch"]
            s = [r for r in pick if r["mode"] == "stream"]
            if not (b and s):
                continue
            gap = (b[0]["log_likelihood"] - s[0]["log_likelihood"]) / abs(b[0]["log_likelihood"])
            source = f"scale.json: memory, {corpus}, dtype={dtype}"
            rows.append(
                (
                    "streamed log-likelihood within 1% of batch",
                    source,
                    f"{100 * gap:+.3f}%",
                    _verdict(abs(gap), STREAM_TARGET),
                )
            )
            rows.append(
                (
                    "streaming memory bounded (below the batch fit's)",
                    source,
                    f"{s[0]['fit_memory'] / 2**20:.0f} MiB vs {b[0]['fit_memory'] / 2**20:.0f} MiB",
                    "met" if s[0]["fit_memory"] < b[0]["fit_memory"] else "missed",
                )
            )
    kmeans = scale.get("kmeans", {}).get("rows", [])
    later = [r for r in kmeans if not r["first"]]  # after compilation

    def mean_fit(method, init, dtype):
        times = [r for r in later if (r["method"], r["init"], r["dtype"]) == (method, init, dtype)]
        if not times:
            return None, None
        return (
            sum(r["seconds"] for r in times) / len(times),
            sum(r["ari"] for r in times) / len(times),
        )

    km_s, km_ari = mean_fit("sklearn KMeans", "k-means++", "float64")
    for init in ("random", "spherical-kmeans++", "greedy-spherical-kmeans++"):
        for dtype in ("mixed", "float64"):
            t, ari = mean_fit("SparseVMFMixture", init, dtype)
            if t is None or km_s is None:
                continue
            rows.append(
                (
                    "whole fit vs scikit-learn KMeans (same data, K, restarts; mean of the "
                    "fits after compilation)",
                    f"scale.json: kmeans, SparseVMFMixture init={init}, dtype={dtype}",
                    f"{t:.1f} s vs {km_s:.1f} s; ARI {ari:.3f} vs {km_ari:.3f}",
                    "faster" if t < km_s else f"slower ({t / km_s:.2f}x)",
                )
            )

    rows += vs_sklearn_rows(results.get("vs_sklearn", {}))
    rows += vs_sklearn_rows(results.get("vs_sklearn_gpu", {}), "vs_sklearn_gpu")

    sparse = results.get("sparse", {})
    for dtype in ("mixed", "float64"):
        key = f"fit_100_iterations_{dtype}_s"
        if key in sparse:
            per_iter = sparse[key] / max(sparse[f"fit_100_iterations_{dtype}_n_iter"], 1)
            rows.append(
                (
                    "faster than the reference R package (350 s / 73 EM iterations)",
                    f"sparse.json: {key} (incl. compile)",
                    f"{per_iter * 1e3:.0f} ms/iteration vs {R_SECONDS_PER_ITERATION * 1e3:.0f} ms",
                    f"{R_SECONDS_PER_ITERATION / per_iter:.0f}x faster",
                )
            )

    dist = results.get("distribution", {})
    for r in dist.get("rows", []):
        if "speedup" in r:
            rows.append(
                (
                    f"{r['what']} throughput vs scipy.stats.vonmises_fisher",
                    f"distribution.json: d={r['d']}, kappa={r['kappa']:g}",
                    f"{r['speedup']:.2f}x",
                    "reported (no numeric target)",
                )
            )

    lines = [
        "# Benchmark summary (issue 8: speed and scale)",
        "",
        "Built by `python benchmarks/run_all.py` from the JSON files in this folder; the "
        "numbers are those the benchmarks wrote (each file says when and under which load "
        "it was measured: the machine has 2 cores shared with other jobs).",
        "",
        "| target | source | measured | verdict |",
        "|---|---|---|---|",
    ]
    lines += [f"| {t} | {s} | {m} | {v} |" for t, s, m, v in rows]
    lines += [
        "",
        "Notes.",
        "",
        "- Iteration ratios: every key of a results file naming an iteration-to-floor ratio "
        "is listed (each benchmark defines its floor in its own markdown file); the "
        "segment_sum rows of sparse.json are the XLA kernel used off CPU, not the default "
        "on CPU.",
        "- Streamed fits hold one chunk at a time: their memory is compared with the batch "
        "fit's, not with the whole corpus (the ratio column divides by the whole corpus). "
        "Memory figures come from the kernel's peak-RSS counter; the `default` allocator "
        "rows count the freed blocks glibc keeps for reuse, the `live` rows (freed blocks "
        "returned at once) the memory the fit holds; scale.md has the memory model. Why "
        "batch fits miss 2x: a fit's O((n + d) K) working set (log-likelihoods, "
        "responsibilities, directions, resultants, the dense operands copied across the "
        "host callback) measured 5-7x (n + d) K float64 values (live rows), whatever "
        "nnz, so the ratio falls as nnz grows against (n + d) K (met on the large corpus "
        "with the live "
        "allocator); glibc's default allocator adds the freed blocks it keeps per thread.",
        "- Not measured by a benchmark: no recompilation across iterations, restarts and "
        "calls with the same shapes (tests with `_mixture.count_trace`; on large data the "
        "sparse EM compiles its step once more for each smaller batch of running "
        "restarts), sharded fits equal to one-device fits (tests/test_parallel.py: "
        "SparseVMFMixture, BayesianVMFMixture VI, DirichletVMFMixture, "
        "HierarchicalVMFMixture and TemporalVMFMixture; collapsed Gibbs and KMLEMixture run "
        "on one device).",
        "- Results files without a target here: "
        + (
            ", ".join(
                f"{n}.json"
                for n in sorted(results)
                if n not in ("scale", "sparse", "distribution", "vs_sklearn", "vs_sklearn_gpu")
                and not any(
                    FLOOR_RATIO_KEY.search(p[-1]) or EM_RATIO_KEY.search(p[-1])
                    for p, _ in _walk(results[n])
                    if p
                )
            )
            or "none"
        )
        + ".",
    ]
    if runs:
        lines += ["", "| benchmark run | exit code | seconds |", "|---|---|---|"]
        lines += [f"| {r['script']} | {r['returncode']} | {r['seconds']:.0f} |" for r in runs]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--only", nargs="+", default=None)
    parser.add_argument("--full", action="store_true")
    opts = parser.parse_args()
    runs = [] if opts.summary_only else run_benchmarks(opts.only, opts.full)
    results = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}
    text = summarise(results, runs)
    (RESULTS / "summary.md").write_text(text)
    print(text)
    return 1 if any(r["returncode"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
