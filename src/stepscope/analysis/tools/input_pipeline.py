"""The input pipeline analyzer: is the program input-bound, where the input time goes on the
host, and which pipeline stage is the bottleneck.

1. Summary: the share of step time spent waiting for input and the verdict, taken from the
   overview page's own breakdown (``overview_page``), so the two pages always agree.
2. Training-loop (device) side: per step, its time and the part waiting for input; step-time
   and input-time statistics.
3. Host side: input time split into reading data on demand, reading in advance (cache,
   prefetch, interleave), preprocessing, enqueuing/transfer, and other data reading or
   processing (XProf's fifth category: input time that no recorded pipeline stage explains,
   all of the steps' input time where no stage was recorded). Copies from host to device
   that the steps' input time holds (the overview counts them as input) are transfer to the
   device, not "other". Then the input-op table (one
   row per pipeline stage: calls, total and self time, category).
4. Pipelines: every input pipeline of every host with its slowest run and that run's
   bottleneck stage, slowest first (XProf's tf.data bottleneck analysis); and the bottleneck
   of the slowest host pipeline on the most input-bound host, with its critical path and a
   recommendation (``input_bottleneck``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model import RunModel, build_run_model
from stepscope.analysis.run_model.input_bottleneck import (
    CATEGORIES,
    CATEGORY_LABELS,
    ROOT,
    Bottleneck,
    Pipeline,
    parent_of,
)
from stepscope.errors import not_found
from stepscope.model.run_tables import RunTables


@dataclass
class InputOpRow:
    """One pipeline stage summed over the profile."""

    name: str
    count: int
    total_ms: float
    total_percent: float
    self_ms: float
    self_percent: float
    category: str
    # Its consumer is asynchronous: this stage runs apart from it (tf.data's threads, the
    # DataLoader's worker processes), so its total overlaps the consumer's and may exceed it.
    runs_apart: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass
class InputPipelineAnalysis:
    """The input pipeline analyzer's result for a run (all hosts) or one host."""

    run: str
    path: str
    host: str | None
    summary: dict[str, Any]  # the overview's dict for the same hosts
    rows: list[InputOpRow]
    host_breakdown_ns: dict[str, int]
    bottleneck: Bottleneck
    hosts_input_percent: dict[str, float | None] = field(default_factory=dict)
    pipelines: list[Pipeline] = field(default_factory=list)  # slowest run first

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``stepscope input --json``; keys documented in the README)."""
        steps = self.summary["steps"]
        per_step = steps["per_step"]
        input_ms = np.array([s["breakdown_ms"]["input"] for s in per_step], dtype=float)
        step_ms = np.array([s["ms"] for s in per_step], dtype=float)
        has = len(per_step) > 0
        total_input = sum(self.host_breakdown_ns.values())
        return {
            "run": self.run, "path": self.path, "host": self.host,
            "input": dict(self.summary["input"]),
            "steps": {
                "count": steps["count"], "avg_ms": steps["avg_ms"],
                "stddev_ms": steps["stddev_ms"], "min_ms": steps["min_ms"],
                "max_ms": steps["max_ms"],
                "input_avg_ms": float(input_ms.mean()) if has else None,
                "input_stddev_ms": float(input_ms.std()) if has else None,
                "input_min_ms": float(input_ms.min()) if has else None,
                "input_max_ms": float(input_ms.max()) if has else None,
                "per_step": [{"step_num": s["step_num"], "ms": float(t), "input_ms": float(i),
                              "other_ms": float(max(t - i, 0.0))}
                             for s, t, i in zip(per_step, step_ms, input_ms, strict=True)],
            },
            "host_breakdown": {c: self.host_breakdown_ns[c] / 1e6 for c in CATEGORIES},
            "host_breakdown_percent": {
                c: (100.0 * self.host_breakdown_ns[c] / total_input if total_input else 0.0)
                for c in CATEGORIES},
            "host_breakdown_labels": dict(CATEGORY_LABELS),
            "ops": [r.to_dict() for r in self.rows],
            "bottleneck": self.bottleneck.to_dict(),
            "hosts_input_percent": dict(self.hosts_input_percent),
            "pipelines": [p.to_dict() for p in self.pipelines],
        }


def input_pipeline(profile: RunTables, host: str | None = None) -> InputPipelineAnalysis:
    """Analyse the input pipeline of ``profile`` (all hosts, or ``host``)."""
    return input_pipeline_of(build_run_model(profile), host)


def input_pipeline_of(model: RunModel, host: str | None = None) -> InputPipelineAnalysis:
    """Analyse the input pipeline of a run model (all hosts, or ``host``)."""
    if host is not None and host not in model.hosts:
        raise not_found("host", host, f"run {model.run!r}", list(model.hosts))
    full = model.overview_dict()
    summary = full if host is None else full["hosts"][host]
    per_host = {name: full["hosts"][name]["input"]["percent"] for name in model.hosts}
    names = [host] if host is not None else list(model.hosts)

    stage_sums: dict[str, list[float]] = {}  # name → [count, total, self (as counted)]
    category: dict[str, str] = {}
    breakdown = dict.fromkeys(CATEGORIES, 0)
    apart: set[str] = set()
    for name in names:
        stages = model.host_input(name)
        apart |= {n for n in stages.nodes if parent_of(n) in set(stages.asynchronous)}
        for i, node in enumerate(stages.nodes):
            cat = category.setdefault(node, stages.categories[i])
            sums = stage_sums.setdefault(node, [0, 0, 0])
            sums[0] += stages.calls[i]
            sums[1] += stages.total_ns[i]
            sums[2] += stages.counted_ns[i]
            breakdown[cat] += stages.counted_ns[i]
        if stages.root[0]:
            # tf.data's Root wrapper: no stage, but an input op of XProf's, its self time
            # (the iterator's own overhead) preprocessing.
            category[ROOT] = "preprocessing"
            sums = stage_sums.setdefault(ROOT, [0, 0, 0])
            for k in range(3):
                sums[k] += stages.root[k]
            breakdown["preprocessing"] += stages.root[2]

    all_self = sum(s[2] for s in stage_sums.values())
    rows = [InputOpRow(name=n, count=int(c), total_ms=t / 1e6,
                       total_percent=100.0 * t / all_self if all_self else 0.0,
                       self_ms=s / 1e6, self_percent=100.0 * s / all_self if all_self else 0.0,
                       category=category[n], runs_apart=n in apart)
            for n, (c, t, s) in stage_sums.items()]
    rows.sort(key=lambda r: (-r.self_ms, r.name))

    # The most input-bound host with iterator events is the one whose slowest run we analyse.
    candidates = [n for n in names if model.host_input(n).nodes] or names
    target = max(candidates, key=lambda n: (per_host.get(n) or 0.0, n)) if candidates else None
    if target is None:
        bottleneck = Bottleneck(None, None, "This run has no hosts.")
    else:
        bottleneck = model.host_input(target).bottleneck
    # XProf's fifth category: input time no recorded stage explains. Where stages were
    # recorded they share all of it (XProf scales them to the whole); where none were, the
    # steps' input wait on the host is all "other" (less what enqueue stages took).
    # Copies from host to device in the steps' input time are transfer to the device (the
    # verdict counts them as input; here they are shown as what they are).
    waited_ns = sum(int(s["breakdown_ms"]["input"] * 1e6)
                    for s in summary["steps"]["per_step"])
    transfer_ns = sum(model.hosts[n].overview.input_transfer_ns for n in names)
    breakdown["enqueue"] += min(transfer_ns, waited_ns)
    if not any(breakdown[c] for c in CATEGORIES if c not in ("enqueue", "other")):
        breakdown["other"] = max(0, waited_ns - breakdown["enqueue"])
    pipelines = sorted((p for n in names for p in model.host_input(n).pipelines),
                       key=lambda p: (-(p.bottleneck.run_ms or 0.0), p.host, p.name))
    percent = summary["input"].get("percent")
    if (summary["input"].get("verdict") == "not" and percent is not None
            and bottleneck.stage is not None):
        # A stage that happened to be slowest in one run is no bottleneck when the steps
        # hardly wait for input (a single slow call, say a collection, would be named).
        bottleneck = replace(
            bottleneck, stage=None,
            recommendation=(f"Input is not the bottleneck: {percent:.1f}% "
                            "of step time waits for input. Look at the rest of the step."),
            graph=[replace(node, bottleneck=False) for node in bottleneck.graph])
    return InputPipelineAnalysis(model.run, model.path, host, summary, rows, breakdown,
                                 bottleneck, per_host, pipelines)


CSV_COLUMNS = ("input_op", "count", "total_ms", "total_percent", "self_ms", "self_percent",
               "category", "runs_apart")


def input_ops_csv(result: InputPipelineAnalysis) -> str:
    """The input-op table as CSV."""
    return csv_text(CSV_COLUMNS, (
        [r.name, r.count, f"{r.total_ms:.6f}", f"{r.total_percent:.4f}", f"{r.self_ms:.6f}",
         f"{r.self_percent:.4f}", r.category, int(r.runs_apart)] for r in result.rows))


__all__ = ["CSV_COLUMNS", "InputOpRow", "InputPipelineAnalysis", "input_ops_csv",
           "input_pipeline"]
