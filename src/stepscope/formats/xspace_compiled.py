"""The compiled XSpace decoder (``_xspace_decode``), loaded once, and what its readers share:
the one error for data that does not parse, how many threads it walks a file on, names as
text. None of it needs NumPy, so that a server starts its skim of a big file
(``xspace_skim_pass``) before NumPy and the rest of its modules are imported."""

from __future__ import annotations

import os
from typing import Any

from stepscope import native
from stepscope.errors import ProfileFormatError

_DECODER: Any = native.compiled("stepscope.formats._xspace_decode", honour_pure_python=False)


def compiled_decoder() -> Any:
    """The compiled decoder module (None where it was not built)."""
    return _DECODER


def format_error(source: str, err: Exception) -> ProfileFormatError:
    """The one error for data that does not parse as an XSpace."""
    return ProfileFormatError(
        f"{source} is not a readable XSpace profile ({err}); it may be truncated or not "
        "an .xplane.pb file.")


def decode_threads() -> int:
    """Threads the compiled decoder walks a big file on: 2, or what
    ``STEPSCOPE_DECODE_THREADS`` says (1 keeps the one-thread walk; the tables are the same)."""
    value = os.environ.get("STEPSCOPE_DECODE_THREADS", "").strip()
    return 1 if value == "1" else 2


def text(value: str | bytes) -> str:
    """A name as text: TensorFlow writes names verbatim, so bytes that are not UTF-8 (which
    protobuf then hands back as bytes) are decoded with replacement characters."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
