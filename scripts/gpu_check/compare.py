"""Check stepscope's figures on the GPU runs of this folder against the references each run
recorded beside its profile: PyTorch's key_averages(), the FLOPs counted by hand and by XLA,
the CUDA caching allocator's peak and the steps' wall time.

Usage: python3 compare.py WORKDIR  (the folder run.sh filled: torch.json, jax.json, ...)
Prints one line per check, ``ok`` or ``DIFF``, and the figures side by side.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from stepscope.run.run import open_run


def line(ok: bool, what: str, ours: Any, theirs: Any) -> None:
    print(f"{'ok  ' if ok else 'DIFF'} {what}: stepscope {ours} | reference {theirs}")


def near(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def steps_and_mfu(run: Any, facts: dict[str, Any], label: str) -> None:
    overview = run.tool("overview_page").data
    steps = overview["steps"]
    walls = facts["wall_ms"]
    line(steps["count"] == len(walls), f"{label} steps", steps["count"], len(walls))
    avg_wall = sum(walls) / len(walls)
    line(near(steps["avg_ms"], avg_wall, 0.05), f"{label} mean step ms", round(steps["avg_ms"], 3),
         round(avg_wall, 3))
    mfu = overview["mfu"]
    hosts = list((mfu.get("hosts") or {}).values())
    print(f"     {label} breakdown %: {overview['breakdown']}")
    print(f"     {label} environment: {overview['environment']}")
    print(f"     {label} precision: {overview['precision']}  top ops: "
          f"{[(o['name'][:40], o['self_ms']) for o in overview['top_ops'][:5]]}")
    if not hosts:
        line(False, f"{label} MFU", mfu, "a figure")
        return
    host = hosts[0]
    count = max(len(host["steps"]), 1)
    tflop = host["model_tflop"] / count
    want = facts["flops_per_step"] / 1e12
    line(near(tflop, want, 0.02), f"{label} model TFLOP per step", round(tflop, 4), round(want, 4))
    if host["mfu"] is not None and host["peak_tflops"]:
        mine = want / (avg_wall / 1e3) / host["peak_tflops"]
        line(near(host["mfu"], mine, 0.1), f"{label} MFU ({host['device']}, "
             f"{host['precision']}, peak {host['peak_tflops']} from {host['peak_source']})",
             round(host["mfu"], 4), round(mine, 4))
    else:
        line(False, f"{label} MFU", host.get("unknown"), "a figure")
    for note in host.get("notes") or []:
        print(f"     note: {note}")


def kernels(run: Any, label: str) -> dict[str, tuple[int, float]]:
    data = run.tool("kernel_stats").data
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for row in data["rows"]:
        by_name[row["kernel"]][0] += row["occurrences"]
        by_name[row["kernel"]][1] += row["total_us"]
    print(f"     {label} kernels: {len(data['rows'])} rows, {data['total_us']:.1f} us; top: "
          + "; ".join(f"{r['kernel'][:50]} x{r['occurrences']} {r['total_us']:.0f}us "
                      f"tc={r['kernel_uses_tensor_core']} op={r['op'][:30]}"
                      for r in data["rows"][:4]))
    return {k: (int(v[0]), float(v[1])) for k, v in by_name.items()}


def torch_checks(work: Path) -> None:
    facts = json.loads((work / "torch.json").read_text())
    run = open_run(facts["path"], cache=False)
    steps_and_mfu(run, facts, "torch")
    ours = kernels(run, "torch")
    # Kineto's GPU user annotations are device keys of key_averages() but no kernels.
    trace = json.loads((work / "torch.pt.trace.json").read_text())["traceEvents"]
    annotations = {e.get("name") for e in trace if e.get("cat") == "gpu_user_annotation"}
    theirs = {r["key"]: (r["count"], r["self_device_time_total"] or 0.0)
              for r in facts["key_averages"]
              if "CUDA" in r["device_type"] and r["key"] not in annotations}
    mism = [(k, ours.get(k), v) for k, v in theirs.items()
            if k not in ours or ours[k][0] != v[0] or not near(ours[k][1], v[1], 0.01)]
    # key_averages() also lists copies and sets as device events; kernel stats only kernels.
    mism = [m for m in mism if not m[0].startswith(("Memcpy", "Memset"))]
    line(not mism, "torch kernels (count, us) vs key_averages", f"{len(ours)} kernels",
         f"{len(theirs)} device keys; mismatches {mism[:4]}")
    ops = {o["name"]: o for o in run.tool("framework_op_stats").data["ops"]
           if o["host_or_device"] == "Host"}
    heavy = sorted((r for r in facts["key_averages"]
                    if "CPU" in r["device_type"] and r["key"] != "[memory]"),
                   key=lambda r: -(r["self_cpu_time_total"] or 0))[:10]
    bad = [(r["key"], r["count"], ops.get(r["key"], {}).get("occurrences"),
            r["self_cpu_time_total"], round(ops.get(r["key"], {}).get("self_ms", 0) * 1e3, 1))
           for r in heavy if r["key"] not in ops or ops[r["key"]]["occurrences"] != r["count"]
           or not near(ops[r["key"]]["self_ms"] * 1e3, r["self_cpu_time_total"], 0.02)]
    line(not bad, "torch host ops self time vs key_averages (top 10)", "",
         f"mismatches (key, count, ours, self us, ours) {bad[:5]}")
    memory = run.tool("memory_profile").data
    for a in memory["allocators"]:
        print(f"     torch allocator {a['name']}: peak {a['peak_bytes_in_use']} in step "
              f"{a['peak_step']}, {a['num_allocations']} allocations")
    gpu = [a for a in memory["allocators"] if "cuda" in a["name"].lower()
           or "gpu" in a["name"].lower()]
    want = facts.get("max_memory_allocated")
    line(bool(gpu) and gpu[0]["peak_bytes_in_use"] == want, "torch GPU memory peak",
         gpu[0]["peak_bytes_in_use"] if gpu else None, want)
    timeline = run.tool("gpu_timeline").data
    for d in timeline["devices"]:
        print(f"     torch gpu_timeline {d['device']}: breakdown {d['breakdown']}")


def jax_checks(work: Path) -> None:
    facts = json.loads((work / "jax.json").read_text())
    run = open_run(facts["path"], cache=False)
    steps_and_mfu(run, facts, "jax")
    kernels(run, "jax")
    line(run.has_xla(), "jax XLA programs found", run.has_xla(), True)
    ops = run.tool("op_profile").data
    print(f"     jax op_profile keys: {list(ops)[:12]}")
    hlo = run.tool("hlo_op_stats").data
    rows = hlo.get("rows") or hlo.get("ops") or []
    flops = sum(float(r.get("model_flops") or r.get("flops") or 0) for r in rows)
    print(f"     jax hlo_op_stats: {len(rows)} rows; keys {list(rows[0])[:20] if rows else []}")
    steps = len(facts["wall_ms"])
    line(near(flops / steps, facts["xla_flops"], 0.05), "jax HLO FLOPs per step vs XLA's "
         "cost analysis", f"{flops / steps:.4g}", f"{facts['xla_flops']:.4g}")
    if not run.tool_available("memory_profile"):
        print("     jax: no memory activity recorded")
        return
    memory = run.tool("memory_profile").data
    peaks = [(a["name"], a["peak_bytes_in_use"]) for a in memory["allocators"]]
    want = (facts.get("memory_stats") or {}).get("peak_bytes_in_use")
    line(any(p == want for _, p in peaks), "jax GPU memory peak (the allocator's since start)",
         peaks, want)
    if run.has_hlo():
        viewer = run.tool("memory_viewer").data
        print(f"     jax memory_viewer keys: {list(viewer)[:12]}")


def cupy_checks(work: Path) -> None:
    facts = json.loads((work / "cupy.json").read_text())
    run = open_run(facts["path"], cache=False)
    overview = run.tool("overview_page").data
    line(overview["steps"]["count"] == len(facts["wall_ms"]), "cupy steps",
         overview["steps"]["count"], len(facts["wall_ms"]))
    ours = kernels(run, "cupy")
    gemm = [k for k in ours if "gemm" in k.lower() or "sgemm" in k.lower() or "xmma" in k.lower()]
    line(bool(gemm) and all(ours[k][0] >= len(facts["wall_ms"]) for k in gemm[:1]),
         "cupy matmul kernel recorded each step", gemm[:2], "a GEMM per step")
    copies = [k for k in run.tool("framework_op_stats").data["ops"]
              if k["name"].startswith("Memcpy")]
    line(len(copies) >= 2, "cupy copies both ways", [(c["name"], c["occurrences"]) for c in copies],
         "HtoD and DtoH")
    print(f"     cupy environment: {overview['environment']}")
    timeline = run.tool("gpu_timeline").data
    for d in timeline["devices"]:
        print(f"     cupy gpu_timeline {d['device']}: breakdown {d['breakdown']}")


def main() -> int:
    work = Path(sys.argv[1])
    for name, check in (("torch", torch_checks), ("jax", jax_checks), ("cupy", cupy_checks)):
        if not (work / f"{name}.json").exists():
            print(f"DIFF {name}: no run (see its log)")
            continue
        try:
            check(work)
        except Exception as err:  # one broken check must not hide the others
            import traceback

            traceback.print_exc()
            print(f"DIFF {name}: {type(err).__name__}: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
