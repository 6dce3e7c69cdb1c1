"""Types of the compiled XSpace decoder (``_xspace_decode.c``); its twin is the protobuf path
of ``xspace_columns.py`` / ``xspace_to_tables.py``."""

from typing import Any

class Column:
    """Decoded column bytes (read with numpy.frombuffer)."""

def decode(data: bytes) -> dict[str, Any]: ...
def scan(source: int | bytes) -> tuple[bytes, list[bytes]]: ...
def decode_table(source: int | bytes, maps: Any, slots: Any,
                 widths: tuple[int, int, int] = (4, 4, 4), *, threads: int = 2,
                 split_bytes: int = 32 << 20, near: int = -1) -> dict[str, Any]: ...
def skim_plan(source: int | bytes) -> tuple[bytes, bytes, bytes]: ...
def skim(source: int | bytes, plane: bytes, body_from: bytes, body_to: bytes, row: bytes,
         value_ids: bytes, bins: int, max_wide: int, threads: int,
         split_bytes: int = 4 << 20) -> dict[str, Any]: ...
