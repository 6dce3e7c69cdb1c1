"""The on-disk cache: real tables round-trip exactly, and every kind of damage is a quiet miss."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
import warnings
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
        "planes", "line_plane", "line_id", "line_name", "plane", "line", "name", "start_ns",
        "duration_ns", "typed", "names", "stats", "hostnames"]
    assert [f.name for f in dataclasses.fields(StatTable)] == [
        "event", "name", "kind", "value", "length", "text", "stat_names"]
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
    assert table_files(cache_home) == [f"{cache.source_key([path])}.table"]


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
    assert table_files(cache_home) == [f"{cache.source_key([source])}.table"]


def test_missing_source_is_a_miss(tmp_path: Path, cache_home: Path) -> None:
    missing = tmp_path / "gone.xplane.pb"
    assert cache.load_table(missing) is None
    cache.save_table(missing, x2t.load_xspace(XPLANE_FIXTURES[0]))
    assert table_files(cache_home) == []
    with pytest.raises(FileNotFoundError):
        cache.source_key([missing])


def _damage_cases(data: bytes) -> dict[str, bytes]:
    header_end = data.index(b"}]}") + 3
    return {
        "empty": b"",
        "prefix only": data[:20],
        "header cut": data[:header_end - 10],
        "data cut": data[:len(data) // 2],
        "one byte short": data[:-1],
        "one byte long": data + b"\0",
        "bad magic": b"X" + data[1:],
        "header garbage": data[:40] + b"\xff" * 30 + data[70:],
        "format version": data.replace(b'"format":1,', b'"format":9,', 1),
        "stepscope version": data.replace(
            f'"stepscope":"{stepscope.__version__}"'.encode(),
            f'"stepscope":"{"9" * len(stepscope.__version__)}"'.encode(), 1),
        "float column": data.replace(b'"<i8"', b'"<f8"', 1),
        "object column": data.replace(b'"<i8"', b'"|O8"', 1),
        "column past the end": data.replace(b'"offset":0}', b'"offset":9}', 1),
        "wrong length": data.replace(b'"shape":[3]', b'"shape":[2]', 1),
    }


@pytest.mark.parametrize("case", list(_damage_cases(b'}]}"format":1,"<i8""offset":0}')))
def test_damaged_table_file_is_a_miss_and_removed(case: str, source: Path,
                                                  cache_home: Path) -> None:
    cache.save_table(source, x2t.load_xspace(source))
    (entry,) = cache_home.iterdir()
    damaged = _damage_cases(entry.read_bytes())[case]
    assert damaged != entry.read_bytes()
    entry.write_bytes(damaged)
    assert cache.load_table(source) is None
    assert not entry.exists()
    cache.save_table(source, x2t.load_xspace(source))
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


@pytest.mark.parametrize("damage", ["", "{", "{}\n{}\n", "[1]\n[2]\n", "not json at all",
                                    "identity-only", "array-result", "trailing"])
def test_damaged_result_is_a_miss_and_removed(damage: str, tmp_path: Path,
                                              cache_home: Path) -> None:
    src = tmp_path / "a.xplane.pb"
    src.write_bytes(b"a")
    cache.save_result([src], "overview", {"a": 1})
    (entry,) = cache_home.iterdir()
    identity, result, _ = entry.read_text().split("\n")
    text = {"identity-only": identity + "\n",
            "array-result": identity + "\n[1]\n",
            "trailing": entry.read_text() + "x"}.get(damage, damage)
    entry.write_text(text)
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
    text_shift = np.repeat(np.arange(times, dtype=np.int64), len(st.event)) * len(st.text)
    return dataclasses.replace(
        table,
        plane=np.tile(table.plane, times), line=np.tile(table.line, times),
        name=np.tile(table.name, times), start_ns=np.tile(table.start_ns, times) + shift,
        duration_ns=np.tile(table.duration_ns, times),
        typed={k: np.tile(v, times) for k, v in table.typed.items()},
        stats=dataclasses.replace(
            st, event=np.repeat(np.arange(times, dtype=np.int64), len(st.event)) * n
            + np.tile(st.event, times),
            name=np.tile(st.name, times), kind=np.tile(st.kind, times),
            value=np.tile(st.value, times) + np.where(np.tile(textual, times), text_shift, 0),
            length=np.tile(st.length, times), text=st.text * times))


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
    size = (cache_home / f"{cache.source_key([source])}.table").stat().st_size
    print(f"\n{len(big):,} events, {len(big.stats.event):,} side stats, "
          f"{size / 2**20:.0f} MiB cache file: save {saved * 1e3:.0f} ms, "
          f"load best {min(loads) * 1e3:.1f} ms / worst {max(loads) * 1e3:.1f} ms, "
          f"first pass over five columns {first_pass * 1e3:.0f} ms")
    assert cache.clear() == 1  # do not leave most of a gigabyte behind in the temp dir
