"""Warnings and errors shared by every bayesvmf estimator."""


class ConvergenceWarning(UserWarning):
    """An iterative fit stopped at ``max_iter`` before its convergence test was met.

    The message says which fit, how far from convergence it stopped, and what to try
    (more iterations, a looser ``tol``, more restarts).
    """
