"""Warnings and errors shared by every bayesvmf estimator.

They are scikit-learn's, or subclasses of them, so that scikit-learn's own handling applies:
``warnings.filterwarnings("ignore", category=sklearn.exceptions.ConvergenceWarning)``
silences the package's convergence warnings, and ``except
sklearn.exceptions.NotFittedError`` catches an unfitted bayesvmf estimator.
"""

import sklearn.exceptions

__all__ = ["ConvergenceWarning", "DegenerateRunWarning", "NotFittedError"]


class ConvergenceWarning(sklearn.exceptions.ConvergenceWarning):
    """An iterative fit stopped at ``max_iter`` before its convergence test was met.

    The message says which fit, how far from convergence it stopped, and what to try
    (more iterations, a looser ``tol``, more restarts). A subclass of
    :class:`sklearn.exceptions.ConvergenceWarning` (itself a ``UserWarning``).
    """


class DegenerateRunWarning(ConvergenceWarning):
    """Some EM runs degenerated (appendix B of the sparse-vMF paper) and were discarded.

    A subclass of :class:`ConvergenceWarning`, because the paper reports these runs as
    convergence failures (a collapsed, vanishing or all-zero component).
    """


#: A method that needs fitted parameters was called before ``fit``: scikit-learn's class
#: itself (a ``ValueError`` and ``AttributeError``), raised by
#: :func:`sklearn.utils.validation.check_is_fitted`, so there is one "not fitted" type.
NotFittedError = sklearn.exceptions.NotFittedError
