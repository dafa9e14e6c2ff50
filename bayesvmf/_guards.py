"""Degeneracy guards shared by every mixture: one diagnosis, one warning, one restart rule.

On real corpora a mixture can reach a high likelihood (or evidence bound) by degenerating:

- a component **collapses**: its concentration reaches the cap ``kappa_max`` (it sits on a
  few identical vectors, a topic on one frequent word);
- a component is **carried by one distinct vector** (its effective number of rows,
  ``(sum_i r_ik)^2 / sum_i r_ik^2``, is below 1.5);
- a broad, near-uniform **background** component holds a large share of the data (its
  concentration is far below the other components' and it takes more than its share);
- a component is **empty** (less than half a row's weight);
- two occupied components **coincide** (one cluster fitted twice: kappa (1 - cos) of their
  mean directions below :data:`COINCIDENT_GAP`). Every model with mean directions passes
  them: SparseVMFMixture, B-, H- and T-vMFmix (T-vMFmix each component's directions at
  every time step), the Dirichlet model (its topics) and k-MLE's vMF family.

Each model computes the shares (and, where it has them, the concentrations and effective
counts) of its final state and calls :func:`diagnose`; :func:`select_run` keeps the best
restart among the healthy ones (a bound that rose *because* a run collapsed never wins),
:func:`warn_components` issues one :class:`~bayesvmf.exceptions.DegenerateRunWarning` naming
the components and what to try, and :func:`report` sets the fitted attributes
``n_occupied_components_``, ``largest_share_``, ``degenerate_components_`` and
``n_degenerate_restarts_``.

Reseeding happens where it keeps the algorithm's objective monotone: in the start. The
split-and-merge moves that follow the hard k-means passes (:func:`bayesvmf._parallel.split_merge`,
the start of the sparse, B- and T-vMFmix models) merge the two clusters whose merge loses
least (an empty cluster loses nothing, a single-row one little) and split the cluster that
gains most, kept only if the k-means objective rises (tests: an empty cluster and a far
row's own cluster are reseeded). Once EM or VI runs, degenerate components are
diagnosed and warned about, not reseeded: a reseed would break the monotone bound (measured
for the Dirichlet model, ``models/dirichlet/_degeneracy.py``).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from .exceptions import DegenerateRunWarning

__all__ = [
    "BACKGROUND_KAPPA_RATIO",
    "FITTED_ATTRIBUTES",
    "Diagnosis",
    "diagnose",
    "effective_counts",
    "report",
    "select_run",
    "warn_components",
]

#: A component is a near-uniform background when its concentration is below this fraction of
#: the median concentration of the other occupied, uncollapsed components (and it holds more than
#: ``max(2 / K, 0.1)`` of the data). On CNAE-9 (K = 30) the background cluster of B-vMFmix has
#: kappa ~116 against ~730 elsewhere (ratio 0.16); on generated data with concentrations spread
#: over a factor 3 the ratio stays above 0.3.
BACKGROUND_KAPPA_RATIO = 0.25

#: A component whose effective number of rows is below this is carried by one vector.
SINGLE_CARRIER_ROWS = 1.5

#: Two occupied components coincide when kappa (1 - mu_i . mu_j) is below this (kappa the
#: larger of the two): the angle between their means is then below sqrt(2e-3 / kappa), under
#: 5% of either component's angular spread 1 / sqrt(kappa), so the data cannot tell them
#: apart and the fit has one cluster fewer than it says. B-vMFmix(2) on 199 rows and one
#: outlier ended with two identical means at weights 0.5 / 0.5 and every row in one
#: cluster, without a warning (a helper's audit, session 27); distinct clusters of any fit
#: seen here are farther apart by orders of magnitude.
COINCIDENT_GAP = 1e-3


class Diagnosis(NamedTuple):
    """The degeneracy diagnosis of one fitted state (one entry per component)."""

    #: fraction of the data's weight per component (sums to one)
    shares: np.ndarray
    #: less than half a row's weight
    empty: np.ndarray
    #: concentration at the cap ``kappa_max``
    at_cap: np.ndarray
    #: effectively carried by a single distinct vector
    single: np.ndarray
    #: a near-uniform component holding a large share
    background: np.ndarray
    #: the concentrations diagnosed (``None`` when the model has none per component)
    kappa: np.ndarray | None
    #: coincides with a component of lower index (the same mean direction: see
    #: :data:`COINCIDENT_GAP`); all False when no mean directions were diagnosed
    coincident: np.ndarray | None = None

    @property
    def collapsed(self) -> np.ndarray:
        """Boolean mask of the components at the cap, on one vector or a background."""
        return self.at_cap | self.single | self.background

    @property
    def duplicates(self) -> np.ndarray:
        """Boolean mask of the components that coincide with an earlier one."""
        return np.zeros_like(self.empty) if self.coincident is None else self.coincident

    @property
    def bad(self) -> np.ndarray:
        """Boolean mask of the degenerate components: collapsed, a duplicate or empty."""
        return self.collapsed | self.duplicates | self.empty

    @property
    def degenerate(self) -> bool:
        """Whether a component collapsed, sits on one vector, is a background or a duplicate.

        Such a run is not selected while a healthy one exists (:func:`select_run`). Empty
        components alone do not make a run degenerate: a Bayesian mixture's prior empties
        the components the data do not need (at a higher bound), and EM reports a vanishing
        component through its status; they are reported and warned about all the same.
        """
        return bool((self.collapsed | self.duplicates).any())

    @property
    def n_occupied(self) -> int:
        """Number of components with at least half a row's weight."""
        return int((~self.empty).sum())

    @property
    def largest_share(self) -> float:
        """The largest fraction of the data held by one component."""
        return float(self.shares.max())

    def describe(self) -> str:
        """One sentence per kind of degeneracy found (empty string when healthy)."""
        parts = []
        for k in np.flatnonzero(self.background):
            others = np.delete(self.kappa, k)[~np.delete(self.empty | self.at_cap, k)]
            parts.append(
                f"component {k} holds {100 * self.shares[k]:.1f}% of the data with kappa "
                f"{self.kappa[k]:.4g} against a median {np.median(others):.4g} of the others "
                "(a near-uniform background component)"
            )
        named = (
            (self.at_cap, "reached the concentration cap (collapsed)"),
            (self.single & ~self.at_cap, "are carried by a single distinct vector"),
            (
                self.duplicates & ~self.empty,
                "coincide with a component of lower index (the same mean direction: one "
                "cluster fitted twice)",
            ),
            (self.empty, "are empty"),
        )
        for mask, text in named:
            if mask.any():
                ids = ", ".join(str(k) for k in np.flatnonzero(mask))
                parts.append(f"components [{ids}] {text}")
        return "; ".join(parts)


def effective_counts(weights) -> np.ndarray:
    """Return ``(sum_i w_ik)^2 / sum_i w_ik^2`` per column of an ``(n, K)`` weight matrix.

    The effective number of distinct rows that carry each component: 1 when one row holds
    all its weight, n for equal weights. Columns without weight give 0.
    """
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum(axis=0)
    squares = np.square(weights).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(squares > 0, np.square(total) / squares, 0.0)


def diagnose(
    counts,
    *,
    n_rows: float,
    kappa=None,
    kappa_max: float | None = None,
    effective_rows=None,
    mean_directions=None,
) -> Diagnosis:
    """Diagnose one fitted state.

    Parameters
    ----------
    counts : array of shape (K,)
        The weight of the data per component (``sum_i r_ik``, expected token counts...);
        any positive scale, normalised to shares here.
    n_rows : float
        The number of rows (tokens) the counts add up to: a component with less than half a
        row's weight is empty.
    kappa : array of shape (K,), optional
        The concentrations. With ``kappa_max`` they flag collapsed components; with several
        distinct values they flag a near-uniform background component. A shared concentration
        (all equal) never flags a background.
    kappa_max : float, optional
        The cap on the concentrations.
    effective_rows : array of shape (K,), optional
        :func:`effective_counts` of the responsibilities (or of the expected counts per
        distinct vector, e.g. per word type).
    mean_directions : array of shape (K, d), optional
        The unit mean directions; with ``kappa`` they flag occupied components that
        coincide with an earlier occupied one (:data:`COINCIDENT_GAP`).
    """
    counts = np.asarray(counts, dtype=np.float64).reshape(-1)
    n_components = counts.size
    total = counts.sum()
    shares = counts / total if total > 0 else np.full(n_components, 1.0 / n_components)
    # less than half a row's weight: a component holding about one row (0.99 of a far row,
    # or one row read back through rounding, 1 - 1e-7) is a one-row component, not empty
    empty = shares * float(n_rows) < 0.5
    no = np.zeros(n_components, dtype=bool)
    at_cap, background = no.copy(), no.copy()
    if kappa is not None:
        kappa = np.broadcast_to(np.asarray(kappa, dtype=np.float64), (n_components,)).copy()
        if kappa_max is not None:
            at_cap = (kappa >= float(kappa_max) * (1.0 - 1e-6)) & ~empty
        # a collapsed component's capped concentration says nothing about the others' scale
        occupied = np.flatnonzero(~empty & ~at_cap)
        if occupied.size >= 3 and np.ptp(kappa[occupied]) > 0:
            large = max(2.0 / n_components, 0.1)
            for k in occupied:
                others = kappa[occupied[occupied != k]]
                background[k] = shares[k] > large and kappa[k] < BACKGROUND_KAPPA_RATIO * np.median(
                    others
                )
    single = no.copy()
    if effective_rows is not None:
        effective_rows = np.asarray(effective_rows, dtype=np.float64).reshape(-1)
        single = (effective_rows < SINGLE_CARRIER_ROWS) & ~empty
    coincident = no.copy()
    if mean_directions is not None and kappa is not None:
        mu = np.asarray(mean_directions, dtype=np.float64).reshape(n_components, -1)
        gap = 1.0 - mu @ mu.T  # 1 - cos, exact enough: a coincident pair's is ~0
        scale = np.maximum(kappa[:, None], kappa[None, :])
        close = (scale * gap < COINCIDENT_GAP) & np.tri(n_components, k=-1, dtype=bool)
        close &= ~empty[:, None] & ~empty[None, :]
        coincident = close.any(axis=1)
    return Diagnosis(shares, empty, at_cap, single, background, kappa, coincident)


def select_run(bounds, diagnoses, margin: float) -> int:
    """Return the restart to keep: the best bound among the non-degenerate runs.

    A degenerate run can score a higher bound *because* it degenerated (a topic collapsed onto
    one word type has an unbounded density), so it is kept only when every run degenerated.
    Among the candidates, the first within ``margin`` of the best bound is kept (see
    :func:`bayesvmf._mixture.best_run`).
    """
    from ._mixture import best_run  # the one near-tie rule of every restart loop

    bounds = np.asarray(bounds, dtype=np.float64)
    healthy = np.array([not d.degenerate for d in diagnoses], dtype=bool)
    if not (healthy & np.isfinite(bounds)).any():
        return best_run(bounds, margin)
    candidates = np.where(healthy, bounds, -np.inf)
    return best_run(candidates, margin)


def warn_components(
    diagnosis: Diagnosis,
    what: str,
    advice: str,
    *,
    n_runs: int = 1,
    n_degenerate_runs: int = 0,
    stacklevel: int = 3,
) -> None:
    """Warn (:class:`DegenerateRunWarning`) when the kept state has degenerate components.

    ``what`` names the estimator, ``advice`` says what to try for this model (a shared
    concentration, fewer components, a prior...). Restarts that degenerated but were not
    kept do not warn: :func:`report` counts them in ``n_degenerate_restarts_``.
    """
    if not diagnosis.bad.any():
        return
    runs = ""
    if n_runs > 1 and n_degenerate_runs >= n_runs:
        runs = f" All {n_runs} restarts degenerated; the best of them is kept."
    msg = f"{what}: {diagnosis.describe()}.{runs} {advice}"
    warnings.warn(msg, DegenerateRunWarning, stacklevel=stacklevel)


#: The fitted attributes :func:`report` sets (each estimator's saved files hold them).
FITTED_ATTRIBUTES = (
    "n_occupied_components_",
    "largest_share_",
    "degenerate_components_",
    "n_degenerate_restarts_",
)


def report(estimator, diagnosis: Diagnosis, n_degenerate_runs: int = 0) -> None:
    """Set the fitted attributes of ``diagnosis`` on ``estimator``.

    ``n_occupied_components_`` (components with at least half a row's weight),
    ``largest_share_`` (largest fraction of the data in one component),
    ``degenerate_components_`` (sorted indices of the kept state's degenerate components)
    and ``n_degenerate_restarts_`` (restarts that degenerated, kept or not).
    """
    estimator.n_occupied_components_ = int(diagnosis.n_occupied)
    estimator.largest_share_ = float(diagnosis.largest_share)
    estimator.degenerate_components_ = np.flatnonzero(diagnosis.bad)
    estimator.n_degenerate_restarts_ = int(n_degenerate_runs)
