r"""The Dirichlet-vMF mixture over sets of vectors (VMFMix, Li [1]_).

Generative story (section 1 of [1]_): each document i = 1..M is a set of unit vectors
x_ij (word embeddings, image-patch encodings, ...), optionally with counts w_ij,

    theta_i ~ Dir(alpha),  z_ij ~ Cat(theta_i),  x_ij ~ vMF(mu_{z_ij}, kappa_{z_ij}).

It is LDA with the topic-word multinomials replaced by vMF densities on S^{d-1}. Three
inference algorithms are implemented:

* variational EM (section 2 of [1]_): q = prod_i Dir(theta_i | phi_i) prod_j Cat(z_ij | pi_ij),
  E-step eq. (9), M-step eq. (10) with kappa solved to full precision, bound eqs. (5) + (8)
  evaluated exactly at every iteration;
* stochastic variational inference over chunks of documents (Hoffman et al. [5]_,
  :meth:`DirichletVMFMixture.partial_fit`): the local step above per chunk, the running
  statistics of eqs. (6), (7) moved towards the chunk's by a Robbins-Monro step size;
* collapsed Gibbs (Li et al. [4]_'s mix-vMF topic model; the collapsing of Gopal & Yang [2]_):
  theta_i and mu_k integrated out, z_ij resampled one at a time, kappa_k by
  Metropolis-Hastings.

Symbols (code name <-> paper):

=================  ==========================================================================
``alpha``          symmetric Dirichlet parameter alpha
``mu``             topic mean directions mu_k, shape (K, d), unit rows
``kappa``          topic concentrations kappa_k, shape (K,)
``phi``            variational Dirichlet parameters phi_ik, shape (M, K); phi_i0 = sum_k phi_ik
``resp``           variational assignment probabilities pi_ijk, shape (N, K) (flat, see below)
``doc_topic``      n_{i.k} = sum_j w_ij pi_ijk (eq. (6)); a count of tokens in Gibbs
``resp_sum``       n_{..k} = sum_ij w_ij pi_ijk (eq. (6))
``resultant``      r_k = sum_ij w_ij pi_ijk x_ij (eq. (7)), shape (K, d)
``log_c``          log c_d(kappa_k), :func:`bayesvmf.special.log_vmf_normalizer`
``mu0, c0``        prior vMF(mu_k | mu0, c0) of the collapsed sampler (c0 = 0: uniform)
=================  ==========================================================================

Storage. The documents are concatenated into one flat (N, d) array with a sorted
document index per row (``doc``, i.e. offsets), never padded to the longest document.
Every per-document sum is a ``segment_sum`` over ``doc``, so one iteration costs
O(N K d) for the two data products ``X @ mu.T`` and ``resp.T @ X`` plus O(N K) for the rest.
Counts w_ij are carried as weights: a vector of count w is w identical copies of it, so
every sum over j of eqs. (5)-(8) is weighted by w_ij (entropy term included).

Derivations the paper leaves terse.

*Bound.* With E_q[log theta_ik] = psi(phi_ik) - psi(phi_i0) and
sum_j,k w_ij pi_ijk (log c_d(kappa_k) + kappa_k mu_k' x_ij) = sum_k (n_k log c_d(kappa_k) +
kappa_k mu_k' r_k), the bound (5) is

    L = M [log Gamma(K alpha) - K log Gamma(alpha)]                               (C_0)
        + sum_ik (alpha - 1 + n_ik) (psi(phi_ik) - psi(phi_i0))
        + sum_k (n_k log c_d(kappa_k) + kappa_k mu_k' r_k) + H(q),

with H(q) of eq. (8) (its last term weighted by w_ij). C_0 is kept, so L is a true lower
bound on log p(X | alpha, mu, kappa) and :meth:`DirichletVMFMixture.score` can report it.

*Monotonicity.* One iteration is a cycle of exact coordinate maximisations of L: pi given
(phi, mu, kappa) (eq. (9), first line, the softmax is the maximiser), phi given pi (eq. (9),
second line), mu given pi (r_k / |r_k| maximises kappa_k mu' r_k on the sphere), kappa given
(pi, mu) (n_k log c_d(kappa) + kappa |r_k| is concave in kappa since -d/dkappa log c_d = A_d
is increasing, so A_d(kappa_k) = |r_k| / n_k is its maximiser; capping at ``kappa_max`` is the
constrained maximiser). Hence L never decreases. The paper's eq. (10) uses the Banerjee
approximation for kappa, which is not an exact maximiser and can make L decrease slightly;
here kappa is solved to full precision (:func:`bayesvmf.special.kappa_from_rbar`).

*Collapsed predictive.* With the prior vMF(mu_k | mu0, c0) and the set S_k of vectors in
topic k (resultant s_k), integrating mu_k out gives

    p(X_k | kappa_k) = c_d(kappa_k)^{n_k} c_d(c0) / c_d(|c0 mu0 + kappa_k s_k|),

so the predictive of a new vector x is
c_d(kappa) c_d(|b_k|) / c_d(|b_k + kappa x|) with b_k = c0 mu0 + kappa_k s_k;
theta_i integrated out gives the Dirichlet-multinomial factor (n_ik^{-ij} + alpha). The
conditional of z_ij is their product (Griffiths & Steyvers' LDA sampler with this
predictive), and kappa_k has the unnormalised conditional
c_d(kappa)^{n_k} / c_d(|c0 mu0 + kappa s_k|) p(kappa), sampled by random-walk MH on
log kappa (step size adapted during warm-up only). The prior on kappa is
Gamma(kappa_prior[0], kappa_prior[1]) (shape, rate).

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
.. [2] S. Gopal and Y. Yang, "Von Mises-Fisher clustering models", ICML 2014, 154-162.
.. [3] A. Banerjee, I. S. Dhillon, J. Ghosh and S. Sra, "Clustering on the unit hypersphere
   using von Mises-Fisher distributions", JMLR 6 (2005) 1345-1382.
.. [4] X. Li, J. Chi, C. Li, J. OuYang and B. Fu, "Integrating topic modeling with word
   embeddings by mixtures of vMFs", COLING 2016.
.. [5] M. D. Hoffman, D. M. Blei, C. Wang and J. Paisley, "Stochastic variational
   inference", JMLR 14 (2013) 1303-1347.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import digamma, gammaln, logsumexp
from jax.sharding import PartitionSpec as P
from scipy.optimize import linear_sum_assignment

from bayesvmf import _mixture, _parallel, special
from bayesvmf._mixture import count_trace
from bayesvmf._parallel import bucket_size
from bayesvmf.data import check_directional
from bayesvmf.exceptions import ConvergenceWarning

__all__ = [
    "Corpus",
    "VEMHyper",
    "VEMState",
    "VEMInfo",
    "GibbsHyper",
    "GibbsState",
    "prepare_corpus",
    "init_vem_state",
    "vem_step",
    "e_step_documents",
    "SVIStats",
    "padded_corpus",
    "svi_step",
    "document_bounds",
    "gibbs_z_sweep",
    "gibbs_kappa_update",
    "collapsed_log_joint",
    "DirichletVMFMixture",
]

#: A topic whose total responsibility n_k falls below this keeps its previous concentration
#: (its term n_k log c_d(kappa) + kappa |r_k| of the bound is then below ~1e-10 anyway).
EMPTY_RESP_SUM = 1e-10

#: Sweeps per compiled Gibbs chunk (the progress bar moves between chunks).
GIBBS_CHUNK = 25

#: Metropolis-Hastings steps on each log kappa_k per Gibbs sweep, and the target acceptance
#: rate of the warm-up adaptation (0.44, the optimum of a one-dimensional random walk).
KAPPA_MH_STEPS = 5
KAPPA_MH_TARGET = 0.44

#: Rounds and tolerance (max change of E[theta_i]) of the local step of :meth:`partial_fit`,
#: the defaults of :func:`e_step_documents`.
SVI_LOCAL_MAX_ITER = 500
SVI_LOCAL_TOL = 1e-10

#: Spherical k-means iterations on the pooled vectors after the k-means++ seeding (init).
INIT_KMEANS_ITER = 10


# --------------------------------------------------------------------------------------------
# Data: flat storage with offsets
# --------------------------------------------------------------------------------------------


class Corpus(NamedTuple):
    """A set of documents stored flat (no padding).

    Attributes
    ----------
    X : array of shape (N, d)
        All vectors of all documents, document after document, unit rows.
    weights : array of shape (N,)
        Count w_ij of each vector (ones when not given).
    doc : array of shape (N,), int32
        Document index of each row, sorted (row n belongs to document ``doc[n]``).
    doc_weight : array of shape (M,)
        Total weight n_i = sum_j w_ij of each document.
    """

    X: Any
    weights: Any
    doc: Any
    doc_weight: Any


def _check_documents(docs, weights, *, normalize: bool, n_features: int | None):
    """Validate documents and weights; return host arrays (X, w, offsets). Never modifies input."""
    if isinstance(docs, np.ndarray) and docs.ndim != 1:
        raise ValueError(
            "docs must be a list of (n_i, d) arrays, one per document, "
            f"not one array of shape {docs.shape}"
        )
    try:
        n_docs = len(docs)
    except TypeError as err:
        raise ValueError(
            f"docs must be a list of (n_i, d) arrays, got {type(docs).__name__}"
        ) from err
    if n_docs == 0:
        raise ValueError("docs is empty: need at least one document")
    checked = []
    where = "the fitted dimension" if n_features is not None else "the dimension of docs[0]"
    for i, doc in enumerate(docs):
        arr = check_directional(doc, normalize=normalize, name=f"docs[{i}]")
        if n_features is None:
            n_features = arr.shape[1]
        elif arr.shape[1] != n_features:
            raise ValueError(
                f"docs[{i}] has {arr.shape[1]} features, expected {n_features} ({where})"
            )
        checked.append(arr)
    lengths = np.array([a.shape[0] for a in checked], dtype=np.int64)
    if weights is None:
        w = np.ones(int(lengths.sum()), dtype=np.float64)
    else:
        try:
            n_weights = len(weights)
        except TypeError as err:
            raise ValueError(
                f"weights must be a list of 1-D arrays, one per document, got "
                f"{type(weights).__name__}"
            ) from err
        if n_weights != n_docs:
            raise ValueError(
                f"weights has {n_weights} entries but docs has {n_docs} documents "
                "(one weight array per document)"
            )
        parts = []
        for i, (wi, n_i) in enumerate(zip(weights, lengths, strict=True)):
            arr = np.array(wi, dtype=np.float64, copy=True)
            if arr.shape != (n_i,):
                raise ValueError(
                    f"weights[{i}] has shape {arr.shape}, expected ({n_i},) to match docs[{i}]"
                )
            if not np.isfinite(arr).all():
                raise ValueError(f"weights[{i}] has a NaN or infinite value")
            if (arr < 0).any():
                j = int(np.flatnonzero(arr < 0)[0])
                raise ValueError(f"weights[{i}] has a negative value at position {j}")
            parts.append(arr)
        w = np.concatenate(parts)
        if not w.sum() > 0:
            raise ValueError("weights are all zero: at least one vector needs a positive weight")
    X = np.concatenate(checked, axis=0)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return X, w, offsets


def prepare_corpus(X, w, offsets, dtype=jnp.float64) -> Corpus:
    """Build a device :class:`Corpus` from host arrays and document offsets.

    ``dtype`` is the storage dtype of the vectors X, hence of the two data products
    (float32 for ``dtype="mixed"`` of the estimator); weights stay float64.
    """
    lengths = np.diff(offsets)
    doc = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    doc_weight = np.bincount(doc, weights=w, minlength=len(lengths))
    return Corpus(
        jnp.asarray(X, dtype),
        jnp.asarray(w, jnp.float64),
        jnp.asarray(doc),
        jnp.asarray(doc_weight, jnp.float64),
    )


def _data_dot(X, M):
    """X @ M.T in the storage dtype of X (float32 in mixed mode), returned in M's dtype."""
    return (X @ M.astype(X.dtype).T).astype(M.dtype)


def _data_tdot(R, X):
    """R.T @ X in the storage dtype of X (float32 in mixed mode), returned in R's dtype."""
    return (R.astype(X.dtype).T @ X).astype(R.dtype)


# --------------------------------------------------------------------------------------------
# Variational EM (section 2 of [1])
# --------------------------------------------------------------------------------------------


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


def _solve_kappa(d: int, resultant_norm, resp_sum, kappa_old, kappa_max):
    """M-step for kappa (eq. (10) of [1]_ solved exactly: A_d(kappa) = |r_k| / n_k)."""
    safe_sum = jnp.maximum(resp_sum, EMPTY_RESP_SUM)
    # |r_k| <= n_k always (unit vectors); the clip only absorbs rounding.
    rbar = jnp.clip(resultant_norm / safe_sum, 0.0, 1.0 - 1e-15)
    kappa = jnp.minimum(special.kappa_from_rbar(d, rbar), kappa_max)
    kappa = jnp.where(resp_sum > EMPTY_RESP_SUM, kappa, kappa_old)
    return kappa, (kappa >= kappa_max) & (resp_sum > EMPTY_RESP_SUM)


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
    state: VEMState, corpus: Corpus, hyper: VEMHyper, axis_name: str | None = None
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
        The documents, stored flat.
    hyper : VEMHyper
        alpha and kappa_max.
    axis_name : str or None
        Set inside ``shard_map`` (:func:`_sharded_vem_step`): ``corpus`` and ``state.phi``
        are then one device's documents, and the sums over rows and documents (n_k, r_k,
        the entropy of q(z), the theta part of the bound) are added over the devices.
        Documents of weight 0 (padding) add nothing to the bound.

    Returns
    -------
    state : VEMState
    info : VEMInfo
    """
    count_trace("dirichlet.vem_step")
    total = functools.partial(_parallel.sum_over_axis, axis_name)

    X, w, doc = corpus.X, corpus.weights, corpus.doc
    n_docs = state.phi.shape[0]
    d = X.shape[1]
    log_c = special.log_vmf_normalizer(d, state.kappa)
    # E-step (eq. (9)) and the sufficient statistics (eqs. (6), (7)): the O(N K d) part.
    # Written as few passes over the (N, K) table as possible: logits (fused into the first
    # product), their row max, one exp, the row sums, then weighted = w pi in one multiply.
    psi = _digamma_table(state.phi)
    logits = psi[doc] + log_c + state.kappa * _data_dot(X, state.mu)
    row_max = jnp.max(logits, axis=1)
    unnorm = jnp.exp(logits - row_max[:, None])
    row_sum = jnp.sum(unnorm, axis=1)
    weighted = (w / row_sum)[:, None] * unnorm  # w_ij pi_ijk
    doc_topic = jax.ops.segment_sum(weighted, doc, num_segments=n_docs, indices_are_sorted=True)
    phi = hyper.alpha + doc_topic  # eq. (9), second line
    resp_sum, resultant, psi_term, lse_term = total(
        doc_topic.sum(axis=0),
        _data_tdot(weighted, X),  # eq. (7)
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
        resultant, resp_sum, state.mu, state.kappa, hyper.kappa_max
    )
    theta_terms = jnp.where(
        corpus.doc_weight > 0, _dirichlet_terms(phi, doc_topic, hyper.alpha), 0.0
    )
    (theta_term,) = total(jnp.sum(theta_terms))
    bound = theta_term + _vmf_term(resp_sum, log_c_new, kappa, mu, resultant)
    return VEMState(mu, kappa, phi), VEMInfo(bound + z_entropy, resp_sum, collapsed, resultant)


@functools.cache
def _sharded_vem_step(mesh):
    """:func:`vem_step` with the documents sharded over ``mesh`` (one jitted program per mesh).

    The corpus and phi are split along their first axis (:func:`shard_documents`); mu,
    kappa and the diagnostics are replicated.
    """
    state_spec = VEMState(P(), P(), P(_parallel.AXIS))
    corpus_spec = Corpus(*(P(_parallel.AXIS),) * 4)
    step = jax.shard_map(
        functools.partial(vem_step, axis_name=_parallel.AXIS),
        mesh=mesh,
        in_specs=(state_spec, corpus_spec, P()),
        out_specs=(state_spec, VEMInfo(P(), P(), P(), P())),
    )
    return jax.jit(step)


def _log_normalizer(mu, kappa):
    count_trace("dirichlet.log_normalizer")
    return special.log_vmf_normalizer(mu.shape[1], kappa)


def _m_step(resultant, resp_sum, mu_old, kappa_old, kappa_max):
    """M-step (eq. (10)): mu_k = r_k / |r_k|, kappa_k solving A_d(kappa_k) = |r_k| / n_k."""
    count_trace("dirichlet.m_step")
    d = resultant.shape[1]  # a Python int at trace time: the special-function branch is static
    norm = jnp.linalg.norm(resultant, axis=1)
    tiny = jnp.finfo(norm.dtype).tiny
    mu = jnp.where(norm[:, None] > tiny, resultant / jnp.maximum(norm, tiny)[:, None], mu_old)
    kappa, collapsed = _solve_kappa(d, norm, resp_sum, kappa_old, kappa_max)
    return mu, kappa, collapsed, special.log_vmf_normalizer(d, kappa)


def _vmf_term(resp_sum, log_c, kappa, mu, resultant):
    """Return the vMF part of the bound (5): sum_k n_k log c_d(kappa_k) + kappa_k mu_k' r_k."""
    count_trace("dirichlet.bound")
    return jnp.sum(resp_sum * log_c + kappa * jnp.sum(mu * resultant, axis=1))


_log_normalizer_jit = jax.jit(_log_normalizer)
_m_step_jit = jax.jit(_m_step)
#: one VEM iteration, one compiled program (jitted once, here)
_vem_step = jax.jit(vem_step)


def _sample_rows(key, logits, row_id, n_real: int, shape=()):
    """Draw rows with probabilities softmax(logits) (Gumbel-max), whatever the layout.

    The noise of a row is that of its global number ``row_id`` among the ``n_real``
    vectors, so padded and sharded copies of the corpus draw the same vectors.
    """
    noise = jax.random.gumbel(key, (*shape, n_real), logits.dtype)[..., row_id]
    return jnp.argmax(noise + logits, axis=-1)


def _init_vem_state(
    rng_key, corpus: Corpus, hyper: VEMHyper, row_id, n_topics: int, n_real: int
) -> VEMState:
    count_trace("dirichlet.init")
    X, w, doc = corpus.X, corpus.weights, corpus.doc
    n_docs = corpus.doc_weight.shape[0]
    d = X.shape[1]
    keys = jax.random.split(rng_key, n_topics)
    # spherical k-means++ seeding on the weighted vectors (dissimilarity 1 - x'mu)
    first = _sample_rows(keys[0], jnp.log(w), row_id, n_real)
    mu = jnp.zeros((n_topics, d), w.dtype).at[0].set(X[first])
    best = _data_dot(X, X[first][None].astype(w.dtype))[:, 0]

    # greedy k-means++ (as scikit-learn's): 2 + log K candidates per seed, keep the one that
    # lowers the potential most; plain k-means++ often seeds two topics in one cluster when
    # the clusters are noisy (cosines within a cluster ~ 0.5 against ~ 0 between clusters)
    n_candidates = 2 + int(np.log(n_topics))

    def body(k, carry):
        mu, best = carry
        gap = jnp.maximum(1.0 - best, 0.0) * w
        logits = jnp.where(gap > 0, jnp.log(jnp.where(gap > 0, gap, 1.0)), -jnp.inf)
        # all points already chosen (gap == 0 everywhere): fall back to the weights
        logits = jnp.where(jnp.any(gap > 0), logits, jnp.log(w))
        idx = _sample_rows(keys[k], logits, row_id, n_real, (n_candidates,))
        new_best = jnp.maximum(best[:, None], _data_dot(X, X[idx].astype(w.dtype)))
        potential = jnp.sum(w[:, None] * (1.0 - new_best), axis=0)
        choice = jnp.argmin(potential)
        return mu.at[k].set(X[idx[choice]]), new_best[:, choice]

    mu, _ = lax.fori_loop(1, n_topics, body, (mu, best))

    def lloyd(_, mu):
        # spherical k-means on the pooled vectors (Banerjee et al. [3]_, hard assignments)
        onehot = jax.nn.one_hot(jnp.argmax(_data_dot(X, mu), axis=1), n_topics, dtype=w.dtype)
        resultant = _data_tdot(onehot * w[:, None], X)
        norm = jnp.linalg.norm(resultant, axis=1, keepdims=True)
        return jnp.where(norm > 0, resultant / jnp.where(norm > 0, norm, 1.0), mu)

    mu = lax.fori_loop(0, INIT_KMEANS_ITER, lloyd, mu)
    # one crisp pass gives data-driven concentrations
    labels = jnp.argmax(_data_dot(X, mu), axis=1)
    onehot = jax.nn.one_hot(labels, n_topics, dtype=w.dtype) * w[:, None]
    del doc
    phi = hyper.alpha + jnp.broadcast_to(corpus.doc_weight[:, None] / n_topics, (n_docs, n_topics))
    return mu, _data_tdot(onehot, X), onehot.sum(axis=0), phi


_init_vem_state_jit = jax.jit(_init_vem_state, static_argnames=("n_topics", "n_real"))


def init_vem_state(
    rng_key, corpus: Corpus, hyper: VEMHyper, n_topics: int, row_id=None, n_real=None
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
        ``n_real`` for a padding row, of weight 0) when ``corpus`` is padded or sharded
        (:func:`shard_documents`): the draws are then those of the unpadded corpus. None:
        the rows in order, all real.
    n_real : int, optional
        The number of real vectors (with ``row_id``).

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
    mu, kappa, _, _ = _m_step_jit(resultant, resp_sum, mu, jnp.ones_like(resp_sum), hyper.kappa_max)
    return VEMState(mu, kappa, phi)


def _local_step(corpus: Corpus, mu, kappa, log_c, alpha, max_iter, tol):
    """E-step (eq. (9)) of every document with the topics fixed, to convergence.

    Returns phi, the weighted responsibilities w_ij pi_ijk, the per-document bounds,
    the number of rounds and the last change of E[theta]. Rows of weight 0 (padding)
    contribute nothing to any of them.
    """
    X, w, doc = corpus.X, corpus.weights, corpus.doc
    n_docs = corpus.doc_weight.shape[0]
    n_topics = mu.shape[0]
    loglik = log_c + kappa * _data_dot(X, mu)

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

    phi0 = alpha + jnp.broadcast_to(corpus.doc_weight[:, None] / n_topics, (n_docs, n_topics))
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


_e_step_documents_jit = jax.jit(_e_step_documents)


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


# --------------------------------------------------------------------------------------------
# Stochastic variational inference over chunks of documents (Hoffman et al. [5])
# --------------------------------------------------------------------------------------------


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


def padded_corpus(X, w, offsets, dtype=jnp.float64) -> tuple[Corpus, int]:
    """Build a device :class:`Corpus` padded to bucket sizes (a streaming chunk).

    The N rows and M documents are rounded up to :func:`bayesvmf._parallel.bucket_size`
    (at most 41% padding), so chunks of similar size share one compiled SVI step. Padding
    rows are zero vectors of weight 0 appended to the last document, padding documents are
    empty: neither changes a statistic nor a real document's bound (weight-0 rows enter every
    sum multiplied by their weight; an empty document keeps phi_i = alpha and its own bound
    is masked by the caller).

    Returns
    -------
    corpus : Corpus
    n_docs : int
        The number of real documents M (the first M of the padded table).
    """
    n_rows, d = X.shape
    n_docs = len(offsets) - 1
    rows, docs = bucket_size(n_rows), bucket_size(n_docs)
    X_pad = np.zeros((rows, d))
    X_pad[:n_rows] = X
    w_pad = np.zeros(rows)
    w_pad[:n_rows] = w
    # the last real document runs to the end of the padding rows; padding documents are empty
    offsets_pad = np.concatenate([offsets[:-1], np.full(docs - n_docs + 1, rows)])
    return prepare_corpus(X_pad, w_pad, offsets_pad, dtype), n_docs


class ShardedCorpus(NamedTuple):
    """Documents split over devices (:func:`shard_documents`).

    Attributes
    ----------
    corpus : Corpus
        Its four arrays sharded along their first axis: device g holds rows
        [g R, (g + 1) R) and documents [g D, (g + 1) D), document ids local to the device.
    mesh : jax.sharding.Mesh
    row_id : jax.Array of int32, shape (G R,)
        Global number of each row among the real vectors (0 for padding rows).
    n_real : int
        Number of real vectors.
    doc_index : ndarray of int, shape (M,)
        Position of each real document (in the caller's order) in the padded document axis.
    doc_counts : jax.Array of int32, shape (G,)
        Real documents of each device (the first of its D), sharded: one per device.
    """

    corpus: Corpus
    mesh: Any
    row_id: Any
    n_real: int
    doc_index: np.ndarray
    doc_counts: Any


def shard_documents(
    X, w, offsets, devices, dtype=jnp.float64, bucket: bool = False
) -> ShardedCorpus:
    """Split checked documents over ``devices``: whole documents, about equal vector counts.

    Device g gets consecutive documents whose first vector falls in the g-th equal share of
    the N vectors. Every device's part is padded to the same R rows and D documents: padding
    rows are zero vectors of weight 0 appended to the device's last document (document
    ids stay sorted), padding documents are empty (weight 0: they add nothing to a
    statistic or to the bound, see :func:`vem_step`).

    Parameters
    ----------
    X, w, offsets : host arrays
        The output of ``_check_documents``.
    devices : list of jax devices
    dtype : dtype of the stored vectors
    bucket : bool, default False
        Round R and D up to :func:`bayesvmf._parallel.bucket_size` (streaming chunks), so
        that chunks of similar size share compiled programs.

    Returns
    -------
    ShardedCorpus
    """
    n_rows, d = X.shape
    n_docs = len(offsets) - 1
    n_dev = len(devices)
    starts = np.asarray(offsets[:-1])
    # first document of each device: the first whose start reaches the device's share
    bounds = np.searchsorted(starts, np.arange(n_dev) * n_rows / n_dev, side="left")
    bounds = np.append(np.minimum(bounds, n_docs), n_docs)
    bounds = np.maximum.accumulate(bounds)
    parts_rows = [offsets[bounds[g + 1]] - offsets[bounds[g]] for g in range(n_dev)]
    rows = max(max(parts_rows), 1)
    docs = max(max(np.diff(bounds)), 1)
    if bucket:
        rows, docs = bucket_size(rows), bucket_size(docs)
    np_dtype = np.dtype(jnp.dtype(dtype).name)
    X_pad = np.zeros((n_dev * rows, d), np_dtype)
    w_pad = np.zeros(n_dev * rows)
    doc_pad = np.zeros(n_dev * rows, np.int32)
    row_id = np.zeros(n_dev * rows, np.int32)
    doc_weight = np.zeros(n_dev * docs)
    doc_index = np.empty(n_docs, np.int64)
    for g in range(n_dev):
        first, last = bounds[g], bounds[g + 1]
        r0, r1 = offsets[first], offsets[last]
        base = g * rows
        X_pad[base : base + r1 - r0] = X[r0:r1]
        w_pad[base : base + r1 - r0] = w[r0:r1]
        row_id[base : base + r1 - r0] = np.arange(r0, r1)
        lengths = np.diff(offsets[first : last + 1])
        local = np.repeat(np.arange(last - first, dtype=np.int32), lengths)
        doc_pad[base : base + r1 - r0] = local
        # padding rows join the device's last document (weight 0), keeping ids sorted
        doc_pad[base + r1 - r0 : base + rows] = max(last - first - 1, 0)
        if last > first:  # every document has at least one vector
            doc_weight[g * docs : g * docs + last - first] = np.add.reduceat(
                w[r0:r1], offsets[first:last] - r0
            )
        doc_index[first:last] = g * docs + np.arange(last - first)
    mesh = _parallel.make_mesh(devices)
    arrays = {"X": X_pad, "w": w_pad, "doc": doc_pad, "doc_weight": doc_weight}
    arrays["row_id"], arrays["doc_counts"] = row_id, np.diff(bounds).astype(np.int32)
    placed = _parallel.place(arrays, mesh)
    corpus = Corpus(placed["X"], placed["w"], placed["doc"], placed["doc_weight"])
    return ShardedCorpus(
        corpus, mesh, placed["row_id"], int(n_rows), doc_index, placed["doc_counts"]
    )


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
    axis_name: str | None = None,
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
        The chunk (padded, :func:`padded_corpus`).
    n_docs : int scalar
        Real documents in the chunk (the rest is padding); inside ``shard_map``
        (``axis_name`` set, :func:`_sharded_svi_step`) the count of this device's block.
    alpha, kappa_max, step_size, scale : float64 scalars
        alpha, the cap, rho_t, M_corpus / M_chunk.
    axis_name : str or None
        Set inside ``shard_map``: the chunk's statistics and bound are added over devices.

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
    log_c = special.log_vmf_normalizer(mu.shape[1], kappa)
    phi, weighted, bounds, _, _ = _local_step(
        corpus, mu, kappa, log_c, alpha, SVI_LOCAL_MAX_ITER, SVI_LOCAL_TOL
    )
    real = jnp.arange(phi.shape[0]) < jnp.reshape(n_docs, ())
    resp_sum, resultant, bound = _parallel.sum_over_axis(
        axis_name,
        weighted.sum(axis=0),
        _data_tdot(weighted, corpus.X),
        jnp.sum(jnp.where(real, bounds, 0.0)),
    )
    new = SVIStats(
        (1.0 - step_size) * stats.resp_sum + step_size * scale * resp_sum,
        (1.0 - step_size) * stats.resultant + step_size * scale * resultant,
    )
    mu, kappa, collapsed, _ = _m_step(new.resultant, new.resp_sum, mu, kappa, kappa_max)
    return new, mu, kappa, collapsed, phi, bound


#: one SVI step, one compiled program per bucketed chunk shape
_svi_step = jax.jit(svi_step)


@functools.cache
def _sharded_svi_step(mesh):
    """Return :func:`svi_step` with the chunk's documents sharded over ``mesh``.

    One jitted program per mesh (and bucketed chunk shape); ``n_docs`` holds each device's
    count of real documents.
    """
    rows = P(_parallel.AXIS)
    step = jax.shard_map(
        functools.partial(svi_step, axis_name=_parallel.AXIS),
        mesh=mesh,
        in_specs=(P(), P(), P(), Corpus(*(rows,) * 4), rows, P(), P(), P(), P()),
        out_specs=(P(), P(), P(), P(), rows, P()),
        # the local step's while_loop carries a per-device change: no replication typing
        check_vma=False,
    )
    return jax.jit(step)


# --------------------------------------------------------------------------------------------
# Collapsed Gibbs (theta and mu integrated out, kappa by Metropolis-Hastings)
# --------------------------------------------------------------------------------------------


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

    (doc_topic, topic_count, resultant), z = lax.scan(
        body, (state.doc_topic, state.topic_count, state.resultant), (X, doc, state.z, keys)
    )
    return state._replace(z=z, doc_topic=doc_topic, topic_count=topic_count, resultant=resultant)


def _kappa_log_target(d, log_kappa, topic_count, resultant, hyper):
    """Log of c_d(kappa)^{n_k} / c_d(|c0 mu0 + kappa s_k|) p(kappa) kappa (log-scale Jacobian)."""
    kappa = jnp.exp(log_kappa)
    b = hyper.prior_resultant + kappa[:, None] * resultant
    n_topics = kappa.shape[0]
    # one special-function call on both arguments (one compiled instance, not two)
    log_c = special.log_vmf_normalizer(d, jnp.concatenate([kappa, jnp.linalg.norm(b, axis=1)]))
    return (
        topic_count * log_c[:n_topics]
        - log_c[n_topics:]
        + hyper.kappa_shape * log_kappa
        - hyper.kappa_rate * kappa
    )


def gibbs_kappa_update(rng_key, state: GibbsState, hyper: GibbsHyper, d: int, adapt):
    """Update every kappa_k by ``KAPPA_MH_STEPS`` random-walk MH steps on log kappa_k.

    ``adapt`` (0 or 1, an array) moves log_step towards the acceptance rate
    ``KAPPA_MH_TARGET``; it is 1 during warm-up only, so the sampling phase is a fixed
    Markov kernel. Returns the new state and the mean acceptance probability per topic.
    """
    keys = jax.random.split(rng_key, KAPPA_MH_STEPS)

    def target(log_kappa):
        return _kappa_log_target(d, log_kappa, state.topic_count, state.resultant, hyper)

    def body(carry, key):
        # the target of the current point is carried (z is fixed during these steps), so
        # each step evaluates the special functions once, at the proposal
        log_kappa, current, log_step = carry
        key_prop, key_acc = jax.random.split(key)
        proposal = log_kappa + jnp.exp(log_step) * jax.random.normal(key_prop, log_kappa.shape)
        proposed = target(proposal)
        log_ratio = proposed - current
        log_ratio = jnp.where(jnp.exp(proposal) > hyper.kappa_max, -jnp.inf, log_ratio)
        accept_prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        accept = jax.random.uniform(key_acc, log_kappa.shape) < accept_prob
        log_kappa = jnp.where(accept, proposal, log_kappa)
        current = jnp.where(accept, proposed, current)
        log_step = log_step + adapt * 0.1 * (accept_prob - KAPPA_MH_TARGET)
        return (log_kappa, current, log_step), accept_prob

    log_kappa = jnp.log(state.kappa)
    (log_kappa, _, log_step), accept_prob = lax.scan(
        body, (log_kappa, target(log_kappa), state.log_step), keys
    )
    return state._replace(kappa=jnp.exp(log_kappa), log_step=log_step), accept_prob.mean(axis=0)


def collapsed_log_joint(state: GibbsState, hyper: GibbsHyper, d: int):
    """Return log p(X, z, kappa | alpha, mu0, c0) with theta and mu integrated out.

    Sum of the Dirichlet-multinomial terms of every document, the collapsed vMF marginal of
    every topic (module docstring) and the Gamma prior on kappa (up to its constant).
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
    kappa_prior = jnp.sum(
        (hyper.kappa_shape - 1.0) * jnp.log(state.kappa) - hyper.kappa_rate * state.kappa
    )
    return dirichlet + vmf + kappa_prior


class GibbsDraw(NamedTuple):
    """What one sweep records (per chain)."""

    kappa: Any
    mu: Any
    weights: Any
    lp: Any
    n_occupied: Any
    kappa_accept: Any


def _gibbs_chunk(keys, adapt, states, X, doc, hyper, theta_sum):
    """Run len(keys[0]) sweeps of every chain (vmapped); record one draw per sweep."""
    count_trace("dirichlet.gibbs_chunk")
    d = X.shape[1]

    def one_chain(chain_keys, chain_adapt, state, chain_theta_sum):
        def sweep(carry, inputs):
            state, theta_sum = carry
            key, a = inputs
            key_z, key_k = jax.random.split(key)
            state = gibbs_z_sweep(key_z, state, X, doc, hyper)
            state, accept = gibbs_kappa_update(key_k, state, hyper, d, a)
            b = hyper.prior_resultant + state.kappa[:, None] * state.resultant
            norm = jnp.linalg.norm(b, axis=1, keepdims=True)
            # mu given (z, kappa) is vMF(b_k / |b_k|, |b_k|); we record its mode
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
                collapsed_log_joint(state, hyper, d),
                jnp.sum(state.topic_count > 0),
                accept,
            )
            return (state, theta_sum), draw

        (state, chain_theta_sum), draws = lax.scan(
            sweep, (state, chain_theta_sum), (chain_keys, chain_adapt)
        )
        return state, chain_theta_sum, draws

    return jax.vmap(one_chain)(keys, adapt, states, theta_sum)


_gibbs_chunk_jit = jax.jit(_gibbs_chunk)


def _init_gibbs_state(rng_key, corpus: Corpus, vem_hyper: VEMHyper, n_topics: int):
    """Start a chain from a k-means++ crisp assignment (each chain from its own seeds)."""
    seed = init_vem_state(rng_key, corpus, vem_hyper, n_topics)
    z = jnp.argmax(corpus.X @ seed.mu.T, axis=1).astype(jnp.int32)
    n_docs = corpus.doc_weight.shape[0]
    doc_topic, topic_count, resultant = _statistics(corpus.X, corpus.doc, z, n_docs, n_topics)
    kappa = jnp.clip(seed.kappa, 1e-3, vem_hyper.kappa_max)
    kappa = jnp.where(topic_count > 0, kappa, 1.0)
    # explicit dtype: a weakly typed log_step would change type after the first chunk and
    # make _gibbs_chunk_jit compile twice
    log_step = jnp.full(n_topics, -1.0, dtype=kappa.dtype)
    return GibbsState(z, doc_topic, topic_count, resultant, kappa, log_step)


# --------------------------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------------------------


def _check_param(name, value, kind, low=None, high=None, low_open=False):
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        rng = ""
        if low is not None:
            rng = f" {'>' if low_open else '>='} {low}"
        raise ValueError(f"{name} must be a {kind_name(kind)}{rng}, got {value!r}")


def kind_name(kind) -> str:
    """Return a readable name for a numbers ABC (used in parameter error messages)."""
    return {numbers.Integral: "integer", numbers.Real: "number"}.get(kind, str(kind))


def _match_topics(reference, other):
    """Permutation p maximising sum_k reference_k . other_{p(k)} (Hungarian algorithm)."""
    _, cols = linear_sum_assignment(-(np.asarray(reference) @ np.asarray(other).T))
    return cols


class DirichletVMFMixture:
    r"""Dirichlet-vMF mixture over sets of vectors (VMFMix [1]_), by VEM or collapsed Gibbs.

    Each document is a set of unit vectors drawn from a document-specific mixture of K vMF
    topics shared by all documents: theta_i ~ Dir(alpha), z_ij ~ Cat(theta_i),
    x_ij ~ vMF(mu_{z_ij}, kappa_{z_ij}). ``inference="vem"`` maximises the bound of
    eqs. (5) + (8) of [1]_ over q and the topics (eqs. (9), (10)), with ``n_init``
    restarts; ``inference="gibbs"`` samples the collapsed posterior (module docstring).

    Parameters
    ----------
    n_topics : int
        K.
    alpha : float, default=0.1
        Symmetric Dirichlet parameter of theta_i.
    inference : {"vem", "gibbs"}, default="vem"
    n_init : int, default=4
        VEM restarts, each from its own key; the first whose final bound is within ``tol``
        per unit of weight of the best is kept (:func:`bayesvmf._mixture.best_run`).
    max_iter : int, default=200
        VEM iterations per restart.
    tol : float, default=1e-5
        VEM stops when the bound increases by at most ``tol`` per unit of vector weight.
    kappa_max : float, default=1e6
        Cap on the concentrations (a topic on a single repeated vector would diverge).
    num_chains : int, default=2
        Gibbs chains (vmapped; each has its own key and initialisation).
    num_warmup, num_samples : int, default=200, 200
        Gibbs sweeps discarded (MH step adapted) and kept per chain.
    mu_prior_concentration : float, default=0.0
        c0 of the vMF prior on mu_k (Gibbs); 0 is the uniform prior. mu0 is the direction of
        the weighted mean of the training vectors.
    kappa_prior : tuple of two floats, default=(1.0, 0.01)
        Gamma(shape, rate) prior of kappa_k (Gibbs).
    random_state : int or None, default=None
    progress_bar : bool, default=False
        Show a tqdm bar over VEM iterations or Gibbs chunks.
    normalize : bool, default=True
        Rescale the vectors to unit norm (with False they must already be unit norm).
    learning_decay : float in (0.5, 1], default=0.7
        The exponent a of the step sizes rho_t = (t + tau)^(-a) of :meth:`partial_fit`.
    learning_offset : float >= 0, default=1.0
        The offset tau of those step sizes (larger values damp the first steps).
    dtype : {"float64", "mixed"}, default="float64"
        "mixed" stores the vectors in float32 and runs the two data products X @ mu.T and
        resp.T @ X in float32 (VEM, SVI, transform, score); everything else (log-normalisers,
        digamma, softmax, kappa, the bound) stays float64. The cosines x'mu_k and the
        resultants r_k then carry float32 rounding (unit roundoff 6e-8, accumulated over the
        d terms of a product), the log-likelihood terms kappa_k mu_k' x about kappa_k times
        that. On the speed benchmark (N = 1e5, d = 100, K = 30) one mixed VEM step moved the
        bound by 5.8e-11 (relative), mu by 9.4e-8 and kappa by 2.8e-7 (relative) against
        float64 from the same state (benchmarks/results/dirichlet.md). The Gibbs sampler
        always runs in float64.
    devices : None, int or list of jax devices, default=None
        Data-parallel VEM (DESIGN.md section 6): the documents are split into one group of
        whole documents per device, about equal in vectors (:func:`shard_documents`);
        every device computes q(z) and phi of its documents and their statistics (n_k,
        r_k, the entropy of q(z), the theta part of the bound), which are added with
        ``psum``; the M-step runs replicated. The k-means++ draws of the initialisation
        follow the vectors' global order, so the fit equals the one-device fit to
        floating-point accuracy. An int n means the first n of ``jax.devices()``; None is
        the default device. ``fit`` and ``partial_fit`` (each chunk split over the devices,
        padded to bucket sizes) shard; ``transform``, ``score`` etc. run on the default
        device; Gibbs sampling is not sharded.

    Attributes
    ----------
    mean_directions_ : ndarray of shape (K, d)
    concentrations_ : ndarray of shape (K,)
    weights_ : ndarray of shape (K,)
        Share of the training weight in each topic.
    lower_bound_ : float
        Final bound (VEM, best restart); NaN for Gibbs.
    lower_bounds_ : ndarray
        The bound after each iteration of the best restart (VEM; empty for Gibbs).
    lower_bounds_all_ : list of ndarray
        The bound paths of every restart (VEM).
    n_iter_ : int
    converged_ : bool
    doc_topic_ : ndarray of shape (M, K)
        E[theta_i] of the training documents.
    samples_ : dict of ndarray
        Gibbs only: ``kappa`` (chain, draw, topic), ``mu`` (chain, draw, topic, feature),
        ``weights`` (chain, draw, topic), ``lp``, ``n_occupied``, ``kappa_accept``. Chains
        are relabelled to agree with chain 0 (Hungarian matching of mean directions).
    n_sets_seen_, n_steps_ : int
        VEM fits and :meth:`partial_fit`: documents seen (of the fit, or of the first chunk,
        and of the chunks since) and SVI steps done since. Absent after a Gibbs fit.

    References
    ----------
    .. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesvmf.models import DirichletVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> centers = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    >>> docs = [centers[rng.integers(2, size=8)] + 0.05 * rng.normal(size=(8, 3))
    ...         for _ in range(10)]
    >>> model = DirichletVMFMixture(2, n_init=1, random_state=0).fit(docs)
    >>> theta = model.transform(docs)
    >>> theta.shape, bool(np.allclose(theta.sum(axis=1), 1.0))
    ((10, 2), True)
    """

    def __init__(
        self,
        n_topics: int,
        *,
        alpha: float = 0.1,
        inference: str = "vem",
        n_init: int = 4,
        max_iter: int = 200,
        tol: float = 1e-5,
        kappa_max: float = 1e6,
        num_chains: int = 2,
        num_warmup: int = 200,
        num_samples: int = 200,
        mu_prior_concentration: float = 0.0,
        kappa_prior: tuple[float, float] = (1.0, 0.01),
        random_state: int | None = None,
        progress_bar: bool = False,
        normalize: bool = True,
        learning_decay: float = 0.7,
        learning_offset: float = 1.0,
        dtype: str = "float64",
        devices=None,
    ):
        self.n_topics = n_topics
        self.alpha = alpha
        self.inference = inference
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.kappa_max = kappa_max
        self.num_chains = num_chains
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.mu_prior_concentration = mu_prior_concentration
        self.kappa_prior = kappa_prior
        self.random_state = random_state
        self.progress_bar = progress_bar
        self.normalize = normalize
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.dtype = dtype
        self.devices = devices

    # ---------------------------------------------------------------- persistence
    #: fitted arrays and JSON scalars written by :func:`bayesvmf.save` (``_get_state``);
    #: ``lower_bounds_all_`` (a ragged list) and ``samples_`` (a dict) are flattened below
    _fitted_arrays = (
        "mean_directions_",
        "concentrations_",
        "weights_",
        "doc_topic_",
        "lower_bounds_",
        "collapsed_",
    )
    _fitted_scalars = (
        "lower_bound_",
        "n_iter_",
        "converged_",
        "n_features_",
        "n_sets_seen_",
        "n_steps_",
    )

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Return the constructor arguments as a dict (scikit-learn convention)."""
        del deep
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params) -> DirichletVMFMixture:
        """Set constructor arguments (validated at the next ``fit``); return ``self``."""
        return _mixture.set_params(self, list(self.get_params()), params)

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return (arrays, JSON scalars) of the fitted attributes, for :func:`bayesvmf.save`."""
        arrays = {n: np.asarray(getattr(self, n)) for n in self._fitted_arrays if hasattr(self, n)}
        scalars = {}
        for name in self._fitted_scalars:
            if hasattr(self, name):
                value = getattr(self, name)
                scalars[name] = value.item() if isinstance(value, np.generic) else value
        if hasattr(self, "lower_bounds_all_"):
            runs = [np.asarray(r, dtype=np.float64) for r in self.lower_bounds_all_]
            arrays["lower_bounds_all_"] = np.concatenate(runs) if runs else np.zeros(0)
            arrays["lower_bounds_all_lengths"] = np.array([len(r) for r in runs], np.int64)
        for name, value in getattr(self, "samples_", {}).items():
            arrays[f"samples_{name}"] = np.asarray(value)
        return arrays, scalars

    def _set_state(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Restore the fitted attributes written by :meth:`_get_state`."""
        arrays = dict(arrays)
        if "lower_bounds_all_" in arrays:
            flat = arrays.pop("lower_bounds_all_")
            lengths = arrays.pop("lower_bounds_all_lengths", None)
            if lengths is None or int(np.sum(lengths)) != flat.shape[0]:
                raise ValueError("lower_bounds_all_ does not match lower_bounds_all_lengths")
            self.lower_bounds_all_ = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
        samples = {
            k[len("samples_") :]: arrays.pop(k) for k in list(arrays) if k.startswith("samples_")
        }
        if samples:
            unknown = set(samples) - set(GibbsDraw._fields)
            if unknown:
                raise ValueError(f"unexpected fitted attribute samples_{sorted(unknown)[0]}")
            self.samples_ = samples
        for name, value in {**scalars, **arrays}.items():
            if name not in self._fitted_arrays + self._fitted_scalars:
                raise ValueError(f"unexpected fitted attribute {name!r}")
            setattr(self, name, value)

    # ---------------------------------------------------------------- validation
    def _validate_params(self) -> None:
        _check_param("n_topics", self.n_topics, numbers.Integral, 1)
        _check_param("alpha", self.alpha, numbers.Real, 0.0, low_open=True)
        if self.dtype not in ("float64", "mixed"):
            raise ValueError(f"dtype must be 'float64' or 'mixed', got {self.dtype!r}")
        if self.inference not in ("vem", "gibbs"):
            raise ValueError(f"inference must be 'vem' or 'gibbs', got {self.inference!r}")
        _check_param("n_init", self.n_init, numbers.Integral, 1)
        _check_param("max_iter", self.max_iter, numbers.Integral, 1)
        _check_param("tol", self.tol, numbers.Real, 0.0)
        _check_param("kappa_max", self.kappa_max, numbers.Real, 0.0, low_open=True)
        _check_param("num_chains", self.num_chains, numbers.Integral, 1)
        _check_param("num_warmup", self.num_warmup, numbers.Integral, 0)
        _check_param("num_samples", self.num_samples, numbers.Integral, 1)
        _check_param("mu_prior_concentration", self.mu_prior_concentration, numbers.Real, 0.0)
        _check_param("learning_decay", self.learning_decay, numbers.Real, 0.5, 1.0, low_open=True)
        _check_param("learning_offset", self.learning_offset, numbers.Real, 0.0)
        prior = self.kappa_prior
        if not (
            isinstance(prior, tuple | list)
            and len(prior) == 2
            and all(isinstance(v, numbers.Real) and v > 0 for v in prior)
        ):
            raise ValueError(
                f"kappa_prior must be two positive numbers (shape, rate), got {prior!r}"
            )
        if self.random_state is not None and not isinstance(self.random_state, numbers.Integral):
            raise ValueError(f"random_state must be an integer or None, got {self.random_state!r}")
        if not _parallel.DevicesOption().check(self.devices):
            raise TypeError(
                f"devices must be {_parallel.DevicesOption().describe()}, got {self.devices!r}"
            )
        _parallel.resolve_devices(self.devices)  # before anything of the fitted model changes
        if self.devices is not None and self.inference != "vem":
            raise ValueError(
                f"devices={self.devices!r} shards variational EM; the collapsed Gibbs sampler "
                "visits the tokens one after another on one device: use devices=None with "
                "inference='gibbs'"
            )

    def _product_dtype(self):
        return jnp.float32 if self.dtype == "mixed" else jnp.float64

    def _check_is_fitted(self) -> None:
        if not hasattr(self, "mean_directions_"):
            raise ValueError(
                "this DirichletVMFMixture is not fitted yet: call fit(docs) before this method"
            )

    def _corpus(self, docs, weights, *, fitted: bool):
        n_features = self.mean_directions_.shape[1] if fitted else None
        X, w, offsets = _check_documents(
            docs, weights, normalize=self.normalize, n_features=n_features
        )
        return X, w, offsets

    # ---------------------------------------------------------------- fit
    def fit(self, docs, weights=None) -> DirichletVMFMixture:
        """Fit the topics to documents.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
            The documents, each a set of vectors (rows); lengths may differ.
        weights : list of array-like of shape (n_i,), optional
            Nonnegative count of each vector (whole numbers for ``inference="gibbs"``).

        Returns
        -------
        self
        """
        self._validate_params()
        self._fit_new(docs, weights)
        return self

    def _fit_new(self, docs, weights):
        """Validate documents against nothing fitted and fit; return the checked (X, w, offsets)."""
        X, w, offsets = self._corpus(docs, weights, fitted=False)
        if X.shape[0] < self.n_topics:
            raise ValueError(
                f"docs hold {X.shape[0]} vectors in total, fewer than n_topics={self.n_topics}"
            )
        key = jax.random.key(0 if self.random_state is None else int(self.random_state))
        if self.random_state is None:
            key = jax.random.key(np.random.default_rng().integers(2**31))
        # a new fit forgets any stream; a VEM fit starts its own (see _fit_vem)
        self._online = None
        for name in ("n_sets_seen_", "n_steps_"):
            self.__dict__.pop(name, None)
        with jax.enable_x64(True):
            if self.inference == "vem":
                self._fit_vem(key, X, w, offsets)
            else:
                self._fit_gibbs(key, X, w, offsets)
        return X, w, offsets

    def partial_fit(self, docs, weights=None, *, n_sets: int | None = None):
        r"""Update the topics with one chunk of documents: stochastic variational inference.

        SVI of Hoffman et al. [5]_ (Algorithm 1) over chunks of whole documents. Local step:
        q(theta_i) and q(z_i) of the chunk's documents, eq. (9) of [1]_ iterated to
        convergence with the topics held fixed. Global step: the natural statistics of the
        topics, s = (n_{..k}, r_k) of eqs. (6), (7), move towards the chunk's statistics
        scaled to the corpus, s_t = (1 - rho_t) s_{t-1} + rho_t (M / M_chunk) s(chunk), with
        rho_t = (t + ``learning_offset``)^(-``learning_decay``) for the t-th update (a in
        (0.5, 1]: sum rho_t infinite, sum rho_t^2 finite, the Robbins-Monro conditions of
        the convergence argument); mu and kappa are the batch M-step of s_t (eq. (10),
        kappa solved exactly). See :func:`svi_step`.

        The first call on an unfitted model (or one restored by :func:`bayesvmf.load`, which
        carries no stream state) initialises from the first chunk: a batch VEM fit of it
        (``n_init`` restarts, ``max_iter``, ``tol``; it needs at least ``n_topics`` vectors),
        followed by one SVI step with rho = 1, which sets the running statistics to the
        chunk's. A model fitted by VEM continues from the statistics of that fit, with t
        counted from it.
        Chunks are padded to a few bucket sizes (vectors and documents, at most 41% padding,
        weight 0), so a stream of similar chunks compiles a few programs and then none.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
            The chunk: whole documents (sets of vectors).
        weights : list of array-like of shape (n_i,), optional
            Nonnegative count of each vector.
        n_sets : int or None, default=None
            Number of documents M of the corpus the chunks come from (the scale M / M_chunk).
            None uses the documents seen so far, ``n_sets_seen_`` (an endless stream).

        Returns
        -------
        self

        Notes
        -----
        After a call, ``doc_topic_`` holds E[theta_i] of the chunk's documents and
        ``lower_bound_`` the chunk's bound (5) + (8) per unit of vector weight, both at the
        topics before the update; ``weights_`` is the running share n_{..k} / sum n_{..k}.
        Only ``inference="vem"`` streams. ``fit`` forgets the stream (a VEM fit starts a new
        one from its own statistics). A call whose chunk fails validation raises and leaves
        the model unchanged.
        """
        online = getattr(self, "_online", None)
        first = online is None
        # every call: set_params may have changed anything since the last one
        self._validate_params()
        if self.inference != "vem":
            raise ValueError(
                f"partial_fit needs inference='vem' (stochastic VI), got {self.inference!r}"
            )
        if not first and online[1].shape[0] != self.n_topics:
            raise ValueError(
                f"n_topics={self.n_topics} differs from the {online[1].shape[0]} topics of the "
                "stream this model carries; restore n_topics or call fit to start anew"
            )
        if n_sets is not None and (
            not isinstance(n_sets, numbers.Integral) or isinstance(n_sets, bool) or n_sets < 1
        ):
            raise ValueError(f"n_sets must be None or an integer >= 1, got {n_sets!r}")
        # the counters change only once the step has succeeded: a chunk that fails
        # validation leaves the model as it was
        if first:
            X, w, offsets = self._fit_new(docs, weights)
            online, n_steps, step_size = self._online, 0, 1.0
            n_seen = len(offsets) - 1
        else:
            X, w, offsets = self._corpus(docs, weights, fitted=True)
            n_steps = self.n_steps_ + 1
            step_size = (n_steps + self.learning_offset) ** (-self.learning_decay)
            n_seen = self.n_sets_seen_ + len(offsets) - 1
        n_chunk = len(offsets) - 1
        corpus_sets = n_seen if n_sets is None else n_sets
        devices = _parallel.resolve_devices(self.devices)
        with jax.enable_x64(True):
            if devices is None:
                corpus, n_docs = padded_corpus(X, w, offsets, self._product_dtype())
                step, doc_counts, doc_index = _svi_step, jnp.int32(n_docs), np.arange(n_docs)
            else:
                sharded = shard_documents(
                    X, w, offsets, devices, self._product_dtype(), bucket=True
                )
                corpus, step = sharded.corpus, _sharded_svi_step(sharded.mesh)
                doc_counts, doc_index = sharded.doc_counts, sharded.doc_index
            stats, mu, kappa, collapsed, phi, bound = step(
                *online,
                corpus,
                doc_counts,
                jnp.float64(self.alpha),
                jnp.float64(self.kappa_max),
                jnp.float64(step_size),
                jnp.float64(corpus_sets / n_chunk),
            )
            self._online = (stats, mu, kappa)
            resp_sum = np.asarray(stats.resp_sum)
            phi = np.asarray(phi)[doc_index]
            self.mean_directions_ = np.asarray(mu)
            self.concentrations_ = np.asarray(kappa)
            self.collapsed_ = np.asarray(collapsed)
            self.weights_ = resp_sum / resp_sum.sum()
            self.doc_topic_ = phi / phi.sum(axis=1, keepdims=True)
            self.lower_bound_ = float(bound) / float(w.sum())
        self.n_sets_seen_, self.n_steps_ = n_seen, n_steps
        if not first:
            self.n_iter_ += 1
        return self

    def _progress(self, total, desc):
        if not self.progress_bar:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc)

    def _fit_vem(self, key, X, w, offsets) -> None:
        devices = _parallel.resolve_devices(self.devices)
        hyper = VEMHyper(jnp.float64(self.alpha), jnp.float64(self.kappa_max))
        if devices is None:
            corpus, step = prepare_corpus(X, w, offsets, self._product_dtype()), _vem_step
            rows, doc_index = {}, None
        else:
            sharded = shard_documents(X, w, offsets, devices, self._product_dtype())
            corpus, step = sharded.corpus, _sharded_vem_step(sharded.mesh)
            rows = {"row_id": sharded.row_id, "n_real": sharded.n_real}
            doc_index = sharded.doc_index
        total = float(w.sum())
        runs, all_bounds = [], []
        for r, run_key in enumerate(jax.random.split(key, self.n_init)):
            state = init_vem_state(run_key, corpus, hyper, int(self.n_topics), **rows)
            bounds, converged = [], False
            bar = self._progress(self.max_iter, f"VEM restart {r + 1}/{self.n_init}")
            for _ in range(self.max_iter):
                state, info = step(state, corpus, hyper)
                bounds.append(float(info.lower_bound))
                if bar is not None:
                    bar.update()
                if len(bounds) > 1 and abs(bounds[-1] - bounds[-2]) <= self.tol * total:
                    converged = True
                    break
            if bar is not None:
                bar.close()
            all_bounds.append(np.array(bounds))
            runs.append((state, bounds, converged, info))
        # the first restart within tol (per unit of weight) of the best: near-ties are one
        # optimum, and the choice must not hang on rounding (e.g. the device count)
        best = _mixture.best_run([b[-1] for b in all_bounds], self.tol * total)
        state, bounds, converged, info = runs[best]
        if not converged:
            warnings.warn(
                f"DirichletVMFMixture (vem): the best of {self.n_init} restarts did not converge "
                f"in max_iter={self.max_iter} iterations (last bound change "
                f"{abs(bounds[-1] - bounds[-2]) / total if len(bounds) > 1 else np.inf:.3g} "
                f"per vector > tol={self.tol}); increase max_iter or tol",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.mean_directions_ = np.asarray(state.mu)
        self.concentrations_ = np.asarray(state.kappa)
        phi = np.asarray(state.phi)
        if doc_index is not None:  # the real documents of the sharded table, in order
            phi = phi[doc_index]
        self.doc_topic_ = phi / phi.sum(axis=1, keepdims=True)
        resp_sum = np.asarray(info.resp_sum)
        self.weights_ = resp_sum / resp_sum.sum()
        self.lower_bounds_ = np.array(bounds)
        self.lower_bounds_all_ = all_bounds
        self.lower_bound_ = bounds[-1]
        self.n_iter_ = len(bounds)
        self.converged_ = converged
        self.collapsed_ = np.asarray(info.collapsed)
        # the statistics of eqs. (6), (7) behind the returned topics: partial_fit continues
        # from them (SVI step t = 1, 2, ... after this fit)
        self._online = (
            SVIStats(
                jnp.asarray(info.resp_sum, jnp.float64), jnp.asarray(info.resultant, jnp.float64)
            ),
            jnp.asarray(state.mu, jnp.float64),
            jnp.asarray(state.kappa, jnp.float64),
        )
        self.n_sets_seen_, self.n_steps_ = len(offsets) - 1, 0

    def _fit_gibbs(self, key, X, w, offsets) -> None:
        if not np.allclose(w, np.round(w)):
            j = int(np.flatnonzero(~np.isclose(w, np.round(w)))[0])
            i = int(np.searchsorted(offsets, j, side="right") - 1)
            raise ValueError(
                f"weights[{i}] must hold whole numbers (counts) for inference='gibbs'; "
                f"position {j - offsets[i]} is {w[j]!r}"
            )
        # a vector of count w is w tokens, each with its own topic
        counts = np.round(w).astype(np.int64)
        lengths = np.array(
            [counts[offsets[i] : offsets[i + 1]].sum() for i in range(len(offsets) - 1)]
        )
        Xt = np.repeat(X, counts, axis=0)
        tok_offsets = np.concatenate([[0], np.cumsum(lengths)])
        corpus = prepare_corpus(Xt, np.ones(len(Xt)), tok_offsets)
        d = X.shape[1]
        mean = (w[:, None] * X).sum(axis=0)
        mu0 = mean / max(np.linalg.norm(mean), np.finfo(float).tiny)
        hyper = GibbsHyper(
            jnp.float64(self.alpha),
            jnp.asarray(self.mu_prior_concentration * mu0, jnp.float64),
            jnp.float64(self.kappa_prior[0]),
            jnp.float64(self.kappa_prior[1]),
            jnp.float64(self.kappa_max),
        )
        vem_hyper = VEMHyper(hyper.alpha, hyper.kappa_max)
        k_init, k_run = jax.random.split(key)
        init_keys = jax.random.split(k_init, self.num_chains)
        states = [_init_gibbs_state(k, corpus, vem_hyper, int(self.n_topics)) for k in init_keys]
        states = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        n_total = self.num_warmup + self.num_samples
        n_chunks = -(-n_total // GIBBS_CHUNK)
        adapt_all = (np.arange(n_chunks * GIBBS_CHUNK) < self.num_warmup).astype(np.float64)
        # sweeps past n_total (chunk rounding) must not enter the theta average either
        keep = (np.arange(n_chunks * GIBBS_CHUNK) < n_total).astype(np.float64)
        adapt_all = np.where(keep > 0, adapt_all, 1.0)
        theta_sum = jnp.zeros((self.num_chains,) + corpus.doc_weight.shape + (self.n_topics,))
        chunk_keys = jax.random.split(k_run, n_chunks * self.num_chains * GIBBS_CHUNK).reshape(
            n_chunks, self.num_chains, GIBBS_CHUNK
        )
        draws = []
        bar = self._progress(n_chunks, "Gibbs")
        for c in range(n_chunks):
            adapt = jnp.asarray(adapt_all[c * GIBBS_CHUNK : (c + 1) * GIBBS_CHUNK])
            adapt = jnp.broadcast_to(adapt, (self.num_chains, GIBBS_CHUNK))
            states, theta_sum, chunk = _gibbs_chunk_jit(
                chunk_keys[c], adapt, states, corpus.X, corpus.doc, hyper, theta_sum
            )
            draws.append(jax.tree.map(np.asarray, chunk))
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.close()
        draws = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *draws)
        sel = slice(self.num_warmup, n_total)
        samples = {name: getattr(draws, name)[:, sel] for name in GibbsDraw._fields}
        theta = np.asarray(theta_sum) / self.num_samples
        # relabel every chain to agree with chain 0 (label switching between chains)
        ref = samples["mu"][0].mean(axis=0)
        for c in range(1, self.num_chains):
            perm = _match_topics(ref, samples["mu"][c].mean(axis=0))
            for name in ("kappa", "mu", "weights", "kappa_accept"):
                samples[name][c] = samples[name][c][:, perm]
            theta[c] = theta[c][:, perm]
        self.samples_ = samples
        mean_mu = samples["mu"].mean(axis=(0, 1))
        self.mean_directions_ = mean_mu / np.linalg.norm(mean_mu, axis=1, keepdims=True)
        self.concentrations_ = samples["kappa"].mean(axis=(0, 1))
        self.weights_ = samples["weights"].mean(axis=(0, 1))
        self.doc_topic_ = theta.mean(axis=0)
        self.lower_bounds_ = np.array([])
        self.lower_bounds_all_ = []
        self.lower_bound_ = float("nan")
        self.n_iter_ = n_total
        self.converged_ = True
        self.n_features_ = d

    # ---------------------------------------------------------------- use
    def _e_step(self, docs, weights):
        self._check_is_fitted()
        X, w, offsets = self._corpus(docs, weights, fitted=True)
        with jax.enable_x64(True):
            corpus = prepare_corpus(X, w, offsets, self._product_dtype())
            phi, bounds, _, _ = e_step_documents(
                corpus, self.mean_directions_, self.concentrations_, self.alpha
            )
            return np.asarray(phi), np.asarray(bounds), w, offsets

    def transform(self, docs, weights=None) -> np.ndarray:
        """Return the topic proportions E_q[theta_i] of documents (rows sum to 1).

        Runs the E-step (eq. (9) of [1]_) with the fitted topics held fixed, to convergence.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
        weights : list of array-like of shape (n_i,), optional

        Returns
        -------
        ndarray of shape (n_documents, K)
        """
        phi, _, _, _ = self._e_step(docs, weights)
        return phi / phi.sum(axis=1, keepdims=True)

    def score_documents(self, docs, weights=None) -> np.ndarray:
        """Return, per document, the bound (5) + (8) on log p(x_i | alpha, mu, kappa)."""
        return self._e_step(docs, weights)[1]

    def score(self, docs, weights=None) -> float:
        """Return the held-out log-likelihood per vector (a variational lower bound).

        sum_i L_i / sum_ij w_ij, where L_i is the bound (5) + (8) of document i with q fitted
        to that document alone and the topics held fixed; L_i <= log p(x_i | alpha, mu,
        kappa) with theta_i and z_i integrated out, so nothing of a held-out document is
        seen twice.

        Parameters
        ----------
        docs : list of array-like of shape (n_i, d)
        weights : list of array-like of shape (n_i,), optional

        Returns
        -------
        float
        """
        _, bounds, w, _ = self._e_step(docs, weights)
        return float(bounds.sum() / w.sum())

    def top_items(self, vocabulary, n: int = 10, labels=None) -> list[list[tuple[Any, float]]]:
        """List, for each topic, the ``n`` items (e.g. words) nearest to its mean direction.

        Parameters
        ----------
        vocabulary : array-like of shape (V, d)
            Item vectors (normalised here; zero rows never rank).
        n : int, default=10
        labels : sequence of length V, optional
            Item names; by default the row indices.

        Returns
        -------
        list of K lists of (label, cosine) pairs, best first.
        """
        self._check_is_fitted()
        V = np.asarray(vocabulary, dtype=np.float64)
        if V.ndim != 2 or V.shape[1] != self.mean_directions_.shape[1]:
            raise ValueError(
                f"vocabulary must have shape (V, {self.mean_directions_.shape[1]}), got {V.shape}"
            )
        if labels is not None and len(labels) != V.shape[0]:
            raise ValueError(f"labels has {len(labels)} entries, vocabulary has {V.shape[0]} rows")
        norms = np.linalg.norm(V, axis=1)
        cos = (V @ self.mean_directions_.T) / np.where(norms > 0, norms, np.inf)[:, None]
        out = []
        for k in range(cos.shape[1]):
            order = np.argsort(-cos[:, k], kind="stable")[:n]
            out.append(
                [(labels[j] if labels is not None else int(j), float(cos[j, k])) for j in order]
            )
        return out

    def to_arviz(self):
        """Return the Gibbs draws as an ``arviz.InferenceData`` (dims chain, draw, topic, feature).

        ``posterior`` holds ``mu`` (the conditional mode of mu_k given z and kappa), ``kappa``
        and ``weights``; ``sample_stats`` holds ``lp`` (collapsed log joint), ``n_occupied``
        and ``kappa_accept``.
        """
        self._check_is_fitted()
        if not hasattr(self, "samples_"):
            raise ValueError("to_arviz needs draws: fit with inference='gibbs'")
        import arviz as az

        s = self.samples_
        coords = {
            "topic": np.arange(s["kappa"].shape[2]),
            "feature": np.arange(s["mu"].shape[3]),
        }
        dims = {
            "mu": ["topic", "feature"],
            "kappa": ["topic"],
            "weights": ["topic"],
            "kappa_accept": ["topic"],
        }
        return az.from_dict(
            posterior={"mu": s["mu"], "kappa": s["kappa"], "weights": s["weights"]},
            sample_stats={
                "lp": s["lp"],
                "n_occupied": s["n_occupied"],
                "kappa_accept": s["kappa_accept"],
            },
            coords=coords,
            dims=dims,
        )
