"""Types of the trace index's compiled steps (``_trace_layout.c``); their Python twins are
``trace_index._overlapping_rows`` (rows), ``track_table.TrackTable._rows_of`` (table_rows), the
chunked passes of ``trace_index.plan_tracks`` (line_counts), the sort in
``trace_index.sorted_by_track_and_start`` (order_by_key), ``TrackTable._window_cells_numpy``
(window_cells), ``TraceOverview.summed_before`` (sums_before) and, for stat_flows,
``trace_index._int_stats``, ``_lookup`` and ``_producer_flows``."""

from typing import Any

def rows(start: Any, end: Any, offsets: Any, out: Any) -> None: ...
def table_rows(key: Any, bits: int, dur: Any, rows: Any | None, offsets: Any, depth: Any,
               block_end: Any, block: int, origin: int | None = None,
               pieces: tuple[Any, Any] | None = None) -> None: ...
def line_counts(line: Any, start: Any, dur: Any, count: Any) -> int: ...
def sums_before(dur: Any, order: Any | None, block_cum: Any, block: int, pos: Any,
                out: Any, pieces: tuple[Any, Any] | None = None) -> None: ...
def order_by_key(key: Any, end: Any, order: Any, sorted: Any | None, max_runs: int) -> int: ...
def window_cells(key: Any, depth: Any, ev_row: Any | None, duration: Any, ids: Any, a: Any,
                 b: Any, rows: Any, before: Any, before_off: Any, inner: Any, bits: int,
                 width: int, span: int, origin: int | None = None,
                 pieces: tuple[Any, Any] | None = None,
                 sums: tuple[Any, ...] | None = None) -> tuple[bytes, bytes]: ...
def block_sums(depth: Any, rows: Any | None, duration: Any, block: int, off: Any,
               longest: Any, rc: Any, cov: Any, pieces: tuple[Any, Any] | None = None
               ) -> int: ...
def stat_flows(name: Any, kind: Any, event: Any, value: Any, slot: Any, keep: Any,
               line: Any | None, off: Any | None, producers: int, src: Any | None,
               dst: Any | None, k_int64: int, k_uint64: int) -> Any: ...
