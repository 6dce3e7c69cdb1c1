"""The import contracts of pyproject.toml (``make lint`` runs ``lint-imports``) hold for the
source, and fail on a copy of it into which a circle or a backward arrow was put."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"),
                           "--no-cache"], cwd=src, env=env, capture_output=True, text=True,
                          timeout=600)


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "stepscope", src / "stepscope",
                    ignore=shutil.ignore_patterns("static", "*.so", "__pycache__"))
    return src


def test_the_source_keeps_every_contract() -> None:
    result = _lint(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_circle_between_modules_breaks_the_contract(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    # The trace module of the web package imports the store, which imports the trace module
    # (lazily, as a function would): a circle inside web.
    store = src / "stepscope" / "web" / "store.py"
    store.write_text(store.read_text() + "\n\ndef _circle() -> None:\n"
                     "    from stepscope.web import trace  # noqa: F401\n")
    trace = src / "stepscope" / "web" / "trace.py"
    trace.write_text(trace.read_text() + "\n\ndef _back() -> None:\n"
                     "    from stepscope.web import store  # noqa: F401\n")
    result = _lint(src)
    assert result.returncode != 0
    assert "No circles" in result.stdout and "BROKEN" in result.stdout


def test_the_run_model_may_not_import_a_tool(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    steps = src / "stepscope" / "analysis" / "run_model" / "steps.py"
    steps.write_text(steps.read_text() + "\n\ndef _tool() -> None:\n"
                     "    from stepscope.analysis.tools import advice  # noqa: F401\n")
    result = _lint(src)
    assert result.returncode != 0 and "Inside analysis" in result.stdout
