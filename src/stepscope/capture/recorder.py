"""The in-process event store of one session: a bounded buffer per thread.

Each thread appends to its own list (no lock on the hot path); one shared counter enforces the
session's event cap, so memory stays bounded however long the session runs.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

# One recorded complete event: (name, start_ns, end_ns, stats or None).
Event = tuple[str, int, int, "dict[str, Any] | None"]
# One counter sample: (counter name, time_ns, value).
Sample = tuple[str, int, float]


@dataclass
class ThreadBuffer:
    """The events one thread recorded, with the thread's identity."""

    thread_id: int
    thread_name: str
    events: list[Any] = field(default_factory=list)


class Recorder:
    """Bounded storage for host events, Python-tracer events and counter samples."""

    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self._counter = itertools.count()
        self._local = threading.local()
        self._lock = threading.Lock()
        self.host_buffers: list[ThreadBuffer] = []
        self.python_buffers: list[ThreadBuffer] = []
        self.samples: list[Sample] = []

    def _new_buffer(self, kind: list[ThreadBuffer]) -> ThreadBuffer:
        thread = threading.current_thread()
        buf = ThreadBuffer(threading.get_native_id(), thread.name)
        with self._lock:
            kind.append(buf)
        return buf

    def admit(self) -> bool:
        """Count one event; False once the cap is reached (the event must then be dropped)."""
        return next(self._counter) < self.max_events

    def add(self, name: str, start_ns: int, end_ns: int, stats: dict[str, Any] | None) -> None:
        """Record one complete host event on the calling thread."""
        if next(self._counter) < self.max_events:
            try:
                events = self._local.host.events
            except AttributeError:  # this thread's first event: give it a buffer
                self._local.host = self._new_buffer(self.host_buffers)
                events = self._local.host.events
            events.append((name, start_ns, end_ns, stats))

    def line_buffer(self, line_id: int, name: str) -> ThreadBuffer:
        """A new host buffer for a line that is not a thread of this process (a worker's)."""
        buf = ThreadBuffer(line_id, name)
        with self._lock:
            self.host_buffers.append(buf)
        return buf

    def python_buffer(self) -> ThreadBuffer:
        """A new Python-tracer buffer for the calling thread."""
        return self._new_buffer(self.python_buffers)

    def add_sample(self, counter: str, time_ns: int, value: float) -> None:
        """Record one counter sample."""
        if next(self._counter) < self.max_events:
            self.samples.append((counter, time_ns, value))

    def admit_many(self, n: int) -> int:
        """Count ``n`` events offered at once; how many of them fit under the cap.

        Only for when no tracer records any more (a session's end, for bridges' events).
        """
        before = self.attempted
        self._counter = itertools.count(before + n)
        return max(0, min(n, self.max_events - before))

    @property
    def attempted(self) -> int:
        """How many events were offered so far (kept + dropped)."""
        # itertools.count has no public read; its repr holds the next value.
        return int(repr(self._counter)[6:-1])

    @property
    def dropped(self) -> int:
        """How many events were dropped because the cap was reached."""
        return max(0, self.attempted - self.max_events)

    @property
    def recorded(self) -> int:
        """How many events were kept."""
        return min(self.attempted, self.max_events)

    def refresh_thread_names(self) -> None:
        """Take each live thread's current name (threads are often renamed after they start)."""
        names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
        for buf in self.host_buffers + self.python_buffers:
            buf.thread_name = names.get(buf.thread_id, buf.thread_name)
