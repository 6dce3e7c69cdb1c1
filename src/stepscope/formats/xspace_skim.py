"""A skim of a big ``.xplane.pb`` file (``model.trace_skim.TraceSkim``): what the trace
viewer's first window needs, read in one pass over the file that keeps nothing per event.

Decoding a 1 GB file into its table takes seconds, most of it writing columns as long as the
events. The skim (compiled: ``skim_plan`` finds the lines from the planes' keys, ``skim`` walks
their events on two threads) reads each event's times only: per line its earliest start and
latest end, and per drawn line its events counted per span of time on a grid whose spans
double as the times seen spread (``MAX_SPANS`` of them a line at most, from a few a pixel
column down to 4× fewer), their durations summed, and the events at least a 64th of a span
long kept (at most ``MAX_WIDE`` a thread: past that, the threshold doubles until half are).
None where the compiled decoder is not built, where a line's timestamp comes after its events
(times cannot be known in one pass), or where the file has more than ``MAX_LINES`` lines: the
table is read as usual. The pass over the file, and those limits, are ``xspace_skim_pass``'s
(it needs no NumPy, so that a server starts it first); ``skim_of`` makes the skim from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.errors import ProfileFormatError
from stepscope.formats import xspace_columns as xc
from stepscope.formats.xplane_proto import XPlane
from stepscope.formats.xspace_compiled import text
from stepscope.formats.xspace_skim_pass import MAX_CELLS, MAX_WIDE, SkimPass, skim_pass
from stepscope.model.events import Plane
from stepscope.model.trace_skim import TraceSkim, coded_pairs

BLOCK_FIELDS = 7  # the compiled skim's block records: see SKIM_BLOCK in _xspace_decode.c


def skim_xspace(path: Path, *, max_cells: int = MAX_CELLS, max_wide: int = MAX_WIDE,
                threads: int | None = None, split_bytes: int = 4 << 20) -> TraceSkim | None:
    """The skim of one local ``.xplane.pb`` file; None where it cannot be made so (see the
    module docstring). ProfileFormatError where the file does not parse. ``threads``: 1 or
    2 (default: as the decoder's), the lines' bytes cut in two where ``split_bytes`` or
    more."""
    return skim_of(skim_pass(path, max_cells=max_cells, max_wide=max_wide, threads=threads,
                             split_bytes=split_bytes))


def skim_of(done: SkimPass | None) -> TraceSkim | None:
    """The skim made from its pass over the file (``xspace_skim_pass.skim_pass``); None
    where the pass found none could be made."""
    if done is None:
        return None
    return _skim(done.path, done.messages, np.frombuffer(done.line_plane, np.int32)
                 .astype(np.int64), np.array(done.skipped, bool),
                 np.frombuffer(done.row, np.int32), done.spans, done.raw,
                 np.frombuffer(done.body_to, np.int64))


def _skim(path: Path, messages: list[XPlane], line_plane: NDArray[np.int64],
          skipped: NDArray[np.bool_], row: NDArray[np.int32], spans: int, raw: dict[str, Any],
          line_end: NDArray[np.int64]) -> TraceSkim:
    planes = [Plane(int(m.id), text(m.name)) for m in messages]

    def col(key: str) -> NDArray[np.int64]:
        return np.frombuffer(raw[key], np.int64)

    ends = col("text_end")
    blob: bytes = raw["text"]
    starts = [0, *ends[:-1].tolist()] if len(ends) else []
    texts = [blob[a:b].decode("utf-8", "replace") for a, b in zip(starts, ends.tolist(),
                                                                  strict=True)]
    line_name = [d or n for n, d in zip(texts[0::2], texts[1::2], strict=True)]
    events = col("events")
    shown = (events > 0) & ~skipped[line_plane]
    # Counter lines (every event a sample with a number) are drawn as counters: not counted.
    counter = shown & (col("samples") == events)
    drawn = np.flatnonzero(shown & ~counter)
    first, last = col("first")[shown], col("last")[shown]
    origin = int(first.min()) if len(first) else 0
    span = max(int(last.max()) - origin, 1) if len(first) else 1
    # The grid's spans from the origin: span i starts at bin_origin + i × bin_ns.
    shift, b0 = int(raw["shift"]), int(raw["b0"])
    bin_ns = 1 << max(shift, 0)
    n_rows = int(row.max()) + 1 if len(row) else 0
    count = col("count").reshape(n_rows, spans)[row[drawn]]
    covered = col("covered").reshape(n_rows, spans)[row[drawn]]
    records = col("wide").reshape(-1, 5)
    wide_ns = int(raw["wide_ns"])
    records = records[records[:, 3] >= wide_ns]
    line = records[:, 0]
    first_row = np.r_[np.int64(0), np.cumsum(events)[:-1]] if len(events) else events
    # Names: the events' metadata in their plane, each pair looked up once.
    pairs, wide_name = coded_pairs(line_plane[line], records[:, 4])
    names = [_name_in(messages[plane], metadata) for plane, metadata in pairs]
    blocks = col("blocks").reshape(-1, BLOCK_FIELDS)
    b_line = blocks[:, 0].copy()
    # Each block's bytes in the file, to the end of its line (where its events are read), and
    # its line's timestamp: what ``skim_window`` needs of it.
    spans_of = np.stack([blocks[:, 1], blocks[:, 2], line_end[b_line]], axis=1)
    stamps = col("timestamp")[b_line]

    def read_blocks(which: NDArray[np.int64], t0: int, t1: int, max_events: int
                    ) -> NDArray[np.int64] | None:
        return _read_blocks(path, spans_of[which], stamps[which], t0 + origin, t1 + origin,
                            max_events, origin, which)

    def event_name(line: int, metadata: int) -> str:
        return _name_in(messages[int(line_plane[line])], metadata)

    return TraceSkim(
        planes=planes, line_plane=line_plane, line_id=col("id"), line_name=line_name,
        line_events=events, line_depth=col("depth"), drawn=drawn.astype(np.int64),
        counter_lines=np.flatnonzero(counter), origin=origin, span=span, bin_ns=bin_ns,
        bin_origin=(b0 << max(shift, 0)) - origin if shift >= 0 else 0,
        count=count, covered=covered, wide_ns=wide_ns, wide_line=line.copy(),
        wide_row=first_row[line] + records[:, 1], wide_start=records[:, 2] - origin,
        wide_dur=records[:, 3].copy(), wide_name=wide_name,
        names=names, block_line=b_line, block_row=first_row[b_line] + blocks[:, 3],
        block_events=blocks[:, 4].copy(), block_lo=blocks[:, 5] - origin,
        block_hi=blocks[:, 6] - origin, read_blocks=read_blocks, event_name=event_name)


def _name_in(plane: XPlane, metadata: int) -> str:
    """The name of an event of ``plane`` with metadata id ``metadata``."""
    md = plane.event_metadata.get(metadata)
    return text(md.name or md.display_name) if md is not None else \
        f"<unknown event {metadata}>"


def _read_blocks(path: Path, spans: NDArray[np.int64], stamps: NDArray[np.int64], t0: int,
                 t1: int, max_events: int, origin: int, which: NDArray[np.int64]
                 ) -> NDArray[np.int64] | None:
    """The events of the blocks ``which`` (their ``spans`` and lines' ``stamps``) overlapping
    [t0, t1) (absolute ns): rows (block, index in it, start from ``origin``, duration,
    metadata id). ProfileFormatError where the file cannot be read as it was skimmed (it
    changed)."""
    decoder = xc.compiled_decoder()
    assert decoder is not None  # a skim was made with it
    try:
        with open(path, "rb") as f:
            raw = decoder.skim_window(f.fileno(), np.ascontiguousarray(spans).tobytes(),
                                      np.ascontiguousarray(stamps).tobytes(), t0, t1,
                                      max_events)
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    except (ValueError, RuntimeError) as err:
        raise xc.format_error(str(path), err) from err
    if raw is None:
        return None
    rows = np.frombuffer(raw, np.int64).reshape(-1, 5)  # (a writable column of its own)
    rows[:, 0] = which[rows[:, 0]]
    rows[:, 2] -= origin
    return rows
