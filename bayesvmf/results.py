"""Result objects and persistence: ``save(model, path)`` / ``load(path)`` (npz + json, no pickle).

A saved file is one ``.npz`` archive. It holds every fitted array of the estimator under its
attribute name, and one extra entry, ``__bayesvmf__``, a UTF-8 JSON document (stored as a
uint8 array) with the format tag, the format version, the estimator class, its constructor
arguments and its scalar fitted attributes. Loading uses ``np.load(..., allow_pickle=False)``
and imports only classes of the ``bayesvmf`` package that implement the persistence hooks
(``_get_state`` / ``_set_state`` of :class:`bayesvmf._mixture.BaseVMFMixture`), so a file
can never run code. A corrupt file, a foreign ``.npz`` or an unknown class raise a
``ValueError`` that says which. The document also holds a SHA-256 digest of every array
(its dtype, shape and bytes): an entry changed after saving (a damaged or edited file) is
refused by name, instead of loading a model whose parameters are not the fitted ones.
Files written before the digests were added load as they did.

Every estimator gets persistence by listing its fitted attributes in ``_fitted_attributes``
(arrays go to the archive, JSON scalars to the document); constructor arguments must be JSON
values (None, bool, int, float, str). A streaming estimator's file also holds its stream
(:meth:`bayesvmf._base.StreamingMixin._stream_state`), so that ``partial_fit`` goes on after
a load where the saved model was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import zipfile
from typing import Any

import numpy as np

__all__ = ["FORMAT", "FORMAT_VERSION", "FitResult", "save", "load"]

#: Format tag written into every file.
FORMAT = "bayesvmf"
#: Version of the file layout; bumped when it changes incompatibly.
FORMAT_VERSION = 1
_META_KEY = "__bayesvmf__"


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Parameters and diagnostics of one fitted vMF mixture (host NumPy arrays).

    Attributes
    ----------
    weights : ndarray of shape (n_components,)
    mean_directions : ndarray of shape (n_components, n_features)
    concentrations : ndarray of shape (n_components,)
    lower_bound : float
        The estimator's objective per row at these parameters.
    n_iter : int
    converged : bool
    """

    weights: np.ndarray
    mean_directions: np.ndarray
    concentrations: np.ndarray
    lower_bound: float
    n_iter: int
    converged: bool

    @classmethod
    def from_estimator(cls, model) -> FitResult:
        """Collect the fitted attributes of ``model``."""
        model._check_is_fitted()
        return cls(
            np.asarray(model.weights_).copy(),
            np.asarray(model.mean_directions_).copy(),
            np.asarray(model.concentrations_).copy(),
            float(model.lower_bound_),
            int(model.n_iter_),
            bool(model.converged_),
        )


#: NumPy bit generators whose state a saved ``random_state`` may hold (:func:`_random_state`).
_BIT_GENERATORS = ("MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64")


def _json_value(name: str, value: Any) -> Any:
    """Return a constructor argument or scalar attribute as a JSON value, else refuse it.

    None, bool, int, float and str; lists (nested too) of them, and numeric NumPy arrays as
    such lists (an ``init`` array of labels, a prior mean ``mu0``: the estimators take
    both forms); a NumPy ``RandomState`` or ``Generator`` as its current state
    (:func:`_random_state` rebuilds it).
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        value = value.tolist()
    if _is_json(value):
        return list(value) if isinstance(value, tuple) else value
    if isinstance(value, np.random.RandomState | np.random.Generator):
        kind = type(value).__name__
        if kind == "RandomState":
            state = value.get_state(legacy=False)
        else:
            state = value.bit_generator.state
        if state.get("bit_generator") in _BIT_GENERATORS:
            return {"numpy_random_state": kind, "state": _encode_arrays(state)}
    raise ValueError(
        f"cannot save {name}={value!r}: only None, bool, int, float, str, lists of them, "
        "numeric arrays and NumPy random states are stored (a JAX key as random_state cannot "
        "be saved: pass an int, or save its seed)."
    )


def _encode_arrays(value):
    """Return a bit generator's state with its arrays as ``{"ndarray": [...], "dtype": ...}``."""
    if isinstance(value, dict):
        return {key: _encode_arrays(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": value.dtype.str}
    return value.item() if isinstance(value, np.generic) else value


def _decode_arrays(value):
    """Invert :func:`_encode_arrays` (only unsigned and signed integer dtypes are rebuilt)."""
    if isinstance(value, dict):
        if set(value) == {"ndarray", "dtype"}:
            dtype = np.dtype(value["dtype"])
            if dtype.kind not in "iu":
                raise ValueError(f"a random state holds no {dtype} array")
            return np.asarray(value["ndarray"], dtype=dtype)
        return {key: _decode_arrays(item) for key, item in value.items()}
    return value


def _is_json(value) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    return isinstance(value, list | tuple) and all(_is_json(v) for v in value)


def _random_state(value, where):
    """Rebuild a NumPy random state saved by :func:`_json_value` (other values unchanged)."""
    if not (isinstance(value, dict) and "numpy_random_state" in value):
        return value
    try:
        kind, state = value["numpy_random_state"], value["state"]
        name = state["bit_generator"]
        if name not in _BIT_GENERATORS or kind not in ("RandomState", "Generator"):
            raise ValueError(f"{kind}/{name} is not a NumPy random state")
        state = _decode_arrays(state)
        bit_generator = getattr(np.random, name)()
        if kind == "RandomState":
            generator = np.random.RandomState(bit_generator)
            generator.set_state(state)
            return generator
        bit_generator.state = state
        return np.random.Generator(bit_generator)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{where}: corrupt random_state in the metadata ({exc}).") from exc


def save(model, path) -> None:
    """Save a bayesvmf estimator (fitted or not) to ``path`` as npz + json, without pickle.

    Parameters
    ----------
    model : estimator
        Any bayesvmf estimator (it implements ``get_params``, ``_get_state``).
    path : str or os.PathLike
        Destination file; NumPy appends ``.npz`` when it is missing.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from bayesvmf import save, load
    >>> from bayesvmf.models import SparseVMFMixture
    >>> rng = np.random.default_rng(0)
    >>> X = np.repeat(np.eye(3)[:2], 20, axis=0) + 0.2 * rng.normal(size=(40, 3))
    >>> model = SparseVMFMixture(2, shared_kappa=True, n_init=2, random_state=0).fit(X)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
    >>> save(model, path)
    >>> np.allclose(load(path).mean_directions_, model.mean_directions_)
    True
    """
    if not (hasattr(model, "_get_state") and hasattr(model, "get_params")):
        raise TypeError(f"save expects a bayesvmf estimator; got {type(model).__name__}.")
    cls = type(model)
    params = {k: _json_value(k, v) for k, v in model.get_params().items()}
    arrays, scalars = model._get_state()
    scalars = {k: _json_value(k, v) for k, v in scalars.items()}
    for name, array in arrays.items():
        if array.dtype == object:
            raise ValueError(f"cannot save {name}: object arrays would need pickle.")
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "params": params,
        "scalars": scalars,
        "digests": {name: _digest(array) for name, array in arrays.items()},
    }
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez(path, **{_META_KEY: blob}, **arrays)


def _digest(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and C-order bytes (hex)."""
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    digest.update(np.asarray(array, order="C").tobytes())  # (0-d arrays keep their shape)
    return digest.hexdigest()


def _check_digests(meta: dict, arrays: dict, where: str) -> None:
    """Refuse arrays that differ from the digests :func:`save` wrote (none: an older file)."""
    digests = meta.get("digests")
    if digests is None:
        return
    if not isinstance(digests, dict):
        raise ValueError(f"{where}: corrupt bayesvmf metadata (digests is not an object).")
    for name in sorted(set(digests) | set(arrays)):
        if name not in arrays:
            raise ValueError(f"{where}: the saved entry {name!r} is missing from the file.")
        if name not in digests:
            raise ValueError(f"{where}: the entry {name!r} was not written by save.")
        if _digest(arrays[name]) != digests[name]:
            raise ValueError(
                f"{where}: the entry {name!r} differs from what save wrote (its SHA-256 digest "
                "does not match): the file is damaged or was edited."
            )


#: Constructor arguments added to a class after files of it were saved, with the value that
#: reproduces those estimators: B-vMFmix's data products were float64 before ``dtype``.
_ADDED_PARAMS = {"BayesianVMFMixture": {"dtype": "float64"}}


def _resolve_class(spec: str, path):
    module_name, _, qualname = spec.partition(":")
    if not (module_name == "bayesvmf" or module_name.startswith("bayesvmf.")) or not qualname:
        raise ValueError(f"{path}: refusing to load class {spec!r} (not a bayesvmf estimator).")
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{path}: unknown estimator class {spec!r}.") from exc
    if not (isinstance(obj, type) and hasattr(obj, "_set_state")):
        raise ValueError(f"{path}: {spec!r} is not a bayesvmf estimator class.")
    return obj


def load(path):
    """Load an estimator written by :func:`save`.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    estimator
        A new instance with the saved constructor arguments and fitted attributes.

    Raises
    ------
    ValueError
        If the file is not a readable bayesvmf file (corrupt, foreign, newer format,
        unknown class or attribute), or an array differs from the one :func:`save` wrote
        (its digest, module docstring).
    """
    where = os.fspath(path)
    try:
        handle = open(where, "rb")  # noqa: SIM115 - closed by the with block below
    except OSError as exc:
        raise ValueError(f"{where}: not a readable bayesvmf file ({exc}).") from exc
    with handle:
        try:
            archive = np.load(handle, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            if "allow_pickle=" in str(exc):  # NumPy's advice to unpickle it: not ours to give
                raise ValueError(
                    f"{where}: not a readable bayesvmf file (NumPy could read it only by "
                    "unpickling it, and load never unpickles a file: that can run code)."
                ) from exc
            raise ValueError(f"{where}: not a readable bayesvmf file ({exc}).") from exc
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError(f"{where}: not a bayesvmf file (a bare array, not an npz archive).")
        try:
            with archive:
                if _META_KEY not in archive.files:
                    raise ValueError(f"{where}: not a bayesvmf file (no {_META_KEY} entry).")
                blob = archive[_META_KEY]
                arrays = {name: archive[name] for name in archive.files if name != _META_KEY}
        except ValueError as exc:
            if str(exc).startswith(where):
                raise
            raise ValueError(f"{where}: not a readable bayesvmf file ({exc}).") from exc
        except (OSError, zipfile.BadZipFile, EOFError, KeyError) as exc:
            raise ValueError(f"{where}: not a readable bayesvmf file ({exc}).") from exc
    try:
        meta = json.loads(blob.tobytes().decode("utf-8"))
        if not isinstance(meta, dict):
            raise TypeError("metadata is not an object")
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{where}: corrupt bayesvmf metadata ({exc}).") from exc
    if meta.get("format") != FORMAT:
        raise ValueError(f"{where}: not a bayesvmf file (format tag {meta.get('format')!r}).")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: file format version {version!r} is not supported by this bayesvmf "
            f"(reads versions <= {FORMAT_VERSION})."
        )
    for key in ("class", "params", "scalars"):
        if key not in meta:
            raise ValueError(f"{where}: corrupt bayesvmf metadata (missing {key!r}).")
    _check_digests(meta, arrays, where)
    cls = _resolve_class(str(meta["class"]), where)
    # an argument added after a file was written: the value that does what the saved
    # estimator did (a file without it predates the argument)
    if not isinstance(meta["params"], dict):
        raise ValueError(f"{where}: corrupt bayesvmf metadata (params is not an object).")
    params = {**_ADDED_PARAMS.get(cls.__name__, {}), **meta["params"]}
    params = {name: _random_state(value, where) for name, value in params.items()}
    try:
        model = cls(**params)
        model._set_state(arrays, meta["scalars"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: cannot rebuild {meta['class']} ({exc}).") from exc
    return model
