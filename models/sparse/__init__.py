r"""MAP l1-penalised sparse von Mises-Fisher mixture: EM, beta path and model selection.

Generative story: z_i ~ Categorical(alpha); x_i | z_i = k ~ vMF(mu_k, kappa_k) on the unit
sphere S^{d-1}. The parameters maximise the penalised log-likelihood of eq. (11) of [1]_,

.. math::

    L_p(\Theta \mid X) = \sum_{i=1}^n \log \sum_{k=1}^K \alpha_k C_d(\kappa_k)
        e^{\kappa_k \mu_k^T x_i} - \beta \sum_{k=1}^K \lVert \mu_k \rVert_1,

by the EM of Algorithm 2 (soft-threshold M-step, eq. (22), coupled with the kappa update of
eq. (21) by a fixed point). With beta = 0 it is the classical vMF mixture of Banerjee et al.
[2]_. ``SparseVMFMixture.path`` follows the event-driven beta path of Algorithm 3 (eqs.
(30)-(31)), and :func:`select_sparse_model` applies the methodology of sec. 3.6.

===============  ==================================================================
code             paper
===============  ==================================================================
``weights_``     alpha_k (eq. (20))
``mean_directions_``  mu_k (eq. (22))
``concentrations_``   kappa_k (eq. (21); eq. (27) when shared)
``beta``         beta, the l1 penalty (eq. (11)); ``betas`` on a path
``resultant``    r_k = sum_i tau_ik x_i (eq. (23))
``rho``          rho_k = mu_k . r_k / N_k (eq. (26))
===============  ==================================================================

The package's private modules, one per concern (public names are re-exported here):

===============  ==================================================================
``_em``          batch EM: the state of a batch of restarts, the M-step (eqs. (20)-(22)),
                 the EM iteration (a jitted data pass and closing step), the
                 initialisations and the restart loop
``_online``      stepwise (online) EM of ``partial_fit``
``_estimator``   :class:`SparseVMFMixture`
``_path``        the beta path (Algorithm 3), :class:`SparsePath`, model selection
===============  ==================================================================

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes" (journal version; the ESANN 2021 paper "Sparse mixture of von Mises-Fisher
   distribution" by Barbaro and Rossi is the short version).
.. [2] A. Banerjee, I. S. Dhillon, J. Ghosh and S. Sra, "Clustering on the unit hypersphere
   using von Mises-Fisher distributions", JMLR 6 (2005) 1345-1382.
"""

from bayesvmf._parallel import spherical_kmeans, split_gains, split_merge
from bayesvmf.models.sparse._em import (
    EMState,
    close_step,
    data_pass,
    em_iteration,
    em_step,
    fresh_state,
    init_state,
    init_state_from_labels,
    m_step,
    run_em,
    settled,
    start_log_c,
)
from bayesvmf.models.sparse._estimator import SparseVMFMixture
from bayesvmf.models.sparse._online import OnlineStats, online_em_step
from bayesvmf.models.sparse._path import SparsePath, SparseSelection, select_sparse_model

# The public path, in saved files (bayesvmf.save stores "module:class") and pickles: a file
# written today loads after the private modules change.
for _cls in (EMState, OnlineStats, SparseVMFMixture, SparsePath, SparseSelection):
    _cls.__module__ = (
        "bayesvmf.models.sparse"  # not __name__: doctests import this as "models.sparse"
    )
del _cls

__all__ = [
    "EMState",
    "close_step",
    "data_pass",
    "em_iteration",
    "em_step",
    "init_state",
    "init_state_from_labels",
    "fresh_state",
    "m_step",
    "run_em",
    "settled",
    "start_log_c",
    "spherical_kmeans",
    "split_gains",
    "split_merge",
    "OnlineStats",
    "online_em_step",
    "SparseVMFMixture",
    "SparsePath",
    "SparseSelection",
    "select_sparse_model",
]
