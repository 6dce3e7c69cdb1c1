"""Compatibility both ways: XProf reads stepscope's profiles; our codec reads TensorFlow's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import stepscope
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

from conftest import FIXTURES
from xprof_reference import xprof_tool
from xspace_view import events, plane

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _xprof(path: Path, tool: str) -> object:
    return xprof_tool(path, tool)


def _write_training_profile(logdir: Path, steps: int) -> Path:
    def loader() -> None:
        for i in range(steps):
            with stepscope.Trace("load_batch", batch=i):
                pass

    stepscope.start(logdir, options=stepscope.ProfilerOptions(python_tracer_level=1))
    t = threading.Thread(target=loader, name="data-loader")
    t.start()
    t.join()
    for step in range(steps):
        with stepscope.Trace("train", step_num=step, _r=1), stepscope.Trace("compute"):
            sum(i * i for i in range(2000))
    path = stepscope.stop()
    assert path is not None
    return path


@pytest.mark.parametrize("steps", [4, 20])
def test_xprof_overview_finds_our_steps(tmp_path: Path, steps: int) -> None:
    path = _write_training_profile(tmp_path, steps)
    overview = _xprof(path, "overview_page")
    assert isinstance(overview, list)
    step_table = next(t for t in overview if t.get("cols", [{}])[0].get("id") == "stepnum")
    found = [row["c"][0]["v"] for row in step_table["rows"]]
    # XProf drops the first and the last step when it finds more than five.
    expected = list(range(steps)) if steps <= 5 else list(range(1, steps - 1))
    assert found == [f"train {i}" for i in expected]
    assert float(step_table["p"]["steptime_ms_average"]) > 0


def test_xprof_trace_viewer_shows_our_threads(tmp_path: Path) -> None:
    path = _write_training_profile(tmp_path, 6)
    trace = _xprof(path, "trace_viewer")
    assert isinstance(trace, dict)
    evs = trace["traceEvents"]
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"]
                    for e in evs if e.get("ph") == "M" and e.get("name") == "thread_name"}
    by_name: dict[str, list[dict]] = {}
    for e in evs:
        if e.get("ph") == "X":
            by_name.setdefault(e["name"].split(" ")[0], []).append(e)
    loads = by_name["load_batch"]
    assert len(loads) == 6
    assert {thread_names[(e["pid"], e["tid"])] for e in loads} == {"data-loader"}
    assert {thread_names[(e["pid"], e["tid"])] for e in by_name["train"]} == \
        {threading.current_thread().name}
    assert len(by_name["compute"]) == 6
    assert {e["args"]["batch"] for e in loads} == {str(i) for i in range(6)}


TF_WORKLOAD = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    logdir = sys.argv[1]
    x = tf.random.normal((64, 64))
    tf.profiler.experimental.start(logdir)
    for step in range(4):
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            x = tf.nn.relu(tf.matmul(x, x)) / 64.0
    tf.profiler.experimental.stop()
""")


@pytest.fixture(scope="module")
def tf_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("tf-logs")
    subprocess.run([sys.executable, "-c", TF_WORKLOAD, str(logdir)], check=True, timeout=300)
    files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    assert len(files) == 1, files
    return files[0]


def test_our_codec_reads_a_tensorflow_profile(tf_profile: Path) -> None:
    space = read_space(tf_profile)
    names = [p.name for p in space.planes]
    assert schema.HOST_PLANE in names
    host = events(plane(space, schema.HOST_PLANE))
    steps = [e for e in host if e.name == "train"]
    assert [e.stats.get(schema.STEP_NUM) for e in steps] == [0, 1, 2, 3]
    assert all(e.stats.get(schema.ROOT_LEVEL) == 1 for e in steps)
    # TensorFlow's own op events (MatMul, Relu) are inside the steps, on the same clock.
    ops = [e for e in host if "MatMul" in e.name]
    assert ops
    first, last = steps[0], steps[-1]
    assert any(first.start_ns <= op.start_ns <= last.end_ns for op in ops)


def test_our_codec_reads_a_recorded_gpu_profile() -> None:
    path = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
    space = read_space(path)
    counts = {p.name: sum(len(line.events) for line in p.lines) for p in space.planes}
    # Figures from ../shared/fixtures/gpu/SOURCES.md.
    assert counts[schema.HOST_PLANE] == 15_354
    assert counts["/device:GPU:4"] == 3_875
    assert sum(counts.values()) == 23_128
    assert list(space.hostnames) == ["34.83.195.179:6003"]


def test_a_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff\xff\xff not a protobuf")
    with pytest.raises(stepscope.ProfileFormatError, match="bad.xplane.pb"):
        read_space(bad)
