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

from bayesvmf.models.dirichlet._corpus import Corpus, padded_corpus, prepare_corpus
from bayesvmf.models.dirichlet._estimator import DirichletVMFMixture
from bayesvmf.models.dirichlet._gibbs import (
    GibbsHyper,
    GibbsState,
    collapsed_log_joint,
    gibbs_kappa_update,
    gibbs_z_sweep,
)
from bayesvmf.models.dirichlet._svi import SVIStats, svi_step
from bayesvmf.models.dirichlet._vem import (
    VEMHyper,
    VEMInfo,
    VEMState,
    document_bounds,
    e_step_documents,
    init_vem_state,
    vem_step,
)

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

# Saved models (bayesvmf.save, the CLI) and pickles name the class by its public path, as
# before the family became a package, so files written before and after load alike (a
# literal: pytest imports this file a second time as `models.dirichlet` for its doctests).
DirichletVMFMixture.__module__ = "bayesvmf.models.dirichlet"
