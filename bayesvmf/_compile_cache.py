"""A persistent compilation cache for the duration of a fit.

Most of a first fit in a new Python process is XLA compiling the fit's programs (issue 19:
a B-vMFmix fit took 9.7-16.4 s the first time against 2.8 s after). JAX can keep compiled
programs on disk and read them back in later processes (its persistent compilation cache),
but it is off unless ``jax_compilation_cache_dir`` is set, a global setting that a library
must not change on import. :func:`compilation_cache` turns it on only while a block runs,
in the user cache folder of bayesvmf (:func:`bayesvmf.datasets.cache_dir`, ``/jax``), and
puts every setting back afterwards.

It changes nothing when

* the environment variable ``BAYESVMF_NO_COMPILATION_CACHE`` is set to anything but
  ``""`` or ``"0"``, or ``enabled`` is false;
* the session already has a cache folder (``jax_compilation_cache_dir``: the user's own, or
  an enclosing :func:`compilation_cache`) or has turned the cache off
  (``jax_enable_compilation_cache=False``);
* the folder cannot be created (a read-only home): the programs are then compiled as usual.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import jax

__all__ = ["ENV_DISABLE", "compilation_cache"]

#: Environment variable that turns the cache off when set to anything but "" or "0".
ENV_DISABLE = "BAYESVMF_NO_COMPILATION_CACHE"

#: The JAX settings :func:`compilation_cache` changes, restored on exit. JAX sets the third
#: itself when it opens a cache folder.
_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


def _disabled_by_environment() -> bool:
    return os.environ.get(ENV_DISABLE, "") not in ("", "0")


@contextlib.contextmanager
def compilation_cache(enabled: bool = True, folder=None) -> Iterator[Path | None]:
    """Keep XLA's compiled programs on disk while the block runs; yield the folder in use.

    Every program compiled inside the block is written to the folder, whatever its compile
    time (JAX's own default skips programs that compile in under a second, most of a fit's),
    and programs found there are read instead of compiled. On exit the JAX settings are
    restored and JAX's cache handle reset, so that compilations after the block see the
    session's own configuration again.

    Parameters
    ----------
    enabled : bool, default True
        False: change nothing.
    folder : str or path-like, optional
        Cache folder; default ``cache_dir() / "jax"`` (:func:`bayesvmf.datasets.cache_dir`:
        ``$BAYESVMF_CACHE``, ``$XDG_CACHE_HOME/bayesvmf`` or ``~/.cache/bayesvmf``).

    Yields
    ------
    pathlib.Path or None
        The folder the programs are read from and written to: this one, the session's own
        when it already had one, or None when no cache is in use (see the module notes).

    Examples
    --------
    >>> from bayesvmf._compile_cache import compilation_cache
    >>> with compilation_cache(enabled=False) as folder:
    ...     print(folder)
    None
    """
    current = jax.config.jax_compilation_cache_dir
    if current:  # the session's own cache, or an enclosing block's: leave it as it is
        yield Path(current)
        return
    if not enabled or _disabled_by_environment() or not jax.config.jax_enable_compilation_cache:
        yield None
        return
    if folder is None:
        from bayesvmf.datasets import cache_dir

        folder = cache_dir() / "jax"
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # not writable: compile as usual
        yield None
        return

    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    before = {name: getattr(jax.config, name) for name in _SETTINGS}
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # JAX opens its cache at the first compilation after a reset, with the settings of then
    jax_cache.reset_cache()
    try:
        yield folder
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        jax_cache.reset_cache()
