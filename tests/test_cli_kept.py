"""The command line's kept answers (``cli.common.Answers``, ``run.kept``): a command whose
answers are kept for the run's files prints them without opening the run, byte for byte as
the opened run prints them; a changed file, another stepscope or damage is a miss, and the
run is opened. (What such a process imports is checked in test_cli_imports.py.)"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import stepscope
from stepscope import version
from stepscope.cli import main
from stepscope.model import cache_format
from stepscope.run import kept
from stepscope.run.kept import KeptRun
from stepscope.run.run import Run

from conftest import FIXTURES

DLRM = FIXTURES / "param" / "et_replay" / "tests" / "inputs" / "dlrm_kineto"  # 8 hosts
RESNET = (FIXTURES / "kineto" / "tb_plugin" / "samples" / "resnet50_num_workers_0"
          / "worker0.1623143089861.pt.trace.json.gz")
JAX = FIXTURES / "TraceLens" / "tests" / "traces" / "mi300" / "jax_conv_minimal_08" \
    / "tw003.xplane.pb"

# The commands printed from kept answers, in their text and JSON forms (and two that are
# not kept, and one whose tool has nothing to show: answered by the opened run alike).
COMMANDS = (["report"], ["report", "--json"], ["report", "--peak-tflops", "312"],
            ["pod"], ["pod", "--json"], ["input"], ["input", "--json"], ["memory"],
            ["xla"], ["tool", "steps"], ["tool", "overview_page", "--param",
                                         "peak_tflops=100"], ["ops"])


def _tiny(logdir: Path, steps: int) -> Path:
    stepscope.start(str(logdir), options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for i in range(steps):
        with stepscope.Trace("train", step_num=i, _r=1):
            pass
    path = stepscope.stop()
    assert path is not None
    return Path(path)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _opened_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line without its kept answers: every command opens the run."""
    monkeypatch.setattr(KeptRun, "find", classmethod(lambda cls, path: None))


@pytest.mark.usefixtures("cache_home")
@pytest.mark.parametrize("name", ["tiny", "dlrm", "resnet", "jax"])
def test_kept_answers_print_as_the_opened_run_prints_them(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = {"tiny": lambda: _tiny(tmp_path / "logs", 3), "dlrm": lambda: DLRM,
            "resnet": lambda: RESNET, "jax": lambda: JAX}[name]()
    first = {tuple(c): _cli(capsys, *c, str(path)) for c in COMMANDS}  # computes, keeps
    assert first[("report",)][0] == 0
    hits = KeptRun.find(str(path))
    assert hits is not None and hits.tool("overview_page", peak_tflops=None) is not None
    opens: list[tuple[str, ...]] = []
    real_open = Run.open.__func__  # type: ignore[attr-defined]
    fast = {}
    with monkeypatch.context() as m:
        m.setattr(Run, "open", classmethod(
            lambda cls, *a, **k: opens.append(command) or real_open(cls, *a, **k)))
        for c in COMMANDS:
            command = tuple(c)
            fast[command] = _cli(capsys, *c, str(path))
    # the kept ones did not open the run
    assert {c[:2] for c in opens} <= {("memory",), ("xla",), ("ops",)}, opens
    _opened_only(monkeypatch)
    opened = {tuple(c): _cli(capsys, *c, str(path)) for c in COMMANDS}
    for command in fast:
        assert fast[command] == opened[command], command
        assert fast[command] == first[command], command
    if name == "dlrm":  # several hosts: the report ends with the pod viewer's hosts
        assert "Per host, average ms per step" in fast[("report",)][1]


@pytest.mark.usefixtures("cache_home")
def test_a_changed_file_is_read_again(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _tiny(tmp_path / "a", 3)
    other = _tiny(tmp_path / "b", 5)
    before = json.loads(_cli(capsys, "report", "--json", str(path))[1])
    assert before["steps"]["count"] == 3
    assert KeptRun.find(path).tool("overview_page") is not None  # type: ignore[union-attr]
    shutil.copyfile(other, path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert KeptRun.find(path).tool("overview_page") is None  # type: ignore[union-attr]
    after = json.loads(_cli(capsys, "report", "--json", str(path))[1])
    assert after["steps"]["count"] == 5  # the new file's answer, not the kept one


@pytest.mark.usefixtures("cache_home")
def test_another_stepscope_or_results_version_is_a_miss(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = _tiny(tmp_path / "logs", 3)
    code, text, _ = _cli(capsys, "report", str(path))
    assert code == 0
    run = KeptRun.find(path)
    assert run is not None and run.tool("overview_page") is not None
    with monkeypatch.context() as m:
        m.setattr(version, "__version__", version.__version__ + ".other")
        assert run.tool("overview_page") is None
        assert _cli(capsys, "report", str(path)) == (0, text, "")  # opened and computed
    with monkeypatch.context() as m:
        m.setattr(kept, "RESULTS_VERSION", kept.RESULTS_VERSION + 1)
        assert run.tool("overview_page") is None
    assert run.tool("overview_page") is not None


@pytest.mark.usefixtures("cache_home")
def test_what_the_run_would_refuse_is_not_answered_from_the_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tiny(tmp_path / "logs", 3)
    assert _cli(capsys, "report", str(path))[0] == 0
    run = KeptRun.find(path)
    assert run is not None
    assert run.tool("overview_page", "no-such-host") is None
    assert run.tool("overview_page", peak_tflops="-1") is None  # a bad parameter
    assert run.tool("framework_op_stats") is None  # not kept
    assert run.tool("no_such_tool") is None
    assert KeptRun.find(tmp_path / "missing") is None
    code, _, err = _cli(capsys, "pod", "--host", "no-such-host", str(path))
    assert code == 2 and "no-such-host" in err  # the opened run's one line


@pytest.mark.usefixtures("cache_home")
def test_no_cache_opens_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = _tiny(tmp_path / "logs", 3)
    assert _cli(capsys, "report", str(path))[0] == 0
    monkeypatch.setattr(KeptRun, "find", None)  # any use of the kept answers fails
    assert _cli(capsys, "report", "--no-cache", str(path))[0] == 0


# -- the NumPy-free reader of a kept answer: damage is a miss, never an error ---------------

def _entry(tmp_path: Path) -> tuple[Path, Path]:
    source = tmp_path / "source.bin"
    source.write_bytes(b"profile")
    from stepscope.model import cache

    cache.save_result([source], "r", {"data": {"a": [1, 2.5, "x"]}})
    key = cache_format.source_key([source])
    return source, cache_format.cache_dir() / f"{key}.r.cache"


@pytest.mark.usefixtures("cache_home")
@pytest.mark.parametrize("damage", ["empty", "truncated", "padded", "flipped", "garbage",
                                    "directory", "header_length"])
def test_a_damaged_entry_is_a_miss_and_removed(damage: str, tmp_path: Path) -> None:
    source, entry = _entry(tmp_path)
    assert cache_format.load_json([source], "r") == {"data": {"a": [1, 2.5, "x"]}}
    blob = entry.read_bytes()
    if damage == "empty":
        entry.write_bytes(b"")
    elif damage == "truncated":
        entry.write_bytes(blob[:-10])
    elif damage == "padded":
        entry.write_bytes(blob + b"\0" * 64)
    elif damage == "flipped":  # the JSON's first byte: its checksum fails
        start = len(blob) - int.from_bytes(blob[24:32], "little")
        entry.write_bytes(blob[:start] + bytes([blob[start] ^ 1]) + blob[start + 1:])
    elif damage == "garbage":
        entry.write_bytes(os.urandom(len(blob)))
    elif damage == "directory":
        entry.unlink()
        entry.mkdir()
    else:  # an absurd header length
        entry.write_bytes(blob[:16] + (1 << 62).to_bytes(8, "little") + blob[24:])
    assert cache_format.load_json([source], "r") is None
    assert not entry.exists()


@pytest.mark.usefixtures("cache_home")
def test_an_entry_of_arrays_is_not_read_as_a_result(tmp_path: Path) -> None:
    import numpy as np

    from stepscope.model import cache

    source = tmp_path / "source.bin"
    source.write_bytes(b"profile")
    cache.save_arrays([source], "r", {"n": 1}, {"json": np.zeros(3, np.int64)})
    assert cache_format.load_json([source], "r") is None
    assert cache.load_result([source], "r") is None
