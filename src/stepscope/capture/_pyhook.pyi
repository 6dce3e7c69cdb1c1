"""Types of the compiled Python-tracer hook (``_pyhook.c``); its pure-Python twin is the hook
in ``python_tracer.py``."""

from collections.abc import Callable, Iterator
from typing import Any

class HookState:
    """What one tracer's thread hooks share."""

    def __init__(self, counter: Iterator[int], max_events: int,
                 namer: Callable[[Any], str]) -> None: ...
    active: bool

class ThreadHook:
    """One thread's Python-tracer profile function."""

    def __init__(self, state: HookState, events: list[Any]) -> None: ...
    def __call__(self, frame: Any, event: str, arg: Any) -> None: ...
    def drain(self) -> list[tuple[int, Any]]: ...
    def flush(self) -> None: ...
    @property
    def depth(self) -> int: ...

def install(hook: ThreadHook) -> None: ...
