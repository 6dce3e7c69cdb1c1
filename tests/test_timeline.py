"""Legacy timelines: TensorFlow RunMetadata/StepStats to Chrome trace, and as profiles.

RunMetadata comes from real ``tf.compat.v1.Session`` FULL_TRACE runs of small graphs on CPU
(recorded once per module, in a subprocess, with TensorFlow's own timeline traces beside
them; see tf_step_stats_recorder.py). Our trace must hold exactly TensorFlow's events.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.run_model.framework_op_stats import op_stats
from stepscope.analysis.run_model.steps import find_steps
from stepscope.analysis.trace.trace_index import build as build_index
from stepscope.errors import ProfileFormatError
from stepscope.formats.run_reader import load, load_file
from stepscope.formats.step_stats_proto import RunMetadata, StepStats
from stepscope.formats.step_stats_to_chrome_trace import parse_op_label
from stepscope.model.events import EventTable
from stepscope.timeline import Timeline
from waiting import final_api

GRAPHS = ("mlp", "two_cpus", "while")
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RunMetadata of real TF1 sessions, and TensorFlow's timeline traces of them."""
    out = tmp_path_factory.mktemp("step_stats")
    subprocess.run([sys.executable, str(HERE / "tf_step_stats_recorder.py"), str(out)],
                   check=True, capture_output=True, timeout=300)
    return out


def _events(text: str) -> Counter[str]:
    """A trace's events as a multiset of canonical JSON (every field compared)."""
    return Counter(json.dumps(e, sort_keys=True) for e in json.loads(text)["traceEvents"])


def _by_phase(text: str) -> Counter[str]:
    return Counter(e["ph"] for e in json.loads(text)["traceEvents"])


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("dataflow", [0, 1])
@pytest.mark.parametrize("memory", [0, 1])
def test_same_events_as_tensorflow(recorded: Path, graph: str, dataflow: int,
                                   memory: int) -> None:
    want = (recorded / f"{graph}.tf.{dataflow}.{memory}.json").read_text()
    got = Timeline(recorded / f"{graph}.pb").generate_chrome_trace_format(
        show_dataflow=bool(dataflow), show_memory=bool(memory))
    assert _events(got) == _events(want)
    phases = _by_phase(want)
    # The comparison means something: ops, and the parts the flags ask for, are there.
    assert phases["X"] >= 10 and phases["M"] >= 3
    assert phases["s"] == phases["t"]
    # Flows join ops on different lanes or devices: always so across the two CPUs.
    if not dataflow:
        assert phases["s"] == 0
    elif graph == "two_cpus":
        assert phases["s"] > 0
    assert (phases["C"] > 0 and phases["N"] == phases["O"] >= phases["D"] > 0) == bool(memory)


def test_flows_cross_devices_and_loops_reuse_tensor_ids(recorded: Path) -> None:
    doc = json.loads(Timeline(recorded / "two_cpus.pb").generate_chrome_trace_format())
    compute = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["args"]["name"].endswith(" Compute")}
    assert len(compute) == 2
    starts = {e["id"]: e["pid"] for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e["pid"] for e in doc["traceEvents"] if e["ph"] == "t"}
    assert any(starts[i] != ends[i] for i in starts)  # a flow from one device to the other
    loop = json.loads(Timeline(recorded / "while.pb").generate_chrome_trace_format(
        show_memory=True))["traceEvents"]
    created = [e["id"] for e in loop if e["ph"] == "N"]
    assert len(set(created)) < len(created)  # a loop body's tensors: ids as TensorFlow gives


@pytest.mark.parametrize("form", ["pbtxt", "step_stats.pb", "step_stats.pbtxt", "bytes",
                                  "message", "tf_message"])
def test_every_input_form_gives_the_same_trace(recorded: Path, form: str) -> None:
    want = (recorded / "mlp.tf.1.1.json").read_text()
    source: Any
    if form == "bytes":
        source = (recorded / "mlp.pb").read_bytes()
    elif form == "message":
        source = RunMetadata.FromString((recorded / "mlp.pb").read_bytes()).step_stats
    elif form == "tf_message":
        tf_pb2 = pytest.importorskip("tensorflow.core.framework.step_stats_pb2")
        source = tf_pb2.StepStats.FromString((recorded / "mlp.step_stats.pb").read_bytes())
    else:
        source = recorded / f"mlp.{form}"
    got = Timeline(source).generate_chrome_trace_format(show_memory=True)
    assert _events(got) == _events(want)


def test_cli_writes_the_trace_atomically_and_to_stdout(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "trace.json"
    out.parent.mkdir()
    run = subprocess.run([sys.executable, "-m", "stepscope.cli", "timeline",
                          str(recorded / "two_cpus.pbtxt"), "-o", str(out), "--show-memory"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _events(out.read_text()) == _events((recorded / "two_cpus.tf.1.1.json").read_text())
    assert [p.name for p in out.parent.iterdir()] == ["trace.json"]  # no temporary left
    run = subprocess.run([sys.executable, "-m", "stepscope.cli", "timeline",
                          str(recorded / "two_cpus.pb"), "-o", "-", "--no-show-dataflow"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _events(run.stdout) == _events((recorded / "two_cpus.tf.0.0.json").read_text())


# -- loading as a profile ---------------------------------------------------------------------


def _node_ops(recorded: Path, graph: str) -> Counter[tuple[str, str]]:
    """(op type, node name) of every node of the recorded step, from TensorFlow's trace."""
    doc = json.loads((recorded / f"{graph}.tf.0.0.json").read_text())
    return Counter((e["args"]["op"], e["args"]["name"]) for e in doc["traceEvents"]
                   if e["ph"] == "X")


def _stats_of(table: EventTable, row: int) -> dict[str, list[Any]]:
    st = table.stats
    out: dict[str, list[Any]] = {}
    for i in np.flatnonzero(st.event == row).tolist():
        out.setdefault(st.stat_names[int(st.name[i])], []).append(st.value_of(i))
    return out


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("suffix", ["pb", "pbtxt", "ctf.json"])
def test_loads_as_one_step_with_ops_by_type(recorded: Path, graph: str, suffix: str) -> None:
    table = load_file(recorded / f"{graph}.{suffix}", use_cache=False)
    steps = find_steps(table)
    assert steps.method == "root" and len(steps) == 1 and steps.marker == "session.run"
    md = RunMetadata.FromString((recorded / f"{graph}.pb").read_bytes())
    nodes = [n for d in md.step_stats.dev_stats for n in d.node_stats]
    begin = min(n.all_start_micros for n in nodes)
    end = max(n.all_start_micros + n.all_end_rel_micros for n in nodes)
    assert abs(int(steps.start_ns[0]) - begin * 1000) < 1000
    assert abs(int(steps.end_ns[0]) - end * 1000) < 2000
    got = Counter()
    for row in op_stats(table).rows:
        got[(row.type, row.name)] += row.occurrences
    assert got == _node_ops(recorded, graph)


@pytest.mark.parametrize("suffix", ["pb", "ctf.json"])
def test_flows_join_producers_to_consumers(recorded: Path, suffix: str) -> None:
    table = load_file(recorded / f"two_cpus.{suffix}", use_cache=False)
    index = build_index(table)
    name = {i: table.names[c] for i, c in enumerate(table.name.tolist())}
    pairs = {(name[int(s)].split(":")[0], name[int(d)].split(":")[0])
             for s, d in zip(index.flow_src, index.flow_dst, strict=True)}
    md = RunMetadata.FromString((recorded / "two_cpus.pb").read_bytes())
    produced = {n.node_name for d in md.step_stats.dev_stats for n in d.node_stats if n.output}
    want = set()
    for d in md.step_stats.dev_stats:
        for n in d.node_stats:
            for tensor in parse_op_label(n.timeline_label)[2]:
                # TensorFlow's matching: the name, else the name before a "/_" suffix (the
                # Send/Recv pair a cross-device input goes through).
                source = tensor.split(":")[0]
                if source not in produced and tensor.rfind("/_") > 0:
                    source = tensor[:tensor.rfind("/_")].split(":")[0]
                if source in produced:
                    want.add((source, n.node_name))
    assert want and pairs == want


def _memory_events(table: EventTable) -> list[tuple[str, int, dict[str, list[Any]]]]:
    out = []
    for row in np.argsort(table.start_ns, kind="stable").tolist():
        event = table.names[table.name[row]]
        if event in ("MemoryAllocation", "MemoryDeallocation"):
            out.append((event, int(table.start_ns[row]), _stats_of(table, row)))
    return out


def test_memory_events_from_allocation_records(recorded: Path) -> None:
    table = load_file(recorded / "mlp.pb", use_cache=False)
    md = RunMetadata.FromString((recorded / "mlp.pb").read_bytes())
    records = [(m.allocator_name, r.alloc_micros, r.alloc_bytes, n.node_name)
               for d in md.step_stats.dev_stats for n in d.node_stats for m in n.memory
               for r in m.allocation_records if r.alloc_bytes]
    events = _memory_events(table)
    assert records and len(events) == len(records)
    assert sorted((s["allocator_name"][0], t // 1000, s["requested_bytes"][0]
                   * (1 if e == "MemoryAllocation" else -1), s["tf_op"][0].split(":")[0])
                  for e, t, s in events) == sorted(records)
    for stat in ("allocator_name", "bytes_allocated", "bytes_reserved", "peak_bytes_in_use",
                 "requested_bytes", "allocation_bytes", "tf_op", "region_type", "data_type",
                 "tensor_shape"):
        assert all(stat in s for _, _, s in events), stat
    # Bytes in use follow the records, per allocator; the peak is their running maximum.
    by_allocator: dict[str, list[tuple[int, int, int]]] = {}
    for event, _, s in events:
        sign = 1 if event == "MemoryAllocation" else -1
        by_allocator.setdefault(s["allocator_name"][0], []).append(
            (sign * s["requested_bytes"][0], s["bytes_allocated"][0], s["peak_bytes_in_use"][0]))
    for rows in by_allocator.values():
        in_use = [r[1] for r in rows]
        assert min(in_use) >= 0
        assert np.all(np.diff(in_use) == [r[0] for r in rows[1:]])
        assert [r[2] for r in rows] == np.maximum.accumulate(in_use).tolist()
    outputs = [s for e, _, s in events if s["region_type"] == ["output"]]
    assert outputs and all(s["tensor_shape"][0].startswith("(") for s in outputs)


def test_ctf_json_memory_follows_its_tensor_objects(recorded: Path) -> None:
    doc = json.loads((recorded / "mlp.ctf.json").read_text())
    counters: dict[str, list[int]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append(next(iter(e["args"].values())))
    events = _memory_events(load_file(recorded / "mlp.ctf.json", use_cache=False))
    sizes: dict[str, list[int]] = {}
    for event, _, s in events:
        sign = 1 if event == "MemoryAllocation" else -1
        sizes.setdefault(s["allocator_name"][0], []).append(sign * s["requested_bytes"][0])
    assert set(sizes) == {k for k, v in counters.items() if max(v) > 0}
    for allocator, deltas in sizes.items():
        assert max(np.cumsum(deltas)) - min(0, min(np.cumsum(deltas))) == max(counters[allocator])


def test_run_directory_report_and_web_api(recorded: Path, tmp_path: Path) -> None:
    from stepscope.model.logdir import list_runs
    from stepscope.web.api import Api

    run = tmp_path / "plugins" / "profile" / "legacy"
    run.mkdir(parents=True)
    (run / "worker_run_metadata.pbtxt").write_bytes((recorded / "two_cpus.pbtxt").read_bytes())
    (run / "saved_model.pb").write_bytes(b"not step stats")  # not taken for a host
    assert load(run, use_cache=False).host_names == ["worker_run_metadata"]
    api = Api(tmp_path, use_cache=False)
    api.store.wait(list_runs(tmp_path)["legacy"])
    code, overview = api.data("legacy", None, "overview_page", {})
    assert code == 200 and overview["steps"]["count"] == 1
    code, ops = api.data("legacy", None, "framework_op_stats", {})
    types = {o["type"] for o in ops["ops"]}
    # TensorFlow rewrites MatMul to oneDNN's _MklMatMul on some CPUs only (not on every x86).
    assert code == 200 and {"AddN", "Mean"} <= types and types & {"MatMul", "_MklMatMul"}
    # The final answer, not the coarse overview's (no flows in its windows).
    code, viewer = final_api(lambda: api.data("legacy", None, "trace_viewer", {}),
                             "the legacy run's trace index")
    assert code == 200
    code, window = api.trace("window", {"run": "legacy", "start_ns": "0",
                                        "end_ns": str(viewer["span_ns"]), "width": "20000"})
    assert code == 200 and window["flows"]
    names = set(window["names"].values())
    assert "session.run" in names and "both:AddN" in names


# -- hostile input ----------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepscope.cli", *args], capture_output=True,
                          text=True, timeout=120)


def _bad_inputs(recorded: Path, tmp: Path) -> dict[str, Path]:
    whole = (recorded / "mlp.pb").read_bytes()
    text = (recorded / "mlp.pbtxt").read_text()
    md = RunMetadata.FromString(whole)
    no_times = RunMetadata()
    no_times.CopyFrom(md)
    node = no_times.step_stats.dev_stats[0].node_stats[1]
    node.ClearField("all_start_micros")
    node.ClearField("all_start_nanos")
    unknown = RunMetadata()
    unknown.CopyFrom(md)
    unknown.step_stats.dev_stats[0].device = "gpu-ish thing"
    rng = np.random.default_rng(18)
    cases = {
        "empty.pb": b"",
        "blank.pbtxt": b"\n \n",
        "truncated.pb": whole[: len(whole) // 2],
        "truncated.pbtxt": text[: len(text) // 2].encode(),
        "random.pb": rng.bytes(4096),
        "no_step_stats.pb": RunMetadata().SerializeToString(),
        "no_step_stats.pbtxt": b"# nothing recorded\n",
        "empty_step_stats.pbtxt": b"dev_stats {\n}\n",
        "no_times.pb": no_times.SerializeToString(),
        "unknown_device.pb": unknown.SerializeToString(),
        "deep.pbtxt": b"step_stats { " * 50_000,
        "not_utf8.pbtxt": b"step_stats { dev_stats { device: \"\xff\xfe\" } }",
        "absurd_varint.pb": b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        "huge_time.pbtxt": b'dev_stats { device: "/device:CPU:0" node_stats { node_name: "a" '
                           b'all_start_micros: -5 } }',
    }
    paths = {}
    for name, data in cases.items():
        paths[name] = tmp / name
        paths[name].write_bytes(data)
    return paths


def test_bad_step_stats_are_one_clear_error(recorded: Path, tmp_path: Path) -> None:
    for name, path in _bad_inputs(recorded, tmp_path).items():
        with pytest.raises(ProfileFormatError) as err:
            Timeline(path)
        message = str(err.value)
        assert "\n" not in message and str(path) in message, (name, message)
        with pytest.raises(ProfileFormatError):
            load_file(path, use_cache=False)
    with pytest.raises(ProfileFormatError, match="StepStats"):
        Timeline(12345)
    with pytest.raises(ProfileFormatError, match="no step_stats"):
        Timeline(StepStats())


def test_bad_step_stats_exit_2_from_the_cli(recorded: Path, tmp_path: Path) -> None:
    paths = _bad_inputs(recorded, tmp_path)
    for name in ("truncated.pb", "no_step_stats.pb", "unknown_device.pb", "no_times.pb",
                 "random.pb"):
        run = _cli("timeline", str(paths[name]), "-o", str(tmp_path / "out.json"))
        assert run.returncode == 2, (name, run.stderr)
        assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
        assert run.stderr.startswith("stepscope: error: ")
        assert not (tmp_path / "out.json").exists()
    run = _cli("report", str(paths["truncated.pbtxt"]), "--no-cache")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    run = _cli("timeline", str(recorded / "mlp.pb"), "-o", str(tmp_path / "no" / "dir" / "x"))
    assert run.returncode == 2  # like every output: a missing folder is one error line
    assert run.stderr.startswith("stepscope: error: Cannot write") and \
        "No such file" in run.stderr
    run = _cli("timeline", str(recorded / "mlp.pb"), "-o", "/proc/version/x")
    assert run.returncode == 2 and "Traceback" not in run.stderr


def test_bad_tf_timeline_json_is_one_clear_error(recorded: Path, tmp_path: Path) -> None:
    doc = json.loads((recorded / "mlp.ctf.json").read_text())
    metadata = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    cases = {
        "no_ops": {"traceEvents": metadata},
        "bad_ts": {"traceEvents": metadata + [{**ops[0], "ts": "soon"}]},
        "nan_dur": {"traceEvents": metadata + [{**ops[0], "dur": 1e400}]},
        "orphan_op": {"traceEvents": metadata + [{**ops[0], "pid": 99}]},
    }
    for name, bad in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ProfileFormatError) as err:
            load_file(path, use_cache=False)
        assert "\n" not in str(err.value), name
