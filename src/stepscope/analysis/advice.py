"""Best-practice advice: the TensorFlow Profiler guides' "what to do about it", as rules over
the run model's results.

Each rule fires only when the profile shows the problem, says what to do, cites the numbers
that made it fire (``evidence``) and names the tool that shows them (``tool``, one of the
web UI's tool names). Rules read results only (overview, input pipeline and its bottleneck,
kernel stats, op stats, step spans); none reads events.

Thresholds are the guides' where they publish one (input-bound at 5 %, kernel launch and
"all others" as in the overview); the others are set so that a rule fires where the time
at stake is worth a change (at least ``WORTH`` percent of step time or of device time).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscope.analysis.framework_op_stats import DEVICE, HOST, OpStats
from stepscope.analysis.input_bottleneck import PREFIX, SEP, kind_of
from stepscope.analysis.kernel_stats import KernelStats
from stepscope.analysis.run_model import HostInput, RunModel

WORTH = 5.0  # percent: below this, a fix is not worth the reader's time
MAX_PROFILED_STEPS = 10  # the guides: profile a few steps (10 or fewer)
GAP_SHARE = 10.0  # percent of the step time that the host spends between steps
WARMUP_RATIO = 2.0  # the first step this many times the median one: warm-up was profiled
SMALL_KERNEL_US = 10.0
MANY_SMALL_KERNELS = 50.0  # percent of kernel launches that are small
GPU_IDLE = 30.0  # percent of the step when a device is present and not computing
SMALL_MAP_US = 50.0  # per element: a map this cheap is dominated by its per-call overhead

_PY_FUNC = re.compile(r"(?i)^(Eager)?PyFunc(Stateless)?$|py_function|numpy_function")
_GENERATOR = re.compile(r"(?i)generator")
_FILE_READ = re.compile(r"TFRecord|TextLine|FixedLengthRecord|FileDataset|SSTable|Parquet")
_SINGLE_PROCESS = re.compile(r"_SingleProcessDataLoaderIter")
_PAGEABLE = re.compile(r"(?i)pageable")
_TO_DEVICE = re.compile(r"HtoD|H2D|Host ?-> ?Device|MemcpyH2D")
_LAYOUT = re.compile(r"(?i)nchw.?to.?nhwc|nhwc.?to.?nchw|convert.?layout|transpose")


@dataclass
class Recommendation:
    """One piece of advice: which rule, what to do, the numbers behind it, where to look."""

    rule: str
    text: str
    evidence: dict[str, Any]
    tool: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the README lists the keys)."""
        return {"rule": self.rule, "text": self.text, "evidence": dict(self.evidence),
                "tool": self.tool}


@dataclass
class Facts:
    """What the rules read: the run's results, gathered once."""

    summary: dict[str, Any]  # the overview dictionary of the run
    inputs: list[HostInput]
    kernels: KernelStats
    ops: OpStats
    step_gaps_ms: list[float] = field(default_factory=list)  # between consecutive steps
    step_ms: list[float] = field(default_factory=list)  # in time order, trimmed ones left out
    first_step_ms: float | None = None  # the first step captured (before any trimming)

    @property
    def breakdown(self) -> dict[str, float]:
        result: dict[str, float] = self.summary["breakdown"]
        return result

    @property
    def has_steps(self) -> bool:
        return bool(self.summary["steps"]["count"])

    @property
    def has_device(self) -> bool:
        return str(self.summary["environment"]["device_type"]) != "CPU"

    @property
    def total_step_ms(self) -> float:
        s = self.summary["steps"]
        return float(s["avg_ms"] or 0.0) * int(s["count"])


def facts_of(model: RunModel) -> Facts:
    """Gather the results the rules need from ``model``."""
    gaps: list[float] = []
    times: list[float] = []
    first: float | None = None
    for name in model.hosts:
        steps = model.hosts[name].steps
        if len(steps) >= 2:
            gaps.extend(((steps.start_ns[1:] - steps.end_ns[:-1]) / 1e6).tolist())
        if len(steps) and not times:
            times = (steps.duration_ns / 1e6).tolist()
    summary = model.overview_dict()
    per_step = summary["steps"]["per_step"]
    if per_step:
        first = float(per_step[0]["ms"])
    return Facts(summary, [model.host_input(n) for n in model.hosts], model.kernel_stats(),
                 model.op_stats(), gaps, times, first)


# -- the rules: each returns its recommendation, or None when the profile does not show it --

Rule = Callable[[Facts], "Recommendation | None"]


def _pipelines(f: Facts) -> list[str]:
    return [n for h in f.inputs for n in h.nodes]


def _bottleneck(f: Facts) -> tuple[str | None, float | None]:
    """The slowest host's bottleneck stage and the pipeline run it was found in (ms)."""
    found = [(h.bottleneck.run_ms or 0.0, h.bottleneck.stage) for h in f.inputs
             if h.bottleneck.stage]
    if not found:
        return None, None
    run_ms, stage = max(found, key=lambda x: x[0])
    return stage, run_ms


def _input_matters(f: Facts) -> bool:
    return f.has_steps and f.breakdown["input"] >= WORTH


def _input_evidence(f: Facts) -> dict[str, Any]:
    return {"input_percent": round(f.breakdown["input"], 2),
            "verdict": f.summary["input"]["verdict"]}


def rule_parallel_map(f: Facts) -> Recommendation | None:
    if not _input_matters(f):
        return None
    # A serial map on the critical path of the slowest pipeline run (the bottleneck itself,
    # or a stage that the bottleneck waits for).
    for h in sorted(f.inputs, key=lambda h: -(h.bottleneck.run_ms or 0.0)):
        b = h.bottleneck
        serial = [n for n in b.critical_path if kind_of(n) in ("Map", "MapAndBatch")
                  and not n.startswith(PREFIX + SEP + "DataLoader")]
        if b.stage is None or not serial:
            continue
        return Recommendation(
            "parallel_map",
            "A map stage on the input's critical path runs one element at a time: pass "
            "num_parallel_calls=tf.data.AUTOTUNE to Dataset.map.",
            {**_input_evidence(f), "serial_map": serial[0], "bottleneck_stage": b.stage,
             "slowest_run_ms": b.run_ms}, "input_pipeline_analyzer")
    return None


def rule_prefetch(f: Facts) -> Recommendation | None:
    if not _input_matters(f):
        return None
    outputs = [n for n in _pipelines(f) if n.count(SEP) == 1]
    tf_outputs = [n for n in outputs if not n.startswith(PREFIX + SEP + "DataLoader")]
    if not tf_outputs or any(kind_of(n) == "Prefetch" for n in tf_outputs):
        return None
    return Recommendation(
        "prefetch",
        "The pipeline does not end with prefetch, so each step waits while the next batch is "
        "made: end it with .prefetch(tf.data.AUTOTUNE).",
        {**_input_evidence(f), "output_stages": tf_outputs}, "input_pipeline_analyzer")


def rule_cache(f: Facts) -> Recommendation | None:
    stage, run_ms = _bottleneck(f)
    if not _input_matters(f) or stage is None or not _FILE_READ.search(kind_of(stage)):
        return None
    if any(kind_of(n) in ("Cache", "MemoryCache") for n in _pipelines(f)):
        return None
    return Recommendation(
        "cache",
        "Reading files is the input bottleneck and nothing is cached: if the data fits in "
        "memory (or on local disk), .cache() right after the expensive read.",
        {**_input_evidence(f), "bottleneck_stage": stage, "slowest_run_ms": run_ms},
        "input_pipeline_analyzer")


def rule_interleave(f: Facts) -> Recommendation | None:
    stage, run_ms = _bottleneck(f)
    if not _input_matters(f) or stage is None or not _FILE_READ.search(kind_of(stage)):
        return None
    if "ParallelInterleave" in stage:
        return None
    return Recommendation(
        "interleave",
        "Files are read one after another and reading is the input bottleneck: read several "
        "at once with Dataset.interleave(..., num_parallel_calls=tf.data.AUTOTUNE).",
        {**_input_evidence(f), "bottleneck_stage": stage, "slowest_run_ms": run_ms},
        "input_pipeline_analyzer")


def rule_vectorize_map(f: Facts) -> Recommendation | None:
    if not _input_matters(f):
        return None
    for h in f.inputs:
        for i, node in enumerate(h.nodes):
            # A map upstream of batching runs once per element.
            downstream = node.split(SEP)[1:-1]
            if kind_of(node) not in ("Map", "ParallelMap") or not any(
                    k in ("Batch", "PaddedBatch", "MapAndBatch") for k in downstream):
                continue
            calls = h.calls[i]
            # Its own work per call: what it waits for upstream is not its cost.
            per_call_us = h.work_ns[i] / max(calls, 1) / 1e3
            if calls >= 100 and per_call_us < SMALL_MAP_US:
                return Recommendation(
                    "vectorize_map",
                    "A cheap map runs once per element before batching, so its per-call "
                    "overhead dominates: batch first and map over whole batches.",
                    {**_input_evidence(f), "stage": node, "calls": calls,
                     "own_us_per_call": round(per_call_us, 2)}, "input_pipeline_analyzer")
    return None


def rule_py_function(f: Facts) -> Recommendation | None:
    if not _input_matters(f):
        return None
    ops = [r for r in f.ops.rows if r.host_or_device == HOST and (
        _PY_FUNC.search(r.type) or _PY_FUNC.search(r.name))]
    stages = [n for n in _pipelines(f) if _GENERATOR.search(kind_of(n))]
    if not ops and not stages:
        return None
    evidence: dict[str, Any] = _input_evidence(f)
    if ops:
        evidence["python_ops"] = {r.name: round(r.self_ns / 1e6, 3) for r in ops[:5]}
    if stages:
        evidence["generator_stages"] = stages
    return Recommendation(
        "python_in_pipeline",
        "Python runs inside the input pipeline (py_function / numpy_function / "
        "from_generator): it holds the GIL and runs serially; rewrite it with TensorFlow ops "
        "or read the data with a tf.data source.", evidence, "input_pipeline_analyzer")


def rule_augment_on_device(f: Facts) -> Recommendation | None:
    stage, run_ms = _bottleneck(f)
    if not f.has_device or not _input_matters(f) or stage is None:
        return None
    if kind_of(stage) not in ("Map", "ParallelMap", "MapAndBatch"):
        return None
    return Recommendation(
        "augment_on_device",
        "Preprocessing on the host is the input bottleneck while an accelerator is present: "
        "move augmentation into the model (Keras preprocessing layers) or after the copy to "
        "the device.",
        {**_input_evidence(f), "bottleneck_stage": stage, "slowest_run_ms": run_ms,
         "device_type": f.summary["environment"]["device_type"]}, "input_pipeline_analyzer")


def rule_tf_data_options(f: Facts) -> Recommendation | None:
    if not _input_matters(f):
        return None
    for h in sorted(f.inputs, key=lambda h: -(h.bottleneck.run_ms or 0.0)):
        b = h.bottleneck
        parallel = [n for n in b.critical_path
                    if kind_of(n) in ("ParallelMap", "ParallelInterleave", "ParallelBatch")]
        if b.stage is None or not parallel:
            continue
        return Recommendation(
            "tf_data_options",
            "A parallel stage is on the input's critical path: let it deliver out of order "
            "(options = tf.data.Options(); options.deterministic = False; "
            "dataset.with_options(options)) and keep autotuning on.",
            {**_input_evidence(f), "parallel_stage": parallel[0], "bottleneck_stage": b.stage,
             "slowest_run_ms": b.run_ms}, "input_pipeline_analyzer")
    return None


def rule_dataloader_workers(f: Facts) -> Recommendation | None:
    if not _input_matters(f):
        return None
    # PyTorch names the iterator of a DataLoader without worker processes after it.
    single = [r for r in f.ops.rows if _SINGLE_PROCESS.search(r.name)]
    loaders = [n for n in _pipelines(f) if n.startswith(PREFIX + SEP + "DataLoader")]
    text = " ".join(h.bottleneck.recommendation for h in f.inputs)
    if not single and not (loaders and "num_workers=4" in text):
        return None
    evidence: dict[str, Any] = _input_evidence(f)
    if single:
        evidence["single_process_iterator_ms"] = round(sum(r.self_ns for r in single) / 1e6, 3)
    if loaders:
        evidence["stages"] = loaders
    return Recommendation(
        "dataloader_workers",
        "The DataLoader loads batches in the training process (num_workers=0): load them in "
        "worker processes (num_workers=4 or more, persistent_workers=True so that they "
        "survive each epoch).", evidence, "input_pipeline_analyzer")


def rule_pinned_memory(f: Facts) -> Recommendation | None:
    rows = [r for r in f.ops.rows if r.host_or_device == DEVICE and _PAGEABLE.search(r.name)]
    total = f.total_step_ms
    ms = sum(r.self_ns for r in rows) / 1e6
    if not rows or not total or 100.0 * ms / total < 1.0:
        return None
    return Recommendation(
        "pinned_memory",
        "Host-to-device copies come from pageable memory, which is slower and cannot overlap "
        "compute: use pinned memory (DataLoader(pin_memory=True), tensor.pin_memory(), "
        "non_blocking=True copies).",
        {"pageable_copy_ms": round(ms, 3), "percent_of_step_time": round(100 * ms / total, 2),
         "copies": [r.name for r in rows[:3]]}, "trace_viewer")


def rule_host_to_device(f: Facts) -> Recommendation | None:
    rows = [r for r in f.ops.rows if r.host_or_device == DEVICE and _TO_DEVICE.search(r.name)]
    total = f.total_step_ms
    ms = sum(r.self_ns for r in rows) / 1e6
    if not rows or not total or 100.0 * ms / total < WORTH:
        return None
    return Recommendation(
        "host_to_device_copies",
        "Host-to-device copies take a large share of the step: prefetch to the device "
        "(tf.data.experimental.prefetch_to_device, or copy the next batch with "
        "non_blocking=True from pinned memory while this one computes).",
        {"copy_ms": round(ms, 3), "percent_of_step_time": round(100 * ms / total, 2)},
        "trace_viewer")


def rule_kernel_launch(f: Facts) -> Recommendation | None:
    if not f.has_steps or f.breakdown["kernel_launch"] < 10.0:
        return None
    return Recommendation(
        "kernel_launch",
        "The host spends much of the step launching kernels: put the step in tf.function "
        "(jit_compile=True for XLA), torch.compile, or CUDA graphs, and fuse small ops.",
        {"kernel_launch_percent": round(f.breakdown["kernel_launch"], 2)}, "overview_page")


def rule_small_kernels(f: Facts) -> Recommendation | None:
    rows = f.kernels.rows
    launches = sum(r.occurrences for r in rows)
    small = sum(r.occurrences for r in rows if r.avg_us < SMALL_KERNEL_US)
    if launches < 100 or 100.0 * small / launches < MANY_SMALL_KERNELS:
        return None
    return Recommendation(
        "small_kernels",
        "Most kernels are tiny, so launch overhead and gaps between them dominate: fuse ops "
        "(XLA, torch.compile) and use larger batches.",
        {"kernel_launches": launches, "small_launches": small,
         "small_below_us": SMALL_KERNEL_US}, "kernel_stats")


def rule_tensor_cores(f: Facts) -> Recommendation | None:
    rows = [r for r in f.kernels.rows if r.op_tensor_core_eligible
            and not r.kernel_uses_tensor_core]
    total = f.kernels.total_us
    us = sum(r.total_us for r in rows)
    if not rows or not total or 100.0 * us / total < WORTH:
        return None
    return Recommendation(
        "tensor_cores",
        "Ops that could use Tensor Cores run kernels that do not: use 16-bit inputs (mixed "
        "precision) and make batch size, channels and other matrix dimensions multiples of 8.",
        {"percent_of_kernel_time": round(100 * us / total, 2),
         "kernels": [r.kernel for r in rows[:3]]}, "kernel_stats")


def rule_mixed_precision(f: Facts) -> Recommendation | None:
    precision = f.summary.get("precision")
    if not f.has_device or not precision or precision["32bit_percent"] < 50.0:
        return None
    if not f.has_steps or f.breakdown["device_compute"] < 20.0:
        return None
    return Recommendation(
        "mixed_precision",
        "Most device compute runs in 32-bit: enable mixed precision "
        "(tf.keras.mixed_precision.set_global_policy('mixed_float16'), torch.autocast).",
        {"32bit_percent": round(precision["32bit_percent"], 2),
         "device_compute_percent": round(f.breakdown["device_compute"], 2)}, "kernel_stats")


def rule_layout(f: Facts) -> Recommendation | None:
    rows = [r for r in f.kernels.rows if _LAYOUT.search(r.kernel)]
    total = f.kernels.total_us
    us = sum(r.total_us for r in rows)
    if not rows or not total or 100.0 * us / total < WORTH:
        return None
    return Recommendation(
        "layout",
        "Much kernel time goes to changing tensor layouts (NCHW ↔ NHWC): keep one layout "
        "end to end (channels_last / NHWC for Tensor Cores).",
        {"percent_of_kernel_time": round(100 * us / total, 2),
         "kernels": [r.kernel for r in rows[:3]]}, "kernel_stats")


def rule_gpu_idle(f: Facts) -> Recommendation | None:
    if not f.has_device or not f.has_steps:
        return None
    b = f.breakdown
    idle = b["host_compute"] + b["kernel_launch"] + b["all_others"]
    if b["device_compute"] >= 50.0 or idle < GPU_IDLE or b["input"] >= WORTH:
        return None
    return Recommendation(
        "device_idle",
        "The device idles between kernels while the host works: give the GPU its own "
        "launch threads (TF_GPU_THREAD_MODE=gpu_private, TF_GPU_THREAD_COUNT), and look in "
        "the trace viewer for host work to move off the step's critical path.",
        {"device_compute_percent": round(b["device_compute"], 2),
         "host_side_percent": round(idle, 2)}, "trace_viewer")


def rule_profile_fewer_steps(f: Facts) -> Recommendation | None:
    count = int(f.summary["steps"]["count"])
    if count <= MAX_PROFILED_STEPS:
        return None
    return Recommendation(
        "profile_fewer_steps",
        f"The profile holds {count} steps: profile 10 or fewer (after warm-up), which is "
        "enough to analyse and keeps profiles small and tools fast.",
        {"steps": count, "max_recommended": MAX_PROFILED_STEPS}, "overview_page")


def rule_skip_first_steps(f: Facts) -> Recommendation | None:
    if len(f.step_ms) < 3 or f.first_step_ms is None:
        return None
    median = float(np.median(f.step_ms[1:]))
    if median <= 0 or f.first_step_ms < WARMUP_RATIO * median:
        return None
    return Recommendation(
        "skip_first_steps",
        "The first profiled step is much slower than the rest (warm-up: tracing, "
        "compilation, autotuning, buffers filling): start profiling a few steps later.",
        {"first_step_ms": round(f.first_step_ms, 3), "median_step_ms": round(median, 3)},
        "overview_page")


def rule_input_outside_step(f: Facts) -> Recommendation | None:
    if len(f.step_gaps_ms) < 2 or not f.step_ms:
        return None
    gap = float(np.median(f.step_gaps_ms))
    step = float(np.median(f.step_ms))
    if step <= 0 or 100.0 * gap / step < GAP_SHARE:
        return None
    return Recommendation(
        "input_outside_step",
        "The host spends a large time between steps, outside the step annotation: the batch "
        "is probably fetched there (for batch in dataset: with the Trace inside the loop), "
        "which hides input waits from the breakdown. Fetch the batch inside the annotation "
        "(next(iterator) within the Trace).",
        {"median_gap_ms": round(gap, 3), "median_step_ms": round(step, 3),
         "gap_percent_of_step": round(100 * gap / step, 2)}, "trace_viewer")


# -- Python time (the Python tracer's or sampler's heaviest functions) --------------------------

PYTHON_INPUT_SHARE = 25.0  # percent of the host's Python time in one input-side function
_PY_INPUT = re.compile(r"(?i)collate|__getitem__|__getitems__|dataloader|dataset|fetch|"
                       r"transform|augment|preprocess|decode|load_(batch|sample|image)")


def rule_python_input(python: dict[str, Any]) -> Recommendation | None:
    """A collate function or input stage among a host's heaviest Python functions."""
    # (self share, inclusive share, host, function, Python time): the function doing the work
    # itself is named, not the DataLoader's __next__ around it.
    found: list[tuple[float, float, str, dict[str, Any], int]] = []
    for host, summary in python.items():
        top = summary["top"]
        for i, name in enumerate(top["function"]):
            where = f"{top['file'][i]}:{top['line'][i]}" if top["file"][i] else name
            if _PY_INPUT.search(name) or _PY_INPUT.search(top["file"][i]):
                found.append((float(top["self_share"][i]), 100.0 * float(top["total_share"][i]),
                              host, {"function": name, "where": where},
                              int(summary["total_ns"])))
    if not found:
        return None
    _, share, host, what, total_ns = max(found, key=lambda x: x[0])
    if share < PYTHON_INPUT_SHARE:
        return None
    collate = "collate" in what["function"].lower()
    advice = ("move it into DataLoader worker processes (num_workers > 0), vectorise it "
              "(one tensor operation per batch instead of a Python loop per sample), or do "
              "the work once before training" if collate else
              "run it in parallel workers (DataLoader num_workers > 0, tf.data map with "
              "num_parallel_calls), vectorise it, or cache its results")
    return Recommendation(
        "python_input_function",
        f"The Python function {what['function']} ({what['where']}), on the input side, takes "
        f"{share:.0f}% of the Python time of host {host}: {advice}.",
        {**what, "host": host, "percent_of_python_time": round(share, 2),
         "python_ms": round(total_ns / 1e6, 3)}, "python_profile")


RULES: tuple[Rule, ...] = (
    rule_parallel_map, rule_prefetch, rule_cache, rule_interleave, rule_vectorize_map,
    rule_py_function, rule_augment_on_device, rule_tf_data_options, rule_dataloader_workers,
    rule_pinned_memory, rule_host_to_device, rule_kernel_launch, rule_small_kernels,
    rule_tensor_cores, rule_mixed_precision, rule_layout, rule_gpu_idle,
    rule_profile_fewer_steps, rule_skip_first_steps, rule_input_outside_step)


def advise(f: Facts) -> list[Recommendation]:
    """Every rule's recommendation that the facts call for, in rule order."""
    return [r for rule in RULES if (r := rule(f)) is not None]


def recommendations(model: RunModel) -> list[Recommendation]:
    """The advice for a run."""
    python = rule_python_input(model.python_dict())
    return advise(facts_of(model)) + ([python] if python is not None else [])


__all__ = ["RULES", "Facts", "Recommendation", "advise", "facts_of", "recommendations"]
