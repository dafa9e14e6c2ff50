"""The ``bayesvmf`` command line.

``bayesvmf demo`` runs the package end to end on data it generates and says, in plain
words, what it did and what came out. It is the first command a newcomer runs (README).
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
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def _say(text: str = "") -> None:
    print(text, flush=True)


def _demo_distribution(seed: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bayesvmf import VonMisesFisher, make_vmf_mixture, special

    _say("1. Synthetic directional data (the simulation protocol of Barbaro & Rossi, sec. 4.1)")
    data = make_vmf_mixture(600, 50, 3, kappa=40.0, random_state=seed)
    counts = np.bincount(data.labels, minlength=3)
    _say(
        f"   drew {data.X.shape[0]} unit vectors in d = {data.X.shape[1]} from 3 vMF components"
        f" (sizes {counts.tolist()}), maximally separated means"
        f" (largest pairwise cosine {_largest_cosine(data.mean_directions):.3f}),"
        f" kappa after the separability adjustment = {_numbers(data.concentrations, 1)}"
    )

    _say("\n2. The vMF distribution (a numpyro Distribution)")
    mu = jnp.asarray(data.mean_directions[0])
    dist = VonMisesFisher(mu, jnp.asarray(data.concentrations[0]))
    draws = dist.sample(jax.random.key(seed), (5,))
    _say(f"   5 draws from component 0: cosines to its mean {_numbers(draws @ mu, 3)}")
    log_density = dist.log_prob(jnp.asarray(data.X[:3]))
    _say(f"   log-densities of the first 3 data rows: {_numbers(log_density, 2)}")
    e1 = jnp.zeros(100_000).at[0].set(1.0)
    sharp = VonMisesFisher(e1, 1e6)
    _say(
        "   at d = 100,000 and kappa = 1e6 (where I_nu(kappa) overflows double precision):"
        f" log C_d(kappa) = {float(special.log_vmf_normalizer(100_000, 1e6)):.6f},"
        f" A_d(kappa) = {float(special.mean_resultant_length(100_000, 1e6)):.12f},"
        f" entropy = {float(sharp.entropy()):.3f}"
    )
    return data


def _numbers(values, digits: int) -> str:
    """Format an array of numbers as [a, b, ...] with a fixed number of decimals."""
    return "[" + ", ".join(f"{float(v):.{digits}f}" for v in values) + "]"


def _largest_cosine(mean_directions) -> float:
    import numpy as np

    gram = mean_directions @ mean_directions.T
    np.fill_diagonal(gram, -np.inf)
    return float(gram.max())


def _demo_nuts(data, seed: int, num_samples: int) -> None:
    import arviz as az
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    from bayesvmf import VonMisesFisher

    component = data.labels == 0
    X = jnp.asarray(data.X[component])
    mu = jnp.asarray(data.mean_directions[0])
    true_kappa = float(data.concentrations[0])

    def model(X):
        kappa = numpyro.sample("kappa", dist.LogNormal(jnp.log(10.0), 2.0))
        numpyro.sample("x", VonMisesFisher(mu, kappa), obs=X)

    _say(f"\n3. NUTS on kappa for component 0 ({int(component.sum())} points, mean known)")
    mcmc = MCMC(
        NUTS(model),
        num_warmup=num_samples,
        num_samples=num_samples,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(seed), X)
    posterior = az.from_numpyro(mcmc)
    summary = az.summary(posterior, var_names=["kappa"], round_to=3)
    for line in summary.to_string().splitlines():
        _say("   " + line)
    draws = np.asarray(mcmc.get_samples()["kappa"])
    low, high = np.quantile(draws, [0.025, 0.975])
    inside = "inside" if low <= true_kappa <= high else "OUTSIDE"
    _say(
        f"   true kappa {true_kappa:.2f} is {inside} the 95% posterior interval"
        f" [{low:.2f}, {high:.2f}]"
    )


def demo(seed: int = 0, num_samples: int = 300) -> None:
    """Run every part of bayesvmf on generated data and explain what happened."""
    import jax

    start = time.perf_counter()
    _say("bayesvmf demo: von Mises-Fisher models on JAX and NumPyro (float64, CPU)\n")
    with jax.enable_x64(True):
        data = _demo_distribution(seed)
        _demo_nuts(data, seed, num_samples)
    _say(f"\nDone in {time.perf_counter() - start:.1f} s.")


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
        ``args.beta``, ``args.shared_kappa``, ``args.progress``).
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
    )


def _dirichlet(args):
    from bayesvmf.models import DirichletVMFMixture

    return DirichletVMFMixture(
        args.n_components,
        n_init=args.n_init,
        max_iter=args.max_iter,
        random_state=args.seed,
        progress_bar=args.progress,
    )


def _kmle_vmf(args):
    from bayesvmf.models import KMLEMixture

    return KMLEMixture(
        family="vmf", n_components=args.n_components, max_iter=args.max_iter, random_state=args.seed
    )


def _bayesian(inference, kappa_update="sampling"):
    def build(args):
        from bayesvmf.models import BayesianVMFMixture

        return BayesianVMFMixture(
            args.n_components,
            inference=inference,
            kappa_update=kappa_update,
            n_init=args.n_init,
            max_iter=args.max_iter,
            random_state=args.seed,
            progress_bar=args.progress,
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
    demo_parser = commands.add_parser("demo", help="run the package end to end on generated data")
    demo_parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo_parser.add_argument(
        "--num-samples", type=int, default=300, help="NUTS warm-up and draws per chain"
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
    if args.command == "demo":
        if args.num_samples < 10:
            parser.error(f"--num-samples must be at least 10, got {args.num_samples}")
        demo(seed=args.seed, num_samples=args.num_samples)
        return 0
    try:
        _COMMANDS[args.command](args)
    except CommandError as err:
        print(f"bayesvmf {args.command}: error: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
