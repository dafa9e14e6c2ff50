"""The start of a B-vMFmix fit: its checked inputs, priors and initial statistics.

:func:`resolve` turns the estimator's parameters and the data into what VI or collapsed
Gibbs starts from: the priors (``mu0`` from the data when not given, ``m`` from the pooled
concentration of the initial clustering when not given), the initial labels (an ``init``
array checked by :func:`check_labels`, or the Gibbs chains' seeded labels) and the
statistics of the crisp initial assignments. The functions take the estimator
(:class:`bayesvmf.models.BayesianVMFMixture`) as their first argument and only read its
parameters; they are a file of their own so that ``_bvmf.py`` stays under the project's
800 lines.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from bayesvmf import _seeding
from bayesvmf.models.bayesian._bvmf_vi import (
    FitKeys,
    _init_labels,
    _label_statistics,
    _pooled_kappa,
    _seed_statistics,
)
from bayesvmf.models.bayesian._kappa import Priors

__all__ = ["check_labels", "kmeans_passes", "resolve", "resolve_mu0"]


def check_labels(model, n: int) -> np.ndarray:
    """Validate an array ``init`` (n,) of labels; never modifies it."""
    labels = np.asarray(model.init)
    name = f"{type(model).__name__}: init"
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(
            f"{name} must be a 1-D array of {n} labels (one per row of X); got shape "
            f"{labels.shape}."
        )
    if labels.dtype.kind not in "iu":
        if (
            labels.dtype.kind != "f"
            or not np.all(np.isfinite(labels))
            or np.any(labels != np.round(labels))
        ):
            raise ValueError(f"{name} must hold integer labels; got dtype {labels.dtype}.")
    labels = labels.astype(np.int64)
    bad = np.flatnonzero((labels < 0) | (labels >= model.n_components))
    if bad.size:
        raise ValueError(
            f"{name} labels must be in [0, {model.n_components}); row {bad[0]} has label "
            f"{labels[bad[0]]}."
        )
    counts = np.bincount(labels, minlength=model.n_components)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(
            f"{name}: component {empty[0]} has no row (every one of the "
            f"{model.n_components} components needs at least one initial row)."
        )
    return labels


def resolve_mu0(model, d: int, total: np.ndarray) -> np.ndarray:
    """Return the prior mean direction: ``mu0``, or that of ``total`` (the sum of rows)."""
    if model.mu0 is None:
        norm = np.linalg.norm(total)
        return total / norm if norm > 0 else np.eye(d)[0]
    mu0 = np.array(model.mu0, dtype=np.float64, copy=True)
    name = f"{type(model).__name__}: mu0"
    if mu0.shape != (d,):
        raise ValueError(f"{name} must have shape ({d},) (n_features); got {mu0.shape}.")
    norm = np.linalg.norm(mu0)
    if not np.all(np.isfinite(mu0)) or norm == 0:
        raise ValueError(f"{name} must be a finite nonzero vector; got norm {norm}.")
    return mu0 / norm


def kmeans_passes(model):
    """``kmeans_iter`` as a traced int64, or None for none (the program without passes)."""
    return np.int64(model.kmeans_iter) if model.kmeans_iter > 0 else None


def resolve(model, data, keys: FitKeys, user_labels):
    """Return (priors, initial labels, initial statistics) of the B runs.

    B is n_init (VI) or num_chains (Gibbs), the length of ``keys.runs``. The labels
    (B, n) are those of the Gibbs chains or of an ``init`` array (``user_labels``,
    checked; None for VI from seeds); the statistics ((B, K, d) r_k, (B, K) N_k) those
    of the crisp initial assignments (:func:`._bvmf_vi._seed_statistics`, also on row
    blocks).
    """
    n, d = data.shape
    k = int(model.n_components)
    batch = keys.runs.shape[0]
    # large sparse data: the restarts' seeding subsample, drawn on the host
    sample = None
    if user_labels is None:
        sample = _seeding.host_seeding_sample(keys.init, data, k)
    passes = kmeans_passes(model)
    if user_labels is not None:
        labels = np.broadcast_to(user_labels, (batch, n))
    elif model.inference == "gibbs":
        labels = np.asarray(_init_labels(keys.runs, data, k, model.init, passes, sample))
    else:
        labels = None
    if labels is None:
        resultant, resp_sum = _seed_statistics(keys.runs, data, k, model.init, passes, sample)
    else:
        # identical labels for every run, or chains that only need run 0's statistics
        one = _label_statistics(jnp.asarray(labels[0]), data, k)
        resultant, resp_sum = (jnp.broadcast_to(a, (batch, *a.shape)) for a in one)
    # the sum of the rows is the sum of the resultants of a crisp assignment
    mu0 = resolve_mu0(model, d, np.asarray(resultant)[0].sum(axis=0))
    if model.m is None:
        kappa = _pooled_kappa(resultant, np.float64(n), d=d)
        m = float(np.log(max(float(kappa), 1e-3)))
    else:
        m = float(model.m)
    # float64, not weakly typed: the priors updated by empirical Bayes must keep the
    # types of the first call, or the step would be traced twice
    values = (model.alpha, mu0, model.C0, m, model.s2)
    priors = Priors(*(np.asarray(v, np.float64) for v in values))
    return priors, labels, (resultant, resp_sum)
