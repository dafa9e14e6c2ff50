"""The ``bayesvmf`` command line.

``bayesvmf demo`` fits every model of the package on built-in data (nothing is downloaded)
and says, in plain words, what it fitted and how well, section by section with its time. It
is the first command a newcomer runs (README). Nearly all of its time is XLA compiling each
model once; the compiled programs are kept in ``cache_dir()/jax``
(:func:`bayesvmf.datasets.cache_dir`), so later runs are several times faster.
The other commands work on the built-in data sets or on the user's own data
(:func:`bayesvmf.datasets.load_dataset`: a ``.npz``/``.npy``/``.mtx`` file or a folder of
``.txt`` files):

* ``bayesvmf fit INPUT --model NAME -k K --out DIR``: fit a model, save it
  (:func:`bayesvmf.save`), a JSON summary and its plots;
* ``bayesvmf path INPUT -k K --out DIR``: the beta path of the sparse mixture, its plots
  and the table of criteria;
* ``bayesvmf compare [INPUT]``: the held-out comparison table (:func:`bayesvmf.compare`);
* ``bayesvmf info MODEL.npz``: what a saved model contains.

The models are the entries of :data:`MODELS`, a dict from the name used on the command
line to a :class:`ModelSpec`; a new model is one more entry.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def _say(text: str = "") -> None:
    print(text, flush=True)


@dataclasses.dataclass
class _DemoContext:
    """What the demo sections share: the options, the digits split, earlier results."""

    seed: int
    num_samples: int
    results: dict = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def digits(self):
        """scikit-learn's digits as unit vectors, split 1200 / 597 rows at random."""
        import numpy as np

        from bayesvmf.datasets import load_digits_directional

        digits = load_digits_directional()
        order = np.random.default_rng(self.seed).permutation(digits.X.shape[0])
        train, test = order[:1200], order[1200:]
        return digits, digits.X[train], digits.X[test], digits.y[test]


def _demo_nuts(ctx: _DemoContext) -> dict:
    """Draw from the vMF distribution, evaluate it at extreme arguments, run NUTS on kappa."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.diagnostics import summary
    from numpyro.infer import MCMC, NUTS

    from bayesvmf import VonMisesFisher, special

    d, true_kappa = 50, 60.0
    mu = jnp.zeros(d).at[0].set(1.0)
    X = VonMisesFisher(mu, true_kappa).sample(jax.random.key(ctx.seed), (200,))
    cosines = np.asarray(X @ mu)
    _say(
        f"   drew 200 unit vectors from vMF(mu = e1, kappa = {true_kappa:.0f}) in d = {d}: "
        f"cosines to mu between {cosines.min():.3f} and {cosines.max():.3f}"
    )
    sharp = VonMisesFisher(jnp.zeros(100_000).at[0].set(1.0), 1e6)
    _say(
        "   d = 100,000, kappa = 1e6 (I_nu(kappa) overflows double precision there):"
        f" log C_d = {float(special.log_vmf_normalizer(100_000, 1e6)):.3f},"
        f" A_d = {float(special.mean_resultant_length(100_000, 1e6)):.6f},"
        f" entropy = {float(sharp.entropy()):.1f}"
    )

    def model(X):
        kappa = numpyro.sample("kappa", dist.LogNormal(jnp.log(10.0), 2.0))
        numpyro.sample("x", VonMisesFisher(mu, kappa), obs=X)

    mcmc = MCMC(
        NUTS(model),
        num_warmup=ctx.num_samples,
        num_samples=ctx.num_samples,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(ctx.seed), X)
    stats = summary(mcmc.get_samples(group_by_chain=True), prob=0.95)["kappa"]
    low, high = float(stats["2.5%"]), float(stats["97.5%"])
    inside = "inside" if low <= true_kappa <= high else "OUTSIDE"
    _say(
        f"   NUTS on kappa (2 chains x {ctx.num_samples} draws): posterior mean "
        f"{float(stats['mean']):.2f}, 95% interval [{low:.2f}, {high:.2f}] ({inside}: true "
        f"{true_kappa:.0f}), R-hat {float(stats['r_hat']):.3f}, ESS {float(stats['n_eff']):.0f}"
    )
    return {"kappa_inside": low <= true_kappa <= high, "rhat": float(stats["r_hat"])}


def _demo_sparse(ctx: _DemoContext) -> dict:
    """Follow the beta path on the digits; score its dense (classical) and BIC points."""
    from bayesvmf import metrics
    from bayesvmf.models import SparseVMFMixture

    _, X_train, X_test, y_test = ctx.digits
    model = SparseVMFMixture(10, n_init=4, max_iter=200, random_state=ctx.seed)
    path = model.path(X_train, max_steps=5)
    dense, best = path.model_at(0), path.best("bic")
    result = {
        "classical_ari": metrics.adjusted_rand(y_test, dense.predict(X_test)),
        "classical_loglik": metrics.held_out_log_likelihood(dense, X_test),
        "sparse_ari": metrics.adjusted_rand(y_test, best.predict(X_test)),
    }
    _say(
        f"   beta path on the digits (1200 training images, K = 10): {len(path)} points, "
        f"sparsity of the means {path.sparsity[0]:.3f} -> {path.sparsity[-1]:.3f}"
    )
    _say(
        f"   beta = 0 (the classical vMF mixture): ARI {result['classical_ari']:.3f} against the "
        f"digit labels of the 597 test images, held-out log-likelihood "
        f"{result['classical_loglik']:.3f} per image"
    )
    _say(
        f"   BIC picks beta = {best.beta:.3g} (sparsity {best.sparsity_:.3f}): test ARI "
        f"{result['sparse_ari']:.3f}"
    )
    return result


def _demo_bayesian(ctx: _DemoContext) -> dict:
    """Fit B-vMFmix by VI on the digits and by collapsed Gibbs on 90 of them."""
    import numpy as np

    from bayesvmf import metrics
    from bayesvmf.models import BayesianVMFMixture

    digits, X_train, X_test, y_test = ctx.digits
    vi = BayesianVMFMixture(10, kappa_update="bounding", max_iter=100, random_state=ctx.seed)
    vi.fit(X_train)
    loglik = metrics.held_out_log_likelihood(vi, X_test)
    ari = metrics.adjusted_rand(y_test, vi.predict(X_test))
    classical_loglik = ctx.results["sparse"]["classical_loglik"]
    better = "higher" if loglik > classical_loglik else "lower"
    _say(
        f"   VI (kappa bounded) on the same 1200 images: {vi.n_iter_} iterations, test ARI "
        f"{ari:.3f}, held-out log-likelihood {loglik:.3f} per image ({better} than the "
        f"classical mixture by {abs(loglik - classical_loglik):.3f})"
    )
    # a tiny problem for the collapsed Gibbs sampler: 30 images each of the digits 0, 1, 4
    rows = np.concatenate([np.flatnonzero(digits.y == c)[:30] for c in (0, 1, 4)])
    gibbs = BayesianVMFMixture(
        3, inference="gibbs", num_chains=2, num_warmup=100, num_samples=100, random_state=ctx.seed
    ).fit(digits.X[rows])
    gibbs_ari = metrics.adjusted_rand(digits.y[rows], gibbs.predict(digits.X[rows]))
    rhat = float(np.max(gibbs.rhat_kappa_))
    _say(
        f"   collapsed Gibbs on 90 images of 0, 1, 4 (2 chains x 100 sweeps): largest split "
        f"R-hat of kappa {rhat:.3f}, ARI {gibbs_ari:.3f}"
    )
    return {"vi_ari": ari, "vi_loglik": loglik, "gibbs_rhat": rhat, "gibbs_ari": gibbs_ari}


def _demo_hierarchical(ctx: _DemoContext) -> dict:
    """Fit H-vMFmix with two top-level nodes of five leaves on the digits."""
    import numpy as np

    from bayesvmf import metrics
    from bayesvmf.models import HierarchicalVMFMixture, balanced_tree

    _, X_train, X_test, y_test = ctx.digits
    tree = HierarchicalVMFMixture(
        balanced_tree((2, 5)),
        kappa_update="bounding",
        max_iter=100,
        tol=1e-4,
        random_state=ctx.seed,
    ).fit(X_train)
    ari = metrics.adjusted_rand(y_test, tree.predict(X_test))
    loglik = metrics.held_out_log_likelihood(tree, X_test)
    _say(
        f"   a tree root > 2 nodes > 5 leaves each on the 1200 images: test ARI {ari:.3f}, "
        f"held-out log-likelihood {loglik:.3f} per image"
    )
    branch = tree.predict_path(X_test)[:, 1]
    groups = []
    for node in np.unique(branch):
        counts = np.bincount(y_test[branch == node], minlength=10)
        groups.append("".join(str(c) for c in np.flatnonzero(counts >= 0.5 * counts.max())))
    _say(f"   the most frequent digits under each top-level node: {', '.join(groups)}")
    return {"ari": ari, "loglik": loglik}


def _demo_temporal(ctx: _DemoContext) -> dict:
    """Fit T-vMFmix to drifting clusters and score the forecast of the next step."""
    from bayesvmf.datasets import make_temporal_vmf_mixture
    from bayesvmf.models import TemporalVMFMixture

    n_times = 6
    X, times, _, _ = make_temporal_vmf_mixture(
        40,
        n_features=8,
        n_components=3,
        n_times=n_times,
        kappa=50.0,
        drift=100.0,
        random_state=ctx.seed,
    )
    past, last = times < n_times - 1, times == n_times - 1
    scores = {}
    for C0 in (100.0, 1e6):  # drifting means, and means held (nearly) fixed over time
        model = TemporalVMFMixture(
            3, C0=C0, kappa_update="bounding", max_iter=300, tol=1e-4, random_state=ctx.seed
        ).fit(X[past], times[past])
        scores[C0] = model.score(X[last], times[last])
    _say(
        f"   {int(past.sum())} rows over {n_times - 1} time steps from 3 drifting vMF clusters "
        f"in d = 8; score of the next step's {int(last.sum())} rows (forecast):"
    )
    _say(
        f"   drifting means (C0 = 100) {scores[100.0]:.3f} per row, fixed means (C0 = 1e6) "
        f"{scores[1e6]:.3f} per row"
    )
    return {"drifting": scores[100.0], "fixed": scores[1e6]}


def _demo_dirichlet(ctx: _DemoContext) -> dict:
    """Fit the Dirichlet-vMF mixture to sets of digit images."""
    import numpy as np

    from bayesvmf import metrics
    from bayesvmf.models import DirichletVMFMixture

    digits = ctx.digits[0]
    rng = np.random.default_rng(ctx.seed)
    by_digit = [np.flatnonzero(digits.y == c) for c in range(10)]
    docs, main = [], []
    for _ in range(120):  # a set = 9 images of its main digit and 3 of another digit
        a, b = rng.choice(10, 2, replace=False)
        rows = np.concatenate([rng.choice(by_digit[a], 9), rng.choice(by_digit[b], 3)])
        docs.append(digits.X[rows])
        main.append(a)
    main = np.asarray(main)
    model = DirichletVMFMixture(10, n_init=2, max_iter=100, random_state=ctx.seed).fit(docs[:80])
    dominant = model.transform(docs[80:]).argmax(axis=1)
    nmi = metrics.normalized_mutual_info(main[80:], dominant)
    _say(
        f"   120 sets of 12 digit images (9 of a main digit, 3 of another); 10 topics fitted "
        f"on 80 sets in {model.n_iter_} iterations"
    )
    _say(f"   dominant topic of the 40 held-out sets against their main digit: NMI {nmi:.3f}")
    return {"nmi": nmi}


def _demo_kmle(ctx: _DemoContext) -> dict:
    """Cluster random Wishart matrices by k-MLE, K chosen by DP-k-MLE++."""
    import numpy as np
    import scipy.stats

    from bayesvmf import metrics
    from bayesvmf.models import KMLEMixture

    scales = [
        np.eye(3),
        np.diag([6.0, 1.0, 0.2]),
        np.array([[3.0, 2.5, 0.0], [2.5, 3.0, 0.0], [0.0, 0.0, 3.0]]),
    ]
    rng = np.random.default_rng(ctx.seed)
    X = np.concatenate([scipy.stats.wishart(15, S).rvs(100, random_state=rng) for S in scales])
    y = np.repeat(np.arange(3), 100)
    model = KMLEMixture(random_state=ctx.seed).fit(X)
    ari = metrics.adjusted_rand(y, model.labels_)
    _say(
        "   300 random 3 x 3 SPD matrices from three Wishart distributions (dof 15); "
        f"DP-k-MLE++ chose K = {model.n_components_}, k-MLE made {model.n_transfers_} "
        f"Hartigan transfers: ARI {ari:.3f}"
    )
    return {"k": model.n_components_, "ari": ari}


#: The sections of ``bayesvmf demo``, in order: name -> (title, function of the context).
DEMO_SECTIONS: dict[str, tuple[str, Callable[[_DemoContext], dict]]] = {
    "nuts": ("the vMF distribution and NUTS on kappa (NumPyro)", _demo_nuts),
    "sparse": ("SparseVMFMixture: the l1 beta path (Barbaro & Rossi)", _demo_sparse),
    "bayesian": (
        "BayesianVMFMixture: B-vMFmix by VI and by collapsed Gibbs (Gopal & Yang)",
        _demo_bayesian,
    ),
    "hierarchical": (
        "HierarchicalVMFMixture: H-vMFmix on a tree (Gopal & Yang)",
        _demo_hierarchical,
    ),
    "temporal": (
        "TemporalVMFMixture: T-vMFmix, means drifting over time (Gopal & Yang)",
        _demo_temporal,
    ),
    "dirichlet": ("DirichletVMFMixture: topics of sets of vectors (Li)", _demo_dirichlet),
    "kmle": ("KMLEMixture: a Wishart mixture by k-MLE (Saint-Jean & Nielsen)", _demo_kmle),
}


@contextlib.contextmanager
def _compilation_cache(enabled: bool):
    """Keep XLA's compiled programs on disk while the demo runs; yield the folder.

    Later demos then skip the compilation. The folder is None when ``enabled`` is false or
    the cache folder is not writable.

    The two JAX settings are restored on exit (and the cache reset, so that the next
    compilation reads them again): calling :func:`demo` from a session leaves that
    session's configuration as it was.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    from bayesvmf.datasets import cache_dir

    folder = cache_dir() / "jax" if enabled else None
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only home: the demo compiles every time
            folder = None
    if folder is None:
        yield None
        return
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    before = {name: getattr(jax.config, name) for name in names}
    jax.config.update(names[0], str(folder))
    jax.config.update(names[1], 0.0)
    compilation_cache.reset_cache()
    try:
        yield folder
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


def demo(seed: int = 0, num_samples: int = 200, cache: bool = True) -> dict:
    """Fit every model of bayesvmf on built-in data and say what came out.

    Every section prints what it fitted, one or two numbers computed on the spot and its
    wall time; the returned dict holds those numbers by section name. With ``cache``, the
    compiled programs are kept on disk (:func:`bayesvmf.datasets.cache_dir`) for the next
    run; JAX's configuration is restored afterwards.
    """
    with _compilation_cache(cache) as folder:
        return _run_demo(seed, num_samples, folder)


def _run_demo(seed: int, num_samples: int, folder: Path | None) -> dict:
    import warnings

    start = time.perf_counter()
    _say("bayesvmf demo: every model on built-in data (float64, CPU)")
    _say(
        "most of the time below is XLA compiling each model once; "
        + (
            f"compiled programs are kept in {folder}, so the next run is faster"
            if folder is not None
            else "the compilation cache is off"
        )
    )
    import jax

    ctx = _DemoContext(seed, num_samples)
    for number, (name, (title, section)) in enumerate(DEMO_SECTIONS.items(), start=1):
        _say(f"\n[{number}/{len(DEMO_SECTIONS)}] {title}")
        began = time.perf_counter()
        with jax.enable_x64(True), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # shown as plain lines of the section
            ctx.results[name] = section(ctx)
        for warning in caught:
            _say(f"   warning: {warning.message}")
        seconds = time.perf_counter() - began
        ctx.results[name]["seconds"] = seconds
        _say(f"   ({seconds:.1f} s)")
    _say(f"\nDone: {len(DEMO_SECTIONS)} sections in {time.perf_counter() - start:.1f} s.")
    return ctx.results


# ---------------------------------------------------------------------------------------
# The model registry
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How the command line builds one model.

    Attributes
    ----------
    build : callable
        ``build(args)`` returns an unfitted estimator from the parsed options
        (``args.n_components``, ``args.seed``, ``args.max_iter``, ``args.n_init``,
        ``args.beta``, ``args.shared_kappa``, ``args.progress``, ``args.devices``).
    help : str
        One line for ``--help``.
    documents : bool, default False
        The model fits sets of vectors (a list of arrays, one per document) rather than
        rows: ``fit`` groups the rows by ``--groups`` (one row per document without it),
        and ``compare`` leaves it out (it has no per-row ``score_samples``).
    """

    build: Callable[[argparse.Namespace], Any]
    help: str
    documents: bool = False


def _sparse(args):
    from bayesvmf.models import SparseVMFMixture

    return SparseVMFMixture(
        args.n_components,
        beta=args.beta,
        shared_kappa=args.shared_kappa,
        n_init=args.n_init,
        max_iter=args.max_iter,
        random_state=args.seed,
        verbose=args.progress,
        devices=args.devices,
    )


def _dirichlet(args):
    from bayesvmf.models import DirichletVMFMixture

    return DirichletVMFMixture(
        args.n_components,
        n_init=args.n_init,
        max_iter=args.max_iter,
        random_state=args.seed,
        progress_bar=args.progress,
        devices=args.devices,
    )


def _one_device(name: str, args) -> None:
    if args.devices is not None:
        raise CommandError(
            f"--devices {args.devices}: the model {name} runs on one device (data-parallel "
            "fits: sparse, bayesian, bayesian-bounding, dirichlet)"
        )


def _kmle_vmf(args):
    from bayesvmf.models import KMLEMixture

    _one_device("kmle-vmf", args)
    return KMLEMixture(
        family="vmf", n_components=args.n_components, max_iter=args.max_iter, random_state=args.seed
    )


def _bayesian(inference, kappa_update="sampling"):
    def build(args):
        from bayesvmf.models import BayesianVMFMixture

        if inference == "gibbs":
            _one_device("bayesian-gibbs", args)
        return BayesianVMFMixture(
            args.n_components,
            inference=inference,
            kappa_update=kappa_update,
            n_init=args.n_init,
            max_iter=args.max_iter,
            random_state=args.seed,
            progress_bar=args.progress,
            devices=args.devices if inference == "vi" else None,
        )

    return build


#: The models of ``fit`` and ``compare``, by command-line name.
MODELS: dict[str, ModelSpec] = {
    "sparse": ModelSpec(
        _sparse,
        "l1-penalised vMF mixture (Barbaro & Rossi); --beta 0 is the classical vMF mixture",
    ),
    "dirichlet": ModelSpec(
        _dirichlet, "Dirichlet-vMF mixture over sets of vectors (VMFMix, Li)", documents=True
    ),
    "kmle-vmf": ModelSpec(
        _kmle_vmf, "vMF mixture by k-MLE with Hartigan moves (Saint-Jean & Nielsen)"
    ),
    "bayesian": ModelSpec(
        _bayesian("vi"), "B-vMFmix by variational inference, kappa sampled (Gopal & Yang)"
    ),
    "bayesian-bounding": ModelSpec(
        _bayesian("vi", "bounding"), "B-vMFmix by variational inference, kappa bounded"
    ),
    "bayesian-gibbs": ModelSpec(
        _bayesian("gibbs"), "B-vMFmix by collapsed Gibbs sampling (2 chains)"
    ),
}


class CommandError(Exception):
    """A failure the user can fix (bad file, bad option value): printed without traceback."""


# ---------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------


def _load(args):
    from bayesvmf.datasets import load_dataset

    try:
        data = load_dataset(args.input, labels=args.labels)
    except (FileNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from err
    _say(f"data: {data.description}")
    return data


def _check_k(args, data) -> None:
    if args.n_components > data.X.shape[0]:
        raise CommandError(
            f"-k/--n-components {args.n_components} is larger than the number of rows "
            f"({data.X.shape[0]})"
        )


def _jsonable(value):
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _write_json(path: Path, payload) -> None:
    path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n")
    _say(f"wrote {path}")


def _save_figure(fig, path: Path) -> None:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    _say(f"wrote {path}")


def _top_terms(model, feature_names, n: int = 10):
    import numpy as np

    if feature_names is None or not hasattr(model, "mean_directions_"):
        return None
    names = np.asarray(feature_names)
    return [
        [str(names[j]) for j in np.argsort(-mu, kind="stable")[:n] if mu[j] > 0]
        for mu in np.asarray(model.mean_directions_)
    ]


#: Largest number of matrix entries drawn in a data pixel map (rows are subsampled).
_MAX_PIXELS = 2_000_000


def _plot_model(model, X, out: Path, rows_model: bool) -> None:
    import numpy as np

    from bayesvmf import plotting

    if not hasattr(model, "mean_directions_"):
        return
    _save_figure(plotting.pixel_map(model, title="mean directions"), out / "prototypes.png")
    if not rows_model:
        return
    n, d = X.shape
    keep = max(1, min(n, _MAX_PIXELS // d))
    rows = np.sort(np.random.default_rng(0).choice(n, keep, replace=False)) if keep < n else None
    Xs = X if rows is None else X[rows]
    title = "data" if rows is None else f"data ({keep} of {n} rows drawn at random)"
    _save_figure(plotting.data_pixel_map(Xs, model, title=title), out / "data.png")


def _out_dir(args) -> Path:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


# ---------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------


def _documents(X, groups_path, n_rows):
    import numpy as np
    import scipy.sparse

    dense = X.toarray() if scipy.sparse.issparse(X) else np.asarray(X, np.float64)
    if groups_path is None:
        return [dense[i : i + 1] for i in range(n_rows)]
    try:
        groups = np.load(groups_path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise CommandError(f"{groups_path}: cannot read document groups ({err})") from err
    if groups.shape != (n_rows,) or groups.dtype.kind not in "iu":
        raise CommandError(
            f"{groups_path}: expected {n_rows} integer document indices (one per row), got "
            f"shape {groups.shape} and dtype {groups.dtype}"
        )
    return [dense[groups == g] for g in np.unique(groups)]


def fit_command(args) -> None:
    """``bayesvmf fit``: fit one model, save it, its JSON summary and its plots."""
    import numpy as np

    from bayesvmf import metrics, save

    data = _load(args)
    _check_k(args, data)
    out = _out_dir(args)
    spec = MODELS[args.model]
    model = spec.build(args)
    _say(f"fitting {args.model}: {type(model).__name__}, K = {args.n_components}")
    inputs = _documents(data.X, args.groups, data.X.shape[0]) if spec.documents else data.X
    start = time.perf_counter()
    try:
        model.fit(inputs)
    except ValueError as err:
        raise CommandError(f"{args.model}: {err}") from err
    seconds = time.perf_counter() - start
    summary = {
        "model": args.model,
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "input": str(args.input),
        "data": data.description,
        "n_samples": data.X.shape[0],
        "n_features": data.X.shape[1],
        "fit_seconds": seconds,
    }
    if hasattr(model, "get_params"):
        summary["params"] = model.get_params()
    for name in ("n_iter_", "converged_", "lower_bound_", "log_likelihood_", "sparsity_"):
        if hasattr(model, name):
            summary[name.rstrip("_")] = getattr(model, name)
    for name in ("weights_", "concentrations_"):
        if hasattr(model, name):
            summary[name.rstrip("_")] = np.asarray(getattr(model, name))
    if not spec.documents:
        labels = np.asarray(model.predict(data.X))
        summary["cluster_sizes"] = np.bincount(labels, minlength=args.n_components)
        summary["log_likelihood_per_row"] = metrics.held_out_log_likelihood(model, data.X)
        if hasattr(model, "bic"):
            summary["bic"] = model.bic(data.X)
        if data.y is not None:
            summary["scores"] = metrics.clustering_scores(data.y, labels)
    terms = _top_terms(model, data.get("feature_names"))
    if terms is not None:
        summary["top_features"] = terms
    _say(f"fitted in {seconds:.1f} s" + _describe_fit(summary))
    try:
        save(model, out / "model.npz")
        _say(f"wrote {out / 'model.npz'}")
    except (TypeError, ValueError) as err:
        _say(f"note: the model was not saved ({err})")
    _write_json(out / "summary.json", summary)
    if not args.no_plots:
        _plot_model(model, data.X, out, rows_model=not spec.documents)


def _describe_fit(summary) -> str:
    parts = []
    if "converged" in summary:
        parts.append("converged" if summary["converged"] else "NOT converged")
    if "log_likelihood_per_row" in summary:
        parts.append(f"log-likelihood per row {summary['log_likelihood_per_row']:.3f}")
    if "scores" in summary:
        parts.append(
            f"NMI {summary['scores']['nmi']:.3f}, ARI {summary['scores']['ari']:.3f} "
            "against the labels"
        )
    return (": " + "; ".join(parts)) if parts else ""


def path_command(args) -> None:
    """``bayesvmf path``: the beta path of the sparse mixture, its plots and criteria."""
    from bayesvmf import plotting, save

    data = _load(args)
    _check_k(args, data)
    out = _out_dir(args)
    args.beta = 0.0
    model = MODELS["sparse"].build(args)
    _say(f"following the beta path of the sparse vMF mixture, K = {args.n_components}")
    start = time.perf_counter()
    try:
        path = model.path(data.X, max_steps=args.max_steps)
    except ValueError as err:
        raise CommandError(f"path: {err}") from err
    _say(f"{len(path)} points in {time.perf_counter() - start:.1f} s (stopped: {path.stop_reason})")
    names = ("aic", "bic", "ric", "ricc", "ebic")
    table = {name: path.criterion(name) for name in names}
    header = "| beta | sparsity | log-likelihood | parameters | " + " | ".join(
        n.upper() for n in names
    )
    lines = [header + " |", "|" + "---|" * (4 + len(names))]
    for i in range(len(path)):
        cells = [
            f"{path.betas[i]:.4g}",
            f"{path.sparsity[i]:.3f}",
            f"{path.log_likelihood[i]:.2f}",
            str(int(path.n_parameters[i])),
        ] + [f"{table[n][i]:.2f}" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    best = path.best_index(args.criterion)
    lines += ["", f"Best by {args.criterion.upper()}: point {best}, beta = {path.betas[best]:.4g}."]
    markdown = "\n".join(lines)
    _say(markdown)
    (out / "criteria.md").write_text(markdown + "\n")
    _say(f"wrote {out / 'criteria.md'}")
    _write_json(
        out / "path.json",
        {
            "betas": path.betas,
            "sparsity": path.sparsity,
            "log_likelihood": path.log_likelihood,
            "n_parameters": path.n_parameters,
            "converged": path.converged,
            "criteria": table,
            "stop_reason": path.stop_reason,
            "best": {"criterion": args.criterion, "index": best, "beta": path.betas[best]},
        },
    )
    chosen = path.best(args.criterion)
    save(chosen, out / "model.npz")
    _say(f"wrote {out / 'model.npz'} (the model at the {args.criterion.upper()} beta)")
    if not args.no_plots:
        _save_figure(
            plotting.plot_path(path, criteria=tuple(dict.fromkeys(("bic", "aic", args.criterion)))),
            out / "path.png",
        )
        _plot_model(chosen, data.X, out, rows_model=True)


def compare_command(args) -> None:
    """``bayesvmf compare``: held-out comparison of models on one split."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    from bayesvmf.compare import compare

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise CommandError(f"--models: unknown model(s) {unknown}; choose among {sorted(MODELS)}")
    documents = [n for n in names if MODELS[n].documents]
    if documents:
        raise CommandError(
            f"--models: {documents} model sets of vectors and have no per-row held-out "
            "likelihood; compare scores rows"
        )
    data = _load(args)
    _check_k(args, data)
    y = data.y
    stratify = y if y is not None and np.bincount(y).min() >= 2 else None
    split = train_test_split(
        data.X,
        *([] if y is None else [y]),
        test_size=args.test_size,
        random_state=args.split_seed,
        stratify=stratify,
    )
    X_train, X_test = split[0], split[1]
    y_test = None if y is None else split[3]
    progress, args.progress = args.progress, False  # one bar over the fits, not one per fit
    models = {name: MODELS[name].build(args) for name in names}
    _say(
        f"comparing {', '.join(names)} on {X_train.shape[0]} training and {X_test.shape[0]} "
        f"test rows, seeds 0..{args.seeds - 1}"
    )
    try:
        table = compare(models, X_train, X_test, y_test, seeds=range(args.seeds), progress=progress)
    except ValueError as err:
        raise CommandError(f"compare: {err}") from err
    _say(table.to_markdown())
    if args.out:
        out = _out_dir(args)
        (out / "comparison.md").write_text(table.to_markdown() + "\n")
        _say(f"wrote {out / 'comparison.md'}")
        _write_json(out / "comparison.json", table.to_dict())
        if not args.no_plots:
            _save_figure(table.plot(), out / "comparison.png")


def info_command(args) -> None:
    """``bayesvmf info``: describe a saved model."""
    import numpy as np

    from bayesvmf import load

    try:
        model = load(args.model_file)
    except ValueError as err:
        raise CommandError(str(err)) from err
    _say(f"{args.model_file}: {type(model).__module__}.{type(model).__qualname__}")
    _say("parameters:")
    for key, value in model.get_params().items():
        _say(f"  {key} = {value!r}")
    arrays, scalars = model._get_state()
    _say("fitted attributes:" if arrays or scalars else "not fitted")
    for key, value in scalars.items():
        _say(f"  {key} = {value!r}")
    for key, value in arrays.items():
        value = np.asarray(value)
        preview = ""
        if value.ndim == 1 and value.size <= 10 and value.dtype.kind in "biuf":
            preview = " " + np.array2string(value, precision=4, separator=", ")
        _say(f"  {key}: {value.dtype} array of shape {value.shape}{preview}")


# ---------------------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = _nonnegative_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1), got {text}")
    return value


_INPUT_HELP = (
    "the data: 'docstrings' (the built-in corpus of package docstrings), 'digits' "
    "(scikit-learn's handwritten digits), a .npz (scipy.sparse.save_npz or a single numpy "
    "array), .npy or .mtx (MatrixMarket) file with one observation per row, NAME.X.npz with "
    "NAME.y.npy beside it (labels read too), or a folder of .txt files (one sub-folder per "
    "class for labels; tf-idf)"
)


def _add_data_options(parser, *, input_default=None) -> None:
    if input_default is None:
        parser.add_argument("input", metavar="INPUT", help=_INPUT_HELP)
    else:
        parser.add_argument(
            "input",
            metavar="INPUT",
            nargs="?",
            default=input_default,
            help=_INPUT_HELP + f" (default {input_default!r})",
        )
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="a .npy file of integer labels (or .txt, one per line), one per row: adds NMI/ARI",
    )


def _add_model_options(parser, *, k_default=None) -> None:
    parser.add_argument(
        "-k",
        "--n-components",
        type=_positive_int,
        required=k_default is None,
        default=k_default,
        metavar="K",
        help="number of mixture components (clusters, topics)",
    )
    parser.add_argument(
        "--n-init",
        type=_positive_int,
        default=4,
        metavar="N",
        help="restarts, the best is kept (default 4)",
    )
    parser.add_argument(
        "--max-iter",
        type=_positive_int,
        default=300,
        metavar="N",
        help="maximal iterations per restart (default 300)",
    )
    parser.add_argument(
        "--shared-kappa",
        action="store_true",
        help="sparse: one concentration for all components (advised when n is not much larger "
        "than d)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bars"
    )
    parser.add_argument(
        "--devices",
        type=_positive_int,
        default=None,
        metavar="N",
        help="data-parallel fit over the first N of jax.devices() (sparse, bayesian, "
        "bayesian-bounding, dirichlet); on CPU set XLA_FLAGS="
        "--xla_force_host_platform_device_count=N before running",
    )


def _add_output_options(parser, *, required: bool) -> None:
    parser.add_argument(
        "--out",
        metavar="DIR",
        required=required,
        help="folder for the results (created if needed)",
    )
    parser.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")


def build_parser() -> argparse.ArgumentParser:
    """Return the ``bayesvmf`` argument parser (one sub-parser per command)."""
    parser = argparse.ArgumentParser(
        prog="bayesvmf",
        description="Bayesian and penalised von Mises-Fisher mixture models.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="fit every model on built-in data and print what came out",
        description="Fit every model of bayesvmf on built-in data (scikit-learn's digits, "
        "generated vMF, temporal and Wishart data; nothing is downloaded): the vMF "
        "distribution with NUTS, the sparse beta path, B-vMFmix by VI and Gibbs, H-vMFmix, "
        "T-vMFmix, the Dirichlet-vMF mixture and k-MLE. Each section prints what it fitted, "
        "a score computed on the spot (ARI/NMI against the labels, held-out log-likelihood, "
        "R-hat) and its time. Compiled programs are cached on disk "
        "($BAYESVMF_CACHE/jax, default ~/.cache/bayesvmf/jax) so that later runs are faster.",
    )
    demo_parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo_parser.add_argument(
        "--num-samples",
        type=int,
        default=200,
        metavar="N",
        help="NUTS warm-up iterations and draws per chain (default 200, at least 10)",
    )
    demo_parser.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="do not keep the compiled programs on disk (every run compiles again)",
    )

    models_help = "; ".join(f"{name}: {spec.help}" for name, spec in MODELS.items())
    fit = commands.add_parser(
        "fit",
        help="fit a model to a file or folder; save it, a JSON summary and plots",
        description="Fit a model and write model.npz (bayesvmf.load reads it), summary.json "
        "(sizes, weights, concentrations, convergence, clusters, top features, scores "
        "against labels) and prototypes.png / data.png (pixel maps) into --out.",
    )
    _add_data_options(fit)
    fit.add_argument("--model", choices=sorted(MODELS), default="sparse", help=models_help)
    _add_model_options(fit)
    fit.add_argument(
        "--beta",
        type=_nonnegative_float,
        default=0.0,
        help="sparse: the l1 penalty beta >= 0 (default 0, the classical vMF mixture)",
    )
    fit.add_argument(
        "--groups",
        metavar="FILE",
        help="dirichlet: a .npy file with the document index of each row (rows of a document "
        "form its set of vectors); without it each row is its own document",
    )
    _add_output_options(fit, required=True)

    path = commands.add_parser(
        "path",
        help="the beta path of the sparse vMF mixture, its plots and criteria",
        description="Follow the beta path (Algorithm 3 of Barbaro & Rossi) from the dense "
        "mixture and write criteria.md / path.json (beta, sparsity, log-likelihood, AIC, BIC, "
        "RIC, RICc, EBIC per point), path.png, the model at the best beta (model.npz) and its "
        "pixel maps into --out.",
    )
    _add_data_options(path)
    _add_model_options(path)
    path.add_argument(
        "--max-steps",
        type=_positive_int,
        default=30,
        metavar="P",
        help="maximal number of points on the path, the dense one included (default 30)",
    )
    path.add_argument(
        "--criterion",
        choices=("aic", "bic", "ric", "ricc", "ebic"),
        default="bic",
        help="criterion that picks the saved model (default bic)",
    )
    _add_output_options(path, required=True)

    compare_parser = commands.add_parser(
        "compare",
        help="held-out log-likelihood table of several models on one split",
        description="Split the data (stratified by the labels when there are some), fit "
        "each model on the training part from the same initial assignments for every seed, "
        "and print the held-out log-likelihood per document with standard errors over seeds, "
        "the difference from the first model, NMI/ARI and fit times.",
    )
    _add_data_options(compare_parser, input_default="docstrings")
    row_models = [n for n, s in MODELS.items() if not s.documents]
    compare_parser.add_argument(
        "--models",
        default=",".join(row_models),
        help=f"comma-separated model names, the first is the baseline (default "
        f"{','.join(row_models)}); {models_help}",
    )
    _add_model_options(compare_parser, k_default=5)
    compare_parser.set_defaults(beta=0.0)
    compare_parser.add_argument(
        "--seeds",
        type=_positive_int,
        default=3,
        metavar="S",
        help="fits per model with seeds 0..S-1; two or more give standard errors (default 3)",
    )
    compare_parser.add_argument(
        "--test-size",
        type=_fraction,
        default=0.3,
        metavar="F",
        help="fraction of the rows held out (default 0.3)",
    )
    compare_parser.add_argument(
        "--split-seed", type=int, default=0, help="seed of the train/test split (default 0)"
    )
    _add_output_options(compare_parser, required=False)

    info = commands.add_parser("info", help="show what a saved model contains")
    info.add_argument("model_file", metavar="MODEL", help="a file written by fit/path (model.npz)")
    return parser


_COMMANDS = {
    "fit": fit_command,
    "path": path_command,
    "compare": compare_command,
    "info": info_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bayesvmf`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo" and args.num_samples < 10:
        parser.error(f"--num-samples must be at least 10, got {args.num_samples}")
    try:
        if args.command == "demo":
            demo(seed=args.seed, num_samples=args.num_samples, cache=args.cache)
        else:
            _COMMANDS[args.command](args)
    except CommandError as err:
        print(f"bayesvmf {args.command}: error: {err}", file=sys.stderr, flush=True)
        return 1
    except BrokenPipeError:
        # the reader went away (``bayesvmf info model.npz | head``): stop quietly, and point
        # stdout at devnull so that the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1  # the output was cut short: the exit status says so, as Python's own does
    return 0


if __name__ == "__main__":
    sys.exit(main())
