"""Waiting for a final answer, on a machine as busy as it may be.

Servers answer 202 while a run loads or a trace index builds, and the trace viewer answers
from its coarse overview (``"coarse": true``, no flows, no single events) until its index is
built. A test must never take such a first answer for the final one: how soon the final one
comes depends on the machine's load. These helpers ask again until it comes; the limit
(``STEPSCOPE_TEST_WAIT_S``, default 600 s) only stops a test that would otherwise hang, it
is not a speed requirement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

WAIT_S = float(os.environ.get("STEPSCOPE_TEST_WAIT_S", "600"))


def until(ask: Callable[[], T | None], what: str, interval: float = 0.05) -> T:
    """The first answer of ``ask()`` that is not None (asked again every ``interval`` s)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = ask()
        if answer is not None:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: no answer within {WAIT_S:g} s")
        time.sleep(interval)


def is_final(status: int, body: Any) -> bool:
    """Whether a tool's answer is final: not 202 (loading, indexing), not the coarse overview."""
    return status != 202 and not (isinstance(body, dict) and body.get("coarse"))


def final_reply(client: Any, path: str, params: dict[str, str]) -> Any:
    """GET ``path`` from a TestClient until its answer is final (see :func:`is_final`)."""
    def ask() -> Any:
        reply = client.get(path, params=params)
        body = reply.json() if reply.headers.get("content-type", "").startswith(
            "application/json") else None
        return reply if is_final(reply.status_code, body) else None

    return until(ask, f"GET {path} {params}")


def final_api(call: Callable[[], tuple[int, Any]], what: str) -> tuple[int, Any]:
    """``Api.data``/``Api.trace`` until the answer is final (see :func:`is_final`)."""
    def ask() -> tuple[int, Any] | None:
        code, body = call()
        return (code, body) if is_final(code, body) else None

    return until(ask, what)


def attempts() -> Iterator[int]:
    """Numbers 0, 1, 2, … for a loop that asks until it gets its answer (the loop sleeps
    and breaks itself), until the limit has passed: ``for _ in attempts():``."""
    deadline = time.monotonic() + WAIT_S
    n = 0
    while time.monotonic() <= deadline:
        yield n
        n += 1
