"""T-vMFmix next-time-point prediction (the protocol of Fig. 1 of Gopal & Yang 2014).

Two temporal corpora:

* ``generated``: :func:`make_temporal_vmf_mixture` (d = 50, K = 5, 8 time steps of 100 rows,
  kappa = 100, one random-walk step of concentration 300 per time: consecutive means have
  cosine A_50(300) ~ 0.92);
* ``classic3``: Classic3 (tf-idf: raw counts times log(n / df), rows normalised by the
  estimators). Its documents have no dates, so a time order is built in which each class's
  vocabulary drifts: within each class the documents are sorted by their score on the
  class's leading right singular vector (of the class's centred tf-idf rows) and the sorted
  list is cut into 8 equal consecutive chunks, chunk t going to time t. Each class mean then
  moves steadily along that direction over time, while the class proportions stay those of
  the corpus.

Each model is fitted on times 0..T-2 and scored (held-out average log predictive density
per row) on time T-1: T-vMFmix (both kappa schemes; forecast one step ahead, see
models/bayesian/_temporal.py), B-vMFmix (VI, sampling scheme) and the classical shared-kappa
vMF mixture (``SparseVMFMixture(beta=0, shared_kappa=True)``), all with K clusters. The
static models ignore the times. These two corpora fix C0 by hand (as [1]_ does).

A third section, ``sotu``, is the real temporal corpus of issue 18 with every default:
:func:`bayesvmf.datasets.load_sotu` (State of the Union paragraphs as tf-idf rows, one time
step per decade; needs the optional ``sotu`` package). Each of the last three decades is
predicted from all earlier ones by T-vMFmix with its defaults except K and max_iter (C0
learnt), by T-vMFmix with the old default C0 = 100 and with C0 learnt under mean field (to
measure what learning C0 and the structured view of the chain each bring), by B-vMFmix and the
classical mixture, beside the uniform density's log-likelihood; then the same with the
decades shuffled over the rows (no drift), where T-vMFmix should match B-vMFmix (B-vMFmix is
fitted there at two more seeds, to measure how far a score moves with the start alone). K =
SOTU_K and max_iter = SOTU_MAX_ITER keep the section to minutes on 2 shared cores. A fourth
section, ``sotu-addresses``, repeats it with whole addresses as the documents
(``load_sotu(unit="speech")``: about 240 long documents, the yearly corpus of issue 18's
report, instead of about 21,000 paragraphs); a test decade then holds 5-9 addresses. A
fifth, ``sotu-ceiling``, asks how far above the uniform density the classical mixture gets
on the paragraphs as K grows (shared and per-cluster kappa, one start each, K in
SOTU_CEILING_K), fitted on every decade but the last and scored on the last: issue 18's
"never within 1% of the uniform density", measured against the capacity it would take.

Writes benchmarks/results/temporal.json and temporal.md. Run:
``python benchmarks/bench_temporal.py [SECTION ...]`` (sections ``generated``, ``classic3``,
``sotu``, ``sotu-addresses``, ``sotu-ceiling``; default all); a run of some sections keeps
the others' stored results. Timings are wall-clock on whatever machine runs it (compilation
included).
"""

import functools
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import scipy.sparse as sp

from bayesvmf import special
from bayesvmf.datasets import load_sotu, make_temporal_vmf_mixture
from bayesvmf.exceptions import ConvergenceWarning, DegenerateRunWarning
from bayesvmf.models import SparseVMFMixture
from bayesvmf.models.bayesian._bvmf import BayesianVMFMixture
from bayesvmf.models.bayesian._temporal import TemporalVMFMixture

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
N_TIMES = 8
SOTU_K = 10
SOTU_MAX_ITER = 40
SOTU_EXTRA_SEEDS = (1, 2)
SOTU_CEILING_K = (10, 30, 100, 300, 1000)


def generated():
    X, times, _, _ = make_temporal_vmf_mixture(
        100,
        n_features=50,
        n_components=5,
        n_times=N_TIMES,
        kappa=100.0,
        drift=300.0,
        random_state=0,
    )
    return X, times, 5, 300.0


def classic3():
    counts = sp.load_npz(DATA / "Classic3.X.npz").tocsr().astype(np.float64)
    y = np.load(DATA / "Classic3.y.npy")
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    idf = np.log(counts.shape[0] / np.maximum(df, 1))
    X = sp.csr_matrix(counts @ sp.diags(idf))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
    keep = norms > 0
    X = sp.csr_matrix(sp.diags(1.0 / norms[keep]) @ X[keep])
    y = y[keep]
    times = np.zeros(X.shape[0], np.int64)
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        dense = X[rows].toarray()
        centred = dense - dense.mean(axis=0)
        direction = np.linalg.svd(centred, full_matrices=False)[2][0]
        order = rows[np.argsort(dense @ direction, kind="stable")]
        for t, chunk in enumerate(np.array_split(order, N_TIMES)):
            times[chunk] = t
    # C0 with consecutive-step cosine A_d(C0) = 0.9 (a setting, not tuned on the test time)
    d = X.shape[1]
    C0 = float(special.kappa_from_rbar(d, 0.9))
    return X, times, 6, C0


def evaluate(name, X, times, K, C0):
    train, test = times < N_TIMES - 1, times == N_TIMES - 1
    rows = {}
    models = {
        "T-vMFmix (sampling)": lambda: TemporalVMFMixture(
            K, C0=C0, kappa_update="sampling", max_iter=100, tol=1e-5, random_state=0
        ),
        "T-vMFmix (bounding)": lambda: TemporalVMFMixture(
            K, C0=C0, kappa_update="bounding", max_iter=100, tol=1e-5, random_state=0
        ),
        "B-vMFmix (VI, sampling)": lambda: BayesianVMFMixture(
            K, kappa_update="sampling", max_iter=100, tol=1e-5, dtype="float64", random_state=0
        ),
        "vMFmix (shared kappa)": lambda: SparseVMFMixture(
            K, beta=0.0, shared_kappa=True, n_init=1, max_iter=200, random_state=0
        ),
    }
    for label, make in models.items():
        _, rows[label] = _fit_score(make, X, times, train, test)
        score, seconds = rows[label]["heldout_loglik_per_row"], rows[label]["seconds"]
        print(f"{name:10s} {label:25s} {score:12.3f}  {seconds:7.1f} s", flush=True)
    return {
        "n_train": int(train.sum()),
        "n_test": int(test.sum()),
        "n_features": int(X.shape[1]),
        "K": K,
        "C0": C0,
        "results": rows,
    }


class _MeanFieldC0(TemporalVMFMixture):
    """T-vMFmix with C0 learnt by the bound's mean-field maximiser (for comparison only)."""

    _c0_update = "mean-field"


def _fit_score(make, X, times, train, test):
    """Fit on the train rows, score the test rows; the row of the results table."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        warnings.simplefilter("always", DegenerateRunWarning)
        model = make()
        if isinstance(model, TemporalVMFMixture):
            model.fit(X[train], times[train])
            score = model.score(X[test], times[test])
        else:
            model.fit(X[train])
            score = model.score(X[test])
    return model, {
        "heldout_loglik_per_row": float(score),
        "seconds": time.perf_counter() - start,
        "converged": bool(getattr(model, "converged_", True)),
        "C0": float(model.C0_) if isinstance(model, TemporalVMFMixture) else None,
        "n_iter": int(getattr(model, "n_iter_", 0)),
        "warnings": sorted({type(w.message).__name__ for w in caught}),
    }


def sotu(unit="paragraph"):
    """A SOTU section: the last three decades, in time order and shuffled (module doc)."""
    data = load_sotu(unit=unit)
    X, times = data.X, data.times
    n_times = int(times.max()) + 1
    d = X.shape[1]
    with jax.enable_x64(True):
        uniform = float(special.log_vmf_normalizer(d, 0.0))
    K, it = SOTU_K, SOTU_MAX_ITER
    # B-vMFmix with float64 products, as T-vMFmix (which has no dtype option) and as the
    # tables were measured; its default since session 17 is dtype="mixed"
    common = dict(max_iter=it, random_state=0)
    b_common = dict(common, dtype="float64")
    ordered = {
        "T-vMFmix (defaults, C0 learnt)": lambda: TemporalVMFMixture(K, **common),
        "T-vMFmix (C0 learnt, mean field)": lambda: _MeanFieldC0(K, **common),
        "T-vMFmix (C0 = 100, the old default)": lambda: TemporalVMFMixture(K, C0=100.0, **common),
        "B-vMFmix (defaults)": lambda: BayesianVMFMixture(K, **b_common),
        "vMFmix (shared kappa)": lambda: SparseVMFMixture(
            K, beta=0.0, shared_kappa=True, n_init=1, max_iter=200, random_state=0
        ),
    }
    # B-vMFmix at two more seeds: how far its score moves with the start alone, the scale
    # against which the shuffled |T - B| is read
    shuffled_models = {
        "T-vMFmix (defaults, C0 learnt)": ordered["T-vMFmix (defaults, C0 learnt)"],
        "B-vMFmix (defaults)": ordered["B-vMFmix (defaults)"],
        **{
            f"B-vMFmix (random_state={seed})": (
                lambda seed=seed: BayesianVMFMixture(
                    K, max_iter=it, dtype="float64", random_state=seed
                )
            )
            for seed in SOTU_EXTRA_SEEDS
        },
    }
    shuffled_times = np.random.default_rng(0).permutation(times)
    splits = []
    for step in range(n_times - 3, n_times):
        split = {"test_decade": data.time_labels[step], "uniform_loglik_per_row": uniform}
        for name, t, models in (
            ("ordered", times, ordered),
            ("shuffled", shuffled_times, shuffled_models),
        ):
            train, test = t < step, t == step
            rows = {}
            for label, make in models.items():
                _, rows[label] = _fit_score(make, X, t, train, test)
                print(
                    f"sotu {unit} {split['test_decade']} {name:8s} {label:38s} "
                    f"{rows[label]['heldout_loglik_per_row']:12.3f} "
                    f"{rows[label]['seconds']:7.1f} s",
                    flush=True,
                )
            split[name] = {"n_train": int(train.sum()), "n_test": int(test.sum()), "results": rows}
        splits.append(split)
    return {
        "description": data.description,
        "unit": unit,
        "n_features": d,
        "n_times": n_times,
        "K": K,
        "max_iter": it,
        "splits": splits,
    }


def sotu_ceiling():
    """The classical mixture at growing K on the SOTU paragraphs, scored on the last decade."""
    data = load_sotu()
    X, times = data.X, data.times
    d = X.shape[1]
    with jax.enable_x64(True):
        uniform = float(special.log_vmf_normalizer(d, 0.0))
    step = int(times.max())
    train, test = times < step, times == step
    rows = []
    for K in SOTU_CEILING_K:
        for shared in (True, False):
            label = f"vMFmix ({'shared' if shared else 'per-cluster'} kappa)"
            make = functools.partial(
                SparseVMFMixture, K, shared_kappa=shared, max_iter=200, random_state=0
            )
            _, row = _fit_score(make, X, times, train, test)
            row.update(model=label, K=K, gain=row["heldout_loglik_per_row"] - uniform)
            rows.append(row)
            print(
                f"sotu ceiling K={K:5d} {label:28s} {row['heldout_loglik_per_row']:12.3f} "
                f"gain {row['gain']:8.2f} ({100 * row['gain'] / abs(uniform):.3f}%) "
                f"{row['seconds']:6.1f} s",
                flush=True,
            )
    return {
        "test_decade": data.time_labels[step],
        "n_train": int(train.sum()),
        "n_test": int(test.sum()),
        "n_features": d,
        "uniform_loglik_per_row": uniform,
        "rows": rows,
    }


def _ceiling_lines(res) -> list:
    u = res["uniform_loglik_per_row"]
    lines = [
        f"## sotu, the classical mixture's best over K (paragraphs; fitted on "
        f"{res['n_train']:,}, scored on the {res['n_test']} paragraphs of the "
        f"{res['test_decade']})",
        "",
        "How far above the uniform density the classical mixture gets as K grows "
        "(`SparseVMFMixture(K, shared_kappa=..., max_iter=200, random_state=0)`, defaults "
        f"otherwise: one start). Uniform density: {u:.3f} per paragraph "
        f"(d = {res['n_features']:,}); 1% of it is {abs(u) / 100:.0f} nats.",
        "",
        "| K | model | held-out log-lik / row | vs uniform | relative | iterations | converged "
        "| seconds | warnings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in res["rows"]:
        lines.append(
            f"| {row['K']} | {row['model']} | {row['heldout_loglik_per_row']:.3f} | "
            f"{row['gain']:+.3f} | {100 * row['gain'] / abs(u):.3f}% | {row['n_iter']} | "
            f"{row['converged']} | {row['seconds']:.1f} | {', '.join(row['warnings'])} |"
        )
    best = max(res["rows"], key=lambda row: row["gain"])
    largest = max(row["K"] for row in res["rows"])
    tried = ", ".join(str(k) for k in dict.fromkeys(row["K"] for row in res["rows"]))
    text = (
        f"The best of these is {100 * best['gain'] / abs(u):.3f}% above the uniform density "
        f"({best['model']}, K = {best['K']})"
    )
    if best["K"] < largest:
        text += f"; at K = {largest} the held-out score is lower"
    if best["gain"] < abs(u) / 100:
        text += (
            f". So on this representation issue 18's 1% is out of reach of the classical "
            f"mixture at every K tried ({tried}), not only of T-vMFmix's defaults."
        )
    else:
        text += f", which clears issue 18's 1% (K tried: {tried})."
    return lines + ["", text, ""]


def _sotu_lines(res) -> list:
    """A SOTU section's tables and the acceptance of issue 18, from the stored results."""
    unit = "address" if res.get("unit") == "speech" else "paragraph"
    section = "sotu" if unit == "paragraph" else "sotu, whole addresses"
    lines = [
        f"## {section} ({res['description']}; K = {res['K']}, max_iter = {res['max_iter']})",
        "",
        f"Each of the last three decades predicted from all earlier ones (held-out "
        f"log-likelihood per {unit}; higher is better). T-vMFmix forecasts one step ahead with "
        "every default but K and max_iter (C0 learnt from the structured view of the chain); "
        "the two rows below it are C0 learnt under mean field and the old default C0 = 100 "
        "(C0_: the fitted C0 of T-vMFmix). The Bayesian fits may stop at max_iter "
        f"(ConvergenceWarning). 'shuffled': the decade of each {unit} permuted at random over "
        "the rows (no drift), same split sizes; B-vMFmix is also fitted there with "
        "random_state 1 and 2, to show how far its score moves with the start alone.",
        "",
        "| test decade | rows | model | held-out log-lik / row | vs uniform | C0_ | iterations "
        "| seconds | warnings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    wins, close, far, gain, gap, spread = 0, [], [], [], [], []
    for split in res["splits"]:
        u = split["uniform_loglik_per_row"]
        for name in ("ordered", "shuffled"):
            part = split[name]
            for label, row in part["results"].items():
                ll = row["heldout_loglik_per_row"]
                c0 = f"{row['C0']:.4g}" if label.startswith("T-") else ""
                lines.append(
                    f"| {split['test_decade']}{' shuffled' if name == 'shuffled' else ''} "
                    f"| {part['n_test']} | {label} | {ll:.3f} | {ll - u:+.3f} | {c0} "
                    f"| {row['n_iter']} | {row['seconds']:.1f} | {', '.join(row['warnings'])} |"
                )
        ordered = {k: v["heldout_loglik_per_row"] for k, v in split["ordered"]["results"].items()}
        shuffled = {k: v["heldout_loglik_per_row"] for k, v in split["shuffled"]["results"].items()}
        t = ordered["T-vMFmix (defaults, C0 learnt)"]
        wins += t > max(ordered["B-vMFmix (defaults)"], ordered["vMFmix (shared kappa)"])
        ts, bs = shuffled["T-vMFmix (defaults, C0 learnt)"], shuffled["B-vMFmix (defaults)"]
        close.append(abs(ts - bs) / abs(bs))
        gap.append(ts - bs)
        far.append(min(abs(t - u), abs(ts - u)) / abs(u))
        gain.append((t - u) / (ordered["B-vMFmix (defaults)"] - u))
        b_seeds = [v for k, v in shuffled.items() if k.startswith("B-vMFmix")]
        spread.append((max(b_seeds) - min(b_seeds)) / abs(bs))
    u = res["splits"][0]["uniform_loglik_per_row"]
    gains = [
        row["heldout_loglik_per_row"] - split["uniform_loglik_per_row"]
        for split in res["splits"]
        for label, row in split["ordered"]["results"].items()
        if "old default" not in label
    ]
    lines += [
        "",
        f"Uniform density: {u:.3f} per {unit}.",
        "",
        "Acceptance (issue 18): T-vMFmix above B-vMFmix and the classical mixture in "
        f"{wins} of 3 decades (needs 2); shuffled, |T - B| / |B| = "
        + ", ".join(f"{100 * c:.3f}%" for c in close)
        + " (needs < 0.1%; B-vMFmix's own spread over random_state 0-2: "
        + ", ".join(f"{100 * c:.3f}%" for c in spread)
        + "); the default fit's distance to the uniform density, relative: "
        + ", ".join(f"{100 * f:.2f}%" for f in far)
        + " (needs > 1%).",
        "",
        f"In d = {res['n_features']:,} the log-normaliser dominates every density: the uniform "
        f"density scores {u:,.0f} per {unit} (1% of it is {abs(u) / 100:,.0f} nats) and the "
        f"fitted models (the old default C0 = 100 aside) {min(gains):,.0f}-{max(gains):,.0f} "
        "above it. In nats: T-vMFmix's gain over the uniform density relative to B-vMFmix's "
        "gain, per decade: "
        + ", ".join(f"{g:.2f}" for g in gain)
        + "; shuffled, T - B in nats: "
        + ", ".join(f"{g:+.2f}" for g in gap)
        + ".",
        "",
    ]
    if unit == "address":
        c0 = [
            split["shuffled"]["results"]["T-vMFmix (defaults, C0 learnt)"]["C0"]
            for split in res["splits"]
        ]
        beyond = sum(c > s for c, s in zip(close, spread))
        lines += [
            "With a few addresses per decade, each decade's fitted means are noisy, so C0 is "
            f"learnt finite ({min(c0):.2g}-{max(c0):.2g}) even with the decades shuffled, and "
            "the one-step forecast is pulled off the static means: shuffled, T-vMFmix scores "
            f"{min(-g for g in gap):.0f}-{max(-g for g in gap):.0f} nats below B-vMFmix, more "
            f"than B-vMFmix's own spread over seeds in {beyond} of 3 decades.",
            "",
        ]
    return lines


def main(sections):
    path = OUT / "temporal.json"
    out = json.loads(path.read_text()) if path.exists() else {"corpora": {}}
    out.update(machine=platform.platform(), jax=jax.__version__)
    builders = {"generated": generated}
    if (DATA / "Classic3.X.npz").exists():
        builders["classic3"] = classic3
    for name in sections:
        if name == "sotu":
            out["sotu"] = sotu()
            continue
        if name == "sotu-addresses":
            out["sotu_addresses"] = sotu(unit="speech")
            continue
        if name == "sotu-ceiling":
            out["sotu_ceiling"] = sotu_ceiling()
            continue
        X, times, K, C0 = builders[name]()
        out["corpora"][name] = evaluate(name, X, times, K, C0)
    OUT.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    lines = [
        "# T-vMFmix: held-out log-likelihood at the next time point (Fig. 1 protocol)",
        "",
        "Generated and Classic3: fitted on times 0..6, scored on time 7 (average log "
        "predictive density per row; higher is better), C0 set by hand. Corpora and the "
        "Classic3 time order: benchmarks/bench_temporal.py. Seconds include compilation, on "
        "a shared, loaded 2-core machine.",
        "",
        "Classic3 has no dates: its time order is built so that each class mean drifts "
        "along the class's leading singular direction, which favours a model of drifting "
        "means by construction; it shows that T-vMFmix tracks such a drift on real "
        "documents, not that real corpora drift this way.",
        "",
    ]
    for name, res in out["corpora"].items():
        lines += [
            f"## {name} (train {res['n_train']}, test {res['n_test']}, d = {res['n_features']}, "
            f"K = {res['K']}, C0 = {res['C0']:.4g})",
            "",
            "| model | held-out log-lik / row | seconds | converged |",
            "|---|---|---|---|",
        ]
        for label, row in res["results"].items():
            lines.append(
                f"| {label} | {row['heldout_loglik_per_row']:.3f} | {row['seconds']:.1f} | "
                f"{row['converged']} |"
            )
        lines.append("")
    for key in ("sotu", "sotu_addresses"):
        if key in out:
            lines += _sotu_lines(out[key])
    if "sotu_ceiling" in out:
        lines += _ceiling_lines(out["sotu_ceiling"])
    (OUT / "temporal.md").write_text("\n".join(lines))


if __name__ == "__main__":
    with jax.enable_x64(True):
        main(sys.argv[1:] or ["generated", "classic3", "sotu", "sotu-addresses", "sotu-ceiling"])
