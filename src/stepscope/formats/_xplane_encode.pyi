"""Types of the compiled XEvent encoder (``_xplane_encode.c``); its NumPy twin is in
``xplane_encoder.py``."""

from typing import Any

def encode_events(metadata_id: Any, offset_ps: Any, duration_ps: Any, nstats: Any,
                  stat_metadata_id: Any, stat_field: Any, stat_value: Any, blob_begin: Any,
                  blobs: Any, line_begin: Any) -> list[bytes]: ...
