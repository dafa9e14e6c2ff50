"""ArviZ export shared by every model's ``to_arviz``.

The models hand ArviZ named arrays: posterior draws and per-draw statistics with leading
(chain, draw) axes, constant data without them. What each axis after those is called is the
model's business (``dims``); the coordinates of every named axis are its positions 0..n-1,
read here from the arrays' shapes, so that a model states only the names.
"""

from __future__ import annotations

import numpy as np

__all__ = ["inference_data", "with_log_likelihood"]


def inference_data(posterior, dims, *, sample_stats=None, constant_data=None, attrs=None):
    """Return named arrays as an ``arviz.InferenceData`` with positional coordinates.

    Parameters
    ----------
    posterior : dict of str to array of shape (n_chains, n_draws, ...)
        The ``posterior`` group.
    dims : dict of str to list of str
        For each variable, the names of its axes after (chain, draw) (for ``constant_data``,
        of all its axes); a variable not named here gets ArviZ's default names.
    sample_stats : dict of str to array of shape (n_chains, n_draws, ...), optional
        The ``sample_stats`` group.
    constant_data : dict of str to array, optional
        The ``constant_data`` group (no chain and draw axes).
    attrs : dict, optional
        Attributes of the groups.

    Returns
    -------
    arviz.InferenceData
        Every named axis has the coordinate ``np.arange(size)``, its size read from the first
        array that has it.
    """
    import arviz as az

    coords = {}
    for group, leading in ((posterior, 2), (sample_stats or {}, 2), (constant_data or {}, 0)):
        for name, value in group.items():
            for axis, size in zip(dims.get(name, ()), np.shape(value)[leading:], strict=False):
                coords.setdefault(axis, np.arange(size))
    return az.from_dict(
        posterior=posterior,
        sample_stats=sample_stats,
        constant_data=constant_data,
        coords=coords,
        dims=dims,
        attrs=attrs,
    )


def with_log_likelihood(idata, log_likelihood):
    """Add the ``log_likelihood`` group (variable ``x``, dims chain, draw, ``row``) to ``idata``.

    ``log_likelihood`` (n_draws, n_rows): log p(x_i | draw s) of one chain of draws, what
    ArviZ's ``loo`` and ``waic`` read. Returns ``idata``, changed in place.
    """
    values = np.asarray(log_likelihood, np.float64)
    idata.add_groups(
        {"log_likelihood": {"x": values[None]}},
        coords={"row": np.arange(values.shape[1])},
        dims={"x": ["row"]},
    )
    return idata
