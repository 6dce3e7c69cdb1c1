"""PyTorch profiler (Kineto) Chrome-trace JSON → EventTable, on recorded GPU traces and on
traces made here by torch."""

from __future__ import annotations

import collections
import gzip
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.errors import ProfileFormatError
from stepscope.formats import kineto_to_tables as ct
from stepscope.model import schema
from stepscope.model import stat_kinds as sk
from stepscope.model.events import MISSING, TYPED_STATS, EventTable

from conftest import FIXTURES

KINETO_FIXTURES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and (
    p.name.endswith(".json") or p.name.endswith(".json.gz")))
ROW_PHASES = {"X", "i", "I", "s", "t", "f"}
LEGACY = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
          "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
HOST_CATEGORIES = {"cpu_op", "user_annotation", "python_function", "cuda_runtime",
                   "cuda_driver", "cpu_instant_event"}


def fixture(relative: str) -> Path:
    return FIXTURES / relative


def read_json(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc: dict[str, Any] = json.loads(data)
    return doc


def categories(table: EventTable) -> np.ndarray:
    """Each row's kineto_category (object array)."""
    st = table.stats
    code = st.stat_names.index(schema.KINETO_CATEGORY)
    rows = np.flatnonzero(st.name == code)
    assert (st.kind[rows] == sk.KIND_STR).all()
    # Categories are few: decode each distinct text once.
    _, first, inverse = np.unique(st.value[rows], return_index=True, return_inverse=True)
    texts = np.array([st.value_of(int(rows[i])) for i in first], dtype=object)
    out = np.empty(len(table), dtype=object)
    out[st.event[rows]] = texts[inverse.reshape(-1)]
    return out


def row_names(table: EventTable) -> np.ndarray:
    return np.array(table.names, dtype=object)[table.name] if len(table) else \
        np.zeros(0, dtype=object)


def side_stats(table: EventTable, row: int) -> dict[str, Any]:
    st = table.stats
    return {st.stat_names[st.name[j]]: st.value_of(int(j))
            for j in np.flatnonzero(st.event == row)}


def micros_to_ns(value: Any) -> int:
    return int(round(Decimal(str(value)) * 1000))


# ------------------------------------------------------------------ every recorded trace


def test_fixtures_are_there() -> None:
    assert len(KINETO_FIXTURES) >= 30


@pytest.mark.parametrize("path", KINETO_FIXTURES, ids=lambda p: p.name)
def test_fixture(path: Path) -> None:
    doc = read_json(path)
    table = ct.load_chrome_trace(path)
    cats = categories(table)
    check_every_event_is_a_row(doc, table, cats)
    check_gpu_events_are_on_their_gpu_plane_and_tied_to_launches(doc, table, cats)
    check_flows_keep_ids_and_phases(doc, table, cats)


def check_every_event_is_a_row(doc: dict[str, Any], table: EventTable,
                               cats: np.ndarray) -> None:
    events = doc["traceEvents"]

    # Counted here with plain json: every X, instant, flow and counter series is one row.
    complete = [e for e in events if e.get("ph") == "X"]
    expected = sum(1 for e in events if e.get("ph") in ROW_PHASES)
    expected += sum(1 for e in events if e.get("ph") == "C"
                    for v in e.get("args", {}).values() if isinstance(v, (int, float)))
    assert len(table) == expected
    for column in (table.plane, table.line, table.name, table.start_ns, table.duration_ns,
                   *table.typed.values()):
        assert len(column) == len(table)
    assert set(table.typed) == set(TYPED_STATS)
    assert (table.typed[schema.ROOT_LEVEL] == MISSING).all()
    assert (table.typed[schema.GROUP_ID] == MISSING).all()

    # Every row has a category; ops keep theirs, flows are "flow".
    assert all(isinstance(c, str) for c in cats)
    got = collections.Counter(cats.tolist())
    want = collections.Counter(LEGACY.get(e.get("cat", ""), e.get("cat", "")) for e in complete)
    for cat, count in want.items():
        assert got[cat] == count, cat
    n_flows = sum(1 for e in events if e.get("ph") in ("s", "t", "f"))
    assert got[ct.FLOW_CATEGORY] == n_flows

    # Complete and instant events keep their names; durations are ns, rounded.
    names = row_names(table)
    assert collections.Counter(names[cats != ct.FLOW_CATEGORY].tolist()) == \
        collections.Counter(str(e.get("name", "")) for e in events
                            if e.get("ph") in ("X", "i", "I"))
    total = sum(micros_to_ns(e.get("dur", 0)) for e in complete)
    assert abs(int(table.duration_ns.sum()) - total) <= len(complete)

    # ProfilerStep#N rows carry step_num N, and nothing else does.
    step = table.typed[schema.STEP_NUM]
    for row in np.flatnonzero(step != MISSING).tolist():
        assert names[row] == f"ProfilerStep#{step[row]}"
    n_steps = sum(1 for e in complete if re.fullmatch(r"ProfilerStep#\d+", e.get("name", "")))
    assert int((step != MISSING).sum()) == n_steps

    # The environment plane.
    env = table.planes[-1]
    assert env.name == schema.TASK_ENV_PLANE and env.id == schema.TASK_ENV_PLANE_ID
    assert env.stats[schema.ENV_SOURCE_FORMAT] == "kineto"
    if len(table):
        assert env.stats[schema.ENV_PROFILE_START_TIME] == int(table.start_ns.min())
        assert env.stats[schema.ENV_PROFILE_STOP_TIME] == \
            int((table.start_ns + table.duration_ns).max())
    info = doc.get("distributedInfo") or {}
    if "rank" in info:
        assert env.stats[schema.ENV_RANK] == info["rank"]
    if "world_size" in info:
        assert env.stats[schema.ENV_WORLD_SIZE] == info["world_size"]
    if doc.get("deviceProperties"):
        assert json.loads(env.stats[schema.ENV_DEVICE_PROPERTIES]) == doc["deviceProperties"]
    assert table.planes[0].name == schema.HOST_PLANE
    assert table.planes[0].id == schema.HOST_PLANE_ID

    # Lines: ids unique within a plane, named from thread_name metadata where there is one.
    pairs = list(zip(table.line_plane.tolist(), table.line_id.tolist(), strict=True))
    assert len(set(pairs)) == len(pairs)
    assert all(table.line_name)
    with_rows = {(e.get("pid"), e.get("tid")) for e in events if e.get("ph") in ROW_PHASES}
    thread_names: dict[tuple[Any, Any], str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names.setdefault((e["pid"], e["tid"]), e["args"]["name"].strip())
    named = {name for pair, name in thread_names.items() if pair in with_rows}
    assert named <= set(table.line_name)


def check_gpu_events_are_on_their_gpu_plane_and_tied_to_launches(
        doc: dict[str, Any], table: EventTable, cats: np.ndarray) -> None:
    kernels = [e for e in doc["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    gpu_planes = [i for i, p in enumerate(table.planes)
                  if p.name.startswith(schema.GPU_PLANE_PREFIX)]
    if not kernels:
        assert not (cats == "kernel").any()
        return
    devices = {e["args"]["device"] for e in kernels}
    assert {table.planes[i].name for i in gpu_planes} >= \
        {f"{schema.GPU_PLANE_PREFIX}{d}" for d in devices}
    for i in gpu_planes:
        assert table.planes[i].id == int(table.planes[i].name.rsplit(":", 1)[1]) + 1
    is_kernel = cats == "kernel"
    assert int(is_kernel.sum()) == len(kernels)
    assert np.isin(table.plane[is_kernel], gpu_planes).all()
    # Host categories never land on a GPU plane (Python threads filed under pid 0 included).
    on_host = table.plane == table.plane_index(schema.HOST_PLANE)
    assert on_host[np.isin(cats, list(HOST_CATEGORIES))].all()

    # Kernels and their launches share correlation ids. The kernels without a launch in the
    # file were all launched before the first recorded launch (before the window opened).
    corr = table.typed[schema.CORRELATION_ID]
    kernel_corr = corr[is_kernel]
    assert (kernel_corr != MISSING).all()
    assert sorted(kernel_corr.tolist()) == sorted(e["args"]["correlation"] for e in kernels)
    names = row_names(table)
    launch = on_host & np.isin(cats, ["cuda_runtime", "cuda_driver"]) & \
        np.array(["Launch" in n for n in names], dtype=bool)
    launch_corr = corr[launch]
    matched = np.isin(kernel_corr, launch_corr)
    assert matched.mean() >= 0.7
    if not matched.all():
        assert kernel_corr[~matched].max() < launch_corr.min()


def check_flows_keep_ids_and_phases(doc: dict[str, Any], table: EventTable,
                                    cats: np.ndarray) -> None:
    flows = [e for e in doc["traceEvents"] if e.get("ph") in ("s", "t", "f")]
    rows = np.flatnonzero(cats == ct.FLOW_CATEGORY)
    assert len(rows) == len(flows)
    assert (table.duration_ns[rows] == 0).all()
    st = table.stats
    if not flows:
        return
    fid, phase = st.stat_names.index(ct.FLOW_ID), st.stat_names.index(ct.FLOW_PHASE)
    id_rows = np.flatnonzero(st.name == fid)
    phase_rows = np.flatnonzero(st.name == phase)
    assert (st.kind[id_rows] == sk.KIND_INT64).all()
    assert st.event[id_rows].tolist() == rows.tolist()
    assert st.value[id_rows].tolist() == [e["id"] for e in flows]
    assert st.event[phase_rows].tolist() == rows.tolist()
    phases = collections.Counter(st.value[phase_rows].tolist())
    decoded = {st.value_of(int(phase_rows[st.value[phase_rows] == v][0])): n
               for v, n in phases.items()}
    assert decoded == collections.Counter(e["ph"] for e in flows)
    names = set(row_names(table)[rows].tolist())
    assert all(n.startswith("flow:") for n in names)


# ------------------------------------------------------------------ conventions, one by one


def test_args_become_typed_side_stats() -> None:
    path = fixture("TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    doc = read_json(path)
    table = ct.load_chrome_trace(path)
    rows = [e for e in doc["traceEvents"] if e.get("ph") in ROW_PHASES]
    st = table.stats
    assert (np.diff(st.event) >= 0).all()  # grouped by event row, in row order
    for row, event in enumerate(rows):
        got = side_stats(table, row)
        assert got.pop(schema.KINETO_CATEGORY) == (
            "flow" if event["ph"] in ("s", "t", "f") else event.get("cat", ""))
        got.pop(ct.FLOW_ID, None)
        got.pop(ct.FLOW_PHASE, None)
        want: dict[str, Any] = {}
        for key, value in (event.get("args") or {}).items():
            if value is None or key == "correlation":
                continue
            if isinstance(value, (list, dict)):
                value = json.dumps(value, ensure_ascii=False)
            elif isinstance(value, bool):
                value = int(value)
            want[key] = value
        assert got == want, event
        corr = (event.get("args") or {}).get("correlation")
        assert table.typed[schema.CORRELATION_ID][row] == (MISSING if corr is None else corr)

    kinds = {st.stat_names[st.name[j]]: int(st.kind[j]) for j in range(len(st.event))}
    assert kinds["blocks per SM"] == sk.KIND_DOUBLE
    assert kinds["External id"] == sk.KIND_INT64
    assert kinds["Input Dims"] == sk.KIND_STR
    assert kinds["Addr"] == sk.KIND_INT64
    assert "correlation" not in kinds


def test_relative_timestamps_are_added_to_the_base() -> None:
    path = fixture("HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz")
    doc = read_json(path)
    table = ct.load_chrome_trace(path)
    base = doc["baseTimeNanoseconds"]
    rows = [e for e in doc["traceEvents"] if e.get("ph") in ROW_PHASES]
    want = [base + micros_to_ns(e["ts"]) for e in rows]
    assert np.abs(table.start_ns - np.array(want)).max() <= 1
    # Nanoseconds since the epoch: the INFO log says this was recorded on 2024-05-22 (PDT).
    assert 1716336000 < table.start_ns.min() / 1e9 < 1716508800
    assert table.planes[-1].stats["baseTimeNanoseconds"] == base


def test_float_epoch_microseconds_keep_their_nanoseconds() -> None:
    path = fixture("HolisticTraceAnalysis/tests/data/ns_resolution_trace/"
                   "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    text = gzip.decompress(path.read_bytes()).decode()
    # The decimal text of each ts, exactly (a double keeps only about 0.25 µs at this size).
    stamps = [Decimal(m) for m in re.findall(r'"ts": ([0-9.]+)', text)]
    doc = json.loads(text)
    phases = [e["ph"] for e in doc["traceEvents"]]
    assert len(stamps) == len(phases)
    want = [int(s * 1000) for s, ph in zip(stamps, phases, strict=True) if ph in ROW_PHASES]
    assert all(s == s.quantize(Decimal("0.001")) for s in stamps)
    table = ct.load_chrome_trace(path)
    assert table.start_ns.tolist() == want
    assert table.hostnames == ["twshared39868.02.pnb3.facebook.com"]


def test_integer_epoch_microseconds() -> None:
    path = fixture("param/et_replay/tests/inputs/dlrm_kineto/"
                   "worker0_step_12.1694128201545.pt.trace.json.gz")
    doc = read_json(path)
    table = ct.load_chrome_trace(path)
    rows = [e for e in doc["traceEvents"] if e.get("ph") in ROW_PHASES]
    assert table.start_ns.tolist() == [e["ts"] * 1000 for e in rows]
    assert table.hostnames == []
    env = table.planes[-1].stats
    assert env[schema.ENV_RANK] == 0 and env[schema.ENV_WORLD_SIZE] == 8


def test_rocm_device_numbers_and_python_threads_under_pid_0() -> None:
    path = fixture("TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz")
    table = ct.load_chrome_trace(path)
    # ROCm files its first GPU as device 2 (the runtime's agent index); kept as written.
    assert [p.name for p in table.planes] == [schema.HOST_PLANE, "/device:GPU:2",
                                              schema.TASK_ENV_PLANE]
    gpu = table.planes[1]
    assert gpu.id == 3
    assert gpu.stats["device_vendor"] == "AMD"
    assert gpu.stats["device_name"] == "AMD Instinct MI300X VF"
    assert gpu.stats["core_count"] == 304
    # pid 0 is also "GPU 0" in the metadata, but Python functions there run on the host.
    cats = categories(table)
    python = cats == "python_function"
    assert python.sum() == 1389
    assert (table.plane[python] == 0).all()
    lines = {table.line_name[i] for i in np.unique(table.line[python]).tolist()}
    assert lines == {"thread 6240 (python3)", "thread 0 (python3)"}
    assert {table.line_name[i] for i in np.flatnonzero(table.line_plane == 1).tolist()} == \
        {"stream 0"}


def test_trimmed_trace_without_metadata_finds_gpu_from_events() -> None:
    path = fixture("TraceLens/tests/traces/b200/eager_trace.json.gz")
    table = ct.load_chrome_trace(path)
    assert [p.name for p in table.planes] == [schema.HOST_PLANE, "/device:GPU:0",
                                              schema.TASK_ENV_PLANE]
    cats = categories(table)
    gpu = table.plane == 1
    assert set(cats[gpu].tolist()) == {"kernel", "gpu_memcpy", "gpu_user_annotation", "flow"}
    # CUPTI overhead (pid -1) is host-side.
    assert (table.plane[cats == "overhead"] == 0).all()
    assert table.planes[1].stats["device_vendor"] == "Nvidia"
    assert table.planes[1].stats["core_count"] == 148


def test_legacy_2021_trace_is_read_with_todays_names() -> None:
    path = fixture("kineto/tb_plugin/samples/resnet50_num_workers_0/"
                   "worker0.1623143089861.pt.trace.json.gz")
    table = ct.load_chrome_trace(path)
    cats = collections.Counter(categories(table).tolist())
    assert cats["cpu_op"] == 23646 and cats["cuda_runtime"] == 11923
    assert cats["kernel"] == 8772 and cats["gpu_memset"] == 312 and cats["gpu_memcpy"] == 12
    assert cats["cpu_instant_event"] == 12838  # [memory] events, which had no category
    assert "flow:ac2g" in table.names and "flow:async" not in table.names
    # tid "25738" (ops) and 25738 (memory events) are one thread; "stream 7" is stream 7.
    host_lines = np.flatnonzero(table.line_plane == 0)
    assert 25738 in table.line_id[host_lines].tolist()
    assert table.line_id[table.line_plane == 1].tolist() == [7]
    assert table.line_name[int(np.flatnonzero(table.line_plane == 1)[0])] == "stream 7"
    kernel = int(np.flatnonzero(categories(table) == "kernel")[0])
    assert "External id" in side_stats(table, kernel)
    props = json.loads(table.planes[-1].stats[schema.ENV_DEVICE_PROPERTIES])
    assert props[0]["name"] == "Tesla V100-DGXS-32GB"
    steps = sorted(int(s) for s in table.typed[schema.STEP_NUM].tolist() if s != MISSING)
    assert steps == [5, 6, 7, 8, 9, 10]


def test_cpu_only_trace_has_no_gpu_plane() -> None:
    path = fixture("HolisticTraceAnalysis/tests/data/cpu_only/"
                   "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    table = ct.load_chrome_trace(path)
    assert [p.name for p in table.planes] == [schema.HOST_PLANE, schema.TASK_ENV_PLANE]
    env = table.planes[-1].stats
    assert env[schema.ENV_RANK] == 34 and env[schema.ENV_WORLD_SIZE] == 300


def test_counters_instants_and_other_phases(tmp_path: Path) -> None:
    # A real trace, with counter samples and a begin/end pair added (no fixture has them).
    source = fixture("HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz")
    doc = read_json(source)
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    t0 = min(e["ts"] for e in doc["traceEvents"] if "ts" in e)
    doc["traceEvents"] += [
        {"ph": "C", "name": "GPU Memory", "pid": pid, "ts": t0 + 1.0,
         "args": {"allocated": 1024, "reserved": 2048.5}},
        {"ph": "C", "name": "Utilization", "pid": pid, "ts": t0 + 2.0, "args": {"value": 0.5}},
        {"ph": "B", "name": "begin", "pid": pid, "tid": 1, "ts": t0},
        {"ph": "E", "pid": pid, "tid": 1, "ts": t0 + 3},
    ]
    path = tmp_path / "with_counters.pt.trace.json"
    path.write_text(json.dumps(doc))
    base = ct.load_chrome_trace(source)
    table = ct.load_chrome_trace(path)
    assert len(table) == len(base) + 3
    assert table.planes[-1].stats[ct.ENV_SKIPPED_EVENTS] == 2
    names = row_names(table)
    assert names[-3:].tolist() == ["GPU Memory allocated", "GPU Memory reserved", "Utilization"]
    values = [side_stats(table, r)[schema.VALUE] for r in range(len(table) - 3, len(table))]
    assert values == [1024, 2048.5, 0.5]
    assert set(categories(table)[-3:].tolist()) == {ct.COUNTER_CATEGORY}
    lines = {table.line_name[i] for i in table.line[-3:].tolist()}
    assert lines == {"GPU Memory allocated", "GPU Memory reserved", "Utilization"}
    assert (table.line_id[table.line[-3:]] < 0).all()
    # Instants are zero-length rows.
    instants = [i for i, e in enumerate(e for e in doc["traceEvents"]
                                        if e.get("ph") in ROW_PHASES) if e["ph"] == "i"]
    assert instants and (table.duration_ns[instants] == 0).all()


def test_empty_trace_is_an_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": []}))
    table = ct.load_chrome_trace(path)
    assert len(table) == 0
    assert [p.name for p in table.planes] == [schema.HOST_PLANE, schema.TASK_ENV_PLANE]
    assert len(table.line_id) == 0 and len(table.stats.event) == 0
    assert table.planes[-1].stats["schemaVersion"] == 1


def test_gzip_is_detected_by_its_bytes(tmp_path: Path) -> None:
    source = fixture("HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz")
    plain = tmp_path / "named_plain.json.gz"
    plain.write_bytes(gzip.decompress(source.read_bytes()))
    packed = tmp_path / "named_plain.json"
    packed.write_bytes(source.read_bytes())
    a, b, c = (ct.load_chrome_trace(p) for p in (source, plain, packed))
    assert a.start_ns.tolist() == b.start_ns.tolist() == c.start_ns.tolist()
    assert a.names == b.names == c.names


def test_is_chrome_trace_path() -> None:
    assert ct.is_chrome_trace_path("worker0.1623143089861.pt.trace.json.gz")
    assert ct.is_chrome_trace_path(Path("/x/trace.JSON"))
    assert not ct.is_chrome_trace_path("host.xplane.pb")
    assert not ct.is_chrome_trace_path("trace.json.zip")


# ------------------------------------------------------------------ bad files


def _problem(path: Path) -> str:
    with pytest.raises(ProfileFormatError) as info:
        ct.load_chrome_trace(path)
    message = str(info.value)
    assert str(path) in message
    assert message.endswith(".") and "\n" not in message
    return message


def test_truncated_gzip(tmp_path: Path) -> None:
    source = fixture("HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
                     "benchmark_result_2869224_1695835535_trace.json.gz")
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(source.read_bytes()[:5000])
    assert "truncated gzip" in _problem(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    data = bytearray(fixture("HolisticTraceAnalysis/tests/data/triton_example/"
                             "triton_example.json.gz").read_bytes())
    data[20:40] = b"\xff" * 20
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(data))
    assert "gzip" in _problem(path)


@pytest.mark.parametrize("cut", [2, 1000, 50_000, -3])
def test_truncated_json(tmp_path: Path, cut: int) -> None:
    text = gzip.decompress(fixture("HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
                                   "benchmark_result_2869224_1695835535_trace.json.gz")
                           .read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[:cut])
    assert "truncated JSON" in _problem(path)
    zipped = tmp_path / "cut.json.gz"
    zipped.write_bytes(gzip.compress(text[:cut]))
    assert "truncated JSON" in _problem(zipped)


def test_json_without_trace_events(tmp_path: Path) -> None:
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1, "dur": 1}]))
    assert "traceEvents" in _problem(listed)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schemaVersion": 1, "events": []}))
    assert "traceEvents" in _problem(other)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"traceEvents": {"ph": "X"}}))
    assert "traceEvents" in _problem(wrong)


def test_not_json(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert "empty file" in _problem(empty)
    path = tmp_path / "notes.json"
    path.write_text("this is not a trace\n")
    assert "not JSON" in _problem(path)
    binary = tmp_path / "host.json"
    binary.write_bytes(bytes(range(256)))
    _problem(binary)
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [}, "x": 1}')
    assert "invalid JSON" in _problem(broken)


def test_malformed_events(tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": [1, 2]}))
    _problem(path)
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": {"x": 1}}]}))
    assert "malformed" in _problem(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.json"
    with pytest.raises(ProfileFormatError, match="nowhere.json"):
        ct.load_chrome_trace(path)


# ------------------------------------------------------------------ traces made by torch


@pytest.fixture(scope="module")
def torch_traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    torch = pytest.importorskip("torch")
    from torch.profiler import (
        ProfilerActivity,
        profile,
        record_function,
        schedule,
        tensorboard_trace_handler,
    )

    out = tmp_path_factory.mktemp("torch_traces")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    data = torch.randn(32, 64)

    def train(prof: Any) -> None:
        for _ in range(4):  # one warm-up step, three recorded: ProfilerStep#1..#3
            with record_function("stepscope_block"):
                model(data).sum().backward()
            prof.step()

    # ProfilerStep#N markers are only written when the profiler has a schedule.
    def run(**kwargs: Any) -> Any:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=False,
                     schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                     **kwargs) as prof:
            train(prof)
        return prof

    paths = [out / "export.json", out / "export.json.gz"]
    for path in paths:  # a profile exports once
        run().export_chrome_trace(str(path))
    for use_gzip in (True, False):
        folder = out / f"tb_{use_gzip}"
        run(on_trace_ready=tensorboard_trace_handler(str(folder), worker_name="worker0",
                                                     use_gzip=use_gzip))
        made = sorted(folder.iterdir())
        assert len(made) == 1
        assert made[0].name.endswith(".pt.trace.json.gz" if use_gzip else ".pt.trace.json")
        paths.append(made[0])
    return paths


@pytest.mark.parametrize("which", range(4), ids=["export", "export_gz", "tb_gz", "tb_plain"])
def test_torch_trace(torch_traces: list[Path], which: int) -> None:
    path = torch_traces[which]
    assert ct.is_chrome_trace_path(path)
    doc = read_json(path)
    table = ct.load_chrome_trace(path)
    events = doc["traceEvents"]
    assert len(table) == sum(1 for e in events if e.get("ph") in ROW_PHASES)
    assert [p.name for p in table.planes] == [schema.HOST_PLANE, schema.TASK_ENV_PLANE]

    cats = categories(table)
    names = row_names(table)
    ops = cats == "cpu_op"
    want_ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert len(want_ops) > 50
    assert collections.Counter(names[ops].tolist()) == \
        collections.Counter(e["name"] for e in want_ops)
    assert {"aten::addmm", "aten::relu"} <= set(names[ops].tolist())
    per_name: dict[str, int] = collections.defaultdict(int)
    for row in np.flatnonzero(ops).tolist():
        per_name[names[row]] += int(table.duration_ns[row])
    for name in set(per_name):
        json_total = sum(micros_to_ns(e["dur"]) for e in want_ops if e["name"] == name)
        count = sum(1 for e in want_ops if e["name"] == name)
        assert abs(per_name[name] - json_total) <= count, name

    step = table.typed[schema.STEP_NUM]
    steps = {names[r]: int(step[r]) for r in np.flatnonzero(step != MISSING).tolist()}
    assert steps == {"ProfilerStep#1": 1, "ProfilerStep#2": 2, "ProfilerStep#3": 3}
    assert (names == "stepscope_block").sum() == 3
    assert set(cats[names == "stepscope_block"].tolist()) == {"user_annotation"}
    # Shapes recorded with record_shapes=True come through as JSON text.
    addmm = int(np.flatnonzero(names == "aten::addmm")[0])
    assert json.loads(side_stats(table, addmm)["Input Dims"])[1] == [32, 64]

    base = doc["baseTimeNanoseconds"]
    first = min(e["ts"] for e in events if e.get("ph") in ROW_PHASES)
    assert int(table.start_ns.min()) == base + micros_to_ns(first)
    assert table.hostnames == ([doc["host_name"]] if doc.get("host_name") else [])
    # The thread that ran the steps is named from the trace's thread_name metadata.
    main_line = int(table.line[ops][0])
    assert table.line_name[main_line].startswith("thread ")
