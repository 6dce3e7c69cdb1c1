"""Whether an ``.xplane.pb`` file may hold XLA programs' HLO (a byte probe, nothing decoded).

The memory and graph viewers need the serialized ``HloProto``s of the ``/host:metadata``
plane; a file without the stat's name has none.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from stepscope.formats.xspace_to_xla import HLO_PROTO_STAT

_MARKER = HLO_PROTO_STAT.encode()


def may_hold_hlo(path: str | Path) -> bool:
    """Whether the file names the HLO proto stat; False if unreadable or empty."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(_MARKER) >= 0
    except (OSError, ValueError):
        return False
