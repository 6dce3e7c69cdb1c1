"""What a skim of a big profile file gives the trace viewer before the file's table is read
(``formats.xspace_skim`` makes it, ``analysis.trace.trace_preview`` draws it): per drawn line,
its events counted per span of the trace, and the events long enough to be drawn."""

from __future__ import annotations

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
