"""The ``stepscope`` command: the demo writes a readable profile; errors exit 2 without traces."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

from xspace_view import events, plane


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepscope.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_demo_writes_a_profile_with_steps(tmp_path: Path) -> None:
    result = _run("demo", "--logdir", str(tmp_path), "--steps", "12", "--no-serve")
    assert result.returncode == 0, result.stderr
    written = sorted(tmp_path.glob("plugins/profile/*/*.xplane.pb"))
    assert len(written) == 1
    assert f"profile written to {written[0]}" in result.stdout
    space = read_space(written[0])
    host = events(plane(space, schema.HOST_PLANE))
    assert [e.stats[schema.STEP_NUM] for e in host if e.name == "train"] == list(range(12))
    assert {"input", "forward", "backward", "update", "Iterator::Batch"} <= {e.name for e in host}
    assert events(plane(space, schema.PYTHON_TRACER_PLANE))


def test_demo_then_serves_the_ui_on_its_profile(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "stepscope.cli", "demo", "--logdir",
                             str(tmp_path), "--steps", "6", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        runs = None
        for _ in range(600):
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs") as reply:
                    runs = json.loads(reply.read())["runs"]
                break
            except OSError:
                time.sleep(0.1)
        assert runs is not None and len(runs) == 1
        (written,) = tmp_path.glob("plugins/profile/*")
        assert runs[0]["name"] == written.name
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"serving {tmp_path} at http://127.0.0.1:{port}/" in out


def test_demo_into_an_unwritable_logdir_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = _run("demo", "--logdir", str(blocker / "logs"))
    assert result.returncode == 2
    assert result.stderr.startswith("stepscope: error: Cannot write profiles under")
    assert "Traceback" not in result.stderr


def test_version() -> None:
    result = _run("--version")
    assert result.returncode == 0 and result.stdout.startswith("stepscope ")


def test_kernels_command_json_csv_and_cpu_only(tmp_path: Path) -> None:
    from stepscope.analysis.run_model.kernel_stats import kernel_stats
    from stepscope.formats.run_reader import load

    from conftest import FIXTURES

    trace = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    result = _run("kernels", str(trace), "--json", "--no-cache")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    want = kernel_stats(load(trace, use_cache=False)).to_dict()
    assert got == {"run": "h100", "host": None, **json.loads(json.dumps(want))} and got["rows"]
    out = tmp_path / "k.csv"
    result = _run("kernels", str(trace), "--csv", str(out), "--no-cache")
    assert result.returncode == 0 and len(out.read_text().splitlines()) == 1 + len(got["rows"])
    cpu = next((FIXTURES / "HolisticTraceAnalysis/tests/data/cpu_only").glob("*.json.gz"))
    result = _run("kernels", str(cpu), "--no-cache")
    assert result.returncode == 0 and "No GPU kernels" in result.stdout
