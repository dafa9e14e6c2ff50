"""The two batch fits of :class:`DirichletVMFMixture`: variational EM and collapsed Gibbs.

:func:`fit_vem` runs the ``n_init`` VEM restarts (:mod:`._vem`, on one device or sharded
over several), keeps the guards' choice among them and commits the statistics a later
``partial_fit`` continues from; :func:`fit_gibbs` turns weighted vectors into tokens, runs
the chains (:mod:`._gibbs`) and sets the posterior means. Both take the estimator as their
first argument and set its fitted attributes; ``DirichletVMFMixture._fit_new`` calls them
directly (no extra frame, so the warnings' stack levels are unchanged). They are a file of
their own so that ``_estimator.py`` stays under the project's 800 lines.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf import _blocks, _guards
from bayesvmf.exceptions import ConvergenceWarning
from bayesvmf.models.dirichlet import _degeneracy
from bayesvmf.models.dirichlet._corpus import prepare_corpus, shard_documents
from bayesvmf.models.dirichlet._gibbs import GIBBS_CHUNK, GibbsHyper, run_chains
from bayesvmf.models.dirichlet._svi import SVIStats
from bayesvmf.models.dirichlet._vem import VEMHyper, _vem_step, init_vem_state

__all__ = ["fit_gibbs", "fit_vem"]


def fit_vem(model, key, X, w, offsets) -> None:
    """Fit ``model`` by VEM with ``n_init`` restarts; keep the guards' choice of restart."""
    devices = _blocks.resolve_devices(model.devices)
    hyper = VEMHyper(jnp.float64(model.alpha), jnp.float64(model.kappa_max))
    shared = bool(model.shared_kappa)
    step = functools.partial(_vem_step, shared_kappa=shared)
    if devices is None:
        corpus = prepare_corpus(X, w, offsets, model._product_dtype())
        rows, doc_index = {}, None
    else:
        sharded = shard_documents(X, w, offsets, devices, model._product_dtype())
        corpus = sharded.corpus
        rows = {"row_id": sharded.row_id, "n_real": sharded.n_real}
        doc_index = sharded.doc_index
    total = float(w.sum())
    types = _degeneracy.word_types(X)
    runs, all_bounds, diagnoses = [], [], []
    for r, run_key in enumerate(jax.random.split(key, model.n_init)):
        state = init_vem_state(
            run_key, corpus, hyper, int(model.n_topics), shared_kappa=shared, **rows
        )
        bounds, converged = [], False
        bar = model._progress(model.max_iter, f"VEM restart {r + 1}/{model.n_init}")
        for _ in range(model.max_iter):
            state, info = step(state, corpus, hyper)
            bounds.append(float(info.lower_bound))
            if bar is not None:
                bar.update()
            if len(bounds) > 1 and abs(bounds[-1] - bounds[-2]) <= model.tol * total:
                converged = True
                break
        if bar is not None:
            bar.close()
        all_bounds.append(np.array(bounds))
        phi = np.asarray(state.phi)
        if doc_index is not None:  # the real documents of the sharded table, in order
            phi = phi[doc_index]
        per_type = _degeneracy.type_counts(X, w, offsets, phi, state.mu, state.kappa, *types)
        diagnoses.append(
            _degeneracy.diagnose(
                info.resp_sum, total, state.kappa, model.kappa_max, per_type, state.mu
            )
        )
        runs.append((state, bounds, converged, info, phi))
    # among the restarts that did not degenerate (a collapsed topic raises the bound), the
    # first within tol (per unit of weight) of the best: near-ties are one optimum, and
    # the choice must not hang on rounding (e.g. the device count)
    best = _guards.select_run([b[-1] for b in all_bounds], diagnoses, model.tol * total)
    state, bounds, converged, info, phi = runs[best]
    if not converged:
        warnings.warn(
            f"DirichletVMFMixture (vem): the best of {model.n_init} restarts did not converge "
            f"in max_iter={model.max_iter} iterations (last bound change "
            f"{abs(bounds[-1] - bounds[-2]) / total if len(bounds) > 1 else np.inf:.3g} "
            f"per vector > tol={model.tol}); increase max_iter or tol",
            ConvergenceWarning,
            stacklevel=3,
        )
    model.mean_directions_ = np.asarray(state.mu)
    model.concentrations_ = np.asarray(state.kappa)
    model.doc_topic_ = phi / phi.sum(axis=1, keepdims=True)
    resp_sum = np.asarray(info.resp_sum)
    model.weights_ = resp_sum / resp_sum.sum()
    model.lower_bounds_ = np.array(bounds)
    model.lower_bounds_all_ = all_bounds
    model.lower_bound_ = bounds[-1]
    model.n_iter_ = len(bounds)
    model.converged_ = converged
    model.collapsed_ = np.asarray(info.collapsed)
    # the statistics of eqs. (6), (7) behind the returned topics: partial_fit continues
    # from them (SVI step t = 1, 2, ... after this fit)
    online = (
        SVIStats(jnp.asarray(info.resp_sum, jnp.float64), jnp.asarray(info.resultant, jnp.float64)),
        jnp.asarray(state.mu, jnp.float64),
        jnp.asarray(state.kappa, jnp.float64),
    )
    model._stream_commit(online, len(offsets) - 1)
    model._guard(diagnoses[best], sum(d.degenerate for d in diagnoses), model.n_init)


def fit_gibbs(model, key, X, w, offsets) -> None:
    """Fit ``model`` by collapsed Gibbs sampling (a vector of count w is w tokens)."""
    if not np.allclose(w, np.round(w)):
        j = int(np.flatnonzero(~np.isclose(w, np.round(w)))[0])
        i = int(np.searchsorted(offsets, j, side="right") - 1)
        raise ValueError(
            f"weights[{i}] must hold whole numbers (counts) for inference='gibbs'; "
            f"position {j - offsets[i]} is {w[j]!r}"
        )
    # a vector of count w is w tokens, each with its own topic
    counts = np.round(w).astype(np.int64)
    lengths = np.array([counts[offsets[i] : offsets[i + 1]].sum() for i in range(len(offsets) - 1)])
    Xt = np.repeat(X, counts, axis=0)
    tok_offsets = np.concatenate([[0], np.cumsum(lengths)])
    corpus = prepare_corpus(Xt, np.ones(len(Xt)), tok_offsets)
    d = X.shape[1]
    mean = (w[:, None] * X).sum(axis=0)
    mu0 = mean / max(np.linalg.norm(mean), np.finfo(float).tiny)
    hyper = GibbsHyper(
        jnp.float64(model.alpha),
        jnp.asarray(model.mu_prior_concentration * mu0, jnp.float64),
        jnp.float64(model.kappa_prior[0]),
        jnp.float64(model.kappa_prior[1]),
        jnp.float64(model.kappa_max),
    )
    bar = model._progress(-(-(model.num_warmup + model.num_samples) // GIBBS_CHUNK), "Gibbs")
    samples, theta, states = run_chains(
        key,
        corpus,
        hyper,
        int(model.n_topics),
        model.num_chains,
        model.num_warmup,
        model.num_samples,
        bool(model.shared_kappa),
        bar,
    )
    n_total = model.num_warmup + model.num_samples
    model.samples_ = samples
    mean_mu = samples["mu"].mean(axis=(0, 1))
    model.mean_directions_ = mean_mu / np.linalg.norm(mean_mu, axis=1, keepdims=True)
    model.concentrations_ = samples["kappa"].mean(axis=(0, 1))
    model.weights_ = samples["weights"].mean(axis=(0, 1))
    model.doc_topic_ = theta.mean(axis=0)
    model.lower_bounds_ = np.array([])
    model.lower_bounds_all_ = []
    model.lower_bound_ = float("nan")
    model.n_iter_ = n_total
    model.converged_ = True
    model.n_features_ = d
    # the posterior means of weights and kappa; the word types of chain 0's last z (the
    # chain the others are relabelled to)
    per_type = _degeneracy.token_type_counts(X, counts, states.z[0], int(model.n_topics))
    diagnosis = _degeneracy.diagnose(
        model.weights_,
        float(len(Xt)),
        model.concentrations_,
        model.kappa_max,
        per_type,
        model.mean_directions_,
    )
    model._guard(diagnosis, int(diagnosis.degenerate), 1)
