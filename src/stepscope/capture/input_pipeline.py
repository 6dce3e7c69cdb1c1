"""Input-pipeline instrumentation: iterator events for Python pipelines and PyTorch's DataLoader.

Every stage's ``next`` is recorded as one host event named after the chain of stages that
consume it, outermost first, as tf.data names its iterators: ``Iterator::Batch::Map::Range``
is the ``Range`` source read by ``Map``, itself read by ``Batch``. Each event carries the
stats ``id`` (the stage) and ``parent_id`` (its consumer), the producer/consumer link.

The long name is found at run time: a thread-local holds the stage whose ``next`` is running,
so a stage read from inside another's ``next`` (a fluent chain, a plain generator wrapping an
instrumented one, a prefetch thread) knows its consumer without being told.

PyTorch's ``DataLoader`` is instrumented while a session records (patched at its start,
restored at its stop): the consumer's ``next`` is ``Iterator::DataLoader``, each batch fetch
``Iterator::DataLoader::Batch`` and each item read ``Iterator::DataLoader::Batch::Map``. Worker
processes time their fetches themselves and send the events back on a queue made for the
iterator (it works with the fork and the spawn start method, as it travels in the worker's
init function); they land on one line per worker, named ``DataLoader worker N``.

Workers start with their iterator (at ``for batch in loader``), which is often before the
session: ``stepscope.torch.profile`` therefore *arms* the DataLoader from its ``__enter__``, so
that every multi-process iterator made while it is armed gets the hook (silent until a session
records). An iterator whose workers started with no hook (made before ``stepscope.torch.profile``
or before ``stepscope.start``) cannot be reached: its ``Iterator::DataLoader`` events carry
``workers_recorded=0``, which the input analysis reports.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import random
import re
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from time import time_ns
from typing import Any

from stepscope.capture import trace
from stepscope.capture.recorder import Recorder
from stepscope.model import schema

PREFIX = "Iterator"
SEP = "::"
ID = "id"
PARENT_ID = "parent_id"

_local = threading.local()
_ids = itertools.count(1)
_UNSET = object()  # a stage iterator not yet named for any consumer


class _StageIter:
    """The iterator of one stage: records each ``next`` under the stage's long name."""

    kind = "Stage"

    def __init__(self, kind: str | None = None) -> None:
        if kind is not None:
            self.kind = kind
        self.id = next(_ids)
        self.name = PREFIX + SEP + self.kind
        self._parent_name: object = _UNSET
        self.stats: dict[str, Any] = {ID: self.id}

    def _rename(self, parent: _StageIter | None) -> None:
        """Take the long name and consumer link that reading from ``parent`` implies."""
        if parent is None:
            self._parent_name = None
            self.name = PREFIX + SEP + self.kind
            self.stats = {ID: self.id, **self._extra_stats()}
        else:
            self._parent_name = parent.name
            self.name = parent.name + SEP + self.kind
            self.stats = {ID: self.id, PARENT_ID: parent.id, **self._extra_stats()}

    def _extra_stats(self) -> dict[str, Any]:
        return {}

    def __iter__(self) -> _StageIter:
        return self

    def __next__(self) -> Any:
        rec = trace._instrumentation
        if rec is None:
            return self._next()
        local = _local
        parent = getattr(local, "top", None)
        if (parent.name if parent is not None else None) is not self._parent_name:
            self._rename(parent)
        local.top = self
        start = time_ns()
        try:
            return self._next()
        finally:
            end = time_ns()
            local.top = parent
            rec.add(self.name, start, end, self.stats)

    def _next(self) -> Any:
        raise NotImplementedError


class _SourceIter(_StageIter):
    def __init__(self, kind: str, it: Iterator[Any]) -> None:
        super().__init__(kind)
        self._it = it

    def _next(self) -> Any:
        return next(self._it)


class _MapIter(_StageIter):
    kind = "Map"

    def __init__(self, up: Iterator[Any], fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self._up, self._fn = up, fn

    def _next(self) -> Any:
        return self._fn(next(self._up))


class _ParallelMapIter(_StageIter):
    """Calls ``fn`` on up to ``n`` elements at once in threads; yields results in order."""

    kind = "ParallelMap"

    def __init__(self, up: Iterator[Any], fn: Callable[[Any], Any], n: int) -> None:
        super().__init__()
        self._up, self._fn, self._n = up, fn, n
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future[Any]] = deque()
        self._ended = False

    def _extra_stats(self) -> dict[str, Any]:
        return {"num_parallel_calls": self._n}

    def _next(self) -> Any:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._n, thread_name_prefix="stepscope-map")
        while not self._ended and len(self._pending) < self._n:
            try:
                item = next(self._up)
            except StopIteration:
                self._ended = True
                break
            self._pending.append(self._pool.submit(self._fn, item))
        if not self._pending:
            self._pool.shutdown(wait=False)
            raise StopIteration
        return self._pending.popleft().result()


class _FilterIter(_StageIter):
    kind = "Filter"

    def __init__(self, up: Iterator[Any], predicate: Callable[[Any], bool]) -> None:
        super().__init__()
        self._up, self._predicate = up, predicate

    def _next(self) -> Any:
        while True:
            item = next(self._up)
            if self._predicate(item):
                return item


class _BatchIter(_StageIter):
    kind = "Batch"

    def __init__(self, up: Iterator[Any], size: int, drop_remainder: bool,
                 collate: Callable[[list[Any]], Any] | None) -> None:
        super().__init__()
        self._up, self._size, self._drop = up, size, drop_remainder
        self._collate = collate

    def _extra_stats(self) -> dict[str, Any]:
        return {"batch_size": self._size}

    def _next(self) -> Any:
        items: list[Any] = []
        for _ in range(self._size):
            try:
                items.append(next(self._up))
            except StopIteration:
                break
        if not items or (self._drop and len(items) < self._size):
            raise StopIteration
        return self._collate(items) if self._collate is not None else items


class _RepeatIter(_StageIter):
    kind = "Repeat"

    def __init__(self, stage: Stage, count: int | None) -> None:
        super().__init__()
        self._stage, self._count, self._done = stage, count, 0
        self._up: Iterator[Any] = stage._upstream_iter()

    def _next(self) -> Any:
        while True:
            try:
                return next(self._up)
            except StopIteration:
                self._done += 1
                if self._count is not None and self._done >= self._count:
                    raise
                self._up = self._stage._upstream_iter()


class _CacheIter(_StageIter):
    """Reads upstream once, keeping every element; a later pass reads the kept ones."""

    kind = "Cache"

    def __init__(self, stage: Stage) -> None:
        super().__init__()
        self._stage = stage
        self._kept = stage._cache
        self._pos = 0
        self._up: Iterator[Any] | None = None if self._kept is not None else stage._upstream_iter()
        self._filling: list[Any] = []

    def _next(self) -> Any:
        if self._kept is not None:
            if self._pos >= len(self._kept):
                raise StopIteration
            self._pos += 1
            return self._kept[self._pos - 1]
        assert self._up is not None
        try:
            item = next(self._up)
        except StopIteration:
            self._stage._cache = self._filling
            raise
        self._filling.append(item)
        return item


class _ShuffleIter(_StageIter):
    kind = "Shuffle"

    def __init__(self, up: Iterator[Any], size: int, seed: int | None) -> None:
        super().__init__()
        self._up, self._size = up, size
        self._buffer: list[Any] = []
        self._random = random.Random(seed)
        self._ended = False

    def _next(self) -> Any:
        while not self._ended and len(self._buffer) < self._size:
            try:
                self._buffer.append(next(self._up))
            except StopIteration:
                self._ended = True
        if not self._buffer:
            raise StopIteration
        pick = self._random.randrange(len(self._buffer))
        self._buffer[pick], self._buffer[-1] = self._buffer[-1], self._buffer[pick]
        return self._buffer.pop()


_END = object()


class _PrefetchIter(_StageIter):
    """A thread reads ahead up to ``size`` elements; ``next`` takes the next one from it."""

    kind = "Prefetch"

    def __init__(self, up: Iterator[Any], size: int) -> None:
        super().__init__()
        self._up, self._size = up, size
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=size)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _extra_stats(self) -> dict[str, Any]:
        return {"buffer_size": self._size}

    def _next(self) -> Any:
        if self._thread is None:
            self._stop = threading.Event()
            # The thread holds this stage only weakly: when the consumer drops its iterator,
            # __del__ stops the thread instead of leaving it to read (and record) forever.
            self._thread = threading.Thread(
                target=_produce, args=(weakref.ref(self), self._up, self._queue, self._stop),
                daemon=True, name=f"stepscope-prefetch-{self.id}")
            self._thread.start()
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)  # later calls end too
            if self._error is not None:
                raise self._error
            raise StopIteration
        return item

    def __del__(self) -> None:
        stop: threading.Event | None = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def _produce(owner: weakref.ref[_PrefetchIter], up: Iterator[Any], out: queue.Queue[Any],
             stop: threading.Event) -> None:
    """A prefetch stage's thread: read ``up`` into ``out`` until the end or ``stop``."""
    stage = owner()
    if stage is None:
        return
    # The stages this thread reads are this stage's producers (a proxy: no strong reference).
    _local.top = weakref.proxy(stage)
    del stage

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in up:
            if not put(item):
                return
    except BaseException as err:  # handed to the consumer, raised there
        stage = owner()
        if stage is not None:
            stage._error = err
        del stage
    put(_END)


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def stage_kind(name: str) -> str:
    """A stage name fit for a long name: letters, digits and underscores, capitalised."""
    cleaned = _NAME_CHARS.sub("", name) or "Stage"
    return cleaned[0].upper() + cleaned[1:]


def _source_kind(source: Any) -> str:
    if isinstance(source, range):
        return "Range"
    if hasattr(source, "gi_frame") or hasattr(source, "ag_frame"):
        return "Generator"
    if isinstance(source, (list, tuple)):
        return "FromList"
    return stage_kind(type(source).__name__)


class Stage:
    """An instrumented pipeline stage; iterating it reads its upstream through it.

    Stages chain like tf.data: ``instrument(range(100)).map(f).batch(8).prefetch(2)``. A
    stage over a re-iterable source (a range, a list, another stage) can be iterated again.
    """

    def __init__(self, make: Callable[[Stage], Iterator[Any]], upstream: Any,
                 kind: str) -> None:
        self._make = make
        self._upstream = upstream
        self.kind = kind
        self._cache: list[Any] | None = None

    def _upstream_iter(self) -> Iterator[Any]:
        return iter(self._upstream)

    def __iter__(self) -> Iterator[Any]:
        return self._make(self)

    def map(self, fn: Callable[[Any], Any], num_parallel_calls: int | None = None) -> Stage:
        """Apply ``fn`` to each element (in ``num_parallel_calls`` threads when above 1)."""
        if num_parallel_calls is not None and num_parallel_calls > 1:
            n = int(num_parallel_calls)
            return Stage(lambda s: _ParallelMapIter(s._upstream_iter(), fn, n), self,
                         "ParallelMap")
        return Stage(lambda s: _MapIter(s._upstream_iter(), fn), self, "Map")

    def filter(self, predicate: Callable[[Any], bool]) -> Stage:
        """Keep the elements for which ``predicate`` is true."""
        return Stage(lambda s: _FilterIter(s._upstream_iter(), predicate), self, "Filter")

    def batch(self, batch_size: int, drop_remainder: bool = False,
              collate: Callable[[list[Any]], Any] | None = None) -> Stage:
        """Group elements into lists of ``batch_size`` (through ``collate`` when given)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        return Stage(lambda s: _BatchIter(s._upstream_iter(), batch_size, drop_remainder,
                                          collate), self, "Batch")

    def prefetch(self, buffer_size: int = 1) -> Stage:
        """Read up to ``buffer_size`` elements ahead in a background thread."""
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1, got {buffer_size}.")
        return Stage(lambda s: _PrefetchIter(s._upstream_iter(), buffer_size), self,
                     "Prefetch")

    def repeat(self, count: int | None = None) -> Stage:
        """Read the upstream ``count`` times (forever when None)."""
        return Stage(lambda s: _RepeatIter(s, count), self, "Repeat")

    def cache(self) -> Stage:
        """Keep the elements of the first pass and serve later passes from memory."""
        return Stage(lambda s: _CacheIter(s), self, "Cache")

    def shuffle(self, buffer_size: int, seed: int | None = None) -> Stage:
        """Shuffle through a buffer of ``buffer_size`` elements."""
        return Stage(lambda s: _ShuffleIter(s._upstream_iter(), buffer_size, seed), self,
                     "Shuffle")

    def stage(self, name: str, fn: Callable[[Iterator[Any]], Iterable[Any]]) -> Stage:
        """A custom stage named ``name``: ``fn`` turns the upstream iterator into an iterable."""
        kind = stage_kind(name)
        return Stage(lambda s: _SourceIter(kind, iter(fn(s._upstream_iter()))), self, kind)


def instrument(source: Iterable[Any], name: str | None = None) -> Stage:
    """Wrap any iterable as an instrumented pipeline source (its stage named ``name``)."""
    if isinstance(source, Stage) and name is None:
        return source
    kind = stage_kind(name) if name is not None else _source_kind(source)
    if isinstance(source, Iterator):
        it = source
        return Stage(lambda s: _SourceIter(kind, it), source, kind)
    return Stage(lambda s: _SourceIter(kind, iter(s._upstream)), source, kind)


# --- PyTorch DataLoader -------------------------------------------------------------------

DATALOADER = PREFIX + SEP + "DataLoader"
DL_BATCH = DATALOADER + SEP + "Batch"
DL_MAP = DL_BATCH + SEP + "Map"
WORKER_LINE = schema.DATALOADER_WORKER_LINE

# A worker process's channel back to the main process: (queue, recording flag, worker id).
_worker_channel: tuple[Any, Any, int] | None = None
# Every patched attribute's original (kept for good, so a call racing with stop still finds
# it), and which of them are patched now.
_originals: dict[tuple[type, str], Any] = {}
_installed: set[tuple[type, str]] = set()
# Armed (stepscope.torch.profile): how many arm() calls are open, and the channels of the
# multi-process iterators made while armed, each with a weak reference to its iterator.
_armed = 0
_armed_channels: list[tuple[weakref.ref[Any], Any, Any]] = []
WORKERS_RECORDED = "workers_recorded"


class _Session:
    """The DataLoader instrumentation of one recording session, in the main process."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.channels: list[tuple[Any, Any]] = []  # (queue, flag) per multi-worker iterator
        self.lines: dict[int, Any] = {}
        self.lock = threading.Lock()

    def drain(self, wait_s: float = 0.0) -> None:
        """Move the events the workers sent so far onto their lines in the recorder."""
        with self.lock:
            channels = list(self.channels)
        for q, _ in channels:
            while True:
                try:
                    pid, worker, events = q.get(timeout=wait_s) if wait_s else q.get_nowait()
                except (queue.Empty, OSError, EOFError, ValueError):
                    break
                self._add(pid, worker, events)

    def _add(self, pid: int, worker: int, events: list[tuple[str, int, int]]) -> None:
        buf = self.lines.get(pid)
        if buf is None:
            buf = self.lines[pid] = self.recorder.line_buffer(
                pid, WORKER_LINE.format(worker=worker))
        for name, start, end in events:
            if self.recorder.admit():
                buf.events.append((name, start, end, None))


_active: _Session | None = None


def _dl_next(self: Any) -> Any:
    """``_BaseDataLoaderIter.__next__``, recorded as ``Iterator::DataLoader``."""
    original = _originals[(_base_iter_type(), "__next__")]
    session = _active
    rec = trace._instrumentation
    if session is None or rec is None:
        return original(self)
    stats = self.__dict__.get("_stepscope_stats")
    if stats is None:
        batch_size = getattr(getattr(self, "_index_sampler", None), "batch_size", None)
        workers = int(getattr(self, "_num_workers", 0) or 0)
        stats = self.__dict__["_stepscope_stats"] = {
            ID: next(_ids), "num_workers": workers, "batch_size": int(batch_size or 0)}
        if workers:
            # Workers that started without stepscope's hook send nothing: say so.
            stats[WORKERS_RECORDED] = int("_stepscope_channel" in self.__dict__)
    start = time_ns()
    try:
        return original(self)
    finally:
        rec.add(DATALOADER, start, time_ns(), stats)
        if session.channels:
            session.drain()


def _timed_fetch(self: Any, possibly_batched_index: Any) -> Any:
    """The map-style fetch, timing the whole batch and each item read."""
    channel = _worker_channel
    if channel is not None:
        if not channel[1].value:
            return _original_fetch(self)(self, possibly_batched_index)
        events: list[tuple[str, int, int]] = []
        start = time_ns()
        try:
            return _fetch_items(self, possibly_batched_index, events)
        finally:
            events.append((DL_BATCH, start, time_ns()))
            with contextlib.suppress(Exception):  # never fail a batch for its timing
                channel[0].put((os.getpid(), channel[2], events))
    rec = trace._instrumentation
    if _active is None or rec is None:
        return _original_fetch(self)(self, possibly_batched_index)
    events = []
    start = time_ns()
    try:
        return _fetch_items(self, possibly_batched_index, events)
    finally:
        rec.add(DL_BATCH, start, time_ns(), None)
        for name, begin, end in events:
            rec.add(name, begin, end, None)


def _fetch_items(fetcher: Any, index: Any, events: list[tuple[str, int, int]]) -> Any:
    """Read the items of one batch (each timed as ``Map``) and collate them."""
    dataset = fetcher.dataset
    if fetcher.auto_collation:
        getitems = getattr(dataset, "__getitems__", None)
        if getitems:
            start = time_ns()
            data = getitems(index)
            events.append((DL_MAP, start, time_ns()))
        else:
            data = []
            for idx in index:
                start = time_ns()
                data.append(dataset[idx])
                events.append((DL_MAP, start, time_ns()))
    else:
        start = time_ns()
        data = dataset[index]
        events.append((DL_MAP, start, time_ns()))
    return fetcher.collate_fn(data)


def _timed_iterable_fetch(self: Any, possibly_batched_index: Any) -> Any:
    """The iterable-style fetch, timed as one ``Batch``."""
    original = _original_fetch(self)
    channel = _worker_channel
    if channel is not None and channel[1].value:
        start = time_ns()
        try:
            return original(self, possibly_batched_index)
        finally:
            with contextlib.suppress(Exception):
                channel[0].put((os.getpid(), channel[2], [(DL_BATCH, start, time_ns())]))
    rec = trace._instrumentation
    if channel is None and _active is not None and rec is not None:
        start = time_ns()
        try:
            return original(self, possibly_batched_index)
        finally:
            rec.add(DL_BATCH, start, time_ns(), None)
    return original(self, possibly_batched_index)


class _WorkerHook:
    """The worker init function stepscope passes to DataLoader workers (picklable)."""

    def __init__(self, user_init: Callable[[int], None] | None, channel: Any,
                 flag: Any) -> None:
        self.user_init = user_init
        self.channel = channel
        self.flag = flag

    def __call__(self, worker_id: int) -> None:
        global _worker_channel
        _patch_fetchers()  # a spawned worker starts from torch's own classes
        self.channel.cancel_join_thread()  # a worker must never hang at exit on our queue
        _worker_channel = (self.channel, self.flag, worker_id)
        if self.user_init is not None:
            self.user_init(worker_id)


def _dl_multi_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
    """``_MultiProcessingDataLoaderIter.__init__`` with stepscope's hook in each worker."""
    from torch.utils.data import dataloader

    original = _originals[(dataloader._MultiProcessingDataLoaderIter, "__init__")]
    session = _active
    if session is None and not _armed:
        original(self, loader, *args, **kwargs)
        return
    import multiprocessing

    ctx = loader.multiprocessing_context or multiprocessing.get_context()
    if isinstance(ctx, str):
        ctx = multiprocessing.get_context(ctx)
    channel = ctx.Queue()
    # Armed before a session: the workers stay silent until one records.
    flag = ctx.Value("b", 1 if session is not None else 0, lock=False)
    user_init = loader.worker_init_fn
    loader.worker_init_fn = _WorkerHook(user_init, channel, flag)
    try:
        original(self, loader, *args, **kwargs)
    finally:
        loader.worker_init_fn = user_init
    self.__dict__["_stepscope_channel"] = (channel, flag)
    if _armed:
        _armed_channels.append((weakref.ref(self), channel, flag))
    if session is not None:
        with session.lock:
            session.channels.append((channel, flag))


def _original_fetch(fetcher: Any) -> Any:
    """The unpatched ``fetch`` of ``fetcher``'s class."""
    for cls in type(fetcher).__mro__:
        original = _originals.get((cls, "fetch"))
        if original is not None:
            return original
    raise AttributeError("fetch")


def _base_iter_type() -> type:
    return sys.modules["torch.utils.data.dataloader"]._BaseDataLoaderIter  # type: ignore[no-any-return]


def _patch(owner: type, attr: str, replacement: Any) -> None:
    key = (owner, attr)
    if key not in _installed:
        _originals.setdefault(key, owner.__dict__[attr])
        setattr(owner, attr, replacement)
        _installed.add(key)


def _patch_fetchers() -> None:
    from torch.utils.data._utils import fetch

    _patch(fetch._MapDatasetFetcher, "fetch", _timed_fetch)
    _patch(fetch._IterableDatasetFetcher, "fetch", _timed_iterable_fetch)


def arm() -> None:
    """Hook the workers of every multi-process DataLoader iterator made from now on (until
    ``disarm``), so that a later session records them (only if torch.utils.data is imported:
    otherwise the session's start patches DataLoader, as without arming)."""
    global _armed
    if "torch.utils.data.dataloader" not in sys.modules:
        return
    from torch.utils.data import dataloader

    _armed += 1
    _patch(dataloader._MultiProcessingDataLoaderIter, "__init__", _dl_multi_init)


def disarm() -> None:
    """Undo one ``arm``; the last one forgets the armed iterators (and, between sessions,
    restores DataLoader)."""
    global _armed
    if _armed <= 0:
        return
    _armed -= 1
    if _armed == 0:
        _armed_channels.clear()
        if _active is None:
            _restore()


def _live_armed() -> list[tuple[Any, Any]]:
    """The channels of armed iterators still alive (the dead ones are forgotten)."""
    _armed_channels[:] = [c for c in _armed_channels if c[0]() is not None]
    return [(q, flag) for _, q, flag in _armed_channels]


def session_started(recorder: Recorder) -> None:
    """Instrument PyTorch's DataLoader for a session (only if torch.utils.data is imported)."""
    global _active
    if "torch.utils.data.dataloader" not in sys.modules:
        return
    from torch.utils.data import dataloader

    session = _Session(recorder)
    for q, flag in _live_armed():
        # What a worker sent before this session (a batch in flight at the last stop) is old.
        with contextlib.suppress(Exception):
            while True:
                q.get_nowait()
        flag.value = 1
        session.channels.append((q, flag))
    _active = session
    _patch(dataloader._BaseDataLoaderIter, "__next__", _dl_next)
    _patch(dataloader._MultiProcessingDataLoaderIter, "__init__", _dl_multi_init)
    _patch_fetchers()


def _restore() -> None:
    for owner, attr in list(_installed):
        setattr(owner, attr, _originals[(owner, attr)])
    _installed.clear()


def session_stopped() -> None:
    """Collect what DataLoader workers still have to send, and restore DataLoader."""
    global _active
    session = _active
    if session is None:
        return
    for _, flag in session.channels:
        flag.value = 0
    session.drain(wait_s=0.05)
    _active = None
    _restore()
    if _armed:  # still armed: iterators made between sessions get the hook too
        from torch.utils.data import dataloader

        _patch(dataloader._MultiProcessingDataLoaderIter, "__init__", _dl_multi_init)


__all__ = ["Stage", "arm", "disarm", "instrument", "session_started", "session_stopped",
           "stage_kind"]
