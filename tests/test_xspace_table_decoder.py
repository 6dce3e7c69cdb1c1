"""The compiled table decoder (``xspace_to_tables.from_source``): the same host tables as the
protobuf twin (``from_columns`` over the protobuf runtime's columns), read from a file through
its window or from bytes, and one clear error for data that is not a whole XSpace."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope.formats import xspace_columns as xc
from stepscope.formats import xspace_to_tables as x2t
from stepscope.formats.xplane_builder import read_space
from stepscope.model.events import EventTable, TypedStats

from conftest import FIXTURES

XPLANE_FIXTURES = sorted(FIXTURES.rglob("*.xplane.pb"))


def assert_same_table(a: EventTable, b: EventTable) -> None:
    """Every column, dictionary and plane of two tables equal, dtypes included."""
    for f in dataclasses.fields(EventTable):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "typed":
            sx, sy = TypedStats.of(x).sparse, TypedStats.of(y).sparse
            assert list(sx) == list(sy)
            for stat in sx:
                for px, py in zip(sx[stat], sy[stat], strict=True):
                    assert px.dtype == py.dtype == np.int64, stat
                    np.testing.assert_array_equal(px, py, err_msg=stat)
        elif f.name == "stats":
            for g in dataclasses.fields(x):
                u, v = getattr(x, g.name), getattr(y, g.name)
                if isinstance(u, np.ndarray):
                    assert u.dtype == v.dtype, g.name
                    np.testing.assert_array_equal(u, v, err_msg=g.name)
                elif g.name == "text":
                    assert bytes(u) == bytes(v)
                else:
                    assert u == v, g.name
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name
    np.testing.assert_array_equal(a.plane, b.plane)


def _twin(data: bytes) -> EventTable:
    return x2t.from_columns(xc.decode_columns_protobuf(data))


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_table_decoder_matches_the_protobuf_twin(path: Path) -> None:
    assert xc._xspace_decode is not None, "the compiled decoder was not built"
    data = path.read_bytes()
    twin = _twin(data)
    from_file = x2t.load_xspace(path)
    assert len(from_file) > 0
    assert_same_table(from_file, twin)
    assert_same_table(x2t.from_source(data), twin)


def test_a_window_smaller_than_the_file_reads_the_same(tmp_path: Path) -> None:
    # The largest fixture is read through several windows (4 MB each) when copied 3 times
    # over: the planes are repeated, so events straddle window edges.
    path = max(XPLANE_FIXTURES, key=lambda p: p.stat().st_size)
    space = read_space(path)
    while space.ByteSize() < 9 << 20:
        space.planes.extend(list(space.planes))
    big = tmp_path / "big.xplane.pb"
    big.write_bytes(space.SerializeToString())
    table = x2t.load_xspace(big)
    # Its stat values outgrow 1 MiB: on Linux such columns grow as mappings (mremap), not
    # through malloc.
    assert table.stats.value.nbytes > 1 << 20
    assert_same_table(table, _twin(big.read_bytes()))


def test_other_threads_run_while_a_profile_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder's walk runs without the GIL: a server's requests are answered while a
    profile loads in a thread beside them (with the GIL held, no other thread ran)."""
    path = max(XPLANE_FIXTURES, key=lambda p: p.stat().st_size)
    space = read_space(path)
    while space.ByteSize() < 24 << 20:
        space.planes.extend(list(space.planes))
    # From bytes: a file's reads let other threads in between windows anyway.
    data = space.SerializeToString()
    del space
    real = xc.compiled_decoder()
    inside, done = threading.Event(), threading.Event()

    class Watched:
        """The compiled decoder, its walk's start and end told to this test."""

        scan = staticmethod(real.scan)

        @staticmethod
        def decode_table(*args: Any, **kwargs: Any) -> Any:
            inside.set()
            try:
                return real.decode_table(*args, **kwargs)
            finally:
                done.set()

    monkeypatch.setattr(xc, "compiled_decoder", lambda: Watched)
    ran_beside = []
    for _ in range(3):  # a machine too busy to run this thread in one whole decode
        inside.clear()
        done.clear()
        loader = threading.Thread(target=x2t.from_source, args=(data,))
        loader.start()
        inside.wait()
        turns = 0
        while not done.is_set():
            turns += 1
            time.sleep(0)
        loader.join()
        ran_beside.append(turns)
        if turns >= 10:
            break
    assert max(ran_beside) >= 10, ran_beside


def test_odd_but_valid_data_matches_the_twin() -> None:
    # Lines whose timestamp comes after their events, unknown metadata ids, a negative
    # duration, a ref to a stat id without metadata, typed stats of both int kinds.
    from stepscope.formats.xplane_proto import XSpace

    space = XSpace()
    plane = space.planes.add(id=3, name="/host:CPU")
    plane.event_metadata[1].name = "known"
    plane.stat_metadata[7].name = "step_num"
    plane.stat_metadata[8].name = "note"
    line = plane.lines.add(id=5, name="main")
    for i, mid in enumerate((1, 99, 1)):
        ev = line.events.add(metadata_id=mid, offset_ps=1_499 + i * 1000,
                             duration_ps=-2_000 if i == 1 else 2_501)
        ev.stats.add(metadata_id=7, uint64_value=i) if i else ev.stats.add(metadata_id=7,
                                                                          int64_value=-4)
        ev.stats.add(metadata_id=8, ref_value=12345)
        ev.stats.add(metadata_id=8, str_value="é")
    line.timestamp_ns = 1_000_000
    wire = bytearray()
    # Re-serialise the line with its timestamp last: protobuf readers accept any order.
    data = space.SerializeToString()
    line_bytes = line.SerializeToString()
    ts_field = bytes([3 << 3]) + _varint(1_000_000)
    assert line_bytes.startswith(bytes([1 << 3, 5, 2 << 3 | 2, 4]) + b"main" + ts_field)
    moved = line_bytes.replace(ts_field, b"", 1) + ts_field
    wire += data.replace(line_bytes, moved, 1)
    table = x2t.from_source(bytes(wire))
    assert_same_table(table, _twin(bytes(wire)))
    assert table.names[table.name[1]] == "<unknown event>"
    assert table.start_ns.tolist() == [1_000_001, 1_000_002, 1_000_003]
    assert table.duration_ns.tolist() == [3, 0, 3]


def _number(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value & ((1 << 64) - 1))  # (negatives: 10 bytes)


def _bytes(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _stat(rng: np.random.Generator) -> bytes:
    """A stat laid out as writers do (its metadata id, then one value of any kind: numbers
    of 1 to 10 bytes, a double, a text) or as none we know of does (the value first, two
    values, an unknown field, no fields)."""
    md = _number(1, int(rng.integers(7, 10)))
    big = int(rng.choice([3, 1 << 40, (1 << 63) - 5, -7, -(1 << 50)]))
    value = [_number(3, big), _number(4, big), _number(7, int(rng.integers(7, 10))),
             _varint(2 << 3 | 1) + np.float64(rng.random()).tobytes(),
             _bytes(5, "é".encode() * int(rng.integers(0, 4))),
             _bytes(6, bytes(int(rng.integers(0, 200))))][int(rng.integers(0, 6))]
    way = int(rng.integers(0, 10))
    return (value + md if way == 0 else md + value + _number(4, 2) if way == 1 else
            md + _number(9, 1) + value if way == 2 else b"" if way == 3 else md + value)


def test_events_and_stats_laid_out_any_way_match_the_twin(tmp_path: Path) -> None:
    """The decoder reads an event or stat laid out as writers lay it out at once, and any
    other by the general rule: 80,000 events in random layouts (fields out of order,
    repeated, unknown, varints of 1 to 10 bytes), with random stats, read from a file
    (through windows the runs of events cross) and from bytes, equal the protobuf twin's."""
    from stepscope.formats.xplane_proto import XPlane

    rng = np.random.default_rng(5)
    plane = XPlane(id=1, name="/host:CPU")
    for i in (1, 2):
        plane.event_metadata[i].name = f"op{i}"
    for i, name in ((7, "step_num"), (8, "note"), (9, "other")):
        plane.stat_metadata[i].name = name
    n = 80_000
    pool = [_bytes(4, _stat(rng)) for _ in range(600)]  # (each event takes 0 to 3 of them)
    picks, ways = rng.integers(0, len(pool), (n, 3)), rng.integers(0, 6, n)
    n_stats, mds = rng.integers(0, 4, n), rng.integers(1, 3, n)
    durations = rng.choice([0, 5000, -3, 1 << 60], n)
    events = bytearray()
    for k in range(n):
        head = [_number(1, int(mds[k])), _number(2, k * 1_000_000 + 10**12),
                _number(3, int(durations[k]))]
        way = ways[k]
        if way == 1:
            head.reverse()
        elif way == 2:
            head.append(_number(2, k))  # the offset again: the last one counts
        elif way == 3:
            head.insert(1, _number(5, 2))  # a field the table does not keep
        stats = b"".join(pool[i] for i in picks[k, :n_stats[k]])
        events += _bytes(4, b"".join(head) + stats if way != 4 else stats + b"".join(head))
    line = _number(1, 1) + _bytes(2, b"t") + _number(3, 10**18) + bytes(events)
    data = _bytes(1, plane.SerializeToString() + _bytes(3, line))
    path = tmp_path / "layouts.xplane.pb"
    path.write_bytes(data)
    twin = _twin(data)
    assert len(twin) == n and len(data) > 4 << 20  # (more than one 4 MB window)
    assert_same_table(x2t.load_xspace(path), twin)
    assert_same_table(x2t.from_source(data), twin)


@pytest.mark.parametrize("lines,names", [(40_000, 3), (5, 32_766), (32_768, 32_767)])
def test_codes_at_the_edge_of_int16_match_the_twin(lines: int, names: int) -> None:
    """The decoder writes line, name and stat name codes as int16 where they will fit: more
    lines than that holds (read again as int32), a name or stat name dictionary at the edge
    (an unknown id adds one) give the twin's table, dtypes included."""
    from stepscope.formats.xplane_proto import XSpace

    space = XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    for i in range(names):
        plane.event_metadata[i + 1].name = f"op{i}"
        plane.stat_metadata[i + 1].name = f"s{i}"
    for li in range(lines):
        line = plane.lines.add(id=li, name=f"t{li}", timestamp_ns=1_000)
        ev = line.events.add(metadata_id=(li % names) + 1 if li % 7 else 10**9,
                             offset_ps=li * 1000, duration_ps=500)
        ev.stats.add(metadata_id=(li % names) + 1 if li % 5 else 10**9, int64_value=li)
    data = space.SerializeToString()
    table = x2t.from_source(data)
    assert_same_table(table, _twin(data))
    assert len(table) == lines
    assert table.line.dtype == (np.int16 if lines <= 32_767 else np.int32)


def test_code_widths_other_than_2_or_4_bytes_are_one_clear_error() -> None:
    decoder = xc.compiled_decoder()
    for widths in ((3, 4, 4), (4, 0, 4), (4, 4, -2), (8, 8, 8)):
        with pytest.raises(ValueError, match="2 or 4 bytes"):
            decoder.decode_table(b"", [], b"", widths)
    with pytest.raises(TypeError):
        decoder.decode_table(b"", [], b"", (2, 2))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.mark.parametrize("cut", [1, 7, 100, 5000, -3])
def test_truncated_files_are_one_clear_error(tmp_path: Path, cut: int) -> None:
    data = XPLANE_FIXTURES[0].read_bytes()
    path = tmp_path / "truncated.xplane.pb"
    path.write_bytes(data[:cut])
    with pytest.raises(stepscope.ProfileFormatError, match="truncated.xplane.pb is not a "
                       "readable XSpace profile"):
        x2t.load_xspace(path)


def test_garbage_is_one_clear_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    for i in range(50):
        path = tmp_path / f"garbage{i}.xplane.pb"
        path.write_bytes(rng.integers(0, 256, int(rng.integers(1, 4000)), np.uint8).tobytes())
        try:
            x2t.load_xspace(path)
        except stepscope.ProfileFormatError as err:
            assert "is not a readable XSpace profile" in str(err)


def test_a_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(stepscope.ProfileFormatError, match="Cannot read"):
        x2t.load_xspace(tmp_path)


def test_pure_python_twin_is_used_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    assert not xc.compiled()
    path = XPLANE_FIXTURES[0]
    assert_same_table(x2t.load_xspace(path), _twin(path.read_bytes()))
    assert os.environ["STEPSCOPE_PURE_PYTHON"] == "1"
