"""The host event table: every event of every plane, matching a plain protobuf reading."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import stepscope
from stepscope.formats import xspace_to_tables as x2t
from stepscope.formats.xplane_builder import read_space
from stepscope.model import events as me
from stepscope.model import schema

from conftest import FIXTURES
from xspace_view import events as view_events

XPLANE_FIXTURES = sorted(FIXTURES.rglob("*.xplane.pb"))


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_table_matches_protobuf_reading(path: Path) -> None:
    table = x2t.load_xspace(path)
    space = read_space(path)
    expected = []
    for p in space.planes:
        for e in view_events(p):
            half_up = math.floor(e.duration_ns + 0.5)
            expected.append((p.name, e.name, half_up, e.stats.get("step_num"),
                             e.stats.get("correlation_id")))
    got = []
    step = table.typed[schema.STEP_NUM]
    corr = table.typed[schema.CORRELATION_ID]
    for i in range(len(table)):
        got.append((table.planes[table.plane[i]].name, table.names[table.name[i]],
                    int(table.duration_ns[i]),
                    None if step[i] == me.MISSING else int(step[i]),
                    None if corr[i] == me.MISSING else int(corr[i])))
    assert len(got) == len(expected)
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_gpu_fixture_keeps_kernels_and_correlation_ids() -> None:
    path = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
    table = x2t.load_xspace(path)
    gpu4 = table.plane_index("/device:GPU:4")
    assert gpu4 is not None
    on_gpu = table.plane == gpu4
    assert int(on_gpu.sum()) == 3_875
    corr = table.typed[schema.CORRELATION_ID]
    # Kernels on the GPU and their launches on the host share correlation ids.
    gpu_ids = set(corr[on_gpu & (corr != me.MISSING)].tolist())
    host = table.plane_index(schema.HOST_PLANE)
    host_ids = set(corr[(table.plane == host) & (corr != me.MISSING)].tolist())
    assert gpu_ids and len(gpu_ids & host_ids) > 0.9 * len(gpu_ids)


def test_our_profile_steps_and_side_stats(tmp_path: Path) -> None:
    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for step in range(5):
        with stepscope.Trace("train", step_num=step, _r=1, lr=0.25, phase="fit"):
            pass
    path = stepscope.stop()
    assert path is not None
    table = x2t.load_xspace(path)
    train = table.name == table.name_code("train")
    assert table.typed[schema.STEP_NUM][train].tolist() == list(range(5))
    assert table.typed[schema.ROOT_LEVEL][train].tolist() == [1] * 5
    assert np.all(np.diff(table.start_ns[train]) > 0)
    side = table.stats
    values = {(side.stat_names[side.name[r]], side.value_of(r)) for r in range(len(side.event))}
    assert values == {("lr", 0.25), ("phase", "fit")}
    env = table.planes[table.plane_index(schema.TASK_ENV_PLANE)]
    assert env.stats[schema.ENV_DROPPED_EVENTS] == 0
    assert table.line_name[table.line[np.flatnonzero(train)[0]]] == "MainThread"


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(stepscope.ProfileFormatError, match="missing.xplane.pb"):
        x2t.load_xspace(tmp_path / "missing.xplane.pb")


def test_typed_stats_are_kept_sparse() -> None:
    """A file's typed stats are held as (rows, values) and give the dense columns back."""
    path = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
    table = x2t.load_xspace(path)
    assert isinstance(table.typed, me.TypedStats)
    dense = {k: table.typed[k] for k in table.typed}
    corr = dense[schema.CORRELATION_ID]
    carried = np.flatnonzero(corr != me.MISSING)
    assert len(carried) > 1000 and table.typed.nbytes < sum(c.nbytes
                                                                 for c in dense.values())
    again = me.TypedStats.of(dense)
    for k, column in dense.items():
        assert np.array_equal(again[k], column)
    for row in (int(carried[0]), int(carried[-1]), 0, len(table) - 1):
        expected = {k: int(c[row]) for k, c in dense.items() if c[row] != me.MISSING}
        assert table.typed_at(row) == expected == again.at(row)


@pytest.mark.parametrize("seed", range(6))
def test_distinct_values_and_their_codes_are_numpys(seed: int) -> None:
    from stepscope.model.events import codes_of, distinct
    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 7, 1000):
        for dtype, high in ((np.int16, 40), (np.int32, 5), (np.int64, 2**62)):
            values = rng.integers(-high, high, n).astype(dtype)
            want, inverse = np.unique(values, return_inverse=True)
            got = distinct(values)
            assert got.dtype == values.dtype and np.array_equal(got, want)
            found, codes = codes_of(values)
            assert np.array_equal(found, want)
            assert codes.dtype == np.int64 and np.array_equal(codes, inverse.reshape(-1))
