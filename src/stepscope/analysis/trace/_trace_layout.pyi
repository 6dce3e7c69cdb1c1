"""Types of the compiled row layout (``_trace_layout.c``); its Python twin is
``trace_index._overlapping_rows``."""

from typing import Any

def rows(start: Any, end: Any, offsets: Any, out: Any) -> None: ...
