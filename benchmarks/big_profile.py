"""The benchmarks' profiles by size, each made once by script and kept on disk:

- ``"tiny"``: stepscope's capture of one empty step (what any process pays whatever the
  profile: memory figures are given beyond it);
- ``"10mb"``: the 10 MB profile of ``load_and_overview.py`` (stepscope's own capture of a
  Python-heavy loop with the Python tracer on);
- ``"200mb"``: one remote capture (the one nearest 200 MB) of the TensorFlow trainer of
  ``tf_profile.py`` (a small CNN fed by tf.data, host tracer level 3, the Python tracer asked
  for), one of the parts of ...
- ``"1gb"``: several consecutive captures of that one trainer (at least 1.1 GB in all), merged
  into one XSpace: planes joined by name, lines by id (each capture moved by its start's
  distance from the first capture's start, TensorFlow writing times relative to the capture,
  and events re-based on their merged line's timestamp: the real gaps between captures are
  kept), event and stat metadata remapped to one id per distinct entry. Real captures, not
  synthesised.

Profiles live under ``$STEPSCOPE_BENCH_DIR`` (default ``<repo>/.bench-profiles``, git-ignored),
each big one as a logdir (``<dir>/plugins/profile/<run>/<host>.xplane.pb``). Files are written
beside their final name and renamed into place: an interrupted run leaves no half file. Two
processes asking at once: the second waits for the first (a lock file in the directory).

Whoever loads the 1 GB profile, this script's merge included, holds the machine's big-profile
lock (``flock /work/big.lock ...``); this module does not take it, so that a caller holding it
can call ``profile("1gb")``.

    flock /work/big.lock .venv/bin/python benchmarks/big_profile.py 1gb   # prints its path
    .venv/bin/python benchmarks/big_profile.py 10mb

    from big_profile import profile; path = profile("1gb")
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import checkout  # noqa: F401  (this checkout's sources first, for every process started)
from tf_profile import BENCH_DIR, ROOT, capture, trainer

SIZES = ("tiny", "10mb", "200mb", "1gb")
BIG_BYTES = 1_100_000_000  # the merged profile holds at least this many bytes
PART_BYTES = 200_000_000  # each capture aims at this size
FIRST_CAPTURE_MS = 3000  # the first capture's length; later ones are sized from its rate
MAX_GROWTH = 4  # a capture is at most this many times longer than the one before
MAX_CAPTURE_MS = 60_000  # and never longer than this
BIG_VERSION = 1  # bump when the recipe changes, so the cached profile is made again


def profile(size: str) -> Path:
    """The ``.xplane.pb`` file of the benchmark profile ``size`` (one of ``SIZES``), made now
    if it is not on disk yet."""
    if size == "tiny":
        return tiny_profile()
    if size == "10mb":
        return small_profile()
    if size == "200mb":
        return big_profile(part_only=True)
    if size == "1gb":
        return big_profile()
    raise ValueError(f"unknown profile size {size!r}; one of {', '.join(SIZES)}")


TINY = r"""
import sys, stepscope
stepscope.start(sys.argv[1])
with stepscope.Trace("train", step_num=0, _r=1):
    pass
stepscope.stop()
"""


def tiny_profile() -> Path:
    """A profile of one empty step, recorded by stepscope (made once, kept)."""
    where = BENCH_DIR / "tiny"
    with _locked(BENCH_DIR / ".tiny.lock"):
        # Any logdir layout under it (``load_and_overview.py`` keeps its own in ``logs/``).
        files = sorted(where.glob("**/plugins/profile/*/*.xplane.pb"))
        if files:
            return files[-1]
        tmp = BENCH_DIR / f".tiny.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-c", TINY, str(tmp)], check=True,
                       env={**os.environ, "PYTHONPATH": _pythonpath()})
        shutil.rmtree(where, ignore_errors=True)  # a directory left without a profile
        os.replace(tmp, where)
        return sorted(where.glob("plugins/profile/*/*.xplane.pb"))[-1]


def _pythonpath() -> str:
    """This checkout's sources first, for the children that import stepscope."""
    return os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])


def small_profile() -> Path:
    """The 10 MB profile ``load_and_overview.py`` benchmarks (made once, kept)."""
    import load_and_overview

    made = load_and_overview.generated_profile(BENCH_DIR, 10.0,
                                               [load_and_overview.BYTES_PER_STEP_GUESS])
    return Path(made["path"])


# --- the big profile: captures ------------------------------------------------------------------

BIG_DIR = BENCH_DIR / "tf_1gb"  # the logdir of the merged profile
PARTS_DIR = BENCH_DIR / "tf_1gb_parts"  # one logdir per capture
META = BIG_DIR / "meta.json"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """This process alone inside (another one asking waits), across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(tmp, path)


def _cached(meta_path: Path) -> dict[str, Any] | None:
    """The recorded meta of a made profile whose file is whole, else None."""
    try:
        meta = json.loads(meta_path.read_text())
        path = meta_path.parent / meta["path"]
        if meta["version"] == BIG_VERSION and path.stat().st_size == meta["bytes"]:
            return dict(meta)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def capture_parts() -> list[Path]:
    """Consecutive captures of one trainer, each its own logdir under ``PARTS_DIR``, until
    they hold ``BIG_BYTES`` in all (kept: made once). Each finished capture is recorded at
    once, so an interrupted run goes on where it stopped; a trainer that stops answering is
    replaced by a fresh one (its captures come later still: times stay in order)."""
    meta_path = PARTS_DIR / "meta.json"
    meta = _cached(meta_path)
    if meta is not None:
        return [PARTS_DIR / p for p in meta["parts"]]
    progress_path = PARTS_DIR / "progress.json"
    try:
        progress = json.loads(progress_path.read_text())
        parts = [PARTS_DIR / p for p in progress["parts"]]
        if progress["version"] != BIG_VERSION or not all(p.is_file() for p in parts):
            raise ValueError("stale")
        duration = int(progress["next_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        shutil.rmtree(PARTS_DIR, ignore_errors=True)
        PARTS_DIR.mkdir(parents=True)
        parts, duration = [], FIRST_CAPTURE_MS
    total = sum(p.stat().st_size for p in parts)
    for _ in range(4):  # a trainer, and up to three fresh ones if one stops answering
        if total >= BIG_BYTES:
            break
        with trainer() as port:
            while total < BIG_BYTES:
                logdir = PARTS_DIR / f"capture-{len(parts)}"
                shutil.rmtree(logdir, ignore_errors=True)  # an interrupted capture's
                started = time.perf_counter()
                try:
                    path = capture(port, logdir, duration)
                except RuntimeError as err:  # the trainer collected nothing: a fresh one
                    _say(f"  capture {len(parts)} failed ({err}); starting a fresh trainer")
                    break
                if path is None:
                    break
                size = path.stat().st_size
                _say(f"  capture {len(parts)}: {duration} ms -> {size / 1e6:.0f} MB "
                     f"({time.perf_counter() - started:.0f} s)")
                parts.append(path)
                total += size
                # the next capture sized from this one's bytes per millisecond, growing at
                # most MAX_GROWTH-fold a step and never past MAX_CAPTURE_MS: a trainer that
                # was slow while the machine was busy may run fast later, and a capture
                # sized from its slow rate would hold many times PART_BYTES in the trainer's
                # memory (TensorFlow keeps the whole trace until the capture ends)
                duration = max(1000, min(int(duration * PART_BYTES / max(size, 1)),
                                         duration * MAX_GROWTH, MAX_CAPTURE_MS))
                _write_json(progress_path, {"version": BIG_VERSION, "next_ms": duration,
                                            "parts": [str(p.relative_to(PARTS_DIR))
                                                      for p in parts]})
    if total < BIG_BYTES:
        raise RuntimeError(f"the captures under {PARTS_DIR} hold {total / 1e6:.0f} MB, short "
                           f"of {BIG_BYTES / 1e6:.0f} MB: run again to go on")
    rel = [str(p.relative_to(PARTS_DIR)) for p in parts]
    _write_json(meta_path, {"version": BIG_VERSION, "parts": rel, "path": rel[0],
                            "bytes": parts[0].stat().st_size,
                            "part_bytes": [p.stat().st_size for p in parts]})
    return parts


# --- the big profile: the merge -----------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field_head(number: int, length: int) -> bytes:
    """The tag and length of a length-delimited field."""
    return _varint(number << 3 | 2) + _varint(length)


_LINE_FIELD = 3  # XPlane.lines
_LINE_HEADER = ("id", "display_id", "name", "display_name", "timestamp_ns", "duration_ps")
_PLANE_FIELD = 1  # XSpace.planes
TASK_PLANE = "Task Environment"  # TensorFlow's plane of the capture's start and stop times


@dataclass
class _Line:
    """One merged line: its first appearance's header, and where its events' bytes lie in the
    spill file (one chunk per capture)."""

    header: Any  # an XLine without events
    base_ns: int
    end_ps: int
    chunks: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Plane:
    """One merged plane: its first appearance (without lines), metadata by content, lines."""

    header: Any  # an XPlane without lines
    stat_ids: _Ids = field(default_factory=lambda: _Ids())
    event_ids: _Ids = field(default_factory=lambda: _Ids())
    lines: dict[int, _Line] = field(default_factory=dict)


@dataclass
class _Ids:
    """Merged metadata ids by the entry's content."""

    by_key: dict[Any, int] = field(default_factory=dict)
    taken: set[int] = field(default_factory=set)
    top: int = 0

    def new(self, key: Any, wanted: int) -> int:
        """A fresh id for ``key``: ``wanted`` where free (the first capture keeps its ids),
        else one past the largest."""
        new = wanted if wanted > 0 and wanted not in self.taken else self.top + 1
        self.taken.add(new)
        self.top = max(self.top, new)
        self.by_key[key] = new
        return new


def _merge_metadata(out: _Plane, plane: Any) -> tuple[dict[int, int], dict[int, int]]:
    """Add ``plane``'s stat and event metadata to ``out``; the id maps (old → merged)."""
    smap: dict[int, int] = {}
    for old, md in plane.stat_metadata.items():
        key = (md.name, md.description)
        new = out.stat_ids.by_key.get(key)
        if new is None:
            new = out.stat_ids.new(key, old)
            entry = out.header.stat_metadata[new]
            entry.CopyFrom(md)
            entry.id = new
        smap[old] = new
    emap: dict[int, int] = {}
    children: list[tuple[int, list[int]]] = []
    for old, md in plane.event_metadata.items():
        _remap_stats(md.stats, smap)
        child_ids = list(md.child_id)
        md.ClearField("child_id")
        md.id = 0
        key = md.SerializeToString(deterministic=True) + repr(child_ids).encode()
        new = out.event_ids.by_key.get(key)
        if new is None:
            new = out.event_ids.new(key, old)
            entry = out.header.event_metadata[new]
            entry.CopyFrom(md)
            entry.id = new
            children.append((new, child_ids))
        emap[old] = new
    for new, child_ids in children:  # child ids name other entries: mapped once all are
        out.header.event_metadata[new].child_id.extend(emap.get(c, c) for c in child_ids)
    return emap, smap


def _remap_stats(stats: Any, smap: dict[int, int]) -> None:
    for st in stats:
        st.metadata_id = smap.get(st.metadata_id, st.metadata_id)
        if st.WhichOneof("value") == "ref_value":
            st.ref_value = smap.get(st.ref_value, st.ref_value)


def _plane_stat(space: Any, plane_name: str, stat_name: str) -> Any | None:
    """The stat ``stat_name`` of the plane ``plane_name``, or None."""
    for plane in space.planes:
        if plane.name == plane_name:
            for st in plane.stats:
                md = plane.stat_metadata.get(st.metadata_id)
                if md is not None and md.name == stat_name:
                    return st
    return None


def _merge_capture(planes: dict[str, _Plane], space: Any, shift_ns: int,
                   spill: BinaryIO) -> int:
    """Add one capture's planes to ``planes`` (its lines' times moved by ``shift_ns``), its
    events' bytes to ``spill``; how many events it held."""
    from stepscope.formats.xplane_proto import XLine, XPlane

    n_events = 0
    for plane in space.planes:
        out = planes.get(plane.name)
        if out is None:
            header = XPlane()
            header.id, header.name = plane.id, plane.name
            out = planes[plane.name] = _Plane(header)
        emap, smap = _merge_metadata(out, plane)
        if not out.header.stats:
            _remap_stats(plane.stats, smap)
            out.header.stats.extend(plane.stats)
        same_events = all(k == v for k, v in emap.items())
        same_stats = all(k == v for k, v in smap.items())
        for line in plane.lines:
            merged = out.lines.get(line.id)
            if merged is None:
                header = XLine()
                header.CopyFrom(line)
                header.ClearField("events")
                header.timestamp_ns += shift_ns
                merged = out.lines[line.id] = _Line(header, header.timestamp_ns,
                                                    header.timestamp_ns * 1000)
            start_ns = line.timestamp_ns + shift_ns
            delta = (start_ns - merged.base_ns) * 1000
            merged.end_ps = max(merged.end_ps, start_ns * 1000 + line.duration_ps)
            n_events += len(line.events)
            if delta or not same_events or not same_stats:
                for ev in line.events:
                    ev.metadata_id = emap.get(ev.metadata_id, ev.metadata_id)
                    if delta and not ev.num_occurrences:
                        ev.offset_ps += delta
                    if not same_stats:
                        _remap_stats(ev.stats, smap)
            for name in _LINE_HEADER:  # what is left: the events' bytes alone
                line.ClearField(name)
            data = line.SerializeToString()
            merged.chunks.append((spill.tell(), len(data)))
            spill.write(data)
    return n_events


def _write_space(planes: dict[str, _Plane], hostnames: list[str], spill: BinaryIO,
                 out: BinaryIO) -> None:
    """The merged XSpace, written as wire bytes: each plane's header, then its lines (header
    and the spilled events of every capture, in capture order), then the host names."""
    from stepscope.formats.xplane_proto import XSpace

    for plane in planes.values():
        lines = []
        for line in plane.lines.values():
            line.header.duration_ps = line.end_ps - line.base_ns * 1000
            head = line.header.SerializeToString()
            length = len(head) + sum(n for _, n in line.chunks)
            lines.append((_field_head(_LINE_FIELD, length) + head, line.chunks))
        head = plane.header.SerializeToString()
        length = len(head) + sum(len(h) + sum(n for _, n in c) for h, c in lines)
        out.write(_field_head(_PLANE_FIELD, length))
        out.write(head)
        for line_head, chunks in lines:
            out.write(line_head)
            for offset, n in chunks:
                spill.seek(offset)
                out.write(spill.read(n))
    tail = XSpace()
    tail.hostnames.extend(hostnames)
    out.write(tail.SerializeToString())


def merge(parts: list[Path], dest: Path) -> dict[str, Any]:
    """Merge the XSpace files ``parts`` (consecutive captures) into ``dest`` (written
    beside it and renamed into place); what it holds."""
    from stepscope.formats.xplane_proto import XSpace

    planes: dict[str, _Plane] = {}
    hostnames: list[str] = []
    n_events = 0
    first_start: int | None = None
    last_stop: int | None = None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    spill_path = dest.with_name(f".{dest.name}.spill-{os.getpid()}")
    try:
        with spill_path.open("w+b") as spill:
            for i, part in enumerate(parts):
                started = time.perf_counter()
                space = XSpace()
                space.ParseFromString(part.read_bytes())
                hostnames += [h for h in space.hostnames if h not in hostnames]
                # TensorFlow writes line times relative to the capture's start (a stat of
                # its Task Environment plane): each capture moves by its start's distance
                # from the first one's, so the merged timeline keeps the real gaps.
                start = _plane_stat(space, TASK_PLANE, "profile_start_time")
                stop = _plane_stat(space, TASK_PLANE, "profile_stop_time")
                if first_start is None and start is not None:
                    first_start = start.uint64_value
                shift = (start.uint64_value - first_start
                         if start is not None and first_start is not None else 0)
                if stop is not None:
                    last_stop = max(last_stop or 0, stop.uint64_value)
                n_events += _merge_capture(planes, space, shift, spill)
                del space
                _say(f"  merged part {i} ({time.perf_counter() - started:.0f} s, "
                     f"{n_events:,} events so far)")
            task = planes.get(TASK_PLANE)
            if task is not None and last_stop is not None:  # the last capture's stop
                md = {m.name: k for k, m in task.header.stat_metadata.items()}
                for st in task.header.stats:
                    if st.metadata_id == md.get("profile_stop_time"):
                        st.uint64_value = last_stop
            with tmp.open("wb") as out:
                _write_space(planes, hostnames, spill, out)
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        spill_path.unlink(missing_ok=True)
    return {"events": n_events, "planes": len(planes),
            "lines": sum(len(p.lines) for p in planes.values())}


_CHECK = r"""
import json, sys
from tensorflow.tsl.profiler.protobuf import xplane_pb2
space = xplane_pb2.XSpace()
with open(sys.argv[1], "rb") as f:
    space.ParseFromString(f.read())
print(json.dumps({"planes": len(space.planes),
                  "lines": sum(len(p.lines) for p in space.planes),
                  "events": sum(len(l.events) for p in space.planes for l in p.lines)}))
"""


def check_with_tensorflow(path: Path) -> dict[str, Any]:
    """What TensorFlow's own ``xplane_pb2`` reads in ``path`` (planes, lines, events)."""
    done = subprocess.run([sys.executable, "-c", _CHECK, str(path)], capture_output=True,
                          text=True, check=False, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if done.returncode != 0:
        raise RuntimeError(f"TensorFlow's xplane_pb2 could not read {path}: "
                           f"{done.stderr.strip()[-500:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def big_profile(part_only: bool = False) -> Path:
    """The >= 1.1 GB merged TensorFlow profile (``part_only``: its first capture alone)."""
    with _locked(BENCH_DIR / ".big_profile.lock"):
        if part_only:
            parts = capture_parts()  # the one nearest PART_BYTES (the first is shorter)
            return min(parts, key=lambda p: abs(p.stat().st_size - PART_BYTES))
        meta = _cached(META)
        if meta is not None:
            return BIG_DIR / meta["path"]
        parts = capture_parts()
        host = parts[0].name
        dest = BIG_DIR / "plugins" / "profile" / "merged" / host
        _say(f"merging {len(parts)} captures into {dest}")
        held = merge(parts, dest)
        read = check_with_tensorflow(dest)
        if read != held:
            dest.unlink()
            raise RuntimeError(f"TensorFlow read {read} from the merged file; it holds {held}")
        _say(f"  TensorFlow's xplane_pb2 reads it: {read}")
        _write_json(META, {"version": BIG_VERSION, "path": str(dest.relative_to(BIG_DIR)),
                           "bytes": dest.stat().st_size, "parts": len(parts), **held})
        return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", choices=SIZES, nargs="?", default="1gb")
    args = parser.parse_args()
    path = profile(args.size)
    print(path)
    print(f"{path.stat().st_size / 1e6:.0f} MB", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
