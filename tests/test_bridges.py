"""Framework integrations: the Keras callback and the framework profiler bridges.

Each framework runs in a fresh interpreter (``run_script``), so that tests do not share a
framework's process-wide profiler state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope

from conftest import FIXTURES
from workloads import run_script
from xprof_reference import xprof_tool

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
    """XProf's answer for ``tool`` on a copy of ``path``."""
    return xprof_tool(path, tool, tmp)


def _xprof_steps(path: Path, tmp: Path) -> list[str]:
    overview = _xprof(path, "overview_page", tmp)
    assert isinstance(overview, list)
    table = next(t for t in overview if t.get("cols", [{}])[0].get("id") == "stepnum")
    return [row["c"][0]["v"] for row in table["rows"]]


def _fit(log_dir: Path, batches: str, backend: str = "tensorflow", epochs: int = 2) -> Path:
    out = run_script(KERAS_FIT, str(log_dir), batches, backend, str(epochs))
    return Path(out.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_keras_callback_profiles_the_chosen_batches(tmp_path: Path, backend: str) -> None:
    path = _fit(tmp_path / "logs", "3,6", backend)
    # Where Keras' TensorBoard callback writes its profiles.
    assert path.is_file()
    assert path.parent.parent == tmp_path / "logs" / "train" / "plugins" / "profile"
    from stepscope.analysis.run_model.steps import find_steps

    profile = stepscope.load(str(tmp_path / "logs"))
    (table,) = profile.hosts.values()
    steps = find_steps(table)
    assert steps.method == "root"
    assert steps.step_num.tolist() == [3, 4, 5, 6]
    assert (steps.duration_ns > 0).all()
    # The backend's own ops, through its bridge, inside the profiled batches.
    framework_op = {"tensorflow": lambda n: n.endswith(("MatMul", ":_MklMatMul")),
                    "torch": lambda n: n in ("aten::addmm", "aten::mm", "aten::linear"),
                    "jax": lambda n: n == "dot" or "fusion" in n}[backend]
    ops = [i for i, c in enumerate(table.name) if framework_op(table.names[int(c)])]
    assert ops, sorted(set(table.names))[:80]
    assert any(steps.event_step[i] >= 0 for i in ops)
    assert _xprof_steps(path, tmp_path / "xprof") == [f"train {i}" for i in range(3, 7)]


def test_keras_callback_counts_batches_across_epochs(tmp_path: Path) -> None:
    path = _fit(tmp_path / "logs", "7,10")
    from stepscope.analysis.run_model.steps import find_steps

    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    assert find_steps(table).step_num.tolist() == [7, 8, 9, 10]


def test_keras_callback_keeps_every_requested_batch(tmp_path: Path) -> None:
    # Issue 30: profile_batch=(10, 15) recorded six batches and the report kept four, the
    # first and last "cut short by the capture"; they were recorded whole and are kept.
    path = _fit(tmp_path / "logs", "10,15")
    from stepscope.analysis.run_model.steps import find_steps

    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    steps = find_steps(table)
    assert steps.step_num.tolist() == [10, 11, 12, 13, 14, 15]
    assert steps.trimmed == []
    from stepscope.analysis.run_model import build_run_model

    summary = build_run_model(profile).overview_dict()
    assert summary["steps"]["count"] == 6 and summary["steps"]["trimmed"] == []


def test_keras_callback_stops_when_training_ends_first(tmp_path: Path) -> None:
    path = _fit(tmp_path / "logs", "6,100", epochs=1)
    assert path.is_file()
    from stepscope.analysis.run_model.steps import find_steps

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
    from stepscope.analysis.run_model.steps import find_steps
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
    from stepscope.analysis.run_model.steps import find_steps

    profile = stepscope.load(out.strip().splitlines()[-1])
    (table,) = profile.hosts.values()
    assert find_steps(table).step_num.tolist() == [0, 1, 2]


TORCH_UNDER_STEPSCOPE = """
import json, sys, torch, stepscope, stepscope.torch
logdir, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

def train():
    with torch.profiler.record_function("forward"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

train()
stepscope.start(logdir, stepscope.ProfilerOptions(device_tracer_level=1, counter_interval_ms=0))
for i in range(steps):
    with stepscope.Trace("train", step_num=i, _r=1):
        train()
path = stepscope.stop()
averages = {e.key: {"self_us": e.self_cpu_time_total, "count": e.count}
            for e in stepscope.torch.last_profiler().key_averages()}
print(json.dumps({"path": str(path), "averages": averages}))
"""


def test_pytorch_bridge_self_times_match_key_averages(tmp_path: Path) -> None:
    from stepscope.analysis import op_stats
    from stepscope.analysis.run_model.framework_op_stats import HOST
    from stepscope.analysis.run_model.steps import find_steps

    out = json.loads(run_script(TORCH_UNDER_STEPSCOPE, str(tmp_path / "logs"), "5")
                     .strip().splitlines()[-1])
    path, averages = Path(out["path"]), out["averages"]
    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    steps = find_steps(table)
    assert steps.step_num.tolist() == [0, 1, 2, 3, 4]
    ours = {r.name: r for r in op_stats(profile).rows if r.host_or_device == HOST}
    heavy = sorted(averages, key=lambda k: -averages[k]["self_us"])[:12]
    assert "aten::mm" in heavy and "forward" in heavy, heavy
    for name in heavy:
        assert name in ours, f"{name} missing from our op stats"
        assert ours[name].occurrences == averages[name]["count"], name
        assert ours[name].self_ns / 1e3 == pytest.approx(averages[name]["self_us"],
                                                          rel=0.02, abs=2.0), name
    # Memory records and their sizes are kept, and are not ops.
    names = set(table.names)
    assert "[memory]" in names and "[memory]" not in ours
    # PyTorch's ops run inside our steps: the clocks agree.
    mm = [i for i, c in enumerate(table.name) if table.names[int(c)] == "aten::mm"]
    assert mm and all(steps.event_step[i] >= 0 for i in mm)
    assert _xprof_steps(path, tmp_path / "xprof") == [f"train {i}" for i in range(5)]


TORCH_SCHEDULE = """
import json, sys, torch, stepscope, stepscope.torch
model, x = torch.nn.Linear(32, 32), torch.randn(8, 32)
with stepscope.torch.profile(
        sys.argv[1], options=stepscope.ProfilerOptions(counter_interval_ms=0),
        schedule=stepscope.torch.schedule(wait=1, warmup=1, active=2, repeat=2)) as prof:
    for i in range(10):
        model(x).sum().backward()
        prof.step()
print(json.dumps([str(p) for p in prof.paths]))
"""


def test_torch_schedule_records_the_active_steps_of_each_cycle(tmp_path: Path) -> None:
    from stepscope.analysis import op_stats
    from stepscope.analysis.run_model.steps import find_steps

    paths = json.loads(run_script(TORCH_SCHEDULE, str(tmp_path / "logs")).strip()
                       .splitlines()[-1])
    assert len(paths) == 2  # repeat=2: one run per cycle
    # Cycle of 4 steps: wait 0, warm up 1, record 2-3; then wait 4, warm up 5, record 6-7.
    for path, expected in zip(paths, ([2, 3], [6, 7]), strict=True):
        profile = stepscope.load(path)
        (table,) = profile.hosts.values()
        assert find_steps(table).step_num.tolist() == expected
        names = set(table.names)
        assert {f"ProfilerStep#{n}" for n in expected} <= names
        # The warm-up step's work is left out: one Linear forward per recorded step.
        counts = {r.name: r.occurrences for r in op_stats(profile).rows}
        assert counts["aten::linear"] == 2


def test_torch_schedule_mirrors_torch_profiler_schedule() -> None:
    torch = pytest.importorskip("torch")
    import stepscope.torch as st

    for kwargs in ({"wait": 1, "warmup": 1, "active": 2, "repeat": 2},
                   {"wait": 0, "warmup": 0, "active": 3, "repeat": 0, "skip_first": 2},
                   {"wait": 2, "warmup": 1, "active": 1, "repeat": 3, "skip_first": 1}):
        theirs = torch.profiler.schedule(**kwargs)
        ours = st.schedule(**kwargs)
        assert [ours(i).name for i in range(30)] == [theirs(i).name for i in range(30)], kwargs


@pytest.mark.parametrize("bad", [{"wait": -1}, {"active": 0}, {"warmup": 1.5}])
def test_torch_schedule_rejects_bad_arguments(bad: dict[str, object]) -> None:
    import stepscope.torch as st
    from stepscope.errors import InvalidOptionError

    kwargs: dict[str, object] = {"wait": 0, "warmup": 0, "active": 1, **bad}
    with pytest.raises(InvalidOptionError):
        st.schedule(**kwargs)  # type: ignore[arg-type]


JAX_UNDER_STEPSCOPE = """
import sys, jax, jax.numpy as jnp, stepscope
logdir, steps = sys.argv[1], int(sys.argv[2])

@jax.jit
def step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.sum(jax.nn.relu(x @ w)))(w)

w, x = jnp.ones((64, 64)), jnp.ones((32, 64))
w = step(w, x).block_until_ready()
stepscope.start(logdir, stepscope.ProfilerOptions(device_tracer_level=1, counter_interval_ms=0))
for i in range(steps):
    with stepscope.Trace("train", step_num=i, _r=1):
        w = step(w, x).block_until_ready()
print(stepscope.stop())
"""


def test_jax_bridge_merges_xla_ops_into_our_steps(tmp_path: Path) -> None:
    from stepscope.analysis.run_model.steps import find_steps

    path = Path(run_script(JAX_UNDER_STEPSCOPE, str(tmp_path / "logs"), "4").strip()
                .splitlines()[-1])
    profile = stepscope.load(str(path))
    (table,) = profile.hosts.values()
    steps = find_steps(table)
    assert steps.step_num.tolist() == [0, 1, 2, 3]
    # XLA's ops of the jitted function: events naming their HLO module.
    rows, codes, values = table.text_stat("hlo_module")
    assert "jit_step" in values
    xla = rows[np.asarray(codes) == values.index("jit_step")]
    assert len(xla) >= 4 and all(steps.event_step[int(i)] >= 0 for i in xla)
    assert any(table.names[int(table.name[i])] == "dot" or "fusion" in
               table.names[int(table.name[i])] for i in xla)
    assert _xprof_steps(path, tmp_path / "xprof") == [f"train {i}" for i in range(4)]
    # Issue 30: an XLA op has the same self time in `report` (op stats) as in `xla` (the op
    # profile), and the runtime's waits around it are not ops.
    from stepscope.analysis import op_stats
    from stepscope.run.loader import open_xla_model

    ours = {r.name: r for r in op_stats(profile).rows}
    xla = {o.name: o for o in open_xla_model(str(path), use_cache=False).ops}
    assert xla and set(xla) <= set(ours), (sorted(xla), sorted(ours))
    for name, o in xla.items():
        assert ours[name].self_ns * 1000 == o.self_ps, name
        assert ours[name].occurrences == o.occurrences, name
    assert not [n for n in ours if "ThunkExecutor" in n or "PjRt" in n or "Pjit" in n]
    assert "train" not in ours  # a step marker, never an op


def test_kineto_kernel_args_become_kernel_details() -> None:
    from stepscope.capture.bridges.pytorch import kernel_details

    args = {"registers per thread": 128, "shared memory": 16384, "grid": [3136, 1, 1],
            "block": [128, 1, 1], "stream": 7}
    assert kernel_details(args) == "regs:128 shm:16384 grid:3136,1,1 block:128,1,1"
    assert kernel_details({"stream": 7}) is None


KINETO_GPU = FIXTURES / "kineto/tb_plugin/samples/resnet50_num_workers_0"


def test_gpu_activity_converts_to_planes_kernel_stats_read_alike(tmp_path: Path) -> None:
    """The bridge's GPU planes, fed a real recording's kernels, give the kernel figures that
    the same recording gives when read as a Kineto trace."""
    import gzip

    from stepscope.analysis.run_model.kernel_stats import kernel_stats
    from stepscope.capture.bridges.pytorch import DeviceEvent, device_planes
    from stepscope.formats import xplane_builder as xb
    from stepscope.model import schema

    (trace,) = KINETO_GPU.glob("*.json.gz")
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat", "").lower() == "kernel"
               and e.get("ph") == "X"]
    assert len(kernels) > 1000
    events = [DeviceEvent(e["args"]["device"], e["args"]["stream"], e["name"],
                          int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000),
                          e["args"]["correlation"], e["args"]) for e in kernels]
    space = xb.new_space("gpu-host")
    for plane in device_planes(events):
        space.planes.add().CopyFrom(plane)
    env = xb.add_plane(space, schema.TASK_ENV_PLANE_ID, schema.TASK_ENV_PLANE)
    env.add_plane_stat(schema.ENV_PROFILE_START_TIME, 0)
    path = tmp_path / "gpu-host.xplane.pb"
    xb.write_space(space, path)

    def figures(rows: list[Any]) -> dict[tuple[Any, ...], tuple[int, float]]:
        out: dict[tuple[Any, ...], tuple[int, float]] = {}
        for r in rows:
            key = (r.kernel, r.registers_per_thread, r.shared_memory_bytes, r.block, r.grid)
            count, total = out.get(key, (0, 0.0))
            out[key] = (count + r.occurrences, total + r.total_us)
        return out

    ours = figures(kernel_stats(stepscope.load(str(path))).rows)
    theirs = figures(kernel_stats(stepscope.load(str(trace))).rows)
    assert ours.keys() == theirs.keys()
    for key, (count, total) in theirs.items():
        assert ours[key][0] == count
        assert ours[key][1] == pytest.approx(total, rel=1e-6, abs=0.01)


CUDA_WITHOUT_GPU = """
import logging, sys, tempfile, types
logging.basicConfig(level=logging.WARNING, format="%(message)s")
sys.modules["cupy"] = types.ModuleType("cupy")  # a CUDA library's name, as after `import cupy`
import stepscope
stepscope.start(tempfile.mkdtemp(), stepscope.ProfilerOptions(counter_interval_ms=0))
with stepscope.Trace("train", step_num=0, _r=1):
    pass
print(stepscope.stop())
"""


def test_cuda_bridge_without_a_gpu_is_skipped_with_one_note(tmp_path: Path) -> None:
    import subprocess
    import sys

    from stepscope.analysis.run_model.steps import find_steps

    proc = subprocess.run([sys.executable, "-c", CUDA_WITHOUT_GPU], capture_output=True,
                          text=True, check=True)
    notes = [line for line in proc.stderr.splitlines() if "GPU activity" in line]
    assert len(notes) == 1, proc.stderr
    assert "cupti-python" in notes[0] or "no CUDA GPU" in notes[0] or "could not start" in \
        notes[0]
    profile = stepscope.load(proc.stdout.strip().splitlines()[-1])
    (table,) = profile.hosts.values()
    assert find_steps(table).step_num.tolist() == [0]


def test_cuda_bridge_stands_aside_for_a_framework_that_traces_cuda() -> None:
    out = run_script("""
import torch
from stepscope.capture.bridges import cuda
from stepscope.capture.options import ProfilerOptions
print(cuda.start(ProfilerOptions()))
""")
    assert out.strip().splitlines()[-1] == "None"


def test_bridge_events_count_against_max_events(tmp_path: Path) -> None:
    script = TORCH_UNDER_STEPSCOPE.replace(
        "device_tracer_level=1, counter_interval_ms=0",
        "device_tracer_level=1, counter_interval_ms=0, max_events=300")
    assert "max_events=300" in script
    out = json.loads(run_script(script, str(tmp_path / "logs"), "5").strip().splitlines()[-1])
    from stepscope.formats.xplane_builder import read_space
    from stepscope.model import schema

    space = read_space(Path(out["path"]))
    kept = sum(len(line.events) for plane in space.planes for line in plane.lines)
    assert kept == 300
    (env,) = [p for p in space.planes if p.name == schema.TASK_ENV_PLANE]
    stats = {env.stat_metadata[s.metadata_id].name: s.int64_value for s in env.stats}
    offered = 5 + sum(a["count"] for a in out["averages"].values())  # our 5 steps, and torch's
    assert stats[schema.ENV_RECORDED_EVENTS] == 300
    assert stats[schema.ENV_DROPPED_EVENTS] > 0
    assert stats[schema.ENV_RECORDED_EVENTS] + stats[schema.ENV_DROPPED_EVENTS] >= offered


@pytest.mark.parametrize(("error", "says"), [
    # As the dynamic loader and cupti-python word them.
    (OSError("libcupti.so.12: cannot open shared object file: No such file or directory"),
     ["LD_LIBRARY_PATH", "extras/CUPTI/lib64", "nvidia-cuda-cupti"]),
    (RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: the user does not have permission"),
     ["NVreg_RestrictProfilingToAdminUsers=0", "--privileged", "SYS_ADMIN", "root"]),
])
def test_a_device_tracer_that_cannot_start_says_what_to_do(error: Exception,
                                                           says: list[str]) -> None:
    from stepscope.capture.bridges.cuda import cupti_advice

    advice = cupti_advice(error)
    assert all(word in advice for word in says), advice
    assert str(error) in advice  # the cause, as the library gave it


def test_cuda_bridge_names_api_calls_as_kineto_does() -> None:
    """CUPTI's callback names carry the API's version (seen on an H200 with cupti-python
    13.0); the launch analyses know Kineto's names, without it."""
    from stepscope.capture.bridges.cuda import api_name, gpu_properties

    assert api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name("cudaGetDevice_v3020") == "cudaGetDevice"
    assert api_name("cuLaunchKernelEx") == "cuLaunchKernelEx"
    assert api_name("cudaMemcpyAsync_v3020") == "cudaMemcpyAsync"
    # No GPU here (or no cuda-bindings): no properties, and no error.
    assert gpu_properties({0}) == {} or all("device_name" in p
                                            for p in gpu_properties({0}).values())
