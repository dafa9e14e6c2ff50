"""k-MLE benchmark: CS-divergence retrieval vs log-Euclidean 1-NN, speed, DP-k-MLE++ recovery.

Writes benchmarks/results/kmle.json and kmle.md. Run: python benchmarks/bench_kmle.py
(all parts), or ``python benchmarks/bench_kmle.py windows`` (only the named parts of
``PARTS``; the others are read back from kmle.json, and kmle.md is rewritten from both).
"""

import argparse
import json
import platform
import time
from functools import partial
from pathlib import Path

import numpy as np
import scipy.stats
from sklearn.metrics import adjusted_rand_score

from bayesvmf.models import kmle
from bayesvmf.models.kmle import (
    KMLEMixture,
    _kernel,
    _seeding,
    _wishart,
    nearest_neighbor_retrieval,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"

# Pipeline settings fixed a priori, before any test accuracy was looked at, and not tuned on
# the test split (nor re-tuned when this benchmark was sped up). The second JapaneseVowels
# row (several windows of 10 steps per series, two components, the shrinkage of the first
# row) was fixed the same way, before its accuracy was seen, and reported as it came out.
SETTINGS = [
    ("BasicMotions", dict(window_sizes=(25, 50), step=25, n_components=2, shrinkage=1e-3)),
    ("JapaneseVowels", dict(window_sizes=(29,), step=1, n_components=1, shrinkage=1e-2)),
    ("JapaneseVowels", dict(window_sizes=(10,), step=5, n_components=2, shrinkage=1e-2)),
]


#: Issue 18: every multichannel set of ../shared/data with windows of 10, 20 and 50 samples,
#: each window's stride half its length, two components per series (as in the issue's
#: BasicMotions reproduction), the default shrinkage. Fixed before any accuracy was seen.
WINDOW_SETS = {"BasicMotions": 6, "JapaneseVowels": 12, "SelfRegulationSCP1": 6, "EyesOpenShut": 14}
WINDOW_LENGTHS = (10, 20, 50)


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


def retrieval(name, settings):
    series, y, split, cov = load(name)
    train = [s for s, t in zip(series, split) if t == 0]
    test = [s for s, t in zip(series, split) if t == 1]
    n_windows = [
        len(kmle.windowed_cross_products(s, settings["window_sizes"], settings["step"]))
        for s in series
    ]
    t0 = time.perf_counter()
    pred, div = nearest_neighbor_retrieval(train, y[split == 0], test, random_state=0, **settings)
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
        # how many training series serve as somebody's nearest neighbour (hubness)
        "distinct_nearest_train_series": int(len(np.unique(div.argmin(1)))),
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


def _stats(X):
    X, log_det = _wishart._check_spd_matrices(X)
    return np.concatenate([log_det[:, None], X.reshape(len(X), -1)], 1)


def _burg(X):
    return partial(_seeding._wishart_seed_divergence, _stats(X))  # the seeding divergence of fit()


def _geometry(X):
    return _seeding._seeding_geometry(_kernel.WISHART, _stats(X))  # the geometry of fit()


def dp_sets():
    """Three-cluster sets of the issue's acceptance item and two one-component samples."""
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
    rng = np.random.default_rng(3)
    sets["one component, 300, dof 15, scale diag(6, 1, 0.2)"] = (
        scipy.stats.wishart(15, np.diag([6.0, 1.0, 0.2])).rvs(300, random_state=rng),
        (300,),
    )
    sets["one component, 300, dof 5, scale I"] = (
        scipy.stats.wishart(5, np.eye(3)).rvs(300, random_state=rng),
        (300,),
    )
    return sets


def gain_path(geometry, n, rng, n_steps):
    """Relative gains (L_k - L_{k+1}) / L_k of dp_kmle_gain's steps k = 1..n_steps, no stop.

    The same draws and candidates as ``kmle.dp_kmle_gain`` (which stops at the first gain
    <= lam), so the gains show where any lam would stop.
    """
    seed = int(rng.integers(n))
    centres, _, best = _seeding._bregman_kmeans(
        geometry, geometry.point(seed)[None], _seeding._LLOYD_MAX_ITER
    )
    gains = []
    for _ in range(n_steps):
        loss = best.sum()
        trial = None
        for c in rng.choice(n, size=_seeding._GAIN_CANDIDATES, p=best / loss):
            grown = np.concatenate([centres, geometry.point(c)[None]])
            fitted = _seeding._bregman_kmeans(geometry, grown, _seeding._LLOYD_MAX_ITER)
            if fitted is not None and (trial is None or fitted[2].sum() < trial[2].sum()):
                trial = fitted
        if trial is None:
            gains.append(0.0)
            continue
        centres, _, best = trial
        gains.append(float((loss - best.sum()) / loss))
    return np.array(gains)


def _fraction_row(ks, k_true, **key):
    ks = np.asarray(ks)
    return {
        **key,
        "fraction_true_k": float(np.mean(ks == k_true)),
        "median_k": float(np.median(ks)),
        "min_k": int(ks.min()),
        "max_k": int(ks.max()),
    }


def dp_recovery(
    n_seeds=40,
    factors=(1, 2, 3, 5, 10, 15),
    lams=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5),
):
    """How often each DP-k-MLE++ rule finds the true K (3, or 1 on the one-component sets)."""
    out = []
    for name, (X, sizes) in dp_sets().items():
        n, k_true = len(X), len(sizes)
        div, geometry = _burg(X), _geometry(X)
        share = [
            _fraction_row(
                [
                    len(kmle.dp_kmle_pp(div, n, np.random.default_rng(s), lam=f / n)[0])
                    for s in range(n_seeds)
                ],
                k_true,
                lam_times_n=f,
                lam=f / n,
            )
            for f in factors
        ]
        gain = [
            _fraction_row(
                [
                    len(kmle.dp_kmle_gain(geometry, n, np.random.default_rng(s), lam=lam)[0])
                    for s in range(n_seeds)
                ],
                k_true,
                lam=lam,
            )
            for lam in lams
        ]
        paths = np.stack(
            [gain_path(geometry, n, np.random.default_rng(s), k_true) for s in range(n_seeds)]
        )
        row = {
            "data": name,
            "n_samples": n,
            "true_k": k_true,
            "n_seeds": n_seeds,
            "share_rule": share,
            "gain_rule": gain,
            # smallest gain of a step that adds a missing cluster; largest gain of the step
            # after the true K (a split of a found cluster)
            "gain_missing_min": float(paths[:, : k_true - 1].min()) if k_true > 1 else None,
            "gain_extra_max": float(paths[:, k_true - 1].max()),
        }
        if k_true > 1:
            # largest single-point share of the seeding loss: one seed per cluster vs one missing
            y = np.repeat(np.arange(k_true), sizes)
            B = np.stack([div(i) for i in range(n)])
            r = np.random.default_rng(1)
            full, missing = [], []
            for _ in range(200):
                seeds = [r.choice(np.flatnonzero(y == c)) for c in range(k_true)]
                best = B[seeds].min(0)
                full.append(best.max() / best.sum() * n)
                drop = r.integers(k_true)
                best = B[[s for j, s in enumerate(seeds) if j != drop]].min(0)
                missing.append(best.max() / best.sum() * n)
            row["max_share_times_n_all_seeded"] = [
                float(np.median(full)),
                float(np.quantile(full, 0.9)),
            ]
            row["max_share_times_n_one_missing"] = [
                float(np.median(missing)),
                float(np.quantile(missing, 0.1)),
            ]
        out.append(row)
    return out


def dp_homogeneous(dims=(1, 2, 3, 6), sizes=(60, 300), dof_extra=(2, 15), n_seeds=20, lam=0.25):
    """One-component Wishart samples: the gain of the first split, and K chosen by `lam`."""
    out = []
    for d in dims:
        for n in sizes:
            for extra in dof_extra:
                dof = d - 1 + extra
                rng = np.random.default_rng(1000 * d + n + extra)
                X = scipy.stats.wishart(dof, np.eye(d)).rvs(n, random_state=rng).reshape(n, d, d)
                geometry = _geometry(X)
                first = [
                    gain_path(geometry, n, np.random.default_rng(s), 1)[0] for s in range(n_seeds)
                ]
                ks = [
                    len(kmle.dp_kmle_gain(geometry, n, np.random.default_rng(s), lam=lam)[0])
                    for s in range(n_seeds)
                ]
                out.append(
                    {
                        "d": d,
                        "p": d * (d + 1) // 2,
                        "n_samples": n,
                        "dof": dof,
                        "first_split_gain_median": float(np.median(first)),
                        "first_split_gain_max": float(np.max(first)),
                        "reference_2_over_pi_p": 2 / (np.pi * d * (d + 1) / 2),
                        "lam": lam,
                        "fraction_k1": float(np.mean(np.asarray(ks) == 1)),
                        "max_k": int(max(ks)),
                    }
                )
    return out


def windows(name, w):
    """1-NN by CS divergence with windows of ``w`` samples: accuracy and what the windows are."""
    series, y, split, cov = load(name)
    d = series[0].shape[1]
    train = [s for s, t in zip(series, split) if t == 0]
    test = [s for s, t in zip(series, split) if t == 1]
    step = w // 2
    n_windows = [len(kmle.windowed_cross_products(s, (w,), step)) for s in series]
    t0 = time.perf_counter()
    pred, div = nearest_neighbor_retrieval(
        train, y[split == 0], test, window_sizes=(w,), step=step, n_components=2, random_state=0
    )
    return {
        "dataset": name,
        "d": d,
        "window": w,
        "step": step,
        "n_train": len(train),
        "n_test": len(test),
        "series_length": [int(min(map(len, series))), int(max(map(len, series)))],
        "series_shorter_than_window": int(sum(len(s) < w for s in series)),
        "series_shorter_than_d_plus_1": int(sum(len(s) < d + 1 for s in series)),
        "windows_per_series": [int(min(n_windows)), int(max(n_windows))],
        "all_divergences_finite": bool(np.isfinite(div).all()),
        "cs_1nn_accuracy": float(np.mean(pred == y[split == 1])),
        "distinct_nearest_train_series": int(len(np.unique(div.argmin(1)))),
        "pipeline_seconds": time.perf_counter() - t0,
        "log_euclidean_1nn_accuracy": log_euclidean_1nn(cov, y, split),
    }


PARTS = {
    "retrieval": lambda: [retrieval(n, settings) for n, settings in SETTINGS],
    "windows": lambda: [windows(n, w) for n in WINDOW_SETS for w in WINDOW_LENGTHS],
    "speed": lambda: speed(),
    "dp_kmle_pp": lambda: dp_recovery(),
    "dp_homogeneous": lambda: dp_homogeneous(),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", help=f"of {', '.join(PARTS)} (default: all)")
    only = parser.parse_args().parts or list(PARTS)
    if set(only) - set(PARTS):
        parser.error(f"unknown parts {sorted(set(only) - set(PARTS))}; choose from {list(PARTS)}")
    t_start = time.perf_counter()
    path = OUT / "kmle.json"
    results = json.loads(path.read_text()) if set(only) != set(PARTS) else {}
    for part in only:
        results[part] = PARTS[part]()
    results["machine"] = f"{platform.machine()}, {platform.python_version()}, shared 2-core CPU"
    seconds = time.perf_counter() - t_start
    if set(only) == set(PARTS):
        results["total_seconds"] = seconds
    else:
        results.setdefault("part_seconds", {})[" ".join(only)] = seconds
    OUT.mkdir(exist_ok=True)
    (OUT / "kmle.json").write_text(json.dumps(results, indent=2))
    lines = [
        "# k-MLE benchmark (models/kmle/)",
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
        "| training series that are a CS nearest neighbour "
        "| CS pipeline wall time, s (all fits + CS matrix) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["retrieval"]:
        s = r["settings"]
        lo, hi = r["windows_per_series"]
        lines.append(
            f"| {r['dataset']} | {r['n_train']} / {r['n_test']} "
            f"| {tuple(s['window_sizes'])}, {s['step']}, {s['n_components']}, {s['shrinkage']} "
            f"| {lo}-{hi} | {r['cs_1nn_accuracy']:.3f} | {r['log_euclidean_1nn_accuracy']:.3f} "
            f"| {r['distinct_nearest_train_series']} of {r['n_train']} "
            f"| {r['pipeline_seconds']:.1f} |"
        )
    lines += [
        "",
        "JapaneseVowels series are short (T = 7-29). In the first JapaneseVowels row the window",
        "of 29 steps is the whole series: every series gives one matrix and a one-component",
        "mixture whose degrees of freedom sit at the cap `max_dof` (a single matrix has an",
        "unbounded likelihood). With",
        "equal degrees of freedom n, the CS divergence between two such fits reduces to",
        "(n - (d+1)/2) times the Jensen-Bregman log-det (Stein) divergence between the inverse",
        "shrunk cross-product matrices, so this row measures that divergence, not the",
        "bag-of-windows mixture of BasicMotions. The second JapaneseVowels row uses windows",
        "of 10 steps every 5 steps (a series shorter than 10 steps gives one window of its",
        "full length) and up to two components per series. A centred 10-step window of 12",
        "channels has rank at most 9, so these matrices are SPD only through the shrinkage.",
        "This row scores far below the other two. A likely reason, from the hubness column",
        "(not a verified cause): a training series with 3-4 windows gets components with",
        "finite degrees of freedom, i.e. broad Wishart densities. A series with one window",
        "(or a singleton cluster) gets a component at the cap `max_dof`, almost a point mass.",
        "Under the CS divergence the broad mixtures end up closest to many test series, so a",
        "few training series serve as the nearest neighbour of most of the test set. The",
        "settings were not changed after this was seen.",
    ]
    for r in results["retrieval"]:
        if "agreement_with_stein_precision_1nn" in r:
            lines += [""]
            lines.append(
                f"Check ({r['dataset']}): a direct 1-NN under that divergence scores "
                f"{r['stein_precision_1nn_accuracy']:.3f} and agrees with the CS pipeline on "
                f"{100 * r['agreement_with_stein_precision_1nn']:.0f} % of the test series."
            )
    lines += [
        "",
        "### Windows of 10, 20 and 50 samples on every multichannel set (issue 18)",
        "",
        "Each series cut into windows of w samples every w/2, centred cross-products with",
        "the default shrinkage 1e-3, a two-component Wishart mixture per series (k-MLE,",
        "`random_state=0`), 1-NN by CS divergence on the published split. A series shorter",
        "than the window is one window of its own length. Windows shorter than d + 1 samples",
        "(and series shorter than d + 1) have rank-deficient cross-products, SPD only by the",
        "shrinkage; with `shrinkage=0` they raise a `ValueError`. Every fitted component has",
        "dof >= d + 1 (`min_dof`), so every divergence is finite. Settings fixed a priori.",
        "",
        "| data set (d) | train / test | window, stride | series length | series shorter "
        "than window / than d + 1 | windows per series | all CS finite | CS 1-NN accuracy "
        "| log-Euclidean 1-NN (full-series cov.) | training series that are a nearest "
        "neighbour | wall time, s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["windows"]:
        lo, hi = r["windows_per_series"]
        t_lo, t_hi = r["series_length"]
        lines.append(
            f"| {r['dataset']} ({r['d']}) | {r['n_train']} / {r['n_test']} "
            f"| {r['window']}, {r['step']} | {t_lo}-{t_hi} "
            f"| {r['series_shorter_than_window']} / {r['series_shorter_than_d_plus_1']} "
            f"| {lo}-{hi} | {'yes' if r['all_divergences_finite'] else 'NO'} "
            f"| {r['cs_1nn_accuracy']:.3f} | {r['log_euclidean_1nn_accuracy']:.3f} "
            f"| {r['distinct_nearest_train_series']} of "
            f"{r['n_train']} | {r['pipeline_seconds']:.1f} |"
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
        "## DP-k-MLE++: how often does `lam` recover K?",
        "",
        f"Fraction of {results['dp_kmle_pp'][0]['n_seeds']} random seeds (DP-k-MLE++ seeding "
        "only, seeds 0, 1, ...) that give",
        "exactly the true K (3 on the mixtures, 1 on the one-component samples), with the",
        "range of K seen. All matrices are 3 x 3.",
        "",
        '### Default rule `dp_rule="gain"` (`dp_kmle_gain`)',
        "",
        "Adds the best of three D-sampled candidates while it removes more than a fraction lam",
        "of the current loss, all clusters refined by Bregman k-means (fitted centroids). The",
        "last two columns give, along the same greedy path without stopping, the smallest gain",
        "of a step that adds a missing cluster and the largest gain of the step after the true",
        "K: any lam between the two recovers K for every seed.",
        "",
    ]
    lams = [row["lam"] for row in results["dp_kmle_pp"][0]["gain_rule"]]
    lines += [
        "| data (N) | "
        + " | ".join(f"lam = {lam:g}" for lam in lams)
        + " | smallest gain, adding a missing cluster | largest gain, step after the true K |",
        "|---" * (len(lams) + 3) + "|",
    ]
    for r in results["dp_kmle_pp"]:
        cells = [
            f"{row['fraction_true_k']:.2f} (K {row['min_k']}-{row['max_k']})"
            for row in r["gain_rule"]
        ]
        missing = "-" if r["gain_missing_min"] is None else f"{r['gain_missing_min']:.3f}"
        lines.append(
            f"| {r['data']} ({r['n_samples']}) | "
            + " | ".join(cells)
            + f" | {missing} | {r['gain_extra_max']:.3f} |"
        )
    lines += [
        "",
        "Against fitted centroids the divergence has no heavy tail: a missing cluster carries",
        "a large part of the loss, and splitting a found cluster removes only a small part,",
        "so one lam separates them. The default lam = 0.25 lies inside the range that",
        "recovers K on all five sets. Splitting one homogeneous cluster removes about",
        "2/(pi p) of its loss for p free coordinates (p = d(d+1)/2 for Wishart), more in",
        "small samples. So the threshold depends on d. One-component samples, 20 seeds each:",
        "",
        "| d (p) | N | dof | first split gain (median, max) | 2/(pi p) "
        "| K = 1 at lam = 0.25 | largest K |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["dp_homogeneous"]:
        lines.append(
            f"| {r['d']} ({r['p']}) | {r['n_samples']} | {r['dof']} "
            f"| {r['first_split_gain_median']:.3f}, {r['first_split_gain_max']:.3f} "
            f"| {r['reference_2_over_pi_p']:.3f} | {r['fraction_k1']:.2f} | {r['max_k']} |"
        )
    lines += [
        "",
        "For d = 1 and 2 the default lam is below the split gain of a single cluster and",
        "invents clusters; there, raise lam above that gain or pass `n_components`.",
        "",
        '### The paper\'s rule `dp_rule="share"` (Algorithm 3 as printed, `dp_kmle_pp`)',
        "",
        "Adds a seed while one point carries more than lam of the loss to the nearest seed",
        "point; lam = c/N. The last columns give the largest single-point share (times N)",
        "with one seed in each true cluster, and with one cluster left without a seed (200",
        "random draws).",
        "",
    ]
    factors = [row["lam_times_n"] for row in results["dp_kmle_pp"][0]["share_rule"]]
    lines += [
        "| data (N) | "
        + " | ".join(f"lam = {f}/N" for f in factors)
        + " | max share x N, all seeded (median, 90 %)"
        + " | max share x N, one missing (median, 10 %) |",
        "|---" * (len(factors) + 3) + "|",
    ]
    for r in results["dp_kmle_pp"]:
        cells = [
            f"{row['fraction_true_k']:.2f} (K {row['min_k']}-{row['max_k']})"
            for row in r["share_rule"]
        ]
        if "max_share_times_n_all_seeded" in r:
            full, missing = r["max_share_times_n_all_seeded"], r["max_share_times_n_one_missing"]
            tail = f" | {full[0]:.1f}, {full[1]:.1f} | {missing[0]:.1f}, {missing[1]:.1f} |"
        else:
            tail = " | - | - |"
        lines.append(f"| {r['data']} ({r['n_samples']}) | " + " | ".join(cells) + tail)
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
        "points. This is why the gain rule is the default.",
        "",
        f"Total benchmark wall time: {results['total_seconds']:.0f} s ({results['machine']}).",
        *(
            f"Re-run of part(s) {parts} alone: {s:.0f} s."
            for parts, s in results.get("part_seconds", {}).items()
        ),
    ]
    (OUT / "kmle.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
