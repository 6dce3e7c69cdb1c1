"""What a skim of a big profile file gives the trace viewer before the file's table is read
(``formats.xspace_skim`` makes it, ``analysis.trace.trace_preview`` draws it): per drawn line,
its events counted per span of the trace, the events long enough to be drawn, and where in
the file each block of its events lies, with their times, so that a window is read from
those blocks alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stepscope.model.events import Plane

I64 = NDArray[np.int64]


@dataclass
class TraceSkim:
    """One host file's lines, each line's events counted per span, and its longest events.

    Times are ns relative to ``origin`` (the earliest start of a drawn event, the trace
    viewer's own origin); ``span`` reaches the latest end (events at least 1 ns long)."""

    planes: list[Plane]
    line_plane: I64  # per line: its plane's index in ``planes``
    line_id: I64
    line_name: list[str]
    line_events: I64  # events per line
    #: per drawn line whose events come in start order, the most of them open at once (the
    #: rows the index's layout takes, where events nest or overlap as usual); -1 for one
    #: whose events do not, 0 for the other lines
    line_depth: I64
    drawn: I64  # the lines drawn as events, each a row of ``count`` and ``covered``
    counter_lines: I64  # the lines drawn as counters (every event a sample of a number)
    origin: int
    span: int
    bin_ns: int  # each row's events counted per span of bin_ns ns,
    bin_origin: int  # the first from here (ns from the origin: the spans are the skim's own)
    count: I64  # len(drawn) × bins: events starting in each span
    covered: I64  # and their durations (ns) summed
    wide_ns: int  # every event at least this long is in ``wide_*``
    wide_line: I64  # per such event: its line,
    wide_row: I64  # its row in the host's table,
    wide_start: I64  # its start (relative to the origin),
    wide_dur: I64  # its duration
    wide_name: I64  # and its name, an index into ``names``
    names: list[str]
    # Per block of a drawn line's events (a few thousand events in file order): its line, the
    # table row of its first event, its events, and the earliest start and latest end of
    # those (relative to the origin, as laid out: at least 1 ns long).
    block_line: I64
    block_row: I64
    block_events: I64
    block_lo: I64
    block_hi: I64
    #: ``read_blocks(blocks, t0, t1, max_events)``: the events of those blocks that overlap
    #: [t0, t1) (relative to the origin), as int64 rows (block, index in the block, start,
    #: duration, metadata id); None where there are more than ``max_events``.
    read_blocks: Callable[[I64, int, int, int], NDArray[np.int64] | None]
    #: ``event_name(line, metadata id)``: an event's name.
    event_name: Callable[[int, int], str]


def coded_pairs(owner: I64, metadata: I64) -> tuple[list[tuple[int, int]], I64]:
    """The distinct (owner, metadata id) pairs (an owner: a line's or a plane's index, which
    holds the metadata), ascending, and each event's index among them."""
    if not len(owner):
        return [], np.zeros(0, np.int64)
    if int(metadata.min()) >= 0 and int(metadata.max()) < 1 << 31:
        key = (owner << 31) | metadata  # (an index fits in 32 bits)
        keys, code = np.unique(key, return_inverse=True)
        return list(zip((keys >> 31).tolist(), (keys & ((1 << 31) - 1)).tolist(),
                        strict=True)), code.reshape(-1)
    pairs, code = np.unique(np.stack([owner, metadata], axis=1), axis=0, return_inverse=True)
    return [(int(a), int(b)) for a, b in pairs.tolist()], code.reshape(-1)
