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
line to a :class:`ModelSpec`; a new model is one more entry. This module holds the
commands, the parser and :func:`main`; the demo is in :mod:`bayesvmf._cli_demo` and the
model registry with the helpers the commands share in :mod:`bayesvmf._cli_models`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

# The demo and the model registry live in private modules beside this one (each file
# stays readable at one sitting); their public names are re-exported here, so
# ``bayesvmf.cli`` stays the one place to import them from.
from bayesvmf._cli_demo import DEMO_SECTIONS, demo
from bayesvmf._cli_models import (
    MODELS,
    CommandError,
    ModelSpec,
    _check_k,
    _load,
    _out_dir,
    _plot_model,
    _save_figure,
    _say,
    _top_terms,
    _write_json,
)

__all__ = ["DEMO_SECTIONS", "MODELS", "CommandError", "ModelSpec", "build_parser", "demo", "main"]


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
        _say(f"  {key} = {_short(value)}")
    arrays, scalars = model._get_state()
    _say("fitted attributes:" if arrays or scalars else "not fitted")
    # the stream of partial_fit, in one line (its record and arrays are not for reading)
    stream = [key for key in arrays if key.startswith("stream.")]
    if scalars.pop("stream", None) is not None:
        _say(f"  the stream of partial_fit ({len(stream)} arrays): partial_fit goes on from it")
    for key in stream:
        arrays.pop(key)
    for key, value in scalars.items():
        _say(f"  {key} = {_short(value)}")
    for key, value in arrays.items():
        value = np.asarray(value)
        preview = ""
        if value.ndim == 1 and value.size <= 10 and value.dtype.kind in "biuf":
            preview = " " + np.array2string(value, precision=4, separator=", ")
        _say(f"  {key}: {value.dtype} array of shape {value.shape}{preview}")


def _short(value) -> str:
    """``repr(value)``, a long list (feature names, init labels) as its length and first items."""
    if isinstance(value, list | tuple) and len(value) > 10:
        head = ", ".join(repr(item) for item in value[:5])
        return f"[{head}, ...] ({len(value)} values)"
    return repr(value)


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
        help="restarts, the best is kept (default 4; kmle-vmf has no restarts: it seeds by "
        "DP-k-MLE++)",
    )
    parser.add_argument(
        "--max-iter",
        type=_positive_int,
        default=300,
        metavar="N",
        help="maximal iterations per restart (default 300)",
    )
    # one flag per choice, none: each model's own default (sparse: one kappa per component;
    # the Bayesian models and dirichlet: one shared); kmle-vmf has one per component
    kappa = parser.add_mutually_exclusive_group()
    kappa.add_argument(
        "--shared-kappa",
        dest="shared_kappa",
        action="store_const",
        const=True,
        default=None,
        help="one concentration for all components (advised when n is not much larger than "
        "d), for every model but kmle-vmf (default: each model's own, shared for the Bayesian "
        "models and dirichlet, per component for sparse)",
    )
    kappa.add_argument(
        "--per-component-kappa",
        dest="shared_kappa",
        action="store_const",
        const=False,
        help="one concentration per component, for every model but kmle-vmf (the better "
        "density model; a shared one is the better clustering)",
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
