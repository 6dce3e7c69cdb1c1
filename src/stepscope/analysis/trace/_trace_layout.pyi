"""Types of the trace index's compiled steps (``_trace_layout.c``); their Python twins are
``trace_index._overlapping_rows`` (rows), the sort in ``trace_index.sorted_by_track_and_start``
(order_by_key) and, for stat_flows, ``trace_index._int_stats``, ``_lookup`` and
``_producer_flows``."""

from typing import Any

def rows(start: Any, end: Any, offsets: Any, out: Any) -> None: ...
def order_by_key(key: Any, end: Any, order: Any, sorted: Any | None, max_runs: int) -> int: ...
def stat_flows(name: Any, kind: Any, event: Any, value: Any, slot: Any, keep: Any,
               line: Any | None, off: Any | None, producers: int, src: Any | None,
               dst: Any | None, k_int64: int, k_uint64: int) -> Any: ...
