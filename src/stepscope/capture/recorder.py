"""The in-process event store of one session: a bounded buffer per thread.

Each thread appends to its own buffer (no lock on the hot path); one shared counter enforces
the session's event cap, so memory stays bounded however long the session runs.

Where the compiled ``_fastpath`` was built, a buffer's events are fixed-size binary records
(``Records``: 16 bytes per event, 24 per stat, names interned to ids in the recorder's
``Names``), written by ``Trace`` and the Python tracer's hook without a Python object per
event, and written as XPlane bytes straight from them at stop (``recorder_to_xplane``), or
read back as NumPy columns (``recorder_columns``). Without it (or with
``STEPSCOPE_PURE_PYTHON``), events are tuples in lists, as ``Event`` says.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from stepscope.native import compiled

# One recorded complete event: (name, start_ns, end_ns, stats or None).
Event = tuple[str, int, int, "dict[str, Any] | None"]
# One counter sample: (counter name, time_ns, value).
Sample = tuple[str, int, float]
# What one tuple event or one counter sample costs where no compiled records hold them: the
# tuple, its two ints, the list slot and a small stats dict (a Trace with keyword metadata
# makes one per event). An estimate, measured as RSS per event over a long flight recording
# on CPython 3.11; the binary records report their own bytes.
LISTED_EVENT_BYTES = 400
SAMPLE_BYTES = 130

_fastpath: Any = compiled("stepscope.capture._fastpath")


class PyNames:
    """The pure-Python twin of ``_fastpath.Names``: ids for names, a str by its text, any
    other object (a code object) by identity; ``objects[id]`` is the object."""

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self._ids: dict[Any, int] = {}

    def intern(self, obj: Any) -> int:
        """The id of ``obj``, made on first use."""
        key: Any = str(obj) if isinstance(obj, str) else (id(obj),)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self.objects)
            self.objects.append(obj)  # also keeps id(obj) from being reused
        return found

    def keep(self, obj: Any) -> int:
        """A new id for ``obj`` (a stat value kept as it is, not shared with equal ones)."""
        self.objects.append(obj)
        return len(self.objects) - 1

    def __len__(self) -> int:
        return len(self.objects)


def _drop_event(name: str, start_ns: int, end_ns: int, stats: dict[str, Any] | None) -> None:
    """What a released recorder does with an event offered late: nothing."""


class ThreadBuffer:
    """The events one thread (or one line, for producers that name their own) recorded.

    ``records`` holds what the compiled paths wrote (None where they were not built);
    ``events`` is a list of tuples: ``Event`` for host buffers, ``(code or name, start_ns,
    end_ns)`` for the Python tracer's. Reading ``events`` moves the records into the list
    first (a slow path, for inspection); producers of rare events append tuples to it.
    """

    def __init__(self, thread_id: int, thread_name: str, records: Any = None,
                 with_stats: bool = True) -> None:
        self.thread_id = thread_id
        self.thread_name = thread_name
        self.records = records
        self.with_stats = with_stats
        self.listed: list[Any] = []

    @property
    def events(self) -> list[Any]:
        """Every event of this buffer as a tuple, in the order recorded."""
        if self.records is not None and len(self.records):
            from stepscope.capture.recorder_columns import records_to_tuples

            self.listed.extend(records_to_tuples(self.records, self.with_stats))
            self.records.clear()
        return self.listed

    def add(self, what: Any, start_ns: int, end_ns: int) -> None:
        """Append an event without stats (the Python tracer's calls still open at stop)."""
        if self.records is not None:
            self.records.add(what, start_ns, end_ns)
        else:
            self.listed.append((what, start_ns, end_ns))

    def __len__(self) -> int:
        return len(self.listed) + (len(self.records) if self.records is not None else 0)


class Recorder:
    """Bounded storage for host events, Python-tracer events and counter samples.

    ``compiled`` picks the storage: the binary records (True), tuples (False), or the
    records where ``_fastpath`` was built (None).
    """

    add: Callable[[str, int, int, dict[str, Any] | None], None]
    """Record one complete host event on the calling thread (``add(name, start_ns, end_ns,
    stats)``; past the cap it is counted and dropped)."""

    def __init__(self, max_events: int, compiled: bool | None = None) -> None:
        self.max_events = max_events
        self._counter = itertools.count()
        self._local = threading.local()
        self._lock = threading.Lock()
        self.host_buffers: list[ThreadBuffer] = []
        self.python_buffers: list[ThreadBuffer] = []
        self.samples: list[Sample] = []
        if compiled and _fastpath is None:
            raise RuntimeError("stepscope's compiled capture (_fastpath) is not built")
        self._native: Any = _fastpath if compiled is not False else None
        self.names: Any
        if self._native is not None:
            self.names = self._native.Names()
            # What Trace writes to; its add is this recorder's add, with no Python frame.
            self.sink: Any = self._native.Sink(self._counter, max_events, self._thread_records)
            self.add = self.sink.add
        else:
            self.names = PyNames()
            self.sink = None
            self.add = self._add_listed

    @property
    def compiled(self) -> bool:
        """Whether events are binary records (else tuples)."""
        return self._native is not None

    def _new_buffer(self, kind: list[ThreadBuffer], with_stats: bool = True) -> ThreadBuffer:
        thread = threading.current_thread()
        records = self._native.Records(self.names) if self._native is not None else None
        buf = ThreadBuffer(threading.get_native_id(), thread.name, records, with_stats)
        with self._lock:
            kind.append(buf)
        return buf

    def _thread_records(self) -> Any:
        """The calling thread's host records (the sink asks once per thread)."""
        try:
            return self._local.host.records
        except AttributeError:
            self._local.host = self._new_buffer(self.host_buffers)
            return self._local.host.records

    def _add_listed(self, name: str, start_ns: int, end_ns: int,
                    stats: dict[str, Any] | None) -> None:
        if next(self._counter) < self.max_events:
            try:
                events = self._local.host.listed
            except AttributeError:  # this thread's first event: give it a buffer
                self._local.host = self._new_buffer(self.host_buffers)
                events = self._local.host.listed
            events.append((name, start_ns, end_ns, stats))

    def release(self) -> None:
        """Let go of the sink: its thread lookup refers back to this recorder, a cycle the
        collector frees only at its next full pass, which a loop making few objects may not
        reach for long (so is ``add`` where it is this recorder's own method). Events offered
        afterwards are dropped."""
        self.sink = None
        self.add = _drop_event

    def admit(self) -> bool:
        """Count one event; False once the cap is reached (the event must then be dropped)."""
        return next(self._counter) < self.max_events

    def line_buffer(self, line_id: int, name: str) -> ThreadBuffer:
        """A new host buffer for a line that is not a thread of this process (a worker's);
        its producer appends ``Event`` tuples to ``events``."""
        buf = ThreadBuffer(line_id, name)
        with self._lock:
            self.host_buffers.append(buf)
        return buf

    def python_buffer(self) -> ThreadBuffer:
        """A new Python-tracer buffer for the calling thread."""
        return self._new_buffer(self.python_buffers, with_stats=False)

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
        if self.sink is not None:
            self.sink.counter = self._counter
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

    @property
    def nbytes(self) -> int:
        """Bytes its events hold: the records' chunks as allocated, plus an estimate for
        events kept as tuples (``LISTED_EVENT_BYTES``) and for counter samples."""
        total = len(self.samples) * SAMPLE_BYTES
        with self._lock:
            buffers = self.host_buffers + self.python_buffers
        for buf in buffers:
            total += len(buf.listed) * LISTED_EVENT_BYTES
            if buf.records is not None:
                total += buf.records.nbytes
        return total

    def refresh_thread_names(self) -> None:
        """Take each live thread's current name (threads are often renamed after they start)."""
        names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
        for buf in self.host_buffers + self.python_buffers:
            buf.thread_name = names.get(buf.thread_id, buf.thread_name)
