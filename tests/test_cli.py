"""The command line and the README's example run as documented."""

import re
from pathlib import Path

import pytest

from bayesvmf import cli, make_vmf_mixture
from bayesvmf.models import SparseVMFMixture

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_and_explains(capsys):
    assert cli.main(["demo", "--num-samples", "50"]) == 0
    out = capsys.readouterr().out
    assert "NUTS on kappa" in out
    assert "posterior interval" in out
    assert "log C_d(kappa) = " in out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_bad_argument_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        cli.main(["demo", "--num-samples", "3"])
    assert "--num-samples must be at least 10, got 3" in capsys.readouterr().err


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


def test_readme_example_runs():
    example = _readme_examples()[0]
    # the example as written, with fewer NUTS iterations to keep the suite fast
    example = example.replace("num_warmup=300, num_samples=300", "num_warmup=50, num_samples=50")
    example = example.replace("mcmc.print_summary()", "samples = mcmc.get_samples()")
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["samples"]["kappa"].shape == (50,)


def test_readme_sparse_example_runs():
    example = _readme_examples()[1]
    X = make_vmf_mixture(200, 10, 4, kappa=20.0, random_state=0).X
    namespace = {"X": X}
    exec(compile(example, "README.md", "exec"), namespace)
    assert isinstance(namespace["best"], SparseVMFMixture)
    assert namespace["path"].betas[0] == 0.0
