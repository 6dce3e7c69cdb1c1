"""Input pipelines: instrumentation (stepscope.data, DataLoader and its workers), the analyzer
and the bottleneck analysis, on pipelines built so that the answer is known.

Every profile here is recorded for real: Python pipelines in this process, PyTorch DataLoader
(with real worker processes) and tf.data under real TensorFlow in fresh interpreters.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope import data
from stepscope.analysis.run_model.input_bottleneck import normalize
from stepscope.analysis.tools.input_pipeline import input_pipeline
from stepscope.cli import main
from stepscope.formats.run_reader import load
from stepscope.run.loader import overview_dict

from workloads import run_script
from xprof_reference import xprof_tool

OPTIONS = stepscope.ProfilerOptions(counter_interval_ms=0)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _profile(logdir: Path, pipeline: Any, steps: int, compute_s: float) -> Path:
    """Profile ``steps`` steps, each reading one element of ``pipeline`` and computing."""
    it = iter(pipeline)
    with stepscope.Profile(logdir, options=OPTIONS) as prof:
        for i in range(steps):
            with stepscope.Trace("train", step_num=i, _r=1):
                next(it)
                with stepscope.Trace("compute"):
                    _busy(compute_s)
    assert prof.path is not None
    # A prefetch thread reads ahead until its stage is dropped; let it end here so that it
    # does not read (and record) inside the next test's session.
    del it
    gc.collect()
    for thread in threading.enumerate():
        if thread.name.startswith("stepscope-prefetch"):
            thread.join(timeout=10)
            assert not thread.is_alive()
    return prof.path.parent


def _slow(x: int) -> int:
    time.sleep(0.004)
    return x


def _cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["input", *args, "--json", "--no-cache"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.fixture(scope="module")
def slow_map_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pipe = data.instrument(range(1000)).map(_slow).batch(4)
    return _profile(tmp_path_factory.mktemp("slow_map"), pipe, steps=10, compute_s=0.002)


def test_slow_map_is_the_bottleneck_and_the_run_highly_input_bound(
        slow_map_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _cli_json(capsys, str(slow_map_run))
    assert result["input"]["verdict"] == "highly"
    assert result["input"]["percent"] > 50
    assert result["bottleneck"]["stage"] == "Iterator::Batch::Map"
    assert "num_parallel_calls" in result["bottleneck"]["recommendation"]
    assert result["bottleneck"]["critical_path"] == [
        "Iterator::Batch", "Iterator::Batch::Map", "Iterator::Batch::Map::Range"]
    ops = {r["name"]: r for r in result["ops"]}
    assert set(ops) == {"Iterator::Batch", "Iterator::Batch::Map", "Iterator::Batch::Map::Range"}
    assert ops["Iterator::Batch"]["count"] == 10
    assert ops["Iterator::Batch::Map"]["count"] == 40
    assert ops["Iterator::Batch::Map"]["self_ms"] >= 40 * 4.0
    assert ops["Iterator::Batch::Map::Range"]["category"] == "read_on_demand"
    assert ops["Iterator::Batch::Map"]["category"] == "preprocessing"
    assert result["ops"][0]["name"] == "Iterator::Batch::Map"  # sorted by self time
    breakdown = result["host_breakdown"]
    assert set(breakdown) == {"read_on_demand", "read_in_advance", "preprocessing", "enqueue",
                              "other"}
    assert breakdown["other"] == 0  # the recorded stages explain all of the input time
    assert breakdown["preprocessing"] == pytest.approx(
        sum(r["self_ms"] for r in result["ops"] if r["category"] == "preprocessing"))
    graph = {n["name"]: n for n in result["bottleneck"]["graph"]}
    assert graph["Iterator::Batch::Map"]["bottleneck"] and graph["Iterator::Batch::Map"]["critical"]
    assert graph["Iterator::Batch::Map"]["calls"] == 4
    assert graph["Iterator::Batch"]["parent"] is None
    assert graph["Iterator::Batch::Map::Range"]["parent"] == "Iterator::Batch::Map"
    steps = result["steps"]
    # 10 marked, all recorded whole by stepscope's capture: all kept (XProf's rule would
    # drop the first and the last; see docs/differences-from-xprof.md).
    assert steps["count"] == 10
    assert len(steps["per_step"]) == 10
    assert all(s["input_ms"] >= 16.0 for s in steps["per_step"])
    assert steps["input_min_ms"] <= steps["input_avg_ms"] <= steps["input_max_ms"]


def test_overview_and_analyzer_agree(slow_map_run: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    over = overview_dict(slow_map_run, use_cache=False)
    analysis = input_pipeline(load(str(slow_map_run), use_cache=False)).to_dict()
    assert analysis["input"] == over["input"]
    assert analysis["steps"]["avg_ms"] == over["steps"]["avg_ms"]
    assert [s["input_ms"] for s in analysis["steps"]["per_step"]] == [
        s["breakdown_ms"]["input"] for s in over["steps"]["per_step"]]
    assert main(["report", str(slow_map_run), "--json", "--no-cache"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["input"]["percent"] == analysis["input"]["percent"]


def test_csv_export_and_terminal_report(slow_map_run: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ops.csv"
    assert main(["input", str(slow_map_run), "--csv", str(out), "--no-cache"]) == 0
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert rows[0] == ["input_op", "count", "total_ms", "total_percent", "self_ms",
                       "self_percent", "category", "runs_apart"]
    assert {r[-1] for r in rows[1:]} == {"0"}  # a serial pipeline: nothing runs apart
    assert {r[0] for r in rows[1:]} == {"Iterator::Batch", "Iterator::Batch::Map",
                                        "Iterator::Batch::Map::Range"}
    capsys.readouterr()
    assert main(["input", str(slow_map_run), "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "HIGHLY input-bound" in text and "Bottleneck: Iterator::Batch::Map" in text
    assert main(["input", str(slow_map_run), "--host", "nope"]) == 2
    assert "No host 'nope'" in capsys.readouterr().err


def test_fast_pipeline_is_not_input_bound(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    pipe = data.instrument(range(10_000)).map(lambda x: x + 1).batch(4)
    run = _profile(tmp_path, pipe, steps=10, compute_s=0.01)
    result = _cli_json(capsys, str(run))
    assert result["input"]["verdict"] == "not"
    assert result["input"]["percent"] < 5
    assert result["bottleneck"]["stage"] is None
    # No stage named: either no call was slow, or the run is not input-bound anyway.
    assert "Look at the rest of the step" in result["bottleneck"]["recommendation"]
    assert {r["name"] for r in result["ops"]} == {
        "Iterator::Batch", "Iterator::Batch::Map", "Iterator::Batch::Map::Range"}


def test_prefetch_thread_runs_the_producers(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pipe = data.instrument(range(1000)).map(_slow).batch(4).prefetch(2)
    run = _profile(tmp_path, pipe, steps=8, compute_s=0.001)
    result = _cli_json(capsys, str(run))
    assert result["bottleneck"]["stage"] == "Iterator::Prefetch::Batch::Map"
    graph = {n["name"]: n for n in result["bottleneck"]["graph"]}
    assert graph["Iterator::Prefetch"]["asynchronous"]
    assert result["input"]["verdict"] == "highly"
    assert {r["name"]: r["category"] for r in result["ops"]}[
        "Iterator::Prefetch::Batch::Map::Range"] == "read_in_advance"
    table = next(iter(load(str(run), use_cache=False).hosts.values()))
    lines = {table.line_name[int(table.line[i])] for i in range(len(table))
             if table.names[int(table.name[i])] == "Iterator::Prefetch::Batch::Map"}
    assert len(lines) == 1 and next(iter(lines)).startswith("stepscope-prefetch")


def test_plain_generators_wrapping_stages_take_their_consumers_names(tmp_path: Path) -> None:
    def read() -> Any:
        yield from range(100)

    def decode(items: Any) -> Any:
        for x in items:
            yield x * 2

    pipe = data.instrument(decode(data.instrument(read(), "Read")), "Decode").batch(2)
    run = _profile(tmp_path, pipe, steps=3, compute_s=0.0)
    names = {r.name for r in input_pipeline(load(str(run), use_cache=False)).rows}
    assert names == {"Iterator::Batch", "Iterator::Batch::Decode",
                     "Iterator::Batch::Decode::Read"}


def test_stages_give_the_same_elements_with_and_without_a_session(tmp_path: Path) -> None:
    def build() -> data.Stage:
        return (data.instrument([3, 1, 4, 1, 5, 9, 2, 6]).filter(lambda x: x != 1)
                .map(lambda x: x * 10, num_parallel_calls=3).cache().repeat(2)
                .shuffle(1, seed=0).batch(3, drop_remainder=True).prefetch(1))
    plain = list(build())
    with stepscope.Profile(tmp_path, options=OPTIONS):
        recorded = list(build())
    assert plain == recorded == [[30, 40, 50], [90, 20, 60], [30, 40, 50], [90, 20, 60]]
    names = {r.name for r in input_pipeline(load(str(tmp_path), use_cache=False)).rows}
    assert "Iterator::Prefetch::Batch::Shuffle::Repeat::Cache::ParallelMap::Filter::FromList" \
        in names
    with pytest.raises(ValueError, match="batch_size"):
        data.instrument(range(3)).batch(0)


def test_normalize_tf_iterator_names() -> None:
    assert normalize("Iterator::Root::Prefetch::BatchV2::FiniteRepeat[0]::ParallelMapV2::Range") \
        == "Iterator::Prefetch::Batch::Repeat::ParallelMap::Range"
    assert normalize("Iterator::Root") is None
    assert normalize("IteratorGetNext") is None
    assert normalize("MakeIterator::RangeDataset") is None


TF_PIPELINE = """
import sys, time, tensorflow as tf
logdir, how = sys.argv[1], sys.argv[2]
opts = tf.data.Options()
opts.autotune.enabled = False
opts.experimental_optimization.map_parallelization = False
opts.experimental_optimization.inject_prefetch = False

def f(x):
    return tf.py_function(lambda v: (time.sleep(0.003), v * 2)[1], [x], tf.int64)

ds = tf.data.Dataset.range(10).map(f).repeat(2).batch(5).with_options(opts)
if how == "tf":
    tf.profiler.experimental.start(logdir)
else:
    import stepscope
    stepscope.start(logdir, stepscope.ProfilerOptions(counter_interval_ms=0))
it = iter(ds)
for i in range(4):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        next(it)
if how == "tf":
    tf.profiler.experimental.stop()
else:
    stepscope.stop()
"""


@pytest.mark.parametrize("how", ["tf", "stepscope"])
def test_tf_data_iterator_graph_has_the_long_names(tmp_path: Path, how: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_script(TF_PIPELINE, str(tmp_path), how)
    result = _cli_json(capsys, str(tmp_path))
    names = {r["name"] for r in result["ops"]}
    assert {"Iterator::Batch", "Iterator::Batch::Repeat", "Iterator::Batch::Repeat::Map",
            "Iterator::Batch::Repeat::Map::Range"} <= names
    assert {r["name"]: r["count"] for r in result["ops"]}["Iterator::Batch"] == 4
    graph = {n["name"]: n for n in result["bottleneck"]["graph"]}
    assert graph["Iterator::Batch::Repeat::Map::Range"]["parent"] == \
        "Iterator::Batch::Repeat::Map"
    assert result["bottleneck"]["stage"] == "Iterator::Batch::Repeat::Map"
    assert result["input"]["verdict"] == "highly"


DATALOADER = """
import sys, time, torch, stepscope
from torch.utils.data import DataLoader, Dataset, dataloader

class Slow(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((8,), float(i))

def main():
    logdir, workers = sys.argv[1], int(sys.argv[2])
    extra = {"multiprocessing_context": sys.argv[3]} if len(sys.argv) > 3 else {}
    loader = DataLoader(Slow(), batch_size=4, num_workers=workers, **extra)
    original = dataloader._BaseDataLoaderIter.__next__
    with stepscope.Profile(logdir, stepscope.ProfilerOptions(counter_interval_ms=0)):
        it = iter(loader)
        for i in range(10):
            with stepscope.Trace("train", step_num=i, _r=1):
                batch = next(it)
                assert batch.shape == (4, 8)
        del it
    assert dataloader._BaseDataLoaderIter.__next__ is original, "not restored at stop"
    assert sum(1 for _ in loader) == 100  # still a plain DataLoader after the session

if __name__ == "__main__":
    main()
"""


def _run_loader(tmp_path: Path, *args: str) -> None:
    """Run DATALOADER as a script file (spawned workers import its main module)."""
    script = tmp_path / "loader.py"
    script.write_text(DATALOADER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "logs"), *args],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def _worker_lines(run: Path) -> dict[str, int]:
    table = next(iter(load(str(run), use_cache=False).hosts.values()))
    counts: dict[str, int] = {}
    for i in range(len(table)):
        if table.names[int(table.name[i])].startswith("Iterator::DataLoader::"):
            line = table.line_name[int(table.line[i])]
            counts[line] = counts.get(line, 0) + 1
    return counts


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_slow_dataset_is_the_bottleneck(tmp_path: Path, workers: int,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _run_loader(tmp_path, str(workers))
    result = _cli_json(capsys, str(tmp_path / "logs"))
    assert result["input"]["verdict"] == "highly"
    assert result["bottleneck"]["stage"] == "Iterator::DataLoader::Batch::Map"
    assert "num_workers" in result["bottleneck"]["recommendation"]
    ops = {r["name"]: r for r in result["ops"]}
    assert ops["Iterator::DataLoader"]["count"] == 10
    assert ops["Iterator::DataLoader::Batch::Map"]["self_ms"] >= 4 * 10 * 4.0
    lines = _worker_lines(tmp_path / "logs")
    if workers:
        assert set(lines) == {"DataLoader worker 0", "DataLoader worker 1"}
        assert "(now 2)" in result["bottleneck"]["recommendation"]
        assert {n["name"]: n for n in result["bottleneck"]["graph"]}[
            "Iterator::DataLoader"]["asynchronous"]
    else:
        assert set(lines) == {"MainThread"}


def test_dataloader_spawned_workers_send_their_stage_times(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run_loader(tmp_path, "2", "spawn")
    lines = _worker_lines(tmp_path / "logs")
    assert set(lines) == {"DataLoader worker 0", "DataLoader worker 1"}
    result = _cli_json(capsys, str(tmp_path / "logs"))
    assert {r["name"] for r in result["ops"]} == {
        "Iterator::DataLoader", "Iterator::DataLoader::Batch", "Iterator::DataLoader::Batch::Map"}


SCHEDULED_LOADER = """
import sys, time, torch, stepscope, stepscope.torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((8,), float(i))

def main():
    logdir, early = sys.argv[1], sys.argv[2] == "early"
    loader = DataLoader(Slow(), batch_size=4, num_workers=2)
    it = iter(loader) if early else None  # workers started before stepscope.torch.profile
    with stepscope.torch.profile(logdir, options=stepscope.ProfilerOptions(
            counter_interval_ms=0), schedule=stepscope.torch.schedule(
            wait=1, warmup=1, active=3, repeat=1)) as prof:
        for i, batch in enumerate(it if early else loader):  # the README's pattern
            assert batch.shape == (4, 8)
            time.sleep(0.03)  # the step's compute: workers fetch (16 ms a batch) meanwhile
            prof.step()
            if i == 6:
                break
    print(prof.paths[0])

if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("early", [False, True])
def test_scheduled_torch_profile_records_dataloader_workers(
        tmp_path: Path, early: bool, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 30: with schedule(wait=1, ...) and `for batch in loader`, the workers start in
    # the waited step, before any session: they are hooked all the same; an iterator made
    # before stepscope.torch.profile cannot be, and the analysis says so.
    script = tmp_path / "scheduled.py"
    script.write_text(SCHEDULED_LOADER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "logs"),
                           "early" if early else "inside"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run = Path(done.stdout.strip().splitlines()[-1])
    lines = _worker_lines(run)
    result = _cli_json(capsys, str(run))
    text = result["bottleneck"]["recommendation"]
    if early:
        assert not any(n.startswith("DataLoader worker") for n in lines)
        assert "NOT in this profile" in text and "2 worker processes" in text
    else:
        assert {"DataLoader worker 0", "DataLoader worker 1"} <= set(lines), lines
        # Batches fetched while the three recorded steps ran, item reads included.
        assert sum(v for k, v in lines.items() if k.startswith("DataLoader worker")) >= 5
        assert "NOT in this profile" not in text
        # The workers' time ran in other processes: not the training process's ops, nor
        # its step's host compute (issue 30).
        from stepscope.analysis.run_model import build_run_model

        model = build_run_model(load(str(run), use_cache=False))
        ops = {r.name for r in model.op_stats().rows}
        assert "Iterator::DataLoader" in ops
        assert not {"Iterator::DataLoader::Batch", "Iterator::DataLoader::Batch::Map"} & ops
        breakdown = model.overview_dict()["breakdown"]
        assert breakdown["host_compute"] < 20.0, breakdown
        # The input-op table says which stages ran apart from their consumer: the workers'
        # batches, whose total may exceed the consumer's (issue 30).
        apart = {r["name"]: r["runs_apart"] for r in result["ops"]}
        assert apart["Iterator::DataLoader::Batch"] and not apart["Iterator::DataLoader"]


# Two pipelines of one program: a slow one (a sleeping map over a range) and a fast one
# reading a TFRecord file; map and batch fuse into MapAndBatch in both. TF 2.21's profiler
# can hang at stop while a pipeline still has work in flight (seen with prefetch and with
# endless repeats), so both are synchronous and finite, and the iterators go before stop.
TWO_PIPELINES = """
import os, sys, time, tensorflow as tf

logdir = sys.argv[1]
records = os.path.join(logdir, "data.tfrecord")
os.makedirs(logdir, exist_ok=True)
with tf.io.TFRecordWriter(records) as w:
    for i in range(200):
        w.write(tf.io.serialize_tensor(tf.fill([256], float(i))).numpy())
opts = tf.data.Options()
opts.autotune.enabled = False
opts.experimental_optimization.map_parallelization = False
opts.experimental_optimization.inject_prefetch = False

def slow(x):
    return tf.py_function(lambda v: (time.sleep(0.003), v * 2)[1], [x], tf.int64)

a = tf.data.Dataset.range(100).map(slow).batch(5).with_options(opts)
b = (tf.data.TFRecordDataset(records).map(lambda s: tf.io.parse_tensor(s, tf.float32))
     .batch(5).with_options(opts))
ia, ib = iter(a), iter(b)
next(ia), next(ib)
tf.profiler.experimental.start(logdir)
for i in range(6):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        next(ia), next(ib)
del ia, ib
tf.profiler.experimental.stop()
"""


def xprof_input(path: Path) -> tuple[dict[str, float], dict[str, int]]:
    """XProf's host-side input breakdown (ms, our category names) and its input-op counts."""
    for table in xprof_tool(path, "input_pipeline_analyzer"):
        props = table.get("p", {})
        if "enqueue_us" in props:
            ours = {"read_on_demand": "demanded_file_read_us",
                    "read_in_advance": "advanced_file_read_us",
                    "preprocessing": "preprocessing_us", "enqueue": "enqueue_us",
                    "other": "unclassified_nonequeue_us"}
            counts = {row["c"][0]["v"]: int(row["c"][1]["v"]) for row in table["rows"]}
            return {k: float(props[v]) / 1e3 for k, v in ours.items()}, counts
    raise AssertionError("XProf gave no host-side input analysis")


@pytest.fixture(scope="module")
def two_pipelines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("two_pipelines")
    run_script(TWO_PIPELINES, str(logdir))
    return next(logdir.glob("plugins/profile/*/*.xplane.pb"))


def test_every_pipeline_has_its_slowest_run_and_bottleneck(
        two_pipelines: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _cli_json(capsys, str(two_pipelines.parent))
    pipes = result["pipelines"]
    # Both pipelines have the same shape (MapAndBatch over a source): TF's iterator ids
    # tell them apart; XProf's op table counts their output stage's calls together.
    assert sorted(p["name"] for p in pipes) == ["Host:0", "Host:1"], pipes
    assert {p["host"] for p in pipes} == {result["host"] or pipes[0]["host"]}
    # Listed slowest run first. They are named by first call, which TF's threads may order
    # either way on a loaded machine: the slow one is the one reading the sleeping Range.
    assert pipes[0]["bottleneck"]["run_ms"] >= pipes[1]["bottleneck"]["run_ms"]

    def reads_range(p: dict[str, Any]) -> bool:
        return "Iterator::MapAndBatch::Range" in {n["name"] for n in p["bottleneck"]["graph"]}

    assert sum(reads_range(p) for p in pipes) == 1
    slow = next(p for p in pipes if reads_range(p))
    fast = next(p for p in pipes if not reads_range(p))
    assert slow["root"] == fast["root"] == "Iterator::MapAndBatch"
    assert slow["calls"] == fast["calls"] == 6
    _, counts = xprof_input(two_pipelines)
    assert counts["Iterator::Root::MapAndBatch"] == slow["calls"] + fast["calls"]
    # The slow pipeline sleeps 5 × 3 ms a batch; the fast one reads records from a file.
    assert slow["bottleneck"]["run_ms"] >= 15
    assert slow["bottleneck"]["run_ms"] > fast["bottleneck"]["run_ms"]
    assert slow["bottleneck"]["stage"] == "Iterator::MapAndBatch"
    assert slow["bottleneck"]["stage_ms"] >= 14
    graph = {n["name"] for n in fast["bottleneck"]["graph"]}
    assert "Iterator::MapAndBatch::FlatMap::TFRecord" in graph
    assert "Iterator::MapAndBatch::Range" not in graph
    # The run's bottleneck is the slowest pipeline's.
    assert result["bottleneck"]["pipeline"] == slow["name"]
    assert result["bottleneck"]["stage"] == slow["bottleneck"]["stage"]
    assert main(["input", str(two_pipelines.parent), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "Input pipelines" in out and fast["name"] in out
    assert f"slowest run of pipeline {slow['name']}" in out


# Pipelines whose stages TensorFlow runs on threads of its own (parallel interleave, parallel
# map, prefetch) beside synchronous ones, over TFRecord and text files, a cache and a range:
# every case of XProf's file-read rule, whichever threads a run's calls happen to fall on.
READERS = """
import os, sys, tensorflow as tf

logdir = sys.argv[1]
os.makedirs(logdir, exist_ok=True)
files = [os.path.join(logdir, f"data{k}.tfrecord") for k in range(2)]
for f in files:
    with tf.io.TFRecordWriter(f) as w:
        for i in range(300):
            w.write(tf.io.serialize_tensor(tf.fill([256], float(i))).numpy())
lines = os.path.join(logdir, "lines.txt")
with open(lines, "w") as f:
    f.writelines(f"{i},{i * 2}\\n" for i in range(2000))
opts = tf.data.Options()
opts.autotune.enabled = False
opts.experimental_optimization.map_parallelization = False
opts.experimental_optimization.inject_prefetch = False
parse = lambda s: tf.io.parse_tensor(s, tf.float32)
names = tf.data.Dataset.from_tensor_slices(files)
pipes = [
    # interleave over files in parallel, a parallel map, prefetch: all reads in advance
    names.interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
    .map(parse, num_parallel_calls=2).batch(5).prefetch(2),
    # a parallel interleave alone (XProf: on demand) and a plain interleave (in advance)
    names.interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
    .map(parse).batch(5),
    names.interleave(tf.data.TFRecordDataset, cycle_length=2).map(parse).batch(5),
    # a parallel map over a reader (in advance); a plain one (on demand); a cache's writer
    tf.data.TFRecordDataset(files[0]).map(parse, num_parallel_calls=2).batch(5),
    tf.data.TextLineDataset(lines).map(lambda s: tf.strings.split(s, ",")).batch(20),
    tf.data.TFRecordDataset(files[1]).cache().map(parse).batch(5),
    tf.data.Dataset.range(10_000).map(lambda x: x * 2).batch(5),
]
unfused = tf.data.Options()
unfused.experimental_optimization.map_and_batch_fusion = False
pipes[3] = pipes[3].with_options(unfused)  # keeps its ParallelMap stage
its = [iter(p.with_options(opts)) for p in pipes]
for it in its:
    next(it)
tf.profiler.experimental.start(logdir)
for i in range(5):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        for it in its:
            next(it)
del its
tf.profiler.experimental.stop()
"""

XPROF_CATEGORIES = {"Demanded file read": "read_on_demand",
                    "Advanced file read": "read_in_advance",
                    "Preprocessing": "preprocessing", "Enqueue": "enqueue"}


@pytest.fixture(scope="module")
def readers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("readers")
    run_script(READERS, str(logdir))
    return next(logdir.glob("plugins/profile/*/*.xplane.pb"))


def xprof_op_categories(path: Path) -> dict[str, str]:
    """XProf's category of each input op (our stage names, our category names)."""
    for table in xprof_tool(path, "input_pipeline_analyzer"):
        if "enqueue_us" in table.get("p", {}):
            out: dict[str, str] = {}
            for row in table["rows"]:
                name, category = row["c"][0]["v"], row["c"][6]["v"]
                # tf.data's Root wrapper is no stage, but an input op of XProf's and ours.
                stage = name if name == "Iterator::Root" else normalize(name)
                if stage is None:
                    continue
                # Stages TF numbers apart ([0], [1]) are one stage here: one category.
                assert out.setdefault(stage, XPROF_CATEGORIES[category]) == \
                    XPROF_CATEGORIES[category], (name, category)
            return out
    raise AssertionError("XProf gave no host-side input analysis")


@pytest.mark.parametrize("recording", ["two_pipelines", "readers"])
def test_every_input_op_has_xprofs_category(recording: str, request: pytest.FixtureRequest,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The category of a stage depends on its name alone, as XProf's: never on which threads
    a run's calls fell on (a TFRecord under a MapAndBatch was once "in advance" in one run)."""
    path: Path = request.getfixturevalue(recording)
    result = _cli_json(capsys, str(path.parent))
    ours = {r["name"]: r["category"] for r in result["ops"]}
    theirs = xprof_op_categories(path)
    assert set(ours) == set(theirs)
    assert ours == theirs
    breakdown, _ = xprof_input(path)
    total = sum(breakdown.values())
    # Self time as XProf's (an asynchronous stage's wait for its producers is its own), so
    # every category is XProf's to the rounding, however long a busy machine made that wait.
    for cat in ("read_on_demand", "read_in_advance", "preprocessing"):
        assert result["host_breakdown"][cat] == pytest.approx(
            breakdown[cat], abs=0.001 * total + 1e-3), (cat, result["host_breakdown"], breakdown)
    if recording == "readers":
        assert set(theirs.values()) == {"read_on_demand", "read_in_advance", "preprocessing"}
        # Each rule of XProf's is exercised: a reader under a plain and a parallel
        # interleave, a parallel map, prefetch, a cache, and a range source.
        assert theirs["Iterator::MapAndBatch::Interleave::FlatMap::TFRecord"] == "read_in_advance"
        assert theirs["Iterator::MapAndBatch::ParallelInterleave::FlatMap::TFRecord"] == \
            "read_on_demand"
        assert theirs["Iterator::Batch::ParallelMap::FlatMap::TFRecord"] == "read_in_advance"
        assert theirs["Iterator::Prefetch::MapAndBatch::ParallelInterleave::FlatMap::TFRecord"] \
            == "read_in_advance"
        assert theirs["Iterator::MapAndBatch::FlatMap::TextLine"] == "read_on_demand"
        assert theirs["Iterator::MapAndBatch::Range"] == "preprocessing"
        assert any("MemoryCache" in n and n.endswith("::TFRecord") for n in theirs)


def test_host_side_categories_match_xprof(two_pipelines: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    result = _cli_json(capsys, str(two_pipelines.parent))
    theirs, _ = xprof_input(two_pipelines)
    ours = result["host_breakdown"]
    assert set(ours) == set(theirs) and len(ours) == 5
    assert result["host_breakdown_labels"]["other"] == "Other data reading or processing"
    assert theirs["read_on_demand"] > 0 and theirs["preprocessing"] > 0
    total = sum(theirs.values())
    for cat, ms in theirs.items():
        assert ours[cat] == pytest.approx(ms, abs=0.001 * total + 1e-3), (cat, ours, theirs)


def test_input_wait_without_recorded_stages_is_other_reading(tmp_path: Path) -> None:
    """A PyTorch loop whose DataLoader no stage records: its input time is all 'other'."""
    from workloads import TORCH_LOOP

    trace = tmp_path / "trace.json"
    run_script(TORCH_LOOP, str(trace), "4")
    result = input_pipeline(load(trace, use_cache=False)).to_dict()
    waited = sum(s["input_ms"] for s in result["steps"]["per_step"])
    assert waited > 0 and not result["ops"] and not result["pipelines"]
    assert result["host_breakdown"]["other"] == pytest.approx(waited, rel=1e-3)
    assert result["host_breakdown_percent"]["other"] == pytest.approx(100.0)


def test_a_stages_typical_call_is_its_lower_quartile_and_an_async_stages_is_its_mean() -> None:
    # A serial map of five calls of 5-6 µs, two of which were preempted for ms, reading a source;
    # a parallel map whose three calls wait 30 µs each on a producer that took 60 µs in all.
    from stepscope.analysis.run_model.input_bottleneck import (
        IteratorEvents,
        node_totals,
        per_call_ns,
        work_ns,
    )
    nodes = ["Iterator::Map", "Iterator::Map::Range", "Iterator::ParallelMap",
             "Iterator::ParallelMap::Range"]
    node = np.array([0] * 5 + [1] * 4 + [2] * 3 + [3] * 3, np.int64)
    own = np.array([6_000, 4_000_000, 5_000, 9_000_000, 5_500] + [1_000] * 4 + [30_000] * 3
                   + [20_000] * 3, np.int64)
    start = np.arange(len(node), dtype=np.int64) * 10_000_000
    ev = IteratorEvents(nodes, np.arange(len(node), dtype=np.int64), node,
                        np.where(node == 3, 1, 0).astype(np.int64), start, start + own, own)
    totals = node_totals(ev)
    asynchronous = {"Iterator::ParallelMap"}
    work = work_ns(nodes, totals, asynchronous)
    typical = per_call_ns(ev, totals, work, asynchronous).tolist()
    assert typical[0] == 5_500  # the lower quartile: not the mean (2.6 ms), nor the median
    assert typical[1] == 1_000
    assert typical[2] == (90_000 - 60_000) // 3  # its wait less its producer's time, a call
    assert typical[3] == 20_000
    empty = IteratorEvents(nodes, *(np.zeros(0, np.int64) for _ in range(6)))
    assert per_call_ns(empty, node_totals(empty), work_ns(nodes, node_totals(empty), set()),
                       set()).tolist() == [0, 0, 0, 0]
