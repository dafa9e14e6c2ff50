"""k-MLE benchmark: CS-divergence retrieval vs log-Euclidean 1-NN, speed, DP-k-MLE++ recovery.

Writes benchmarks/results/kmle.json and kmle.md. Run: python benchmarks/bench_kmle.py
"""

import json
import platform
import time
from functools import partial
from pathlib import Path

import numpy as np
import scipy.stats
from sklearn.metrics import adjusted_rand_score

from bayesvmf.models import kmle
from bayesvmf.models.kmle import KMLEMixture, nearest_neighbor_retrieval

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"

# Pipeline settings fixed a priori, before any test accuracy was looked at, and not tuned on
# the test split (nor re-tuned when this benchmark was sped up).
SETTINGS = {
    "BasicMotions": dict(window_sizes=(25, 50), step=25, n_components=2, shrinkage=1e-3),
    "JapaneseVowels": dict(window_sizes=(29,), step=1, n_components=1, shrinkage=1e-2),
}


def load(name):
    arch = np.load(DATA / f"{name}.series.npz")
    data, offsets = arch["data"], arch["offsets"]
    series = [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
    return (
        series,
        np.load(DATA / f"{name}.y.npy"),
        np.load(DATA / f"{name}.split.npy"),
        np.load(DATA / f"{name}.cov.npy"),
    )


def log_euclidean_1nn(cov, y, split, floor=1e-8):
    """1-NN under ||logm(C_i) - logm(C_j)||_F; eigenvalues floored at floor * trace / d."""
    d = cov.shape[-1]
    w, v = np.linalg.eigh(cov)
    w = np.maximum(w, floor * np.trace(cov, axis1=1, axis2=2)[:, None] / d)
    logs = (v * np.log(w)[:, None, :]) @ np.swapaxes(v, 1, 2)
    flat = logs.reshape(len(cov), -1)
    tr, te = flat[split == 0], flat[split == 1]
    dist = ((te[:, None, :] - tr[None, :, :]) ** 2).sum(-1)
    return float(np.mean(y[split == 0][dist.argmin(1)] == y[split == 1]))


def stein_precision_1nn(series, y, split, settings):
    """1-NN under the Jensen-Bregman log-det divergence between inverse window matrices.

    Only for one window per series: then every fit is one Wishart with dof at max_dof, and
    the CS divergence is this divergence times a constant, so the predictions must agree.
    """
    mats = np.stack(
        [
            kmle.windowed_cross_products(
                s, settings["window_sizes"], settings["step"], settings["shrinkage"]
            )[0]
            for s in series
        ]
    )
    precision = np.linalg.inv(mats)  # a reference check, outside the package
    log_det = np.linalg.slogdet(precision)[1]
    tr, te = np.flatnonzero(split == 0), np.flatnonzero(split == 1)
    mid = np.linalg.slogdet((precision[te][:, None] + precision[tr][None, :]) / 2)[1]
    div = mid - 0.5 * log_det[te][:, None] - 0.5 * log_det[tr][None, :]
    return y[tr][div.argmin(1)]


def retrieval(name):
    series, y, split, cov = load(name)
    train = [s for s, t in zip(series, split) if t == 0]
    test = [s for s, t in zip(series, split) if t == 1]
    settings = SETTINGS[name]
    n_windows = [
        len(kmle.windowed_cross_products(s, settings["window_sizes"], settings["step"]))
        for s in series
    ]
    t0 = time.perf_counter()
    pred, _ = nearest_neighbor_retrieval(train, y[split == 0], test, random_state=0, **settings)
    seconds = time.perf_counter() - t0
    extra = {}
    if max(n_windows) == 1:
        stein = stein_precision_1nn(series, y, split, settings)
        extra["stein_precision_1nn_accuracy"] = float(np.mean(stein == y[split == 1]))
        extra["agreement_with_stein_precision_1nn"] = float(np.mean(stein == pred))
    return {
        **extra,
        "dataset": name,
        "n_train": len(train),
        "n_test": len(test),
        "windows_per_series": [int(min(n_windows)), int(max(n_windows))],
        "cs_1nn_accuracy": float(np.mean(pred == y[split == 1])),
        "log_euclidean_1nn_accuracy": log_euclidean_1nn(cov, y, split),
        "pipeline_seconds": seconds,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
    }


def speed(n=10_000, d=6, k=5, seed=0):
    """Fit time for n Wishart d x d matrices, K = k; the same fit twice (with, then without JIT)."""
    rng = np.random.default_rng(seed)
    scales = [np.diag(rng.uniform(0.2, 5.0, d)) for _ in range(k)]
    X = np.concatenate([scipy.stats.wishart(20, S).rvs(n // k, random_state=rng) for S in scales])
    y = np.repeat(np.arange(k), n // k)
    out = {}
    for label in ("including_compilation", "excluding_compilation"):
        t0 = time.perf_counter()
        m = KMLEMixture(n_components=k, random_state=0).fit(X)
        out[label] = {
            "seconds": time.perf_counter() - t0,
            "n_transfers": m.n_transfers_,
            "n_iter": m.n_iter_,
            "ari": float(adjusted_rand_score(y, m.labels_)),
        }
    return {"n_samples": n, "d": d, "n_components": k, **out}


def _burg(X):
    X, log_det = kmle._check_spd_matrices(X)
    stats = np.concatenate([log_det[:, None], X.reshape(len(X), -1)], 1)
    return partial(kmle._wishart_seed_divergence, stats)  # the seeding divergence of fit()


def dp_recovery(n_seeds=40, factors=(1, 2, 3, 5, 10, 15)):
    """How often DP-k-MLE++ (Algorithm 3) finds K = 3 on three synthetic Wishart clusters."""
    sets = {}
    rng = np.random.default_rng(7)  # the 3 x 100 set of tests/test_kmle.py
    scales = [
        np.eye(3),
        np.diag([6.0, 1.0, 0.2]),
        np.array([[3.0, 2.5, 0.0], [2.5, 3.0, 0.0], [0.0, 0.0, 3.0]]),
    ]
    sets["equal sizes 100/100/100, dof 15, three scales (tests)"] = (
        np.concatenate([scipy.stats.wishart(15, S).rvs(100, random_state=rng) for S in scales]),
        (100, 100, 100),
    )
    for sizes in ((100, 100, 100), (150, 40, 10)):
        rng = np.random.default_rng(0)
        X = np.concatenate(
            [
                scipy.stats.wishart(30, c * np.eye(3)).rvs(n, random_state=rng)
                for c, n in zip((1, 30, 900), sizes)
            ]
        )
        label = "/".join(map(str, sizes))
        sets[f"sizes {label}, dof 30, scales I, 30 I, 900 I (far apart)"] = (X, sizes)
    out = []
    for name, (X, sizes) in sets.items():
        n = len(X)
        div = _burg(X)
        y = np.repeat(np.arange(3), sizes)
        rows = []
        for f in factors:
            ks = np.array(
                [
                    len(kmle.dp_kmle_pp(div, n, np.random.default_rng(s), lam=f / n)[0])
                    for s in range(n_seeds)
                ]
            )
            rows.append(
                {
                    "lam_times_n": f,
                    "lam": f / n,
                    "fraction_k3": float(np.mean(ks == 3)),
                    "median_k": float(np.median(ks)),
                    "min_k": int(ks.min()),
                    "max_k": int(ks.max()),
                }
            )
        # largest single-point share of the seeding loss: one seed per cluster vs one missing
        B = np.stack([div(i) for i in range(n)])
        r = np.random.default_rng(1)
        full, missing = [], []
        for _ in range(200):
            seeds = [r.choice(np.flatnonzero(y == c)) for c in range(3)]
            best = B[seeds].min(0)
            full.append(best.max() / best.sum() * n)
            drop = r.integers(3)
            best = B[[s for j, s in enumerate(seeds) if j != drop]].min(0)
            missing.append(best.max() / best.sum() * n)
        out.append(
            {
                "data": name,
                "n_samples": n,
                "n_seeds": n_seeds,
                "by_lam": rows,
                "max_share_times_n_all_seeded_median": float(np.median(full)),
                "max_share_times_n_all_seeded_q90": float(np.quantile(full, 0.9)),
                "max_share_times_n_one_missing_median": float(np.median(missing)),
                "max_share_times_n_one_missing_q10": float(np.quantile(missing, 0.1)),
            }
        )
    return out


def main():
    t_start = time.perf_counter()
    results = {
        "retrieval": [retrieval(n) for n in SETTINGS],
        "speed": speed(),
        "dp_kmle_pp": dp_recovery(),
        "machine": f"{platform.machine()}, {platform.python_version()}, shared 2-core CPU",
    }
    results["total_seconds"] = time.perf_counter() - t_start
    OUT.mkdir(exist_ok=True)
    (OUT / "kmle.json").write_text(json.dumps(results, indent=2))
    lines = [
        "# k-MLE benchmark (models/kmle.py)",
        "",
        "## Retrieval: 1-NN accuracy on the published test split",
        "",
        "CS = Cauchy-Schwarz divergence between per-series Wishart mixtures (sec. 4 of",
        "Saint-Jean & Nielsen 2013), each fitted by k-MLE to the series' windowed",
        "cross-product matrices. Baseline: 1-NN under the log-Euclidean distance between the",
        "full-series sample covariances (`cov.npy`). The pipeline settings were fixed a priori",
        "(before any test accuracy was seen) and not tuned on the test split.",
        "",
        "| data set | train / test | settings (windows, stride, K, shrinkage) "
        "| windows per series | CS 1-NN (k-MLE mixtures) | log-Euclidean 1-NN (full-series cov.) "
        "| CS pipeline wall time, s (all fits + CS matrix) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["retrieval"]:
        s = r["settings"]
        lo, hi = r["windows_per_series"]
        lines.append(
            f"| {r['dataset']} | {r['n_train']} / {r['n_test']} "
            f"| {tuple(s['window_sizes'])}, {s['step']}, {s['n_components']}, {s['shrinkage']} "
            f"| {lo}-{hi} | {r['cs_1nn_accuracy']:.3f} | {r['log_euclidean_1nn_accuracy']:.3f} "
            f"| {r['pipeline_seconds']:.1f} |"
        )
    lines += [
        "",
        "JapaneseVowels series are short (T = 7-29), so the window of 29 steps is the whole",
        "series: every series gives one matrix and a one-component mixture whose degrees of",
        "freedom sit at the cap `max_dof` (a single matrix has an unbounded likelihood). With",
        "equal degrees of freedom n, the CS divergence between two such fits reduces to",
        "(n - (d+1)/2) times the Jensen-Bregman log-det (Stein) divergence between the inverse",
        "shrunk cross-product matrices, so this row measures that divergence, not the",
        "bag-of-windows mixture of BasicMotions.",
    ]
    for r in results["retrieval"]:
        if "agreement_with_stein_precision_1nn" in r:
            lines += [""]
            lines.append(
                f"Check ({r['dataset']}): a direct 1-NN under that divergence scores "
                f"{r['stein_precision_1nn_accuracy']:.3f} and agrees with the CS pipeline on "
                f"{100 * r['agreement_with_stein_precision_1nn']:.0f} % of the test series."
            )
    s = results["speed"]
    inc, exc = s["including_compilation"], s["excluding_compilation"]
    lines += [
        "",
        f"## Speed: {s['n_samples']} Wishart {s['d']}x{s['d']} matrices, K = {s['n_components']}",
        "",
        "The same fit (same seed, so the same transfers) run twice in one process.",
        "",
        "| fit | wall time, s | transfers | outer iterations | ARI |",
        "|---|---|---|---|---|",
        f"| first (includes JIT compilation) | {inc['seconds']:.1f} | {inc['n_transfers']} "
        f"| {inc['n_iter']} | {inc['ari']:.3f} |",
        f"| second (compiled program reused) | {exc['seconds']:.1f} | {exc['n_transfers']} "
        f"| {exc['n_iter']} | {exc['ari']:.3f} |",
        "",
        "## DP-k-MLE++ (Algorithm 3): how often does `lam` recover K = 3?",
        "",
        "Fraction of random seeds (DP-k-MLE++ seeding only) that give exactly three clusters, for",
        "lam = c/N. The rule adds a seed while one point carries more than lam of the seeding",
        "loss. The last columns give the largest single-point share (times N) with one seed in",
        "each true cluster, and with one cluster left without a seed (200 random draws).",
        "",
    ]
    factors = [row["lam_times_n"] for row in results["dp_kmle_pp"][0]["by_lam"]]
    lines += [
        "| data (N) | "
        + " | ".join(f"lam = {f}/N" for f in factors)
        + " | max share x N, all seeded (median, 90 %)"
        + " | max share x N, one missing (median, 10 %) |",
        "|---" * (len(factors) + 3) + "|",
    ]
    for r in results["dp_kmle_pp"]:
        cells = [
            f"{row['fraction_k3']:.2f} (K {row['min_k']}-{row['max_k']})" for row in r["by_lam"]
        ]
        lines.append(
            f"| {r['data']} ({r['n_samples']}) | "
            + " | ".join(cells)
            + f" | {r['max_share_times_n_all_seeded_median']:.1f}, "
            f"{r['max_share_times_n_all_seeded_q90']:.1f} "
            f"| {r['max_share_times_n_one_missing_median']:.1f}, "
            f"{r['max_share_times_n_one_missing_q10']:.1f} |"
        )
    lines += [
        "",
        "Reading: when a cluster of m points has no seed, its loss is spread over those m",
        "points, so each carries at most about 1/m of the total (K/N for equal sizes). With",
        "every cluster seeded, the largest share is still several times 1/N, because the Burg",
        "divergence to a single seed point is heavy-tailed. The two ranges overlap, so no lam",
        "separates them. A small lam keeps splitting clusters, and a large lam stops at one or",
        "two. At the first steps it is worse: the K - 1 clusters without a seed share their",
        "loss among even more points. Equal-sized clusters are the hard case. Unequal sizes",
        "help only somewhat, because a small missing cluster concentrates its loss on few",
        "points. When K matters, pass `n_components` (k-MLE++ seeding) and compare fits.",
        "",
        f"Total benchmark wall time: {results['total_seconds']:.0f} s ({results['machine']}).",
    ]
    (OUT / "kmle.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
