"""The run model and the pod viewer: real multi-rank traces, a multi-worker capture with one
slow worker, the collectives category, and the cached run model answering every tool."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope.analysis import op_stats, overview
from stepscope.analysis.run_model import (
    RUN_MODEL_NAME,
    RUN_MODEL_VERSION,
    RunModel,
    build_run_model,
)
from stepscope.analysis.run_model.kernel_stats import kernel_stats
from stepscope.analysis.tools.input_pipeline import input_pipeline, input_pipeline_of
from stepscope.analysis.tools.run_to_pod_viewer import pod_viewer, pod_viewer_csv
from stepscope.cli import main
from stepscope.errors import StepscopeError
from stepscope.formats.run_reader import load
from stepscope.model import cache
from stepscope.run.loader import open_run_model, pod_dict

from conftest import FIXTURES
from xprof_reference import xprof_tool

DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
HTA_NCCL = FIXTURES / "HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz"
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
TF_GPU = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker"
RESNET_RCCL = FIXTURES / "TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz"
# A fresh, enabled cache directory for every test (conftest's cache_home).
pytestmark = pytest.mark.usefixtures("cache_home")


KEYS = ("total_ms", "compute_ms", "input_ms", "collectives_ms", "copy_ms", "other_ms")


def test_eight_dlrm_ranks_line_up_by_step_and_name_a_straggler() -> None:
    model = open_run_model(DLRM, use_cache=False)
    data = pod_viewer(model).to_dict()
    assert data["kind"] == "hosts" and len(data["hosts"]) == 8
    assert all(h.startswith(f"worker{i}_") for i, h in enumerate(data["hosts"]))
    ov = model.overview().to_dict()
    for step in data["steps"]:
        assert set(step["per_host"]) == set(data["hosts"])  # every rank has every step
        for host, figures in step["per_host"].items():
            assert set(KEYS) <= set(figures)
            parts = sum(figures[k] for k in KEYS[1:])
            assert parts == pytest.approx(figures["total_ms"], abs=1e-6)
            # A host's column is its own step time, as its overview measures it.
            per_step = {s["step_num"]: s["ms"] for s in ov["hosts"][host]["steps"]["per_step"]}
            assert figures["total_ms"] == pytest.approx(per_step[step["step_num"]], abs=1e-6)
        # NCCL ranks spend real time in collectives; the straggler waits least.
        assert all(f["collectives_ms"] > 0 for f in step["per_host"].values())
        straggler = step["straggler"]
        assert step["per_host"][straggler]["wait_ms"] == 0
        work = {h: f["total_ms"] - f["collectives_ms"] for h, f in step["per_host"].items()}
        assert straggler == max(work, key=lambda h: work[h])
        ranked = sorted(work.values())
        assert step["straggler_lead_ms"] == pytest.approx(ranked[-1] - ranked[-2], abs=1e-6)
    assert sum(data["stragglers"].values()) == len(data["steps"])
    # Ranks leave a collective together: the shifts that line them up are tiny and measured.
    assert data["alignment"][data["hosts"][0]]["method"] == "reference"
    for host in data["hosts"][1:]:
        assert data["alignment"][host]["method"] == "collective_end"
        assert abs(data["alignment"][host]["shift_ns"]) < 1_000_000


def test_collectives_are_their_own_overview_category() -> None:
    for path in (HTA_NCCL, RESNET_RCCL):
        summary = overview(load(path, use_cache=False)).to_dict()
        assert summary["breakdown"]["device_collectives"] > 0, path.name
        assert sum(summary["breakdown"].values()) == pytest.approx(100.0)
    # No collective in a single-GPU inference trace.
    single = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    assert overview(load(single, use_cache=False)).to_dict()["breakdown"][
        "device_collectives"] == 0


def test_one_host_with_several_devices_gets_a_column_per_device() -> None:
    data = pod_viewer(open_run_model(TPU, use_cache=False)).to_dict()
    assert data["kind"] == "devices"
    assert data["hosts"] == [f"tpu_inference_2/TPU:{i}" for i in range(4)]
    assert data["alignment"]["tpu_inference_2"]["method"] == "same_host"
    step = data["steps"][1]
    totals = {f["total_ms"] for f in step["per_host"].values()}
    assert len(totals) == 1  # the devices share the host's step
    assert sum(data["stragglers"].values()) == len(data["steps"])


def test_one_host_one_device_says_there_is_nothing_to_compare(capsys: Any) -> None:
    data = pod_viewer(open_run_model(TF_GPU, use_cache=False)).to_dict()
    assert len(data["hosts"]) == 1 and "one host" in data["summary"]
    assert all(s["straggler"] is None for s in data["steps"])
    assert main(["pod", str(TF_GPU), "--no-cache"]) == 0
    assert "one host" in capsys.readouterr().out


@pytest.mark.parametrize("path", [DLRM, TPU, TF_GPU, HTA_NCCL, RESNET_RCCL], ids=lambda p: p.name)
def test_run_model_round_trips_and_answers_every_tool_as_the_tables_do(path: Path) -> None:
    profile = load(path, use_cache=False)
    model = RunModel.from_dict(json.loads(json.dumps(build_run_model(profile).to_dict())))
    assert model.overview().to_dict() == overview(profile).to_dict()
    assert model.overview_dict() == overview(profile).to_dict()
    assert pod_dict(model) == pod_viewer(model).to_dict()
    for host in [None, *profile.hosts]:
        for idle in (False, True):
            assert model.op_stats(host, include_idle=idle).to_dict() == \
                op_stats(profile, host=host, include_idle=idle).to_dict()
        assert model.kernel_stats(host).to_dict() == kernel_stats(profile, host).to_dict()
        assert input_pipeline_of(model, host).to_dict() == \
            input_pipeline(profile, host).to_dict()
    assert pod_viewer(model).to_dict() == pod_viewer(build_run_model(profile)).to_dict()


def test_cached_run_model_is_used_and_a_damaged_one_is_rebuilt(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for f in sorted(DLRM.iterdir())[:3]:
        (run / f.name).write_bytes(f.read_bytes())
    first = open_run_model(run).to_dict()
    (entry,) = (tmp_path / "cache").glob(f"*.{RUN_MODEL_NAME}.cache")
    assert open_run_model(run).to_dict() == first
    # A well-formed entry of the wrong shape is a miss, never a wrong answer.
    files = sorted(run.iterdir())
    wrong = {"version": RUN_MODEL_VERSION, "host_names": ["x"], "combined": []}
    cache.save_arrays(files, RUN_MODEL_NAME, wrong, {"host.0": np.zeros(3, np.uint8)})
    assert open_run_model(run).to_dict() == first
    # So is an entry with one byte changed (its checksum no longer matches).
    damaged_bytes = bytearray(entry.read_bytes())
    damaged_bytes[-200] ^= 0x02
    entry.write_bytes(bytes(damaged_bytes))
    assert open_run_model(run).to_dict() == first
    # The hosts' parts are raw arrays beside a small header of combined results.
    header, arrays = cache.load_arrays(files, RUN_MODEL_NAME)  # type: ignore[misc]
    assert "hosts" not in header and len(arrays) == len(header["host_names"]) == 3
    # A damaged host part, found only when that host is asked for: one clear error.
    data = open_run_model(run).to_dict()
    host = next(iter(data["hosts"]))
    data["hosts"][host] = data["hosts"][host][: len(data["hosts"][host]) // 2]
    damaged = RunModel.from_dict(data)
    with pytest.raises(StepscopeError, match="cached run model of host .* is damaged"):
        damaged.op_stats(host)


def test_pod_command_json_csv_and_host(tmp_path: Path, capsys: Any) -> None:
    assert main(["pod", str(DLRM), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("hosts", "steps", "stragglers", "alignment", "summary", "totals"):
        assert key in data
    out = tmp_path / "pod.csv"
    assert main(["pod", str(DLRM), "--csv", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("step_num,host,total_ms")
    assert len(lines) == 1 + sum(len(s["per_host"]) for s in data["steps"])
    assert main(["pod", str(DLRM), "--json", "--host", data["hosts"][2]]) == 0
    one = json.loads(capsys.readouterr().out)
    assert all(list(s["per_host"]) == [data["hosts"][2]] for s in one["steps"])
    assert one["stragglers"] == data["stragglers"]
    assert main(["pod", str(DLRM), "--host", "nope"]) == 2
    assert "No host 'nope'" in capsys.readouterr().err
    assert main(["report", str(DLRM)]) == 0
    text = capsys.readouterr().out
    assert "was the straggler in" in text and "Clock alignment" in text
    assert pod_viewer_csv(pod_viewer(open_run_model(DLRM)).to_dict()) == out.read_text()


# A worker in lockstep with the others, as synchronous data-parallel training is: step k runs
# in the k-th 100 ms period of the clock, does its work (argv[2] times a unit), then waits for
# the next period as it would wait in an all-reduce.
LOCKSTEP_WORKER = """
import sys, time
import stepscope
bound = stepscope.server.start(0)
print("ready", bound, flush=True)
units = int(sys.argv[1])
while True:
    step = int(time.time() / 0.1)
    with stepscope.Trace("train", step_num=step, _r=1):
        for _ in range(units):
            sum(i * i for i in range(20000))
    while int(time.time() / 0.1) == step:
        time.sleep(0.002)
"""


@pytest.fixture
def workers() -> Iterator[list[tuple[subprocess.Popen[str], int]]]:
    procs: list[tuple[subprocess.Popen[str], int]] = []
    for units in (2, 6, 2):  # the second worker does three times the work: the straggler
        p = subprocess.Popen([sys.executable, "-c", LOCKSTEP_WORKER, str(units)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith("ready"):
            p.kill()
            pytest.fail(f"worker did not start: {line}{p.stdout.read()}")
        procs.append((p, int(line.split()[1])))
    yield procs
    for p, _ in procs:
        p.kill()
        p.wait(timeout=60)
        if p.stdout is not None:
            p.stdout.close()


def test_multi_worker_capture_names_the_slow_worker(
        workers: list[tuple[subprocess.Popen[str], int]], tmp_path: Path, capsys: Any) -> None:
    addresses = ",".join(f"grpc://127.0.0.1:{port}" for _, port in workers)
    result = stepscope.client.trace(addresses, tmp_path / "logs", 2500)
    assert not result.failed
    data = pod_viewer(open_run_model(result.run_dir, use_cache=False)).to_dict()
    slow = f"127.0.0.1_{workers[1][1]}"
    assert data["hosts"] == sorted(f"127.0.0.1_{port}" for _, port in workers)
    judged = [s for s in data["steps"] if s["straggler"] is not None]
    assert len(judged) >= 5
    assert data["stragglers"][slow] == max(data["stragglers"].values())
    assert data["stragglers"][slow] >= 0.6 * len(judged)
    assert data["summary"].startswith(f"{slow} was the straggler")
    # Same machine, captures asked at once: the clocks are taken as recorded.
    assert {a["method"] for h, a in data["alignment"].items() if h != data["hosts"][0]} == {
        "recorded"}
    # The slow worker's steps take longer than the others', step by step.
    ratios = [s["per_host"][slow]["total_ms"] / np.median(
        [f["total_ms"] for h, f in s["per_host"].items() if h != slow])
        for s in judged if len(s["per_host"]) == 3]
    assert np.median(ratios) > 1.5
    assert main(["report", str(result.run_dir)]) == 0
    assert f"{slow} was the straggler" in capsys.readouterr().out


def test_pod_viewer_survives_hostile_runs(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0f")  # truncated
    good = next(TF_GPU.glob("*.xplane.pb"))
    (run / good.name).write_bytes(good.read_bytes())
    assert main(["pod", str(run), "--json", "--no-cache"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert list(data["failed_hosts"]) == ["a"] and "could not be read" in captured.err
    assert len(data["hosts"]) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["pod", str(empty)]) == 2
    assert "holds no profiles" in capsys.readouterr().err


def test_steps_match_xprof_pod_viewer_on_a_multi_host_xspace_run(tmp_path: Path) -> None:
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    source = next(TF_GPU.glob("*.xplane.pb"))
    for i in range(3):
        (tmp_path / f"worker{i}.xplane.pb").write_bytes(source.read_bytes())
    theirs = xprof_tool(sorted(tmp_path.glob("*.xplane.pb")), "pod_viewer", tmp_path / "x")
    their_steps = sorted({int(s["stepNum"]) for s in theirs["podStatsSequence"]["podStatsMap"]})
    ours = pod_viewer(open_run_model(tmp_path, use_cache=False)).to_dict()
    assert [s["step_num"] for s in ours["steps"]] == their_steps
    assert ours["hosts"] == ["worker0", "worker1", "worker2"]
    # Identical hosts: every one does the same work, so no step has a lead over the next.
    assert all(s["straggler_lead_ms"] == 0 for s in ours["steps"])
