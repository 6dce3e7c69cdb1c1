"""`stepscope report` / `stepscope ops`, `stepscope.load` and the analyses on every fixture."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import stepscope
import stepscope.analysis
from stepscope.analysis import find_steps, op_stats, overview
from stepscope.analysis.run_model import RUN_MODEL_NAME
from stepscope.analysis.run_model.framework_op_stats import DEVICE, HOST
from stepscope.analysis.run_model.overview_page import CATEGORIES, VERDICTS
from stepscope.cli import main
from stepscope.run.loader import overview_dict

from conftest import FIXTURES

ALL_FIXTURES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and (
    p.name.endswith(".xplane.pb") or p.name.endswith((".json", ".json.gz"))))


def _capture(logdir: Path, steps: int = 4, input_ms: float = 2.0) -> Path:
    """A small stepscope profile with steps, input waits and ops; returns its file."""
    stepscope.start(str(logdir))
    for i in range(steps):
        with stepscope.Trace("train", step_num=i, _r=1):
            with stepscope.Trace("Iterator::Read"):
                time.sleep(input_ms / 1000)
            with stepscope.Trace("forward"):
                time.sleep(0.001)
    stepscope.stop()
    return next(logdir.rglob("*.xplane.pb"))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def _report_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["report", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_json_has_the_stable_keys(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _capture(tmp_path / "logs", steps=4)
    out = _report_json(capsys, str(tmp_path / "logs"))
    steps = out["steps"]
    assert isinstance(steps["count"], int) and steps["count"] == 4
    for key in ("avg_ms", "min_ms", "max_ms", "stddev_ms"):
        assert isinstance(steps[key], float)
    assert steps["min_ms"] <= steps["avg_ms"] <= steps["max_ms"]
    assert set(out["breakdown"]) == set(CATEGORIES)
    assert sum(out["breakdown"].values()) == pytest.approx(100.0)
    assert out["input"]["verdict"] in VERDICTS
    # 2 ms of each ~3 ms step is spent in Iterator::Read on the step's thread.
    assert out["input"]["percent"] > 20 and out["input"]["verdict"] == "highly"
    assert out["top_ops"] and {"name", "type", "self_ms", "self_percent"} <= set(
        out["top_ops"][0])
    assert out["environment"]["hosts"] == 1
    assert out["environment"]["device_type"] == "CPU"
    (host,) = out["hosts"]
    assert out["hosts"][host]["steps"]["count"] == 4


def test_report_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _capture(tmp_path / "logs")
    assert main(["report", str(tmp_path / "logs")]) == 0
    text = capsys.readouterr().out
    assert "4 steps" in text and "HIGHLY input-bound" in text
    assert "Top" in text and "Iterator::Read" in text and "Run environment: 1 host" in text


def test_several_hosts_are_reported_apart_and_together(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = _capture(tmp_path / "a", steps=3, input_ms=1.0)
    two = _capture(tmp_path / "b", steps=3, input_ms=4.0)
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(one, run / "worker-0.xplane.pb")
    shutil.copy(two, run / "worker-1.xplane.pb")
    out = _report_json(capsys, str(tmp_path / "logs"))
    assert set(out["hosts"]) == {"worker-0", "worker-1"}
    assert out["environment"]["hosts"] == 2
    slow = out["hosts"]["worker-1"]["steps"]["avg_ms"]
    fast = out["hosts"]["worker-0"]["steps"]["avg_ms"]
    assert slow > fast
    # A step lasts as long as its slowest host.
    assert out["steps"]["count"] == 3
    assert out["steps"]["avg_ms"] == pytest.approx(slow, rel=0.05)


def test_one_bad_host_still_reports_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _capture(tmp_path / "a")
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(good, run / "good.xplane.pb")
    (run / "bad.xplane.pb").write_bytes(good.read_bytes()[:1000])
    out = _report_json(capsys, str(tmp_path / "logs"))
    assert set(out["hosts"]) == {"good"}
    assert "bad" in out["failed_hosts"] and "bad.xplane.pb" in out["failed_hosts"]["bad"]
    assert main(["report", str(tmp_path / "logs")]) == 0
    assert "Host bad could not be read" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["truncated", "garbage", "empty_dir", "missing", "json"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make: str) -> None:
    target = tmp_path / "x.xplane.pb"
    if make == "truncated":
        target.write_bytes(_capture(tmp_path / "src").read_bytes()[:500])
    elif make == "garbage":
        target.write_bytes(b"\xff" * 64)
    elif make == "empty_dir":
        target = tmp_path / "empty"
        target.mkdir()
    elif make == "json":
        target = tmp_path / "t.json.gz"
        target.write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    done = subprocess.run([sys.executable, "-m", "stepscope", "report", str(target)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stepscope: error: "), done.stderr
    assert target.name in lines[0]
    assert "Traceback" not in done.stderr


def test_ops_csv_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _capture(tmp_path / "logs", steps=3)
    out_csv = tmp_path / "ops.csv"
    assert main(["ops", str(tmp_path / "logs"), "--csv", str(out_csv)]) == 0
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    names = {r["name"] for r in rows}
    assert {"Iterator::Read", "forward"} <= names and "train" not in names  # steps are not ops
    read = next(r for r in rows if r["name"] == "Iterator::Read")
    assert int(read["occurrences"]) == 3 and float(read["self_ms"]) >= 3 * 2.0
    assert float(rows[-1]["cumulative_percent"]) == pytest.approx(100.0)
    capsys.readouterr()
    assert main(["ops", str(tmp_path / "logs"), "--json", "--include-idle"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any(r["type"] == "IDLE" for r in data["ops"])
    assert main(["ops", str(tmp_path / "logs"), "--host", "nope"]) == 2


def test_second_open_uses_the_cache(tmp_path: Path) -> None:
    _capture(tmp_path / "logs")
    cache_dir = tmp_path / "cache"
    first = overview_dict(tmp_path / "logs")
    assert any(cache_dir.glob(f"*.{RUN_MODEL_NAME}.cache"))
    assert any(cache_dir.glob("*.table.cache"))
    second = overview_dict(tmp_path / "logs")
    assert first == second


def test_self_time_excludes_nested_ops(tmp_path: Path) -> None:
    stepscope.start(str(tmp_path))
    with stepscope.Trace("train", step_num=0, _r=1), stepscope.Trace("outer"):
        time.sleep(0.002)
        with stepscope.Trace("inner"):
            time.sleep(0.004)
    stepscope.stop()
    rows = {r.name: r for r in op_stats(stepscope.load(str(tmp_path))).rows}
    outer, inner = rows["outer"], rows["inner"]
    assert inner.self_ns == inner.total_ns
    assert outer.self_ns == pytest.approx(outer.total_ns - inner.total_ns, abs=1)
    # outer slept 2 ms itself; a loaded machine may stretch that, never shorten it.
    assert outer.self_ns > 0.0015e9 and inner.total_ns > 0.0035e9


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_loads_and_analyses(path: Path) -> None:
    profile = stepscope.load(str(path), use_cache=False)
    assert profile.hosts and not profile.failed
    summary = overview(profile).to_dict()
    assert summary["input"]["verdict"] in VERDICTS
    if summary["steps"]["count"]:
        assert sum(summary["breakdown"].values()) == pytest.approx(100.0)
    stats = op_stats(profile)
    assert stats.rows, "no ops recognised"
    table = next(iter(profile.hosts.values()))
    steps = find_steps(table)
    assert len(steps.event_step) == len(table)
    if summary["environment"]["device_type"] != "CPU" and any(
            r.host_or_device == DEVICE for r in stats.rows):
        assert stats.top(10)[0].host_or_device == DEVICE


GPU_XSPACE = [p for p in ALL_FIXTURES if p.name.endswith(".xplane.pb") and "tpu" not in p.name]


@pytest.mark.parametrize("path", GPU_XSPACE, ids=lambda p: p.name)
def test_gpu_xspace_fixtures_show_device_ops_and_kernels(path: Path) -> None:
    stats = op_stats(stepscope.load(str(path), use_cache=False))
    device = [r for r in stats.rows if r.host_or_device == DEVICE]
    assert device and sum(r.self_ns for r in device) > 0
    assert stats.kernels and all(k.occurrences > 0 for k in stats.kernels)


def test_tf_gpu_fixture_kernels_know_their_ops() -> None:
    path = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
    profile = stepscope.load(str(path), use_cache=False)
    stats = op_stats(profile)
    device = [r for r in stats.rows if r.host_or_device == DEVICE]
    # Device ops come from TensorFlow's op line: "scope/name:Type" split into name and type.
    assert device and all(re.fullmatch(r"[A-Z_]\w*", r.type) for r in device)
    assert all(":" not in r.name for r in device)
    kernel_ns = sum(k.total_ns for k in stats.kernels)
    assert sum(r.total_ns for r in device) == pytest.approx(kernel_ns, rel=0.1)
    assert sum(1 for k in stats.kernels if k.op) > len(stats.kernels) // 2
    summary = overview(profile).to_dict()
    assert summary["environment"]["device_type"] == "GPU"
    # 8 GPU planes, of which 3 ran something (GPU 1 copies only; GPUs 4 and 6 the model).
    assert summary["environment"]["device_count"] == 3
    assert summary["breakdown"]["device_compute"] > 50


def test_kineto_gpu_trace_steps_and_kernels() -> None:
    path = (FIXTURES / "kineto/tb_plugin/samples/resnet50_num_workers_0/"
            "worker0.1623143089861.pt.trace.json.gz")
    profile = stepscope.load(str(path), use_cache=False)
    summary = overview(profile).to_dict()
    assert summary["steps"]["found_by"] == "profiler_step" and summary["steps"]["count"] > 1
    assert summary["breakdown"]["device_compute"] > 0
    assert summary["environment"]["device_type"] == "GPU"
    stats = op_stats(profile)
    assert any(r.host_or_device == HOST and r.name.startswith("aten::") for r in stats.rows)
    kernels = stats.kernels
    assert kernels and sum(1 for k in kernels if k.op) > len(kernels) // 2
    table = next(iter(profile.hosts.values()))
    steps = find_steps(table)
    device = np.array([p.name.startswith("/device:") for p in table.planes])[table.plane]
    assert (steps.event_step[device] >= 0).mean() > 0.5  # kernels follow their launches
