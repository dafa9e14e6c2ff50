"""bayesvmf: Bayesian and penalised von Mises-Fisher mixture models on JAX and NumPyro."""

from bayesvmf._compile_cache import set_compilation_cache
from bayesvmf.data import check_directional, make_vmf_mixture
from bayesvmf.distribution import SphericalUniform, VonMisesFisher, unit_vector
from bayesvmf.exceptions import ConvergenceWarning, DegenerateRunWarning, NotFittedError
from bayesvmf.results import load, save

__version__ = "0.1.0.dev0"

__all__ = [
    "ConvergenceWarning",
    "DegenerateRunWarning",
    "NotFittedError",
    "SphericalUniform",
    "VonMisesFisher",
    "__version__",
    "check_directional",
    "load",
    "make_vmf_mixture",
    "save",
    "set_compilation_cache",
    "unit_vector",
]
