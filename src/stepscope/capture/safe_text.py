"""Text that can always be written: a recorded name or value whose ``str()`` raises, or that
holds a lone surrogate (not valid UTF-8), costs that value, never the profile.

XSpace string fields are proto3 ``string``s: TensorFlow's and XProf's parsers refuse a file
with invalid UTF-8 in one, so what we write must be valid UTF-8. A lone surrogate becomes
U+FFFD; a value that cannot be turned into text becomes ``<unprintable TYPE>``. Each repair
is counted, and ``stop`` says how many there were.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


class TextRepairs:
    """How many names and values had to be replaced while a profile was written."""

    def __init__(self) -> None:
        self.count = 0

    def text(self, obj: Any) -> str:
        """``obj`` as text that encodes to valid UTF-8, replaced (and counted) if it cannot."""
        text: str = obj if type(obj) is str else ""
        if type(obj) is not str:
            try:
                text = str.__str__(obj) if isinstance(obj, str) else str(obj)
                if type(text) is not str:  # a __str__ returning a str subclass
                    text = str.__str__(text)
            except Exception:  # noqa: BLE001 - any failure of a user's __str__ costs the value
                self.count += 1
                return f"<unprintable {_type_name(obj)}>"
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.count += 1
            return _SURROGATE.sub(REPLACEMENT, text)
        return text


def _type_name(obj: Any) -> str:
    try:
        name = type(obj).__name__
    except Exception:  # noqa: BLE001
        return "object"
    return _SURROGATE.sub(REPLACEMENT, name) if isinstance(name, str) else "object"
