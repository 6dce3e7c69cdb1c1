"""Types of the trace index's compiled steps (``_trace_layout.c``); their Python twins are
``trace_index._overlapping_rows`` (rows), the sort in ``trace_index.sorted_by_track_and_start``
(order_by_key) and ``trace_index._producer_flows`` (match_flows)."""

from typing import Any

def rows(start: Any, end: Any, offsets: Any, out: Any) -> None: ...
def order_by_key(key: Any, end: Any, order: Any, sorted: Any, max_runs: int) -> int: ...
def match_flows(p_rows: Any, p_ids: Any, p_types: Any, c_rows: Any, c_ids: Any,
                c_types: Any, src: Any, dst: Any) -> int: ...
