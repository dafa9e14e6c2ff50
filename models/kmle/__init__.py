r"""k-MLE with Hartigan moves for Wishart and vMF mixtures, DP-k-MLE++, Cauchy-Schwarz.

A mixture :math:`m(x) = \sum_j w_j p_F(x; \theta_j)` of one exponential family
:math:`p_F(x; \theta) = \exp\{\langle t(x), \theta\rangle + k(x) - F(\theta)\}` is fitted by
k-MLE [1]_, [2]_: a hard partition :math:`z` of the sample and one maximum-likelihood
estimate per cluster, so that the *complete* log-likelihood

.. math::

    \ell(z, w, \theta) = \sum_{i=1}^N \log w_{z_i} + \log p_F(X_i; \theta_{z_i})

increases at every step (the minimisation of :math:`\mathrm{kmeans}_{F^*, \log w}` in sec.
3.1 of [1]_). Two families are provided: the Wishart distribution on symmetric positive
definite (SPD) matrices (sec. 2 of [1]_) and the von Mises-Fisher (vMF) distribution on the
unit sphere (through the package's shared :mod:`bayesvmf.special`, the functions that
:class:`bayesvmf.distribution.VonMisesFisher` uses).

Symbols (paper -> code)
-----------------------
=======================  ==================  ==========================================
paper [1]_               code                meaning
=======================  ==================  ==========================================
:math:`X_i`              ``X[i]``            an SPD matrix (Wishart) / unit vector (vMF)
:math:`n`                ``dof``             Wishart degrees of freedom, :math:`n > d-1`
                                             (fitted: :math:`n \ge` ``min_dof`` :math:`> d`)
:math:`S`                ``scale``           Wishart scale matrix
:math:`\theta_n`         ``theta_n``         :math:`(n - d - 1)/2`
:math:`\theta_S`         ``theta_s``         :math:`S^{-1}` (the precision)
:math:`t(X)`             ``stats``           :math:`(\log|X|, -X/2)`, stored as
                                             :math:`(\log|X|, X)` rows
:math:`F`                ``log_normalizer``  eq. (1)
:math:`\Psi_d`           multivariate        :math:`\frac{d}{dx}\log\Gamma_d(x)`
                         digamma
:math:`w_j`              ``weights``         mixture weights :math:`|C_j|/N`
:math:`z_i`              ``labels``          hard assignment
:math:`|C_j|`            ``counts``          cluster sizes
:math:`\lambda`          ``lam``             DP-k-MLE++ threshold (Algorithm 3)
:math:`\mu, \kappa`      ``mu, kappa``       vMF mean direction and concentration
=======================  ==================  ==========================================

Implementation choices
----------------------
* **Wishart MLE.** Algorithm 1 of [1]_ alternates the scale step (eq. 4) and the
  degrees-of-freedom step (eq. 5) and is provided as :func:`wishart_mle`. Substituting
  eq. (4) into eq. (5) shows that its fixed point solves the one-dimensional equation
  :math:`\Psi_d(n/2) - d\log(n/2) = \overline{\log|X|} - \log|\bar X|` (the right side is
  :math:`\le 0` by concavity of log-det, the left side increases from :math:`-\infty` to
  0). The alternation converges only linearly with rate :math:`1 - O(1/n)` (hundreds of
  sweeps for :math:`n \approx 100`), so k-MLE, which needs a cluster MLE after every
  transfer, solves that equation directly with the same bracketed root finder
  (:func:`wishart_mle_from_stats`); the tests check that both give the same estimate and
  that it maximises the likelihood. A cluster of identical matrices (e.g. a singleton)
  has an unbounded likelihood (:math:`n \to \infty`), so ``dof`` is capped at ``max_dof``;
  the capped value is the exact constrained maximiser (the profile likelihood in
  :math:`n` is unimodal), so monotonicity is kept.
* **Degrees of freedom above d.** The family needs :math:`n > d - 1`, but the
  Cauchy-Schwarz divergence (sec. 4) needs more. :math:`\int p_j p'_{j'}` is
  :math:`\exp\{F(\theta_j + \theta'_{j'}) - F(\theta_j) - F(\theta'_{j'})\}`, finite only
  while :math:`\theta_j + \theta'_{j'}` stays in the natural parameter space:
  :math:`\theta_{n,j} + \theta'_{n,j'} > -1`, i.e. :math:`n_j + n'_{j'} > 2d`. The
  self-integral :math:`\int m^2` contains :math:`j = j'`, so :math:`n_j > d` for every
  component is necessary, and it is sufficient for every pair. The unconstrained MLE
  violates it on ordinary data (:math:`n = 5.98` for :math:`d = 6` on 20-sample windows of
  BasicMotions, where a cluster mixes windows of very different energy). :class:`KMLEMixture`
  therefore fits :math:`n_j \in [\text{min\_dof}, \text{max\_dof}]` with ``min_dof`` above
  :math:`d` (default :math:`d + 1`, the margin is explained there); as with ``max_dof``, the
  bound is the exact constrained maximiser, so k-MLE stays monotone.
* **Hartigan moves (Algorithm 2).** Sec. 3.2 of [1]_ replaces the unknown
  :math:`B_{F^*}(t(X_i) : \eta_j) - \log w_j` by :math:`-\log p_F(X_i; \theta_j) - \log
  w_j`, which is what is done here for both families. A move of :math:`X_i` to the
  cluster maximising :math:`\log w_j + \log p_F(X_i;\theta_j)` raises :math:`\ell` by the
  gain, re-estimating the two clusters' MLEs raises it further, and updating the weights
  after a pass raises it again, so :math:`\ell` never decreases (tested after every
  single transfer). Points of singleton clusters never move (line 11).
* **Where the work runs.** The whole inner loop of Algorithm 2 (random permutation, the
  next point that wants to move, the transfer, the incremental update of the two
  clusters' summed sufficient statistics, their MLEs and the two columns of the
  :math:`N \times K` log-likelihood matrix) is one jitted ``lax.while_loop``
  (:func:`hartigan_sweep`), run in float64 under a scoped ``jax.enable_x64(True)``. The
  visit order of the paper is kept exactly: all points whose best move does not improve
  are skipped at once with a vectorised mask, because the parameters do not change
  between their visits. Per transfer the cost is :math:`O(NK + Np)` vectorised work
  (:math:`p = 1 + d^2` for Wishart) and no host round-trip; a pass without transfers
  costs :math:`O(NK)`. The Wishart log-likelihood matrix is one matrix product of the
  rows :math:`(\log|X_i|, \mathrm{vec} X_i)` with the natural parameters, i.e. the
  exponential-family form :math:`\langle t(X), \theta\rangle - F(\theta)`. The seeding
  (Algorithm 3) is sequential in :math:`K` and small, so it runs in NumPy/SciPy.
* **Compilation.** XLA compiles one program per array shape, which costs seconds, while a
  fit of a few hundred matrices runs in milliseconds. The state is therefore padded to
  bucketed sizes, both rows (:math:`N`, at most 25 % more, minimum 16) and components
  (:math:`K`, minimum 4). Padded rows are masked out, and unused components have weight 0,
  so they never receive a point. Fits of nearby sizes (series of different lengths,
  DP-k-MLE++ choosing different K) then reuse one compiled program, and the result is
  unchanged. Input checks (Cholesky) and the Cauchy-Schwarz matrices run on the host in
  NumPy/LAPACK, vectorised over all pairs of mixtures.
* **Seeding divergence.** Algorithm 3 needs :math:`B_{F^*}` between single observations,
  where the full-family MLE is degenerate. Following sec. 3.2 of [1]_ ("mixing
  :math:`B_{F^*}` and :math:`B_{F^*_{\underline n}}`"), the seeding uses the Bregman
  divergence of the sub-family whose shape parameter is held fixed: for Wishart (fixed
  :math:`n`) that is :math:`\frac n2 [\mathrm{tr}(X_s^{-1}X_i) - \log|X_s^{-1}X_i| - d]`,
  for vMF (fixed :math:`\kappa`) :math:`\kappa(1 - \mu_s^\top x_i)`. The positive factor
  cancels in the shares :math:`p_i` of Algorithm 3, so no value of :math:`n` or
  :math:`\kappa` has to be chosen.
* **Choosing K (DP-k-MLE++).** Algorithm 3 as printed (``dp_rule="share"``) adds a seed
  while one point's share of the loss (6) exceeds :math:`\lambda`; measured on three
  synthetic Wishart clusters it recovers K = 3 for at most 25 % of the seeds for any
  :math:`\lambda` (``benchmarks/results/kmle.md``; the reason is under ``lam`` in
  :class:`KMLEMixture`). The default ``dp_rule="gain"`` (:func:`dp_kmle_gain`) keeps the
  greedy, D-sampled seeding and the loss (6) but changes what is compared with
  :math:`\lambda`: the fraction of the current loss that a new cluster removes, with the
  clusters refined by Bregman k-means (Lloyd's iterations; the cluster mean is the Bregman
  centroid of the same divergence) before and after the addition. This is the DP-means
  criterion [4]_ (a new cluster must pay for itself), made scale free. Against fitted
  centroids the divergence is no longer heavy-tailed, and a missing cluster removes a
  large fraction of the loss (at least 0.476 on the benchmark's three sets of 3 x 3
  matrices) while splitting a found one removes little (at most 0.129 there).
* **Cauchy-Schwarz divergence** (sec. 4 of [1]_) uses the square root in the
  denominator, :math:`CS(m:m') = -\log \int m m' / \sqrt{\int m^2 \int m'^2}`, so that
  :math:`CS(m:m) = 0`; the paper prints it without the root, which is neither zero on
  the diagonal nor scale invariant.
* **Never an explicit inverse.** Log-determinants come from Cholesky factors; the natural
  parameter :math:`\theta_S = N n (\sum_i X_i)^{-1}` of eq. (4) is formed from the
  Cholesky factor of the scatter by a triangular solve.

References
----------
.. [1] C. Saint-Jean and F. Nielsen, "A new implementation of k-MLE for mixture modeling
   of Wishart distributions", Geometric Science of Information (GSI), 2013.
.. [2] F. Nielsen, "k-MLE: A fast algorithm for learning statistical mixture models",
   ICASSP, 2012, pp. 869-872.
.. [3] F. Nielsen, "Closed-form information-theoretic divergences for statistical
   mixtures", ICPR, 2012, pp. 1723-1726.
.. [4] B. Kulis and M. I. Jordan, "Revisiting k-means: new algorithms via Bayesian
   nonparametrics", ICML, 2012.
"""

from bayesvmf.models.kmle._estimator import KMLEMixture
from bayesvmf.models.kmle._kernel import KMLEState, SweepInfo, hartigan_sweep
from bayesvmf.models.kmle._retrieval import (
    cauchy_schwarz_divergence,
    cauchy_schwarz_matrix,
    nearest_neighbor_retrieval,
    windowed_cross_products,
)
from bayesvmf.models.kmle._seeding import SeedingGeometry, dp_kmle_gain, dp_kmle_pp
from bayesvmf.models.kmle._special import inverse_multivariate_digamma, multivariate_digamma
from bayesvmf.models.kmle._wishart import (
    wishart_log_normalizer,
    wishart_log_prob,
    wishart_mle,
    wishart_mle_from_stats,
    wishart_natural_params,
    wishart_sufficient_stats,
)

__all__ = [
    "KMLEMixture",
    "KMLEState",
    "SeedingGeometry",
    "SweepInfo",
    "cauchy_schwarz_divergence",
    "cauchy_schwarz_matrix",
    "dp_kmle_gain",
    "dp_kmle_pp",
    "hartigan_sweep",
    "inverse_multivariate_digamma",
    "multivariate_digamma",
    "nearest_neighbor_retrieval",
    "windowed_cross_products",
    "wishart_log_normalizer",
    "wishart_log_prob",
    "wishart_mle",
    "wishart_mle_from_stats",
    "wishart_natural_params",
    "wishart_sufficient_stats",
]

# Saved models (bayesvmf.save, the CLI) and pickles name the class by its public path, as
# before the family became a package, so files written before and after load alike (a
# literal: pytest imports this file a second time as `models.kmle` for its doctests).
KMLEMixture.__module__ = "bayesvmf.models.kmle"
