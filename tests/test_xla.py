"""XLA programs: HLO decoding, the op profile, HLO op stats and roofline, against XProf's
``op_profile``/``hlo_stats`` on real TPU and GPU profiles, and against the raw events of JAX
and TensorFlow ``jit_compile`` programs recorded on CPU here (XProf has no op profile of a
CPU-only run)."""

from __future__ import annotations

import json
import random
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.xla.hlo_cost import cost_of
from stepscope.analysis.xla.hlo_op_stats import CSV_COLUMNS, hlo_op_stats, hlo_op_stats_csv
from stepscope.analysis.xla.op_profile import op_profile
from stepscope.analysis.xla.roofline import roofline
from stepscope.analysis.xla.xla_model import XlaModel, build_xla_model
from stepscope.cli import main
from stepscope.errors import ProfileFormatError
from stepscope.formats.hlo_proto import decode_hlo_proto
from stepscope.formats.xplane_proto import XSpace
from stepscope.formats.xspace_to_tables import load_xspace
from stepscope.formats.xspace_to_xla import load_xla, may_hold_xla
from stepscope.run.loader import open_xla_model

from conftest import FIXTURES
from workloads import run_script
from xprof_reference import xprof_tool

TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
MI300_LEGACY = next((FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_legacy")
                    .glob("*.xplane.pb"))
MI355_TE = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization/"
            "934987a2fc2f.xplane.pb")
TF_GPU = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
XLA_FIXTURES = [TPU, MI300, MI300_LEGACY, MI355_TE]

JAX_PROGRAM = """
import sys, jax, jax.numpy as jnp
@jax.jit
def step(w, x, k):
    y = jnp.tanh(x @ w)
    z = jax.lax.conv_general_dilated(y[None, None], k, (1, 1), "SAME")
    return w - 0.01 * (y.sum() + z.sum())
w, x, k = jnp.ones((128, 128)), jnp.ones((64, 128)), jnp.ones((2, 1, 3, 3))
w = step(w, x, k).block_until_ready()
with jax.profiler.trace(sys.argv[1]):
    for i in range(5):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = step(w, x, k).block_until_ready()
"""

TF_PROGRAM = """
import sys, tensorflow as tf
w = tf.Variable(tf.ones((64, 64)))
@tf.function(jit_compile=True)
def step(x):
    return tf.reduce_sum(tf.tanh(tf.matmul(x, w)) * 2.0 + 1.0)
x = tf.ones((32, 64))
step(x)
tf.profiler.experimental.start(sys.argv[1])
for i in range(5):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        step(x).numpy()
tf.profiler.experimental.stop()
"""

pytestmark = pytest.mark.usefixtures("cache_home")


def _xprof(path: Path, tool: str, tmp: Path) -> Any:
    return xprof_tool(path, tool, tmp)


def _xprof_hlo_stats(path: Path, tmp: Path) -> dict[tuple[str, str], dict[str, Any]]:
    table = _xprof(path, "hlo_stats", tmp)
    ids = [c["id"] for c in table["cols"]]
    out = {}
    for row in table["rows"]:
        v = dict(zip(ids, (c.get("v") for c in row["c"]), strict=True))
        out[(str(v["program_id"]), str(v["hlo_op_name"]))] = v
    return out


def _ours(path: Path) -> tuple[XlaModel, dict[tuple[str, str], dict[str, Any]]]:
    model = open_xla_model(path, use_cache=False)
    return model, {(r["program_id"], r["name"]): r for r in hlo_op_stats(model).rows}


# -- against XProf, on real accelerator profiles -------------------------------------------------


@pytest.mark.parametrize("path", XLA_FIXTURES, ids=lambda p: p.parent.name)
def test_per_op_times_categories_and_counts_equal_xprof(path: Path, tmp_path: Path) -> None:
    theirs = _xprof_hlo_stats(path, tmp_path)
    model, ours = _ours(path)
    assert set(ours) == set(theirs)
    cat_theirs: dict[str, float] = defaultdict(float)
    cat_ours: dict[str, float] = defaultdict(float)
    for key, t in theirs.items():
        o = ours[key]
        assert o["occurrences"] == t["occurrences"], key
        assert o["total_ms"] * 1e3 == pytest.approx(t["total_time"], rel=1e-9), key
        assert o["self_ms"] * 1e3 == pytest.approx(t["total_self_time"], rel=1e-9), key
        assert o["category"] == t["category"], key
        cat_theirs[t["category"]] += t["total_self_time"]
        cat_ours[o["category"]] += o["self_ms"] * 1e3
    profile = op_profile(model).to_dict()
    by_name = {c["name"]: c["time_ms"] * 1e3 for c in profile["categories"]}
    for cat, us in cat_theirs.items():
        assert by_name[cat] == pytest.approx(us, rel=0.01)


@pytest.mark.parametrize("path", XLA_FIXTURES, ids=lambda p: p.parent.name)
def test_idle_and_total_equal_xprof_op_profile(path: Path, tmp_path: Path) -> None:
    theirs = _xprof(path, "op_profile", tmp_path)["byProgram"]
    idle = next(c for c in theirs["children"] if c["name"] == "IDLE")
    ours = op_profile(open_xla_model(path, use_cache=False)).to_dict()
    assert ours["total_ms"] * 1e9 == pytest.approx(theirs["metrics"]["rawTime"], rel=1e-9)
    assert ours["idle_ms"] * 1e9 == pytest.approx(idle["metrics"]["rawTime"], rel=1e-9)


def test_tpu_flops_and_utilisation_equal_xprof(tmp_path: Path) -> None:
    """The TPU profile records FLOPs and its peak: rates and utilisation agree exactly."""
    theirs = _xprof_hlo_stats(TPU, tmp_path / "stats")
    model, ours = _ours(TPU)
    for key, t in theirs.items():
        o = ours[key]
        assert not o["flops_estimated"]
        assert (o["gflops_per_s"] or 0.0) == pytest.approx(t["model_flop_rate"], rel=1e-6)
        gib = o["gbytes_per_s"] or 0.0  # GiB/s, as XProf reports it
        assert gib == pytest.approx(t["measured_memory_bw"], rel=1e-6)
        assert (o["operational_intensity"] or 0.0) == pytest.approx(
            t["operational_intensity"], rel=1e-6)
        assert {"HBM": "memory", "Compute": "compute"}.get(t["bound_by"]) == o["bound_by"]
    root = _xprof(TPU, "op_profile", tmp_path / "profile")["byProgram"]["metrics"]
    profile = op_profile(model).to_dict()
    assert profile["device"] == {"name": "TPU v6 Lite", "peak_tflops": 918.0,
                                 "peak_gbytes_per_s": pytest.approx(1637.993152512e9 / 2**30),
                                 "peak_source": "profile", "peak_bandwidth_source": "profile",
                                 "peak_tflops_by_precision": {"bf16": 918.0}, "count": 4}
    # XProf's whole-profile FLOPS utilisation is over busy (normalised) time, as ours.
    assert profile["flops_utilization"] * 100 == pytest.approx(root["flops"] * 100, abs=0.01)
    # TPU layouts are tiled: (8,128) tiles fit these shapes exactly; a 3×5 array would not.
    assert {o["padding_percent"] for o in profile["ops"] if o["category"] == "loop fusion"} \
        == {0.0}
    from stepscope.model.hlo import Shape

    assert Shape("f32", [3, 5], [], [1, 0], [[8, 128]]).padded_elements() == 8 * 128
    fusion = next(c for c in profile["categories"] if c["name"] == "loop fusion")
    expected = 3 * 400 * 1342177280 / (fusion["time_ms"] / 1e3) / 918e12
    assert fusion["flops_utilization"] == pytest.approx(expected, rel=1e-9)


def test_gpu_dot_and_convolution_flops_equal_xprof(tmp_path: Path) -> None:
    """On GPU the profile has no FLOPs: ours are estimated from the HLO, and for convolutions
    (padding taps excluded) and dots they equal XLA's cost analysis that XProf shows, per
    execution (XProf multiplies them by kernels: MIOpen's convolution runs an im2col kernel
    and a GEMM each time, and XProf counts it twice)."""
    for path in (MI300, MI300_LEGACY, MI355_TE):
        theirs = _xprof_hlo_stats(path, tmp_path / path.parent.name)
        _, ours = _ours(path)
        checked = 0
        for key, t in theirs.items():
            o = ours[key]
            assert o["flops_estimated"]
            if o["category"] in ("convolution", "dot") or o["name"].startswith(
                    ("cudnn-conv", "gemm_fusion_dot")):
                per_kernel = o["gflops_per_s"] * o["occurrences"] / o["executions"]
                assert per_kernel == pytest.approx(t["model_flop_rate"], rel=1e-3), key
                checked += 1
        assert checked


def test_gpu_device_identified_and_peaks_sourced() -> None:
    profile = op_profile(open_xla_model(MI300, use_cache=False)).to_dict()
    assert profile["device"]["name"] == "AMD Instinct MI300X"
    assert profile["device"]["peak_tflops"] == 1307.4
    assert "MI300X" in profile["device"]["peak_source"]
    conv = next(o for o in profile["ops"] if o["name"] == "cudnn-conv.1")
    assert conv["padding_percent"] is None  # GPU layouts are not tiled
    assert conv["flops_utilization"] == pytest.approx(
        conv["gflops_per_s"] / 1307.4e3, rel=1e-9)
    assert conv["bound_by"] == "compute"
    assert 'custom_call_target="__cudnn$convForward"' in conv["expression"]
    # A fusion expands to the ops it runs.
    fusion = next(o for o in profile["ops"] if o["name"] == "input_transpose_fusion")
    assert [f["opcode"] for f in fusion["fused"]] == ["bitcast", "transpose"]
    # The MI355-class device (gfx950) is not in the table: its peak is unknown, not guessed.
    unknown = op_profile(open_xla_model(MI355_TE, use_cache=False)).to_dict()
    assert unknown["device"]["peak_tflops"] is None
    assert unknown["flops_utilization"] is None
    assert all(o["flops_utilization"] is None for o in unknown["ops"])
    assert any("Unknown peak" in n for n in unknown["notes"])


def test_profiles_without_xla_have_no_xla_data() -> None:
    assert not may_hold_xla(TF_GPU)
    assert not load_xla(TF_GPU).ops
    assert may_hold_xla(TPU) and may_hold_xla(MI300)


# -- HLO decoding ---------------------------------------------------------------------------------


def _hlo_protos(path: Path) -> dict[str, bytes]:
    space = XSpace.FromString(path.read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:metadata")
    out = {}
    for md in plane.event_metadata.values():
        for stat in md.stats:
            if plane.stat_metadata[stat.metadata_id].name == "Hlo Proto":
                out[md.name] = stat.bytes_value
    return out


def test_hlo_proto_decodes_modules_computations_and_instructions() -> None:
    module = decode_hlo_proto(_hlo_protos(MI300)["jit_forward_3d_conv(15)"])
    assert module.name == "jit_forward_3d_conv"
    assert module.id == 15
    conv = module.instruction("cudnn-conv.1")
    assert conv is not None and conv.opcode == "custom-call"
    assert conv.shape.text() == "(bf16[1,5120,34,31,53]{4,3,2,1,0}, u8[7150336]{0})"
    assert [w.size for w in conv.window] == [1, 2, 2]
    assert [w.padding_low for w in conv.window] == [1, 1, 1]
    assert conv.conv_dims is not None and conv.conv_dims.input_spatial == [2, 3, 4]
    assert conv.op_name == "jit(forward_3d_conv)/conv_general_dilated"
    fusion = module.instruction("input_transpose_fusion")
    assert fusion is not None and fusion.fusion_kind == "kInput"
    called = module.computation(fusion.called_computation_ids[0])
    assert called is not None and called.is_fusion
    # Convolution FLOPs count only taps that land on real input: 2·5120·16·(32·60·104).
    assert cost_of(module, conv).flops == 2 * 5120 * 16 * 32 * 60 * 104
    tpu = decode_hlo_proto(_hlo_protos(TPU)["jit_f(12190760917235803885)"])
    inst = tpu.instruction("copy-done.1")
    assert inst is not None and inst.shape.text() == "f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)}"


def test_hlo_proto_hostile_bytes_are_one_clear_error() -> None:
    good = _hlo_protos(MI300)["jit_forward_3d_conv(15)"]
    rng = random.Random(7)
    for data in (b"", good[: len(good) // 2], bytes(rng.randrange(256) for _ in range(4000)),
                 b"\x0a\xff\xff\xff\xff\x0f", b"\x0a" * 5000):
        try:
            module = decode_hlo_proto(data, "test")
        except ProfileFormatError as err:
            assert str(err).startswith("test:")
        else:  # some random bytes parse: what comes out is still a module
            assert isinstance(module.computations, list)


# -- CPU programs recorded here: per-op times against the raw events -----------------------------


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("jax_xla")
    run_script(JAX_PROGRAM, str(logdir))
    return next(logdir.rglob("*.xplane.pb"))


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("tf_xla")
    run_script(TF_PROGRAM, str(logdir))
    return next(logdir.rglob("*.xplane.pb"))


def _raw_op_times(path: Path) -> dict[str, tuple[int, int]]:
    """hlo_op → (executions, total ns), read from the event table (another path)."""
    table = load_xspace(path)
    rows, codes, values = table.text_stat("hlo_op")
    out: dict[str, tuple[int, int]] = {}
    for v in range(len(values)):
        mine = rows[codes == v]
        out[values[v]] = (len(mine), int(table.duration_ns[mine].sum()))
    return out


@pytest.mark.parametrize("which", ["jax", "tf"])
def test_cpu_programs_per_op_times_equal_raw_events(which: str, request: Any,
                                                    tmp_path: Path) -> None:
    path = request.getfixturevalue(f"{which}_run")
    raw = _raw_op_times(path)
    model = open_xla_model(path, use_cache=False)
    rows = {r["name"]: r for r in hlo_op_stats(model).rows}
    assert set(rows) == set(raw)
    for name, (n, ns) in raw.items():
        assert rows[name]["occurrences"] == n
        assert rows[name]["total_ms"] == pytest.approx(ns / 1e6, abs=1e-6)  # ps vs ns rounding
    # XProf has no op profile of a CPU-only run: nothing to compare there.
    assert _xprof(path, "op_profile", tmp_path)["byProgram"].get("children", []) == []
    # The program's HLO was found: every op has its text, FLOPs are estimated, not recorded.
    assert all(r["expression"].startswith("%" + r["name"]) for r in rows.values())
    assert all(r["flops_estimated"] for r in rows.values())
    # Steps: each op's per-step executions add up to its total.
    assert model.steps == [0, 1, 2, 3, 4]
    for op in model.ops:
        assert sum(s[1] for s in op.steps) == op.occurrences


def test_cpu_dot_and_convolution_flops(jax_run: Path, tf_run: Path) -> None:
    tf_rows = hlo_op_stats(open_xla_model(tf_run, use_cache=False)).rows
    dot = next(r for r in tf_rows if r["category"] == "dot")
    assert dot["flops"] == 5 * 2 * 32 * 64 * 64
    jax_rows = hlo_op_stats(open_xla_model(jax_run, use_cache=False)).rows
    conv = next(r for r in jax_rows if r["category"] == "convolution")
    # SAME 3×3 over 64×128 with two output features: each output's valid taps, summed.
    taps = (3 * 64 - 2) * (3 * 128 - 2)
    assert conv["flops"] == 5 * 2 * 2 * 1 * taps
    dims = conv["shape"].split("[")[1].split("]")[0].split(",")  # XLA:CPU picks the layout
    assert conv["shape"].startswith("f32[") and sorted(map(int, dims)) == [1, 2, 64, 128]
    roof = roofline(open_xla_model(jax_run, use_cache=False)).to_dict()
    assert roof["peak_gflops_per_s"] is None  # a CPU: no published peak, none guessed
    whole = [p for p in roof["points"] if p["step"] is None]
    assert {p["name"] for p in whole} >= {conv["name"]}
    per_step = [p for p in roof["points"] if p["step"] is not None and p["name"] == conv["name"]]
    assert sorted(p["step"] for p in per_step) == [0, 1, 2, 3, 4]


# -- bad or missing HLO degrades to times -------------------------------------------------------


def _rewrite(src: Path, dst: Path, edit: Any) -> Path:
    space = XSpace.FromString(src.read_bytes())
    edit(space)
    dst.write_bytes(space.SerializeToString())
    return dst


def test_missing_hlo_degrades_to_times_with_a_note(tmp_path: Path) -> None:
    def drop_metadata(space: Any) -> None:
        keep = [p for p in space.planes if p.name != "/host:metadata"]
        del space.planes[:]
        space.planes.extend(keep)

    path = _rewrite(MI300, tmp_path / "nohlo.xplane.pb", drop_metadata)
    _, full = _ours(MI300)
    model, ours = _ours(path)
    assert {k[1]: v["total_ms"] for k, v in ours.items()} == {
        k[1]: v["total_ms"] for k, v in full.items()}
    assert all(r["flops"] is None and r["gflops_per_s"] is None for r in ours.values())
    assert any("No HLO in the profile" in n for n in model.notes)
    assert all(r["category"] == "unknown" for r in ours.values())
    profile = op_profile(model).to_dict()
    assert profile["flops_utilization"] is None


def test_damaged_hlo_degrades_to_times_with_a_note(tmp_path: Path) -> None:
    def damage(space: Any) -> None:
        plane = next(p for p in space.planes if p.name == "/host:metadata")
        for md in plane.event_metadata.values():
            for stat in md.stats:
                if stat.bytes_value:
                    stat.bytes_value = b"\x0a\xff\xff\xff\xff\x0f" + stat.bytes_value[:9]

    path = _rewrite(MI300, tmp_path / "bad.xplane.pb", damage)
    model, ours = _ours(path)
    assert len(ours) == 4 and all(r["total_ms"] > 0 for r in ours.values())
    assert any("could not be read" in n for n in model.notes)
    assert model.programs and all(not p["hlo"] for p in model.programs)


# -- the command ---------------------------------------------------------------------------------


def test_cli_json_keys_and_csv(tmp_path: Path, capsys: Any) -> None:
    csv_path = tmp_path / "ops.csv"
    assert main(["xla", str(TPU), "--json", "--csv", str(csv_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["modules"] == ["jit__psum", "jit_broadcast_in_dim", "jit_f"]
    assert set(data["device"]) >= {"name", "peak_tflops", "peak_gbytes_per_s"}
    for c in data["categories"]:
        assert set(c) >= {"name", "time_ms", "time_percent", "flops_utilization",
                          "bandwidth_utilization"}
    for o in data["ops"]:
        assert set(o) >= {"name", "module", "category", "occurrences", "total_ms", "self_ms",
                          "gflops_per_s", "gbytes_per_s", "operational_intensity", "bound_by",
                          "flops_estimated"}
    assert sum(c["time_percent"] for c in data["categories"]) + data["idle_percent"] == \
        pytest.approx(100.0)
    lines = csv_path.read_text().splitlines()
    assert lines[0].split(",") == list(CSV_COLUMNS)
    assert len(lines) == 1 + len(data["ops"])
    # The cached model answers the second time without reading the XLA parts again.
    assert main(["xla", str(TPU), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "TPU v6 Lite" in out and "copy-done.4" in out and "Top ops (2 of" in out


def test_cli_top_keeps_top_ops_per_category(capsys: Any) -> None:
    assert main(["xla", str(TPU), "--json", "--top", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(len(c["ops"]) == 1 for c in data["categories"])
    assert len(data["ops"]) == len(data["categories"])


def test_cli_errors_are_one_line(tmp_path: Path, capsys: Any) -> None:
    truncated = tmp_path / "t.xplane.pb"
    truncated.write_bytes(TPU.read_bytes()[:5000])
    empty = tmp_path / "empty" / "e.xplane.pb"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    noise = tmp_path / "noise" / "n.xplane.pb"
    noise.parent.mkdir()
    noise.write_bytes(bytes(random.Random(3).randrange(256) for _ in range(20000)))
    for argv in (["xla", str(truncated)], ["xla", str(empty)], ["xla", str(noise)],
                 ["xla", str(tmp_path / "missing")], ["xla", str(TF_GPU)],
                 ["xla", str(TPU), "--top", "0"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err and err[-1].startswith("stepscope: error:"), argv
        assert "Traceback" not in "\n".join(err)


def test_model_json_form_round_trips() -> None:
    model = open_xla_model(MI300, use_cache=False)
    again = XlaModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert op_profile(again).to_dict() == op_profile(model).to_dict()
    with pytest.raises(ValueError):
        XlaModel.from_dict({"version": -1})


def test_nested_host_ops_self_time() -> None:
    """XLA:CPU ops nested on one thread (a call around its callees): self time excludes the
    children; on a device overlapping executions are not nesting."""
    from stepscope.model.xla_ops import DeviceInfo, XlaHostOps, XlaOp

    ops = [XlaOp("1", "m", "outer"), XlaOp("1", "m", "inner")]
    for plane, outer_self in (("/host:CPU", 60), ("/device:GPU:0", 100)):
        x = XlaHostOps(ops, [DeviceInfo(plane, "", 0, 100)],
                       np.array([0, 1, 1], np.int32), np.zeros(3, np.int32),
                       np.zeros(3, np.int32), np.array([0, 10, 50], np.int64),
                       np.array([100, 20, 20], np.int64), {}, {"1": "m"})
        model = build_xla_model({"h": x})
        by = {o.name: o for o in model.ops}
        assert by["outer"].self_ps == outer_self and by["inner"].self_ps == 40
    rows = hlo_op_stats(model).to_dict()
    assert hlo_op_stats_csv(rows).count("\n") == 3


def test_absurd_hlo_is_bounded() -> None:
    """A fusion that calls itself, fusions fanning out to one computation many times over,
    and a convolution with an absurd window: the estimate ends quickly, with finite FLOPs."""
    from stepscope.formats.hlo_proto import HloProto

    proto = HloProto()
    m = proto.hlo_module
    m.name, m.id = "absurd", 1
    shape = {"element_type": 11, "dimensions": [4, 4]}
    comp = m.computations.add(name="c", id=1)
    p0 = comp.instructions.add(name="p", opcode="parameter", id=1)
    p0.shape.element_type, p0.shape.dimensions[:] = 11, [4, 4]
    for i in range(40):  # 40 fusions, each calling computation 1 (itself) twice
        inst = comp.instructions.add(name=f"f{i}", opcode="fusion", id=10 + i,
                                     fusion_kind="kLoop")
        inst.shape.element_type, inst.shape.dimensions[:] = shape["element_type"], [4, 4]
        inst.operand_ids.append(1)
        inst.called_computation_ids.extend([1, 1])
        add = comp.instructions.add(name=f"a{i}", opcode="add", id=100 + i)
        add.shape.element_type, add.shape.dimensions[:] = 11, [4, 4]
    conv = comp.instructions.add(name="conv", opcode="convolution", id=500)
    conv.shape.element_type, conv.shape.dimensions[:] = 11, [1, 1, 1 << 40]
    conv.operand_ids.extend([1, 1])
    conv.window.dimensions.add(size=1 << 40, stride=1)
    dn = conv.convolution_dimension_numbers
    dn.input_spatial_dimensions.append(1)
    dn.output_spatial_dimensions.append(2)
    module = decode_hlo_proto(proto.SerializeToString())
    f0 = module.instruction("f0")
    assert f0 is not None
    assert cost_of(module, f0).flops == pytest.approx(2 * 40 * 16)  # twice the adds, once each
    c = module.instruction("conv")
    assert c is not None and cost_of(module, c).flops == 0.0


def test_cli_host_and_report_flops_utilisation(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TPU, run / "tpu.xplane.pb")
    shutil.copy(MI300, run / "gpu.xplane.pb")
    assert main(["xla", str(run), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["modules"] == ["jit__psum", "jit_broadcast_in_dim", "jit_f",
                               "jit_forward_3d_conv"]
    assert main(["xla", str(run), "--json", "--host", "gpu"]) == 0
    gpu = json.loads(capsys.readouterr().out)
    assert gpu["modules"] == ["jit_forward_3d_conv"]
    assert gpu["device"]["name"] == "AMD Instinct MI300X"
    assert main(["xla", str(run), "--host", "<nope>"]) == 2
    assert "No host" in capsys.readouterr().err
    assert main(["report", str(TPU), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["xla_flops_utilization"] == pytest.approx(5.623371077235841e-06)
    assert main(["report", str(TF_GPU), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["xla_flops_utilization"] is None


def test_device_identified_from_plane_capabilities() -> None:
    """GPU planes name no model: it is told from vendor, compute capability and cores."""
    from stepscope.analysis.xla import device_peaks

    table = load_xspace(TF_GPU)
    props = table.planes[table.plane_index("/device:GPU:4") or 0].stats
    assert props["compute_cap_major"] == 7 and props["core_count"] == 80
    model = device_peaks.identify("", props)
    assert model == "NVIDIA V100"
    peaks = device_peaks.lookup(model)
    assert peaks is not None and peaks.gbytes_per_s == 900.0 and peaks.tflops["fp32"] == 15.7
    assert peaks.peak_tflops("fp32") == 15.7 and peaks.peak_tflops() == 125.0
    assert "datasheet" in peaks.source
    assert device_peaks.identify("", {"compute_cap_major": 9, "compute_cap_minor": 0,
                                      "core_count": 132}) == "NVIDIA H100 SXM"
    assert device_peaks.lookup("Some Future Accelerator 9000") is None
    assert device_peaks.identify("", {"device_vendor": "AMD", "compute_cap_major": 9,
                                      "compute_cap_minor": 5, "core_count": 256}) == ""


def test_protobuf_decoder_gives_the_same_xla_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The XLA reader over the pure-protobuf XSpace decoder agrees with the compiled one."""
    fast = build_xla_model({"h": load_xla(MI300)}).to_dict()
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    slow = build_xla_model({"h": load_xla(MI300)}).to_dict()
    assert slow == fast and slow["ops"]


# XLA's own message classes (shipped with TensorFlow) decode the same bytes: the reference.
REFERENCE_HLO = """
import json, sys
from tensorflow.compiler.xla.service import hlo_pb2
out = []
for path in sys.argv[1:]:
    proto = hlo_pb2.HloProto.FromString(open(path, "rb").read())
    m, b = proto.hlo_module, proto.buffer_assignment
    out.append({
        "name": m.name, "id": m.id, "entry": m.entry_computation_id,
        "computations": [[c.name, c.id, c.is_fusion_computation, [[
            i.name, i.opcode, i.id, list(i.operand_ids), list(i.called_computation_ids),
            i.shape.element_type, list(i.shape.dimensions), len(i.shape.tuple_shapes),
            list(i.shape.layout.minor_to_major), i.fusion_kind, i.metadata.op_name,
            i.custom_call_target, [w.size for w in i.window.dimensions],
            list(i.dot_dimension_numbers.lhs_contracting_dimensions)]
            for i in c.instructions]] for c in m.computations],
        "buffers": [[x.id, x.size, x.defined_at.instruction_id] for x in b.logical_buffers],
        "allocations": [[a.index, a.size, a.maybe_live_out, a.is_entry_computation_parameter,
                         [[y.logical_buffer_id, y.offset, y.size] for y in a.assigned]]
                        for a in b.buffer_allocations],
        "heap": [[t.buffer_allocation_index, [e.kind for e in t.events],
                  [e.buffer_id for e in t.events]] for t in b.heap_simulator_traces],
    })
print(json.dumps(out))
"""


def test_hlo_decoder_agrees_with_xlas_own_classes(tmp_path: Path) -> None:
    protos = {**_hlo_protos(MI300), **_hlo_protos(TPU), **_hlo_protos(MI355_TE)}
    paths = []
    for i, data in enumerate(protos.values()):
        paths.append(tmp_path / f"{i}.pb")
        paths[-1].write_bytes(data)
    reference = json.loads(run_script(REFERENCE_HLO, *map(str, paths)))
    from stepscope.model.hlo import ELEMENT_TYPES

    names = {name: number for number, (name, _) in ELEMENT_TYPES.items()}
    for data, ref in zip(protos.values(), reference, strict=True):
        m = decode_hlo_proto(data)
        assert (m.name, m.id, m.entry_computation_id) == (ref["name"], ref["id"], ref["entry"])
        ours = [[c.name, c.id, c.is_fusion, [[
            i.name, i.opcode, i.id, i.operand_ids, i.called_computation_ids,
            names.get(i.shape.element_type, i.shape.element_type), i.shape.dimensions,
            len(i.shape.tuple_shapes), i.shape.minor_to_major or [], i.fusion_kind, i.op_name,
            i.custom_call_target, [w.size for w in i.window],
            i.dot_dims.lhs_contracting if i.dot_dims else []]
            for i in c.instructions]] for c in m.computations]
        assert ours == ref["computations"]
        b = m.buffer_assignment
        assert b is not None
        assert [[x.id, x.size, x.instruction_id] for x in b.logical_buffers] == ref["buffers"]
        assert [[a.index, a.size, a.maybe_live_out, a.is_entry_parameter,
                 [list(t) for t in a.assigned]] for a in b.allocations] == ref["allocations"]
        assert [[t.allocation_index, t.kind.tolist(), t.buffer_id.tolist()]
                for t in b.heap_traces] == ref["heap"]


def test_op_missing_from_its_programs_hlo_keeps_its_time(tmp_path: Path) -> None:
    def rename(space: Any) -> None:
        for plane in space.planes:
            for md in plane.stat_metadata.values():
                if md.name == "loop_transpose_fusion":
                    md.name = "ghost_fusion"

    path = _rewrite(MI300, tmp_path / "ghost.xplane.pb", rename)
    _, full = _ours(MI300)
    model, ours = _ours(path)
    ghost = ours[("15", "ghost_fusion")]
    assert ghost["total_ms"] == full[("15", "loop_transpose_fusion")]["total_ms"]
    assert ghost["category"] == "unknown" and ghost["flops"] is None
    assert any("not in their program's HLO" in n for n in model.notes)
    assert ours[("15", "cudnn-conv.1")]["flops"] == full[("15", "cudnn-conv.1")]["flops"]


def test_absurd_recorded_figures_give_valid_json(tmp_path: Path, capsys: Any) -> None:
    """Infinite or NaN peaks and FLOP counts and negative durations, as a damaged profile
    may hold: the op profile is still valid JSON, those figures unknown or zero."""
    def spoil(space: Any) -> None:
        plane = space.planes[0]  # /device:TPU:0
        names = {mid: md.name for mid, md in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names[stat.metadata_id] == "peak_teraflops_per_second":
                stat.double_value = float("inf")
        for md in plane.event_metadata.values():
            for stat in md.stats:
                if names.get(stat.metadata_id) == "flops":
                    stat.double_value = float("nan")
        for line in plane.lines:
            for event in line.events[:5]:
                event.duration_ps = -event.duration_ps - 1

    path = _rewrite(TPU, tmp_path / "spoilt.xplane.pb", spoil)
    assert main(["xla", str(path), "--json", "--no-cache"]) == 0
    data = json.loads(capsys.readouterr().out)  # strict JSON: no NaN or Infinity
    assert data["ops"] and all(o["total_ms"] >= 0 for o in data["ops"])
    # The infinite stated peak is ignored: the published figure of the TPU v6e stands in.
    assert data["device"]["peak_tflops"] == 918.0
    assert data["device"]["peak_source"].startswith("Cloud TPU v6e")
