r"""Collapsed Gibbs for VMFMix [1]_: theta and mu integrated out, kappa by Metropolis-Hastings.

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln
from scipy.optimize import linear_sum_assignment

from bayesvmf import _compile_cache, _mcmc, special
from bayesvmf._mixture import count_trace
from bayesvmf.models.dirichlet._corpus import Corpus
from bayesvmf.models.dirichlet._vem import VEMHyper, init_vem_state

#: Sweeps per compiled Gibbs chunk (the progress bar moves between chunks).
GIBBS_CHUNK = 25

#: Metropolis-Hastings steps on each log kappa_k per Gibbs sweep (their warm-up adapts to
#: :data:`bayesvmf._mcmc.TARGET_ACCEPT`).
KAPPA_MH_STEPS = 5


class GibbsHyper(NamedTuple):
    """Hyperparameters of the collapsed sampler, held as arrays.

    Attributes
    ----------
    alpha : scalar
        Symmetric Dirichlet parameter.
    prior_resultant : array of shape (d,)
        c0 mu0 of the prior vMF(mu_k | mu0, c0); zeros for the uniform prior.
    kappa_shape, kappa_rate : scalars
        Gamma(shape, rate) prior on each kappa_k.
    kappa_max : scalar
        Proposals above this are rejected.
    """

    alpha: Any
    prior_resultant: Any
    kappa_shape: Any
    kappa_rate: Any
    kappa_max: Any


class GibbsState(NamedTuple):
    """State of one chain of the collapsed sampler (tokens: vectors repeated by their counts).

    Attributes
    ----------
    z : int32 array of shape (N,)
        Topic of each token.
    doc_topic : array of shape (M, K)
        n_ik, tokens of document i in topic k.
    topic_count : array of shape (K,)
        n_k.
    resultant : array of shape (K, d)
        s_k, the sum of the tokens in topic k.
    kappa : array of shape (K,)
    log_step : array of shape (K,)
        Log of the MH random-walk step on log kappa_k (adapted in warm-up).
    """

    z: Any
    doc_topic: Any
    topic_count: Any
    resultant: Any
    kappa: Any
    log_step: Any


def _statistics(X, doc, z, n_docs, n_topics):
    onehot = jax.nn.one_hot(z, n_topics, dtype=X.dtype)
    doc_topic = jax.ops.segment_sum(onehot, doc, num_segments=n_docs, indices_are_sorted=True)
    return doc_topic, onehot.sum(axis=0), onehot.T @ X


def gibbs_z_sweep(rng_key, state: GibbsState, X, doc, hyper: GibbsHyper) -> GibbsState:
    """Resample every z_ij once from its collapsed conditional (module docstring).

    p(z_ij = k | rest) is proportional to
    (n_ik^{-ij} + alpha) c_d(kappa_k) c_d(|b_k|) / c_d(|b_k + kappa_k x_ij|),
    b_k = c0 mu0 + kappa_k s_k^{-ij}. The counts and resultants are carried through a
    ``lax.scan`` and updated in O(d) per token.
    """
    d = X.shape[1]
    kappa = state.kappa
    log_c_kappa = special.log_vmf_normalizer(d, kappa)
    keys = jax.random.split(rng_key, X.shape[0])

    def body(carry, inputs):
        doc_topic, topic_count, resultant = carry
        x, i, k_old, key = inputs
        doc_topic = doc_topic.at[i, k_old].add(-1.0)
        topic_count = topic_count.at[k_old].add(-1.0)
        resultant = resultant.at[k_old].add(-x)
        b = hyper.prior_resultant + kappa[:, None] * resultant
        bb = jnp.sum(b * b, axis=1)
        norm_old = jnp.sqrt(bb)
        norm_new = jnp.sqrt(jnp.maximum(bb + 2.0 * kappa * (b @ x) + kappa * kappa, 0.0))
        # one call on both norms: the special function dominates the cost of a token update
        log_c = special.log_vmf_normalizer(d, jnp.concatenate([norm_old, norm_new]))
        n_topics = kappa.shape[0]
        logits = (
            jnp.log(doc_topic[i] + hyper.alpha) + log_c_kappa + log_c[:n_topics] - log_c[n_topics:]
        )
        k = jax.random.categorical(key, logits).astype(jnp.int32)
        doc_topic = doc_topic.at[i, k].add(1.0)
        topic_count = topic_count.at[k].add(1.0)
        resultant = resultant.at[k].add(x)
        return (doc_topic, topic_count, resultant), k

    (doc_topic, topic_count, _), z = lax.scan(
        body, (state.doc_topic, state.topic_count, state.resultant), (X, doc, state.z, keys)
    )
    # the resultants again from z, the same numbers whenever z is (one product, beside the
    # sweep's K d per token):
    # the scan's -x then +x leave rounding behind, so mu drew a different last bit at every
    # sweep with every z unchanged (ArviZ's R-hat 1.15 and plot_trace failing on that noise)
    # and drifted over a long chain; the counts are integers, exact as they are
    resultant = jax.nn.one_hot(z, kappa.shape[0], dtype=X.dtype).T @ X
    return state._replace(z=z, doc_topic=doc_topic, topic_count=topic_count, resultant=resultant)


def _kappa_log_target(d, log_kappa, topic_count, resultant, hyper, shared_kappa=False):
    """Log of c_d(kappa)^{n_k} / c_d(|c0 mu0 + kappa s_k|) p(kappa) kappa (log-scale Jacobian).

    With ``shared_kappa`` (static; ``log_kappa`` then has K equal entries) the target of the
    one concentration: the topics' collapsed marginals multiplied, the prior once, broadcast
    to the K entries.
    """
    kappa = jnp.exp(log_kappa)
    b = hyper.prior_resultant + kappa[:, None] * resultant
    n_topics = kappa.shape[0]
    # one special-function call on both arguments (one compiled instance, not two)
    log_c = special.log_vmf_normalizer(d, jnp.concatenate([kappa, jnp.linalg.norm(b, axis=1)]))
    data = topic_count * log_c[:n_topics] - log_c[n_topics:]
    prior = hyper.kappa_shape * log_kappa - hyper.kappa_rate * kappa
    if shared_kappa:
        return jnp.broadcast_to(jnp.sum(data) + prior[0], data.shape)
    return data + prior


def gibbs_kappa_update(
    rng_key, state: GibbsState, hyper: GibbsHyper, d: int, adapt, shared_kappa: bool = False
):
    """Update every kappa_k by ``KAPPA_MH_STEPS`` random-walk MH steps on log kappa_k.

    The steps are :func:`bayesvmf._mcmc.log_kappa_mh` (shared with B-vMFmix's sampler);
    proposals above log ``kappa_max`` are rejected.

    ``adapt`` (0 or 1, an array) moves log_step towards the acceptance rate
    ``bayesvmf._mcmc.TARGET_ACCEPT``; it is 1 during warm-up only, so the sampling phase is a fixed
    Markov kernel. Returns the new state and the mean acceptance probability per topic.
    With ``shared_kappa`` (static) the K entries are one concentration: one proposal, one
    acceptance draw, the target of all topics together (:func:`_kappa_log_target`).
    """
    keys = jax.random.split(rng_key, KAPPA_MH_STEPS)

    def target(log_kappa):
        # z is fixed during these steps: nothing beside the density is carried (aux ())
        density = _kappa_log_target(
            d, log_kappa, state.topic_count, state.resultant, hyper, shared_kappa
        )
        return density, ()

    log_kappa = jnp.log(state.kappa)
    (log_kappa, _, _, log_step), steps = _mcmc.log_kappa_mh(
        keys,
        log_kappa,
        target(log_kappa)[0],
        (),
        state.log_step,
        target,
        gain=adapt * _mcmc.ADAPT_GAIN,
        log_kappa_max=jnp.log(hyper.kappa_max),
        shared=shared_kappa,
    )
    accept = steps.accept_prob.mean(axis=0)
    return state._replace(kappa=jnp.exp(log_kappa), log_step=log_step), accept


def collapsed_log_joint(state: GibbsState, hyper: GibbsHyper, d: int, shared_kappa: bool = False):
    """Return log p(X, z, kappa | alpha, mu0, c0) with theta and mu integrated out.

    Sum of the Dirichlet-multinomial terms of every document, the collapsed vMF marginal of
    every topic (module docstring) and the Gamma prior on kappa (up to its constant; once
    for the one concentration with ``shared_kappa``).
    """
    alpha = hyper.alpha
    n_topics = state.kappa.shape[0]
    doc_total = state.doc_topic.sum(axis=1)
    dirichlet = jnp.sum(
        gammaln(n_topics * alpha)
        - gammaln(doc_total + n_topics * alpha)
        + jnp.sum(gammaln(state.doc_topic + alpha) - gammaln(alpha), axis=1)
    )
    b = hyper.prior_resultant + state.kappa[:, None] * state.resultant
    prior_norm = jnp.linalg.norm(hyper.prior_resultant)
    # one special-function call on all 2 K + 1 arguments (one compiled instance)
    log_c = special.log_vmf_normalizer(
        d, jnp.concatenate([state.kappa, prior_norm[None], jnp.linalg.norm(b, axis=1)])
    )
    vmf = jnp.sum(state.topic_count * log_c[:n_topics] + log_c[n_topics] - log_c[n_topics + 1 :])
    kappa_prior = (hyper.kappa_shape - 1.0) * jnp.log(state.kappa) - hyper.kappa_rate * state.kappa
    kappa_prior = kappa_prior[0] if shared_kappa else jnp.sum(kappa_prior)
    return dirichlet + vmf + kappa_prior


class GibbsDraw(NamedTuple):
    """What one sweep records (per chain)."""

    kappa: Any
    mu: Any
    weights: Any
    lp: Any
    n_occupied: Any
    kappa_accept: Any


def _gibbs_chunk(keys, adapt, states, X, doc, hyper, theta_sum, shared_kappa=False):
    """Run len(keys[0]) sweeps of every chain (vmapped); record one draw per sweep."""
    count_trace("dirichlet.gibbs_chunk")
    d = X.shape[1]

    def one_chain(chain_keys, chain_adapt, state, chain_theta_sum):
        def sweep(carry, inputs):
            state, theta_sum = carry
            key, a = inputs
            key_z, key_k = jax.random.split(key)
            state = gibbs_z_sweep(key_z, state, X, doc, hyper)
            state, accept = gibbs_kappa_update(key_k, state, hyper, d, a, shared_kappa)
            # mu given (z, kappa) is vMF(b_k / |b_k|, |b_k|), b_k = c0 mu0 + kappa_k s_k; we
            # record its mode, as the direction of s_k + c0 mu0 / kappa_k: the same unit vector,
            # which with c0 = 0 does not move with kappa (b_k / |b_k| did, in its last bits)
            b = state.resultant + hyper.prior_resultant / state.kappa[:, None]
            norm = jnp.linalg.norm(b, axis=1, keepdims=True)
            mu = b / jnp.maximum(norm, jnp.finfo(norm.dtype).tiny)
            doc_total = state.doc_topic.sum(axis=1, keepdims=True)
            n_topics = state.kappa.shape[0]
            # E[theta_i | z] = (n_ik + alpha) / (n_i + K alpha), accumulated after warm-up
            theta = (state.doc_topic + hyper.alpha) / (doc_total + n_topics * hyper.alpha)
            theta_sum = theta_sum + (1.0 - a) * theta
            draw = GibbsDraw(
                state.kappa,
                mu,
                state.topic_count / state.topic_count.sum(),
                collapsed_log_joint(state, hyper, d, shared_kappa),
                jnp.sum(state.topic_count > 0),
                accept,
            )
            return (state, theta_sum), draw

        (state, chain_theta_sum), draws = lax.scan(
            sweep, (state, chain_theta_sum), (chain_keys, chain_adapt)
        )
        return state, chain_theta_sum, draws

    return jax.vmap(one_chain)(keys, adapt, states, theta_sum)


_gibbs_chunk_jit = _compile_cache.jit(_gibbs_chunk, static_argnames=("shared_kappa",))


def _init_gibbs_state(
    rng_key, corpus: Corpus, vem_hyper: VEMHyper, n_topics: int, shared_kappa: bool = False
):
    """Start a chain from a k-means++ crisp assignment (each chain from its own seeds)."""
    seed = init_vem_state(rng_key, corpus, vem_hyper, n_topics, shared_kappa=shared_kappa)
    z = jnp.argmax(corpus.data.dot(seed.mu.T), axis=1).astype(jnp.int32)
    n_docs = corpus.doc_weight.shape[0]
    doc_topic, topic_count, resultant = _statistics(corpus.X, corpus.doc, z, n_docs, n_topics)
    kappa = jnp.clip(seed.kappa, _mcmc.KAPPA_START_MIN, vem_hyper.kappa_max)
    if not shared_kappa:  # a shared kappa is that of the pooled partition, empty topics too
        kappa = jnp.where(topic_count > 0, kappa, 1.0)
    # explicit dtype: a weakly typed log_step would change type after the first chunk and
    # make _gibbs_chunk_jit compile twice
    log_step = jnp.full(n_topics, -1.0, dtype=kappa.dtype)
    return GibbsState(z, doc_topic, topic_count, resultant, kappa, log_step)


def _match_topics(reference, other):
    """Permutation p maximising sum_k reference_k . other_{p(k)} (Hungarian algorithm)."""
    _, cols = linear_sum_assignment(-(np.asarray(reference) @ np.asarray(other).T))
    return cols


def run_chains(
    key,
    corpus: Corpus,
    hyper: GibbsHyper,
    n_topics: int,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    shared_kappa: bool = False,
    bar=None,
):
    """Run ``num_chains`` collapsed Gibbs chains (vmapped) over the tokens of ``corpus``.

    Each chain starts from its own k-means++ crisp assignment; the sweeps run in compiled
    chunks of ``GIBBS_CHUNK``, the MH step of kappa adapted during the ``num_warmup``
    first. Chains are relabelled to agree with chain 0 (Hungarian matching of the mean
    directions). ``bar`` (a tqdm bar or None) moves once per chunk.

    Returns
    -------
    samples : dict of ndarray
        The kept draws of :class:`GibbsDraw`'s fields, (chain, draw, ...).
    theta : ndarray of shape (num_chains, M, K)
        E[theta_i | z] averaged over the kept sweeps of each chain.
    states : GibbsState
        The final states (stacked over chains; labels of each chain as sampled).
    """
    vem_hyper = VEMHyper(hyper.alpha, hyper.kappa_max)
    k_init, k_run = jax.random.split(key)
    init_keys = jax.random.split(k_init, num_chains)
    states = [_init_gibbs_state(k, corpus, vem_hyper, n_topics, shared_kappa) for k in init_keys]
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    n_total = num_warmup + num_samples
    n_chunks = -(-n_total // GIBBS_CHUNK)
    adapt_all = (np.arange(n_chunks * GIBBS_CHUNK) < num_warmup).astype(np.float64)
    # sweeps past n_total (chunk rounding) must not enter the theta average either
    keep = (np.arange(n_chunks * GIBBS_CHUNK) < n_total).astype(np.float64)
    adapt_all = np.where(keep > 0, adapt_all, 1.0)
    theta_sum = jnp.zeros((num_chains,) + corpus.doc_weight.shape + (n_topics,))
    chunk_keys = jax.random.split(k_run, n_chunks * num_chains * GIBBS_CHUNK).reshape(
        n_chunks, num_chains, GIBBS_CHUNK
    )
    draws = []
    for c in range(n_chunks):
        adapt = jnp.asarray(adapt_all[c * GIBBS_CHUNK : (c + 1) * GIBBS_CHUNK])
        adapt = jnp.broadcast_to(adapt, (num_chains, GIBBS_CHUNK))
        states, theta_sum, chunk = _gibbs_chunk_jit(
            chunk_keys[c], adapt, states, corpus.X, corpus.doc, hyper, theta_sum, shared_kappa
        )
        draws.append(jax.tree.map(np.asarray, chunk))
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    draws = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *draws)
    sel = slice(num_warmup, n_total)
    samples = {name: getattr(draws, name)[:, sel] for name in GibbsDraw._fields}
    theta = np.asarray(theta_sum) / num_samples
    # relabel every chain to agree with chain 0 (label switching between chains)
    ref = samples["mu"][0].mean(axis=0)
    for c in range(1, num_chains):
        perm = _match_topics(ref, samples["mu"][c].mean(axis=0))
        for name in ("kappa", "mu", "weights", "kappa_accept"):
            samples[name][c] = samples[name][c][:, perm]
        theta[c] = theta[c][:, perm]
    return samples, theta, states
