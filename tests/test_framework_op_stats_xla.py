"""Framework op stats of XSpace files equal XProf's, row for row: the JAX captures on AMD
MI300X/MI355 (XLA on GPU: ops from the HLO metadata, instructions without any under their own
name, occurrences of the most frequent instruction, the host's ``XlaModule`` launches), the
TensorFlow V100 run (memory records that name a TensorFlow op count as one more occurrence of
it) and the TPU inference run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.analysis import op_stats
from stepscope.analysis.run_model.framework_op_stats import DEVICE, HOST, OpRow
from stepscope.analysis.run_model.tf_op_names import (
    FrameworkOp,
    derived_op_type,
    hlo_provenance,
    parse_op_fullname,
)
from stepscope.formats import run_reader

from conftest import FIXTURES
from xprof_reference import gviz_rows, xprof_tool

MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
MI300_LEGACY = next((FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_legacy")
                    .glob("*.xplane.pb"))
MI355_TE = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization/"
            "934987a2fc2f.xplane.pb")
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
V100 = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
# XProf lists at most this many ops per side.
XPROF_MAX_ROWS = 500


def _theirs(path: Path, tmp: Path, *, idle: bool = False
            ) -> dict[tuple[str, str, str], dict[str, Any]]:
    tables = xprof_tool(path, "framework_op_stats", tmp)
    rows = gviz_rows(tables[0] if idle else tables[-1])  # with IDLE rows, or without
    return {(r["host_or_device"], r["type"], r["operation"]): r for r in rows}


def _ours(path: Path, *, idle: bool = False) -> dict[tuple[str, str, str], OpRow]:
    rows = op_stats(run_reader.load(path, use_cache=False), include_idle=idle).rows
    return {(r.host_or_device, r.type, r.name): r for r in rows}


def _assert_row_equal(key: tuple[str, str, str], theirs: dict[str, Any], ours: OpRow) -> None:
    assert ours.occurrences == theirs["occurrences"], key
    assert ours.total_ns / 1e3 == pytest.approx(theirs["total_time"], abs=2e-3), key
    assert ours.self_ns / 1e3 == pytest.approx(theirs["total_self_time"], abs=2e-3), key


@pytest.mark.parametrize("idle", [False, True], ids=["without_idle", "with_idle"])
@pytest.mark.parametrize("path", [MI300, MI300_LEGACY, MI355_TE], ids=lambda p: p.parent.name)
def test_jax_on_amd_rows_equal_xprof(path: Path, idle: bool, tmp_path: Path) -> None:
    theirs, ours = _theirs(path, tmp_path, idle=idle), _ours(path, idle=idle)
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        _assert_row_equal(key, row, ours[key])
    device = {k for k in ours if k[0] == DEVICE}
    assert device
    # The ROCm copy blits carry no op: no row, as in XProf (they are kernels in kernel_stats).
    assert not any("copyBuffer" in name for _, _, name in ours)


def test_an_op_from_several_instructions_occurs_as_its_most_frequent() -> None:
    """jit(forward_3d_conv)/conv_general_dilated is two instructions (cudnn-conv.1, 79
    kernels, and input_transpose_fusion, 40): 79 occurrences, not 119."""
    row = _ours(MI300)[(DEVICE, "conv_general_dilated",
                        "jit(forward_3d_conv)/conv_general_dilated")]
    assert row.occurrences == 79


def test_instructions_without_metadata_are_named_as_themselves() -> None:
    ours = _ours(MI355_TE)
    unknown = sorted(name for side, kind, name in ours if side == DEVICE and kind == "Unknown")
    assert unknown == [f"loop_reduce_fusion.{i}" for i in (1, 2, 3, 4)]


def test_host_rows_are_the_xla_launches(tmp_path: Path) -> None:
    host = {k: r for k, r in _ours(MI300).items() if k[0] == HOST}
    assert list(host) == [(HOST, "XlaModule", "XlaModule")]
    assert host[(HOST, "XlaModule", "XlaModule")].occurrences == 198


def test_tensorflow_v100_rows_equal_xprof(tmp_path: Path) -> None:
    """XProf's host rows (its first 500) and host IDLE equal ours. XProf lists no device op
    here (its GPU rule reads kernels' own tf_op/hlo_op stats, which these kernels lack);
    stepscope lists the ops of the file's "TensorFlow Ops" lines."""
    theirs, ours = _theirs(V100, tmp_path, idle=True), _ours(V100, idle=True)
    assert len([k for k in theirs if k[0] == HOST]) == XPROF_MAX_ROWS
    for key, row in theirs.items():
        if key[0] == HOST:
            assert key in ours, key
            _assert_row_equal(key, row, ours[key])
    assert [k for k in theirs if k[0] == DEVICE] == [(DEVICE, "IDLE", "IDLE")]
    assert any(k[0] == DEVICE and k[1] != "IDLE" for k in ours)
    # A memory record names the op that allocated: one more occurrence of it, no time.
    cast = (HOST, "Cast", "replica_4/bert_span_labeler/bert_encoder_1/transformer/layer_21/"
            "self_attention/attention_output/einsum/Einsum/Cast")
    assert ours[cast].occurrences == 2


@pytest.mark.parametrize("idle", [False, True], ids=["without_idle", "with_idle"])
def test_tpu_rows_equal_xprof(idle: bool, tmp_path: Path) -> None:
    theirs, ours = _theirs(TPU, tmp_path, idle=idle), _ours(TPU, idle=idle)
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        _assert_row_equal(key, row, ours[key])


@pytest.mark.parametrize(("text", "expected"), [
    ("model/dense/MatMul:MatMul", FrameworkOp("model/dense/MatMul", "MatMul", True)),
    ("Iterator::Batch::Map", FrameworkOp("Iterator::Batch::Map", "Dataset", True)),
    ("jit(f)/mul:", FrameworkOp("jit(f)/mul", "mul", True)),
    ("jit(f)/transpose[permutation=(1, 0)]:",
     FrameworkOp("jit(f)/transpose[permutation=(1, 0)]", "transpose", True)),
    ("jit(f)/reduce_sum_3:", FrameworkOp("jit(f)/reduce_sum_3", "reduce_sum", True)),
    ("XlaModule:", FrameworkOp("XlaModule", "XlaModule", True)),
    ("a/b:custom_type", FrameworkOp("a/b", "custom_type", True)),
    ("MemcpyHToD_42", FrameworkOp("MemcpyHToD_42", "MemcpyHToD", True)),
    ("(null)", FrameworkOp("(null)", "", False)),
    ("", FrameworkOp("", "", False)),
    ("PjRt::Execute", FrameworkOp("PjRt::Execute", "", False)),
    ("file.py:12 f", FrameworkOp("file.py:12 f", "", False)),
])
def test_full_names_parse_as_xprof(text: str, expected: FrameworkOp) -> None:
    assert parse_op_fullname(text) == expected


def test_hlo_provenance_and_derived_types() -> None:
    assert hlo_provenance("", "") == ""
    assert hlo_provenance("jit(f)/add", "") == "jit(f)/add:"
    assert hlo_provenance("XLA_Args", "") == "XLA_Args:XLA_Args"
    assert hlo_provenance("dense/MatMul", "MatMul") == "dense/MatMul:MatMul"
    assert derived_op_type("a/b/MatMul_12") == "MatMul"
    assert derived_op_type("a/b/MatMul_x") == "MatMul_x"
    assert derived_op_type("7") == "7"


@pytest.mark.parametrize("garbage", ['{"15": ["x"]}', "[1, 2]", "{not json", '{"15": {"a": 3}}'])
def test_stepscope_stats_written_by_someone_else_are_harmless(garbage: str) -> None:
    """A file may carry stats of stepscope's names itself: odd values give no op, no error."""
    from stepscope.analysis.run_model.framework_op_stats import op_stats as table_op_stats
    from stepscope.model import schema

    table = run_reader.load_file(MI300, use_cache=False)
    for plane in table.planes:
        for stat in (schema.HLO_OP_NAMES, schema.HLO_OP_TYPES, schema.XLA_OP_METADATA):
            if plane.name.startswith("/device:"):
                plane.stats[stat] = garbage
    rows = table_op_stats(table, include_idle=True).rows
    assert any(r.host_or_device == HOST for r in rows)
