"""Bounds on what a capture request may ask for, shared by the server and the client."""

from __future__ import annotations

# A capture records into memory for its whole duration; an hour is already a lot of events.
MAX_DURATION_MS = 3_600_000
# How far ahead a request may schedule its start (TensorFlow's start_timestamp_ns).
MAX_START_DELAY_MS = 3_600_000
# Well above the default cap (2 million) and below what fits in a few GiB of memory.
MAX_EVENTS = 100_000_000
# Requests are a few hundred bytes; anything near this is not a profiler client.
MAX_REQUEST_BYTES = 64 * 1024
# Metadata key of the shared token (gRPC metadata keys are lower case).
TOKEN_METADATA_KEY = "authorization"


def token_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The request metadata that carries ``token``."""
    return ((TOKEN_METADATA_KEY, f"Bearer {token}"),)
