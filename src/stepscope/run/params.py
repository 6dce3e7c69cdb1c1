"""A tool's parameters, declared once: their types, ranges and defaults, and one parser.

Every interface hands a tool its parameters through ``Param.parse``: the web API as the text
of a query string, the command line as text or as the values argparse made, a notebook as
Python values. A bad value is one ``InvalidParameterError`` sentence (a 400 from the API, exit
2 from the command line).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stepscope.errors import InvalidParameterError

MAX_TEXT = 1024  # the longest text parameter accepted
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
_INT = re.compile(r"[+-]?\d{1,19}")

Kind = Literal["int", "flag", "text", "run"]
Value = int | bool | str | None


@dataclass(frozen=True)
class Param:
    """One parameter of a tool: ``int`` within [low, high], ``flag`` (true/false), ``text``
    (bounded, no control characters) or ``run`` (another run: a path for a notebook or the
    command line; the web API takes a run of its logdir by name and hands over its path).
    Absent means ``default``."""

    name: str
    kind: Kind
    help: str
    default: Value = None
    low: int = 0
    high: int = 1 << 62
    required: bool = False  # no default: the tool cannot answer without it

    def parse(self, value: object) -> Value:
        """``value`` (text, or a Python value of the parameter's type) checked and converted;
        None or "" gives the default."""
        if value is None or (isinstance(value, str) and not value.strip()):
            if self.required:
                raise InvalidParameterError(f"Parameter {self.name} is required: {self.help}.")
            return False if self.kind == "flag" and self.default is None else self.default
        if self.kind == "flag":
            return _flag(self.name, value)
        if self.kind == "int":
            return self._int(value)
        text = str(value)
        if len(text) > MAX_TEXT or _CONTROL.search(text):
            raise InvalidParameterError(
                f"Parameter {self.name} is too long or holds control characters.")
        return text

    def _int(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise InvalidParameterError(
                f"Parameter {self.name} must be an integer, not {str(value)[:40]!r}.")
        if isinstance(value, str):
            text = value.strip()
            if not _INT.fullmatch(text):
                raise InvalidParameterError(
                    f"Parameter {self.name} must be an integer, not {text[:40]!r}.")
            value = int(text)
        if not self.low <= value <= self.high:
            raise InvalidParameterError(
                f"Parameter {self.name} must be between {self.low} and {self.high}, not "
                f"{value}.")
        return value

    def to_dict(self) -> dict[str, Any]:
        """The declaration as JSON (the web UI and agents read it)."""
        out: dict[str, Any] = {"name": self.name, "type": self.kind, "help": self.help,
                               "default": self.default, "required": self.required}
        if self.kind == "int":
            out.update(minimum=self.low, maximum=self.high)
        return out


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidParameterError(f"Parameter {name} must be true or false, not {text[:40]!r}.")


def parse_all(params: tuple[Param, ...], given: Mapping[str, object],
              tool: str) -> dict[str, Value]:
    """Every declared parameter of ``tool`` from ``given`` (defaults for the absent ones); a
    name the tool does not declare is an InvalidParameterError."""
    names = {p.name for p in params}
    unknown = sorted(k for k in given if k not in names)
    if unknown:
        accepted = ", ".join(sorted(names)) or "none"
        raise InvalidParameterError(f"Tool {tool} has no parameter {unknown[0]!r} (it takes: "
                                    f"{accepted}).")
    return {p.name: p.parse(given.get(p.name)) for p in params}


def number_text(value: float | None) -> str | None:
    """A number as a text parameter's value (None stays absent), as ``Run``'s methods and
    the command line give it."""
    return None if value is None else repr(float(value))
