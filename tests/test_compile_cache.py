"""The scoped persistent compilation cache of bayesvmf._compile_cache."""

import json
import textwrap
import warnings
import weakref
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from conftest import run_python

import bayesvmf
from bayesvmf import _compile_cache, _data
from bayesvmf._base import BaseVMFEstimator
from bayesvmf._compile_cache import ENV_DISABLE, compilation_cache

SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


def _settings():
    return {name: getattr(jax.config, name) for name in SETTINGS}


def _compile_new_program(seed: float) -> None:
    """Compile (and run) a program no other test compiles: a constant of its own."""
    jax.jit(lambda x: jnp.sin(x) * seed + seed**2)(np.arange(3.0)).block_until_ready()


@pytest.fixture(autouse=True)
def no_disabling_variable(monkeypatch):
    monkeypatch.delenv(ENV_DISABLE, raising=False)


@pytest.fixture
def default_settings():
    """The process default of set_compilation_cache (the suite's own folder), restored."""
    before = dict(_compile_cache._DEFAULT)
    yield
    _compile_cache._DEFAULT.update(before)


def test_cache_is_written_inside_the_block_and_settings_restored(tmp_path):
    before = _settings()
    assert before["jax_compilation_cache_dir"] is None  # the suite sets no cache
    with compilation_cache(folder=tmp_path / "jax") as folder:
        assert folder == tmp_path / "jax"
        assert jax.config.jax_compilation_cache_dir == str(folder)
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
        _compile_new_program(1.2345)
        written = set(folder.iterdir())
    assert written  # the program, although it compiled in well under a second
    assert _settings() == before
    _compile_new_program(2.3456)  # after the block: nothing more on disk
    assert set(folder.iterdir()) == written


def test_default_folder_is_the_user_cache(tmp_path, monkeypatch, default_settings):
    bayesvmf.set_compilation_cache()  # the suite's conftest set a temporary folder
    monkeypatch.setenv("BAYESVMF_CACHE", str(tmp_path / "cache"))
    with compilation_cache() as folder:
        assert folder == tmp_path / "cache" / "jax" and folder.is_dir()


def test_set_compilation_cache(tmp_path, default_settings):
    bayesvmf.set_compilation_cache(True, tmp_path / "mine")
    with compilation_cache() as folder:
        assert folder == tmp_path / "mine"
    bayesvmf.set_compilation_cache(False)
    with compilation_cache() as folder:
        assert folder is None and jax.config.jax_compilation_cache_dir is None
    with compilation_cache(enabled=True, folder=tmp_path / "asked") as folder:
        assert folder == tmp_path / "asked"  # an explicit block still turns it on
    with pytest.raises(TypeError, match="enabled must be a bool; got 'no'"):
        bayesvmf.set_compilation_cache("no")


def test_a_disabled_block_keeps_nested_blocks_off(tmp_path):
    with compilation_cache(False):
        with compilation_cache(folder=tmp_path / "inner") as inner:
            assert inner is None and jax.config.jax_compilation_cache_dir is None
    with compilation_cache(folder=tmp_path / "after") as after:  # the default again
        assert after == tmp_path / "after"


class _Warner(BaseVMFEstimator):
    """An estimator whose fit warns at its caller's line, as the package's warnings do."""

    def fit(self, X=None, y=None):
        self.fitted_ = True
        warnings.warn("at the caller", UserWarning, stacklevel=2)
        return self

    def path(self, X=None):
        warnings.warn("on the path", UserWarning, stacklevel=2)
        return self

    def predict(self, X=None):
        if X == "raise":
            warnings.warn("before the error", UserWarning, stacklevel=2)
            raise KeyError("inside")
        return self.fit().fitted_  # nested: the outermost call re-emits


def test_warnings_keep_pointing_at_the_caller(tmp_path, default_settings):
    bayesvmf.set_compilation_cache(True, tmp_path / "jax")
    with pytest.warns(UserWarning, match="at the caller") as record:
        _Warner().fit()
    assert [Path(w.filename) for w in record] == [Path(__file__)]
    with pytest.warns(UserWarning, match="at the caller") as record:
        _Warner().predict()
    assert [Path(w.filename) for w in record] == [Path(__file__)]
    # SparseVMFMixture.path is a cached method too (its warnings pointed one frame off)
    with pytest.warns(UserWarning, match="on the path") as record:
        _Warner().path()
    assert [Path(w.filename) for w in record] == [Path(__file__)]
    # the method's exception wins over a warning the filters turn into an error
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyError, match="inside"):
            _Warner().predict("raise")
        with pytest.raises(UserWarning, match="at the caller"):
            _Warner().fit()


class _Recorder(BaseVMFEstimator):
    """An estimator whose methods record the cache folder they run in."""

    def fit(self, X=None, y=None):
        self.fit_folder_ = jax.config.jax_compilation_cache_dir
        self.predict_folder_ = self.predict(X)
        return self

    def predict(self, X=None):
        return jax.config.jax_compilation_cache_dir

    def helper(self):
        return jax.config.jax_compilation_cache_dir


def test_estimator_methods_run_inside_the_cache(tmp_path, default_settings):
    bayesvmf.set_compilation_cache(True, tmp_path / "jax")
    before = _settings()
    model = _Recorder().fit()
    assert model.fit_folder_ == model.predict_folder_ == str(tmp_path / "jax")
    assert model.predict() == str(tmp_path / "jax")
    assert model.helper() is None  # not one of CACHED_METHODS
    assert _settings() == before
    assert _Recorder.fit.__wrapped__.__name__ == "fit"  # signature and docs kept
    bayesvmf.set_compilation_cache(False)
    assert _Recorder().fit().fit_folder_ is None


def test_a_fits_host_copies_are_freed_when_it_returns():
    # the data copy a fit hands to JAX (bayesvmf._data._device_put_aligned) is freed when
    # the method returns, not when Python's collector or the next fit makes JAX let go of
    # it (dense 50,000 x 256 in float32: about 50 MB less resident after a fit). With the
    # collector off, so that its callback cannot do it instead, in a new process (a copy
    # still used by a computation JAX runs asynchronously is let go once it finished:
    # test_release_waits_for_jax_to_let_go_of_deleted_copies)
    script = textwrap.dedent(
        """
        import gc, weakref
        import numpy as np
        from bayesvmf import _data
        from bayesvmf.data import check_directional
        from bayesvmf.models import SparseVMFMixture

        buffers, allocate = [], _data._host_buffer

        def recording(nbytes):
            raw = allocate(nbytes)
            buffers.append(weakref.ref(raw))
            return raw

        _data._host_buffer = recording
        X = check_directional(np.random.default_rng(0).normal(size=(300, 6)))
        gc.disable()
        model = SparseVMFMixture(2, random_state=0).fit(X)
        print(len(buffers), sum(ref() is not None for ref in buffers))
        print(model.predict(X).shape)
        """
    )
    made, alive = map(int, run_python(script).split()[:2])
    assert made >= 1 and alive == 0, (made, alive)


def test_release_waits_for_jax_to_let_go_of_deleted_copies(monkeypatch):
    # JAX queues a deleted array's host buffer only once the computations on it finished,
    # so at a method's return its copy may still be held: release_host_buffers(wait=...)
    # collects again until it goes. Here a stand-in for JAX's collector drops its hold on
    # the third call; the array sharing the buffer is gone, a live one is not waited for
    from jax._src import lib

    class Array:  # weakref-able, as jax.Array is
        pass

    held, calls = [np.empty(8, np.uint8)], []

    def collect():
        calls.append(1)
        if len(calls) == 3:
            held.clear()

    monkeypatch.setattr(lib._jax, "collect_garbage", collect)
    monkeypatch.setattr(_compile_cache, "_SHARED", [])
    buffer = weakref.ref(held[0])
    _compile_cache.share_host_buffer(held[0], Array())  # its array is deleted at once
    _compile_cache.release_host_buffers()  # no wait: one collection, the buffer still held
    assert len(calls) == 1 and buffer() is not None
    _compile_cache.release_host_buffers(wait=5.0)
    assert len(calls) == 3 and buffer() is None and _compile_cache._SHARED == []
    alive, keep = Array(), np.empty(8, np.uint8)
    _compile_cache.share_host_buffer(keep, alive)
    _compile_cache.release_host_buffers(wait=5.0)  # its array is alive: one collection
    assert len(calls) == 4 and len(_compile_cache._SHARED) == 1


@pytest.mark.parametrize(("value", "used"), [("1", False), ("yes", False), ("0", True)])
def test_environment_variable_turns_it_off(tmp_path, monkeypatch, value, used):
    monkeypatch.setenv(ENV_DISABLE, value)
    before = _settings()
    with compilation_cache(folder=tmp_path / "jax") as folder:
        assert (folder is not None) is used
        assert (jax.config.jax_compilation_cache_dir is not None) is used
    assert _settings() == before
    assert (tmp_path / "jax").exists() is used


def test_parameter_turns_it_off(tmp_path):
    with compilation_cache(enabled=False, folder=tmp_path / "jax") as folder:
        assert folder is None and jax.config.jax_compilation_cache_dir is None
    assert not (tmp_path / "jax").exists()


def test_the_sessions_own_cache_is_left_alone(tmp_path):
    own = str(tmp_path / "own")
    jax.config.update("jax_compilation_cache_dir", own)
    try:
        with compilation_cache(folder=tmp_path / "ours") as folder:
            assert folder == tmp_path / "own"
            assert jax.config.jax_compilation_cache_dir == own
            with compilation_cache(folder=tmp_path / "inner") as inner:  # nested: the same
                assert inner == folder
        assert jax.config.jax_compilation_cache_dir == own
        assert not (tmp_path / "ours").exists() and not (tmp_path / "inner").exists()
    finally:
        jax.config.update("jax_compilation_cache_dir", None)


def test_unwritable_folder_means_no_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    before = _settings()
    with compilation_cache(folder=blocker / "jax") as folder:
        assert folder is None
        assert _settings() == before


def test_settings_restored_after_an_error(tmp_path):
    before = _settings()
    with pytest.raises(KeyError, match="inside"), compilation_cache(folder=tmp_path / "jax"):
        raise KeyError("inside")
    assert _settings() == before


SCRIPT = textwrap.dedent(
    """
    import json, logging, sys, threading, warnings
    import jax, numpy as np, scipy.sparse
    import bayesvmf
    from bayesvmf import _executables
    from bayesvmf.models import BayesianVMFMixture, SparseVMFMixture

    bayesvmf.set_compilation_cache(True, sys.argv[1])
    events, names, draws, read = [], [], [], []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    read_executable = _executables.read


    def reading(path, exported):  # note the thread of each executable read back
        compiled = read_executable(path, exported)
        if compiled is not None:
            read.append(threading.current_thread().name)
        return compiled


    _executables.read = reading


    class Names(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Compiling jit(_power_start_draw)"):
                draws.append(message)
            if message.startswith("Compiling "):  # "Compiling NAME with global shapes ..."
                # the text before the argument mapping (a compilation's placement differs
                # only there); a message without it is kept whole, flagged, and fails the test
                head, marker, _ = message.partition(". Argument mapping")
                names.append(head[len("Compiling ") :] if marker else "NO-MARKER " + message)


    logging.getLogger("jax").addHandler(Names())
    logging.getLogger("jax").setLevel(logging.WARNING)
    jax.config.update("jax_log_compiles", True)
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)) + 3 * np.repeat(np.eye(4)[:3], 20, axis=0)
    # default fits of dense data, then of sparse data, the programs each compiles
    fit_names = []
    # sparse input: the SciPy products and row reads are custom calls, not host callbacks
    X_csr = scipy.sparse.csr_matrix(np.abs(X))
    # B-vMFmix's other q(kappa) scheme too: its VI step, read back by an executable that lost
    # its compile options, crashed the process (session 22, not kept)
    for data, cls, kwargs in (
        (X, SparseVMFMixture, {}),
        (X, BayesianVMFMixture, {}),
        (X, BayesianVMFMixture, {"kappa_update": "bounding"}),
        (X_csr, SparseVMFMixture, {"n_init": 1}),
        (X_csr, BayesianVMFMixture, {"n_init": 1}),
    ):
        names.clear()
        cls(3, random_state=0, max_iter=5, **kwargs).fit(data)
        fit_names.append(list(names))
    counts = {name.rsplit("/", 1)[-1]: events.count(name) for name in set(events)}
    imports = sorted({"scipy.io", "bayesvmf.datasets"} & set(sys.modules))
    print(json.dumps({"events": counts, "fit_names": fit_names, "imports": imports,
                      "draws": len(draws), "executables": len(read),
                      "prefetched": read.count("bayesvmf-prefetch")}))
    """
)


def _run_script(script: str, folder) -> str:
    """Run ``script`` in a new Python process with the cache folder ``folder``; its stdout."""
    return run_python(script, folder, env={ENV_DISABLE: None})


def test_a_later_process_reads_the_fits_back_and_runs_no_eager_operation(tmp_path):
    """A second process's fits (dense Sparse and B-vMFmix, each q(kappa) scheme, and CSR) compile
    nothing at all: every program the first process compiled comes back as its executable,
    some read ahead by the prefetch thread. A program that could not be exported (a custom
    call whose check was not disabled), or an eager operation (a key split, a transpose, a
    sum outside a program), would be traced and compiled again in every new process. The
    bounding scheme's VI step holds an LU factorisation: read back without jaxlib's LAPACK
    functions filled (``_executables._initialise_lapack``), it crashed the second process
    (sessions 22 and 24). One pair of processes checks both (each new process costs the
    suite about ten seconds)."""

    def run():
        return json.loads(_run_script(SCRIPT, tmp_path / "jax").splitlines()[-1])

    first, second = run(), run()
    requests = "compile_requests_use_cache"  # compilations, through JAX's cache
    assert first["events"].get("cache_hits", 0) == 0 and first["events"][requests] > 0
    assert first["executables"] == 0 and second["executables"] > 0
    # every program of the first process but what only tracing needs (the fixed start of
    # _parallel.split_gains' power iterations, drawn by a program of its own when a program
    # that calls it is traced), which a process that reads the traces back never asks for
    assert first["draws"] > 0 and second["draws"] == 0
    compiled = first["events"][requests] - first["draws"]
    # the second process compiles nothing anew: what it does not read as an executable, it
    # compiles through JAX's cache, which serves it
    assert second["events"].get(requests, 0) == second["events"].get("cache_hits", 0)
    assert second["executables"] + second["events"].get("cache_hits", 0) == compiled
    # the second process reads programs ahead (_program_cache.prefetching), the first has
    # nothing to read ahead
    assert first["prefetched"] == 0 and second["prefetched"] > 0
    for names in first["fit_names"]:  # "NAME with global shapes and types (...)"
        assert names, "no program compiled at all: the log capture is broken"
        # each program of the first process is logged as exported (jit(program)) and as
        # compiled from its export (jit(call)); one that could not be exported (a custom call
        # whose check was not disabled) is compiled under its own name in every process. The
        # fixed start of split_gains' power iterations is compiled while a program that
        # calls it is traced.
        kinds = {name.split()[0] for name in names}
        assert kinds <= {"jit(program)", "jit(call)", "jit(_power_start_draw)"}, names
        compiled = [name for name in names if name.startswith("jit(call)")]
        # no program twice in one fit (the sparse mixture's first EM step took host-made
        # counts, placed otherwise than the step's outputs: a second program of that step)
        assert compiled and len(set(compiled)) == len(compiled), names
    assert second["fit_names"] == [[]] * len(first["fit_names"])
    assert second["executables"] == sum(
        name.startswith("jit(call)") for names in first["fit_names"] for name in names
    )
    # a fit imports nothing slow it does not use: scipy.io took about 0.12 s of every first
    # fit, since bayesvmf.datasets (imported by the fits for the cache folder, which makes
    # this check meaningful) imported it at the top
    assert first["imports"] == second["imports"] == ["bayesvmf.datasets"]


def test_host_kernel_products_equal_scipy():
    """The custom call of the "scipy" kernel: X @ B, X.T @ B, vmapped, float32 and float64."""
    from bayesvmf import _host_kernel
    from bayesvmf._data import register_host_block

    A = scipy.sparse.random(30, 7, density=0.3, random_state=0, format="csr")
    handle, anchor = register_host_block(A)
    B = np.random.default_rng(0).normal(size=(2, 30, 3))
    with jax.enable_x64(True):
        product = jax.jit(
            jax.vmap(lambda b: _host_kernel.scipy_product(handle, b, shape=A.shape, transpose=True))
        )
        np.testing.assert_allclose(product(B), [A.T @ b for b in B], rtol=1e-14)
        out = _host_kernel.scipy_product(handle, B[0, :7], shape=A.shape, transpose=False)
        np.testing.assert_allclose(out, A @ B[0, :7], rtol=1e-14)
    A32 = A.astype(np.float32)
    handle32, anchor32 = register_host_block(A32)
    B32 = B[0, :7].astype(np.float32)
    out = _host_kernel.scipy_product(handle32, B32, shape=A.shape, transpose=False)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, A32 @ B32, rtol=1e-6)
    with pytest.raises(ValueError, match="the sparse data of a product cannot be batched"):
        jax.vmap(lambda h: _host_kernel.scipy_product(h, B32, shape=A.shape, transpose=False))(
            np.stack([handle32, handle32])
        )


def test_host_kernel_rows_equal_scipy_and_the_onehot_product():
    """The rows target: X[idx] dense, vmapped, float32 and float64, equal bit for bit to
    X.T @ onehot(idx), what SparseData.take_rows computed before, and cached like products."""
    from bayesvmf import _host_kernel
    from bayesvmf._data import register_host_block

    A = scipy.sparse.random(40, 9, density=0.3, random_state=1, format="csr")
    idx = np.array([[3, 0, 39], [7, 7, 1]])
    for dtype in (np.float64, np.float32):
        Ad = A.astype(dtype)
        handle, anchor = register_host_block(Ad)
        with jax.enable_x64(True):
            rows = jax.jit(
                jax.vmap(lambda i: _host_kernel.scipy_rows(handle, i, shape=A.shape, dtype=dtype))
            )(idx)
            onehot = jax.nn.one_hot(idx[0], A.shape[0], dtype=dtype).T
            product = _host_kernel.scipy_product(handle, onehot, shape=A.shape, transpose=True)
        assert rows.dtype == dtype and rows.shape == (2, 3, 9)
        np.testing.assert_array_equal(rows, np.stack([Ad[i].toarray() for i in idx]))
        np.testing.assert_array_equal(rows[0], np.asarray(product).T)
    with pytest.raises(ValueError, match="the sparse data of a product cannot be batched"):
        jax.vmap(lambda h: _host_kernel.scipy_rows(h, idx[0], shape=A.shape, dtype=np.float32))(
            np.stack([handle, handle])
        )


# ---- XLA options chosen by the size of the arguments (_compile_cache.jit) ------------------


def test_arguments_compile_with_the_options_of_their_size():
    def double(x):  # a function of its own: JAX's jit caches are per function and options
        return 2.0 * x

    f = _compile_cache.jit(double)
    large, small, tiny = f.variants
    counts = lambda: tuple(v._cache_size() for v in f.variants)  # noqa: E731
    f(np.ones(_compile_cache.TINY_PROGRAM_SIZE))
    assert counts() == (0, 0, 1)
    f(np.ones(_compile_cache.TINY_PROGRAM_SIZE + 1))
    assert counts() == (0, 1, 1)
    f(np.ones(_compile_cache.SMALL_PROGRAM_SIZE + 1))
    assert counts() == (1, 1, 1)
    assert f._cache_size() == 3
    # each tier adds its options to the ones of the larger tier
    assert f.options[1] == {**f.options[0], **_compile_cache.SMALL_PROGRAM_OPTIONS}
    assert f.options[2] == {**f.options[1], **_compile_cache.TINY_PROGRAM_OPTIONS}
    for variant in (small, tiny):  # JAX accepts the options
        assert variant.lower(np.ones(3)).compile() is not None


def test_a_call_inside_another_trace_takes_no_options():
    """JAX refuses compiler_options on a nested jit, even for NumPy (untraced) arguments."""

    def double(x):
        return 2.0 * x

    f = _compile_cache.jit(double)
    np.testing.assert_array_equal(jax.jit(lambda y: f(np.ones(3)) + y)(1.0), np.full(3, 3.0))
    assert [v._cache_size() for v in f.variants[1:]] == [0, 0]
    sizes = []
    jax.jit(lambda x: sizes.append(_compile_cache.argument_size((x, 2))) or x)(np.ones(3))
    assert sizes == [None]


def test_argument_size_counts_entries_and_host_sparse_entries():
    X = scipy.sparse.random(50, 40, density=0.1, format="csr", random_state=0)
    X.data += 1.0
    sparse = _data.to_device(X, kernel="scipy")
    dense = _data.to_device(X.toarray())
    assert _compile_cache.argument_size(sparse) == X.nnz == 200
    assert _compile_cache.argument_size((dense, {"k": np.zeros((3, 4))}, None, "a")) == (
        2 * 50 * 40 + 12
    )


@pytest.mark.filterwarnings("ignore::bayesvmf.ConvergenceWarning")
@pytest.mark.parametrize("name", ["SparseVMFMixture", "BayesianVMFMixture"])
def test_fits_agree_under_every_options(name, monkeypatch):
    """The options change the generated code, not the arithmetic: the same fit every way."""
    import bayesvmf.models as models

    X = bayesvmf.make_vmf_mixture(120, 4, 3, kappa=20.0, random_state=0).X
    fits = {"tiny": getattr(models, name)(3, max_iter=20, random_state=0).fit(X)}
    monkeypatch.setattr(_compile_cache, "TINY_PROGRAM_SIZE", -1)
    fits["small"] = getattr(models, name)(3, max_iter=20, random_state=0).fit(X)
    monkeypatch.setattr(_compile_cache, "SMALL_PROGRAM_SIZE", -1)
    large = getattr(models, name)(3, max_iter=20, random_state=0).fit(X)
    for tier, fit in fits.items():
        np.testing.assert_array_equal(fit.predict(X), large.predict(X), err_msg=tier)
        np.testing.assert_allclose(
            fit.mean_directions_, large.mean_directions_, atol=1e-12, err_msg=tier
        )
        np.testing.assert_allclose(
            fit.concentrations_, large.concentrations_, rtol=1e-10, err_msg=tier
        )
        np.testing.assert_allclose(fit.score(X), large.score(X), rtol=1e-12, err_msg=tier)
