r"""Stochastic variational inference of VMFMix [1]_ over chunks of documents (Hoffman et al. [5]_).

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
.. [5] M. D. Hoffman, D. M. Blei, C. Wang and J. Paisley, "Stochastic variational
   inference", JMLR 14 (2013) 1303-1347.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax.numpy as jnp

from bayesvmf import _compile_cache, special
from bayesvmf._mixture import count_trace
from bayesvmf.models.dirichlet._corpus import Corpus
from bayesvmf.models.dirichlet._vem import _local_step, _m_step

#: Rounds and tolerance (max change of E[theta_i]) of the local step of :meth:`partial_fit`,
#: the defaults of :func:`e_step_documents`.
SVI_LOCAL_MAX_ITER = 500
SVI_LOCAL_TOL = 1e-10


class SVIStats(NamedTuple):
    """Running natural statistics of the topics (eqs. (6), (7) of [1]_, for the whole corpus).

    Attributes
    ----------
    resp_sum : array of shape (K,)
        n_{..k}.
    resultant : array of shape (K, d)
        r_k.
    """

    resp_sum: Any
    resultant: Any


def svi_step(
    stats: SVIStats,
    mu,
    kappa,
    corpus: Corpus,
    n_docs,
    alpha,
    kappa_max,
    step_size,
    scale,
    shared_kappa: bool = False,
):
    r"""One step of stochastic variational inference on a chunk of documents.

    Local step: q(theta_i) q(z_i) of every document of the chunk, eq. (9) of [1]_ iterated
    to convergence with the topics held fixed (as :func:`e_step_documents`). Global step
    (Algorithm 1 of Hoffman et al. [5]_): the topics are point estimates, so the global
    variational parameters are the natural statistics s = (n_{..k}, r_k) of eqs. (6), (7),
    whose optimum given q(z) of the whole corpus is the corpus sum. The chunk's sum, scaled
    by M_corpus / M_chunk (``scale``), is an unbiased estimate of it, and

    .. math::

        s_t = (1 - \rho_t)\, s_{t-1} + \rho_t\, \frac{M}{|B_t|}\, s(B_t),

    then mu_k = r_k / |r_k| and A_d(kappa_k) = |r_k| / n_k (eq. (10), kappa solved exactly,
    :func:`_m_step`, the batch M-step). rho_t = 1 replaces the statistics by the chunk's.

    Parameters
    ----------
    stats : SVIStats
    mu, kappa : arrays of shape (K, d), (K,)
        The incoming topics.
    corpus : Corpus
        The chunk (padded, :func:`padded_corpus`, or split over devices,
        :func:`shard_documents`: the step then runs once per device on its documents,
        ``map`` of the data, and the chunk's statistics and bound are added over the
        devices, ``sum_over_blocks``).
    n_docs : int scalar or int array of shape (G,)
        Real documents in the chunk (the rest is padding); split over devices, the count
        of each device's block (``doc_counts`` of :func:`shard_documents`).
    alpha, kappa_max, step_size, scale : float64 scalars
        alpha, the cap, rho_t, M_corpus / M_chunk.
    shared_kappa : bool, static
        One concentration for all topics from the pooled running statistics
        (A_d(kappa) = sum_k |r_k| / sum_k n_k, the batch M-step's).

    Returns
    -------
    stats : SVIStats
    mu, kappa : the new topics
    collapsed : array of bool, shape (K,)
    phi : array of shape (M_padded, K)
        q(theta_i) of the chunk's documents at the incoming topics.
    bound : scalar
        Sum of the chunk's per-document bounds (5) + (8) at the incoming topics.
    """
    count_trace("dirichlet.svi_step")
    replicated = (stats, mu, kappa, alpha, kappa_max, step_size, scale)
    return corpus.data.map(
        functools.partial(_local_svi_step, shared_kappa=shared_kappa),
        replicated,
        corpus.weights,
        corpus.doc,
        corpus.doc_weight,
        n_docs,
        per_row=(False, False, False, False, True, False),  # phi: per document
    )


def _local_svi_step(replicated, data, w, doc, doc_weight, n_docs, shared_kappa: bool):
    """:func:`svi_step` on the documents of one device (all of them on one device)."""
    stats, mu, kappa, alpha, kappa_max, step_size, scale = replicated
    corpus = Corpus(data, w, doc, doc_weight)
    log_c = special.log_vmf_normalizer(mu.shape[1], kappa)
    phi, weighted, bounds, _, _ = _local_step(
        corpus, mu, kappa, log_c, alpha, SVI_LOCAL_MAX_ITER, SVI_LOCAL_TOL
    )
    real = jnp.arange(phi.shape[0]) < jnp.reshape(n_docs, ())
    resp_sum, resultant, bound = data.sum_over_blocks(
        weighted.sum(axis=0),
        data.block.tdot(weighted, as_rows=True),
        jnp.sum(jnp.where(real, bounds, 0.0)),
    )
    new = SVIStats(
        (1.0 - step_size) * stats.resp_sum + step_size * scale * resp_sum,
        (1.0 - step_size) * stats.resultant + step_size * scale * resultant,
    )
    mu, kappa, collapsed, _ = _m_step(
        new.resultant, new.resp_sum, mu, kappa, kappa_max, shared_kappa
    )
    return new, mu, kappa, collapsed, phi, bound


#: one SVI step, one compiled program per bucketed chunk shape
_svi_step = _compile_cache.jit(svi_step, static_argnames=("shared_kappa",))
