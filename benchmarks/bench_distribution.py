"""Benchmark VonMisesFisher.log_prob and .sample against scipy.stats.vonmises_fisher.

Run ``python benchmarks/bench_distribution.py``; it writes ``benchmarks/results/distribution.json``
and ``benchmarks/results/distribution.md`` (a table of throughputs and ratios measured in this
one run). JAX runs jitted in float64 (inside ``jax.enable_x64(True)``), timed after a warm-up
call that compiles; each timing is the best of a few repeats, and the compile time is reported
apart. SciPy runs the same points / the same number of draws. Total runtime is about a minute
on two CPU cores.

``--baseline REF`` also times the same JAX calls with the ``bayesvmf`` package of the git
revision REF (extracted by ``git archive`` into a temporary directory) and with this tree's,
each in child processes run alternately three times, and adds a column: this tree's best
throughput over REF's. That is how "no speed loss" of a change to the
distribution is shown (issue 17: ``--baseline 30217bd^``, the code before its sampler fix).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy
import scipy.stats as st

from bayesvmf import VonMisesFisher, special

RESULTS = Path(__file__).resolve().parent / "results"


def best_time(fn, repeats):
    """Best wall time of ``repeats`` calls (the result of the last call is returned too)."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def unit_rows(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def bench_log_prob(rng, d, kappa, n, repeats=3, with_scipy=True):
    mu = unit_rows(rng, 1, d)[0]
    # points spread from the mode outwards: half random, half near mu
    x = np.concatenate([unit_rows(rng, n // 2, d), unit_rows(rng, n - n // 2, d) * 0.1 + mu])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    vmf = VonMisesFisher(jnp.asarray(mu), kappa)
    log_prob = jax.jit(vmf.log_prob)
    x_dev = jnp.asarray(x)
    start = time.perf_counter()
    log_prob(x_dev).block_until_ready()
    compile_s = time.perf_counter() - start
    jax_s, ours = best_time(lambda: log_prob(x_dev).block_until_ready(), repeats)
    if not with_scipy:
        return {"what": "log_prob", "d": d, "kappa": kappa, "n": n, "jax_per_second": n / jax_s}
    with np.errstate(all="ignore"):
        scipy_s, theirs = best_time(lambda: st.vonmises_fisher(mu, kappa).logpdf(x), repeats)
    ours = np.asarray(ours)
    finite = bool(np.all(np.isfinite(theirs)))
    row = {
        "what": "log_prob",
        "d": d,
        "kappa": kappa,
        "n": n,
        "jax_seconds": jax_s,
        "jax_compile_seconds": compile_s,
        "jax_per_second": n / jax_s,
        "scipy_seconds": scipy_s,
        "scipy_per_second": n / scipy_s,
        "speedup": scipy_s / jax_s,
        "scipy_finite": finite,
        "ours_finite": bool(np.all(np.isfinite(ours))),
        "scipy_values": "finite"
        if finite
        else f"non-finite ({np.unique(theirs[~np.isfinite(theirs)])})",
    }
    if finite:
        scale = abs(float(special.log_vmf_normalizer(d, kappa))) + kappa
        row["max_abs_diff_over_scale"] = float(np.max(np.abs(ours - theirs)) / scale)
    return row


def bench_sample(d, kappa, n, repeats, with_scipy=True):
    mu = np.zeros(d)
    mu[-1] = 1.0
    vmf = VonMisesFisher(jnp.asarray(mu), kappa)
    sample = jax.jit(lambda key: vmf.sample(key, (n,)))
    start = time.perf_counter()
    sample(jax.random.key(0)).block_until_ready()
    compile_s = time.perf_counter() - start
    keys = iter(jax.random.split(jax.random.key(1), repeats))
    jax_s, ours = best_time(lambda: sample(next(keys)).block_until_ready(), repeats)
    if not with_scipy:
        return {"what": "sample", "d": d, "kappa": kappa, "n": n, "jax_per_second": n / jax_s}
    ours = np.asarray(ours)
    rngs = iter(range(repeats))
    scipy_s, theirs = best_time(
        lambda: st.vonmises_fisher(mu, kappa).rvs(n, random_state=next(rngs)), repeats
    )
    a = float(special.mean_resultant_length(d, kappa))
    return {
        "what": "sample",
        "d": d,
        "kappa": kappa,
        "n": n,
        "jax_seconds": jax_s,
        "jax_compile_seconds": compile_s,
        "jax_per_second": n / jax_s,
        "scipy_seconds": scipy_s,
        "scipy_per_second": n / scipy_s,
        "speedup": scipy_s / jax_s,
        # sanity: both sample means of w = <mu, x> against A_d(kappa)
        "mean_w_jax": float(ours[:, -1].mean()),
        "mean_w_scipy": float(theirs[:, -1].mean()),
        "A_d": a,
    }


def to_markdown(meta, rows):
    lines = [
        "# VonMisesFisher vs scipy.stats.vonmises_fisher",
        "",
        f"Measured {meta['date']} on {meta['machine']} ({meta['cpus']} CPUs, load average "
        f"{meta['load_average']} at the start; the machine is shared, so compare the ratios, "
        "which were measured back to back, rather than the absolute times). "
        f"jax {meta['jax']}, scipy {meta['scipy']}, numpy {meta['numpy']}; float64; JAX "
        "jitted and timed after a compiling warm-up call, best of the repeats.",
        "",
    ]
    ref = meta.get("baseline")
    if ref:
        lines += [
            f"| task | d | kappa | n | bayesvmf (per s) | this tree vs {ref}, children (per s) "
            f"| vs {ref} "
            "| scipy (per s) | speedup | notes |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
    else:
        lines += [
            "| task | d | kappa | n | bayesvmf (per s) | scipy (per s) | speedup | notes |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
    for r in rows:
        if r["what"] == "log_prob":
            note = (
                f"max abs diff / (abs(log C) + kappa) = {r['max_abs_diff_over_scale']:.1e}"
                if r["scipy_finite"]
                else f"scipy returns {r['scipy_values']}; ours finite: {r['ours_finite']}"
            )
        else:
            note = (
                f"mean w: ours {r['mean_w_jax']:.5f}, scipy {r['mean_w_scipy']:.5f}, "
                f"A_d {r['A_d']:.5f}"
            )
        note += f"; compile {r['jax_compile_seconds']:.1f} s"
        versus = ""
        if ref:
            versus = (
                f"{r['this_tree_per_second_child']:,.0f} vs {r['baseline_per_second']:,.0f} | "
                f"{r['vs_baseline']:.2f}x | "
            )
        lines.append(
            f"| {r['what']} | {r['d']} | {r['kappa']:g} | {r['n']:,} | "
            f"{r['jax_per_second']:,.0f} | {versus}{r['scipy_per_second']:,.0f} | "
            f"{r['speedup']:.2f}x | {note} |"
        )
    lines += [
        "",
        "speedup = scipy time / bayesvmf time (above 1: bayesvmf is faster). At d = 50000 "
        "scipy's normaliser (log of the scaled Bessel function ive) underflows, so its "
        "log-density is not finite and its time is that of a wrong answer.",
        "",
    ]
    if ref:
        lines[-1:-1] = [
            "",
            f"vs {ref} = this tree's throughput over that of the `bayesvmf` package at git "
            f"revision {ref}, both timed (JAX only) in child processes run alternately three "
            "times, best of each (the children column; the bayesvmf column is this "
            "process's): above 1 this tree is faster; a few percent either way is noise.",
            "",
        ]
    return "\n".join(lines)


def run_cases(with_scipy=True):
    """Every case of the table, in float64; scipy's timings too unless ``with_scipy=False``."""
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        return [
            bench_log_prob(rng, 1000, 500.0, 20_000, with_scipy=with_scipy),
            bench_log_prob(rng, 50_000, 2e4, 1_000, with_scipy=with_scipy),
            bench_sample(3, 10.0, 1_000_000, repeats=3, with_scipy=with_scipy),
            bench_sample(10, 10.0, 1_000_000, repeats=2, with_scipy=with_scipy),
            bench_sample(100, 10.0, 1_000_000, repeats=1, with_scipy=with_scipy),
        ]


def child_run(package_root):
    """Time the JAX cases in a child process importing ``bayesvmf`` from ``package_root``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        env = dict(os.environ, PYTHONPATH=str(package_root))  # shadows the installed package
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--jax-only-json",
                str(out),
                "--expect-package",
                package_root,
            ],
            cwd=tmp,
            env=env,
            check=True,
        )
        return json.loads(out.read_text())


def versus_baseline(ref, rounds=3):
    """Throughputs of this tree's and git revision ``ref``'s package, in alternating children.

    Both run the same JAX-only cases in child processes of the same kind (``ref``'s package
    extracted by ``git archive``), alternately ``rounds`` times; the best of each is kept.
    """
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", ref, "bayesvmf"], cwd=root, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        runs = {"this": [], "ref": []}
        for _ in range(rounds):
            runs["ref"].append(child_run(tmp))
            runs["this"].append(child_run(root))
    return {
        name: [max(run[i]["jax_per_second"] for run in done) for i in range(len(done[0]))]
        for name, done in runs.items()
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REF", help="also time git revision REF's package")
    parser.add_argument("--jax-only-json", help=argparse.SUPPRESS)  # the child of --baseline
    parser.add_argument("--expect-package", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jax_only_json:
        import bayesvmf

        # the child must time REF's package, not this tree's
        package = Path(bayesvmf.__file__).resolve()
        if not package.is_relative_to(Path(args.expect_package).resolve()):
            raise SystemExit(f"imported {package}, not the package under {args.expect_package}")
        Path(args.jax_only_json).write_text(json.dumps(run_cases(with_scipy=False)))
        return
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": " / ".join(f"{v:.1f}" for v in os.getloadavg()),
        "jax": jax.__version__,
        "scipy": scipy.__version__,
        "numpy": np.__version__,
    }
    rows = run_cases()
    if args.baseline:
        meta["baseline"] = args.baseline
        versus = versus_baseline(args.baseline)
        for row, this, ref in zip(rows, versus["this"], versus["ref"], strict=True):
            row["this_tree_per_second_child"] = this
            row["baseline_per_second"] = ref
            row["vs_baseline"] = this / ref
    (RESULTS / "distribution.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    table = to_markdown(meta, rows)
    (RESULTS / "distribution.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
