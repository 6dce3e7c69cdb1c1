"""The compiled table decoder's walk on two threads (``decode_table`` with ``threads=2``): a
big file's lines are cut in two halves, each walked on its own thread, and the second half's
columns appended to the first's. Wherever the cut falls (between planes, between lines, inside
a line), the columns are the one-thread walk's byte for byte, the lists and counts the same,
and damaged data gives the same error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.formats import xspace_columns as xc
from stepscope.formats import xspace_to_tables as x2t
from stepscope.formats.xplane_proto import XSpace
from stepscope.model import schema
from stepscope.model.events import TypedStats

from conftest import FIXTURES

XPLANE_FIXTURES = sorted(FIXTURES.rglob("*.xplane.pb"))


def _outcome(decode: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """decode_table's result as comparable values, or its error's type and message."""
    try:
        raw = decode(*args, **kwargs)
    except (ValueError, OSError, MemoryError, OverflowError) as err:
        return "error", (type(err).__name__, str(err))
    cut = raw.pop("cut_at")
    return "ok", ({k: v if isinstance(v, list | tuple) else bytes(v) for k, v in raw.items()},
                  cut)


class BothWays:
    """The compiled decoder, its decode_table run once on one thread and then on two for
    each cut point asked (files of any size), each outcome held to the one-thread one."""

    def __init__(self, nears: list[int]) -> None:
        self.real = xc.compiled_decoder()
        self.nears = nears
        self.cuts: set[int] = set()
        self.errors: set[tuple[str, str]] = set()  # decode_table's
        self.raised: str | None = None  # from_source's
        self.scan = self.real.scan

    def decode_table(self, source: Any, maps: Any, slots: Any, *widths: Any, **_: Any) -> Any:
        kind, one = _outcome(self.real.decode_table, source, maps, slots, *widths, threads=1)
        for near in self.nears:
            kind2, two = _outcome(self.real.decode_table, source, maps, slots, *widths,
                                  threads=2, split_bytes=0, near=near)
            assert kind2 == kind, (near, one if kind == "error" else two)
            if kind == "ok":
                assert one[1] == -1
                assert two[0].keys() == one[0].keys()
                for key in one[0]:
                    assert two[0][key] == one[0][key], (near, key)
                self.cuts.add(two[1])
            else:
                assert two == one, near
                self.errors.add(one)
        return self.real.decode_table(source, maps, slots, *widths, threads=1)


def both_ways(monkeypatch: pytest.MonkeyPatch, data: bytes, points: int = 40) -> BothWays:
    """Decode ``data`` through from_source, both ways at ``points`` cut points."""
    nears = sorted({0, len(data), *range(0, len(data), max(1, len(data) // points))})
    decoder = BothWays(nears)
    monkeypatch.setattr(xc, "compiled_decoder", lambda: decoder)
    try:
        x2t.from_source(data)
    except AssertionError:
        raise
    except Exception as err:  # noqa: BLE001 - the one-line errors are the other tests'
        decoder.raised = type(err).__name__
    finally:
        monkeypatch.undo()
    return decoder


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_two_halves_decode_the_fixtures_byte_for_byte(monkeypatch: pytest.MonkeyPatch,
                                                       path: Path) -> None:
    assert xc._xspace_decode is not None, "the compiled decoder was not built"
    decoder = both_ways(monkeypatch, path.read_bytes())
    assert not decoder.errors and decoder.raised is None
    assert len(decoder.cuts - {-1}) >= 2  # it was cut, at more than one place


def _big_space(events_per_line: int = 1500) -> bytes:
    """Several planes (one without metadata, one without lines), lines with stats of every
    kind, typed stats (in the last plane only: the first half may have none), negative
    durations, unknown metadata ids and a line whose timestamp comes after its events."""
    space = XSpace()
    space.hostnames.append("host")
    space.planes.add(id=1, name="/bare")
    for p in range(3):
        plane = space.planes.add(id=10 + p, name=f"/device:GPU:{p}")
        plane.event_metadata[1].name = "op"
        plane.event_metadata[2].name = "kernel"
        plane.stat_metadata[5].name = "note"
        plane.stat_metadata[6].name = "blob"
        plane.stat_metadata[7].name = schema.STEP_NUM
        plane.stat_metadata[8].name = schema.CORRELATION_ID
        plane.stats.add(metadata_id=5, str_value=f"plane {p}")
        for n in range(4 if p < 2 else 24):
            line = plane.lines.add(id=n, name=f"stream {n}", display_name=f"s{n}" * (n % 2))
            if not (p == 1 and n == 2):
                line.timestamp_ns = 1_000_000 * (p + 1) + n
            for i in range(events_per_line):
                ev = line.events.add(metadata_id=1 + i % 3, offset_ps=i * 1_700 + 499,
                                     duration_ps=-3_000 if i % 97 == 5 else 1_250 + i)
                if i % 3 == 0:
                    ev.stats.add(metadata_id=5, str_value=f"n{i}")
                if i % 5 == 1:
                    ev.stats.add(metadata_id=6, bytes_value=bytes([i % 256]) * (i % 7))
                    ev.stats.add(metadata_id=5, double_value=i / 3)
                if p == 2:
                    ev.stats.add(metadata_id=7, uint64_value=i)
                    ev.stats.add(metadata_id=8, int64_value=-i)
                    ev.stats.add(metadata_id=99, ref_value=6)
            if p == 1 and n == 2:
                line.timestamp_ns = 7  # after the events: serialised first, read the same
    plane = space.planes.add(id=20, name="/host:CPU")  # no lines
    plane.event_metadata[1].name = "idle"
    return space.SerializeToString()


def test_two_halves_decode_a_big_profile_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    # Big enough that columns outgrow 1 MiB (on Linux: mappings, whose pages are moved behind
    # the first half's rather than copied) and cut at many points: between planes, at lines,
    # inside lines, before and after the plane with typed stats.
    data = _big_space(events_per_line=6000)
    assert len(data) > 4 << 20
    decoder = both_ways(monkeypatch, data, points=24)
    assert not decoder.errors and decoder.raised is None
    assert len(decoder.cuts - {-1}) >= 12
    table = x2t.from_source(data)  # the default: one walk below 32 MiB
    assert table.stats.value.nbytes > 1 << 20
    assert len(table) == 6000 * 32
    assert TypedStats.of(table.typed).sparse[schema.STEP_NUM][0].nbytes > 1 << 20


def test_a_big_file_is_walked_in_two_halves_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _big_space(events_per_line=1500)
    real = xc.compiled_decoder()
    args: list[Any] = []
    cuts: list[int] = []

    class Recorder:
        scan = staticmethod(real.scan)

        @staticmethod
        def decode_table(*a: Any, **kw: Any) -> Any:
            args.append(kw)
            raw = real.decode_table(*a, **kw, split_bytes=0)
            cuts.append(raw["cut_at"])
            return raw

    monkeypatch.setattr(xc, "compiled_decoder", lambda: Recorder)
    monkeypatch.delenv("STEPSCOPE_DECODE_THREADS", raising=False)
    x2t.from_source(data)
    monkeypatch.setenv("STEPSCOPE_DECODE_THREADS", "1")
    x2t.from_source(data)
    assert [a["threads"] for a in args] == [2, 1]
    assert cuts[0] > 0 and cuts[1] == -1


def test_damaged_data_gives_the_same_error_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bytes changed inside the lines (which scan skips unread) reach the walk: each half's
    # first error is raised as the one walk's would be, wherever the cut falls.
    data = _big_space(events_per_line=40)
    errors: set[tuple[str, str]] = set()
    for at in range(len(data) // 7, len(data), len(data) // 23):
        for byte in (0xFF, 0x07, 0x00):
            damaged = bytearray(data)
            damaged[at] = byte
            errors |= both_ways(monkeypatch, bytes(damaged), points=16).errors
    for cut in (len(data) // 3, len(data) - 5):
        errors |= both_ways(monkeypatch, data[:cut], points=8).errors
    assert len(errors) >= 2, errors  # the walk's errors, not only scan's


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The length-delimited fields of the message in data[start:end]: (key offset, field
    number, payload start, payload end); the test's data has no other wire types but varints."""
    out, at = [], start

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            value |= (data[i] & 0x7F) << shift
            shift += 7
            i += 1
            if not data[i - 1] & 0x80:
                return value, i

    while at < end:
        key, i = varint(at)
        if key & 7 == 2:
            n, i = varint(i)
            out.append((at, key >> 3, i, i + n))
            at = i + n
        else:
            at = varint(i)[1]
    return out


def test_the_first_halfs_error_past_its_cut_gives_way(monkeypatch: pytest.MonkeyPatch) -> None:
    # A line cut in two: the first half reads the rest of it for its timestamp and texts but
    # decodes none of its events. A broken length there is an error it meets, but the one
    # walk meets a broken event before it first: the second half's error is raised.
    space = XSpace()
    plane = space.planes.add(id=1, name="/device:GPU:0")
    plane.event_metadata[1].name = "op"
    line = plane.lines.add(id=1, name="stream")
    for i in range(100):
        line.events.add(metadata_id=1, offset_ps=i, duration_ps=5).stats.add(
            metadata_id=2, int64_value=i)
    line.timestamp_ns = 9  # after the events: the first half must read past its cut
    data = bytearray(space.SerializeToString())
    (_, _, p, pend), = _fields(data, 0, len(data))
    (_, _, a, b), = [f for f in _fields(data, p, pend) if f[1] == 3]
    events = [f for f in _fields(data, a, b) if f[1] == 4]
    last_key, _, last_start, _ = events[-1]
    assert data[last_key + 1] < 0x7F and last_start + 0x7F > b
    data[last_key + 1] = 0x7F  # its length past the line's end
    data[events[80][2]] = 1 << 3 | 3  # a wire type protobuf has no more: an event's error
    decoder = both_ways(monkeypatch, bytes(data), points=40)
    assert decoder.errors == {("ValueError", "malformed XSpace data: unsupported wire type")}
    assert decoder.cuts == set()


def test_more_lines_than_int16_holds_overflow_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lines are written as int16 codes until one past 32767 has an event: OverflowError, and
    # the data is read again with int32 lines. The second half counts its lines from 0, so the
    # overflow is found when the halves are appended, as the one walk finds it.
    space = XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "op"
    for n in range(33_000):
        plane.lines.add(id=n).events.add(metadata_id=1, offset_ps=n, duration_ps=1)
    data = space.SerializeToString()
    decoder = both_ways(monkeypatch, data, points=8)
    assert ("OverflowError", "more lines than int16 codes hold") in decoder.errors
    assert decoder.raised is None and len(decoder.cuts - {-1}) >= 4
    assert x2t.from_source(data).line.dtype.itemsize == 4


@pytest.mark.parametrize("change", ["plane added", "plane removed", "cut short"])
def test_a_file_changed_after_its_scan_gives_the_same_error(monkeypatch: pytest.MonkeyPatch,
                                                            change: str) -> None:
    # The planes' metadata comes from the scan; the walk then reads other bytes (as a file
    # rewritten in between would give): both ways meet the change as the one walk does.
    data = _big_space(events_per_line=300)
    space = XSpace.FromString(data)
    if change == "plane added":
        space.planes.append(space.planes[1])
        later = space.SerializeToString()
    elif change == "plane removed":
        del space.planes[1]
        later = space.SerializeToString()
    else:
        later = data[: len(data) * 2 // 3]

    class Changed(BothWays):
        def decode_table(self, source: Any, *args: Any, **kwargs: Any) -> Any:
            return super().decode_table(later, *args, **kwargs)

    decoder = Changed(sorted(range(0, len(later), len(later) // 16)))
    monkeypatch.setattr(xc, "compiled_decoder", lambda: decoder)
    with pytest.raises(Exception, match="XSpace"):
        x2t.from_source(data)
    assert decoder.errors and decoder.errors <= {
        ("ValueError", "malformed XSpace data: the file changed while it was read"),
        ("ValueError", "malformed XSpace data: length past the end of the data")}
