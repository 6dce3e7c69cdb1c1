"""Best-practice advice: the TensorFlow Profiler guides' "what to do about it", as rules over
the run model's results.

Each rule fires only when the profile shows the problem, says what to do, cites the numbers
that made it fire (``evidence``) and names the tool that shows them (``tool``, one of the
web UI's tool names). Rules read results only (overview, input pipeline and its bottleneck,
kernel stats, op stats, step spans); none reads events.

Thresholds are the guides' where they publish one (input-bound at 5 %, kernel launch and
"all others" as in the overview); the others are set so that a rule fires where the time
at stake is worth a change (at least ``WORTH`` percent of step time or of device time).

Every rule speaks the framework the run used (``frameworks``: TensorFlow and tf.data,
PyTorch and its ``DataLoader``, JAX, plain Python and ``stepscope.data``) and stays silent
where it has no advice for that framework. ``because`` says in a sentence, with units, the
figures that made the rule fire; ``evidence`` holds the same figures for programs (each key
names its unit).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscope.analysis.run_model import HostInput, RunModel
from stepscope.analysis.run_model.framework_op_stats import DEVICE, HOST, OpStats
from stepscope.analysis.run_model.frameworks import RunFramework
from stepscope.analysis.run_model.input_bottleneck import PREFIX, SEP, kind_of
from stepscope.analysis.run_model.kernel_stats import KernelStats
from stepscope.analysis.tools.gpu_timeline import DeviceTimeline, GpuTimeline

WORTH = 5.0  # percent: below this, a fix is not worth the reader's time
# Steps past which a profile is needlessly long: the guides profile about 10 steps, but
# stepscope's own defaults (its demo's 28 steps, a 2 s capture's few dozen) must not be
# told off; past this many, profiles get slow to open for no gain in what they show.
MAX_PROFILED_STEPS = 100
GAP_SHARE = 10.0  # percent of the step time that the host spends between steps
WARMUP_RATIO = 2.0  # the first step this many times the median one: warm-up was profiled
SMALL_KERNEL_US = 10.0
MANY_SMALL_KERNELS = 50.0  # percent of kernel launches that are small
GPU_IDLE = 30.0  # percent of the step when a device is present and not computing
# Per element: a map this cheap is dominated by its per-call overhead. A serial tf.data map
# of `x + 1` over 32 floats costs 25-40 µs a call under the profiler on a 2-core VM, all of
# it overhead: a map of under about three times that does little else.
SMALL_MAP_US = 100.0

_PY_FUNC = re.compile(r"(?i)^(Eager)?PyFunc(Stateless)?$|py_function|numpy_function")
_GENERATOR = re.compile(r"(?i)generator")
_FILE_READ = re.compile(r"TFRecord|TextLine|FixedLengthRecord|FileDataset|SSTable|Parquet")
_SINGLE_PROCESS = re.compile(r"_SingleProcessDataLoaderIter")
_NOW_WORKERS = re.compile(r"num_workers=\.\.\.\) \(now (\d+)\)")
_PAGEABLE = re.compile(r"(?i)pageable")
_TO_DEVICE = re.compile(r"HtoD|H2D|Host ?-> ?Device|MemcpyH2D")
_LAYOUT = re.compile(r"(?i)nchw.?to.?nhwc|nhwc.?to.?nchw|convert.?layout|transpose")


@dataclass
class Recommendation:
    """One piece of advice: which rule, what to do, the numbers behind it (as a sentence with
    units, ``because``, and as data, ``evidence``), where to look."""

    rule: str
    text: str
    evidence: dict[str, Any]
    tool: str
    because: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the README lists the keys)."""
        return {"rule": self.rule, "text": self.text, "because": self.because,
                "evidence": dict(self.evidence), "tool": self.tool}


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
    framework: RunFramework = field(default_factory=lambda: RunFramework("python", ""))

    @property
    def fw(self) -> str:
        """The run's framework: tensorflow, torch, jax or python."""
        return self.framework.framework

    @property
    def library(self) -> str:
        """The run's input pipeline library: tf.data, DataLoader, stepscope.data or ""."""
        return self.framework.input_library

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
                 model.op_stats(), gaps, times, first, model.framework())


# -- the rules: each returns its recommendation, or None when the profile does not show it --

Rule = Callable[[Facts], "Recommendation | None"]


def _pipelines(f: Facts) -> list[str]:
    return [n for h in f.inputs for n in h.nodes]


def _say(f: Facts, **by_framework: str) -> str | None:
    """The text for the run's framework (tensorflow, torch, jax, python); None: silent."""
    return by_framework.get(f.fw)


def _ms(value: float) -> str:
    return f"{value:,.3f} ms" if value < 10 else f"{value:,.1f} ms"


def _pct(value: float) -> str:
    return f"{value:.1f} %"


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


def _input_because(f: Facts) -> str:
    """The input share as a sentence: what makes every input rule worth reading."""
    per_step = float(f.summary.get("breakdown_ms", {}).get("input", 0.0))
    return (f"the step waits for input {_pct(f.breakdown['input'])} of the time "
            f"({_ms(per_step)} a step, {f.summary['input']['verdict']} input-bound)")


def _run_because(stage: str | None, run_ms: float | None) -> str:
    if stage is None or run_ms is None:
        return ""
    return f"; the slowest pipeline call took {_ms(run_ms)}, most of it in {stage}"


def rule_parallel_map(f: Facts) -> Recommendation | None:
    if not _input_matters(f) or f.library not in ("tf.data", "stepscope.data"):
        return None
    # A serial map on the critical path of the slowest pipeline run (the bottleneck itself,
    # or a stage that the bottleneck waits for).
    for h in sorted(f.inputs, key=lambda h: -(h.bottleneck.run_ms or 0.0)):
        b = h.bottleneck
        serial = [n for n in b.critical_path if kind_of(n) in ("Map", "MapAndBatch")
                  and not n.startswith(PREFIX + SEP + "DataLoader")]
        if b.stage is None or not serial:
            continue
        if f.library == "tf.data":
            text = ("A map stage on the input's critical path runs one element at a time: "
                    "pass num_parallel_calls=tf.data.AUTOTUNE to Dataset.map.")
        else:
            text = ("A map stage on the input's critical path runs one element at a time: "
                    "pass num_parallel_calls=N to .map(...) (stepscope.data runs it on N "
                    "threads)" + (", or, for CPU-heavy Python, run it in worker processes "
                                  "with Grain (grain.MultiprocessingOptions(num_workers=N))"
                                  if f.fw == "jax" else "") + ".")
        return Recommendation(
            "parallel_map", text,
            {**_input_evidence(f), "serial_map": serial[0], "bottleneck_stage": b.stage,
             "slowest_run_ms": b.run_ms}, "input_pipeline_analyzer",
            f"{_input_because(f)}{_run_because(b.stage, b.run_ms)}, and {serial[0]} maps "
            "one element at a time.")
    return None


def rule_prefetch(f: Facts) -> Recommendation | None:
    if not _input_matters(f) or f.library not in ("tf.data", "stepscope.data"):
        return None
    outputs = [n for n in _pipelines(f) if n.count(SEP) == 1]
    tf_outputs = [n for n in outputs if not n.startswith(PREFIX + SEP + "DataLoader")]
    if not tf_outputs or any(kind_of(n) == "Prefetch" for n in tf_outputs):
        return None
    how = (".prefetch(tf.data.AUTOTUNE)" if f.library == "tf.data"
           else ".prefetch(2) (stepscope.data fills it on a thread of its own)")
    return Recommendation(
        "prefetch",
        "The pipeline does not end with prefetch, so each step waits while the next batch is "
        f"made: end it with {how}.",
        {**_input_evidence(f), "output_stages": tf_outputs}, "input_pipeline_analyzer",
        f"{_input_because(f)}, and the pipeline's last stage is {', '.join(tf_outputs)}, "
        "not a prefetch.")


def rule_cache(f: Facts) -> Recommendation | None:
    stage, run_ms = _bottleneck(f)
    if not _input_matters(f) or stage is None or not _FILE_READ.search(kind_of(stage)):
        return None
    if f.library != "tf.data" or any(kind_of(n) in ("Cache", "MemoryCache")
                                     for n in _pipelines(f)):
        return None
    return Recommendation(
        "cache",
        "Reading files is the input bottleneck and nothing is cached: if the data fits in "
        "memory (or on local disk), .cache() right after the expensive read.",
        {**_input_evidence(f), "bottleneck_stage": stage, "slowest_run_ms": run_ms},
        "input_pipeline_analyzer",
        f"{_input_because(f)}{_run_because(stage, run_ms)}, and no stage caches.")


def rule_interleave(f: Facts) -> Recommendation | None:
    stage, run_ms = _bottleneck(f)
    if not _input_matters(f) or stage is None or not _FILE_READ.search(kind_of(stage)):
        return None
    if f.library != "tf.data" or "ParallelInterleave" in stage:
        return None
    return Recommendation(
        "interleave",
        "Files are read one after another and reading is the input bottleneck: read several "
        "at once with Dataset.interleave(..., num_parallel_calls=tf.data.AUTOTUNE).",
        {**_input_evidence(f), "bottleneck_stage": stage, "slowest_run_ms": run_ms},
        "input_pipeline_analyzer",
        f"{_input_because(f)}{_run_because(stage, run_ms)}, read by no parallel interleave.")


def rule_vectorize_map(f: Facts) -> Recommendation | None:
    if not _input_matters(f) or f.library not in ("tf.data", "stepscope.data"):
        return None
    for h in f.inputs:
        for i, node in enumerate(h.nodes):
            # A map upstream of batching runs once per element.
            downstream = node.split(SEP)[1:-1]
            if kind_of(node) not in ("Map", "ParallelMap") or not any(
                    k in ("Batch", "PaddedBatch", "MapAndBatch") for k in downstream):
                continue
            calls = h.calls[i]
            # Its typical own work a call: what it waits for upstream is not its cost.
            per_call_us = h.per_call_ns[i] / 1e3
            if calls >= 100 and per_call_us < SMALL_MAP_US:
                return Recommendation(
                    "vectorize_map",
                    "A cheap map runs once per element before batching, so its per-call "
                    "overhead dominates: batch first (.batch(n) before .map(fn)) and map over "
                    "whole batches.",
                    {**_input_evidence(f), "stage": node, "calls": calls,
                     "own_us_per_call": round(per_call_us, 2)}, "input_pipeline_analyzer",
                    f"{_input_because(f)}; {node} ran {calls:,} times before batching, "
                    f"{per_call_us:.1f} µs of its own work in a typical call (under "
                    f"{SMALL_MAP_US:.0f} µs counts as cheap).")
    return None


def rule_py_function(f: Facts) -> Recommendation | None:
    if not _input_matters(f) or f.library != "tf.data":
        return None  # Python is how stepscope.data and the DataLoader work: no advice there
    ops = [r for r in f.ops.rows if r.host_or_device == HOST and (
        _PY_FUNC.search(r.type) or _PY_FUNC.search(r.name))]
    stages = [n for n in _pipelines(f) if _GENERATOR.search(kind_of(n))]
    if not ops and not stages:
        return None
    evidence: dict[str, Any] = _input_evidence(f)
    parts = []
    if ops:
        evidence["python_ops"] = {r.name: round(r.self_ns / 1e6, 3) for r in ops[:5]}
        parts.append("Python ops took " + ", ".join(
            f"{_ms(r.self_ns / 1e6)} ({r.name})" for r in ops[:3]))
    if stages:
        evidence["generator_stages"] = stages
        parts.append(f"the pipeline reads a Python generator ({stages[0]})")
    return Recommendation(
        "python_in_pipeline",
        "Python runs inside the input pipeline (py_function / numpy_function / "
        "from_generator): it holds the GIL and runs serially; rewrite it with TensorFlow ops "
        "or read the data with a tf.data source.", evidence, "input_pipeline_analyzer",
        f"{_input_because(f)}; " + " and ".join(parts) + ".")


def rule_augment_on_device(f: Facts) -> Recommendation | None:
    stage, run_ms = _bottleneck(f)
    if not f.has_device or not _input_matters(f) or stage is None:
        return None
    if kind_of(stage) not in ("Map", "ParallelMap", "MapAndBatch"):
        return None
    where = _say(
        f, tensorflow="move augmentation into the model (Keras preprocessing layers), after "
        "the copy to the device",
        torch="move augmentation after .to(device) (torchvision.transforms.v2 run on GPU "
        "tensors)",
        jax="move augmentation into the jitted step, after jax.device_put")
    if where is None:
        return None
    return Recommendation(
        "augment_on_device",
        f"Preprocessing on the host is the input bottleneck while an accelerator is present: "
        f"{where}.",
        {**_input_evidence(f), "bottleneck_stage": stage, "slowest_run_ms": run_ms,
         "device_type": f.summary["environment"]["device_type"]}, "input_pipeline_analyzer",
        f"{_input_because(f)}{_run_because(stage, run_ms)}, while a "
        f"{f.summary['environment']['device_type']} waits.")


def rule_tf_data_options(f: Facts) -> Recommendation | None:
    if not _input_matters(f) or f.library != "tf.data":
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
             "slowest_run_ms": b.run_ms}, "input_pipeline_analyzer",
            f"{_input_because(f)}{_run_because(b.stage, b.run_ms)}, and the parallel stage "
            f"{parallel[0]} is on its critical path.")
    return None


def rule_dataloader_workers(f: Facts) -> Recommendation | None:
    if not _input_matters(f) or f.fw != "torch":
        return None
    # PyTorch names the iterator of a DataLoader without worker processes after it.
    single = [r for r in f.ops.rows if _SINGLE_PROCESS.search(r.name)]
    loaders = [n for n in _pipelines(f) if n.startswith(PREFIX + SEP + "DataLoader")]
    text = " ".join(h.bottleneck.recommendation for h in f.inputs)
    now = _NOW_WORKERS.search(text)
    if not single and not (loaders and ("num_workers=4" in text or now)):
        return None
    workers = int(now.group(1)) if now and not single else 0
    evidence: dict[str, Any] = {**_input_evidence(f), "num_workers": workers}
    if loaders:
        evidence["stages"] = loaders
    if workers:
        advice = (f"The DataLoader's {workers} worker processes do not keep up: raise "
                  "num_workers (up to the CPU cores), keep them with persistent_workers=True, "
                  "let each fetch ahead with prefetch_factor=4, and use pin_memory=True when "
                  "training on a GPU.")
        why = f"{_input_because(f)}, with {workers} DataLoader worker processes."
    else:
        advice = ("The DataLoader loads batches in the training process (num_workers=0): "
                  "load them in worker processes: DataLoader(num_workers=4 or more, "
                  "persistent_workers=True so that they survive each epoch, prefetch_factor=2 "
                  "or more, and pin_memory=True when training on a GPU).")
        why = (f"{_input_because(f)}, and the DataLoader has no worker processes (it ran as "
               "_SingleProcessDataLoaderIter)." if single else
               f"{_input_because(f)}, and the DataLoader has no worker processes.")
    return Recommendation("dataloader_workers", advice, evidence, "input_pipeline_analyzer",
                          why)


# Kineto's name of a copy from page-locked memory: "Memcpy HtoD (Pinned -> Device)".
_PINNED = re.compile(r"\(Pinned ->")


def _copy_how(f: Facts) -> str | None:
    return _say(
        f, tensorflow="prefetch to the device (tf.data.experimental.prefetch_to_device"
        "('/gpu:0') at the end of the pipeline)",
        torch="copy from pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) "
        "with .to(device, non_blocking=True), the next batch while this one computes",
        jax="put the next batch on the device while this one computes (jax.device_put ahead "
        "of the step, e.g. flax.jax_utils.prefetch_to_device)")


def rule_pinned_memory(f: Facts) -> Recommendation | None:
    rows = [r for r in f.ops.rows if r.host_or_device == DEVICE and _PAGEABLE.search(r.name)]
    total = f.total_step_ms
    ms = sum(r.self_ns for r in rows) / 1e6
    how = _copy_how(f)
    if not rows or not total or 100.0 * ms / total < 1.0 or how is None:
        return None
    return Recommendation(
        "pinned_memory",
        "Host-to-device copies come from pageable memory, which is slower and cannot overlap "
        f"compute: {how}.",
        {"pageable_copy_ms": round(ms, 3), "percent_of_step_time": round(100 * ms / total, 2),
         "copies": [r.name for r in rows[:3]]}, "trace_viewer",
        f"copies from pageable memory took {_ms(ms)}, {_pct(100 * ms / total)} of step time.")


def rule_host_to_device(f: Facts) -> Recommendation | None:
    rows = [r for r in f.ops.rows if r.host_or_device == DEVICE and _TO_DEVICE.search(r.name)]
    total = f.total_step_ms
    ms = sum(r.self_ns for r in rows) / 1e6
    how = _copy_how(f)
    if rows and f.fw == "torch" and all(_PINNED.search(r.name) for r in rows):
        # Kineto names the source: pinned already, the copies are left to overlap or shrink.
        how = ("they already come from pinned memory, so overlap them with compute (copy the "
               "next batch with .to(device, non_blocking=True) on a side stream while this one "
               "computes, with no synchronize in between) or send fewer bytes (uint8 images, "
               "cast on the device)")
    if not rows or not total or 100.0 * ms / total < WORTH or how is None:
        return None
    return Recommendation(
        "host_to_device_copies",
        f"Host-to-device copies take a large share of the step: {how}.",
        {"copy_ms": round(ms, 3), "percent_of_step_time": round(100 * ms / total, 2)},
        "trace_viewer",
        f"host-to-device copies took {_ms(ms)}, {_pct(100 * ms / total)} of step time "
        f"(worth a change from {WORTH:.0f} %).")


def _fuse_how(f: Facts) -> str | None:
    return _say(
        f, tensorflow="put the step in tf.function(jit_compile=True) so that XLA fuses it",
        torch="compile the step (torch.compile) or replay it as a CUDA graph "
        "(torch.compile(mode='reduce-overhead'), torch.cuda.graphs)",
        jax="jit the whole step (one jax.jit around it, lax.scan or lax.fori_loop for its "
        "loops) so that XLA fuses it",
        python="fuse kernels (cupy.fuse, a Numba kernel) or replay them as a CUDA graph")


def rule_kernel_launch(f: Facts) -> Recommendation | None:
    how = _fuse_how(f)
    if not f.has_steps or f.breakdown["kernel_launch"] < 10.0 or how is None:
        return None
    return Recommendation(
        "kernel_launch",
        f"The host spends much of the step launching kernels: {how}.",
        {"kernel_launch_percent": round(f.breakdown["kernel_launch"], 2)}, "overview_page",
        f"launching kernels took {_pct(f.breakdown['kernel_launch'])} of step time (10 % or "
        "more is worth fusing).")


def rule_small_kernels(f: Facts) -> Recommendation | None:
    rows = f.kernels.rows
    launches = sum(r.occurrences for r in rows)
    small = sum(r.occurrences for r in rows if r.avg_us < SMALL_KERNEL_US)
    how = _fuse_how(f)
    if launches < 100 or 100.0 * small / launches < MANY_SMALL_KERNELS or how is None:
        return None
    return Recommendation(
        "small_kernels",
        f"Most kernels are tiny, so launch overhead and gaps between them dominate: {how}, "
        "and use larger batches.",
        {"kernel_launches": launches, "small_launches": small,
         "small_below_us": SMALL_KERNEL_US}, "kernel_stats",
        f"{small:,} of {launches:,} kernel launches ({_pct(100.0 * small / launches)}) ran "
        f"under {SMALL_KERNEL_US:.0f} µs each.")


def _precision_how(f: Facts) -> str | None:
    return _say(
        f, tensorflow="enable mixed precision (keras.mixed_precision.set_global_policy"
        "('mixed_float16'), or 'mixed_bfloat16')",
        torch="run the step under torch.autocast('cuda', dtype=torch.bfloat16) (or float16 "
        "with a GradScaler)",
        jax="keep parameters and activations in jnp.bfloat16 (or set "
        "jax.default_matmul_precision for matmuls)")


def rule_tensor_cores(f: Facts) -> Recommendation | None:
    rows = [r for r in f.kernels.rows if r.op_tensor_core_eligible
            and not r.kernel_uses_tensor_core]
    total = f.kernels.total_us
    us = sum(r.total_us for r in rows)
    how = _precision_how(f)
    if not rows or not total or 100.0 * us / total < WORTH or how is None:
        return None
    return Recommendation(
        "tensor_cores",
        f"Ops that could use Tensor Cores run kernels that do not: {how}, and make batch "
        "size, channels and other matrix dimensions multiples of 8.",
        {"percent_of_kernel_time": round(100 * us / total, 2),
         "kernels": [r.kernel for r in rows[:3]]}, "kernel_stats",
        f"kernels of Tensor-Core-eligible ops that use none took {_pct(100 * us / total)} of "
        f"kernel time ({_ms(us / 1e3)}).")


def rule_mixed_precision(f: Facts) -> Recommendation | None:
    precision = f.summary.get("precision")
    how = _precision_how(f)
    if not f.has_device or not precision or precision["32bit_percent"] < 50.0 or how is None:
        return None
    if not f.has_steps or f.breakdown["device_compute"] < 20.0:
        return None
    return Recommendation(
        "mixed_precision",
        f"Most device compute runs in 32-bit: {how}.",
        {"32bit_percent": round(precision["32bit_percent"], 2),
         "device_compute_percent": round(f.breakdown["device_compute"], 2)}, "kernel_stats",
        f"{_pct(precision['32bit_percent'])} of device compute ran in 32-bit, and device "
        f"compute is {_pct(f.breakdown['device_compute'])} of step time.")


def rule_layout(f: Facts) -> Recommendation | None:
    rows = [r for r in f.kernels.rows if _LAYOUT.search(r.kernel)]
    total = f.kernels.total_us
    us = sum(r.total_us for r in rows)
    how = _say(f, tensorflow="data_format='channels_last' in the Keras layers",
               torch="model.to(memory_format=torch.channels_last) and the same for inputs")
    if not rows or not total or 100.0 * us / total < WORTH or how is None:
        return None
    return Recommendation(
        "layout",
        "Much kernel time goes to changing tensor layouts (NCHW ↔ NHWC): keep one layout "
        f"end to end, channels last (NHWC) for Tensor Cores: {how}.",
        {"percent_of_kernel_time": round(100 * us / total, 2),
         "kernels": [r.kernel for r in rows[:3]]}, "kernel_stats",
        f"layout-changing kernels took {_pct(100 * us / total)} of kernel time "
        f"({_ms(us / 1e3)}).")


def rule_gpu_idle(f: Facts) -> Recommendation | None:
    if not f.has_device or not f.has_steps:
        return None
    b = f.breakdown
    idle = b["host_compute"] + b["kernel_launch"] + b["all_others"]
    if b["device_compute"] >= 50.0 or idle < GPU_IDLE or b["input"] >= WORTH:
        return None
    how = _say(
        f, tensorflow="give the GPU its own launch threads (TF_GPU_THREAD_MODE=gpu_private, "
        "TF_GPU_THREAD_COUNT)",
        torch="capture the step as a CUDA graph (torch.compile(mode='reduce-overhead')) and "
        "take host work out of it (.item(), printing, Python bookkeeping sync the GPU)",
        jax="jit the whole step and keep host syncs out of it (float(x), jax.device_get, "
        "block_until_ready inside the loop)")
    if how is None:
        return None
    return Recommendation(
        "device_idle",
        f"The device idles between kernels while the host works: {how}, and look in the trace "
        "viewer for host work to move off the step's critical path.",
        {"device_compute_percent": round(b["device_compute"], 2),
         "host_side_percent": round(idle, 2)}, "trace_viewer",
        f"the device computes {_pct(b['device_compute'])} of step time while the host's own "
        f"work and untraced time fill {_pct(idle)}.")


def rule_profile_fewer_steps(f: Facts) -> Recommendation | None:
    count = int(f.summary["steps"]["count"])
    if count <= MAX_PROFILED_STEPS:
        return None
    how = _say(
        f, tensorflow="profile_batch='10,15' in the Keras callback, or start and stop "
        "tf.profiler.experimental around a few steps",
        torch="a schedule (stepscope.torch.schedule(wait=1, warmup=1, active=5) or "
        "torch.profiler.schedule)",
        jax="jax.profiler.start_trace / stop_trace around a few steps",
        python="stepscope.Profile around a few iterations, not the whole loop")
    return Recommendation(
        "profile_fewer_steps",
        f"The profile holds {count} steps: profile a few (5 to 10 after warm-up) with "
        f"{how}; that is enough to analyse, and keeps profiles small and tools fast.",
        {"steps": count, "max_steps": MAX_PROFILED_STEPS}, "overview_page",
        f"the profile holds {count:,} steps, more than {MAX_PROFILED_STEPS}.")


def rule_skip_first_steps(f: Facts) -> Recommendation | None:
    if len(f.step_ms) < 3 or f.first_step_ms is None:
        return None
    median = float(np.median(f.step_ms[1:]))
    if median <= 0 or f.first_step_ms < WARMUP_RATIO * median:
        return None
    how = _say(
        f, tensorflow="the first call of a tf.function traces and compiles it: start "
        "profiling a few steps later (Keras: profile_batch='10,15')",
        torch="start profiling a few steps later (stepscope.torch.schedule(wait=1, warmup=1, "
        "active=3))",
        jax="the first call of a jitted function compiles it, and the profiler's own "
        "start-up lands in the first step: call the step once before profiling and leave "
        "the first step or two out",
        python="start profiling a few steps later")
    return Recommendation(
        "skip_first_steps",
        "The first profiled step is much slower than the rest (warm-up: tracing, "
        f"compilation, autotuning, buffers filling): {how}.",
        {"first_step_ms": round(f.first_step_ms, 3), "median_step_ms": round(median, 3)},
        "overview_page",
        f"the first step took {_ms(f.first_step_ms)}, {f.first_step_ms / median:.1f} times "
        f"the median step ({_ms(median)}).")


def rule_input_outside_step(f: Facts) -> Recommendation | None:
    if len(f.step_gaps_ms) < 2 or not f.step_ms:
        return None
    gap = float(np.median(f.step_gaps_ms))
    step = float(np.median(f.step_ms))
    if step <= 0 or 100.0 * gap / step < GAP_SHARE:
        return None
    how = _say(
        f, tensorflow="fetch the batch inside the annotation (next(iterator) within "
        "tf.profiler.experimental.Trace)",
        torch="let the step span the fetch: with stepscope.torch.profile (or torch.profiler) "
        "a step runs from one prof.step() to the next, so call prof.step() once at the end "
        "of each iteration and put no other step marker inside",
        jax="fetch the batch inside jax.profiler.StepTraceAnnotation",
        python="fetch the batch inside the stepscope.Trace (next(iterator) within it)")
    return Recommendation(
        "input_outside_step",
        "The host spends a large time between steps, outside the step annotation: the batch "
        "is probably fetched there (for batch in dataset: with the annotation inside the "
        f"loop), which hides input waits from the breakdown: {how}.",
        {"median_gap_ms": round(gap, 3), "median_step_ms": round(step, 3),
         "gap_percent_of_step": round(100 * gap / step, 2)}, "trace_viewer",
        f"{_ms(gap)} pass between steps (the median), {_pct(100 * gap / step)} of the median "
        f"step ({_ms(step)}).")


def rule_mark_steps(f: Facts) -> Recommendation | None:
    if f.has_steps or not f.ops.rows:
        return None
    how = _say(
        f, tensorflow="wrap each step in tf.profiler.experimental.Trace('train', step_num=i, "
        "_r=1); with Keras, profile with the TensorBoard callback's profile_batch or "
        "stepscope.keras.ProfilerCallback, which mark the batches",
        torch="profile with a schedule and call prof.step() at the end of each iteration "
        "(torch.profiler.profile(schedule=...), or stepscope.torch.profile(...), which writes "
        "ProfilerStep#N steps)",
        jax="wrap each step in jax.profiler.StepTraceAnnotation('train', step_num=i)",
        python="wrap each step in stepscope.Trace('train', step_num=i, _r=1)")
    return Recommendation(
        "mark_steps",
        "No training steps were found, so there is no step-time breakdown and no input "
        f"verdict: {how}.",
        {"steps": 0, "ops": len(f.ops.rows)}, "overview_page",
        f"the profile holds {len(f.ops.rows):,} ops but no step markers.")


# -- Python time (the Python tracer's or sampler's heaviest functions) --------------------------

PYTHON_INPUT_SHARE = 25.0  # percent of the host's Python time in one input-side function
_PY_INPUT = re.compile(r"(?i)collate|__getitem__|__getitems__|dataloader|dataset|fetch|"
                       r"transform|augment|preprocess|decode|load_(batch|sample|image)")


_PY_INPUT_ADVICE = {
    "torch": ("move it into DataLoader worker processes (num_workers > 0), vectorise it (one "
              "tensor operation per batch instead of a Python loop per sample), or do the "
              "work once before training"),
    "tensorflow": ("run it in tf.data's map with num_parallel_calls=tf.data.AUTOTUNE, express "
                   "it in TensorFlow ops instead of Python, or cache its results"),
    "jax": ("run it in parallel workers (Grain's worker_count, or a thread pool), vectorise "
            "it with NumPy/jax.numpy, or do the work once before training"),
    "python": ("run it in parallel (stepscope.data's .map(fn, num_parallel_calls=N), or a "
               "thread or process pool), vectorise it with NumPy, or cache its results"),
}


def rule_python_input(python: dict[str, Any],
                      framework: str = "python") -> Recommendation | None:
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
    advice = _PY_INPUT_ADVICE["torch" if collate else framework if framework in
                              _PY_INPUT_ADVICE else "python"]
    return Recommendation(
        "python_input_function",
        f"The Python function {what['function']} ({what['where']}), on the input side, takes "
        f"{share:.0f}% of the Python time of host {host}: {advice}.",
        {**what, "host": host, "percent_of_python_time": round(share, 2),
         "python_ms": round(total_ns / 1e6, 3)}, "python_profile",
        f"{what['function']} is {share:.1f} % of host {host}'s {total_ns / 1e6:.1f} ms of "
        "Python time.")


RULES: tuple[Rule, ...] = (
    rule_parallel_map, rule_prefetch, rule_cache, rule_interleave, rule_vectorize_map,
    rule_py_function, rule_augment_on_device, rule_tf_data_options, rule_dataloader_workers,
    rule_pinned_memory, rule_host_to_device, rule_kernel_launch, rule_small_kernels,
    rule_tensor_cores, rule_mixed_precision, rule_layout, rule_gpu_idle,
    rule_profile_fewer_steps, rule_skip_first_steps, rule_input_outside_step, rule_mark_steps)


def advise(f: Facts) -> list[Recommendation]:
    """Every rule's recommendation that the facts call for, in rule order."""
    return [r for rule in RULES if (r := rule(f)) is not None]


def recommendations(model: RunModel,
                    precision: dict[str, float] | None = None) -> list[Recommendation]:
    """The advice for a run; ``precision``, where given, the device compute's precision in
    place of the overview's (the XLA programs' own, on a GPU: kernel names do not tell)."""
    python = rule_python_input(model.python_dict(), model.framework().framework)
    facts = facts_of(model)
    if precision is not None:
        facts.summary = {**facts.summary, "precision": precision}
    return advise(facts) + ([python] if python is not None else [])


# --- rules fed by the GPU timeline (analysis.gpu_timeline) --------------------------------

EXPOSED_COMM = WORTH  # percent of a device's span that collectives run outside compute
HOST_WAIT_SHARE = 50.0  # percent of a device's idle time that it waited for the host
SHORT_KERNEL_SHARE = 50.0  # percent of kernels under the short-kernel threshold
# The median launch delay (µs) under which the GPU starts kernels as soon as they are
# launched: the queue is empty and the launches set the pace. A long delay means the host ran
# ahead (a deep queue), and the idle time comes from elsewhere (between steps, input).
SHALLOW_QUEUE_US = 20.0


def _worst(devices: list[DeviceTimeline], key: Callable[[DeviceTimeline], float]
           ) -> DeviceTimeline:
    return max(devices, key=key)


def gpu_rule_exposed_communication(t: GpuTimeline, pytorch: bool = True
                                   ) -> Recommendation | None:
    """Collectives that run outside compute for a share of the span worth overlapping."""
    hit = [d for d in t.devices if d.breakdown.span_ns > 0 and 100.0 * d.breakdown.
           exposed_comm_ns / d.breakdown.span_ns >= EXPOSED_COMM]
    if not hit:
        return None
    d = _worst(hit, lambda d: d.breakdown.exposed_comm_ns / d.breakdown.span_ns)
    b = d.breakdown.to_dict()
    how = ("overlap them with compute: let DDP start its all-reduces during backward "
           "(bucket_cap_mb, gradient_as_bucket_view), prefetch in FSDP (backward_prefetch, "
           "forward_prefetch), or issue collectives with async_op=True and wait late"
           if pytorch else "overlap them with compute: XLA's latency-hiding scheduler and "
           "asynchronous collectives (e.g. --xla_gpu_enable_latency_hiding_scheduler)")
    bound = [s["bounded_by"] for s in t.critical_path.to_dict()["steps"] if s["bounded_by"]]
    straggler = max(set(bound), key=bound.count) if bound else None
    return Recommendation(
        "exposed_communication",
        f"Collectives run outside compute for {b['communication_percent']:.1f}% of "
        f"{d.device}'s time on {d.host}: {how}. Where one rank arrives late at them, its work "
        "bounds every rank's step: see the critical path.",
        {"host": d.host, "device": d.device,
         "exposed_comm_ms": round(b["exposed_comm_us"] / 1e3, 3),
         "exposed_percent_of_span": b["communication_percent"],
         "overlap_percent": b["overlap_percent"], "devices_affected": len(hit),
         "most_often_bounding": straggler}, "gpu_timeline")


def _host_waiting(d: DeviceTimeline) -> bool:
    idle = d.idle_total()
    return (d.breakdown.span_ns > 0 and 100.0 * d.breakdown.idle_ns / d.breakdown.span_ns
            >= GPU_IDLE and idle.total_ns > 0
            and 100.0 * idle.host_wait_ns / idle.total_ns >= HOST_WAIT_SHARE)


def _short_share(d: DeviceTimeline) -> float:
    return 100.0 * d.launches.short_kernels / d.launches.kernels if d.launches.kernels else 0.0


def _launch_bound(d: DeviceTimeline) -> bool:
    return (_host_waiting(d) and _short_share(d) >= SHORT_KERNEL_SHARE
            and d.launches.launch_delay.p50_ns <= SHALLOW_QUEUE_US * 1e3)


def gpu_rule_launch_bound(t: GpuTimeline, pytorch: bool = True) -> Recommendation | None:
    """The GPU waits for launches of kernels too short to hide them: launch-bound steps."""
    hit = [d for d in t.devices if _launch_bound(d)]
    if not hit:
        return None
    d = _worst(hit, lambda d: d.breakdown.idle_ns / d.breakdown.span_ns)
    idle = d.idle_total().to_dict()
    how = ("capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\") or "
           "torch.cuda.graphs), fuse small ops with torch.compile, or give each kernel more "
           "work (a larger batch)" if pytorch else
           "fuse more per kernel (jit larger functions), use CUDA graphs "
           "(--xla_gpu_enable_command_buffer), or a larger batch")
    return Recommendation(
        "launch_bound",
        f"Steps are launch-bound on {d.device} ({d.host}): the GPU idles "
        f"{d.breakdown.to_dict()['idle_percent']:.1f}% of the time, mostly waiting for the host "
        f"to launch the next kernel, and {_short_share(d):.0f}% of kernels run under "
        f"{t.options.short_kernel_ns / 1e3:g} µs: {how}.",
        {"host": d.host, "device": d.device,
         "idle_percent": d.breakdown.to_dict()["idle_percent"],
         "host_wait_percent_of_idle": idle["host_wait_percent"],
         "short_kernels_percent": round(_short_share(d), 2),
         "launch_call_p50_us": round(d.launches.cpu_duration.p50_ns / 1e3, 3),
         "launch_delay_p50_us": round(d.launches.launch_delay.p50_ns / 1e3, 3)},
        "gpu_timeline")


def gpu_rule_idle_host_wait(t: GpuTimeline, pytorch: bool = True) -> Recommendation | None:
    """The GPU idles waiting for host work (and not because launches set the pace)."""
    hit = [d for d in t.devices if _host_waiting(d) and not _launch_bound(d)]
    if not hit:
        return None
    d = _worst(hit, lambda d: d.breakdown.idle_ns / d.breakdown.span_ns)
    idle = d.idle_total().to_dict()
    host_ops: dict[str, int] = {}
    for p in t.critical_path.paths:
        for seg in p.segments:
            if seg.host == d.host and seg.kind == "host":
                host_ops[seg.name] = host_ops.get(seg.name, 0) + seg.duration_ns
    top = max(host_ops, key=lambda k: host_ops[k]) if host_ops else None
    how = ("move that work off the step (DataLoader workers, pin_memory, non_blocking "
           "copies) and avoid host syncs such as .item(), .cpu() and print of tensors"
           if pytorch else "move that work off the step (prefetch input: tf.data's prefetch, "
           "or a background loader feeding JAX), and avoid host round trips such as "
           "block_until_ready or reading device values inside the step")
    return Recommendation(
        "idle_waiting_on_host",
        f"{d.device} ({d.host}) idles {d.breakdown.to_dict()['idle_percent']:.1f}% of the time, "
        f"{idle['host_wait_percent']:.0f}% of it waiting for the host to launch work"
        + (f" (on the critical path, most host time is in {top!r})" if top else "")
        + f": {how}.",
        {"host": d.host, "device": d.device,
         "idle_percent": d.breakdown.to_dict()["idle_percent"],
         "host_wait_percent_of_idle": idle["host_wait_percent"],
         "top_host_op_on_path": top,
         "top_host_op_ms": round(host_ops[top] / 1e6, 3) if top else None}, "gpu_timeline")


GPU_RULES = (gpu_rule_exposed_communication, gpu_rule_launch_bound, gpu_rule_idle_host_wait)


def gpu_timeline_advice(t: GpuTimeline, pytorch: bool | None = None) -> list[Recommendation]:
    """The GPU timeline's advice, worded for PyTorch (``pytorch``; by default where the run is
    a PyTorch trace) or for XLA."""
    if pytorch is None:
        pytorch = t.source == "kineto"
    return [r for rule in GPU_RULES if (r := rule(t, pytorch)) is not None]


__all__ = ["GPU_RULES", "RULES", "Facts", "Recommendation", "advise", "facts_of",
           "gpu_timeline_advice", "recommendations"]
