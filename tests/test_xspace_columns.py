"""The columnar XSpace decoder: same columns as the protobuf runtime, on real profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stepscope
from stepscope.formats import xspace_columns as xc
from stepscope.formats.xplane_builder import read_space
from stepscope.model import stat_kinds as sk

from conftest import FIXTURES

XPLANE_FIXTURES = sorted(FIXTURES.rglob("*.xplane.pb"))


def _assert_same(a: xc.XSpaceColumns, b: xc.XSpaceColumns) -> None:
    for part in ("lines", "events", "stats"):
        pa, pb = getattr(a, part), getattr(b, part)
        for name, value in vars(pa).items():
            other = getattr(pb, name)
            if isinstance(value, np.ndarray):
                assert value.dtype == other.dtype, (part, name)
                np.testing.assert_array_equal(value, other, err_msg=f"{part}.{name}")
            else:
                assert value == other, (part, name)
    assert [p.SerializeToString(deterministic=True) for p in a.planes] == \
        [p.SerializeToString(deterministic=True) for p in b.planes]
    assert (a.hostnames, a.errors, a.warnings) == (b.hostnames, b.errors, b.warnings)


def test_fixtures_are_there() -> None:
    assert len(XPLANE_FIXTURES) >= 5


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_compiled_decoder_matches_protobuf_on_fixtures(path: Path) -> None:
    assert xc._xspace_decode is not None
    data = path.read_bytes()
    compiled = xc.decode_columns(data, str(path))
    _assert_same(compiled, xc.decode_columns_protobuf(data))
    space = read_space(path)
    assert len(compiled.events) == sum(len(line.events) for p in space.planes
                                       for line in p.lines)


def test_decoder_on_a_stepscope_profile(tmp_path: Path) -> None:
    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for step in range(3):
        with stepscope.Trace("train", step_num=step, _r=1, lr=0.1, tag="t"):
            pass
    path = stepscope.stop()
    assert path is not None
    cols = xc.decode_columns(path.read_bytes())
    _assert_same(cols, xc.decode_columns_protobuf(path.read_bytes()))
    host = next(i for i, p in enumerate(cols.planes) if p.name == "/host:CPU")
    # This test's events: another test's thread still running in this process may record too.
    train = [m for m, md in dict(cols.planes[host].event_metadata).items() if md.name == "train"]
    on_host = (cols.lines.plane[cols.events.line] == host) & np.isin(cols.events.metadata_id,
                                                                      train)
    assert int(on_host.sum()) == 3
    names = {p: dict(cols.planes[host].stat_metadata)[p].name
             for p in cols.planes[host].stat_metadata}
    mine = np.repeat(on_host, cols.events.nstats)  # the stats of those events
    kinds = {names[int(m)]: int(k) for m, k in zip(cols.stats.metadata_id[mine],
                                                   cols.stats.kind[mine], strict=True)}
    assert kinds == {"step_num": sk.KIND_INT64, "_r": sk.KIND_INT64, "lr": sk.KIND_DOUBLE,
                     "tag": sk.KIND_STR}
    lr_rows = [i for i, m in enumerate(cols.stats.metadata_id) if mine[i] and names[int(m)] == "lr"]
    assert cols.stats.value[lr_rows].view(np.float64).tolist() == [0.1] * 3
    tag_row = next(i for i, m in enumerate(cols.stats.metadata_id) if names[int(m)] == "tag")
    assert cols.stats.text(tag_row) == "t"
    starts = cols.event_start_ns()[on_host]
    assert np.all(np.diff(starts) > 0)


@pytest.mark.parametrize("cut", [1, 7, 100, -3])
def test_truncated_data_is_a_clear_error(cut: int) -> None:
    data = XPLANE_FIXTURES[0].read_bytes()
    with pytest.raises(stepscope.ProfileFormatError, match="truncated"):
        xc.decode_columns(data[:cut] if cut > 0 else data[:cut], "truncated.xplane.pb")
