"""FLOPs that are right and MFU (issue 31, items 5 and 6).

Expected figures are counted by hand from the shapes the profiles record (HLO shapes of named
ops in the shared XSpace fixtures; Kineto's ``Input Dims`` in the PyTorch traces), not copied
from our own output. Where XProf reports a non-zero figure for the same op it is equalled
(``test_xla.test_gpu_dot_and_convolution_flops_equal_xprof``); where PyTorch counts FLOPs
itself (``with_flops``) ours equal its count.
"""

from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hlo_text import parse_computation
from stepscope.analysis.run_model.model_flops import op_flops
from stepscope.analysis.xla.hlo_cost import cost_of, flops_known, flops_precision, tf32_allowed
from stepscope.analysis.xla.hlo_op_stats import hlo_op_stats
from stepscope.analysis.xla.op_profile import MIN_FLOPS_COVERAGE, flops_coverage, op_profile
from stepscope.analysis.xla.xla_model import OpMetrics
from stepscope.run.loader import open_xla_model
from stepscope.run.run import Run

from conftest import FIXTURES
from workloads import run_script

MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
MI355_TE = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization/"
            "934987a2fc2f.xplane.pb")
BERT_H100 = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
QWEN_H100 = FIXTURES / "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET_MI300 = FIXTURES / "TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz"

pytestmark = pytest.mark.usefixtures("cache_home")


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in hlo_op_stats(open_xla_model(path, use_cache=False)).rows}


# -- XLA on GPU: library calls XProf counts as 0 -------------------------------------------------


def test_library_gemm_and_fused_attention_counted_from_shapes() -> None:
    rows = _rows(MI355_TE)
    # custom-call.1 = __cublas$gemm: bf16[4096,6144] · bf16[2048,6144], lhs contracting
    # dimension 1 (its gemm_backend_config), output bf16[4096,2048]; it ran 5 times.
    gemm = rows["custom-call.1"]
    assert gemm["executions"] == 5
    assert gemm["flops"] == 5 * 2 * 4096 * 2048 * 6144
    # TransformerEngine's fused attention: batch 2, 16 heads, 2048 × 2048, head sizes 128,
    # causal (mask_type 2): forward 2·b·h·sq·skv·(dqk+dv) / 2, backward 2.5 × that. Each
    # execution runs several kernels (a backward run: 3 kernels and 2 fills), and ran 5 times.
    forward = 2 * 2 * 16 * 2048 * 2048 * (128 + 128) / 2
    assert rows["te_fused_attn_forward_ffi.10"]["occurrences"] == 10
    assert rows["te_fused_attn_forward_ffi.10"]["executions"] == 5
    assert rows["te_fused_attn_forward_ffi.10"]["flops"] == 5 * forward
    assert rows["te_fused_attn_backward_ffi.12"]["occurrences"] == 25
    assert rows["te_fused_attn_backward_ffi.12"]["flops"] == 5 * 2.5 * forward
    # A reduce fusion: reduce f32[2,2,2048,3,16,128] → [2,2048,3,16,128] with an add, then a
    # convert of the output: (input − output elements) + output elements, once each run.
    out = 2 * 2048 * 3 * 16 * 128
    assert rows["loop_reduce_fusion.1"]["flops"] == 5 * ((2 * out - out) + out)
    # Nothing left unknown on this run: the headline counts the whole busy time.
    profile = op_profile(open_xla_model(MI355_TE, use_cache=False)).to_dict()
    assert profile["flops_coverage"] == pytest.approx(1.0)
    assert profile["flops_note"] == ""


def test_convolution_counted_once_per_execution_not_per_kernel() -> None:
    rows = _rows(MI300)
    conv = rows["cudnn-conv.1"]
    # MIOpen runs an im2col kernel and a GEMM per convolution: 8 devices × 5 GEMMs (device 0's
    # first im2col fell before the capture), 79 kernels.
    assert (conv["occurrences"], conv["executions"]) == (79, 40)
    # bf16[1,16,32,60,104] ⊛ bf16[5120,16,1,2,2], stride = kernel, padding only adds holes:
    # each input element meets each output feature once.
    assert conv["flops"] == 40 * 2 * 5120 * (16 * 32 * 60 * 104)


def test_headline_says_when_unknown_flops_hold_most_time() -> None:
    def op(name: str, self_ps: int, known: bool) -> OpMetrics:
        return OpMetrics("1", "m", name, "custom-call", 1, self_ps, self_ps, 1e9 if known
                         else 0.0, 0.0, known, True)

    coverage, note = flops_coverage([op("gemm", 30, True), op("ffi_kernel", 70, False)])
    assert coverage == pytest.approx(0.3) and coverage < MIN_FLOPS_COVERAGE
    assert "30 % of the device's busy time" in note and "ffi_kernel" in note
    assert flops_coverage([op("gemm", 60, True), op("ffi_kernel", 40, False)])[1] == ""
    assert flops_coverage([]) == (None, "")


# -- XLA on the CPU, recorded here ---------------------------------------------------------------

JAX_ATTENTION = """
import sys, jax, jax.numpy as jnp
@jax.jit
def step(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v).sum() + jnp.sin(q).sum()
q = jnp.ones((2, 4, 64, 32)); k = jnp.ones((2, 4, 64, 32)); v = jnp.ones((2, 4, 64, 32))
step(q, k, v).block_until_ready()
with jax.profiler.trace(sys.argv[1]):
    for i in range(4):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            step(q, k, v).block_until_ready()
"""


@pytest.fixture(scope="module")
def jax_attention(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("jax_attention")
    run_script(JAX_ATTENTION, str(logdir))
    return next(logdir.rglob("*.xplane.pb"))


def test_jax_attention_flops_and_mfu(jax_attention: Path) -> None:
    model = open_xla_model(jax_attention, use_cache=False)
    ops = list(model.ops)
    # Two einsums, each 2·b·h·64·64·32 per step, over 4 steps (inside XLA:CPU's fusions).
    dots = sum(f.flops * o.executions for o in ops for f in o.fused if f.opcode == "dot")
    assert dots == 4 * 2 * (2 * 2 * 4 * 64 * 64 * 32)
    assert sum(o.flops for o in ops) > dots  # and the softmax's arithmetic, the sums
    # sin and exp are transcendentals, counted apart: sin over q, exp over the scores.
    assert sum(o.transcendentals for o in ops) == 4 * (2 * 4 * 64 * 32 + 2 * 4 * 64 * 64)
    assert all(o.flops == 0 for o in ops if o.name == "wrapped_sine")
    # MFU against a peak we give (a CPU has none in the table): the model FLOPs of each
    # step over its time and that peak.
    run = Run.open(jax_attention, cache=False)
    unknown = run.overview().data["mfu"]
    assert unknown["mfu"] is None and "peak" in unknown["unknown"]
    data = run.overview(peak_tflops=0.5).data["mfu"]
    host = next(iter(data["hosts"].values()))
    steps = {s["step"]: s for s in host["steps"]}
    assert set(steps) == {0, 1, 2, 3}
    assert host["peak_source"] == "given" and host["devices"] == 1
    for s in steps.values():
        assert s["model_tflop"] * 1e12 == pytest.approx(sum(o.flops for o in ops) / 4,
                                                        rel=1e-9)
        assert s["mfu"] == pytest.approx(s["model_tflop"] / (s["ms"] / 1e3) / 0.5, rel=1e-9)


# -- PyTorch on GPU: the shapes of real traces --------------------------------------------------


def _profiler_step_ms(path: Path) -> list[float]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e["dur"] / 1e3 for e in events if e.get("cat") == "user_annotation"
            and str(e.get("name")).startswith("ProfilerStep#")]


def test_pytorch_bert_h100_model_flops_and_mfu() -> None:
    # bert-small inference, bf16, sequence 141: 17 linears 512→512, 4 of 512→2048, 4 of
    # 2048→512, the 512→30522 head, and 4 attentions of 8 heads × 64, not causal.
    linears = (17 * 2 * 141 * 512 * 512 + 4 * 2 * 141 * 512 * 2048 + 4 * 2 * 141 * 2048 * 512
               + 2 * 141 * 512 * 30522)
    attention = 4 * 2 * 1 * 8 * 141 * 141 * (64 + 64)
    data = Run.open(BERT_H100, cache=False).overview().data["mfu"]
    host = next(iter(data["hosts"].values()))
    assert host["flops_source"] == "PyTorch op shapes"
    assert host["precision"] == "bf16" and host["peak_tflops"] == 989.0
    assert "H100" in host["peak_source"]
    [step] = host["steps"]
    assert step["model_tflop"] * 1e12 == linears + attention
    [ms] = _profiler_step_ms(BERT_H100)
    assert step["ms"] == pytest.approx(ms, rel=1e-9)
    assert data["mfu"] == pytest.approx((linears + attention) / (ms / 1e3) / 989e12, rel=1e-9)
    # The peak a user gives wins.
    given = Run.open(BERT_H100, cache=False).overview(peak_tflops=100).data["mfu"]
    assert given["mfu"] == pytest.approx(data["mfu"] * 9.89, rel=1e-9)


def test_pytorch_causal_attention_and_convolutions_counted() -> None:
    # Qwen's attention is causal (is_causal=True in Concrete Inputs): half the square.
    assert op_flops("aten::scaled_dot_product_attention",
                    [[16, 16, 559, 64]] * 3 + [[]] * 5,
                    ["", "", "", "", "0.", "True", "0.125", "False"]) \
        == 2 * 16 * 16 * 559 * 559 * 128 / 2
    data = Run.open(QWEN_H100, cache=False).overview().data["mfu"]
    assert data["mfu"] is not None and 0 < data["mfu"] < 1
    # ResNet on MI300X: its convolutions (forward conv2d and convolution_backward) count.
    resnet = Run.open(RESNET_MI300, cache=False).overview().data["mfu"]
    host = next(iter(resnet["hosts"].values()))
    assert host["device"].startswith("AMD Instinct MI300X") and host["peak_tflops"] == 1307.4
    assert len(host["steps"]) == 3 and all(s["mfu"] for s in host["steps"])


def test_conv_and_matmul_shapes_by_hand() -> None:
    # conv2d [8,3,32,32] ⊛ [16,3,3,3], stride 2, padding 1 → [8,16,16,16]
    assert op_flops("aten::conv2d", [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []],
                    ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]) \
        == 2 * 8 * 16 * 16 * 16 * 3 * 3 * 3
    # grouped (depthwise) conv: weight [32,1,3,3], groups 32, padding "same"
    assert op_flops("aten::conv2d", [[1, 32, 10, 10], [32, 1, 3, 3], [], [], [], [], []],
                    ["", "", "", "[1, 1]", "\"same\"", "[1, 1]", "32"]) \
        == 2 * 1 * 32 * 10 * 10 * 1 * 3 * 3
    # without its scalar arguments a convolution's output size is unknown: not guessed
    assert op_flops("aten::conv2d", [[8, 3, 32, 32], [16, 3, 3, 3], [16]], []) is None
    assert op_flops("aten::conv2d", [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []],
                    ["", "", "", "[2, x]", "[1, 1]", "[1, 1]", "1"]) is None
    assert op_flops("aten::bmm", [[4, 8, 16], [4, 16, 32]], []) == 2 * 4 * 8 * 32 * 16
    assert op_flops("aten::matmul", [[3, 1, 8, 16], [5, 16, 2]], []) == 2 * 15 * 8 * 2 * 16
    assert op_flops("aten::addmm", [[32], [4, 16], [16, 32], [], []], []) == 2 * 4 * 32 * 16
    assert op_flops("aten::mm", [[4, 16], [17, 32]], []) is None  # mismatched: not a matmul
    assert op_flops("aten::linear", [["x"], [3, 3]], []) is None


# -- PyTorch on the CPU, recorded here ----------------------------------------------------------

TORCH_PROGRAM = textwrap.dedent("""
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 128)
    conv = torch.nn.Conv2d(3, 8, 3, stride=1, padding=1)
    x, img = torch.randn(32, 64), torch.randn(4, 3, 16, 16)
    q = torch.randn(2, 4, 32, 16)

    def ready(prof):
        prof.export_chrome_trace(sys.argv[1] + "/trace.pt.trace.json")
        flops = {e.key: e.flops for e in prof.key_averages() if e.flops}
        open(sys.argv[1] + "/flops.json", "w").write(__import__("json").dumps(flops))

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                                  with_flops=True, on_trace_ready=ready,
                                  schedule=schedule(wait=0, warmup=1, active=3,
                                                    repeat=1)) as prof:
        for _ in range(4):
            lin(x); conv(img)
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            prof.step()
""")


def test_pytorch_cpu_run_model_flops_equal_hand_and_pytorch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    run_script(TORCH_PROGRAM, str(tmp_path))
    linear = 2 * 32 * 128 * 64
    conv = 2 * 4 * 8 * 16 * 16 * 3 * 3 * 3
    attention = 2 * 2 * 4 * 32 * 32 * (16 + 16) / 2
    # PyTorch's own counts (with_flops) over the 3 active steps, where it has one.
    theirs = json.loads((tmp_path / "flops.json").read_text())
    assert theirs["aten::addmm"] == 3 * linear
    assert theirs["aten::conv2d"] == 3 * conv
    run = Run.open(tmp_path / "trace.pt.trace.json", cache=False)
    data = run.overview(peak_tflops=0.25).data["mfu"]
    host = next(iter(data["hosts"].values()))
    assert host["precision"] == "fp32" and host["peak_source"] == "given"
    assert len(host["steps"]) == 3
    for s in host["steps"]:
        assert s["model_tflop"] * 1e12 == pytest.approx(linear + conv + attention, rel=1e-12)
        assert s["mfu"] == pytest.approx(s["model_tflop"] / (s["ms"] / 1e3) / 0.25, rel=1e-9)
    total_s = sum(s["ms"] for s in host["steps"]) / 1e3
    assert data["mfu"] == pytest.approx(3 * (linear + conv + attention) / total_s / 0.25e12,
                                        rel=1e-9)
    # Without a peak (a CPU is in no table) MFU is unknown, and says why.
    plain = run.overview().data["mfu"]
    assert plain["mfu"] is None and "--peak-tflops" in plain["unknown"]


def test_cli_report_json_and_pod_carry_mfu(capsys: Any) -> None:
    from stepscope.cli import main

    assert main(["report", str(BERT_H100), "--json", "--no-cache", "--peak-tflops", "989"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mfu"]["mfu"] is not None and data["mfu"]["peak_given_tflops"] == 989.0
    assert main(["pod", str(BERT_H100), "--json", "--no-cache"]) == 0
    pod = json.loads(capsys.readouterr().out)
    [host] = pod["mfu"]["hosts"].values()
    assert host["mfu"] == pytest.approx(data["mfu"]["mfu"], rel=1e-9)
    assert main(["report", str(BERT_H100), "--no-cache"]) == 0
    assert "MFU " in capsys.readouterr().out
    with pytest.raises(Exception, match="peak_tflops"):
        Run.open(BERT_H100, cache=False).tool("overview_page", peak_tflops="-3")


def test_docs_list_every_device_of_the_peaks_table() -> None:
    from stepscope.analysis.xla.device_peaks import table_rows

    doc = (Path(__file__).parent.parent / "docs" / "accelerators.md").read_text()
    for peaks in table_rows():
        row = next((ln for ln in doc.splitlines() if ln.startswith(f"| {peaks.name} |")), "")
        assert row, peaks.name
        assert peaks.source in row
        for key, value in peaks.tflops.items():
            assert f"{value:g}" in row, (peaks.name, key)


def test_hostile_shapes_and_configs_are_unknown_not_errors() -> None:
    from stepscope.analysis.run_model.model_flops import _json_list
    from stepscope.analysis.xla.hlo_cost import _gemm_contracting, _te_attention_flops

    assert _json_list("[" * 60_000) == [] and _json_list("{}") == [] and _json_list(None) == []
    assert op_flops("aten::mm", [[-4, 16], [16, 32]], []) is None
    assert op_flops("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3]],
                    ["", "", "", "[" * 5000, "[0, 0]", "[1, 1]", "1"]) is None
    assert op_flops("aten::scaled_dot_product_attention", [[1, 2, 3]] * 3, []) is None
    assert _gemm_contracting("[" * 60_000) is None and _gemm_contracting("{}") is None
    assert _te_attention_flops("{attn_heads = 16 : i64}", backward=False) == 0.0


def test_tpu_mfu_from_the_profiles_model_flops_and_stated_peak() -> None:
    tpu = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
    model = open_xla_model(tpu, use_cache=False)
    # Every op's FLOPs here are the profile's (flops and model_flops stats), none estimated.
    assert not any(o.flops_estimated for o in model.ops)
    data = Run.open(tpu, cache=False).overview().data["mfu"]
    [host] = data["hosts"].values()
    assert host["flops_source"] == "XLA programs (the profile's model FLOPs)"
    assert (host["peak_tflops"], host["peak_source"], host["devices"]) == (918.0, "profile", 4)
    in_steps = sum(s["model_tflop"] for s in host["steps"])
    assert in_steps == pytest.approx(host["model_tflop"], rel=1e-12)
    assert in_steps * 1e12 <= sum(o.model_flops for o in model.ops) * (1 + 1e-12)
    assert data["mfu"] == pytest.approx(
        host["model_tflop"] / (host["step_ms"] / 1e3) / (918.0 * 4), rel=1e-9)


# -- XLA's cuDNN fused attention (``__cudnn$fmha…`` custom calls) ------------------------------

# The forward and backward calls of XLA's flash-attention test with a padding mask
# (openxla/xla, xla/service/gpu/tests/gpu_fused_mha_test.cc): q, k, v bf16[4,1024,4,64]
# ([batch, seq, heads, head size]), results [batch, heads, seq, head size]. The configs keep
# the fields the count reads, in the form XLA prints them (long layout fields cut).
# cuDNN fused attention calls in their HLO text form (the file says where each comes from):
# q, k, v bf16[4,1024,4,64] ([batch, seq, heads, head size]), results [batch, heads, seq, head
# size].
FMHA_HLO = Path(__file__).parent / "data" / "cudnn_fmha.hlo"


def test_cudnn_fused_attention_counted_from_shapes() -> None:
    module = parse_computation(FMHA_HLO.read_text())

    def flops(name: str) -> float:
        inst = module.instruction(name)
        assert inst is not None and flops_known(inst)
        return cost_of(module, inst).flops

    # Q·Kᵀ and P·V: 2·(b·h)·sq·skv·(dqk + dv), b 2, h 8, sq = skv 512, head sizes 96.
    forward = 2 * (2 * 8) * 512 * 512 * (96 + 96)
    assert flops("padded.6") == forward  # a padding mask: every pair counts
    assert flops("padded_bwd.10") == 2.5 * forward  # backward, flash convention
    assert flops("causal.11") == forward / 2
    assert flops("causal_bwd.12") == 2.5 * forward / 2
    assert flops("bias_dropout.13") == forward  # bias and dropout: no change to the GEMMs
    # The older form: [batch, heads, seq, head size] operands, K transposed.
    assert flops("old_form") == 2 * (3 * 4) * 256 * 256 * (32 + 32)
    assert flops("broken.9") == 0.0  # unreadable: no count, not an error
    call = module.instruction("padded.6")
    assert call is not None and flops_precision(module, call) == "bf16"


# -- TF32: the peak of FP32 work that ran on TF32 tensor cores ---------------------------------

A100_TF32 = (FIXTURES / "HolisticTraceAnalysis/tests/data/negative_queue_length_values_check/"
             "rank0.json.gz")


def test_fp32_work_on_tf32_kernels_uses_the_tf32_peak() -> None:
    """An A100 PyTorch run in FP32 whose GEMMs are CUTLASS's ``tensorop_s1688gemm`` (TF32)
    kernels: MFU against 156 TF32 TFLOP/s, not the 19.5 FP32 ones, and it says why."""
    data = Run.open(A100_TF32, cache=False).overview().data["mfu"]
    [host] = data["hosts"].values()
    assert host["device"] == "NVIDIA A100-SXM4-80GB" and host["precision"] == "fp32"
    assert (host["peak_precision"], host["peak_tflops"]) == ("tf32", 156.0)
    assert any("TF32 peak is used" in n for n in host["notes"])
    assert data["mfu"] == pytest.approx(
        host["model_tflop"] / (host["step_ms"] / 1e3) / (156.0 * host["devices"]), rel=1e-9)


def test_tf32_share_reads_kernel_names() -> None:
    from stepscope.analysis.tools.mfu import tf32_share

    tf32 = [("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1>(…)", 30),
            ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", 10)]
    simt = [("ampere_sgemm_128x64_nn", 60)]
    half = [("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64>(…)", 9)]
    assert tf32_share(tf32 + simt + half) == pytest.approx(0.4)
    assert tf32_share(tf32 + half) == 1.0
    assert tf32_share(half) is None and tf32_share([]) is None


JAX_PRECISIONS = """
import sys, jax, jax.numpy as jnp
@jax.jit
def step(a, b):
    return (a @ b).sum() + jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST).sum()
a = jnp.ones((64, 64)); b = jnp.ones((64, 64))
step(a, b).block_until_ready()
with jax.profiler.trace(sys.argv[1]):
    step(a, b).block_until_ready()
"""


def test_xla_precision_config_says_where_f32_dots_may_run_tf32(tmp_path: Path) -> None:
    """XLA on NVIDIA GPUs runs f32 dots at DEFAULT precision (or a TF32 algorithm) as TF32,
    at HIGHEST as FP32: read from the HLO proto of a recorded run (its ``precision_config``)
    and from cuBLAS calls' backend configs."""
    run_script(JAX_PRECISIONS, str(tmp_path))
    model = open_xla_model(next(tmp_path.rglob("*.xplane.pb")), use_cache=False)
    dots = {next(f.name for f in o.fused if f.opcode == "dot"): o.tf32
            for o in model.ops if any(f.opcode == "dot" for f in o.fused)}
    assert sorted(dots.values()) == [False, True]  # one DEFAULT dot, one HIGHEST
    assert all(o.tf32 is None for o in model.ops if not any(f.opcode == "dot" for f in o.fused))
    module = parse_computation(
        (Path(__file__).parent / "data" / "cublas_gemm_precision.hlo").read_text())
    found = {}
    for name in ("default.1", "highest.2", "tf32alg.3", "bf16.4"):
        inst = module.instruction(name)
        assert inst is not None
        found[name] = tf32_allowed(module, inst)
    assert found == {"default.1": True, "highest.2": False, "tf32alg.3": True, "bf16.4": None}


def test_fp32_or_tf32_peak_choice() -> None:
    from stepscope.analysis.tools.mfu import fp32_or_tf32
    from stepscope.analysis.xla.device_peaks import lookup

    h100, mi300, v100 = (lookup("NVIDIA H100 80GB HBM3"), lookup("AMD Instinct MI300X"),
                         lookup("Tesla V100-SXM2-16GB"))
    assert h100 is not None and mi300 is not None and v100 is not None
    # Kernel names are the direct evidence, either way.
    assert fp32_or_tf32(h100, 0.9, None)[0] and not fp32_or_tf32(h100, 0.2, 1.0)[0]
    # XLA's precision config counts where no kernel tells, on NVIDIA parts only.
    use, note = fp32_or_tf32(h100, None, 0.75)
    assert use and "75% of the f32 model FLOPs" in note
    assert not fp32_or_tf32(mi300, None, 1.0)[0]
    use, note = fp32_or_tf32(h100, None, None)
    assert not use and note.startswith("FP32 peak used: nothing shows TF32")
    assert fp32_or_tf32(v100, 1.0, 1.0) == (False, "")  # no TF32 units: nothing to choose


@pytest.mark.parametrize("value", ["abc", "", "nan", "inf", "1e400", "0", "-1", "1e9"])
def test_absurd_peak_on_the_command_line_is_one_line(value: str, capsys: Any) -> None:
    """Text, empty, not-a-number, infinite, zero, negative and absurdly large peaks: exit 2
    and one sentence, never a traceback or an MFU."""
    from stepscope.cli import main

    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(main(["report", str(BERT_H100), "--json", "--peak-tflops", value]))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "peak" in err and "Traceback" not in err
