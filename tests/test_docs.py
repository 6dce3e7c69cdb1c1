"""The documentation: its runnable code runs, the README stays one page, the generated CLI
reference and the menu hook work (`make docs` builds the site with `mkdocs build --strict`)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# A fenced Python block preceded by `<!-- runnable -->` (or `<!-- runnable: after PAGE -->`:
# it runs in the same folder as that page's blocks, after them).
RUNNABLE = re.compile(r"<!-- runnable(?:: after (?P<after>[\w.-]+))? -->\n"
                      r"```python\n(?P<code>.*?)```", re.S)


def _blocks(page: Path) -> list[tuple[str | None, str]]:
    return [(m.group("after"), m.group("code"))
            for m in RUNNABLE.finditer(page.read_text(encoding="utf-8"))]


PAGES = sorted(p for p in DOCS.glob("*.md") if _blocks(p))


def _run(code: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{code}\n{done.stderr[-3000:]}"


def test_some_blocks_are_runnable() -> None:
    assert {p.name for p in PAGES} >= {"capture.md", "analysis-from-python.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_runnable_blocks_run(page: Path, tmp_path: Path) -> None:
    for after, code in _blocks(page):
        if after is not None:
            for _, earlier in _blocks(DOCS / after):
                _run(earlier, tmp_path)
        _run(code, tmp_path)


def test_readme_is_one_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    for target in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / target).exists(), target


def _hook(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_the_parsers_help() -> None:
    text = _hook("cli_reference").on_page_markdown("# x\n\n<!-- cli-reference -->\n", None)
    for command in ("serve", "profile", "runs", "doctor", "report", "capture"):
        assert f"## stepscope {command}\n" in text
    assert "--device-tracer-level" in text and "``" not in text.replace("```", "")


def test_menu_leaves_out_missing_pages_and_adds_unlisted_ones(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Page A\n")
    (tmp_path / "extra.md").write_text("# An extra page\n")
    nav = [{"Home": "a.md"}, {"Later": "not-yet.md"}, {"Group": [{"Gone": "gone.md"}]}]
    config = _hook("nav").on_config({"docs_dir": str(tmp_path), "nav": nav})
    assert config["nav"] == [{"Home": "a.md"}, {"More": [{"An extra page": "extra.md"}]}]
