"""The exceptions stepscope raises, each with one sentence: what went wrong, what to do."""

from __future__ import annotations


class StepscopeError(Exception):
    """Base class of every error stepscope raises on purpose."""


class StepscopeWarning(UserWarning):
    """Base class of the warnings stepscope gives: the command line prints each as one
    ``stepscope: warning:`` line."""


class ProfilerAlreadyRunningError(StepscopeError):
    """``start`` was called while a profiling session is running."""


class ProfilerNotRunningError(StepscopeError):
    """``stop`` was called with no profiling session running."""


class InvalidOptionError(StepscopeError, ValueError):
    """A profiler option has a value outside what it accepts."""


class LogdirError(StepscopeError):
    """The log directory cannot be created or written."""


class OutputError(StepscopeError):
    """An output file the user named cannot be written there."""


class StorageError(LogdirError):
    """A logdir or profile URL names a filesystem that cannot be used here (its package is
    not installed, or fsspec does not know it)."""


class ProfileFormatError(StepscopeError):
    """A file is not a profile stepscope can read."""


class NotFoundError(StepscopeError):
    """A run, host, tool, event or capture that was asked for by name or id does not exist."""


class ProfilerServerError(StepscopeError):
    """The profiler server cannot start: the address is taken or invalid, or one already runs."""


class CaptureError(StepscopeError):
    """A remote capture got a profile from none of its workers; ``result`` says why for each."""

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class InvalidParameterError(StepscopeError, ValueError):
    """A tool's parameter has a value outside what the tool's declaration accepts (the web
    API answers 400)."""


def not_found(what: str, name: str, where: str, known: list[str]) -> NotFoundError:
    """The one "not found" sentence for a host, program, op, allocator, run or tool:
    what was asked for, where, and what there is to pick from (at most 20 named)."""
    shown = ", ".join(known[:20]) + (f", … ({len(known)} in all)" if len(known) > 20 else "")
    return NotFoundError(f"No {what} {name!r} in {where} ({what}s: {shown or 'none'}); "
                         "pass one of those.")
