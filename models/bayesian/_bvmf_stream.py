"""Stochastic variational inference of B-vMFmix, one chunk at a time (its ``partial_fit``).

The step itself (Hoffman et al.'s SVI [1]_ on the model of Gopal & Yang [2]_, sec. 3.1) is
:func:`._bvmf_vi.svi_step`; the bookkeeping of a stream (checks, counters, step sizes) is
:class:`bayesvmf._base.StreamingMixin`; this module adds B-vMFmix's own checks, starts a
stream from the first chunk and sets the estimator's attributes. The estimator is
:class:`bayesvmf.models.BayesianVMFMixture`.

References
----------
.. [1] M. D. Hoffman, D. M. Blei, C. Wang and J. Paisley, "Stochastic variational
   inference", JMLR 14 (2013) 1303-1347.
.. [2] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np

from bayesvmf import _blocks, _guards
from bayesvmf._base import make_key
from bayesvmf.exceptions import DegenerateRunWarning
from bayesvmf.models.bayesian._bvmf_vi import svi_step
from bayesvmf.models.bayesian._kappa import REPORTED_CAP

__all__ = ["partial_fit"]


def partial_fit(model, X, n_samples):
    """Run :meth:`bayesvmf.models.BayesianVMFMixture.partial_fit` on ``model``; return it."""
    first, n_samples = model._stream_begin(n_samples)
    if model.inference != "vi":
        raise ValueError(
            f"{type(model).__name__}.partial_fit runs stochastic variational "
            f"inference: it needs inference='vi'; got inference={model.inference!r}."
        )
    if first and not isinstance(model.init, str):
        raise ValueError(
            f"{type(model).__name__}.partial_fit: init as an array of labels "
            "cannot be used (the labels of the first chunk are unknown); use "
            "a seeding method (the default init, 'greedy-spherical-kmeans++', "
            "'spherical-kmeans++' or 'random')."
        )
    devices = model._check_devices()
    Xc = model._check_input(X, reset=first)
    step = model._stream_step(first, Xc.shape[0], n_samples)
    with jax.enable_x64(True):
        key = make_key(model.random_state)
        if first:
            # the step below diagnoses (and warns about) the state this call ends in
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegenerateRunWarning)
                model._fit(model._training_data(Xc), key)
        blocks = _blocks.device_data(Xc, model._product_dtype(), devices=devices, bucket=True)
        online, bound, accept, effective = svi_step(
            model._online,
            blocks.counted_by_weight(),
            np.float64(step.step_size),
            np.float64(step.n_total / Xc.shape[0]),
            np.bool_(model.empirical_bayes),
            shared_kappa=bool(model.shared_kappa),
            **model._static(),
        )
        # the clusters of the rows of an earlier fit do not describe the moved model (as
        # SparseVMFMixture.partial_fit); a call that raised above left them
        model.__dict__.pop("labels_", None)
        model._stream_commit(online, step.n_seen, step.n_steps)
        model._set_posterior(online, accept, jax.random.fold_in(key, step.n_steps))
    model.inference_ = "vi"
    model.lower_bound_ = float(bound)
    model.lower_bounds_ = np.append(model.lower_bounds_, model.lower_bound_)
    model.n_iter_ += 1
    # the corpus estimate of N_k. The chunk's effective rows alone would call a healthy
    # component "carried by one vector" whenever a small chunk holds about one of its
    # rows: it counts as such only when the corpus estimate of its weight is about one
    # row too (effective rows never exceed N_k)
    diag = _guards.diagnose(
        online.resp_sum,
        n_rows=step.n_total,
        kappa=online.post.kappa.mean_kappa,
        kappa_max=REPORTED_CAP,
        effective_rows=np.maximum(np.asarray(effective), np.asarray(online.resp_sum)),
        mean_directions=online.post.psi,
    )
    model._report_guards(diag, 0, 1, stacklevel=4)
    return model
