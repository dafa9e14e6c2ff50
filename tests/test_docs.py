"""The repository explains itself: every file a docstring, comment, doc or notebook cites exists.

A citation is read from the prose only: the docstrings and comments of ``.py`` files, the
text of ``.md`` files, the markdown cells and code comments of notebooks, the comments of
``.toml`` files. Three kinds of reference are checked:

* a path under one of the repository's top-level folders (``bayesvmf/data.py``,
  ``docs/architecture.md``, ``models/bayesian/``): it must exist from the repository root
  (a trailing ``/`` asks for a folder); a markdown file followed by ``section 5`` or by a
  quoted heading must have that numbered section or a heading starting with those words;
* the target of a markdown link: it must exist relative to the file that links it;
* a bare file name ending in ``.md``, ``.ipynb`` or ``.py`` (``bayesian_vi.md``): some file
  of that name must exist in the repository. Inside fenced code blocks of markdown the bare
  names are usually files a command writes, so only paths and links are checked there.

Paths outside the repository (``../shared/data``, the data folder beside the clone) and
patterns (``tests/test_<module>.py``, ``benchmarks/*.py``) are not citations of a file.
``CHANGELOG.md`` is history: its entries name files as they were when written.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Folders of the repository a qualified path may start with.
TOP_FOLDERS = ("bayesvmf", "models", "tests", "benchmarks", "docs", "notebooks", "tools")

#: Folders never scanned nor counted as part of the repository (environments, builds).
SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules"}

#: Files whose citations are not checked, with the reason.
SKIP_FILES = {"CHANGELOG.md": "history: entries name files as they were when written"}

# A path-like run of characters; what follows decides whether it is a pattern.
_TOKEN = r"[\w./<>*{}\[\]-]+"
_QUALIFIED = re.compile(r"(?<![\w./<>*{}-])((?:" + "|".join(TOP_FOLDERS) + r")/" + _TOKEN + ")")
_BARE = re.compile(r"(?<![\w./<>*{}-])([\w-]+\.(?:md|ipynb|py))(?![\w/-])")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def repository_files(root: Path) -> list[Path]:
    """Every file of the repository below ``root``, hidden and build folders left out."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [
            d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and "egg-info" not in d
        ]
        found += [Path(folder) / f for f in files if not f.startswith(".")]
    return found


def _python_prose(source: str) -> list[str]:
    """The docstrings and comments of a Python source (not its other string literals)."""
    pieces = []
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a notebook cell with IPython magics: its comments still count
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    pieces.append(doc)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                pieces.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pieces += [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
    return pieces


def _markdown_prose(text: str) -> tuple[list[str], list[str]]:
    """Split markdown into (prose, fenced code) pieces."""
    prose, code, inside = [], [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            inside = not inside
            continue
        (code if inside else prose).append(line)
    return ["\n".join(prose)], ["\n".join(code)]


def _pieces(path: Path) -> tuple[list[str], list[str]]:
    """(prose, code) pieces of one file: bare names are checked in prose only."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        return _python_prose(text), []
    if path.suffix == ".md":
        return _markdown_prose(text)
    if path.suffix == ".toml":
        return [line.split("#", 1)[1] for line in text.splitlines() if "#" in line], []
    if path.suffix == ".ipynb":
        prose, code = [], []
        for cell in json.loads(text).get("cells", []):
            source = "".join(cell.get("source", []))
            if cell.get("cell_type") == "markdown":
                p, c = _markdown_prose(source)
                prose += p
                code += c
            elif cell.get("cell_type") == "code":
                prose += _python_prose(source)
        return prose, code
    return [], []


def _clean(token: str) -> str | None:
    """The path a token names, or None for a pattern (``test_<module>.py``, ``*.py``)."""
    token = token.split("::", 1)[0].split("#", 1)[0]
    token = token.rstrip(".,;:)]'`\"")
    if any(c in token for c in "<>*{}[]"):
        return None
    return token or None


# What may follow a cited markdown file: "section 5", or a quoted heading ("The data path").
_SECTION = re.compile(r"""\A[`']?,?\s+(?:section\s+(\d+)\b|(?:section\s+)?"([^"\n]+)")""")


def _section_cited(after: str) -> str | None:
    """The section number or heading cited right after a file name, if any."""
    match = _SECTION.match(after)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def _has_section(path: Path, section: str) -> bool:
    """Whether markdown ``path`` has a heading numbered ``section`` or starting with it.

    A heading's own number ("## 2. The data path") is not part of its words.
    """
    headings = re.findall(r"^#+\s+(.*)$", path.read_text(encoding="utf-8"), flags=re.M)
    if section.isdigit():
        return any(h.startswith(f"{section}.") for h in headings)
    return any(re.sub(r"^\d+\.\s+", "", h).startswith(section) for h in headings)


def broken_citations(root: Path) -> list[str]:
    """``file: reference`` for every citation under ``root`` of a file that does not exist."""
    files = repository_files(root)
    names = {f.name for f in files}
    broken = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        if path.suffix not in {".py", ".md", ".toml", ".ipynb"} or rel in SKIP_FILES:
            continue
        prose, code = _pieces(path)
        for kind, pieces in (("prose", prose), ("code", code)):
            for text in pieces:
                for match in _QUALIFIED.finditer(text):
                    ref = _clean(match.group(1))
                    if ref is None:
                        continue
                    target = root / ref
                    ok = target.is_dir() if ref.endswith("/") else target.exists()
                    if not ok:
                        broken.append(f"{rel}: {ref}")
                    elif target.suffix == ".md":
                        section = _section_cited(text[match.end(1) :])
                        if section is not None and not _has_section(target, section):
                            broken.append(f"{rel}: {ref} section {section}")
                for match in _LINK.finditer(text):
                    ref = _clean(match.group(1))
                    if ref is None or "://" in ref or ref.startswith(("mailto:", "#")):
                        continue
                    if not (path.parent / ref).exists():
                        broken.append(f"{rel}: {ref} (link)")
                if kind == "code":
                    continue
                for match in _BARE.finditer(text):
                    if match.group(1) not in names:
                        broken.append(f"{rel}: {match.group(1)}")
    return sorted(set(broken))


def test_every_cited_file_exists():
    broken = broken_citations(ROOT)
    assert not broken, "citations of files that do not exist:\n" + "\n".join(broken)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("rel", "text", "expected"),
    [
        ("bayesvmf/a.py", '"""See DESIGN.md section 2."""\n', "bayesvmf/a.py: DESIGN.md"),
        ("bayesvmf/a.py", "x = 1  # as in models/gone.py\n", "bayesvmf/a.py: models/gone.py"),
        ("docs/a.md", "Read [it](missing.md).\n", "docs/a.md: missing.md (link)"),
        (
            "docs/a.md",
            "The table: benchmarks/results/y.md.\n",
            "docs/a.md: benchmarks/results/y.md",
        ),
        ("docs/a.md", "The family in `models/kmle/`.\n", "docs/a.md: models/kmle/"),
        (
            "notebooks/n.ipynb",
            json.dumps({"cells": [{"cell_type": "markdown", "source": ["see docs/foo.md"]}]}),
            "notebooks/n.ipynb: docs/foo.md",
        ),
        ("pyproject.toml", "# layout of PAPERS.md\n", "pyproject.toml: PAPERS.md"),
        (
            "bayesvmf/a.py",
            "# docs/design.md section 9\n",
            "bayesvmf/a.py: docs/design.md section 9",
        ),
        (
            "bayesvmf/a.py",
            '"""As in docs/design.md, "The gone part"."""\n',
            "bayesvmf/a.py: docs/design.md section The gone part",
        ),
    ],
)
def test_a_missing_file_is_reported(tmp_path, rel, text, expected):
    _write(tmp_path, "models/kmle.py", '"""A model."""\n')
    _write(tmp_path, "docs/design.md", "# Design\n\n## 1. Layout\n")
    _write(tmp_path, rel, text)
    assert expected in broken_citations(tmp_path)


def test_existing_files_patterns_and_outside_paths_are_not_reported(tmp_path):
    _write(tmp_path, "docs/design.md", "# design\n\n## 2. The data path\n")
    _write(tmp_path, "models/kmle/__init__.py", '"""k-MLE."""\n')
    _write(
        tmp_path,
        "docs/a.md",
        "See [design](design.md), docs/design.md section 2, `models/kmle/`, design.md,\n"
        'docs/design.md, "The data path",\n'
        "tests/test_<module>.py, benchmarks/*.py, `_<name>_vi.py`, ../shared/data/README.md.\n"
        "```\nbayesvmf path X --out path/  # writes criteria.md\n```\n",
    )
    _write(tmp_path, "bayesvmf/b.py", 'NAME = "models/gone.py"  # a string, not a citation\n')
    _write(tmp_path, "CHANGELOG.md", "- Removed models/old.py.\n")
    assert broken_citations(tmp_path) == []
