"""The model modules of bayesvmf, side by side; each imports the core, never a sibling."""

from bayesvmf.models.bayesian import (
    BayesianVMFMixture,
    HierarchicalVMFMixture,
    TemporalVMFMixture,
    balanced_tree,
    bayesian_vmf_model,
)
from bayesvmf.models.dirichlet import DirichletVMFMixture
from bayesvmf.models.kmle import KMLEMixture, cauchy_schwarz_divergence
from bayesvmf.models.sparse import SparsePath, SparseVMFMixture, select_sparse_model
