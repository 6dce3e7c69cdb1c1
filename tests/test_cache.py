"""The on-disk cache: real tables round-trip exactly, and every kind of damage is a quiet miss."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import struct
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope import version
from stepscope.formats import xspace_columns as xc
from stepscope.formats import xspace_to_tables as x2t
from stepscope.model import cache
from stepscope.model import stat_kinds as sk
from stepscope.model.events import EventTable, Plane, StatTable

from conftest import FIXTURES

XPLANE_FIXTURES = sorted(FIXTURES.rglob("*.xplane.pb"))
BIG_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


# A fresh, enabled cache directory for every test (conftest's cache_home).
pytestmark = pytest.mark.usefixtures("cache_home")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A private copy of a fixture, free to be touched and changed."""
    path = tmp_path / "src" / "host.xplane.pb"
    path.parent.mkdir()
    shutil.copyfile(XPLANE_FIXTURES[0], path)
    return path


def assert_same_value(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def assert_same_table(a: EventTable, b: EventTable) -> None:
    """Every column, list and plane stat equal, with the same dtypes and Python types."""
    for f in dataclasses.fields(EventTable):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        elif f.name == "typed":
            assert list(x) == list(y)
            for key in x:
                assert x[key].dtype == y[key].dtype and np.array_equal(x[key], y[key]), key
        elif f.name == "planes":
            assert len(x) == len(y)
            for p, q in zip(x, y, strict=True):
                assert (p.id, p.name, list(p.stats)) == (q.id, q.name, list(q.stats))
                for key in p.stats:
                    assert_same_value(p.stats[key], q.stats[key])
        elif f.name == "stats":
            for g in dataclasses.fields(StatTable):
                s, t = getattr(x, g.name), getattr(y, g.name)
                if isinstance(s, np.ndarray):
                    assert s.dtype == t.dtype and np.array_equal(s, t), g.name
                elif g.name == "text":  # the cache hands back a view of the mapped file
                    assert bytes(s) == bytes(t), g.name
                else:
                    assert type(s) is type(t) and s == t, g.name
        else:
            assert type(x) is type(y) and x == y, f.name


def table_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_the_format_knows_every_field() -> None:
    # A new field must be stored by cache.py (and FORMAT_VERSION bumped) before this passes.
    assert [f.name for f in dataclasses.fields(EventTable)] == [
        "planes", "line_plane", "line_id", "line_name", "line", "name", "start_ns",
        "duration_ns", "typed", "names", "stats", "hostnames"]
    assert [f.name for f in dataclasses.fields(StatTable)] == [
        "event", "name", "kind", "value", "text", "text_offsets", "stat_names"]
    assert [f.name for f in dataclasses.fields(Plane)] == ["id", "name", "stats"]


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_fixture_tables_round_trip(path: Path, cache_home: Path) -> None:
    table = x2t.load_xspace(path)
    assert cache.load_table(path) is None
    cache.save_table(path, table)
    loaded = cache.load_table(path)
    assert loaded is not None
    assert_same_table(table, loaded)
    assert all(loaded.stats.value_of(r) == table.stats.value_of(r)
               for r in range(0, len(table.stats.event), 97))
    assert not loaded.start_ns.flags.writeable  # documented: columns are read-only
    assert table_files(cache_home) == [f"{cache.source_key([path])}.table.cache"]


def test_own_profile_round_trips(tmp_path: Path) -> None:
    stepscope.start(tmp_path / "logs", options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for step in range(3):
        with stepscope.Trace("x", step_num=step, _r=1, lr=0.5, phase="fit"):
            pass
    path = stepscope.stop()
    assert path is not None
    assert path.parent.parent.name == "profile" and path.name.endswith(".xplane.pb")
    table = x2t.load_xspace(path)
    cache.save_table(path, table)
    loaded = cache.load_table(path)
    assert loaded is not None
    assert_same_table(table, loaded)
    train = loaded.name == loaded.name_code("x")
    assert loaded.typed["step_num"][train].tolist() == [0, 1, 2]
    side = loaded.stats
    assert {side.value_of(r) for r in range(len(side.event))} == {0.5, "fit"}


def test_every_kind_of_plane_stat_round_trips(source: Path) -> None:
    table = x2t.load_xspace(source)
    odd = {"int": -7, "uint64": 2**64 - 1, "float": 0.1, "whole_float": 3.0, "inf": math.inf,
           "nan": math.nan, "str": "naïve → ✓", "bad_utf8": b"\xff".decode("utf-8", "replace"),
           "bytes": bytes(range(256)), "empty_bytes": b"", "empty_str": ""}
    table.planes = [dataclasses.replace(table.planes[0], stats=odd), *table.planes[1:]]
    cache.save_table(source, table)
    loaded = cache.load_table(source)
    assert loaded is not None
    assert_same_table(table, loaded)


def test_empty_table_round_trips(source: Path) -> None:
    empty = x2t.from_columns(xc.decode_columns(b"", "empty"))
    assert len(empty) == 0
    cache.save_table(source, empty)
    loaded = cache.load_table(source)
    assert loaded is not None
    assert_same_table(empty, loaded)


def test_changed_source_is_a_miss(source: Path, cache_home: Path) -> None:
    cache.save_table(source, x2t.load_xspace(source))
    assert cache.load_table(source) is not None
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.load_table(source) is None
    cache.save_table(source, x2t.load_xspace(source))
    assert cache.load_table(source) is not None
    st = source.stat()
    with open(source, "ab") as f:
        f.write(b'"\x05extra')  # XSpace field 4: one more hostname
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime, new size
    assert cache.load_table(source) is None
    # Saving for the new state removes the entry for the old state: it can never be hit.
    cache.save_table(source, x2t.load_xspace(source))
    loaded = cache.load_table(source)
    assert loaded is not None and loaded.hostnames[-1] == "extra"
    assert table_files(cache_home) == [f"{cache.source_key([source])}.table.cache"]


def test_missing_source_is_a_miss(tmp_path: Path, cache_home: Path) -> None:
    missing = tmp_path / "gone.xplane.pb"
    assert cache.load_table(missing) is None
    cache.save_table(missing, x2t.load_xspace(XPLANE_FIXTURES[0]))
    assert table_files(cache_home) == []
    with pytest.raises(FileNotFoundError):
        cache.source_key([missing])


def _split(data: bytes) -> tuple[bytes, dict[str, Any], int]:
    """An entry's prefix, its parsed header and where its data section starts."""
    header_length = struct.unpack_from("<Q", data, 16)[0]
    header = json.loads(data[56:56 + header_length])
    return data[:56], header, -(-(56 + header_length) // 64) * 64


def _rewritten(data: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """The entry with its header changed and its checksum made right again (a foreign or
    buggy writer, not random damage: the checks past the checksum must catch it)."""
    prefix, header, start = _split(data)
    change(header)
    blob = json.dumps(header, separators=(",", ":")).encode()
    new_start = -(-(56 + len(blob)) // 64) * 64
    prefix = (prefix[:16] + struct.pack("<Q", len(blob)) + prefix[24:48]
              + struct.pack("<I", zlib.crc32(blob)) + b"\0" * 4)
    return prefix + blob + b"\0" * (new_start - 56 - len(blob)) + data[start:]


def _set_first_array(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(header: dict[str, Any]) -> None:
        header["arrays"][0][key] = value
    return change


def _damage_cases(data: bytes) -> dict[str, bytes]:
    _, header, start = _split(data)
    middle = start + len(data[start:]) // 2
    flipped = bytearray(data)
    flipped[middle] ^= 0x01
    in_header = bytearray(data)
    in_header[60] ^= 0x20
    return {
        "empty": b"",
        "prefix only": data[:20],
        "header cut": data[:start - 10],
        "data cut": data[:middle],
        "one byte short": data[:-1],
        "one byte long": data + b"\0",
        "bad magic": b"X" + data[1:],
        "absurd header length": data[:16] + struct.pack("<Q", 2**62) + data[24:],
        "one bit in the header": bytes(in_header),
        "one bit in the data": bytes(flipped),
        "format version": _rewritten(data, lambda h: h.update(format=99)),
        "stepscope version": _rewritten(data, lambda h: h.update(stepscope="9.9.9")),
        "other key": _rewritten(data, lambda h: h.update(key="0" * 32)),
        "float column": _rewritten(data, _set_first_array("dtype", "<f4")),
        "object column": _rewritten(data, _set_first_array("dtype", "|O8")),
        "column past the end": _rewritten(data, _set_first_array("offset", 2**40)),
        "misaligned column": _rewritten(data, _set_first_array("offset", 8)),
        "negative shape": _rewritten(data, _set_first_array("shape", [-1])),
        "wrong checksum": _rewritten(data, _set_first_array("crc", 12345)),
        "meta not an object": _rewritten(data, lambda h: h.update(meta=[1])),
    }


DAMAGE = ["empty", "prefix only", "header cut", "data cut", "one byte short", "one byte long",
          "bad magic", "absurd header length", "one bit in the header", "one bit in the data",
          "format version", "stepscope version", "other key", "float column", "object column",
          "column past the end", "misaligned column", "negative shape", "wrong checksum",
          "meta not an object"]


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_table_file_is_a_miss_and_removed(case: str, source: Path,
                                                  cache_home: Path) -> None:
    cache.save_table(source, x2t.load_xspace(source))
    (entry,) = cache_home.iterdir()
    cases = _damage_cases(entry.read_bytes())
    assert list(cases) == DAMAGE
    damaged = cases[case]
    assert damaged != entry.read_bytes()
    entry.write_bytes(damaged)
    assert cache.load_table(source) is None
    assert not entry.exists()
    cache.save_table(source, x2t.load_xspace(source))
    assert cache.load_table(source) is not None


def test_one_changed_byte_in_any_column_is_a_miss(tmp_path: Path, cache_home: Path) -> None:
    source = tmp_path / "host.xplane.pb"
    shutil.copyfile(BIG_FIXTURE, source)  # one with text stats and typed columns
    table = x2t.load_xspace(source)
    cache.save_table(source, table)
    (entry,) = cache_home.iterdir()
    good = entry.read_bytes()
    _, header, start = _split(good)
    columns = [c for c in header["arrays"] if c["shape"] != [0]]
    assert {"start_ns", "duration_ns", "name", "stats.event", "stats.text"} <= {
        c["name"] for c in columns}
    for column in columns:
        damaged = bytearray(good)
        damaged[start + column["offset"]] ^= 0x04
        entry.write_bytes(bytes(damaged))
        assert cache.load_table(source) is None, column["name"]
        assert not entry.exists()
        entry.write_bytes(good)
        assert cache.load_table(source) is not None


def test_no_cache_switch(source: Path, cache_home: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    table = x2t.load_xspace(source)
    for value in ("", "0"):
        monkeypatch.setenv("STEPSCOPE_NO_CACHE", value)
        assert cache.enabled()
    cache.save_table(source, table)
    cache.save_result([source], "overview", {"a": 1})
    for value in ("1", "yes", "true"):
        monkeypatch.setenv("STEPSCOPE_NO_CACHE", value)
        assert not cache.enabled()
        assert cache.load_table(source) is None
        assert cache.load_result([source], "overview") is None
    shutil.rmtree(cache_home)
    cache.save_table(source, table)
    cache.save_result([source], "overview", {"a": 1})
    assert not cache_home.exists()


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache.cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("STEPSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "stepscope"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "stepscope"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "stepscope"


def _save_everything(source: Path) -> list[warnings.WarningMessage]:
    table = x2t.load_xspace(source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.save_table(source, table)
        cache.save_table(source, table)
        cache.save_result([source], "overview", {"steps": 3})
    assert cache.load_table(source) is None
    assert cache.load_result([source], "overview") is None
    return [w for w in caught if issubclass(w.category, cache.CacheWarning)]


def test_unwritable_cache_warns_once(source: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A path under a regular file cannot be created, even by root.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(blocker / "cache"))
    caught = _save_everything(source)
    assert len(caught) == 1
    assert "a-file" in str(caught[0].message)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes to read-only directories")
def test_read_only_cache_dir_warns(source: Path, cache_home: Path) -> None:
    cache_home.mkdir()
    cache_home.chmod(0o555)
    try:
        assert len(_save_everything(source)) == 1
    finally:
        cache_home.chmod(0o755)
    assert table_files(cache_home) == []


def test_unstorable_plane_stat_warns_instead_of_raising(source: Path, cache_home: Path) -> None:
    table = x2t.load_xspace(source)
    table.planes[0].stats["odd"] = object()
    with pytest.warns(cache.CacheWarning):
        cache.save_table(source, table)
    assert table_files(cache_home) == []


def test_mapped_table_survives_overwrite_and_clear(source: Path) -> None:
    table = x2t.load_xspace(source)
    cache.save_table(source, table)
    first = cache.load_table(source)
    assert first is not None
    cache.save_table(source, table)  # replaces the file under the mapping
    assert cache.clear() == 1
    assert_same_table(table, first)
    assert cache.load_table(source) is None


def test_source_key() -> None:
    a, b = XPLANE_FIXTURES[0], XPLANE_FIXTURES[1]
    key = cache.source_key([a, b])
    assert len(key) == 32 and int(key, 16) >= 0
    assert cache.source_key([b, a]) == key
    assert cache.source_key([a, b], salt="v2") != key
    assert cache.source_key([a]) != key
    assert cache.source_key([a.parent / ".." / a.parent.name / a.name, b]) == key


def test_new_stepscope_version_invalidates(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.save_table(source, x2t.load_xspace(source))
    cache.save_result([source], "overview", {"a": 1})
    key = cache.source_key([source])
    monkeypatch.setattr(version, "__version__", version.__version__ + ".post1")
    assert cache.source_key([source]) != key
    assert cache.load_table(source) is None
    assert cache.load_result([source], "overview") is None


def test_result_round_trip(tmp_path: Path, cache_home: Path) -> None:
    a, b = tmp_path / "a.xplane.pb", tmp_path / "b.xplane.pb"
    a.write_bytes(b"a")
    b.write_bytes(b"bb")
    result = {"steps": [{"step": 1, "ms": 12.5}], "name": "naïve ✓", "none": None,
              "big": 2**70, "nested": {"ok": True}}
    assert cache.load_result([a, b], "overview") is None
    cache.save_result([a, b], "overview", result)
    assert cache.load_result([b, a], "overview") == result
    assert cache.load_result([a, b], "op_stats") is None
    assert cache.load_result([a], "overview") is None
    cache.save_result([a, b], "op_stats.v1", {"rows": []})
    assert cache.load_result([a, b], "op_stats.v1") == {"rows": []}
    # A changed source misses, and the next save replaces the old entry.
    b.write_bytes(b"bbb")
    assert cache.load_result([a, b], "overview") is None
    cache.save_result([a, b], "overview", {"steps": []})
    assert cache.load_result([a, b], "overview") == {"steps": []}
    assert len([n for n in table_files(cache_home) if ".overview." in n]) == 1
    assert not [n for n in table_files(cache_home) if n.startswith(".")]


@pytest.mark.parametrize("damage", ["empty", "not an entry", "one bit", "cut", "trailing",
                                    "array result", "not json", "edited"])
def test_damaged_result_is_a_miss_and_removed(damage: str, tmp_path: Path,
                                              cache_home: Path) -> None:
    src = tmp_path / "a.xplane.pb"
    src.write_bytes(b"a")
    cache.save_result([src], "overview", {"a": 1})
    (entry,) = cache_home.iterdir()
    good = entry.read_bytes()
    flipped = bytearray(good)
    flipped[-64] ^= 0x01  # inside the JSON text, which is padded to 64 bytes
    if damage in ("array result", "not json"):  # well-formed entries holding bad results
        payload = b"[1]" if damage == "array result" else b"{"
        cache._save([src], "overview", {}, {"json": np.frombuffer(payload, dtype=np.uint8)})
    else:
        entry.write_bytes({"empty": b"", "not an entry": b"not json at all\n",
                           "one bit": bytes(flipped), "cut": good[:-70],
                           "trailing": good + b"x",
                           "edited": good.replace(b'{"a":1}', b'{"a":2}')}[damage])
        assert entry.read_bytes() != good
    assert cache.load_result([src], "overview") is None
    assert not entry.exists()


@pytest.mark.parametrize("name", ["", "a/b", "../x", "a b", "naïve", "x" * 201, "a\nb"])
def test_bad_result_names(name: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not valid"):
        cache.save_result([tmp_path], name, {})
    with pytest.raises(ValueError, match="not valid"):
        cache.load_result([tmp_path], name)


def test_results_must_be_json_objects(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        cache.save_result([tmp_path], "overview", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cache.save_result([tmp_path], "overview", {"x": object()})


def test_clear_removes_only_cache_files(source: Path, cache_home: Path) -> None:
    assert cache.clear() == 0
    cache.save_table(source, x2t.load_xspace(source))
    cache.save_result([source], "overview", {"a": 1})
    cache.save_result([source], "steps", {"a": 2})
    (cache_home / "notes.txt").write_text("mine")
    (cache_home / ".tmp-leftover").write_bytes(b"half")
    assert cache.clear() == 4
    assert table_files(cache_home) == ["notes.txt"]
    assert cache.load_table(source) is None


def _repeat(table: EventTable, times: int) -> EventTable:
    """The table's events ``times`` over, one copy after another in time."""
    n, st = len(table), table.stats
    span = int((table.start_ns + table.duration_ns).max() - table.start_ns.min()) + 1
    shift = np.repeat(np.arange(times, dtype=np.int64), n) * span
    textual = np.isin(st.kind, (sk.KIND_STR, sk.KIND_BYTES))
    n_texts = len(st.text_offsets) - 1
    text_shift = np.repeat(np.arange(times, dtype=np.int64), len(st.event)) * n_texts
    offsets = np.concatenate([[0], *(st.text_offsets[1:] + k * len(st.text)
                                     for k in range(times))]).astype(np.int64)
    return dataclasses.replace(
        table,
        line=np.tile(table.line, times),
        name=np.tile(table.name, times), start_ns=np.tile(table.start_ns, times) + shift,
        duration_ns=np.tile(table.duration_ns, times),
        typed={k: np.tile(v, times) for k, v in table.typed.items()},
        stats=dataclasses.replace(
            st, event=(np.repeat(np.arange(times, dtype=np.int64), len(st.event)) * n
                       + np.tile(st.event, times)).astype(np.int32),
            name=np.tile(st.name, times), kind=np.tile(st.kind, times),
            value=np.tile(st.value, times) + np.where(np.tile(textual, times), text_shift, 0),
            text=bytes(st.text) * times, text_offsets=offsets))


def test_load_time_of_a_five_million_event_table(tmp_path: Path, cache_home: Path) -> None:
    base = x2t.load_xspace(BIG_FIXTURE)
    big = _repeat(base, -(-5_000_000 // len(base)))
    source = tmp_path / "big.xplane.pb"
    source.write_bytes(b"stand-in source")
    started = time.perf_counter()
    cache.save_table(source, big)
    saved = time.perf_counter() - started
    loads = []
    loaded: EventTable | None = None
    for _ in range(5):
        loaded = None  # unmapping the previous load is not part of the next one
        started = time.perf_counter()
        loaded = cache.load_table(source)
        loads.append(time.perf_counter() - started)
    assert loaded is not None
    started = time.perf_counter()
    touched = sum(int(a.sum()) for a in (loaded.start_ns, loaded.duration_ns, loaded.name,
                                         loaded.stats.value, loaded.stats.event))
    first_pass = time.perf_counter() - started
    assert touched
    assert_same_table(big, loaded)
    assert loaded.stats.value_of(len(loaded.stats.event) - 1) == base.stats.value_of(
        len(base.stats.event) - 1)
    size = (cache_home / f"{cache.source_key([source])}.table.cache").stat().st_size
    print(f"\n{len(big):,} events, {len(big.stats.event):,} side stats, "
          f"{size / 2**20:.0f} MiB cache file: save {saved * 1e3:.0f} ms, "
          f"load best {min(loads) * 1e3:.1f} ms / worst {max(loads) * 1e3:.1f} ms, "
          f"first pass over five columns {first_pass * 1e3:.0f} ms")
    assert cache.clear() == 1  # do not leave most of a gigabyte behind in the temp dir


def test_a_table_in_use_survives_its_file_being_truncated(source: Path,
                                                          cache_home: Path) -> None:
    # Another process (a second stepscope, a clean-up) may shrink a cache file while a
    # server still uses the table read from it: a mapping would die of SIGBUS.
    table = x2t.load_xspace(source)
    cache.save_table(source, table)
    loaded = cache.load_table(source)
    assert loaded is not None
    (entry,) = cache_home.iterdir()
    with open(entry, "r+b") as f:
        f.truncate(64)
    assert_same_table(table, loaded)
    assert int(loaded.start_ns.sum()) == int(table.start_ns.sum())
    assert cache.load_table(source) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_an_entry_that_is_not_a_regular_file_is_a_miss(kind: str, source: Path,
                                                       cache_home: Path, tmp_path: Path) -> None:
    cache.save_table(source, x2t.load_xspace(source))
    (entry,) = cache_home.iterdir()
    target = tmp_path / "elsewhere"
    target.write_bytes(entry.read_bytes())
    entry.unlink()
    if kind == "fifo":
        os.mkfifo(entry)  # reading it would block forever
    elif kind == "symlink":
        entry.symlink_to(target)
    else:
        entry.mkdir()
    assert cache.load_table(source) is None
    assert target.read_bytes()  # a symlink's target is never touched
    cache.save_table(source, x2t.load_xspace(source))
    assert cache.load_table(source) is not None


def test_arrays_round_trip_and_superseded_entries_go(tmp_path: Path, cache_home: Path) -> None:
    src = tmp_path / "a.xplane.pb"
    src.write_bytes(b"a")
    arrays = {"i": np.arange(5, dtype=np.int64), "f": np.linspace(0, 1, 7),
              "m": np.arange(12, dtype=np.int32).reshape(3, 4), "e": np.empty(0, np.int8),
              "big_endian": np.arange(3, dtype=">i8"), "b": np.array([True, False])}
    assert cache.save_arrays([src], "index.v1", {"version": 1}, arrays)
    header, got = cache.load_arrays([src], "index.v1")  # type: ignore[misc]
    assert header == {"version": 1}
    for key, array in arrays.items():
        assert np.array_equal(got[key], array) and got[key].shape == array.shape, key
        assert not got[key].flags.writeable
    with pytest.raises(TypeError, match="cannot store"):
        cache.save_arrays([src], "index.v1", {}, {"o": np.array([object()])})
    # A changed source: the new entry replaces the old one, for arrays as for results.
    src.write_bytes(b"aa")
    assert cache.load_arrays([src], "index.v1") is None
    cache.save_arrays([src], "index.v1", {"version": 2}, arrays)
    assert [n for n in table_files(cache_home) if n.endswith(".index.v1.cache")] == [
        f"{cache.source_key([src])}.index.v1.cache"]


def test_a_header_is_written_in_pieces_as_one_json_text(tmp_path: Path, cache_home: Path
                                                       ) -> None:
    """The header is written a piece at a time (a run model's is MBs): the bytes are those of
    one ``json.dumps``, whatever it holds; what JSON cannot hold leaves no entry."""
    src = tmp_path / "a.xplane.pb"
    src.write_bytes(b"a")
    odd: dict[str, Any] = {
        "nested": {"a": {"b": {"c": {"d": {"e": [1, 2.5, None, True, "x"]}}}}},
        "int_keys": {1: "one", 2.5: "x", None: 0, False: 1}, "mixed": {"k": {3: [{}]}},
        "text": "quote \" backslash \\ ñ 雪 \u0000 \ud83d\ude00", "floats": [math.inf,
                                                                           -math.inf, 1e300],
        "empty": {}, "list": [{"a": 1}, [], [[{}]]], "nan": math.nan}
    from stepscope.run.loader import open_run_model

    model = open_run_model(FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker",
                           use_cache=False).to_dict()
    for header in (odd, model, {}):
        assert "".join(cache._json_pieces(header, 5)) == json.dumps(header,
                                                                  separators=(",", ":"))
        assert cache.save_arrays([src], "index.v1", header, {"i": np.arange(3)})
        (path,) = [cache_home / n for n in table_files(cache_home)]
        raw = path.read_bytes()
        prefix = cache._PREFIX.unpack_from(raw)
        blob = raw[cache._PREFIX.size:cache._PREFIX.size + prefix[1]]
        assert prefix[4] == zlib.crc32(blob)
        meta = json.loads(blob)["meta"]["header"]
        assert json.dumps(meta, separators=(",", ":")) == json.dumps(
            json.loads(json.dumps(header)), separators=(",", ":"))
        got = cache.load_arrays([src], "index.v1")
        assert got is not None and np.array_equal(got[1]["i"], np.arange(3))
    with pytest.warns(cache.CacheWarning, match="JSON cannot hold"):
        assert not cache.save_arrays([src], "other.v1", {"a": {"b": {1, 2}}}, {})
    assert [n for n in table_files(cache_home) if "other" in n] == []
    assert not [p for p in cache_home.rglob("*") if p.name.startswith(".tmp-")]


def test_files_of_earlier_formats_go_on_the_next_save(source: Path, cache_home: Path) -> None:
    cache_home.mkdir()
    old = [cache_home / f"{'a' * 32}.table", cache_home / f"{'b' * 32}.arrays",
           cache_home / f"{'c' * 32}.run_model.v3.json"]
    for path in old:
        path.write_bytes(b"old")
    (cache_home / "notes.txt").write_text("mine")
    cache.save_table(source, x2t.load_xspace(source))
    assert table_files(cache_home) == sorted(
        ["notes.txt", f"{cache.source_key([source])}.table.cache"])


def test_the_cache_is_trimmed_least_recently_used_first(
        tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = []
    for i in range(4):
        src = tmp_path / f"s{i}.xplane.pb"
        src.write_bytes(b"x" * (i + 1))
        sources.append(src)
        cache.save_result([src], "r", {"blob": "y" * 5000, "i": i})
    entries = {s: cache_home / f"{cache.source_key([s])}.r.cache" for s in sources}
    for age, src in enumerate(sources):  # s0 oldest ... s3 newest, a second apart
        os.utime(entries[src], ns=(10**18 + age * 10**9,) * 2)
    assert cache.load_result([sources[0]], "r") is not None  # used: now the newest
    size = entries[sources[0]].stat().st_size
    monkeypatch.setenv("STEPSCOPE_CACHE_MAX_GB", str(3.5 * size / 1e9))
    fifth = tmp_path / "s4.xplane.pb"
    fifth.write_bytes(b"z")
    cache.save_result([fifth], "r", {"blob": "y" * 5000, "i": 4})
    kept = {s.name for s in [*sources, fifth] if cache.load_result([s], "r") is not None}
    assert kept == {"s0.xplane.pb", "s3.xplane.pb", "s4.xplane.pb"}


@pytest.mark.parametrize("value", ["", "nonsense", "-1", "0", "nan", "inf"])
def test_a_bad_cache_bound_falls_back_to_the_default(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_MAX_GB", value)
    expected = cache.DEFAULT_MAX_GB * 1e9 if value != "inf" else 1e18
    assert cache.max_bytes() == int(expected)


def test_the_xla_byte_probe_is_kept_in_the_cache(tmp_path: Path) -> None:
    # The probe reads the whole file; a tool on a cached run must find its answer on disk.
    from stepscope.formats.xspace_to_xla import XLA_OPS_LINE
    from stepscope.run.loader import _probe, has_xla_data

    with_xla = tmp_path / "a.xplane.pb"
    with_xla.write_bytes(b"\x00" * 100 + XLA_OPS_LINE.encode() + b"\x00" * 100)
    without = tmp_path / "b.xplane.pb"
    without.write_bytes(b"\x01" * 300)
    assert has_xla_data([without, with_xla]) and not has_xla_data([without])
    assert cache.load_result([with_xla], "probe_xla") == {"found": True}
    assert cache.load_result([without], "probe_xla") == {"found": False}
    # A later process (no answer in memory) takes the cached one: a file truncated in place
    # with its size and time kept would read differently, the cache answers as before.
    _probe.cache_clear()
    stat = with_xla.stat()
    with_xla.write_bytes(b"\x02" * stat.st_size)
    os.utime(with_xla, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert has_xla_data([with_xla])


def test_the_xla_byte_probe_reads_a_window_at_a_time(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe once mapped the whole file: every page it touched counted in the report's
    # peak memory (the file's size on top of the tables). It now reads windows; a marker that
    # straddles two windows is still found, anywhere in the file.
    from stepscope.formats import xspace_to_xla as x2x

    monkeypatch.setattr(x2x, "_PROBE_WINDOW", 16)
    marker = x2x.XLA_OPS_LINE.encode()
    for at in range(0, 40):
        path = tmp_path / f"p{at}.xplane.pb"
        path.write_bytes(b"\x00" * at + marker + b"\x00" * 7)
        assert x2x.may_hold_xla(path), at
        path.write_bytes(b"\x00" * at + marker[:-1] + b"\x00" + marker[1:])
        assert not x2x.may_hold_xla(path), at
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    assert not x2x.may_hold_xla(empty) and not x2x.may_hold_xla(tmp_path / "missing.pb")


def test_code_columns_are_int16_where_every_code_fits(cache_home: Path) -> None:
    # Lines, event names and stat names: a few hundred codes over millions of rows.
    from stepscope.model.events import narrow_codes

    table = x2t.load_xspace(BIG_FIXTURE)
    assert {table.line.dtype, table.name.dtype, table.stats.name.dtype} == {np.dtype(np.int16)}
    assert table.plane.dtype == np.int8  # a few planes: a byte an event
    cache.save_table(BIG_FIXTURE, table)
    loaded = cache.load_table(BIG_FIXTURE)
    assert loaded is not None and loaded.stats.name.dtype == np.int16
    assert_same_table(table, loaded)
    many = np.arange(40_000, dtype=np.int64)
    assert narrow_codes(many[:32_767], 32_767).dtype == np.int16
    wide = narrow_codes(many, len(many))
    assert wide.dtype == np.int32 and np.array_equal(wide, many)


def test_an_entry_is_read_in_full_across_short_reads() -> None:
    """One read returns at most about 2 GiB on Linux, and less from a pipe: the reader goes on
    until the buffer is full (an entry of a 1 GB profile's table was a miss every time)."""
    import threading

    payload = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as w:
            for i in range(0, len(payload), 40_000):  # in pieces: short reads on the other end
                w.write(payload[i:i + 40_000])

    writer = threading.Thread(target=feed)
    writer.start()
    buffer = np.empty(len(payload) + 10, dtype=np.uint8)
    with os.fdopen(read_end, "rb", buffering=0) as r:
        assert cache.read_fully(r, buffer.data) == len(payload)  # to the end, not beyond
    writer.join()
    assert buffer[:len(payload)].tobytes() == payload


# -- mapped reads -----------------------------------------------------------------------------


@pytest.fixture
def map_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry, however small, comes back mapped, and is checked in many small chunks
    (an odd size: chunks end inside pages and arrays)."""
    monkeypatch.setattr(cache, "MAP_FROM", 0)
    monkeypatch.setattr(cache, "_CHECK_CHUNK", 5000)


@pytest.mark.usefixtures("map_all")
def test_a_mapped_table_is_a_private_copy_of_its_entry(source: Path, cache_home: Path) -> None:
    table = x2t.load_xspace(source)
    cache.save_table(source, table)
    loaded = cache.load_table(source)
    assert loaded is not None
    assert cache._is_mapped(loaded.start_ns) and cache._is_mapped(loaded.stats.value)
    assert not loaded.start_ns.flags.writeable
    assert_same_table(table, loaded)
    # The copy has no name: the cache directory holds the entry alone.
    assert len(table_files(cache_home)) == 1
    # Rewritten in place (same size, other bytes): the arrays keep their values.
    (entry,) = cache_home.iterdir()
    size = entry.stat().st_size
    with open(entry, "r+b") as f:
        f.write(b"\xff" * size)
    assert_same_table(table, loaded)


@pytest.mark.usefixtures("map_all")
def test_a_mapped_table_survives_its_entry_truncated_in_another_process(
        source: Path, cache_home: Path, tmp_path: Path) -> None:
    # A mapping of the entry itself would lose its pages when the file shrinks, and the
    # server die of SIGBUS at its next touch: run where that would show as a signal.
    script = tmp_path / "truncate.py"
    script.write_text(f"""
import os, sys
from pathlib import Path
from stepscope.formats import xspace_to_tables as x2t
from stepscope.model import cache
cache.MAP_FROM = 0
source = Path({str(source)!r})
table = x2t.load_xspace(source)
cache.save_table(source, table)
loaded = cache.load_table(source)
assert cache._is_mapped(loaded.start_ns)
(entry,) = Path({str(cache_home)!r}).iterdir()
os.truncate(entry, 64)
assert int(loaded.start_ns.sum()) == int(table.start_ns.sum())
assert bytes(loaded.stats.text) == bytes(table.stats.text)
assert cache.load_table(source) is None  # the truncated entry: a miss
print("survived")
""")
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(cache_home),
           "PYTHONPATH": os.pathsep.join([str(Path(stepscope.__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "survived"


@pytest.mark.usefixtures("map_all")
def test_every_damaged_entry_is_a_miss_when_mapped(source: Path, cache_home: Path) -> None:
    cache.save_table(source, x2t.load_xspace(source))
    (entry,) = cache_home.iterdir()
    good = entry.read_bytes()
    for case, damaged in _damage_cases(good).items():
        entry.write_bytes(damaged)
        assert cache.load_table(source) is None, case
        assert not entry.exists(), case
        assert table_files(cache_home) == [], case  # no copy left behind either
        entry.write_bytes(good)
        assert cache.load_table(source) is not None, case


def test_a_mapped_copy_of_a_file_shorter_than_its_header_says_is_an_error(
        tmp_path: Path) -> None:
    path = tmp_path / "short"
    path.write_bytes(b"x" * 5000)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="changed"):
            cache._checked_copy(fd, 64, 5000, [], tmp_path)  # 64 bytes past its end
        data = cache._checked_copy(fd, 1000, 4000, [], tmp_path)
        assert data.tobytes() == b"x" * 4000 and not data.flags.writeable
        crc = zlib.crc32(b"x" * 3000)
        span = cache._Span("a", np.dtype("|u1"), (3000,), 64, 3000, crc)
        with pytest.raises(ValueError, match="checksum of a"):
            cache._checked_copy(fd, 1000, 4000, [span._replace(crc=crc ^ 1)], tmp_path)
        assert cache._checked_copy(fd, 1000, 4000, [span], tmp_path).tobytes() == b"x" * 4000
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short"]


@pytest.mark.usefixtures("map_all")
def test_a_table_saved_with_remap_holds_the_mapped_columns(source: Path) -> None:
    table = x2t.load_xspace(source)
    original = x2t.load_xspace(source)
    assert not cache._is_mapped(table.start_ns)
    cache.save_table(source, table, remap=True)
    assert cache._is_mapped(table.start_ns) and cache._is_mapped(table.stats.event)
    assert_same_table(original, table)


def test_a_small_entry_is_read_not_mapped(source: Path) -> None:
    table = x2t.load_xspace(source)
    cache.save_table(source, table, remap=True)
    (entry,) = (Path(os.environ["STEPSCOPE_CACHE_DIR"])).iterdir()
    assert entry.stat().st_size < cache.MAP_FROM  # (the fixture is small)
    loaded = cache.load_table(source)
    assert loaded is not None and not cache._is_mapped(loaded.start_ns)
    assert not cache._is_mapped(table.start_ns)  # remap: left as it is


@pytest.mark.usefixtures("map_all")
def test_map_table_takes_the_entry_only_when_it_holds_the_same_table(source: Path) -> None:
    original = x2t.load_xspace(source)
    # An entry of the same length with other values (another state of the source, say).
    other = x2t.load_xspace(source)
    other.start_ns = other.start_ns + 1
    cache.save_table(source, other)
    table = x2t.load_xspace(source)
    cache.map_table(source, table)
    assert cache._is_mapped(table.start_ns)
    assert_same_table(original, table)  # its own values, from an entry written now
    loaded = cache.load_table(source)
    assert loaded is not None
    assert_same_table(original, loaded)
    # An entry that holds the same table is taken as it is (not written again).
    (entry,) = Path(os.environ["STEPSCOPE_CACHE_DIR"]).iterdir()
    written = entry.stat().st_ino  # a write renames a new file into place
    again = x2t.load_xspace(source)
    cache.map_table(source, again)
    assert cache._is_mapped(again.start_ns)
    assert_same_table(original, again)
    cache.save_table(source, again, remap=True)  # mapped already: not written again
    assert entry.stat().st_ino == written


@pytest.mark.usefixtures("map_all")
def test_map_table_does_nothing_with_the_cache_off(source: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_NO_CACHE", "1")
    table = x2t.load_xspace(source)
    cache.map_table(source, table)
    assert not cache._is_mapped(table.start_ns)


def test_memory_is_short_only_where_the_builds_would_take_half_of_what_is_available(
        source: Path, tmp_path: Path) -> None:
    """The trace viewer maps a table from the cache before its first builds only where those
    (twice the table, to be safe) would take over half the available memory; an unreadable
    or odd meminfo is not short (the quicker way)."""
    from stepscope.run.storage import memory_is_short

    table = x2t.load_xspace(source)
    size = cache.table_bytes(table)
    assert size >= table.start_ns.nbytes + table.duration_ns.nbytes
    meminfo = tmp_path / "meminfo"
    for available_kb, short in ((4 * size // 1024 - 8, True), (4 * size // 1024 + 8, False)):
        meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {available_kb} kB\n")
        assert memory_is_short(table, meminfo) is short
    for odd in ("", "MemAvailable: lots kB\n", "MemAvailable:\n", "\x00\xff garbage"):
        meminfo.write_text(odd)
        assert memory_is_short(table, meminfo) is False
    assert memory_is_short(table, tmp_path / "missing") is False


def test_closed_writes_write_nothing_and_close_waits_for_one_under_way(
        cache_home: Path) -> None:
    """An owner's ``close`` returns only once its write under way has ended whole; after it,
    the owner's threads write nothing (no entry, no temporary file)."""
    import threading

    from stepscope.model import cache as cache_module

    owner = cache_module.Writes()
    started, release, closed = threading.Event(), threading.Event(), threading.Event()

    def slow(f: Any) -> None:
        started.set()
        assert release.wait(30)
        f.write(b"whole")

    def save(name: str, write: Any) -> None:
        with cache_module.writes_for(owner):
            cache_module._write_atomic(name, write)

    writer = threading.Thread(target=save, args=("first.cache", slow))
    writer.start()
    assert started.wait(30)
    closer = threading.Thread(target=lambda: (owner.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.2)  # the write under way holds close up
    release.set()
    assert closed.wait(30)
    writer.join(30)
    closer.join(30)
    assert (cache_home / "first.cache").read_bytes() == b"whole"
    save("second.cache", lambda f: f.write(b"late"))
    assert sorted(p.name for p in cache_home.iterdir()) == ["first.cache"]
    assert owner not in cache_module.open_writes()
    # A thread outside any owner's block writes as before.
    cache_module._write_atomic("third.cache", lambda f: f.write(b"free"))
    assert (cache_home / "third.cache").exists()
