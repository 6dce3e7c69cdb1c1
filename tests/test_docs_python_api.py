"""The Python API page (docs/python-api.md) runs as written: its code blocks, in order, in one
namespace, in a fresh directory."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def test_the_python_api_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", os.fspath(tmp_path / "cache"))
    namespace: dict[str, object] = {"__name__": "docs"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert "ms per step on average" in out and "step 7 took" in out
    assert "No host 'no-such-host'" in out and "must be true or false" in out
