"""Representations of a fitted B-vMFmix's q (VI): q(kappa) by draws, and ArviZ export.

:class:`._bvmf.BayesianVMFMixture` keeps the final q(kappa) as weighted draws
(:func:`kappa_draws`, behind ``score_samples`` and ``to_arviz``) and exports independent
draws from every factor of q (:func:`vi_to_arviz`). With ``shared_kappa`` there is one
concentration: its draws are copied into every component (the predictive) and exported as
one variable without a component dimension.

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bayesvmf import _arviz
from bayesvmf._base import check_count, make_key
from bayesvmf.models.bayesian import _kappa
from bayesvmf.models.bayesian._bvmf_vi import HERMITE_NODES, StreamState

__all__ = ["kappa_draws", "vi_to_arviz"]


def kappa_draws(estimator, online: StreamState, rng_key) -> tuple[np.ndarray, np.ndarray]:
    """Return draws (S, K) and log weights (S,) representing the final q(kappa).

    Bounding: the :data:`._bvmf_vi.HERMITE_NODES` Gauss-Hermite nodes of the log-normal
    q(kappa_k) and their weights. Sampling: ``predictive_draws`` MH draws from the
    conditional of eq. (1) of [1]_ at the final q(mu), q(z) and priors (weight N_k, dot
    delta_k; a shared kappa: one chain on the pooled weight and dot, its draws for every k),
    with equal weights.
    """
    kappa = online.post.kappa
    if estimator.kappa_update == "bounding":
        nodes, weights = np.polynomial.hermite.hermgauss(HERMITE_NODES)
        a, b = np.asarray(kappa.mean_log_kappa), np.asarray(kappa.var_log_kappa)
        return (
            np.exp(a[None] + np.sqrt(2.0 * b)[None] * nodes[:, None]),
            np.log(weights / np.sqrt(np.pi)),
        )
    num_draws = int(estimator.predictive_draws)
    draws, _ = _kappa.kappa_sampling_draws(
        rng_key,
        kappa.state,
        online.resp_sum,
        online.dot,
        online.priors.m,
        online.priors.s2,
        d=online.natural.shape[1],
        num_samples=num_draws,
        num_warmup=int(estimator.kappa_num_warmup),
        pooled=bool(estimator.shared_kappa),
    )
    draws = np.broadcast_to(np.asarray(draws), (num_draws, online.resp_sum.shape[0]))
    return np.exp(draws), np.full(num_draws, -np.log(num_draws))


def vi_to_arviz(estimator, num_draws: int, random_state):
    """Return ``num_draws`` independent draws from q as ``arviz.InferenceData`` (one chain).

    ``mu`` ~ q(mu_k) = vMF(psi_k, gamma_k) (dims ``component``, ``feature``), ``kappa`` ~
    q(kappa) (log-normal for bounding, resampled from ``kappa_draws_`` for sampling; dim
    ``component``, none with ``shared_kappa``) and ``weights`` ~ Dir(rho) (dim
    ``component``); the final bound per row is in ``attrs["lower_bound"]``.
    """
    from bayesvmf.distribution import VonMisesFisher

    check_count(num_draws, "num_draws")
    k = np.shape(estimator.mean_directions_)[0]
    shared = bool(estimator.shared_kappa)
    # one concentration: one column of draws (the columns of q(kappa) are equal)
    n_kappa = 1 if shared else k
    with jax.enable_x64(True):
        key_mu, key_kappa, key_pi = jax.random.split(make_key(random_state), 3)
        dist = VonMisesFisher(
            jnp.asarray(estimator.mean_directions_),
            jnp.asarray(estimator.mean_direction_concentration_),
        )
        mu = np.asarray(dist.sample(key_mu, (num_draws,)))
        if estimator.kappa_update == "bounding":
            noise = np.asarray(jax.random.normal(key_kappa, (num_draws, n_kappa)))
            a, b = estimator.kappa_mean_log_[:n_kappa], estimator.kappa_var_log_[:n_kappa]
            kappa = np.exp(a + np.sqrt(b) * noise)
        else:
            draws = np.asarray(estimator.kappa_draws_)[:, :n_kappa]
            pick = np.asarray(
                jax.random.randint(key_kappa, (num_draws, n_kappa), 0, draws.shape[0])
            )
            kappa = np.take_along_axis(draws, pick, axis=0)
        weights = np.asarray(
            jax.random.dirichlet(key_pi, jnp.asarray(estimator.weight_concentration_), (num_draws,))
        )
    return _arviz.inference_data(
        {
            "mu": mu[None],
            "kappa": (kappa[:, 0] if shared else kappa)[None],
            "weights": weights[None],
        },
        {
            "mu": ["component", "feature"],
            "kappa": [] if shared else ["component"],
            "weights": ["component"],
        },
        attrs={
            "inference": "vi",
            "kappa_update": estimator.kappa_update,
            "lower_bound": float(estimator.lower_bound_),
        },
    )
