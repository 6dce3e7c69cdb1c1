"""Framework integrations: the Keras callback and the framework profiler bridges.

Each framework runs in a fresh interpreter (``run_script``), so that tests do not share a
framework's process-wide profiler state.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import stepscope

from workloads import run_script

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

KERAS_FIT = """
import os, sys
os.environ["KERAS_BACKEND"] = sys.argv[3]
import numpy as np, keras
import stepscope.keras
log_dir, first, last = sys.argv[1], int(sys.argv[2].split(",")[0]), int(sys.argv[2].split(",")[1])
x = np.random.rand(512, 16).astype("float32")
y = np.random.rand(512, 1).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(1)])
model.compile("sgd", "mse")
cb = stepscope.keras.ProfilerCallback(log_dir, profile_batch=(first, last),
                                      options=stepscope.ProfilerOptions(counter_interval_ms=0))
# 512 / 64 = 8 batches an epoch: two epochs count batches 1..16 across epochs.
model.fit(x, y, batch_size=64, epochs=int(sys.argv[4]), callbacks=[cb], verbose=0)
print(cb.path)
"""


def _xprof(path: Path, tool: str, tmp: Path) -> object:
    """Run an XProf tool on a copy of ``path`` (XProf writes cache files beside its input)."""
    from xprof.convert import raw_to_tool_data

    tmp.mkdir(parents=True, exist_ok=True)
    copy = tmp / path.name
    shutil.copy(path, copy)
    data, _content_type = raw_to_tool_data.xspace_to_tool_data([str(copy)], tool, {})
    return json.loads(data)


def _xprof_steps(path: Path, tmp: Path) -> list[str]:
    overview = _xprof(path, "overview_page", tmp)
    assert isinstance(overview, list)
    table = next(t for t in overview if t.get("cols", [{}])[0].get("id") == "stepnum")
    return [row["c"][0]["v"] for row in table["rows"]]


def _fit(log_dir: Path, batches: str, backend: str = "tensorflow", epochs: int = 2) -> Path:
    out = run_script(KERAS_FIT, str(log_dir), batches, backend, str(epochs))
    return Path(out.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_keras_callback_profiles_the_chosen_batches(tmp_path: Path, backend: str) -> None:
    path = _fit(tmp_path / "logs", "3,6", backend)
    # Where Keras' TensorBoard callback writes its profiles.
    assert path.is_file()
    assert path.parent.parent == tmp_path / "logs" / "train" / "plugins" / "profile"
    from stepscope.analysis.steps import find_steps

    profile = stepscope.load(str(tmp_path / "logs"))
    (table,) = profile.hosts.values()
    steps = find_steps(table)
    assert steps.method == "root"
    assert steps.step_num.tolist() == [3, 4, 5, 6]
    assert (steps.duration_ns > 0).all()
    assert _xprof_steps(path, tmp_path / "xprof") == [f"train {i}" for i in range(3, 7)]


def test_keras_callback_counts_batches_across_epochs(tmp_path: Path) -> None:
    path = _fit(tmp_path / "logs", "7,10")
    from stepscope.analysis.steps import find_steps

    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    assert find_steps(table).step_num.tolist() == [7, 8, 9, 10]


def test_keras_callback_stops_when_training_ends_first(tmp_path: Path) -> None:
    path = _fit(tmp_path / "logs", "6,100", epochs=1)
    assert path.is_file()
    from stepscope.analysis.steps import find_steps

    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    assert find_steps(table).step_num.tolist() == [6, 7, 8]


@pytest.mark.parametrize("bad", [-1, (5, 2), (0, 3), "a,b", "1,2,3", (1.5, 2), True, None,
                                 [1, 2, 3]])
def test_bad_profile_batch_is_a_clear_error(bad: object) -> None:
    from stepscope.keras import parse_profile_batch

    with pytest.raises(ValueError, match="profile_batch must be"):
        parse_profile_batch(bad)


@pytest.mark.parametrize(("given", "expected"), [("10,15", (10, 15)), ((3, 6), (3, 6)),
                                                 ([2, 2], (2, 2)), (4, (4, 4)), ("5", (5, 5)),
                                                 (0, (0, 0))])
def test_profile_batch_forms(given: object, expected: tuple[int, int]) -> None:
    from stepscope.keras import parse_profile_batch

    assert parse_profile_batch(given) == expected


TF_UNDER_STEPSCOPE = """
import sys, tensorflow as tf, stepscope
logdir, steps = sys.argv[1], int(sys.argv[2])
w = tf.Variable(tf.random.normal([64, 64]))
ds = iter(tf.data.Dataset.from_tensor_slices(tf.random.normal([1024, 64])).batch(64).repeat())

@tf.function
def step(x):
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.nn.relu(x @ w))
    w.assign_sub(0.01 * tape.gradient(y, w))
    return y

step(next(ds))
stepscope.start(logdir, stepscope.ProfilerOptions(device_tracer_level=1, counter_interval_ms=0))
for i in range(steps):
    with stepscope.Trace("train", step_num=i, _r=1):
        step(next(ds))
print(stepscope.stop())
"""


def test_tensorflow_bridge_merges_tf_ops_into_our_profile(tmp_path: Path) -> None:
    from stepscope.analysis import op_stats
    from stepscope.analysis.steps import find_steps
    from stepscope.formats.xplane_builder import read_space
    from stepscope.model import schema

    out = run_script(TF_UNDER_STEPSCOPE, str(tmp_path / "logs"), "5")
    path = Path(out.strip().splitlines()[-1])
    space = read_space(path)
    (host,) = [p for p in space.planes if p.name == schema.HOST_PLANE]
    names = {md.name for md in host.event_metadata.values()}
    assert "train" in names
    assert any(n.endswith("MatMul") for n in names), sorted(names)[:50]

    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    steps = find_steps(table)
    assert steps.step_num.tolist() == [0, 1, 2, 3, 4]
    # TF's ops run within our steps: the wall clocks agree.
    matmul = [i for i, c in enumerate(table.name) if table.names[int(c)].endswith("MatMul")]
    assert matmul and all(steps.event_step[i] >= 0 for i in matmul)
    rows = op_stats(profile).rows
    assert any("MatMul" in r.type + r.name for r in rows), rows[:10]
    assert _xprof_steps(path, tmp_path / "xprof") == [f"train {i}" for i in range(5)]


def test_no_bridge_without_device_tracing(tmp_path: Path) -> None:
    script = TF_UNDER_STEPSCOPE.replace("device_tracer_level=1", "device_tracer_level=0")
    path = Path(run_script(script, str(tmp_path / "logs"), "3").strip().splitlines()[-1])
    from stepscope.formats.xplane_builder import read_space

    names = {md.name for p in read_space(path).planes for md in p.event_metadata.values()}
    assert not any(n.endswith("MatMul") for n in names)


def test_importing_stepscope_imports_no_framework() -> None:
    out = run_script("""
import sys, tempfile, stepscope
stepscope.start(tempfile.mkdtemp())
stepscope.stop()
print(sorted(m for m in ("tensorflow", "torch", "jax", "keras") if m in sys.modules))
""")
    assert out.strip() == "[]"


def test_a_failing_bridge_warns_and_keeps_our_profile(tmp_path: Path) -> None:
    # TF's profiler is already running (the user's), so the bridge cannot start it.
    script = TF_UNDER_STEPSCOPE.replace(
        "step(next(ds))\nstepscope.start",
        "step(next(ds))\ntf.profiler.experimental.start(sys.argv[1] + '-tf')\n"
        "import warnings; warnings.simplefilter('always')\nstepscope.start")
    assert "tf.profiler.experimental.start" in script
    out = run_script(script + "tf.profiler.experimental.stop()\n", str(tmp_path / "logs"), "3")
    from stepscope.analysis.steps import find_steps

    profile = stepscope.load(out.strip().splitlines()[-1])
    (table,) = profile.hosts.values()
    assert find_steps(table).step_num.tolist() == [0, 1, 2]
