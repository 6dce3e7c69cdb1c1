"""Types of the compiled interval nesting (``_intervals.c``); its NumPy twin is
``intervals._parents_numpy`` (and ``intervals.self_times`` over it)."""

from typing import Any

def nest(group: Any, start: Any, end: Any, order: Any | None, parent: Any | None,
         self: Any | None) -> bool: ...
