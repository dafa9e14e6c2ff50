"""Gopal & Yang (ICML 2014): Bayesian, hierarchical and temporal vMF mixtures.

=====================================  ======================================================
estimator                              model and inference
=====================================  ======================================================
:class:`BayesianVMFMixture`            B-vMFmix (sec. 3.1): mean-field VI with kappa by MCMC
                                       sampling or by the bounding scheme, collapsed Gibbs,
                                       empirical Bayes
:class:`HierarchicalVMFMixture`        H-vMFmix (sec. 3.2): a tree of mean directions given as
                                       a parent array (:func:`balanced_tree`), VI + EB
:class:`TemporalVMFMixture`            T-vMFmix (sec. 3.3): mean directions evolving over time
                                       steps, VI + EB, closed-form forecasts
:func:`bayesian_vmf_model`             the NumPyro program of B-vMFmix (for NUTS / SVI)
=====================================  ======================================================

The derivations the paper's missing supplement held are written out in ``docs/``
(``bayesian_vi.md``, ``bayesian_gibbs.md``, ``bayesian_hierarchical_temporal.md``).
The private modules: ``_kappa`` (the two kappa schemes shared by all three models),
``_empirical_bayes`` (the empirical Bayes steps of all three), ``_bvmf_vi`` (the B-vMFmix
bound and VI/SVI steps) and ``_bvmf`` (its estimator), ``_gibbs_kernel`` (the collapsed Gibbs
sweeps) and ``_gibbs`` (the chain driver), ``_tree`` (parent arrays, top-down seeding),
``_shared`` (what H- and T-vMFmix share: q(mu), rows over devices, the restart loop),
``_hierarchical_vi`` and ``_hierarchical``, ``_temporal_vi`` and ``_temporal``, ``_numpyro``.
"""

from bayesvmf.models.bayesian._bvmf import BayesianVMFMixture
from bayesvmf.models.bayesian._hierarchical import (
    HierarchicalVMFMixture,
    balanced_tree,
    paths_to_leaves,
)
from bayesvmf.models.bayesian._numpyro import bayesian_vmf_model
from bayesvmf.models.bayesian._temporal import TemporalVMFMixture

__all__ = [
    "BayesianVMFMixture",
    "HierarchicalVMFMixture",
    "TemporalVMFMixture",
    "balanced_tree",
    "bayesian_vmf_model",
    "paths_to_leaves",
]
