"""The exceptions stepscope raises, each with one sentence: what went wrong, what to do."""

from __future__ import annotations


class StepscopeError(Exception):
    """Base class of every error stepscope raises on purpose."""


class ProfilerAlreadyRunningError(StepscopeError):
    """``start`` was called while a profiling session is running."""


class ProfilerNotRunningError(StepscopeError):
    """``stop`` was called with no profiling session running."""


class InvalidOptionError(StepscopeError, ValueError):
    """A profiler option has a value outside what it accepts."""


class LogdirError(StepscopeError):
    """The log directory cannot be created or written."""


class ProfileFormatError(StepscopeError):
    """A file is not a profile stepscope can read."""
