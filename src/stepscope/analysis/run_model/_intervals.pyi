"""Types of the compiled interval passes (``_intervals.c``); their NumPy twins are
``intervals._parents_numpy`` (and ``intervals.self_times`` over it) for nest,
``intervals._merged_numpy`` for merge and ``python_views._paths_numpy`` for paths."""

from typing import Any

def nest(group: Any, start: Any, end: Any, order: Any | None, parent: Any | None,
         self: Any | None) -> bool: ...
def merge(group: Any, start: Any, end: Any, order: Any, seg_group: Any | None,
          seg_start: Any | None, seg_end: Any | None) -> int: ...
def paths(parent: Any, name: Any, node: Any) -> tuple[bytes, bytes]: ...
