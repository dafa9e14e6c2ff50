"""Held-out comparison of estimators on one train/test split, from the same initial assignments.

:func:`compare` fits every estimator of a dict on ``X_train``, once per seed, and scores it
on ``X_test``: the held-out log-likelihood per document (the mean of ``score_samples``,
:func:`bayesvmf.metrics.held_out_log_likelihood`), NMI and ARI of ``predict`` against
``y_test`` when labels are given, and the fit time. It takes any estimator with ``fit``,
``score_samples`` and ``predict`` (and scikit-learn's ``get_params`` when it has it);
nothing in it depends on a particular model.

Same initial assignments. With ``init_labels="shared"`` (the default), each seed draws one
partition of ``X_train`` by one run of spherical k-means++ seeding ([1]_, cosine
dissimilarity 1 - x.mu, :func:`bayesvmf._seeding.init_spherical_kmeanspp`) followed by the
assignment of every row to its closest seed by cosine; every estimator whose parameters
include ``init`` starts from that partition (``init`` set to the label array). The others,
and data-parallel estimators (``devices`` set: a label array is not sharded), start from
their own initialisation (the table says which). An array of labels can be
given instead; ``init_labels=None`` lets every estimator start on its own. Each seed is
also the estimator's ``random_state`` when it has one, so the spread over seeds includes
the spread due to initialisation.

Reading the table. For each model: the held-out log-likelihood per test document
averaged over seeds, its standard error over seeds (sample standard deviation divided by
sqrt(number of seeds)), the difference from the baseline model (the first one unless
``baseline`` is given) with the standard error of that difference paired by seed (both
fitted from the same start on each seed, so most of the seed-to-seed spread cancels),
NMI and ARI when labels are given, and the fastest fit time over the seeds (the first fit
in a process also compiles). A difference larger than about two of its standard errors
is one the seeds agree on.

References
----------
.. [1] D. Arthur and S. Vassilvitskii, "k-means++: the advantages of careful seeding",
   SODA 2007 (with the cosine dissimilarity of spherical k-means).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf import _blocks, _compile_cache, _mixture, _seeding, metrics
from bayesvmf.data import check_directional

__all__ = ["Comparison", "compare", "shared_initial_labels"]


@functools.partial(_compile_cache.jit, static_argnames=("n_components",))
def _kmeanspp_labels(rng_key, data, n_components):
    """Spherical k-means++ seeds, then every row to its closest seed (one compiled program)."""
    _mixture.count_trace("compare.init")
    mu = _seeding.init_spherical_kmeanspp(rng_key, data, n_components)
    return jnp.argmax(data.dot(mu.T), axis=1)


def shared_initial_labels(X, n_components: int, seed: int = 0) -> np.ndarray:
    """Return the shared initial partition: one spherical k-means++ seeding, then assignment.

    The first seed is a uniform row; each next seed is a row drawn with probability
    proportional to its cosine dissimilarity to the closest seed so far (from a uniform
    subsample of the rows of dense data larger than max(4096, 128 K) rows,
    :func:`bayesvmf._seeding.seeding_sample`); every row then goes to its closest seed by
    cosine.

    Parameters
    ----------
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        Rows are normalised to unit norm.
    n_components : int
    seed : int, default 0

    Returns
    -------
    ndarray of int64, shape (n_samples,)
        Labels in ``[0, n_components)``, every component used.

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.compare import shared_initial_labels
    >>> X = np.repeat(np.eye(3), 4, axis=0) + 0.01
    >>> labels = shared_initial_labels(X, 3, seed=0)
    >>> sorted(np.bincount(labels).tolist())
    [4, 4, 4]
    """
    if isinstance(n_components, bool) or not isinstance(n_components, int) or n_components < 1:
        raise ValueError(f"n_components must be an int >= 1, got {n_components!r}")
    Xc = check_directional(X, min_rows=n_components, min_rows_name="n_components")
    with jax.enable_x64(True):
        data = _blocks.device_data(Xc)
        labels = np.asarray(_kmeanspp_labels(jax.random.key(int(seed)), data, n_components))
        labels = labels.astype(np.int64)
    counts = np.bincount(labels, minlength=n_components)
    if (counts == 0).any():  # only when rows repeat: two seeds on identical rows
        raise ValueError(
            f"the shared initialisation left component {int(np.argmin(counts))} empty (X has "
            f"repeated rows); pass init_labels explicitly or fewer components"
        )
    return labels


def _se(values: np.ndarray) -> float:
    """Return the standard error of the mean over the last axis (NaN with fewer than two values)."""
    if values.shape[-1] < 2:
        return math.nan
    return float(np.std(values, ddof=1) / math.sqrt(values.shape[-1]))


def _fmt(value: float, digits: int) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: one row per model, one column per seed.

    Attributes
    ----------
    names : tuple of str
        The models, in the order given.
    seeds : tuple of int
    log_likelihood : ndarray of shape (n_models, n_seeds)
        Held-out log-likelihood per test document.
    fit_time : ndarray of shape (n_models, n_seeds)
        Wall-clock seconds of ``fit``.
    nmi, ari : ndarray of shape (n_models, n_seeds) or None
        Of ``predict(X_test)`` against ``y_test`` (None without labels).
    shared_init : tuple of bool
        Whether each model started from the shared initial assignments.
    baseline : str
        The model the differences are taken from.
    n_train, n_test, n_features : int
    """

    names: tuple[str, ...]
    seeds: tuple[int, ...]
    log_likelihood: np.ndarray
    fit_time: np.ndarray
    nmi: np.ndarray | None
    ari: np.ndarray | None
    shared_init: tuple[bool, ...]
    baseline: str
    n_train: int
    n_test: int
    n_features: int

    def rows(self) -> list[dict[str, Any]]:
        """Return one dict per model: means, standard errors, differences (plain floats)."""
        base = self.log_likelihood[self.names.index(self.baseline)]
        out = []
        for i, name in enumerate(self.names):
            ll = self.log_likelihood[i]
            diff = ll - base
            row = {
                "model": name,
                "log_likelihood": float(ll.mean()),
                "log_likelihood_se": _se(ll),
                "difference": float(diff.mean()),
                "difference_se": math.nan if name == self.baseline else _se(diff),
                "fit_time": float(self.fit_time[i].min()),
                "shared_init": bool(self.shared_init[i]),
            }
            if self.nmi is not None:
                row.update(
                    nmi=float(self.nmi[i].mean()),
                    nmi_se=_se(self.nmi[i]),
                    ari=float(self.ari[i].mean()),
                    ari_se=_se(self.ari[i]),
                )
            out.append(row)
        return out

    @property
    def best(self) -> str:
        """The model with the largest mean held-out log-likelihood."""
        return self.names[int(np.argmax(self.log_likelihood.mean(axis=1)))]

    def verdicts(self) -> list[str]:
        """One sentence per model against the baseline: better or worse, by how much."""
        out = []
        for row in self.rows():
            if row["model"] == self.baseline:
                continue
            diff, se = row["difference"], row["difference_se"]
            word = "better" if diff > 0 else "worse"
            if np.isfinite(se):
                spread = f" ± {se:.3g} (SE over {len(self.seeds)} seeds, paired)"
                agree = abs(diff) > 2 * se
                spread += "; the seeds agree" if agree else "; within two standard errors"
            else:
                spread = " (one seed: no standard error)"
            out.append(
                f"{row['model']} is {word} than {self.baseline} by {abs(diff):.3g} nats of "
                f"held-out log-likelihood per document{spread}."
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """Return everything as JSON-ready Python values (None for missing standard errors)."""
        rows = [
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in r.items()
            }
            for r in self.rows()
        ]
        return {
            "models": list(self.names),
            "seeds": list(self.seeds),
            "baseline": self.baseline,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "n_features": self.n_features,
            "rows": rows,
            "per_seed": {
                "log_likelihood": self.log_likelihood.tolist(),
                "fit_time": self.fit_time.tolist(),
                "nmi": None if self.nmi is None else self.nmi.tolist(),
                "ari": None if self.ari is None else self.ari.tolist(),
            },
            "verdicts": self.verdicts(),
        }

    def to_markdown(self, digits: int = 3) -> str:
        """Render the table (and the verdicts under it) as GitHub markdown."""
        header = [
            "model",
            "held-out log-lik / doc",
            "SE",
            f"diff vs {self.baseline}",
            "SE (paired)",
        ]
        if self.nmi is not None:
            header += ["NMI", "ARI"]
        header += ["fit s (fastest)", "init"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in self.rows():
            cells = [
                row["model"],
                _fmt(row["log_likelihood"], digits),
                _fmt(row["log_likelihood_se"], digits),
                _fmt(row["difference"], digits),
                _fmt(row["difference_se"], digits),
            ]
            if self.nmi is not None:
                cells += [
                    f"{_fmt(row['nmi'], digits)} ± {_fmt(row['nmi_se'], digits)}",
                    f"{_fmt(row['ari'], digits)} ± {_fmt(row['ari_se'], digits)}",
                ]
            cells += [f"{row['fit_time']:.2f}", "shared" if row["shared_init"] else "own"]
            lines.append("| " + " | ".join(cells) + " |")
        caption = (
            f"{self.n_train} training and {self.n_test} test rows, d = {self.n_features}; "
            f"mean over seeds {list(self.seeds)} ± standard error over seeds."
        )
        return "\n".join([*lines, "", caption, *self.verdicts()])

    def __str__(self) -> str:
        return self.to_markdown()

    def plot(self, **kwargs):
        """Plot the table with :func:`bayesvmf.plotting.plot_comparison`."""
        from bayesvmf.plotting import plot_comparison

        return plot_comparison(self, **kwargs)


def _params(estimator) -> dict[str, Any]:
    """Return the constructor arguments (``get_params``), else the public attributes."""
    if callable(getattr(estimator, "get_params", None)):
        return dict(estimator.get_params())
    return {k: v for k, v in vars(estimator).items() if not k.startswith("_") and k[-1] != "_"}


def _clone(estimator, **overrides):
    """Return a fresh unfitted copy with ``overrides`` applied to the parameters it has."""
    if callable(getattr(estimator, "get_params", None)):
        params = _params(estimator)
        params.update({k: v for k, v in overrides.items() if k in params})
        return type(estimator)(**params)
    model = copy.deepcopy(estimator)
    for key, value in overrides.items():
        if hasattr(model, key):
            setattr(model, key, value)
    return model


def compare(
    models: Mapping[str, Any],
    X_train,
    X_test,
    y_test=None,
    *,
    init_labels: str | np.ndarray | None = "shared",
    n_components: int | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    baseline: str | None = None,
    progress: bool = False,
) -> Comparison:
    """Fit estimators on the same split from the same initial assignments; score held out.

    See the module docstring for what is measured and how the shared initial assignments
    are made.

    Parameters
    ----------
    models : dict of str to estimator
        Unfitted templates with ``fit`` and ``score_samples`` (and ``predict`` when
        ``y_test`` is given). Each seed fits a fresh copy (``type(est)(**est.get_params())``,
        or a deep copy without ``get_params``) with ``random_state`` set to the seed and,
        when it has an ``init`` parameter and ``init_labels`` is not None, ``init`` set to
        the initial labels.
    X_train, X_test : array-like or scipy.sparse matrix
        Same number of columns; rows are normalised to unit norm.
    y_test : array-like of int, optional
        True labels of the test rows: adds NMI and ARI.
    init_labels : "shared", None or array of int of shape (n_train,), default "shared"
    n_components : int, optional
        Components of the shared initial partition; default the ``n_components`` the
        models with an ``init`` parameter agree on.
    seeds : sequence of int, default (0, 1, 2)
        Two or more give standard errors.
    baseline : str, optional
        The model differences are taken from; default the first.
    progress : bool, default False
        Show a progress bar over the fits.

    Returns
    -------
    Comparison

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.compare import compare
    >>> from bayesvmf.models import SparseVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(3, size=300)
    >>> X = np.eye(10)[y] + 0.3 * rng.standard_normal((300, 10))  # three clouds
    >>> models = {"vMF mixture": SparseVMFMixture(3), "sparse": SparseVMFMixture(3, beta=5.0)}
    >>> table = compare(models, X[:200], X[200:], y[200:], seeds=[0, 1])
    >>> table.names, table.log_likelihood.shape
    (('vMF mixture', 'sparse'), (2, 2))
    >>> bool(table.nmi.min() > 0.9)
    True
    """
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty dict of name -> estimator")
    names = tuple(str(n) for n in models)
    templates = list(models.values())
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int | np.integer) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints >= 0, got {seeds!r}")
    seeds = tuple(int(s) for s in seeds)
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of the models {list(names)}")
    Xtr = check_directional(X_train, name="X_train")
    Xte = check_directional(X_test, name="X_test")
    if Xtr.shape[1] != Xte.shape[1]:
        raise ValueError(
            f"X_train has {Xtr.shape[1]} columns but X_test has {Xte.shape[1]}; they must match"
        )
    if y_test is not None:
        y_test = np.asarray(y_test)
        if y_test.shape != (Xte.shape[0],):
            raise ValueError(
                f"y_test must have one label per test row, shape ({Xte.shape[0]},); got "
                f"shape {y_test.shape}"
            )
        y_test = metrics.check_labels(y_test, "y_test")  # a NaN label: before any fit
    for name, est in zip(names, templates, strict=True):
        for method in ("fit", "score_samples"):
            if not callable(getattr(est, method, None)):
                raise TypeError(f"models[{name!r}] ({type(est).__name__}) has no {method}()")
        if y_test is not None and not callable(getattr(est, "predict", None)):
            raise TypeError(f"models[{name!r}] ({type(est).__name__}) has no predict()")
    # a data-parallel fit (devices set) cannot start from a label array
    takes_init = tuple(
        "init" in _params(est) and _params(est).get("devices") is None for est in templates
    )

    labels_for_seed = _initial_labels(init_labels, n_components, templates, takes_init, Xtr, seeds)
    shape = (len(names), len(seeds))
    log_lik, fit_time = np.empty(shape), np.empty(shape)
    nmi = np.empty(shape) if y_test is not None else None
    ari = np.empty(shape) if y_test is not None else None
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(names) * len(seeds), desc="compare", leave=False)
    try:
        for j, seed in enumerate(seeds):
            init = labels_for_seed(seed)
            for i, template in enumerate(templates):
                overrides = {"random_state": seed}
                if takes_init[i] and init is not None:
                    overrides["init"] = init
                model = _clone(template, **overrides)
                start = time.perf_counter()
                model.fit(Xtr)
                fit_time[i, j] = time.perf_counter() - start
                try:
                    log_lik[i, j] = metrics.held_out_log_likelihood(model, Xte)
                except ValueError as exc:  # (a NaN score was ranked by argmax before)
                    raise ValueError(f"model {names[i]!r}, seed {seed}: {exc}") from exc
                if y_test is not None:
                    predicted = np.asarray(model.predict(Xte))
                    nmi[i, j] = metrics.normalized_mutual_info(y_test, predicted)
                    ari[i, j] = metrics.adjusted_rand(y_test, predicted)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return Comparison(
        names=names,
        seeds=seeds,
        log_likelihood=log_lik,
        fit_time=fit_time,
        nmi=nmi,
        ari=ari,
        shared_init=tuple(t and init_labels is not None for t in takes_init),
        baseline=baseline,
        n_train=Xtr.shape[0],
        n_test=Xte.shape[0],
        n_features=Xtr.shape[1],
    )


def _initial_labels(init_labels, n_components, templates, takes_init, Xtr, seeds):
    """Return a function seed -> initial labels (or None) after checking the arguments."""
    if init_labels is None or not any(takes_init):
        return lambda seed: None
    if isinstance(init_labels, str):
        if init_labels != "shared":
            raise ValueError(
                f"init_labels must be 'shared', None or an array of labels, got {init_labels!r}"
            )
        if n_components is None:
            ks = {
                _params(est).get("n_components")
                for est, t in zip(templates, takes_init, strict=True)
                if t
            }
            if len(ks) != 1 or None in ks:
                raise ValueError(
                    "the models that take init do not agree on n_components "
                    f"({sorted(map(str, ks))}); pass n_components for the shared initialisation"
                )
            n_components = ks.pop()
        cache = {seed: shared_initial_labels(Xtr, n_components, seed) for seed in seeds}
        return cache.__getitem__
    labels = np.asarray(init_labels)
    if labels.shape != (Xtr.shape[0],) or labels.dtype.kind not in "iu":
        raise ValueError(
            f"init_labels must hold one integer label per training row, shape "
            f"({Xtr.shape[0]},); got shape {labels.shape} and dtype {labels.dtype}"
        )
    return lambda seed: labels
