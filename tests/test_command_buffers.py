"""XLA command buffers on a real GPU: the H200 JAX capture (tests/data/README.md), where every
kernel of a step names ``command_buffer_1`` as its HLO op. The HLO ops behind them, their
FLOPs, MFU, precision and the device are checked against what the workload is known to do
(11 bf16 GEMMs of 2·8192·4096·4096 a step) and against XProf where it computes the same."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from stepscope.analysis.xla.hlo_op_stats import hlo_op_stats
from stepscope.cli import main
from stepscope.formats.command_buffers import kernel_name
from stepscope.formats.xspace_to_xla import load_xla
from stepscope.run.loader import open_xla_model

from xprof_reference import gviz_rows, xprof_tool

H200_JAX = Path(__file__).parent / "data" / "h200" / "jax_bridge.xplane.pb"
GEMM_FLOPS = 2 * 8192 * 4096 * 4096  # each of the step's 11 matmuls
STEPS = 8

pytestmark = pytest.mark.usefixtures("cache_home")


def _overview(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    path = tmp_path / "vm.xplane.pb"
    shutil.copy(H200_JAX, path)
    assert main(["tool", "overview_page", str(path), "--no-cache"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_every_kernel_of_the_buffer_has_its_hlo_op() -> None:
    x = load_xla(H200_JAX)
    ran = {x.ops[i].name for i in set(x.op.tolist())}
    assert "command_buffer_1" not in ran
    gemms = {f"custom-call.{i}" for i in range(11)}
    assert gemms <= ran
    assert {"loop_add_fusion.2", "wrapped_subtract.1", "input_add_reduce_fusion",
            "loop_convert_fusion"} <= ran
    assert len(ran) == 25  # 11 GEMMs and 14 fusions, each once a step
    for i, op in enumerate(x.ops):
        if op.name in gemms:  # a memset and a GEMM kernel a run
            assert x.executions[i] == STEPS and int((x.op == i).sum()) == 2 * STEPS


def test_hlo_flops_per_step_are_the_workloads() -> None:
    model = open_xla_model(H200_JAX, use_cache=False)
    rows = {r["name"]: r for r in hlo_op_stats(model).rows}
    assert "command_buffer_1" not in rows
    gemm = [r for n, r in rows.items() if n.startswith("custom-call")]
    assert len(gemm) == 11 and all(r["category"] == "custom-call" for r in gemm)
    assert all(r["flops"] == GEMM_FLOPS * STEPS and r["executions"] == STEPS for r in gemm)
    total = sum(r["flops"] for r in rows.values() if r["flops"])
    assert 11 * GEMM_FLOPS <= total / STEPS < 1.002 * 11 * GEMM_FLOPS  # plus elementwise
    assert model.devices[0].model == "NVIDIA H200"
    assert not any("not in their program" in n for n in model.notes)


def test_mfu_precision_and_device_of_the_overview(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = _overview(tmp_path, capsys)
    host = data["mfu"]["hosts"]["vm"]
    assert host["device"] == "NVIDIA H200" and host["peak_tflops"] == 989.0
    assert host["precision"] == "bf16"
    step_flops = [s["model_tflop"] * 1e12 for s in host["steps"]]
    assert all(11 * GEMM_FLOPS <= f < 1.002 * 11 * GEMM_FLOPS for f in step_flops)
    seconds = host["step_ms"] / 1e3
    assert data["mfu"]["mfu"] == pytest.approx(sum(step_flops) / seconds / 989e12)
    assert 0.55 < data["mfu"]["mfu"] < 0.65
    assert data["environment"]["device_names"] == ["NVIDIA H200"]
    # The GEMMs and fusions compute in bf16 (the 32-bit rest: the f32 loss reduction).
    assert data["precision"]["16bit_percent"] > 95.0


def test_op_times_equal_xprofs_kernel_times(tmp_path: Path) -> None:
    """XProf names every kernel's op ``XlaModule`` (and its HLO op stats are empty here), but
    its kernel times are the same events': a fusion's kernel (one name for the fusions XLA
    made one kernel of) against our ops of that kernel, the GEMM kernels against ours less
    the memsets that cuBLAS runs before them (XProf's kernel stats leave memsets out)."""
    table = xprof_tool(H200_JAX, "kernel_stats", tmp_path)
    xprof = {r["kernel_name"]: r for r in gviz_rows(table)}
    assert {r["op_name"] for r in xprof.values()} == {"XlaModule"}
    ours: dict[str, float] = defaultdict(float)
    model = open_xla_model(H200_JAX, use_cache=False)
    for o in model.ops:
        ours[o.name] += o.total_ps / 1e6
    by_kernel: dict[str, float] = defaultdict(float)
    for name, us in ours.items():
        if not name.startswith("custom-call"):
            like = [k for k in xprof if k.rstrip("_0123456789") == kernel_name(name)
                    .rstrip("_0123456789")]
            assert len(like) == 1, name
            by_kernel[like[0]] += us
    for kernel, us in by_kernel.items():
        assert us == pytest.approx(xprof[kernel]["total_duration_us"], abs=0.01)
    gemm_xprof = sum(r["total_duration_us"] for k, r in xprof.items() if k.startswith("nvjet"))
    gemm_ours = sum(us for n, us in ours.items() if n.startswith("custom-call"))
    x = load_xla(H200_JAX)
    memsets = sum(1 for i in x.op.tolist() if x.ops[i].name.startswith("custom-call"))
    assert memsets == 2 * 11 * STEPS
    assert 0 < gemm_ours - gemm_xprof < 0.01 * gemm_ours  # the memsets' few µs


def test_hostile_launches_and_schedules_keep_the_buffer() -> None:
    """Kernels that cannot be placed stay with the buffer, never a wrong op or an error:
    launches without ids, no kernels, kernels named after nothing, a launch of its own
    order, and a schedule that names instructions the module lacks."""
    import numpy as np

    from stepscope.formats import command_buffers as cb

    x = load_xla(H200_JAX)
    (module,) = [m for m in x.modules.values() if "train_step" in m.name]
    none = np.zeros(0, np.int64)
    op, cands = cb.attribute(module, "command_buffer_1", set(), [], none, none, none)
    assert len(op) == 0 and cands
    names = ["nvjet_a", "loop_add_fusion_2", "no_such_kernel"]
    codes = np.array([0, 1, 2, 0, 1, 2], np.int64)
    start = np.arange(6, dtype=np.int64)
    unknown = np.full(6, -1, np.int64)  # launch ids missing: nothing is placed
    op, _ = cb.attribute(module, "command_buffer_1", set(), names, codes, unknown, start)
    assert (op == -1).all()
    # Two launches in opposite orders: one sequence is the template, the other launch's
    # kernels keep the buffer; a kernel named after nothing never takes a fusion's op.
    launch = np.array([1, 1, 1, 2, 2, 2], np.int64)
    shuffled = np.array([0, 1, 2, 2, 1, 0], np.int64)
    op, cands = cb.attribute(module, "command_buffer_1", set(), names, shuffled, launch, start)
    assert (op[:3] == -1).all() != (op[3:] == -1).all()
    assert (op >= 0).any()
    assert all(o < 0 or cands[o].name != "no_such_kernel" for o in op.tolist())
    assert cb.align(module, [], cands) == []
    assert cb.align(module, ["?"] * 3, []) == [-1, -1, -1]
    # A schedule naming ids the module lacks: the computation's own order.
    entry = module.computation(module.entry_computation_id)
    assert entry is not None
    saved = module.schedule.get(entry.id)
    module.schedule[entry.id] = [10**12, 10**12 + 1]
    try:
        assert module.in_order(entry) == list(entry.instructions)
    finally:
        if saved is None:
            del module.schedule[entry.id]
        else:
            module.schedule[entry.id] = saved
