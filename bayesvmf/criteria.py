r"""Information criteria for vMF mixtures: AIC, BIC, RIC, RICc, EBIC.

All criteria have the form of eq. (32) of [1]_,

.. math::

    IC(\Theta) = \phi(n, d)\, C(\Theta) - 2 \log L(\Theta \mid X),

with the coefficients phi(n, d) of Table 1 of [1]_ and the number of free parameters C of
eqs. (33)-(34): (K - 1) mixing weights, K concentrations (1 when shared), and for each mean
direction C_dm(mu_k) = max(1, nnz(mu_k) - 1) (the unit-norm constraint removes one degree of
freedom; a mean with a single nonzero coordinate still counts one). For a dense model this is
the usual (K - 1) + K (d - 1) + K. Lower is better for every criterion.

=========  ==================================  ==========================
name       phi(n, d)                           reference
=========  ==================================  ==========================
``aic``    2                                   Akaike (1973)
``bic``    log n                               Schwarz (1978)
``ric``    2 log d                             Foster and George (1994)
``ricc``   2 (log d + log log d)               Zhang and Shen (2010)
``ebic``   log n + 2 gamma log d, gamma = 0.5  Chen and Chen (2008)
=========  ==================================  ==========================

References
----------
.. [1] F. Rossi and F. Barbaro, "Mixture of von Mises-Fisher distribution with sparse
   prototypes" (journal version), sec. 3.4, eqs. (32)-(34) and Table 1.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "CRITERIA",
    "penalty_coefficient",
    "n_parameters",
    "information_criterion",
    "aic",
    "bic",
    "ric",
    "ricc",
    "ebic",
]

#: The criteria names accepted everywhere in bayesvmf.
CRITERIA = ("aic", "bic", "ric", "ricc", "ebic")


def penalty_coefficient(name: str, n_samples: int, n_features: int, gamma: float = 0.5) -> float:
    """Return phi(n, d) of Table 1 of [1]_.

    Parameters
    ----------
    name : {"aic", "bic", "ric", "ricc", "ebic"}
    n_samples : int
        n, the number of observations.
    n_features : int
        d, the dimension.
    gamma : float, default 0.5
        The EBIC parameter, in [0, 1] (0.5 as recommended by Chen and Chen and used in [1]_).

    Returns
    -------
    float
    """
    key = str(name).lower()
    if key not in CRITERIA:
        raise ValueError(f"unknown criterion {name!r}; expected one of {', '.join(CRITERIA)}.")
    if n_samples < 1 or n_features < 2:
        raise ValueError(
            f"criteria need n_samples >= 1 and n_features >= 2; got {n_samples}, {n_features}."
        )
    if key == "ebic" and not (
        isinstance(gamma, numbers.Real)
        and not isinstance(gamma, bool)
        and 0.0 <= float(gamma) <= 1.0
    ):  # (NaN gave NaN criteria, and a best model picked from them silently)
        raise ValueError(f"gamma must be a number in [0, 1] (EBIC); got {gamma!r}.")
    log_n, log_d = math.log(n_samples), math.log(n_features)
    if key == "aic":
        return 2.0
    if key == "bic":
        return log_n
    if key == "ric":
        return 2.0 * log_d
    if key == "ricc":
        # log log d is negative for d < e; Table 1 is stated for high dimension.
        return 2.0 * (log_d + math.log(log_d))
    return log_n + 2.0 * gamma * log_d


def n_parameters(mean_directions, shared_kappa: bool = False) -> int:
    """Count the free parameters of a (sparse) vMF mixture, eqs. (33)-(34) of [1]_.

    Parameters
    ----------
    mean_directions : array-like of shape (n_components, n_features)
        Exact zeros count as removed parameters.
    shared_kappa : bool, default False
        One concentration for all components (sec. 3.2.3) instead of K.

    Returns
    -------
    int
        (K - 1) + (1 if shared_kappa else K) + sum_k max(1, nnz(mu_k) - 1).
    """
    mu = np.asarray(mean_directions)
    if mu.ndim != 2:
        raise ValueError(f"mean_directions must be 2-D; got shape {mu.shape}.")
    n_components = mu.shape[0]
    per_mean = np.maximum(1, np.count_nonzero(mu, axis=1) - 1)  # eq. (33)
    n_kappa = 1 if shared_kappa else n_components
    return int((n_components - 1) + n_kappa + per_mean.sum())  # eq. (34)


def information_criterion(
    name: str,
    log_likelihood,
    n_params,
    n_samples: int,
    n_features: int,
    gamma: float = 0.5,
):
    """Return phi(n, d) C - 2 log L (eq. (32) of [1]_).

    Parameters
    ----------
    name : {"aic", "bic", "ric", "ricc", "ebic"}
    log_likelihood : float or array
        The total (unpenalised) log-likelihood L of eq. (9), summed over the n rows.
    n_params : int or array
        C, e.g. from :func:`n_parameters`.
    n_samples, n_features : int
    gamma : float, default 0.5
        EBIC parameter.

    Returns
    -------
    float or ndarray
    """
    phi = penalty_coefficient(name, n_samples, n_features, gamma)
    value = phi * np.asarray(n_params, np.float64) - 2.0 * np.asarray(log_likelihood, np.float64)
    return float(value) if np.ndim(value) == 0 else value


def _named(name):
    def criterion(log_likelihood, n_params, n_samples, n_features, gamma=0.5):
        return information_criterion(name, log_likelihood, n_params, n_samples, n_features, gamma)

    criterion.__name__ = name
    criterion.__doc__ = (
        f"Return the {name.upper()} of eq. (32) and Table 1 of [1]_ (see "
        ":func:`information_criterion`)."
    )
    return criterion


aic = _named("aic")
bic = _named("bic")
ric = _named("ric")
ricc = _named("ricc")
ebic = _named("ebic")
