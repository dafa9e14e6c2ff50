"""Warnings and errors shared by every bayesvmf estimator."""


class ConvergenceWarning(UserWarning):
    """An iterative fit stopped at ``max_iter`` before its convergence test was met.

    The message says which fit, how far from convergence it stopped, and what to try
    (more iterations, a looser ``tol``, more restarts).
    """


class DegenerateRunWarning(ConvergenceWarning):
    """Some EM runs degenerated (appendix B of the sparse-vMF paper) and were discarded.

    A subclass of :class:`ConvergenceWarning`, because the paper reports these runs as
    convergence failures (a collapsed, vanishing or all-zero component).
    """


class NotFittedError(ValueError, AttributeError):
    """A method that needs fitted parameters was called before ``fit``."""
