"""The command line's model registry and the helpers its commands share.

:data:`MODELS` maps the name used on the command line (``--model``, ``--models``) to a
:class:`ModelSpec` that builds the unfitted estimator from the parsed options; a new model
is one more entry. The helpers load the input (:func:`bayesvmf.datasets.load_dataset`),
write JSON summaries and figures, and turn a user's mistake into a :class:`CommandError`
that :func:`bayesvmf.cli.main` prints without a traceback. Re-exported by
:mod:`bayesvmf.cli`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _say(text: str = "") -> None:
    print(text, flush=True)


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


def _kappa(args) -> dict[str, bool]:
    """``shared_kappa`` of ``--shared-kappa`` / ``--per-component-kappa`` ({}: the model's own)."""
    return {} if args.shared_kappa is None else {"shared_kappa": args.shared_kappa}


def _sparse(args):
    from bayesvmf.models import SparseVMFMixture

    return SparseVMFMixture(
        args.n_components,
        beta=args.beta,
        **_kappa(args),
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
        **_kappa(args),
        n_init=args.n_init,
        max_iter=args.max_iter,
        random_state=args.seed,
        verbose=int(args.progress),
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
    if args.shared_kappa:
        _say("note: kmle-vmf has one concentration per component (--shared-kappa does not apply)")
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
            **_kappa(args),
            n_init=args.n_init,
            max_iter=args.max_iter,
            random_state=args.seed,
            verbose=int(args.progress),
            devices=args.devices if inference == "vi" else None,
        )

    return build


#: The models of ``fit`` and ``compare``, by command-line name.
MODELS: dict[str, ModelSpec] = {
    "sparse": ModelSpec(
        _sparse,
        "l1-penalised vMF mixture (Barbaro & Rossi); beta = 0 (compare's, and fit's default) "
        "is the classical vMF mixture",
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
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(
            f"--out {out}: cannot create the folder ({exc.strerror or exc})"
        ) from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise CommandError(f"--out {out}: the folder is not writable")
    return out
