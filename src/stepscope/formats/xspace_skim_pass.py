"""The compiled skim's pass over one ``.xplane.pb`` file: the first half of ``xspace_skim``,
the one that reads the file, with no NumPy. A server starts it as soon as it knows its
first run's file (``web.skim_ahead``), while it imports NumPy and the rest of its modules:
at 1 GB that moves the first picture about a third of a second earlier. ``xspace_skim``
makes the skim from the pass's result.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from stepscope.errors import ProfileFormatError
from stepscope.formats.xplane_proto import XPlane
from stepscope.formats.xspace_compiled import compiled_decoder, decode_threads, format_error, text
from stepscope.model import schema

MAX_CELLS = 1 << 20  # drawn lines × spans, at most (8 MB of counts, as many of durations)
MAX_SPANS = 1 << 14  # spans a line, at most
MAX_WIDE = 1 << 18  # long events a thread keeps, at most (10 MB; half, once it is passed)
MAX_LINES = 1 << 16  # lines a skimmed file has, at most (16 spans each at least)


@dataclass(frozen=True)
class SkimPass:
    """What the pass read: the planes, per line its plane (int32) and row of counts (int32,
    -1: not drawn), per plane whether it is drawn, the spans a row, the compiled skim's
    columns (``raw``) and each line's end in the file (int64)."""

    path: Path
    messages: list[XPlane]
    line_plane: bytes
    skipped: list[bool]  # per plane, then one False (for lines of no plane the scan saw)
    row: bytes
    spans: int
    raw: dict[str, Any]
    body_to: bytes


def skim_pass(path: Path, *, max_cells: int = MAX_CELLS, max_wide: int = MAX_WIDE,
              threads: int | None = None, split_bytes: int = 4 << 20) -> SkimPass | None:
    """The pass over one local ``.xplane.pb`` file; None where no skim can be made of it (the
    compiled decoder not built, more than ``MAX_LINES`` lines, a line's timestamp after its
    events). ProfileFormatError where the file does not parse. ``threads``: 1 or 2 (default:
    as the decoder's), the lines' bytes cut in two where ``split_bytes`` or more."""
    decoder = compiled_decoder()
    if decoder is None:
        return None
    try:
        with open(path, "rb") as f:
            fd = f.fileno()
            _, raw_planes = decoder.scan(fd)
            messages = [XPlane.FromString(raw) for raw in raw_planes]
            plane_bytes, body_from, body_to = decoder.skim_plan(fd)
            line_plane = array("i")
            line_plane.frombytes(plane_bytes)
            if len(line_plane) > MAX_LINES:
                return None  # its counts would not fit in bounded memory: the table's turn
            if len(line_plane) and max(line_plane) >= len(messages):
                raise ValueError("a line of a plane the scan did not see")
            skipped = [text(m.name) in schema.UNDRAWN_PLANES for m in messages] + [False]
            # Every line of a drawn plane a row of counts: most hold events.
            row, drawn = array("i"), 0
            for plane in line_plane:
                row.append(-1 if skipped[plane] else drawn)
                drawn += not skipped[plane]
            spans = max(16, min(MAX_SPANS, max_cells // max(drawn, 1)))
            value_ids = array("q", [_value_id(m) for m in messages])
            raw = decoder.skim(fd, plane_bytes, body_from, body_to, row.tobytes(),
                               value_ids.tobytes(), spans, max_wide,
                               threads or decode_threads(), split_bytes)
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {path} ({err.strerror or err}).") from err
    except (ValueError, RuntimeError, DecodeError) as err:
        raise format_error(str(path), err) from err
    if raw["disordered"]:
        return None
    return SkimPass(path, messages, plane_bytes, skipped, row.tobytes(), spans, raw, body_to)


def _value_id(plane: XPlane) -> int:
    """The metadata id of the plane's counter samples' ``value`` stat, or -1."""
    return next((int(k) for k, md in plane.stat_metadata.items() if md.name == schema.VALUE),
                -1)
