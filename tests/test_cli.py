"""The command line and the README's example run as documented."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse

from bayesvmf import _cli_demo, _compile_cache, cli, load, make_vmf_mixture
from bayesvmf._compile_cache import compilation_cache
from bayesvmf.metrics import adjusted_rand as adjusted_rand_score
from bayesvmf.models import SparseVMFMixture

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The real ``bayesvmf demo``, once, compiling from scratch (an empty cache folder)."""
    cache = tmp_path_factory.mktemp("demo-cache")
    env = {**os.environ, "BAYESVMF_CACHE": str(cache), "MPLBACKEND": "Agg", "JAX_PLATFORMS": "cpu"}
    # the suite turns the estimators' cache off (conftest); the demo's own cache is tested here
    env.pop("BAYESVMF_NO_COMPILATION_CACHE", None)
    run = subprocess.run(
        [sys.executable, "-m", "bayesvmf.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    return cache, run


def _number(pattern, text):
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the demo output"
    return float(match.group(1))


def test_demo_runs_every_section(demo_run):
    cache, run = demo_run
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    out = run.stdout
    for number, (title, _) in enumerate(cli.DEMO_SECTIONS.values(), start=1):
        assert f"[{number}/7] {title}" in out
    times = [float(t) for t in re.findall(r"^   \((\d+\.\d) s\)$", out, flags=re.M)]
    total = _number(r"Done: 7 sections in (\d+\.\d) s\.", out)
    # each time is printed rounded to 0.1 s: the 8 roundings can add up to 0.4 s
    assert len(times) == 7 and sum(times) <= total + 0.05 * (len(times) + 1)
    assert "warning:" not in out  # every fit converged
    assert any((cache / "jax").iterdir())  # compiled programs kept for the next run


def test_demo_numbers_are_sane(demo_run):
    out = demo_run[1].stdout
    # NUTS: the true kappa is inside the 95% interval and the two chains agree
    assert "(inside: true 60)" in out
    assert _number(r"NUTS on kappa .* R-hat (\d+\.\d+)", out) < 1.05
    # digits, 10 clusters: chance level ARI is 0; the mixtures reach about 0.5
    assert _number(r"classical vMF mixture\): ARI (\d+\.\d+)", out) > 0.3
    assert _number(r"BIC picks beta = .*: test ARI (\d+\.\d+)", out) > 0.3
    assert _number(r"VI \(kappa bounded\) .* test ARI (\d+\.\d+)", out) > 0.3
    assert _number(r"collapsed Gibbs .* R-hat of kappa (\d+\.\d+)", out) < 1.1
    assert _number(r"collapsed Gibbs .* ARI (\d+\.\d+)", out) > 0.5
    assert _number(r"leaves each on the 1200 images: test ARI (\d+\.\d+)", out) > 0.3
    # held-out log-likelihoods per image of B-vMFmix and the classical mixture are close
    classical = _number(r"held-out log-likelihood (-?\d+\.\d+) per image\n", out)
    vi = _number(r"test ARI \d\.\d+, held-out log-likelihood (-?\d+\.\d+) per image \(", out)
    assert abs(vi - classical) < 0.05 * abs(classical)
    # T-vMFmix: letting the means drift forecasts the next step better than fixed means
    drifting = _number(r"drifting means \(T-vMFmix, C0 = 100\) (-?\d+\.\d+) per row", out)
    fixed = _number(r"fixed means \(B-vMFmix\) (-?\d+\.\d+) per row", out)
    assert drifting > fixed
    assert _number(r"against their main digit: NMI (\d+\.\d+)", out) > 0.5
    assert "DP-k-MLE++ chose K = 3" in out
    assert _number(r"Hartigan transfers: ARI (\d+\.\d+)", out) > 0.9


def test_demo_help_names_every_model(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for words in ("NUTS", "sparse beta path", "B-vMFmix by VI and Gibbs", "H-vMFmix", "T-vMFmix"):
        assert words in out
    assert "Dirichlet-vMF mixture" in out and "k-MLE" in out and "--no-cache" in out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_bad_argument_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        cli.main(["demo", "--num-samples", "3"])
    assert "--num-samples must be at least 10, got 3" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly_with_status_1(monkeypatch):
    """``bayesvmf info model.npz | head``: the reader leaves, the command stops without a
    traceback, stdout goes to devnull (so the interpreter's last flush cannot fail again)
    and the exit status is 1, as Python's own for a cut-short output."""

    def cut_short(args):
        raise BrokenPipeError(32, "Broken pipe")

    redirected = []
    monkeypatch.setitem(cli._COMMANDS, "info", cut_short)
    monkeypatch.setattr(cli.os, "dup2", lambda source, target: redirected.append(target))
    monkeypatch.setattr(cli.sys, "stdout", type("Out", (), {"fileno": lambda self: 41})())
    assert cli.main(["info", "model.npz"]) == 1
    assert redirected == [41]


def test_demo_leaves_the_jax_configuration_as_it_was(tmp_path, monkeypatch):
    import jax

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    before = [getattr(jax.config, name) for name in names]
    monkeypatch.setenv("BAYESVMF_CACHE", str(tmp_path))
    monkeypatch.delenv("BAYESVMF_NO_COMPILATION_CACHE", raising=False)
    # the default folder, not the suite's temporary one (tests/conftest.py)
    monkeypatch.setitem(_compile_cache._DEFAULT, "folder", None)
    # the demo's cache is the estimators' one (bayesvmf._compile_cache)
    assert _cli_demo.compilation_cache is compilation_cache
    with _cli_demo.compilation_cache(True) as folder:
        assert folder == tmp_path / "jax" and folder.is_dir()
        assert [getattr(jax.config, name) for name in names] == [str(folder), 0.0]
    assert [getattr(jax.config, name) for name in names] == before
    with _cli_demo.compilation_cache(False) as folder:
        assert folder is None
        assert [getattr(jax.config, name) for name in names] == before


def test_readme_has_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    assert commands[0].endswith("bayesvmf demo")
    assert commands[1].endswith("python -m pytest")
    # .ci/run runs the README's test command verbatim but for the interpreter's name
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1].replace("python3.11 ", '"$PYTHON" ', 1) in ci


def _readme_examples():
    return re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)


def _readme_example(containing: str) -> str:
    (example,) = [e for e in _readme_examples() if containing in e]
    return example


def test_readme_example_runs():
    example = _readme_example("NUTS(model)")
    # the example as written, with fewer NUTS iterations to keep the suite fast
    example = example.replace("num_warmup=300, num_samples=300", "num_warmup=50, num_samples=50")
    example = example.replace("mcmc.print_summary()", "samples = mcmc.get_samples()")
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["samples"]["kappa"].shape == (50,)


def test_readme_sparse_example_runs():
    example = _readme_example("model.path(X)")
    X = make_vmf_mixture(200, 10, 4, kappa=20.0, random_state=0).X
    namespace = {"X": X}
    exec(compile(example, "README.md", "exec"), namespace)
    assert isinstance(namespace["best"], SparseVMFMixture)
    assert namespace["path"].betas[0] == 0.0


def test_readme_bayesian_example_runs():
    example = _readme_example("gibbs.to_arviz()")
    sample = make_vmf_mixture(240, 5, 4, kappa=30.0, random_state=1)
    namespace = {"X_train": sample.X[:160], "X_test": sample.X[160:]}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["vi"].concentrations_.shape == (4,)
    assert dict(namespace["idata"].posterior.sizes)["chain"] == 2


def test_readme_streaming_example_runs(tmp_path, monkeypatch):
    """The README's streamed B-vMFmix fit, on three chunk files of a generated mixture."""
    monkeypatch.chdir(tmp_path)
    sample = make_vmf_mixture(300, 10, 3, kappa=60.0, random_state=2)
    for i, chunk in enumerate(np.split(sample.X, 3)):
        np.savez(tmp_path / f"part{i}.npz", X=chunk)
    example = _readme_example("fit_streaming(model")
    example = example.replace("BayesianVMFMixture(20,", "BayesianVMFMixture(3,")  # K of the data
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)
    model = namespace["model"]
    assert model.n_samples_seen_ == 300 and model.n_steps_ == 2
    assert adjusted_rand_score(sample.labels, model.predict(sample.X)) > 0.9


def test_readme_datasets_example_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESVMF_CACHE", str(tmp_path))
    namespace = {}
    exec(compile(_readme_example("load_digits_directional()"), "README.md", "exec"), namespace)
    assert namespace["corpus"].X.shape[0] == len(namespace["corpus"].y)
    assert namespace["digits"].X.shape == (1797, 64)


def test_readme_compare_example_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESVMF_CACHE", str(tmp_path))
    example = _readme_example("table = compare(")
    assert "seeds=range(5)" in example
    example = example.replace("seeds=range(5)", "seeds=range(2)")  # fewer fits in the suite
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)
    table = namespace["table"]
    assert table.names == ("vMF mixture", "shared kappa") and table.log_likelihood.shape == (2, 2)
    # the README's reading of its table: free kappa predicts better, shared kappa clusters better
    rows = table.rows()
    assert rows[1]["difference"] < 0 and rows[1]["nmi"] > rows[0]["nmi"]


# ---- end to end, by subprocess: one run per input format, a bad file, a bad option ----------


def _blobs(n=90, d=8, k=3, seed=0, noise=0.15):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(k), n // k)
    X = np.eye(d)[labels] + noise * rng.standard_normal((n, d))
    return X, labels


TOPICS = {
    "astronomy": "star galaxy planet orbit telescope comet nebula",
    "cooking": "oven flour butter bake roast sugar dough",
    "sailing": "boat sail wind harbour keel mast anchor",
}


def _text_folder(root):
    rng = np.random.default_rng(0)
    for name, words in TOPICS.items():
        (root / name).mkdir(parents=True)
        for i in range(8):
            (root / name / f"{i}.txt").write_text(" ".join(rng.choice(words.split(), size=12)))


RUNS = {
    # name: (arguments, files written into --out)
    "npz": (["fit", "{tmp}/toy.X.npz", "--model", "sparse", "-k", "3", "--out", "{tmp}/fit"],),
    "npy": (["path", "{tmp}/toy.npy", "-k", "3", "--max-steps", "4", "--out", "{tmp}/path"],),
    "mtx": (
        ["compare", "{tmp}/toy.mtx", "--labels", "{tmp}/toy.y.npy", "-k", "3", "--seeds", "2"]
        + ["--models", "sparse", "--out", "{tmp}/compare"],
    ),
    "text": (["fit", "{tmp}/texts", "-k", "3", "--shared-kappa", "--out", "{tmp}/text"],),
    "bad_file": (["fit", "{tmp}/garbage.npy", "-k", "3", "--out", "{tmp}/bad"],),
    "bad_option": (["fit", "{tmp}/toy.npy", "--model", "nosuch", "-k", "3", "--out", "{tmp}/x"],),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every command line of RUNS at once (two cores), return name -> CompletedProcess."""
    tmp = tmp_path_factory.mktemp("cli")
    X, labels = _blobs()
    scipy.sparse.save_npz(tmp / "toy.X.npz", scipy.sparse.csr_matrix(X))
    np.save(tmp / "toy.y.npy", labels)
    np.save(tmp / "toy.npy", X)
    # compare fits every model from one plain k-means++ seeding per seed, no restarts: on
    # these blobs that seeding puts two seeds in one blob for 26-28% of keys (measured over
    # 1,000, before and after session 33's seeding draws), so the .mtx run, which checks
    # NMI > 0.9 at seeds 0 and 1, gets tighter blobs (3.4% of keys)
    scipy.io.mmwrite(tmp / "toy.mtx", scipy.sparse.coo_matrix(_blobs(noise=0.05)[0]))
    _text_folder(tmp / "texts")
    (tmp / "garbage.npy").write_bytes(b"this is not an array")
    env = {**os.environ, "MPLBACKEND": "Agg", "JAX_PLATFORMS": "cpu"}
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-m", "bayesvmf.cli", *[a.format(tmp=tmp) for a in args[0]]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, args in RUNS.items()
    }
    results = {}
    for name, process in processes.items():
        out, err = process.communicate(timeout=600)
        results[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return tmp, results


def test_fit_on_npz_with_labels_saves_model_summary_and_plots(runs):
    tmp, results = runs
    run = results["npz"]
    assert run.returncode == 0, run.stderr
    assert "toy from" in run.stdout  # NAME.X.npz + NAME.y.npy: the labels were found
    summary = json.loads((tmp / "fit" / "summary.json").read_text())
    assert summary["n_samples"] == 90 and summary["n_features"] == 8
    assert summary["converged"] is True
    assert sorted(summary["cluster_sizes"]) == [30, 30, 30]
    assert summary["scores"]["ari"] == pytest.approx(1.0)  # three far-apart blobs
    for name in ("model.npz", "prototypes.png", "data.png"):
        assert (tmp / "fit" / name).stat().st_size > 0
    model = load(tmp / "fit" / "model.npz")
    assert isinstance(model, SparseVMFMixture)
    np.testing.assert_allclose(sorted(model.weights_), sorted(summary["weights"]), rtol=1e-12)


def test_info_describes_a_saved_model(runs, capsys):
    tmp, _ = runs
    assert cli.main(["info", str(tmp / "fit" / "model.npz")]) == 0
    out = capsys.readouterr().out
    assert "bayesvmf.models.sparse.SparseVMFMixture" in out
    assert "n_components = 3" in out
    assert "mean_directions_: float64 array of shape (3, 8)" in out


def test_info_summarises_a_stream_and_long_lists(tmp_path, capsys):
    """A streamed model's record and arrays are one line, long lists their length (info
    printed the raw JSON of the stream and every feature name; review of the diff)."""
    import pandas as pd

    from bayesvmf import save
    from bayesvmf.models import SparseVMFMixture

    X = np.abs(np.random.default_rng(0).normal(size=(40, 12))) + np.repeat(np.eye(12)[:2], 20, 0)
    frame = pd.DataFrame(X, columns=[f"word{i}" for i in range(12)])
    save(SparseVMFMixture(2, random_state=0).partial_fit(frame), tmp_path / "m.npz")
    assert cli.main(["info", str(tmp_path / "m.npz")]) == 0
    out = capsys.readouterr().out
    assert "the stream of partial_fit (5 arrays): partial_fit goes on from it" in out
    names = "['word0', 'word1', 'word2', 'word3', 'word4', ...] (12 values)"
    assert f"feature_names_in_ = {names}" in out
    assert "stream." not in out and '"tree"' not in out


def test_path_on_npy_writes_criteria_and_the_best_model(runs):
    tmp, results = runs
    run = results["npy"]
    assert run.returncode == 0, run.stderr
    path = json.loads((tmp / "path" / "path.json").read_text())
    betas = np.array(path["betas"])
    assert betas[0] == 0.0 and np.all(np.diff(betas) > 0) and len(betas) <= 4
    bic = np.array(path["criteria"]["bic"])
    assert path["best"]["index"] == int(np.argmin(bic))
    table = (tmp / "path" / "criteria.md").read_text()
    assert table.startswith("| beta | sparsity |") and table.count("\n|") == len(betas) + 1
    best = load(tmp / "path" / "model.npz")
    assert best.beta == pytest.approx(betas[path["best"]["index"]])
    for name in ("path.png", "prototypes.png", "data.png"):
        assert (tmp / "path" / name).stat().st_size > 0


def test_compare_on_mtx_prints_the_table(runs):
    tmp, results = runs
    run = results["mtx"]
    assert run.returncode == 0, run.stderr
    assert "| model | held-out log-lik / doc |" in run.stdout
    table = json.loads((tmp / "compare" / "comparison.json").read_text())
    assert table["models"] == ["sparse"] and table["seeds"] == [0, 1]
    assert table["n_train"] + table["n_test"] == 90
    assert all(row["nmi"] > 0.9 for row in table["rows"])
    assert (tmp / "compare" / "comparison.png").stat().st_size > 0


def test_fit_on_a_text_folder(runs):
    tmp, results = runs
    run = results["text"]
    assert run.returncode == 0, run.stderr
    assert "24 text files" in run.stdout and "3 classes" in run.stdout
    summary = json.loads((tmp / "text" / "summary.json").read_text())
    assert summary["scores"]["ari"] == pytest.approx(1.0)  # disjoint vocabularies
    # the top terms of each cluster are words of one topic
    topic_words = [set(words.split()) for words in TOPICS.values()]
    for terms in summary["top_features"]:
        assert any(set(terms[:3]) <= words for words in topic_words), terms
    assert load(tmp / "text" / "model.npz").shared_kappa is True


def test_bad_file_fails_with_a_clear_message(runs):
    tmp, results = runs
    run = results["bad_file"]
    assert run.returncode == 1
    assert f"{tmp}/garbage.npy: cannot read it as a .npy matrix" in run.stderr
    assert "Traceback" not in run.stderr


def test_bad_option_fails_with_usage(runs):
    _, results = runs
    run = results["bad_option"]
    assert run.returncode == 2
    assert "argument --model: invalid choice: 'nosuch'" in run.stderr


def test_missing_file_and_bad_values_in_process(tmp_path, capsys):
    assert cli.main(["fit", str(tmp_path / "nope.npz"), "-k", "2", "--out", str(tmp_path)]) == 1
    assert f"{tmp_path}/nope.npz: no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["compare", "--test-size", "1.5"])
    assert "expected a fraction in (0, 1), got 1.5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["fit", "x.npy", "-k", "0", "--out", str(tmp_path)])
    assert "expected a whole number >= 1, got 0" in capsys.readouterr().err
    assert cli.main(["compare", "digits", "--models", "sparse,what"]) == 1
    assert "unknown model(s) ['what']" in capsys.readouterr().err
    assert cli.main(["info", str(tmp_path / "nope.npz")]) == 1
    assert "not a readable bayesvmf file" in capsys.readouterr().err
    # an --out folder that cannot be made: one line, no traceback
    (tmp_path / "a_file").write_text("")
    blocked = tmp_path / "a_file" / "out"
    assert cli.main(["fit", "digits", "-k", "2", "--out", str(blocked)]) == 1
    err = capsys.readouterr().err
    message = f"--out {blocked}: cannot create the folder (Not a directory)"
    assert err == f"bayesvmf fit: error: {message}\n"


def test_every_subcommand_explains_its_options(capsys):
    for command in ("fit", "path", "compare", "info"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "--help"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert "usage: bayesvmf " + command in out
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in ("fit", "path", "compare", "info"))


def test_the_registry_builds_each_model_from_the_options():
    args = cli.build_parser().parse_args(
        ["fit", "x.npy", "-k", "4", "--seed", "7", "--max-iter", "20", "--out", "o"]
    )
    for name, spec in cli.MODELS.items():
        model = spec.build(args)
        assert model.random_state == 7 and model.max_iter == 20, name
    assert cli.MODELS["kmle-vmf"].build(args).family == "vmf"
    assert cli.MODELS["kmle-vmf"].build(args).n_components == 4
    assert cli.MODELS["dirichlet"].build(args).n_topics == 4
    assert cli.MODELS["bayesian"].build(args).inference == "vi"
    assert cli.MODELS["bayesian-bounding"].build(args).kappa_update == "bounding"
    assert cli.MODELS["bayesian-gibbs"].build(args).inference == "gibbs"
    assert all(spec.build(args).get_params().get("devices") is None for spec in cli.MODELS.values())


def test_kappa_options_reach_every_model_that_has_them(capsys):
    """--shared-kappa / --per-component-kappa set shared_kappa of every model that has it; with
    neither, each model keeps its own default (the flag reached only the sparse mixture, so
    the Bayesian models ran shared kappa whatever was asked; a helper's audit of the docs)."""
    have = ("sparse", "dirichlet", "bayesian", "bayesian-bounding", "bayesian-gibbs")

    def built(*flags):
        args = cli.build_parser().parse_args(["fit", "x.npy", "-k", "3", *flags, "--out", "o"])
        return {name: cli.MODELS[name].build(args) for name in have + ("kmle-vmf",)}

    for flag, value in (("--shared-kappa", True), ("--per-component-kappa", False)):
        models = built(flag)
        assert all(models[name].shared_kappa is value for name in have), flag
    assert "kmle-vmf has one concentration per component" in capsys.readouterr().out
    defaults = built()
    for name in have:
        assert defaults[name].shared_kappa == type(defaults[name])().shared_kappa, name
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["fit", "x", "--shared-kappa", "--per-component-kappa"])


def test_devices_option_reaches_the_data_parallel_models(tmp_path):
    args = cli.build_parser().parse_args(
        ["fit", "x.npy", "-k", "2", "--devices", "1", "--out", "o"]
    )
    for name in ("sparse", "bayesian", "bayesian-bounding", "dirichlet"):
        assert cli.MODELS[name].build(args).devices == 1, name
    for name in ("bayesian-gibbs", "kmle-vmf"):
        with pytest.raises(cli.CommandError, match=f"the model {name} runs on one device"):
            cli.MODELS[name].build(args)
    # a real fit on one device of a one-device mesh: the sharded code path end to end
    X = np.abs(np.random.default_rng(0).normal(size=(40, 5))) + np.repeat(np.eye(5)[:2], 20, 0)
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "fit"
    code = cli.main(
        [
            "fit",
            str(tmp_path / "x.npy"),
            "-k",
            "2",
            "--devices",
            "1",
            "--out",
            str(out),
            "--no-plots",
            "--no-progress",
            "--model",
            "sparse",
        ]
    )
    assert code == 0
    assert load(out / "model.npz").devices == 1
