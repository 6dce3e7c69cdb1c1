"""XLA memory viewer and graph viewer: against XProf's ``memory_viewer`` (headless, by module
name) on the XLA fixtures (TPU, MI300, MI355) and on JAX and TensorFlow ``jit_compile``
programs recorded on CPU here; the graph around an op against the HLO; hostile input."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.xla.hlo_graph import graph_dot, graph_text, hlo_graph
from stepscope.analysis.xla.memory_viewer import MemoryViewerError, memory_spaces, memory_viewer
from stepscope.cli import main
from stepscope.errors import NotFoundError, ProfileFormatError
from stepscope.model.hlo import HEAP_ALLOC, HEAP_FREE, HEAP_SHARE_WITH, HeapTrace
from stepscope.run.loader import open_hlo_programs

from conftest import FIXTURES
from workloads import run_script
from xprof_reference import xprof_tool

MIB = 1 << 20
# The XLA fixtures (as in test_xla): TPU v6e, MI300X (JAX 0.8 and older), MI355 (JAX + TE).
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
MI300_LEGACY = next((FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_legacy")
                    .glob("*.xplane.pb"))
MI355_TE = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization/"
            "934987a2fc2f.xplane.pb")
XLA_FIXTURES = [TPU, MI300, MI300_LEGACY, MI355_TE]

pytestmark = pytest.mark.usefixtures("cache_home")

# Several live temporaries of different sizes, a scan (its carry shares memory: SHARE_WITH
# events in the heap trace) and a donated argument.
JAX_PROGRAM = """
import sys, jax, jax.numpy as jnp
from functools import partial
@partial(jax.jit, donate_argnums=(0,))
def step(state, x):
    def body(c, xi):
        c = c.at[0].set(c[0] + xi.sum())
        return jnp.tanh(c) * 0.9 + c, c.sum()
    state, ys = jax.lax.scan(body, state, x)
    big = jnp.concatenate([state, state.T], axis=0)
    return state + big[:128].mean() + ys.sum(), (big @ big.T).sum()
s, x = jnp.ones((128, 128)), jnp.ones((6, 128))
s, _ = step(s, x)
with jax.profiler.trace(sys.argv[1]):
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            s, l = step(s, x)
            l.block_until_ready()
"""

TF_PROGRAM = """
import sys, tensorflow as tf
w = tf.Variable(tf.ones((96, 96)))
@tf.function(jit_compile=True)
def step(x):
    h = tf.tanh(tf.matmul(x, w))
    return tf.reduce_sum(tf.concat([h, h * 2.0], axis=1)) + tf.reduce_max(h)
x = tf.ones((64, 96))
step(x)
tf.profiler.experimental.start(sys.argv[1])
for i in range(3):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        step(x).numpy()
tf.profiler.experimental.stop()
"""


def _xprof_memory(path: Path, label: str, tmp: Path, space: int = 0) -> dict[str, Any] | None:
    """XProf's memory viewer of program ``label`` (``name(id)``) and memory space ``space``
    in a copy of ``path``."""
    out: dict[str, Any] | None = xprof_tool(
        path, "memory_viewer", tmp, {"module_name": label, "memory_space": str(space)},
        hlo=True)
    return out


def _check_against_xprof(path: Path, tmp: Path) -> int:
    """Every program's memory viewer, in each of its memory spaces, equals XProf's; the
    number of (program, memory space) pairs compared."""
    compared = 0
    pairs = [(p, space) for p in open_hlo_programs(path).values() if p.has_memory_data
             for space in memory_spaces(p.module)]  # type: ignore[arg-type]
    for program, space in pairs:
        assert program.module is not None
        theirs = _xprof_memory(path, program.label, tmp, space)
        assert theirs is not None, program.label
        ours = memory_viewer(program.module, space, program_id=program.program_id)
        mib = pytest.approx
        assert ours.peak_heap_bytes / MIB == mib(theirs.get("peakHeapMib", 0), abs=1e-9)
        assert ours.peak_unpadded_heap_bytes / MIB == mib(theirs.get("peakUnpaddedHeapMib", 0),
                                                          abs=1e-9)
        assert ours.argument_bytes / MIB == mib(theirs.get("entryComputationParametersMib", 0),
                                                abs=1e-9)
        assert ours.reserved_bytes / MIB == mib(theirs.get("totalBufferAllocationMib", 0),
                                                abs=1e-9)
        indefinite = theirs.get("indefiniteBufferAllocationMib", 0)
        # XProf's "stack simulated HLO temporary variables".
        assert ours.temporary_bytes / MIB == mib(theirs.get("peakHeapMib", 0) - indefinite,
                                                 abs=1e-9)
        assert [h / MIB for h in ours.heap_bytes] == mib(theirs.get("heapSizes", []), abs=1e-9)
        assert [h / MIB for h in ours.unpadded_heap_bytes] == mib(
            theirs.get("unpaddedHeapSizes", []), abs=1e-9)
        if ours.heap_bytes:
            assert ours.peak_index == theirs.get("peakHeapSizePosition", 0) + 1
            assert ours.heap_bytes[ours.peak_index] + 0 == max(ours.heap_bytes)
        # The buffers at the peak: the same set, and the largest in the same order of size.
        listed = [h for h in theirs.get("maxHeapBySize", []) if h.get("logicalBufferId") != -1]
        small = [h for h in theirs.get("maxHeapBySize", []) if h.get("logicalBufferId") == -1]

        def key(name: str, size: float, unpadded: float, shape: str, group: str,
                op: str) -> tuple[Any, ...]:
            return name, round(size), round(unpadded), shape, group.lower(), op

        assert sorted(key(h["instructionName"], h["logicalBufferSizeMib"] * MIB,
                          h.get("unpaddedShapeMib", 0) * MIB, h["shapeString"],
                          h["groupName"], h["opCode"]) for h in listed) == \
            sorted(key(b.name, b.size_bytes, b.unpadded_bytes, b.shape, b.allocation_type,
                       b.op) for b in ours.peak_buffers)
        assert [round(h["logicalBufferSizeMib"] * MIB) for h in listed] == \
            [b.size_bytes for b in ours.peak_buffers]
        assert ours.small_buffers_bytes == (round(small[0]["logicalBufferSizeMib"] * MIB)
                                            if small else 0)
        compared += 1
    return compared


@pytest.mark.parametrize("path", XLA_FIXTURES, ids=lambda p: p.parent.name)
def test_memory_viewer_equals_xprof_on_accelerator_profiles(path: Path, tmp_path: Path) -> None:
    # TPU programs have several memory spaces (0, 1, 2, 5, 6), GPU ones one.
    assert _check_against_xprof(path, tmp_path) >= (12 if path == TPU else 7)


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("jax_memory")
    run_script(JAX_PROGRAM, str(logdir))
    return next(logdir.rglob("*.xplane.pb"))


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("tf_memory")
    run_script(TF_PROGRAM, str(logdir))
    return next(logdir.rglob("*.xplane.pb"))


@pytest.mark.parametrize("which", ["jax", "tf"])
def test_memory_viewer_equals_xprof_on_cpu_programs(which: str, request: Any,
                                                    tmp_path: Path) -> None:
    path = request.getfixturevalue(f"{which}_run")
    assert _check_against_xprof(path, tmp_path) >= 1
    programs = open_hlo_programs(path)
    step = next(p for p in programs.values() if "step" in p.name)
    assert step.module is not None
    result = memory_viewer(step.module, program_id=step.program_id)
    # A real program: arguments are counted; JAX's has a heap simulation that rises and
    # falls (TensorFlow's records no heap simulator trace on CPU: its heap is empty).
    assert result.peak_heap_bytes > result.argument_bytes > 0
    if which == "jax":
        assert len(set(result.heap_bytes)) > 2 and result.peak_buffers
        kinds = step.module.buffer_assignment.heap_traces[0].kind  # type: ignore[union-attr]
        assert HEAP_SHARE_WITH in kinds.tolist()
    else:
        assert result.heap_bytes == [] and result.temporary_bytes == 0


def test_tpu_padding_and_memory_spaces() -> None:
    programs = open_hlo_programs(TPU)
    program = next(p for p in programs.values() if p.name == "jit_f")
    assert program.module is not None
    result = memory_viewer(program.module, program_id=program.program_id)
    assert result.peak_heap_bytes > 0 and result.memory_spaces[0] == 0
    data = result.to_dict()
    assert data["padding_overhead_bytes"] == data["peak_heap_bytes"] - \
        data["peak_unpadded_heap_bytes"]
    assert all(b["padding_bytes"] == b["size_bytes"] - b["unpadded_bytes"]
               for b in data["peak_buffers"])
    with pytest.raises(MemoryViewerError, match="no memory space 99"):
        memory_viewer(program.module, 99)


# A big one-off program (RNG set-up, the largest peak) and a small training step run often.
JAX_RNG_THEN_STEPS = """
import sys, jax, jax.numpy as jnp
@jax.jit
def step(w, x):
    return w - 0.01 * jnp.tanh(x @ w)
with jax.profiler.trace(sys.argv[1]):
    w = jax.random.normal(jax.random.PRNGKey(0), (512, 512)).block_until_ready()
    w, x = w[:256, :256], jnp.ones((256, 256))
    for i in range(100):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = step(w, x).block_until_ready()
"""


def test_memory_viewer_opens_the_program_that_took_the_most_time(
        tmp_path: Path, capsys: Any) -> None:
    # Issue 30: it opened the RNG initialisation (the largest peak), not the training step.
    run_script(JAX_RNG_THEN_STEPS, str(tmp_path / "logs"))
    programs = open_hlo_programs(tmp_path / "logs")
    assert any(p.name == "jit_step" for p in programs.values())
    assert any("random" in p.name or "normal" in p.name for p in programs.values())
    assert main(["memory-viewer", str(tmp_path / "logs"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["module"] == "jit_step", data["module"]
    peaks = {p.name: memory_viewer(p.module, 0).peak_heap_bytes for p in programs.values()
             if p.module is not None and p.has_memory_data and 0 in memory_spaces(p.module)}
    assert max(peaks.values()) > peaks["jit_step"]  # the old choice would have been another


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_json_keys(capsys: Any) -> None:
    assert main(["memory-viewer", str(MI300), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("module", "peak_heap_bytes", "argument_bytes", "temporary_bytes",
                "peak_buffers", "reserved_bytes", "padding_overhead_bytes", "heap_bytes",
                "unpadded_heap_bytes", "peak_index", "programs"):
        assert key in data
    # No module named: the program with the largest peak.
    assert data["module"] == "jit_forward_3d_conv" and data["program_id"] == "15"
    assert {"name", "op", "shape", "size_bytes", "unpadded_bytes",
            "allocation_type"} <= set(data["peak_buffers"][0])
    assert data["peak_buffers"][0]["size_bytes"] == max(
        b["size_bytes"] for b in data["peak_buffers"])
    assert main(["memory-viewer", str(MI300), "--module", "jit__multi_slice(13)",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["module"] == "jit__multi_slice"
    assert main(["memory-viewer", str(MI300)]) == 0
    out = capsys.readouterr().out
    assert "Peak heap 1.08 GiB" in out and "input_transpose_fusion" in out


def test_cli_graph_text_json_and_dot(capsys: Any) -> None:
    assert main(["xla-graph", str(MI300), "--module", "jit_forward_3d_conv",
                 "--op", "cudnn-conv.1", "--depth", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {n["name"] for n in data["nodes"]}
    assert names == {"cudnn-conv.1", "bitcast.12.0", "bitcast.14.0", "get-tuple-element.2.0"}
    conv = next(n for n in data["nodes"] if n["name"] == "cudnn-conv.1")
    assert conv["is_root"] and conv["time_ms"] > 0 and conv["occurrences"] > 0
    assert {"source": "bitcast.12.0", "target": "cudnn-conv.1"} in data["edges"]
    assert main(["xla-graph", str(MI300), "--module", "15", "--op", "cudnn-conv.1"]) == 0
    text = capsys.readouterr().out
    assert "* L2 cudnn-conv.1 = (bf16[1,5120,34,31,53]" in text
    assert main(["xla-graph", str(MI300), "--module", "15", "--op", "cudnn-conv.1",
                 "--dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph hlo {")


@pytest.mark.parametrize("argv, message", [
    (["memory-viewer", "{f}", "--module", "nope"], "No XLA program 'nope'"),
    (["memory-viewer", "{f}", "--module", "jit__normal"], "2 programs are named"),
    (["memory-viewer", "{f}", "--memory-space", "x"], "memory_space must be an integer"),
    (["memory-viewer", "{f}", "--memory-space", "7"], "No program has memory space 7"),
    (["memory-viewer", "{f}", "--module", "15", "--memory-space", "7"], "no memory space 7"),
    (["memory-viewer", "{f}", "--limit", "-1"], "--limit must be"),
    (["xla-graph", "{f}", "--module", "15", "--op", "nope"], "No op 'nope'"),
    (["xla-graph", "{f}", "--module", "15", "--op", "cudnn-conv.1", "--depth", "99"],
     "depth must be between 0 and 20"),
    (["memory-viewer", "{tf_gpu}"], "needs the HLO of XLA programs"),
    (["xla-graph", "{tf_gpu}", "--module", "m", "--op", "x"], "needs the HLO of XLA programs"),
    (["memory-viewer", "{missing}"], ""),
])
def test_cli_errors_are_one_line(argv: list[str], message: str, capsys: Any,
                                 tmp_path: Path) -> None:
    tf_gpu = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
    argv = [a.format(f=MI300, tf_gpu=tf_gpu, missing=tmp_path / "none") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_profile_with_damaged_or_no_hlo_is_a_clear_message(tmp_path: Path, capsys: Any) -> None:
    data = MI355_TE.read_bytes()
    rng = random.Random(3)
    for i, blob in enumerate((b"", data[: len(data) // 3],
                              bytes(rng.randrange(256) for _ in range(5000)))):
        path = tmp_path / f"bad{i}.xplane.pb"
        path.write_bytes(blob)
        assert main(["memory-viewer", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("stepscope: error: ") and len(err.strip().splitlines()) == 1


# -- the analyses on absurd input ---------------------------------------------------------------


def _module() -> Any:
    return copy.deepcopy(next(p for p in open_hlo_programs(MI300).values()
                              if p.program_id == "15").module)


def test_damaged_heap_traces_give_a_note_not_an_error() -> None:
    module = _module()
    b = module.buffer_assignment
    trace = b.heap_traces[0]
    first = int(trace.buffer_id[0])
    # Freed twice; then an unknown event kind; then ids that name no buffer.
    for kinds, ids in (([HEAP_ALLOC, HEAP_FREE, HEAP_FREE], [first] * 3),
                       ([HEAP_ALLOC, 9], [first, first]),
                       ([HEAP_ALLOC, HEAP_FREE], [10 ** 12, -5])):
        b.heap_traces = [HeapTrace(0, True, np.array(kinds, np.int8),
                                   np.array(ids, np.int64), np.zeros(len(ids), np.int64),
                                   ["x"] * len(ids))]
        result = memory_viewer(module)
        assert result.peak_heap_bytes >= result.argument_bytes
        assert len(result.heap_bytes) == len(result.instructions)
    assert memory_viewer(module).notes == []  # ids that name no buffer are skipped
    b.heap_traces = [HeapTrace(0, True, np.array([HEAP_ALLOC, HEAP_FREE, HEAP_FREE], np.int8),
                               np.array([first] * 3, np.int64), np.zeros(3, np.int64),
                               ["x"] * 3)]
    assert "damaged" in memory_viewer(module).notes[0]


def test_share_with_cycles_and_missing_assignment_are_bounded() -> None:
    module = _module()
    b = module.buffer_assignment
    a, c = (int(x) for x in b.heap_traces[0].buffer_id[:2])
    b.heap_traces = [HeapTrace(0, True, np.array([2, 2, 0, 1], np.int8),
                               np.array([a, c, a, a], np.int64),
                               np.array([c, a, 0, 0], np.int64), ["x"] * 4)]
    result = memory_viewer(module)  # a shares c, c shares a: a cycle, ended
    assert len(result.heap_bytes) == len(result.instructions)
    module.buffer_assignment = None
    with pytest.raises(MemoryViewerError, match="no buffer assignment"):
        memory_viewer(module)


def test_graph_depth_fusions_and_bounds() -> None:
    module = _module()
    g0 = hlo_graph(module, "cudnn-conv.1", 0)
    assert [n.name for n in g0.nodes] == ["cudnn-conv.1"] and g0.edges == []
    collapsed = hlo_graph(module, "cudnn-conv.1", 3)
    fusion = next(n for n in collapsed.nodes if n.name == "input_transpose_fusion")
    assert fusion.fused_ops > 0 and not any(n.group for n in collapsed.nodes)
    expanded = hlo_graph(module, "cudnn-conv.1", 3, expand_fusions=True)
    inner = [n for n in expanded.nodes if n.group == "input_transpose_fusion"]
    assert len(inner) == fusion.fused_ops
    # Every edge joins two drawn nodes and goes down the layers.
    layer = {n.name: n.layer for n in expanded.nodes}
    assert all(layer[a] < layer[b] for a, b in expanded.edges)
    small = hlo_graph(module, "cudnn-conv.1", 20, max_nodes=3)
    assert small.truncated and len(small.nodes) == 3 and "cut" in small.notes[0]
    with pytest.raises(NotFoundError):
        hlo_graph(module, "<script>", 1)
    with pytest.raises(ValueError):
        hlo_graph(module, "cudnn-conv.1", -1)
    dot = graph_dot(hlo_graph(module, "cudnn-conv.1", 1))
    assert dot.count("->") == 3 and '"cudnn-conv.1" [label=' in dot
    assert graph_text(g0).splitlines()[1].startswith("* L0 cudnn-conv.1 = ")


def test_graph_of_a_tpu_program_in_a_loop() -> None:
    program = next(p for p in open_hlo_programs(TPU).values() if p.name == "jit_f")
    assert program.module is not None
    some = next(i for c in program.module.computations if not c.is_fusion
                for i in c.instructions if i.opcode == "fusion")
    graph = hlo_graph(program.module, some.name, 2, expand_fusions=True)
    assert any(n.is_root for n in graph.nodes)
    names = {n.name for n in graph.nodes}
    assert all(a in names and b in names for a, b in graph.edges)


def test_hlo_reader_names_programs_as_the_op_profile_does(tmp_path: Path) -> None:
    from stepscope.formats.xspace_to_hlo import hlo_from_xspace, load_hlo
    from stepscope.formats.xspace_to_xla import load_xla

    for path in XLA_FIXTURES:
        modules, names, bad = load_hlo(path)
        x = load_xla(path)
        assert names == x.module_names and not bad and not x.bad_modules
        assert {k: (m.name, len(m.computations)) for k, m in modules.items()} == \
            {k: (m.name, len(m.computations)) for k, m in x.modules.items()}
    data = MI300.read_bytes()
    rng = random.Random(11)
    for blob in (b"", data[:1000], data[: len(data) // 2], b"\x0a\xff\xff\xff\xff\x0f",
                 bytes(rng.randrange(256) for _ in range(3000)), b"\x0b" * 100):
        try:
            hlo_from_xspace(blob, "test")
        except ProfileFormatError as err:
            assert str(err).startswith("test:")
