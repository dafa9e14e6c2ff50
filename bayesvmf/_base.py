"""The estimator base of bayesvmf: scikit-learn's conventions, written once.

Every estimator of the package derives from :class:`BaseVMFEstimator`, which is a
:class:`sklearn.base.BaseEstimator` and adds what scikit-learn leaves to each estimator:

* **parameters**: ``__init__`` stores its arguments unchanged; ``fit`` calls
  :meth:`~sklearn.base.BaseEstimator._validate_params`, which checks them against the class
  dictionary ``_parameter_constraints`` written with scikit-learn's own constraints
  (:class:`~sklearn.utils._param_validation.Interval`, ``StrOptions``, ``Options``,
  ``"boolean"``, ``"verbose"``, ``HasMethods``, types, ``None``) and :data:`RANDOM_STATE`;
* **tags** (:meth:`BaseVMFEstimator.__sklearn_tags__`): a density estimator that takes
  sparse input, negative coordinates and no target; a subclass whose input is not a 2-D
  matrix (a list of documents) sets ``input_tags.two_d_array = False`` in its own tags;
* **input**: :meth:`BaseVMFEstimator._validate_directions` runs the package's own check of
  directional data (:func:`bayesvmf.data.check_directional`, its exact messages for NaN,
  all-zero rows, non-unit rows; sparse input stays sparse) and scikit-learn's
  :func:`~sklearn.utils.validation.validate_data` for ``n_features_in_`` and
  ``feature_names_in_`` (a DataFrame whose columns come in another order is refused, not
  scored silently wrong); object-dtype arrays and pandas nullable columns are converted to
  float first;
* **fitted state**: :meth:`BaseVMFEstimator._check_is_fitted` calls
  :func:`~sklearn.utils.validation.check_is_fitted`, which raises
  :class:`sklearn.exceptions.NotFittedError` (``bayesvmf.exceptions.NotFittedError`` is
  that class);
* **seeds**: :func:`make_key` turns ``random_state`` (None, an int, a NumPy ``RandomState``
  or ``Generator``, a JAX key) into the JAX key of one fit;
* **verbosity**: ``verbose`` has scikit-learn's meaning, an int level (0 silent; 1 and more
  show a progress bar of the fit loop, :meth:`BaseVMFEstimator._progress`);
* **streams**: :class:`StreamingMixin` is the bookkeeping of every ``partial_fit`` (checks,
  counters, the step size rho_t = (t + tau)^(-a), the stream's shape), each model keeping
  its own step and its own start from the first chunk;
* **compiled programs**: ``fit``, ``predict``, ``score_samples`` and the other methods of
  :data:`bayesvmf._compile_cache.CACHED_METHODS` that a subclass defines run inside JAX's
  persistent compilation cache (:func:`bayesvmf._compile_cache.compilation_cache`), so a
  new Python process reads the programs an earlier one compiled; JAX's settings are changed
  only while such a method runs (:func:`bayesvmf.set_compilation_cache` and the environment
  variable ``BAYESVMF_NO_COMPILATION_CACHE`` turn it off).

The mixture API (``predict``, ``score_samples``, ``sample``, ``bic``) is not here: it is
:class:`bayesvmf._mixture.BaseVMFMixture`, which adds :class:`~sklearn.base.DensityMixin`
and :class:`~sklearn.base.ClusterMixin` to this base. Estimators that do not share it
(k-MLE, the Dirichlet-vMF topic model whose input is a list of documents) derive from
:class:`BaseVMFEstimator` directly.
"""

from __future__ import annotations

import importlib
import json
import numbers
import os
import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, validate_parameter_constraints
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from bayesvmf._compile_cache import CACHED_METHODS, cached
from bayesvmf.exceptions import NotFittedError

__all__ = [
    "BaseVMFEstimator",
    "NotFittedError",
    "RANDOM_STATE",
    "STREAM_CONSTRAINTS",
    "StreamStep",
    "StreamingMixin",
    "check_count",
    "check_fits_in_memory",
    "check_random_state",
    "feature_names_state",
    "make_key",
    "restore_feature_names",
    "seed_from",
]

#: Constraint of ``random_state``: scikit-learn's (None, an int, a ``RandomState``) widened
#: to the ints a JAX key takes (up to 2**63 - 1, which older fits used), NumPy
#: ``Generator`` and JAX PRNG keys.
RANDOM_STATE: list = [
    Interval(numbers.Integral, 0, 2**63 - 1, closed="both"),
    np.random.RandomState,
    np.random.Generator,
    jax.Array,
    None,
]


def seed_from(random_state) -> int | jax.Array:
    """Return the int seed (or the JAX key) that ``random_state`` stands for, now.

    Parameters
    ----------
    random_state : None, int, numpy.random.RandomState, numpy.random.Generator or jax key
        An int or a JAX key is returned as it is. A NumPy ``RandomState`` or ``Generator``
        gives one int drawn from it (so it advances: two fits from one instance differ, as
        in scikit-learn), in [0, 2**31 - 1). None draws a fresh seed from the operating
        system's entropy (not reproducible).

    Returns
    -------
    int or jax.Array
    """
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    if isinstance(random_state, jax.Array):
        return random_state
    check_random_state(random_state)
    return int(random_state)


def check_random_state(random_state) -> None:
    """Raise a ValueError naming ``random_state`` unless it is one of :func:`seed_from`'s types.

    Checks without drawing from a NumPy generator. The estimators' parameter validation
    refuses other values at fit; method arguments (``sample(random_state=...)``) come here
    directly (``int("x")`` named nothing).
    """
    types_ = (numbers.Integral, np.random.RandomState, np.random.Generator, jax.Array)
    if random_state is not None and not isinstance(random_state, types_):
        raise ValueError(
            "random_state must be None, an int, a numpy RandomState or Generator, or a JAX "
            f"key; got {random_state!r}"
        )


def make_key(random_state) -> jax.Array:
    """Turn ``random_state`` into a JAX PRNG key (call it once per fit).

    An int ``s`` gives ``jax.random.key(s)``, so a fit seeded with an int gives the same
    numbers as it always did; a NumPy ``RandomState`` / ``Generator`` gives the key of a
    seed drawn from it; None a fresh key (see :func:`seed_from`). A JAX key is used as it
    is (raw ``uint32`` key data is wrapped).

    Parameters
    ----------
    random_state : None, int, numpy.random.RandomState, numpy.random.Generator or jax key

    Returns
    -------
    jax.Array
        A typed PRNG key.
    """
    seed = seed_from(random_state)
    if isinstance(seed, jax.Array):
        if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
            return seed
        return jax.random.wrap_key_data(seed)
    if jax.config.jax_default_prng_impl == "threefry2x32" and 0 <= seed < 2**63:
        # jax.random.key's threefry key data, the seed's high and low 32 bits, made on the
        # host: jax.random.key is two eager programs, traced and lowered again in every new
        # process (the first fit's wait)
        return jax.random.wrap_key_data(np.array([seed >> 32, seed & 0xFFFFFFFF], np.uint32))
    # 64-bit seeds: without x64, jax.random.key truncates a seed >= 2**32 (the estimators
    # always called it inside their x64 scope, so this keeps every fitted number)
    with jax.enable_x64(True):
        return jax.random.key(seed)


def _n_columns(X) -> int | None:
    """Return the number of columns of a 2-D X that has a shape, else None."""
    shape = getattr(X, "shape", None)
    return int(shape[1]) if isinstance(shape, tuple) and len(shape) == 2 else None


def _is_dataframe(X) -> bool:
    """Whether X is a pandas (or other dataframe-protocol) table, without importing pandas."""
    return hasattr(X, "dtypes") and hasattr(X, "columns")


def _as_numeric(X, name: str):
    """Convert object-dtype arrays and DataFrames to a float64 ndarray; pass the rest through.

    A DataFrame may hold pandas nullable columns (``Int64``, ``Float64``, ``boolean``; a
    missing value becomes NaN, which :func:`bayesvmf.data.check_directional` then reports
    with its row) or object columns of numbers; an object array is what scikit-learn's
    checks pass as numbers of mixed type; a DataFrame of pandas sparse columns becomes a CSR
    matrix. All go through scikit-learn's
    :func:`~sklearn.utils.check_array`; every other input is left to
    :func:`~bayesvmf.data.check_directional`, whose messages stay the package's.
    """
    if sp.issparse(X):
        return X
    if getattr(getattr(X, "dtype", None), "kind", None) == "c":
        # scikit-learn's type and words (its estimator checks ask for them), with the reason
        raise ValueError(
            f"Complex data not supported: {name} has dtype {X.dtype}; a direction has real "
            "coordinates"
        )
    is_object = getattr(getattr(X, "dtype", None), "kind", None) == "O"
    if not (is_object or _is_dataframe(X)):
        return X
    try:
        return check_array(
            X,
            dtype="numeric",
            accept_sparse="csr",  # a DataFrame of sparse columns stays sparse (it was refused)
            ensure_all_finite=False,  # NaN is reported by check_directional, with its row
            ensure_2d=False,
            allow_nd=True,
            ensure_min_samples=0,
            ensure_min_features=0,
            input_name=name,
        )
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name} could not be converted to numbers: {err}") from err


class BaseVMFEstimator(BaseEstimator):
    """Base class of every bayesvmf estimator (scikit-learn's estimator API).

    Subclasses store their keyword arguments unchanged in ``__init__`` (each with a
    default), declare ``_parameter_constraints`` with scikit-learn's constraints (extend
    the parent's with ``**Parent._parameter_constraints``), call ``self._validate_params()``
    at the start of ``fit``, validate input with :meth:`_validate_directions` (2-D
    directional data) or their own check followed by
    ``validate_data(self, X, skip_check_array=True)`` (other input), seed each fit with
    ``self._make_key()`` (:func:`make_key` of ``random_state``) and guard fitted methods with
    :meth:`_check_is_fitted`. ``get_params``, ``set_params``, ``clone``, ``repr`` and
    pickling come from :class:`sklearn.base.BaseEstimator` (pickles keep JAX arrays of
    floats as NumPy arrays, :meth:`__getstate__`).
    """

    #: scikit-learn parameter constraints, ``{name: [constraint, ...]}``
    _parameter_constraints: dict[str, Any] = {}

    #: attributes that exist exactly when the estimator is fitted (``__sklearn_is_fitted__``);
    #: None means scikit-learn's default (any attribute ending in ``_``)
    _fitted_check: tuple[str, ...] | None = None

    def __getstate__(self):
        """Return scikit-learn's pickled state, with every JAX array as a NumPy array.

        A 64-bit JAX array unpickled in a process without ``jax_enable_x64`` (the default)
        comes back 32-bit: a pickled model's stream state (``_online``) did, and its next
        ``partial_fit`` failed inside a jitted loop (float32 carry against float64) or, for
        B-vMFmix, went on from rounded statistics. NumPy arrays keep their dtype, and the
        jitted steps take them as they are. PRNG keys (no NumPy dtype) are left as they are.
        """

        def to_host(leaf):
            if isinstance(leaf, jax.Array) and not jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                return np.asarray(leaf)
            return leaf

        state = super().__getstate__()
        return {name: jax.tree.map(to_host, value) for name, value in state.items()}

    def __init_subclass__(cls, **kwargs):
        """Run the subclass's fitting and evaluating methods inside the compilation cache.

        Each method named in :data:`bayesvmf._compile_cache.CACHED_METHODS` that the
        subclass defines itself (a plain function) is wrapped by
        :func:`~bayesvmf._compile_cache.cached`, so that no model has to remember it.
        """
        super().__init_subclass__(**kwargs)
        for name in CACHED_METHODS:
            method = cls.__dict__.get(name)
            if isinstance(method, types.FunctionType):
                setattr(cls, name, cached(method))

    def __sklearn_tags__(self):
        """Return the estimator tags: a density estimator of 2-D (or sparse) directions.

        ``input_tags.sparse`` (sparse rows are never densified), ``positive_only`` False
        (directions have signed coordinates), ``allow_nan`` False, no target
        (``target_tags.required`` False), ``requires_fit``. Subclasses adjust them.
        """
        tags = super().__sklearn_tags__()
        tags.estimator_type = "density_estimator"
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = False
        tags.input_tags.allow_nan = False
        tags.target_tags.required = False
        tags.requires_fit = True
        return tags

    # ---- parameters ---------------------------------------------------------------------

    def _validate_params(self) -> None:
        """Check the constructor arguments against ``_parameter_constraints``.

        Raises
        ------
        sklearn.utils._param_validation.InvalidParameterError
            A ``ValueError`` (and ``TypeError``) naming the parameter, the constraint and
            the value (scikit-learn's message).
        """
        validate_parameter_constraints(
            self._parameter_constraints,
            self.get_params(deep=False),
            caller_name=type(self).__name__,
        )

    # ---- input --------------------------------------------------------------------------

    def _validate_directions(
        self,
        X,
        *,
        reset: bool,
        normalize: bool | None = None,
        min_rows: int = 1,
        min_rows_name: str | None = None,
        dtype=None,
        copy: bool = True,
    ):
        """Check directional data X and record (``reset``) or check its features.

        Parameters
        ----------
        X : array-like, DataFrame or sparse matrix of shape (n_samples, n_features)
            Rows are directions. Object-dtype arrays and DataFrames (pandas nullable
            columns included) are converted to float64 first.
        reset : bool
            True in ``fit``: set ``n_features_in_`` (and ``feature_names_in_`` for a
            DataFrame with string column names). False elsewhere: X must have the fitted
            number of features and the same column names in the same order
            (scikit-learn's ``ValueError``; a warning when only one of fit and X had
            names).
        normalize : bool or None, default None
            Rescale rows to unit norm; None takes the estimator's ``normalize`` (True when
            it has none). With False, rows that are not unit norm raise a ValueError.
        min_rows : int, default 1
            Fewest rows accepted (e.g. ``n_components`` in ``fit``).
        min_rows_name : str or None, default None
            The name of what requires ``min_rows``, for the message.
        dtype : floating dtype or None, default None (float64)
        copy : bool, default True
            See :func:`bayesvmf.data.check_directional` (False shares normalised float64
            data, a CSR matrix's arrays or a C-ordered array, read-only).

        Returns
        -------
        ndarray or scipy.sparse.csr_matrix of shape (n_samples, n_features)
            Unit rows; sparse input stays sparse (CSR).

        Raises
        ------
        TypeError, ValueError
            The messages of :func:`bayesvmf.data.check_directional` for the data
            themselves, scikit-learn's for the feature count and names.
        """
        from bayesvmf.data import check_directional

        if normalize is None:
            normalize = getattr(self, "normalize", True)
        n_columns = _n_columns(X)
        if not reset and n_columns is not None:
            # the fitted feature count first: X[:, :1] is "1 feature, expected 5", not "too
            # few columns for a direction"
            validate_data(self, X, reset=False, skip_check_array=True)
        X_numeric = _as_numeric(X, "X")  # complex input refused here, with its dtype
        if n_columns is not None and n_columns < 2:
            # scikit-learn's wording (its estimator checks look for "1 feature(s)" and
            # "0 feature(s) (shape=(n, 0)) while a minimum of 2 is required")
            raise ValueError(
                f"X has {n_columns} feature(s) (shape={tuple(X.shape)}) while a minimum of 2 "
                "is required: a direction needs at least 2 features"
            )
        Xc = check_directional(
            X_numeric,
            normalize=normalize,
            name="X",
            min_rows=min_rows,
            min_rows_name=min_rows_name,
            dtype=dtype,
            copy=copy,
        )
        if reset or n_columns is None:
            # the original X: its column names, if it is a DataFrame; its shape is Xc's
            validate_data(self, X, reset=reset, skip_check_array=True)
        return Xc

    # ---- fitted state -------------------------------------------------------------------

    def __sklearn_is_fitted__(self) -> bool:
        """Return whether the estimator is fitted (all of ``_fitted_check`` are set)."""
        if self._fitted_check is None:
            return any(v.endswith("_") and not v.startswith("__") for v in vars(self))
        return all(hasattr(self, name) for name in self._fitted_check)

    def _check_is_fitted(self) -> None:
        """Raise :class:`sklearn.exceptions.NotFittedError` unless the estimator is fitted."""
        check_is_fitted(
            self,
            msg=(
                "This %(name)s instance is not fitted yet; call 'fit' with appropriate "
                "arguments before using this method."
            ),
        )

    # ---- seeds and verbosity ------------------------------------------------------------

    def _make_key(self, random_state=None) -> jax.Array:
        """Return the JAX key of one fit or draw: ``random_state``, else the estimator's.

        ``random_state=None`` takes ``self.random_state`` (so ``sample(n)`` with an int
        ``random_state`` is reproducible); see :func:`make_key`.
        """
        if random_state is None:
            random_state = getattr(self, "random_state", None)
        return make_key(random_state)

    def _progress(self, total: int, desc: str):
        """Return a tqdm progress bar when ``verbose >= 1``, else None.

        Parameters
        ----------
        total : int
            The number of steps.
        desc : str
            Its label.
        """
        if not getattr(self, "verbose", 0):
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False)


def feature_names_state(estimator) -> dict[str, list[str]]:
    """Return ``{"feature_names_in_": [...]}`` for a saved file's JSON document, or ``{}``.

    scikit-learn keeps the names as an object array, which ``np.savez`` could only pickle; as
    a JSON list of strings they load without pickle (:func:`restore_feature_names`). A loaded
    model without them took a DataFrame with its columns reordered, with a warning only.
    """
    names = getattr(estimator, "feature_names_in_", None)
    return {} if names is None else {"feature_names_in_": [str(n) for n in names]}


def restore_feature_names(estimator, scalars: dict) -> None:
    """Set ``feature_names_in_`` from a loaded document, as scikit-learn keeps it (objects)."""
    if "feature_names_in_" in scalars:
        names = scalars["feature_names_in_"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"feature_names_in_ must be a list of str; got {names!r}")
        estimator.feature_names_in_ = np.asarray(names, dtype=object)


def check_count(value, name: str, *, minimum: int = 1, allow_none: bool = False):
    """Return ``value`` as an int >= ``minimum`` (or None), else raise a ValueError.

    For the arguments of methods (``sample(n_samples)``, ``partial_fit(n_samples)``),
    which ``_parameter_constraints`` does not cover. Booleans are refused.

    Parameters
    ----------
    value : object
        The argument.
    name : str
        Its name, for the message.
    minimum : int, default 1
    allow_none : bool, default False
        Whether None is accepted (and returned).

    Returns
    -------
    int or None
    """
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool | np.bool_)
        or not isinstance(value, numbers.Integral)
        or value < minimum
    ):
        what = "None or an int" if allow_none else "an int"
        raise ValueError(f"{name} must be {what} >= {minimum}; got {value!r}.")
    return int(value)


def physical_memory() -> int | None:
    """Return this machine's physical (host) memory in bytes, or None where the OS does not say."""
    try:
        memory = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows) or no such name
        return None
    return memory if memory > 0 else None  # sysconf answers -1 for an indeterminate value


def check_fits_in_memory(nbytes: float, asked: str, needed: str) -> None:
    """Raise a ValueError when ``nbytes`` exceed this machine's physical (host) memory.

    For sizes a user sets that allocate arrays in proportion (``sample(n_samples)``, the
    time steps of ``times``): an absurd value is refused with a message naming it, instead
    of XLA aborting the process or failing to allocate deep inside a program. Only what
    cannot fit at all is refused: the arrays named by ``needed`` alone are larger than the
    memory (where the OS does not report it, nothing is checked). The results are NumPy
    arrays, so host memory bounds them; an accelerator with less memory can still fail
    to allocate below that.

    Parameters
    ----------
    nbytes : float
        Bytes of the arrays asked for.
    asked : str
        The argument and its value, for the message ("n_samples=10000000000").
    needed : str
        What those bytes hold, for the message.
    """
    memory = physical_memory()
    if memory is not None and nbytes > memory:
        raise ValueError(
            f"{asked} needs {needed}: {_bytes_text(nbytes)}, more than this machine's "
            f"{_bytes_text(memory)} of memory."
        )


def _bytes_text(nbytes: float) -> str:
    """Return a size in bytes as text in binary units ("6.9 MiB")."""
    value, unit = float(nbytes), "TiB"
    for smaller in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            unit = smaller
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:,.1f} {unit}"


#: Constraints of the step sizes rho_t = (t + ``learning_offset``)^(-``learning_decay``) of
#: every ``partial_fit`` (:class:`StreamingMixin`): a in (0.5, 1] makes sum rho_t infinite and
#: sum rho_t^2 finite (the Robbins-Monro conditions of the convergence arguments of online EM
#: and stochastic VI); tau >= 0 keeps rho_t <= 1.
STREAM_CONSTRAINTS: dict[str, list] = {
    "learning_decay": [Interval(numbers.Real, 0.5, 1.0, closed="right")],
    "learning_offset": [Interval(numbers.Real, 0.0, None, closed="left")],
}


class StreamStep(NamedTuple):
    """The counts of one ``partial_fit`` call (:meth:`StreamingMixin._stream_step`).

    Attributes
    ----------
    first : bool
        Whether this call starts the stream (from its chunk).
    n_seen : int
        Units (rows, or documents) seen once the step is committed.
    n_steps : int
        t, the steps done since the stream started once the step is committed (0 on the
        first chunk).
    step_size : float
        rho_t = (t + ``learning_offset``)^(-``learning_decay``); 1.0 on the first chunk.
    n_total : int
        The units of the corpus the chunk stands for: the caller's count (``n_samples``,
        ``n_sets``), else ``n_seen`` (an endless stream).
    """

    first: bool
    n_seen: int
    n_steps: int
    step_size: float
    n_total: int


class StreamingMixin:
    """The bookkeeping of ``partial_fit``, written once for every streaming estimator.

    A stream is the state a model's step continues from (``_online``: running statistics or
    global natural parameters), the parameters its shapes and scheme were made with, and two
    public counters: the units seen (``n_samples_seen_``, or the attribute named by
    ``_stream_seen``) and the steps done since the stream started (``n_steps_``). A
    ``partial_fit`` is, around the model's own step::

        first, n_samples = self._stream_begin(n_samples)  # before the chunk is read
        ...  # check the chunk; on the first call start from it
        step = self._stream_step(first, n_chunk, n_samples)  # counts and rho_t
        ...  # the model's step with step.step_size and step.n_total / n_chunk
        self._stream_commit(state, step.n_seen, step.n_steps)

    The counters change only in :meth:`_stream_commit`, after the step has succeeded: a
    call that raises (a bad chunk, a refused parameter) leaves the model as it was. A fit
    that starts a stream of its own (a variational fit) commits its state with
    ``n_steps=0``; a fit that does not calls :meth:`_stream_forget`.

    Subclasses mix it in before their estimator base, add :data:`STREAM_CONSTRAINTS` to
    their ``_parameter_constraints`` (with ``learning_decay`` and ``learning_offset`` in
    ``__init__``) and set the class attributes below.
    """

    #: the constructor parameters the stream's state depends on (its shapes, its scheme):
    #: changing one between calls is refused (:meth:`_stream_begin`)
    _stream_params: tuple[str, ...] = ()
    #: the public counter of units seen
    _stream_seen: str = "n_samples_seen_"
    #: the name of ``partial_fit``'s corpus size argument, for its message
    _stream_count: str = "n_samples"

    def _stream_begin(self, count) -> tuple[bool, int | None]:
        """Check a ``partial_fit`` call before its chunk is read.

        The parameters are validated at every call (``set_params`` may have changed any
        of them since the last one); a stream is refused when one of ``_stream_params``
        differs from what it was made with.

        Parameters
        ----------
        count : int or None
            The caller's corpus size (``n_samples`` or ``n_sets``).

        Returns
        -------
        first : bool
            Whether there is no stream yet (this call starts one).
        count : int or None
            ``count`` checked (:func:`check_count`).

        Raises
        ------
        ValueError
            scikit-learn's message for a parameter; "<Estimator>.partial_fit: n_components=4
            differs from the stream this model carries (n_components=3); restore it, or call
            fit to start anew." for a changed stream; :func:`check_count`'s for ``count``.
        """
        self._validate_params()
        first = getattr(self, "_online", None) is None
        if not first:
            self._check_stream_params()
        return first, check_count(count, self._stream_count, allow_none=True)

    def _check_stream_params(self) -> None:
        """Refuse a stream whose parameters (``_stream_params``) have changed since it began."""
        now = self._current_stream_params()
        carried = self.__dict__.get("_stream_of", now)
        if now == carried:
            return

        def show(values):
            return ", ".join(
                f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}"
                for name, value in zip(self._stream_params, values, strict=True)
            )

        one = len(now) == 1
        raise ValueError(
            f"{type(self).__name__}.partial_fit: {show(now)} {'differs' if one else 'differ'} "
            f"from the stream this model carries ({show(carried)}); restore "
            f"{'it' if one else 'them'}, or call fit to start anew."
        )

    def _current_stream_params(self) -> tuple:
        """Return the values of ``_stream_params`` now."""
        return tuple(getattr(self, name) for name in self._stream_params)

    def _stream_step(self, first: bool, n_chunk: int, count: int | None) -> StreamStep:
        """Return the counts and the step size of this call (nothing of the model changes).

        Parameters
        ----------
        first : bool
            From :meth:`_stream_begin` (read before a first call's start set a stream).
        n_chunk : int
            The units of the chunk (rows, or documents).
        count : int or None
            The checked corpus size of :meth:`_stream_begin`.

        Returns
        -------
        StreamStep
            t = ``n_steps_`` + 1 and rho_t = (t + ``learning_offset``)^(-``learning_decay``)
            for a stream that goes on; t = 0 and rho = 1 for a first chunk.
        """
        if first:
            n_seen, n_steps, step_size = n_chunk, 0, 1.0
        else:
            n_seen = getattr(self, self._stream_seen) + n_chunk
            n_steps = self.n_steps_ + 1
            step_size = (n_steps + self.learning_offset) ** (-self.learning_decay)
        return StreamStep(first, n_seen, n_steps, step_size, n_seen if count is None else count)

    def _stream_commit(self, state, n_seen: int, n_steps: int = 0) -> None:
        """Keep the stream's new state and counters (after its step succeeded).

        Parameters
        ----------
        state : pytree
            What the next step continues from (``_online``).
        n_seen : int
            Units seen.
        n_steps : int, default 0
            Steps done since the stream started (0: a fit or a first chunk starts it).
        """
        self._online = state
        self._stream_of = self._current_stream_params()
        setattr(self, self._stream_seen, n_seen)
        self.n_steps_ = n_steps

    def _stream_forget(self) -> None:
        """Drop the stream and its counters (a new fit that starts none of its own)."""
        self._online = None
        for name in (self._stream_seen, "n_steps_", "_stream_of"):
            self.__dict__.pop(name, None)

    # ---- persistence of the stream (bayesvmf.save / bayesvmf.load) ---------------------------

    #: names under which a saved file holds the stream: its arrays ``stream.<i>`` and the
    #: JSON scalar ``stream`` (its tree, counters and parameters, as one JSON text)
    _STREAM_PREFIX = "stream"

    def _stream_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return (arrays, scalars) of the stream for :func:`bayesvmf.save` (empty: none).

        The state is a tree of tuples and named tuples of this package over arrays: each array is
        stored (a PRNG key as its key data), the tree as nested ``{"type", "fields"}``
        records naming each tuple class. A loaded model's ``partial_fit`` goes on with the
        stream where the saved one was; without it, the first call started a new stream
        from its chunk and dropped the fitted parameters in silence.
        """
        online = getattr(self, "_online", None)
        if online is None:
            return {}, {}
        arrays: dict[str, np.ndarray] = {}

        def describe(node):
            if isinstance(node, tuple) and hasattr(node, "_fields"):
                cls = type(node)
                return {
                    "type": f"{cls.__module__}:{cls.__qualname__}",
                    "fields": [describe(child) for child in node],
                }
            if isinstance(node, tuple):
                return {"tuple": [describe(child) for child in node]}
            name = f"{self._STREAM_PREFIX}.{len(arrays)}"
            if jnp.issubdtype(node.dtype, jax.dtypes.prng_key):
                arrays[name] = np.asarray(jax.random.key_data(node))
                return {"array": name, "key": str(jax.random.key_impl(node))}
            arrays[name] = np.asarray(node)
            return {"array": name}

        record = {
            "tree": describe(online),
            "seen": int(getattr(self, self._stream_seen)),
            "steps": int(self.n_steps_),
            "params": [
                value.item() if isinstance(value, np.generic) else value
                for value in self.__dict__.get("_stream_of", self._current_stream_params())
            ],
        }
        return arrays, {self._STREAM_PREFIX: json.dumps(record)}

    def _restore_stream(self, arrays: dict, scalars: dict) -> None:
        """Set the stream written by :meth:`_stream_state`, removing its entries from both."""
        prefix = self._STREAM_PREFIX
        names = [name for name in arrays if name.startswith(prefix + ".")]
        text = scalars.pop(prefix, None)
        stream = {name: arrays.pop(name) for name in names}
        if text is None:
            if stream:
                raise ValueError(f"{names[0]} without its stream record")
            return
        used: set[str] = set()
        try:
            record = json.loads(text)
            online = _stream_tree(record["tree"], stream, used)
            seen, steps, params = record["seen"], record["steps"], tuple(record["params"])
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            ImportError,
            RecursionError,
        ) as err:  # (json.JSONDecodeError is a ValueError)
            raise ValueError(f"corrupt stream record: {err}") from None
        if used != set(stream):
            raise ValueError(
                f"the stream arrays {sorted(set(stream) ^ used)} do not match the stream record"
            )
        self._online = online
        self._stream_of = params
        setattr(self, self._stream_seen, seen)
        self.n_steps_ = steps


def _stream_tree(node, arrays: dict, used: set):
    """Rebuild a stream tree described by :meth:`StreamingMixin._stream_state`.

    Only named tuples defined in this package are built (a file cannot name another class),
    and every array it names must be in ``arrays``; their names are added to ``used``.
    """
    if "array" in node:
        used.add(node["array"])
        value = arrays[node["array"]]
        if "key" in node:
            return jax.random.wrap_key_data(value, impl=node["key"])
        return value
    if "tuple" in node:
        return tuple(_stream_tree(child, arrays, used) for child in node["tuple"])
    module_name, _, qualname = node["type"].partition(":")
    if not module_name.startswith("bayesvmf."):
        raise ValueError(f"stream type {node['type']!r} is not of this package")
    cls = importlib.import_module(module_name)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"stream type {node['type']!r} is not a named tuple")
    if not cls.__module__.startswith("bayesvmf."):  # (a name the module imported)
        raise ValueError(f"stream type {node['type']!r} is not of this package")
    return cls(*(_stream_tree(child, arrays, used) for child in node["fields"]))
