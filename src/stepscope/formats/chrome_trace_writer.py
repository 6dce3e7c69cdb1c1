"""Write a profile's events as Chrome-trace JSON (plain or gzipped), for Perfetto and
chrome://tracing.

Each host's plane becomes a process (``pid``), each line a thread (``tid``), with
``process_name``/``thread_name`` metadata; every event is a complete (``X``) event with its
typed stats as ``args``; counter lines are ``C`` events; flows given by the caller (a launch
to its kernel) are ``s``/``f`` pairs. Times are microseconds with nanosecond decimals. The file
is written to a temporary name beside the target and renamed into place.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from stepscope.formats.output_file import open_output
from stepscope.model import schema
from stepscope.model.events import MISSING, EventTable

_CHUNK = 200_000


def _us(ns: NDArray[np.int64]) -> list[str]:
    """Nanoseconds as microsecond strings with three decimals (exact, no float)."""
    whole, frac = np.divmod(ns, 1000)
    return [f"{w}.{f:03d}" for w, f in zip(whole.tolist(), frac.tolist(), strict=True)]


def _write_events(out: IO[str], pid: int, table: EventTable, counter_line: NDArray[np.bool_],
                  value_of: NDArray[np.float64], progress: Callable[[int], None]) -> int:
    """Every event of ``table`` (but the Task Environment's) as JSON lines; how many."""
    names = [json.dumps(n) for n in table.names]
    skip = np.array([p.name == schema.TASK_ENV_PLANE for p in table.planes] + [False])
    rows = np.flatnonzero(~skip[table.plane])
    typed = list(table.typed.items())
    for lo in range(0, len(rows), _CHUNK):
        part = rows[lo:lo + _CHUNK]
        ts = _us(np.asarray(table.start_ns[part], np.int64))
        dur = _us(np.maximum(np.asarray(table.duration_ns[part], np.int64), 0))
        lines = table.line[part].tolist()
        name = table.name[part].tolist()
        is_counter = counter_line[table.line[part]].tolist()
        values = value_of[part].tolist()
        stats = [(k, col[part]) for k, col in typed]
        present = [(k, (v != MISSING), v.tolist()) for k, v in stats]
        present = [(k, m.tolist(), v) for k, m, v in present if m.any()]
        chunk = []
        for i in range(len(part)):
            if is_counter[i]:
                chunk.append(f',\n{{"ph":"C","pid":{pid},"tid":{lines[i]},"ts":{ts[i]},'
                             f'"name":{names[name[i]]},"args":{{"value":'
                             f'{json.dumps(values[i])}}}}}')
                continue
            args = ",".join(f'"{k}":{v[i]}' for k, m, v in present if m[i])
            chunk.append(f',\n{{"ph":"X","pid":{pid},"tid":{lines[i]},"ts":{ts[i]},'
                         f'"dur":{dur[i]},"name":{names[name[i]]},"args":{{{args}}}}}')
        out.write("".join(chunk))
        progress(len(part))
    return len(rows)


def write_chrome_trace(path: str | Path, hosts: Iterable[tuple[str, EventTable, Any]], *,
                       progress: Callable[[int], None] | None = None) -> int:
    """Write ``hosts`` ((name, table, trace index or None) each) to ``path``; events written.

    The file is gzipped when ``path`` ends in ``.gz``. ``progress(n)`` is told of every ``n``
    more events written.
    """
    report = progress or (lambda n: None)
    written = 0
    with open_output(path) as raw:
        stream: Any = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) \
            if str(path).endswith(".gz") else raw
        out = io.TextIOWrapper(stream, encoding="utf-8")
        out.write('{"displayTimeUnit":"ns","traceEvents":[\n'
                  '{"ph":"M","pid":0,"name":"process_name","args":{"name":"stepscope"}}')
        for h, (host, table, index) in enumerate(hosts):
            for p, plane in enumerate(table.planes):
                out.write(f',\n{{"ph":"M","pid":{h * 1000 + p + 1},"name":"process_name",'
                          f'"args":{{"name":{json.dumps(f"{host} {plane.name}")}}}}}')
            for li, name in enumerate(table.line_name):
                pid = h * 1000 + int(table.line_plane[li]) + 1
                out.write(f',\n{{"ph":"M","pid":{pid},"tid":{li},"name":"thread_name",'
                          f'"args":{{"name":{json.dumps(name)}}}}}')
            counter_line = np.zeros(len(table.line_name) + 1, bool)
            value_of = np.zeros(len(table), np.float64)
            if index is not None:
                rows = np.asarray(index.counter_row, np.int64)
                counter_line[np.unique(table.line[rows])] = True
                value_of[rows] = index.counter_value
            # pids differ per plane: write per plane so each event gets its own pid.
            before = written
            for p in range(len(table.planes)):
                on = table.plane == p
                if not on.any():
                    continue
                sub = _subset(table, np.flatnonzero(on))
                written += _write_events(out, h * 1000 + p + 1, sub, counter_line,
                                         value_of[np.flatnonzero(on)], report)
            report(len(table) - (written - before))  # the Task Environment's, left out
            if index is not None and len(index.flow_src):
                src, dst = index.flow_src, index.flow_dst
                for p in range(len(table.planes)):
                    mine = table.plane[src] == p
                    if mine.any():
                        _write_flows(out, h * 1000 + 1, table, src[mine], dst[mine], h)
        out.write("\n]}\n")
        out.flush()
        out.detach()  # the stream is open_output's to close (or standard output's)
        if stream is not raw:
            stream.close()
    return written


def _write_flows(out: IO[str], base_pid: int, table: EventTable, src: NDArray[np.int64],
                 dst: NDArray[np.int64], host: int) -> None:
    """Flow pairs whose ends may lie on different planes (so different pids)."""
    s_ts = _us(np.asarray(table.start_ns[src], np.int64))
    d_ts = _us(np.asarray(table.start_ns[dst], np.int64))
    s_pid = (table.plane[src].astype(np.int64) + base_pid).tolist()  # int16: cast first
    d_pid = (table.plane[dst].astype(np.int64) + base_pid).tolist()
    s_line, d_line = table.line[src].tolist(), table.line[dst].tolist()
    ids = src.tolist()
    out.write("".join(
        f',\n{{"ph":"s","id":"{host}:{ids[i]}","pid":{s_pid[i]},"tid":{s_line[i]},'
        f'"ts":{s_ts[i]},"name":"launch","cat":"flow"}}'
        f',\n{{"ph":"f","bp":"e","id":"{host}:{ids[i]}","pid":{d_pid[i]},"tid":{d_line[i]},'
        f'"ts":{d_ts[i]},"name":"launch","cat":"flow"}}' for i in range(len(src))))


def _subset(table: EventTable, rows: NDArray[np.int64]) -> EventTable:
    """The events ``rows`` of ``table`` (lines, names and planes shared)."""
    return EventTable(
        planes=table.planes, line_plane=table.line_plane, line_id=table.line_id,
        line_name=table.line_name, line=table.line[rows],
        name=table.name[rows], start_ns=table.start_ns[rows],
        duration_ns=table.duration_ns[rows],
        typed={k: v[rows] for k, v in table.typed.items()}, names=table.names,
        stats=table.stats, hostnames=table.hostnames)
