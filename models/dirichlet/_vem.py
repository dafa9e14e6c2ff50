r"""Variational EM of VMFMix (section 2 of [1]_): E-step eq. (9), M-step eq. (10), bound.

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
.. [3] A. Banerjee, I. S. Dhillon, J. Ghosh and S. Sra, "Clustering on the unit hypersphere
   using von Mises-Fisher distributions", JMLR 6 (2005) 1345-1382.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import digamma, gammaln, logsumexp

from bayesvmf import _compile_cache, _mixture, _parallel, _seeding, special
from bayesvmf._mixture import count_trace
from bayesvmf.models.dirichlet._corpus import Corpus

#: A topic whose total responsibility n_k falls below this keeps its previous concentration
#: (its term n_k log c_d(kappa) + kappa |r_k| of the bound is then below ~1e-10 anyway).
EMPTY_RESP_SUM = 1e-10

#: Hard spherical k-means passes on the pooled vectors after the k-means++ seeding (init), at
#: most (:func:`bayesvmf._parallel.spherical_kmeans` stops earlier once a pass gains less
#: than :data:`bayesvmf._parallel.HARD_RTOL`).
INIT_KMEANS_ITER = 10


class VEMHyper(NamedTuple):
    """Hyperparameters held as arrays (changing a value does not retrace).

    Attributes
    ----------
    alpha : scalar array
        Symmetric Dirichlet parameter.
    kappa_max : scalar array
        Cap on the concentrations.
    """

    alpha: Any
    kappa_max: Any


class VEMState(NamedTuple):
    """State of variational EM.

    Attributes
    ----------
    mu : array of shape (K, d)
        Mean directions mu_k.
    kappa : array of shape (K,)
        Concentrations kappa_k.
    phi : array of shape (M, K)
        Variational Dirichlet parameters phi_i of q(theta_i).
    """

    mu: Any
    kappa: Any
    phi: Any


class VEMInfo(NamedTuple):
    """Diagnostics of one iteration.

    Attributes
    ----------
    lower_bound : scalar
        The bound L of eqs. (5) + (8) at the new state (exact, C_0 included).
    resp_sum : array of shape (K,)
        n_{..k}, the weight of each topic.
    collapsed : array of bool, shape (K,)
        Topics whose concentration reached ``kappa_max``.
    resultant : array of shape (K, d)
        r_k of eq. (7), from which the step's M-step took mu and kappa (with ``resp_sum``,
        the statistics :meth:`DirichletVMFMixture.partial_fit` continues from after ``fit``).
    """

    lower_bound: Any
    resp_sum: Any
    collapsed: Any
    resultant: Any


def _solve_kappa(d: int, resultant_norm, resp_sum, kappa_old, kappa_max, shared_kappa=False):
    """M-step for kappa (eq. (10) of [1]_ solved exactly: A_d(kappa) = |r_k| / n_k).

    :func:`bayesvmf._mixture.solve_kappa` (the solve, its clip and its cap); an empty topic
    keeps its kappa and is never reported as collapsed. With ``shared_kappa`` (static) one
    concentration for all topics from the pooled statistics, A_d(kappa) = sum_k |r_k| /
    sum_k n_k: the exact maximiser of sum_k (n_k log c_d(kappa) + kappa |r_k|) over a single
    kappa (the same concavity argument as per topic), so the bound stays monotone.
    """
    filled = resp_sum > EMPTY_RESP_SUM
    if shared_kappa:
        total = jnp.maximum(jnp.sum(resp_sum), EMPTY_RESP_SUM)
        shared, collapsed = _mixture.solve_kappa(d, jnp.sum(resultant_norm) / total, kappa_max)
        kappa = jnp.broadcast_to(shared, resp_sum.shape)
        return kappa, collapsed & filled
    # |r_k| <= n_k always (unit vectors); the solve's clip only absorbs rounding.
    kappa, collapsed = _mixture.solve_kappa(
        d, resultant_norm / jnp.maximum(resp_sum, EMPTY_RESP_SUM), kappa_max
    )
    return jnp.where(filled, kappa, kappa_old), collapsed & filled


def _dirichlet_terms(phi, doc_topic, alpha):
    """Sum over documents of the theta part of eqs. (5) + (8) (C_0 included)."""
    n_topics = phi.shape[1]
    phi0 = phi.sum(axis=1)
    elog_theta = digamma(phi) - digamma(phi0)[:, None]
    c0 = gammaln(n_topics * alpha) - n_topics * gammaln(alpha)
    expected = jnp.sum((alpha - 1.0 + doc_topic) * elog_theta, axis=1)
    # entropy of Dir(phi_i), eq. (8) of [1]_
    entropy = (
        jnp.sum(gammaln(phi), axis=1)
        - gammaln(phi0)
        - jnp.sum((phi - 1.0) * digamma(phi), axis=1)
        + (phi0 - n_topics) * digamma(phi0)
    )
    return c0 + expected + entropy


def _digamma_table(phi):
    """psi(phi) on the (M, K) table, materialised before it is gathered to the N rows.

    XLA fuses an elementwise producer into a gather, so ``digamma(phi)[doc]`` evaluates
    digamma N x K times instead of M x K times (measured at N = 1e5, M = 1e3, K = 30: 0.29 s
    against 0.003 s, more than the two data products together). ``optimization_barrier``
    does not stop that fusion on CPU; a conditional is a fusion boundary, and its
    predicate depends on the data so that it cannot be folded away. phi > alpha > 0 always,
    so the NaN branch only flags a broken invariant.
    """
    return lax.cond(jnp.all(phi > 0), digamma, lambda p: jnp.full_like(p, jnp.nan), phi)


def _responsibilities(loglik, phi, doc):
    """E-step for pi (eq. (9) of [1]_, first line), in log space.

    psi(phi_i0) is common to all k and cancels in the softmax, so psi(phi_ik) suffices.
    psi is evaluated on the (M, K) table only (:func:`_digamma_table`).
    """
    logits = _digamma_table(phi)[doc] + loglik
    log_resp = logits - logsumexp(logits, axis=1, keepdims=True)
    return jnp.exp(log_resp), log_resp


def vem_step(
    state: VEMState, corpus: Corpus, hyper: VEMHyper, shared_kappa: bool = False
) -> tuple[VEMState, VEMInfo]:
    """Run one iteration of variational EM (eqs. (9), (10) of [1]_) and evaluate the bound.

    One cycle of exact coordinate ascent (module docstring): pi, then phi (eq. (9)), then
    mu and kappa (eq. (10), kappa solved to full precision). The bound L of eqs. (5) + (8)
    is evaluated at the new state; it never decreases from one call to the next.

    Pure and shape-static; the estimator calls it through ``_vem_step``, jitted once at
    module level, so one iteration is one compiled program: the data pass (two products
    with X, one softmax over the (N, K) logits, one segment sum) followed by O(K d + M K)
    work for the M-step and the bound, with no host sync in between. The special functions
    take d from ``mu.shape`` (a Python int at trace time, hence a static branch).

    Parameters
    ----------
    state : VEMState
        Current (mu, kappa, phi).
    corpus : Corpus
        The documents. When their rows are split over devices (:func:`shard_documents`),
        the step runs once per device on its documents (``map`` of the data), phi stays
        split like them, and the sums over rows and documents (n_k, r_k, the entropy of
        q(z), the theta part of the bound) are added over the devices
        (``sum_over_blocks``); mu, kappa and the diagnostics are replicated. Documents of
        weight 0 (padding) add nothing to the bound.
    hyper : VEMHyper
        alpha and kappa_max.
    shared_kappa : bool, static
        One concentration for all topics (pooled statistics, :func:`_solve_kappa`).

    Returns
    -------
    state : VEMState
    info : VEMInfo
    """
    count_trace("dirichlet.vem_step")
    per_block = (VEMState(False, False, True), VEMInfo(False, False, False, False))
    return corpus.data.map(
        functools.partial(_local_vem_step, shared_kappa=shared_kappa),
        (state.mu, state.kappa, hyper),
        corpus.weights,
        corpus.doc,
        corpus.doc_weight,
        state.phi,
        per_row=per_block,
    )


def _local_vem_step(replicated, data, w, doc, doc_weight, phi, shared_kappa: bool):
    """:func:`vem_step` on the documents of one device (all of them on one device)."""
    mu, kappa, hyper = replicated
    state = VEMState(mu, kappa, phi)
    total, rows = data.sum_over_blocks, data.block
    n_docs = state.phi.shape[0]
    d = rows.shape[1]
    log_c = special.log_vmf_normalizer(d, state.kappa)
    # E-step (eq. (9)) and the sufficient statistics (eqs. (6), (7)): the O(N K d) part.
    # Written as few passes over the (N, K) table as possible: logits (fused into the first
    # product), their row max, one exp, the row sums, then weighted = w pi in one multiply.
    psi = _digamma_table(state.phi)
    logits = psi[doc] + log_c + state.kappa * rows.dot(state.mu.T)
    row_max = jnp.max(logits, axis=1)
    unnorm = jnp.exp(logits - row_max[:, None])
    row_sum = jnp.sum(unnorm, axis=1)
    weighted = (w / row_sum)[:, None] * unnorm  # w_ij pi_ijk
    doc_topic = jax.ops.segment_sum(weighted, doc, num_segments=n_docs, indices_are_sorted=True)
    phi = hyper.alpha + doc_topic  # eq. (9), second line
    resp_sum, resultant, psi_term, lse_term = total(
        doc_topic.sum(axis=0),
        rows.tdot(weighted, as_rows=True),  # eq. (7)
        jnp.sum(doc_topic * psi),
        jnp.sum(w * (row_max + jnp.log(row_sum))),
    )
    # entropy of q(z), eq. (8), weighted: -sum w pi log pi with log pi = logits - lse and
    # sum_k pi = 1, so it is sum_ij w_ij lse_ij - sum_ijk w_ij pi_ijk logits_ijk (logits are
    # finite, so a pi that underflows to 0 contributes 0, as 0 log 0 = 0 requires). The
    # last sum splits along the three terms of the logits into statistics already at hand,
    # sum_ik n_ik psi(phi_ik) + sum_k n_k log c_d(kappa_k) + sum_k kappa_k mu_k' r_k (old mu,
    # kappa), which saves a pass over two (N, K) tables.
    weighted_logits = (
        psi_term
        + jnp.sum(resp_sum * log_c)
        + jnp.sum(state.kappa * jnp.sum(state.mu * resultant, axis=1))
    )
    z_entropy = lse_term - weighted_logits
    # M-step (eq. (10)) and the bound at the new state: O(K d + M K)
    mu, kappa, collapsed, log_c_new = _m_step(
        resultant, resp_sum, state.mu, state.kappa, hyper.kappa_max, shared_kappa
    )
    theta_terms = jnp.where(doc_weight > 0, _dirichlet_terms(phi, doc_topic, hyper.alpha), 0.0)
    (theta_term,) = total(jnp.sum(theta_terms))
    bound = theta_term + _vmf_term(resp_sum, log_c_new, kappa, mu, resultant)
    return VEMState(mu, kappa, phi), VEMInfo(bound + z_entropy, resp_sum, collapsed, resultant)


def _log_normalizer(mu, kappa):
    count_trace("dirichlet.log_normalizer")
    return special.log_vmf_normalizer(mu.shape[1], kappa)


def _m_step(resultant, resp_sum, mu_old, kappa_old, kappa_max, shared_kappa: bool = False):
    """M-step (eq. (10)): mu_k = r_k / |r_k|, kappa_k solving A_d(kappa_k) = |r_k| / n_k.

    ``shared_kappa`` (static): one kappa from the pooled statistics (:func:`_solve_kappa`).
    """
    count_trace("dirichlet.m_step")
    d = resultant.shape[1]  # a Python int at trace time: the special-function branch is static
    norm = jnp.linalg.norm(resultant, axis=1)
    tiny = jnp.finfo(norm.dtype).tiny
    mu = jnp.where(norm[:, None] > tiny, resultant / jnp.maximum(norm, tiny)[:, None], mu_old)
    kappa, collapsed = _solve_kappa(d, norm, resp_sum, kappa_old, kappa_max, shared_kappa)
    return mu, kappa, collapsed, special.log_vmf_normalizer(d, kappa)


def _vmf_term(resp_sum, log_c, kappa, mu, resultant):
    """Return the vMF part of the bound (5): sum_k n_k log c_d(kappa_k) + kappa_k mu_k' r_k."""
    count_trace("dirichlet.bound")
    return jnp.sum(resp_sum * log_c + kappa * jnp.sum(mu * resultant, axis=1))


_log_normalizer_jit = _compile_cache.jit(_log_normalizer)
_m_step_jit = _compile_cache.jit(_m_step, static_argnames=("shared_kappa",))
#: one VEM iteration, one compiled program (jitted once, here; one more with shared_kappa)
_vem_step = _compile_cache.jit(vem_step, static_argnames=("shared_kappa",))


def _sample_rows(key, logits, shape=()):
    """Draw rows with probabilities softmax(logits) (Gumbel-max), rows in global order.

    The noise of a row is that of its global number among the real vectors, so padded
    and sharded copies of the corpus draw the same vectors as the unpadded one.
    """
    noise = jax.random.gumbel(key, (*shape, logits.shape[-1]), logits.dtype)
    return jnp.argmax(noise + logits, axis=-1)


def _flat_phi(corpus: Corpus, alpha, n_topics: int):
    """phi_ik = alpha + n_i / K: q(theta_i) preferring no topic (the start of every E-step)."""
    n_docs = corpus.doc_weight.shape[0]
    return alpha + jnp.broadcast_to(corpus.doc_weight[:, None] / n_topics, (n_docs, n_topics))


def _init_vem_state(
    rng_key, corpus: Corpus, hyper: VEMHyper, row_id, n_topics: int, n_real: int
) -> VEMState:
    count_trace("dirichlet.init")
    mu, resultant, resp_sum = corpus.data.map(
        functools.partial(_local_init, n_topics=n_topics, n_real=n_real),
        rng_key,
        corpus.weights,
        row_id,
    )
    return mu, resultant, resp_sum, _flat_phi(corpus, hyper.alpha, n_topics)


def _local_init(rng_key, data, w, row_id, n_topics: int, n_real: int):
    """:func:`init_vem_state`'s program on the rows of one device (all of them on one device).

    The seeding sees every real row in global order (``data.dot``, ``data.take_rows``, the
    same on every device), so that the draws are those of the unpadded corpus; the hard
    passes and the crisp statistics sum each device's rows (padding rows weigh 0).
    """
    # the weights of all real rows in global order: each device scatters its own rows by
    # their global numbers (a padding row adds its weight 0), the devices' vectors added
    (weights,) = data.sum_over_blocks(jnp.zeros(n_real, w.dtype).at[row_id].add(w))
    keys = jax.random.split(rng_key, n_topics)
    # spherical k-means++ seeding on the weighted vectors (dissimilarity 1 - x'mu)
    first = data.take_rows(_sample_rows(keys[0], jnp.log(weights))[None])
    mu = jnp.zeros((n_topics, first.shape[1]), w.dtype).at[0].set(first[0])
    best = data.dot(first.T)[:, 0]

    # greedy k-means++ (as scikit-learn's): 2 + log K candidates per seed, keep the one that
    # lowers the potential most; plain k-means++ often seeds two topics in one cluster when
    # the clusters are noisy (cosines within a cluster ~ 0.5 against ~ 0 between clusters)
    n_candidates = _seeding.greedy_trials(n_topics)

    def cosines(rows):
        return data.dot(rows.T)

    def body(k, carry):
        mu, best = carry
        row, best = _seeding.kmeanspp_pick(
            keys[k], best, n_candidates, data.take_rows, cosines, weights, _sample_rows
        )
        return mu.at[k].set(row), best

    mu, _ = lax.fori_loop(1, n_topics, body, (mu, best))
    # spherical k-means on the pooled vectors (Banerjee et al. [3]_, hard assignments)
    mu = _parallel.spherical_kmeans(data, mu, jnp.asarray(INIT_KMEANS_ITER), w)
    # one crisp pass gives data-driven concentrations
    resultant, resp_sum = _parallel.crisp_statistics(data, mu, w)
    return mu, resultant, resp_sum


_init_vem_state_jit = _compile_cache.jit(_init_vem_state, static_argnames=("n_topics", "n_real"))


def init_vem_state(
    rng_key,
    corpus: Corpus,
    hyper: VEMHyper,
    n_topics: int,
    row_id=None,
    n_real=None,
    shared_kappa: bool = False,
) -> VEMState:
    """Initialise variational EM: spherical k-means++ and k-means for mu, kappa from its partition.

    phi_i starts at alpha + n_i / K (no topic preferred), so the first E-step is driven by
    the likelihood alone.

    Parameters
    ----------
    rng_key : jax.random key
    corpus : Corpus
    hyper : VEMHyper
    n_topics : int
        K (static: one compilation per value).
    row_id : array of int of shape (N,), optional
        The global number of each row among the ``n_real`` real vectors (any number below
        ``n_real`` for a padding row, of weight 0) when ``corpus`` is sharded
        (:func:`shard_documents`): the draws are then those of the unpadded corpus. None:
        the rows in order, all real.
    n_real : int, optional
        The number of real vectors (with ``row_id``); the corpus's data must count as many
        rows (``n_samples``), which a stream chunk (:func:`padded_corpus`, rows counted by
        their weights, padding included) does not.
    shared_kappa : bool, default False
        One concentration for all topics, from the pooled statistics of the partition.

    Returns
    -------
    VEMState
    """
    if row_id is None:
        n_real = corpus.weights.shape[0]
        row_id = jnp.arange(n_real, dtype=jnp.int32)
    mu, resultant, resp_sum, phi = _init_vem_state_jit(
        rng_key, corpus, hyper, row_id, n_topics=n_topics, n_real=n_real
    )
    # concentrations from the crisp partition (mu is then the next k-means centre)
    mu, kappa, _, _ = _m_step_jit(
        resultant, resp_sum, mu, jnp.ones_like(resp_sum), hyper.kappa_max, shared_kappa=shared_kappa
    )
    return VEMState(mu, kappa, phi)


def _local_step(corpus: Corpus, mu, kappa, log_c, alpha, max_iter, tol):
    """E-step (eq. (9)) of every document with the topics fixed, to convergence.

    Returns phi, the weighted responsibilities w_ij pi_ijk, the per-document bounds,
    the number of rounds and the last change of E[theta]. Rows of weight 0 (padding)
    contribute nothing to any of them.
    """
    w, doc = corpus.weights, corpus.doc
    n_docs = corpus.doc_weight.shape[0]
    n_topics = mu.shape[0]
    loglik = log_c + kappa * corpus.data.block.dot(mu.T)

    def update(phi):
        resp, _ = _responsibilities(loglik, phi, doc)
        doc_topic = jax.ops.segment_sum(
            w[:, None] * resp, doc, num_segments=n_docs, indices_are_sorted=True
        )
        return alpha + doc_topic

    def cond(carry):
        it, _, change = carry
        return (it < max_iter) & (change > tol)

    def body(carry):
        it, phi, _ = carry
        new = update(phi)
        # change of E[theta_i], the quantity returned by transform
        change = jnp.max(jnp.abs(new / new.sum(1, keepdims=True) - phi / phi.sum(1, keepdims=True)))
        return it + 1, new, change

    phi0 = _flat_phi(corpus, alpha, n_topics)
    n_iter, phi, change = lax.while_loop(cond, body, (0, phi0, jnp.inf))
    resp, log_resp = _responsibilities(loglik, phi, doc)
    weighted = w[:, None] * resp
    doc_topic = jax.ops.segment_sum(weighted, doc, num_segments=n_docs, indices_are_sorted=True)
    # per-document bound (eqs. (5) + (8) restricted to document i) at the E-step optimum
    per_row = jnp.sum(weighted * loglik, axis=1) - jnp.sum(
        jnp.where(weighted > 0, weighted * log_resp, 0.0), axis=1
    )
    bounds = _dirichlet_terms(phi, doc_topic, alpha) + jax.ops.segment_sum(
        per_row, doc, num_segments=n_docs, indices_are_sorted=True
    )
    return phi, weighted, bounds, n_iter, change


def _e_step_documents(corpus: Corpus, mu, kappa, log_c, alpha, max_iter, tol):
    count_trace("dirichlet.e_step_documents")
    phi, _, bounds, n_iter, change = _local_step(corpus, mu, kappa, log_c, alpha, max_iter, tol)
    return phi, bounds, n_iter, change


_e_step_documents_jit = _compile_cache.jit(_e_step_documents)


def e_step_documents(corpus: Corpus, mu, kappa, alpha, max_iter=500, tol=1e-10):
    """Fit q(theta_i) q(z_i) to documents with the topics held fixed (eq. (9) of [1]_).

    Alternates the two lines of eq. (9) until E[theta_i] changes by at most ``tol``
    (max-norm over all documents) or ``max_iter`` rounds, in one compiled loop.

    Parameters
    ----------
    corpus : Corpus
    mu : array of shape (K, d)
    kappa : array of shape (K,)
    alpha : float
    max_iter : int
    tol : float

    Returns
    -------
    phi : array of shape (M, K)
        Variational Dirichlet parameters; E[theta_i] = phi_i / phi_i0.
    bounds : array of shape (M,)
        The bound (5) + (8) of each document: a lower bound on log p(x_i | alpha, mu, kappa).
    n_iter : int array
    change : float array
        The last change of E[theta].
    """
    mu = jnp.asarray(mu, jnp.float64)
    kappa = jnp.asarray(kappa, jnp.float64)
    return _e_step_documents_jit(
        corpus,
        mu,
        kappa,
        _log_normalizer_jit(mu, kappa),
        jnp.float64(alpha),
        jnp.int32(max_iter),
        jnp.float64(tol),
    )


def document_bounds(corpus: Corpus, mu, kappa, alpha) -> jax.Array:
    """Return the per-document bound of eqs. (5) + (8) at the E-step optimum (see above)."""
    return e_step_documents(corpus, mu, kappa, alpha)[1]
