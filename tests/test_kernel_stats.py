"""GPU kernel stats on the real GPU recordings: rows equal figures read straight from the files.

The expected figures are computed here from the fixture files themselves (the JSON of Kineto
traces, the XSpace messages through ``xspace_view``), independently of the analysis; XSpace
files are also compared with XProf's own kernel_stats tool where XProf is installed.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from stepscope.analysis.run_model.kernel_stats import (
    AMD,
    NVIDIA,
    UNKNOWN_VENDOR,
    KernelStats,
    kernel_stats,
    kernel_stats_csv,
    kernel_uses_tensor_core,
    op_tensor_core_eligible,
    parse_dims_list,
    parse_kernel_details,
)
from stepscope.errors import StepscopeError
from stepscope.formats import run_reader
from stepscope.formats.xplane_builder import add_plane, new_space, read_space, write_space
from stepscope.formats.xspace_to_hlo import load_hlo

from conftest import FIXTURES
from xprof_reference import gviz_rows, xprof_tool
from xspace_view import events as plane_events

H100_BERT = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300_BERT = FIXTURES / "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
RESNET_2021 = (FIXTURES / "kineto/tb_plugin/samples/resnet50_num_workers_0"
               / "worker0.1623143089861.pt.trace.json.gz")
CPU_ONLY = (FIXTURES / "HolisticTraceAnalysis/tests/data/cpu_only"
            / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
TF_V100 = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
JAX_MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
JAX_MI300_LEGACY = (FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_legacy"
                    / "chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb")
JAX_TE = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization"
          / "934987a2fc2f.xplane.pb")
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"

KINETO_FILES = [H100_BERT, MI300_BERT, RESNET_2021]
XSPACE_FILES = [TF_V100, JAX_MI300, JAX_MI300_LEGACY, JAX_TE]

# Row key: (kernel, op, registers, shared memory, block, grid).
Key = tuple[str, str, Any, Any, Any, Any]
COPY_OR_FILL = re.compile(r"memcpy|memset|copybuffer|fillbuffer", re.IGNORECASE)


def _figures(rows: dict[Key, list[int]]) -> dict[Key, tuple[int, float, float, float]]:
    """Expected (occurrences, total, min, max µs) per key from per-launch nanoseconds."""
    return {k: (len(ns), sum(ns) / 1e3, min(ns) / 1e3, max(ns) / 1e3) for k, ns in rows.items()}


def _ours(stats: KernelStats) -> dict[Key, tuple[int, float, float, float]]:
    out = {}
    for r in stats.rows:
        key = (r.kernel, r.op, r.registers_per_thread, r.shared_memory_bytes, r.block, r.grid)
        assert key not in out, f"two rows for {key}"
        out[key] = (r.occurrences, r.total_us, r.min_us, r.max_us)
    return out


def _assert_same(ours: dict[Key, Any], expected: dict[Key, Any]) -> None:
    assert set(ours) == set(expected), (sorted(set(ours) - set(expected), key=str)[:3],
                                        sorted(set(expected) - set(ours), key=str)[:3])
    for key, (count, total, low, high) in expected.items():
        got = ours[key]
        assert got[0] == count, key
        assert got[1:] == pytest.approx((total, low, high), abs=1e-6), key


# --- Kineto: figures straight from the JSON ------------------------------------------------


def _ns(value: Any) -> int:
    return round(float(value) * 1000)


def _kineto_expected(path: Path) -> dict[Key, list[int]]:
    """Kernel launches of a Kineto trace grouped by key, with their durations in ns."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    ops_by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    launches: dict[int, dict[str, Any]] = {}
    for e in events:
        cat = e.get("cat")
        if cat in ("cpu_op", "Operator", "user_annotation") and \
                not re.match(r"ProfilerStep#\d+$", e["name"]):
            ops_by_thread[(e["pid"], e["tid"])].append(e)
        elif cat in ("cuda_runtime", "Runtime", "cuda_driver") and "correlation" in e["args"]:
            launches.setdefault(e["args"]["correlation"], e)

    # Per thread: its ops as (start, -duration, end, name), by start; the innermost op around
    # a launch is the latest-starting one (the shortest of those starting together) that ends
    # after it.
    spans = {thread: sorted((_ns(o["ts"]), -_ns(o["dur"]), _ns(o["ts"]) + _ns(o["dur"]),
                             o["name"]) for o in ops) for thread, ops in ops_by_thread.items()}
    starts = {thread: [s[0] for s in ops] for thread, ops in spans.items()}

    def launching_op(kernel: dict[str, Any]) -> str:
        launch = launches.get(kernel["args"].get("correlation"))
        if launch is None:
            return ""
        thread = (launch["pid"], launch["tid"])
        start, end = _ns(launch["ts"]), _ns(launch["ts"]) + _ns(launch["dur"])
        ops = spans.get(thread, [])
        for i in range(bisect.bisect_right(starts.get(thread, []), start) - 1, -1, -1):
            if ops[i][2] >= end:
                return str(ops[i][3])
        return ""

    def dims(value: Any) -> tuple[int, int, int] | None:
        return (value[0], value[1], value[2]) if isinstance(value, list) else None

    out: dict[Key, list[int]] = defaultdict(list)
    for e in events:
        if e.get("cat") not in ("kernel", "Kernel") or COPY_OR_FILL.search(e["name"]):
            continue
        args = e["args"]
        key = (e["name"], launching_op(e), args.get("registers per thread"),
               args.get("shared memory"), dims(args.get("block")), dims(args.get("grid")))
        out[key].append(_ns(e["dur"]))
    return out


@pytest.mark.parametrize("path", KINETO_FILES, ids=lambda p: p.parent.name + "/" + p.name[:20])
def test_kineto_rows_equal_the_trace(path: Path) -> None:
    expected = _kineto_expected(path)
    stats = kernel_stats(run_reader.load(path))
    _assert_same(_ours(stats), _figures(expected))
    assert stats.implausible_launches == 0


def test_kineto_figures_of_a_known_kernel() -> None:
    """One row checked by hand against the H100 trace: a CUTLASS Tensor Core GEMM."""
    stats = kernel_stats(run_reader.load(H100_BERT))
    row = next(r for r in stats.rows if "cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128" in
               r.kernel)
    assert (row.registers_per_thread, row.shared_memory_bytes) == (230, 147456)
    assert (row.block, row.grid) == ((256, 1, 1), (16, 15, 1))
    assert row.op == "aten::addmm"
    assert row.kernel_uses_tensor_core and row.op_tensor_core_eligible
    assert row.occurrences == 1 and row.total_us == pytest.approx(41.28, abs=1e-3)


def test_rocm_trace_has_dims_but_no_registers() -> None:
    stats = kernel_stats(run_reader.load(MI300_BERT))
    assert stats.rows and all(r.registers_per_thread is None and r.shared_memory_bytes is None
                              for r in stats.rows)
    assert all(r.block and r.grid for r in stats.rows)
    gemm = [r for r in stats.rows if r.kernel.startswith("Cijk_")]
    assert gemm and all(r.kernel_uses_tensor_core and r.op_tensor_core_eligible for r in gemm)


def test_zero_length_kernels_are_counted() -> None:
    """The 2021 trace rounds to whole µs: 636 kernels last 0 µs, and they are launches too."""
    stats = kernel_stats(run_reader.load(RESNET_2021))
    assert sum(r.occurrences for r in stats.rows) == 8772
    assert any(r.min_us == 0 for r in stats.rows)


# --- XSpace: figures straight from the messages --------------------------------------------

DERIVED_LINES = {"TensorFlow Ops", "TensorFlow Name Scope", "Steps", "XLA Ops", "XLA Modules",
                 "Framework Ops", "Framework Name Scope", "XLA TraceMe", "Source code"}


def _details(text: str) -> dict[str, str]:
    return dict(token.split(":", 1) for token in text.split() if ":" in token)


def _xspace_expected(path: Path) -> dict[Key, list[int]]:
    """Kernel launches of an XSpace file grouped by key, with their durations in ns."""
    out: dict[Key, list[int]] = defaultdict(list)
    hlo = load_hlo(path)[0]
    for plane in read_space(path).planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        evs = plane_events(plane)
        # TensorFlow's own derived line names the op of each kernel ("name:Type").
        tf_ops = [e for e in evs if e.line == "TensorFlow Ops"]
        for e in evs:
            text = e.stats.get("kernel_details", "")
            if e.line in DERIVED_LINES or not text.strip():
                continue
            d = _details(text)
            regs = int(d["regs"]) if "regs" in d else None
            regs = regs if regs is None or regs <= 1024 else None  # uninitialised memory
            if "static_shared" in d:
                shared: int | None = int(d["static_shared"]) + int(d.get("dynamic_shared", 0))
            elif "shm" in d:
                shared = int(d["shm"])
            else:
                shared = int(d["group_mem"]) if "group_mem" in d else None
            block = tuple(int(v) for v in d["block"].split(","))
            grid = tuple(int(v) for v in d["grid"].split(","))
            if e.stats.get("tf_op", "").startswith("XlaModule"):
                # As XProf: the HLO instruction's op_name where the file has its HLO.
                module = hlo.get(str(e.stats.get("program_id", "")))
                inst = module.instruction(e.stats.get("hlo_op", "")) if module else None
                op = inst.op_name if inst is not None else e.stats.get("name", "")
            else:
                around = [o for o in tf_ops if o.start_ns <= e.start_ns and o.end_ns >= e.end_ns]
                op = around[-1].name.rsplit(":", 1)[0] if around else ""
            out[(e.name, op, regs, shared, block, grid)].append(round(e.duration_ns))
    return out


@pytest.mark.parametrize("path", XSPACE_FILES, ids=lambda p: p.name[:24])
def test_xspace_rows_equal_the_file(path: Path) -> None:
    expected = _xspace_expected(path)
    stats = kernel_stats(run_reader.load(path))
    _assert_same(_ours(stats), _figures(expected))


def test_tensorflow_kernels_read_the_gpu_launch_records_not_the_host_ones() -> None:
    """The V100 demo's host launch events carry garbage kernel_details; its GPU events do not."""
    stats = kernel_stats(run_reader.load(TF_V100))
    assert stats.implausible_launches == 0
    assert {r.registers_per_thread for r in stats.rows} == {16, 18, 21, 22, 32, 38}
    assert {r.block for r in stats.rows} == {(1024, 1, 1)}
    assert all(r.op for r in stats.rows)  # every kernel's TensorFlow op is known
    assert not any(r.kernel_uses_tensor_core for r in stats.rows)


def test_garbage_registers_are_not_reported() -> None:
    """Legacy ROCm XLA writes regs:2191500840 (uninitialised): reported as unknown, counted."""
    stats = kernel_stats(run_reader.load(JAX_MI300_LEGACY))
    assert stats.rows and all(r.registers_per_thread is None for r in stats.rows)
    assert stats.implausible_launches == sum(r.occurrences for r in stats.rows) == 25


@pytest.mark.parametrize("path", [JAX_MI300, JAX_MI300_LEGACY, JAX_TE],
                         ids=lambda p: p.name[:24])
def test_xla_kernel_rows_and_ops_equal_xprof(path: Path, tmp_path: Path) -> None:
    """Every row of XProf's kernel_stats on the AMD JAX profiles, by kernel, op (the HLO
    instruction's op_name, empty where XProf's is: no guessed op), occurrences and total."""
    theirs = sorted((r["kernel_name"], r["op_name"], int(r["occurrences"]),
                     round(r["total_duration_us"], 3)) for r in _xprof_rows(path, tmp_path))
    ours = sorted((r.kernel, r.op, r.occurrences, round(r.total_us, 3))
                  for r in kernel_stats(run_reader.load(path, use_cache=False)).rows)
    assert ours == theirs


def test_blit_kernels_are_kernels_in_xspace(tmp_path: Path) -> None:
    """ROCm runs copies and fills as kernels (``__amd_rocclr_copyBuffer``) on a kernel stream,
    with kernel_details: they are rows of the kernel table, as in XProf's kernel_stats, with
    XProf's occurrences and total time, and no op where XProf names none."""
    stats = kernel_stats(run_reader.load(JAX_MI300))
    copies = [r for r in stats.rows if r.kernel == "__amd_rocclr_copyBuffer.kd"]
    theirs = [r for r in _xprof_rows(JAX_MI300, tmp_path)
              if r["kernel_name"] == "__amd_rocclr_copyBuffer.kd"]
    assert len(copies) == len(theirs) == 1
    assert copies[0].occurrences == theirs[0]["occurrences"] == 35
    assert copies[0].total_us == pytest.approx(theirs[0]["total_duration_us"], abs=1e-3)
    assert copies[0].op == theirs[0]["op_name"] == ""
    fills = [r for r in kernel_stats(run_reader.load(JAX_TE)).rows
             if r.kernel == "__amd_rocclr_fillBufferAligned.kd"]
    assert sum(r.occurrences for r in fills) == 20
    conv = [r for r in stats.rows if r.op == "jit(forward_3d_conv)/conv_general_dilated"]
    assert {r.op_tensor_core_eligible for r in conv} == {True}
    assert [r.kernel_uses_tensor_core for r in conv].count(True) == 1


# --- ranking, pie, CSV, hosts ----------------------------------------------------------------


def test_rows_are_ranked_by_total_time() -> None:
    stats = kernel_stats(run_reader.load(H100_BERT))
    totals = [r.total_us for r in stats.rows]
    assert totals == sorted(totals, reverse=True)
    assert stats.top(3) == stats.rows[:3]
    assert sum(r.percent for r in stats.rows) == pytest.approx(100.0)
    assert stats.total_us == pytest.approx(sum(totals))
    for r in stats.rows:
        assert r.avg_us == pytest.approx(r.total_us / r.occurrences)
        assert r.min_us <= r.avg_us <= r.max_us


def test_pie_has_the_top_kernel_names_and_the_rest() -> None:
    stats = kernel_stats(run_reader.load(H100_BERT))
    pie = stats.pie(3)
    assert len(pie) == 4 and pie[-1].kernel == "Other"
    by_name: dict[str, float] = defaultdict(float)
    for r in stats.rows:
        by_name[r.kernel] += r.total_us
    top = sorted(by_name.values(), reverse=True)
    assert [s.total_us for s in pie[:3]] == pytest.approx(top[:3])
    assert pie[-1].total_us == pytest.approx(sum(top[3:]))
    assert sum(s.percent for s in pie) == pytest.approx(100.0)


def test_to_dict_and_csv() -> None:
    stats = kernel_stats(run_reader.load(H100_BERT))
    data = json.loads(json.dumps(stats.to_dict()))
    assert set(data) == {"total_us", "implausible_launches", "rows", "pie"}
    assert set(data["rows"][0]) == {
        "kernel", "op", "registers_per_thread", "shared_memory_bytes", "block", "grid",
        "op_tensor_core_eligible", "kernel_uses_tensor_core", "occurrences", "total_us",
        "avg_us", "min_us", "max_us", "percent"}
    rows = list(csv.DictReader(io.StringIO(kernel_stats_csv(stats))))
    assert len(rows) == len(stats.rows)
    first, row = rows[0], stats.rows[0]
    assert first["rank"] == "1" and first["kernel_name"] == row.kernel
    assert first["block_dim"] == ",".join(map(str, row.block or ()))
    assert float(first["total_duration_us"]) == pytest.approx(row.total_us, abs=1e-3)
    unknown = kernel_stats_csv(kernel_stats(run_reader.load(MI300_BERT))).splitlines()[1]
    assert next(csv.reader([unknown]))[2:4] == ["", ""]


def test_cpu_only_profiles_have_no_rows() -> None:
    for path in (CPU_ONLY, TPU):
        stats = kernel_stats(run_reader.load(path))
        assert stats.rows == [] and stats.total_us == 0 and stats.pie() == []
        assert kernel_stats_csv(stats).count("\n") == 1


def test_hosts_one_at_a_time_and_merged(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("worker0_step_12.1694128201545", "worker1_step_12.1694128201556"):
        shutil.copy(DLRM / f"{name}.pt.trace.json.gz", run)
    prof = run_reader.load(run)
    assert len(prof.hosts) == 2
    merged = _ours(kernel_stats(prof))
    parts = [_ours(kernel_stats(prof, host)) for host in prof.hosts]
    assert set(merged) == set(parts[0]) | set(parts[1])
    for key, (count, total, low, high) in merged.items():
        mine = [p[key] for p in parts if key in p]
        assert count == sum(m[0] for m in mine)
        assert total == pytest.approx(sum(m[1] for m in mine))
        assert (low, high) == (min(m[2] for m in mine), max(m[3] for m in mine))
    with pytest.raises(StepscopeError, match="No host 'nope'"):
        kernel_stats(prof, "nope")


# --- classification of names and launch details ------------------------------------------


@pytest.mark.parametrize("name, vendor, uses", [
    ("volta_h884gemm_64x64_ldg8_nn", NVIDIA, True),
    ("turing_fp16_s1688cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", NVIDIA, True),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", NVIDIA, True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", NVIDIA, True),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", NVIDIA, True),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align1>", NVIDIA, True),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", NVIDIA, True),
    ("ampere_sgemm_128x64_nn", NVIDIA, False),
    ("volta_sgemm_32x128_nn", NVIDIA, False),
    ("SubTensorOpWithScalar1d", NVIDIA, False),
    ("void at::native::vectorized_elementwise_kernel<4>", NVIDIA, False),
    ("Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0", AMD, True),
    ("kernel_grouped_conv_fwd_xdl_cshuffle_v3", AMD, True),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32", AMD, True),
    ("gemm_fusion_dot.kd", AMD, True),
    ("loop_reduce_fusion.kd", AMD, False),
    ("Im3d2Col.kd", AMD, False),
    ("volta_h884gemm_64x64_ldg8_nn", AMD, False),
    ("volta_h884gemm_64x64_ldg8_nn", UNKNOWN_VENDOR, True),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN", UNKNOWN_VENDOR,
     True),
])
def test_kernel_uses_tensor_core(name: str, vendor: int, uses: bool) -> None:
    assert kernel_uses_tensor_core(name, vendor) is uses


@pytest.mark.parametrize("op, op_type, eligible", [
    ("bert/encoder/layer_0/attention/MatMul", "MatMul", True),
    ("dense/kernel_fused", "_FusedMatMul", True),
    ("model/conv1/Conv2D", "Conv2D", True),
    ("x/BatchMatMulV2", "BatchMatMulV2", True),
    ("gradient_tape/conv/Conv2DBackpropInput", "Conv2DBackpropInput", True),
    ("lstm/CudnnRNNV3", "CudnnRNNV3", True),
    ("jit(f)/jvp(bsd,de->bse)/dot_general", "", True),
    ("jit(forward_3d_conv)/conv_general_dilated", "", True),
    ("aten::addmm", "aten::addmm", True),
    ("aten::cudnn_convolution", "aten::cudnn_convolution", True),
    ("aten::_scaled_dot_product_flash_attention", "", True),
    ("cudnn-conv.1", "", True),
    ("dot.3", "", True),
    ("replica_4/dropout/random_uniform/RandomUniform", "RandomUniform", False),
    ("jit(f)/jvp()/convert_element_type", "", False),
    ("aten::add_", "aten::add_", False),
    ("aten::conv2d", "aten::conv2d", True),
    ("aten::convolution_backward", "", True),
    ("aten::_convert_weight_to_int4pack", "", False),
    ("loop_reduce_fusion.3", "", False),
    ("", "", False),
])
def test_op_tensor_core_eligible(op: str, op_type: str, eligible: bool) -> None:
    assert op_tensor_core_eligible(op, op_type) is eligible


def test_kernel_details_formats() -> None:
    new = parse_kernel_details("regs:32 static_shared:1024 dynamic_shared:512 grid:4,2,1 "
                               "block:128,1,1 occ_pct:50.0")
    assert (new.registers_per_thread, new.shared_memory_bytes) == (32, 1536)
    assert (new.block, new.grid, new.implausible) == ((128, 1, 1), (4, 2, 1), False)
    old = parse_kernel_details("regs:38 shm:0 grid:160,1,1 block:1024,1,1")
    assert (old.registers_per_thread, old.shared_memory_bytes) == (38, 0)
    rocm = parse_kernel_details(" grid:219,40,1 block:256,1,1 private_mem:0 group_mem:49280 "
                                "occ_pct:0")
    assert (rocm.registers_per_thread, rocm.shared_memory_bytes) == (None, 49280)
    assert (rocm.block, rocm.grid) == ((256, 1, 1), (219, 40, 1))
    garbage = parse_kernel_details("regs:0 shm:139940664647776 grid:0,139909901853120,12832 "
                                   "block:12792,485331304448,1")
    assert garbage.implausible
    assert (garbage.shared_memory_bytes, garbage.grid, garbage.block) == (None, None, None)
    assert garbage.registers_per_thread == 0
    bad = parse_kernel_details("regs:-5 grid:1,1 block:x,1,1")
    assert bad.implausible and (bad.registers_per_thread, bad.grid, bad.block) == (None,) * 3
    assert parse_kernel_details("") == parse_kernel_details("occ_pct:0")
    assert parse_dims_list("[16, 15, 1]") == (16, 15, 1)
    assert parse_dims_list("[16, 15]") is None and parse_dims_list("oops") is None


# --- XProf's own kernel_stats on the same files ---------------------------------------------

def _xprof_rows(path: Path, tmp_path: Path) -> list[dict[str, Any]]:
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    return gviz_rows(xprof_tool(path, "kernel_stats", tmp_path / path.stem))


def _by_launch_config(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[float]]:
    out: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        key = (r["kernel_name"], r["block_dim"], r["grid_dim"])
        count, total = r["occurrences"], r["total_duration_us"]
        low, high = r["min_duration_us"], r["max_duration_us"]
        if key in out:
            m = out[key]
            out[key] = [m[0] + count, m[1] + total, min(m[2], low), max(m[3], high)]
        else:
            out[key] = [count, total, low, high]
    return out


@pytest.mark.parametrize("path", XSPACE_FILES, ids=lambda p: p.name[:24])
def test_xspace_agrees_with_xprof(path: Path, tmp_path: Path) -> None:
    theirs = _xprof_rows(path, tmp_path)  # ROCm's copy and fill kernels included
    stats = kernel_stats(run_reader.load(path))
    assert all(r.min_us > 0 for r in stats.rows)  # XProf drops zero-length kernels
    ours = [{"kernel_name": r.kernel, "block_dim": ",".join(map(str, r.block or (1, 1, 1))),
             "grid_dim": ",".join(map(str, r.grid or (1, 1, 1))), "occurrences": r.occurrences,
             "total_duration_us": r.total_us, "min_duration_us": r.min_us,
             "max_duration_us": r.max_us} for r in stats.rows]
    mine, xprof = _by_launch_config(ours), _by_launch_config(theirs)
    assert set(mine) == set(xprof)
    for key, figures in xprof.items():
        assert mine[key] == pytest.approx(figures, abs=2e-3), key

    # Launch figures: ours are XProf's, except what XProf cannot read (None here, 0 there).
    regs = {(r["kernel_name"], r["registers_per_thread"]) for r in theirs}
    assert {(r.kernel, float(r.registers_per_thread)) for r in stats.rows
            if r.registers_per_thread is not None} <= regs
    details = " ".join(e for e in _kernel_details_texts(path))
    if "static_shared" in details:
        assert {(r.kernel, r.shared_memory_bytes) for r in stats.rows} == \
            {(r["kernel_name"], r["shmem_bytes"]) for r in theirs}
    if path in (JAX_MI300, JAX_MI300_LEGACY):  # same ops as XProf: the whole rows agree
        assert {(r.kernel, r.op, r.op_tensor_core_eligible, r.kernel_uses_tensor_core,
                 r.occurrences) for r in stats.rows} == \
            {(r["kernel_name"], r["op_name"], r["is_op_tensor_core_eligible"],
              r["is_kernel_using_tensor_core"], r["occurrences"]) for r in theirs}
    else:  # XProf's rules for the kernels, ours extending them
        uses = {r["kernel_name"] for r in theirs if r["is_kernel_using_tensor_core"]}
        assert uses <= {r.kernel for r in stats.rows if r.kernel_uses_tensor_core}


def _kernel_details_texts(path: Path) -> list[str]:
    out = []
    for plane in read_space(path).planes:
        if plane.name.startswith("/device:GPU:"):
            out.extend(str(e.stats["kernel_details"]) for e in plane_events(plane)
                       if "kernel_details" in e.stats)
    return out


def _built_space(path: Path, kernels: list[tuple[str, dict[str, Any], int]]) -> None:
    """An XSpace with one NVIDIA GPU plane: (kernel name, stats, duration ns) per launch."""
    space = new_space("built")
    gpu = add_plane(space, 1, "/device:GPU:0")
    gpu.add_plane_stat("device_vendor", "Nvidia")
    line = gpu.add_line(7, "Stream #7(Compute)", 1_000)
    for i, (name, stats, duration) in enumerate(kernels):
        gpu.add_event(line, name, 2_000 + 10_000 * i, duration, stats)
    write_space(space, path)


def test_built_nvidia_space_agrees_with_xprof(tmp_path: Path) -> None:
    """TensorFlow op names, an Einsum equation and NVIDIA kernel names, rows as XProf makes
    them (no recorded NVIDIA XSpace names a vendor, so this one is built)."""
    details = "regs:64 static_shared:1024 dynamic_shared:2048 grid:8,4,1 block:128,2,1"
    kernels = [
        ("volta_h884gemm_64x64_ldg8_nn", {"tf_op": "dense/MatMul:MatMul"}, 5_000),
        ("volta_h884gemm_64x64_ldg8_nn", {"tf_op": "dense/MatMul:MatMul"}, 7_000),
        ("volta_sgemm_128x64_nn", {"tf_op": "dense_1/MatMul:MatMul"}, 9_000),
        ("volta_sgemm_128x64_nn", {"tf_op": "attn/einsum/Einsum:Einsum",
                                   "equation": "bij,bjk->bik"}, 4_000),
        ("EigenMetaKernel", {"tf_op": "relu/Relu:Relu"}, 1_000),
        ("EigenMetaKernel", {}, 3_000),
    ]
    path = tmp_path / "built" / "h.xplane.pb"
    _built_space(path, [(n, {**s, "kernel_details": details}, d) for n, s, d in kernels])
    stats = kernel_stats(run_reader.load(path))
    assert {(r.kernel, r.op, r.registers_per_thread, r.shared_memory_bytes,
             ",".join(map(str, r.block or ())), ",".join(map(str, r.grid or ())),
             r.op_tensor_core_eligible, r.kernel_uses_tensor_core, r.occurrences, r.total_us,
             r.min_us, r.max_us) for r in stats.rows} == \
        {(r["kernel_name"], r["op_name"], r["registers_per_thread"], r["shmem_bytes"],
          r["block_dim"], r["grid_dim"], r["is_op_tensor_core_eligible"],
          r["is_kernel_using_tensor_core"], r["occurrences"], r["total_duration_us"],
          r["min_duration_us"], r["max_duration_us"]) for r in _xprof_rows(path, tmp_path)}
    assert [r.total_us for r in stats.rows] == [12.0, 9.0, 4.0, 3.0, 1.0]


def test_gpu_events_without_launch_records_are_kernels(tmp_path: Path) -> None:
    """A profile whose GPU events carry no kernel_details: every non-copy event, no figures."""
    path = tmp_path / "h.xplane.pb"
    _built_space(path, [("my_kernel", {}, 2_000), ("MemcpyH2D", {}, 1_000),
                        ("my_kernel", {}, 4_000)])
    (row,) = kernel_stats(run_reader.load(path)).rows
    assert (row.kernel, row.occurrences, row.total_us, row.min_us, row.max_us) == \
        ("my_kernel", 2, 6.0, 2.0, 4.0)
    assert (row.registers_per_thread, row.shared_memory_bytes, row.block, row.grid) == \
        (None,) * 4


@pytest.mark.parametrize("path", [JAX_MI300, JAX_MI300_LEGACY, JAX_TE], ids=lambda p: p.name[:24])
def test_op_stats_name_xla_kernels_by_their_op_not_the_module_marker(path: Path) -> None:
    """XLA's GPU kernels say "XlaModule:" in tf_op; their op is the name stat (JAX's op)."""
    from stepscope.analysis import op_stats

    marked = [e for plane in read_space(path).planes if plane.name.startswith("/device:GPU:")
              for e in plane_events(plane)
              if str(e.stats.get("tf_op", "")).startswith("XlaModule") and "name" in e.stats]
    named = {e.stats["name"] for e in marked}
    instructions = {e.stats["hlo_op"] for e in marked}
    assert named
    device = [r for r in op_stats(run_reader.load(path, use_cache=False)).rows
              if r.host_or_device == "Device"]
    assert device
    assert not any("XlaModule" in r.name for r in device)
    # The op is the HLO metadata's (as XProf, see test_framework_op_stats_xla), most often one
    # the kernels also name; an instruction without metadata is an op named as itself.
    assert named & {r.name for r in device}
    assert all(r.name in instructions for r in device if r.type == "Unknown")
    assert all(r.type == r.name.rsplit("/", 1)[-1] for r in device if r.name in named)
