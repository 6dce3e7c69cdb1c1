"""PyTorch profiler traces (Kineto Chrome-trace JSON, plain or gzipped) → one EventTable.

What the table looks like, for the analyses that read it:

* **Planes.** ``/host:CPU`` (id 0) holds every CPU-side event; ``/device:GPU:<n>`` (id n + 1)
  holds the events of GPU n, one plane for each GPU that has events, with the device's
  ``device_name``, ``device_vendor`` and capabilities (``core_count``, ``memory_size``,
  ``compute_cap_major``/``minor``, named as XSpace names them) as plane stats where the trace
  tells them; ``Task Environment`` has no events and carries the trace's metadata as plane
  stats: source format, device properties (JSON), rank, world size, ``distributed_info``
  (JSON), start and stop time, ``kineto_skipped_events``, and the file's other top-level
  scalars (``schemaVersion``, ``baseTimeNanoseconds``, ``cuda_runtime_version``...) under their
  own names. ``hostnames`` is the file's ``host_name`` where it has one, else empty.
* **Which pid is a GPU.** Kineto gives each device the pid of its device number and says so in
  ``process_labels`` (or ``process_name``) metadata: ``"GPU <n>"``. A pid is also a GPU when it
  holds device-side events (kernels, MTIA's ``mtia_ccp_events``, memcpy, memset, GPU
  annotations, syncs), whose device is
  then the ``device`` argument of those events, or the pid. Host categories (``cpu_op``,
  ``python_function``, ``user_annotation``, ``*_runtime``, ``*_driver``, instants) stay on the
  host even when their pid is a GPU's: Kineto files Python threads it cannot place under pid 0,
  which is also GPU 0's. On ROCm the device number is the runtime's agent index (often 2 for the
  first GPU); it is kept as the file has it.
* **Lines.** One per (pid, tid) within a plane. The name comes from ``thread_name`` metadata,
  else ``thread <tid>`` (host) or ``stream <tid>`` (GPU); the id is the tid where it is an
  integer (``"25738"`` and ``"stream 7"`` count as 25738 and 7) and unique in its plane, else a
  negative number given in order of first appearance.
* **Rows.** Every ``X`` event is one row; instants (``i``/``I``) are zero-length rows; flow
  events (``s``/``t``/``f``) are zero-length rows named ``flow:<category>`` with category
  ``flow`` and stats ``flow_id`` and ``flow_phase``; each numeric series of a counter (``C``) is
  a zero-length row on a line named after the counter (``<name>``, or ``<name> <series>`` when
  the series is not called ``value``), category ``counter``, with a ``value`` stat. Metadata
  (``M``) events are not rows, and other phases are skipped and counted
  (``kineto_skipped_events`` on the Task Environment plane). Rows keep file order, except that
  counter samples come last.
* **Time.** ``ts``/``dur`` are microseconds; rows hold int64 nanoseconds, rounded. Where the file
  has ``baseTimeNanoseconds``, ``ts`` is relative to it and the base is added; older files give
  epoch microseconds directly. Either way ``start_ns`` is nanoseconds since the Unix epoch. Float
  epoch microseconds (about 2024) are read exactly from their decimal text, not through a double
  that could only keep a quarter of a microsecond.
* **Stats.** ``correlation`` becomes the typed ``correlation_id`` column and ``ProfilerStep#N``
  the typed ``step_num``; every row gets ``kineto_category`` (the event's ``cat``, with the 2021
  names ``Operator``/``Runtime``/``Kernel``/``Memcpy``/``Memset`` read as
  ``cpu_op``/``cuda_runtime``/``kernel``/``gpu_memcpy``/``gpu_memset``, the flow categories
  ``async`` (2021) and ``async_cpu_to_gpu`` (2022) as ``ac2g``, and a legacy
  ``[memory]`` instant without ``cat`` as ``cpu_instant_event``); every other argument is a side
  stat under its own name (legacy ``external id`` as ``External id``): integers and booleans as
  int64, floats as doubles, strings as text, lists and objects as JSON text. Null arguments are
  left out.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from numpy.typing import NDArray

from stepscope.errors import ProfileFormatError
from stepscope.formats.step_stats_to_tables import tf_timeline_to_table
from stepscope.formats.tf_timeline_to_step_stats import is_tf_timeline
from stepscope.model import schema
from stepscope.model import stat_kinds as sk
from stepscope.model.events import (
    MISSING,
    TYPED_STATS,
    EventTable,
    Plane,
    StatTable,
    narrow_codes,
    narrow_durations,
)
from stepscope.model.locations import as_path, read_bytes

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
Bools = NDArray[np.bool_]

# Side stats this reader adds (Kineto has no names for them).
FLOW_ID = "flow_id"
FLOW_PHASE = "flow_phase"
FLOW_CATEGORY = "flow"
COUNTER_CATEGORY = "counter"
ENV_SKIPPED_EVENTS = "kineto_skipped_events"

_GZIP_MAGIC = b"\x1f\x8b"
_COMPLETE = "X"
_INSTANT = frozenset({"i", "I"})
_FLOW = frozenset({"s", "t", "f"})
_COUNTER = "C"
_METADATA = "M"
_ROW_PHASES = frozenset({_COMPLETE, *_INSTANT, *_FLOW})

# Category names of 2021 traces (PyTorch 1.8-1.10) and their later spelling.
_LEGACY_CATEGORIES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
}
_HOST_CATEGORIES = frozenset({
    "cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver",
    "cpu_instant_event", "Trace",
    "hpu_op",  # Kineto: "HPU host side runtime event"
})
# Device-side categories not named gpu_*: kernels (CUDA, ROCm, XPU, PrivateUse1) and MTIA's
# on-device events; MTIA's, XPU's and PrivateUse1's launches end in _runtime/_driver (host).
_DEVICE_CATEGORIES = frozenset({"kernel", "mtia_ccp_events", "cuda_sync",
                                "cuda_profiler_range"})
_ARG_ALIASES = {"external id": "External id"}

_GPU_LABEL = re.compile(r"GPU\s*(\d+)", re.IGNORECASE)
_INT_TEXT = re.compile(r"-?\d+")
_STREAM_TEXT = re.compile(r"stream\s+(\d+)", re.IGNORECASE)
_STEP_NAME = re.compile(r"ProfilerStep#(\d+)")
# A fractional epoch-microsecond timestamp (16 digits before the point since 2001); relative
# timestamps (with baseTimeNanoseconds) are far shorter and exact as doubles.
_EPOCH_FRACTION_TS = re.compile(r'"ts"\s*:\s*\d{15,}\.\d')
_EXACT_PROBE_CHARS = 8 << 20

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def is_chrome_trace_path(path: str | Path) -> bool:
    """Whether ``path`` is named like a Chrome-trace JSON file (``.json`` or ``.json.gz``)."""
    name = as_path(path).name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


def load_chrome_trace(path: str | Path) -> EventTable:
    """Load a PyTorch profiler (Kineto) Chrome-trace JSON file (a local path or an fsspec
    URL) into an event table."""
    source = as_path(path)
    # Parsing makes millions of small containers and none of them is garbage; the cyclic
    # collector would walk them again and again (about 40% of the parse time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        doc = _read_document(source)
        if is_tf_timeline(doc):  # TensorFlow's timeline module wrote it: load as step stats
            return tf_timeline_to_table(doc, source)
        try:
            return _to_table(doc)
        except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as err:
            raise _bad(source, f"malformed trace events: {err}") from err
    finally:
        if collecting:
            gc.enable()


# --------------------------------------------------------------------------- reading


def _bad(path: Path, problem: str) -> ProfileFormatError:
    return ProfileFormatError(f"{path} is not a readable PyTorch trace ({problem}).")


def _read_document(path: Path) -> dict[str, Any]:
    data: bytes | bytearray
    data = read_bytes(path)
    limit = max_document_bytes()
    if data[:2] == _GZIP_MAGIC:
        data = _inflate(path, data, limit)
    elif len(data) > limit:
        raise _bad(path, _too_large(f"it is {len(data) / 2**30:.2f} GiB,", limit))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _bad(path, "not UTF-8 text") from err
    del data
    head = text[:4096].lstrip()
    if not head and not text.strip():
        raise _bad(path, "empty file")
    if not head or head[0] not in "{[":
        raise _bad(path, "not JSON")
    parse_float = _exact_float if _EPOCH_FRACTION_TS.search(text, 0, _EXACT_PROBE_CHARS) else None
    try:
        doc = json.loads(text, parse_float=parse_float)
    except json.JSONDecodeError as err:
        end = len(text.rstrip())
        if err.pos >= end - 1 or err.msg.startswith("Unterminated string"):
            raise _bad(path, "truncated JSON") from err
        raise _bad(path, f"invalid JSON at line {err.lineno}, column {err.colno}: "
                         f"{err.msg}") from err
    except RecursionError as err:
        raise _bad(path, "JSON nested too deeply") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise _bad(path, "no traceEvents list")
    if not all(type(e) is dict for e in doc["traceEvents"]):
        raise _bad(path, "traceEvents holds an entry that is not an object")
    return doc


def max_document_bytes() -> int:
    """The most a trace's JSON text may take once inflated: a sixteenth of the machine's
    memory (parsing needs several times the text), at least 256 MiB, unless
    ``STEPSCOPE_MAX_TRACE_GB`` says otherwise."""
    raw = os.environ.get("STEPSCOPE_MAX_TRACE_GB", "")
    try:
        gigabytes = float(raw)
        if gigabytes > 0:
            return int(min(gigabytes, 1e9) * 2**30)
    except ValueError:
        pass
    try:
        total = int(psutil.virtual_memory().total)
    except Exception:  # psutil cannot tell on this platform
        total = 16 * 2**30
    return max(total // 16, 256 * 2**20)


def _too_large(what: str, limit: int) -> str:
    return (f"{what} more than the {limit / 2**30:.2f} GiB of JSON a trace may take on this "
            "machine; set STEPSCOPE_MAX_TRACE_GB to allow more")


# Real traces compress 5 to 30 times; past this ratio the data is a bomb (or padding), and its
# size once inflated is projected from what the first megabytes gave.
BOMB_RATIO = 200
_PROJECT_AFTER = 16 << 20  # inflated bytes seen before a projection is trusted


def _inflate(path: Path, data: bytes, limit: int) -> bytearray:
    """Gzip data inflated, stopping as soon as it grows past ``limit`` bytes (a gzip bomb
    inflates a thousandfold: it must not be read whole before anything is said). Data that
    inflates more than ``BOMB_RATIO`` times is refused as soon as the ratio seen, applied to
    the whole file, passes ``limit``: after the first megabytes, not at the limit."""
    out = bytearray()
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(wbits=31)
            pending = rest
            while not inflater.eof:
                chunk = inflater.decompress(pending, 1 << 24)
                out += chunk
                if len(out) > limit:
                    raise _bad(path, _too_large("it inflates to", limit))
                pending = inflater.unconsumed_tail
                consumed = len(data) - len(pending) - len(inflater.unused_data)
                if len(out) >= _PROJECT_AFTER and consumed > 0:
                    ratio = len(out) / consumed
                    if ratio > BOMB_RATIO and ratio * len(data) > limit:
                        raise _bad(path, _too_large(
                            f"it inflates {ratio:,.0f} times (a gzip bomb?): its "
                            f"{len(data) / 2**20:.1f} MiB would inflate to about "
                            f"{ratio * len(data) / 2**30:.1f} GiB,", limit))
                if not chunk and not pending:
                    break
            if not inflater.eof:
                raise _bad(path, "truncated gzip data")
            rest = inflater.unused_data
            if rest[:2] != _GZIP_MAGIC:  # trailing zeros or garbage after the last member
                break
    except zlib.error as err:
        raise _bad(path, f"corrupt gzip data: {err}") from err
    return out


def _exact_float(text: str) -> float | Decimal:
    """A JSON float; epoch-scale values stay decimal so that their nanoseconds survive."""
    return Decimal(text) if text.find(".") >= 15 else float(text)


# --------------------------------------------------------------------------- helpers


def _encode(values: Iterable[Any]) -> tuple[I64, list[Any]]:
    """Dictionary-encode ``values``: a code per value and the distinct values by first use."""
    items = values if isinstance(values, list) else list(values)
    # dict.fromkeys and map run in C; only the distinct values see a Python loop.
    table: dict[Any, int] = dict.fromkeys(items, 0)
    for index, value in enumerate(table):
        table[value] = index
    codes = np.fromiter(map(table.__getitem__, items), dtype=np.int64, count=len(items))
    return codes, list(table)


def _recode(codes: I64, values: list[Any], fn: Callable[[Any], Any]) -> tuple[I64, list[Any]]:
    """Apply ``fn`` to each distinct value and merge the codes of values that become equal."""
    mapped, merged = _encode(fn(v) for v in values)
    return (mapped[codes] if len(codes) else codes), merged


def _lookup(table: list[Any], dtype: Any = np.int64) -> NDArray[Any]:
    return np.array(table, dtype=dtype)


def _field(rows: list[dict[str, Any]], key: str) -> list[Any]:
    """``row.get(key)`` for every row (a map over dict.get runs in C)."""
    return list(map(dict.get, rows, repeat(key)))


def _take(values: list[Any], index: I64) -> list[Any]:
    """``values[i]`` for each i in ``index``."""
    if len(index) < 2:
        return [values[i] for i in index.tolist()]
    return list(itemgetter(*index.tolist())(values))


def _intern(texts: dict[str, int], strings: list[str]) -> I64:
    """Codes of ``strings`` in the shared text table, adding the new ones."""
    for text in dict.fromkeys(strings):
        texts.setdefault(text, len(texts))
    return np.fromiter(map(texts.__getitem__, strings), dtype=np.int64, count=len(strings))


def _norm_id(value: Any) -> Any:
    """A pid or tid as an int where it is one (``"25738"``, ``"stream 7"``), else as text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (float, Decimal)) and value == int(value):
        return int(value)
    if isinstance(value, tuple):  # a counter's line key, made by this module
        return value
    if value is None:
        return None
    text = str(value).strip()
    if _INT_TEXT.fullmatch(text):
        return int(text)
    match = _STREAM_TEXT.fullmatch(text)
    return int(match.group(1)) if match else text


def _category(cat: Any) -> str:
    if cat is None:
        return ""
    text = str(cat)
    return _LEGACY_CATEGORIES.get(text, text)


def _is_host_category(cat: str) -> bool:
    return cat in _HOST_CATEGORIES or cat.endswith(("_runtime", "_driver"))


def _is_device_category(cat: str) -> bool:
    return cat in _DEVICE_CATEGORIES or cat.startswith("gpu_")


def _to_ns(values: list[Any]) -> I64:
    """Microsecond values (ints, floats or exact decimals) → rounded int64 nanoseconds."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64) * 1000
    if arr.dtype.kind == "f":
        arr = np.where(np.isfinite(arr), arr, 0.0)
        # Whole microseconds are exact in a double up to 2**53; only the fraction is scaled.
        whole = np.floor(arr)
        frac_ns = np.rint((arr - whole) * 1000.0).astype(np.int64)
        ns: I64 = whole.astype(np.int64) * 1000 + frac_ns
        return ns
    return np.array([_one_to_ns(v) for v in values], dtype=np.int64)


def _one_to_ns(value: Any) -> int:
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        if not math.isfinite(value):
            return 0
        whole = math.floor(value)
        return whole * 1000 + round((value - whole) * 1000)
    return round(Decimal(str(value)) * 1000)


def _flow_id(value: Any) -> int | None:
    if isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return zlib.crc32(value.encode("utf-8", "replace"))
    if value is None:
        return None
    return zlib.crc32(json.dumps(value, sort_keys=True, default=str).encode())


# --------------------------------------------------------------------------- building


class _Stats:
    """Side-stat rows as they are gathered: str values hold text codes until the end."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.texts: dict[str, int] = {}
        self.event: list[I64] = []
        self.name: list[I64] = []
        self.kind: list[NDArray[np.int8]] = []
        self.value: list[I64] = []

    def add(self, event: I64, name: str | I64, kind: int | NDArray[np.int8],
            value: I64) -> None:
        if not len(event):
            return
        if isinstance(name, str):
            name = np.full(len(event), self.names.setdefault(name, len(self.names)),
                           dtype=np.int64)
        self.event.append(event.astype(np.int64))
        self.name.append(name)
        self.kind.append(np.broadcast_to(np.asarray(kind, dtype=np.int8), len(event)))
        self.value.append(value.astype(np.int64))

    def add_values(self, event: I64, name: I64, values: list[Any]) -> None:
        """Stats whose values are JSON values of any type (event args)."""
        type_code, types = _encode(list(map(type, values)))
        for code, kind_type in enumerate(types):
            rows = np.flatnonzero(type_code == code)
            picked = _take(values, rows)
            ev, nm = event[rows], name[rows]
            if kind_type is bool or kind_type is int:
                self._add_ints(ev, nm, picked)
            elif kind_type is float or kind_type is Decimal:
                bits = np.array(picked, dtype=np.float64).view(np.int64)
                self.add(ev, nm, sk.KIND_DOUBLE, bits)
            elif kind_type is str:
                self.add(ev, nm, sk.KIND_STR, _intern(self.texts, picked))
            elif kind_type is not type(None):
                self.add(ev, nm, sk.KIND_STR, self._json_codes(picked))

    def _add_ints(self, event: I64, name: I64, values: list[Any]) -> None:
        try:
            self.add(event, name, sk.KIND_INT64, np.array(values, dtype=np.int64))
            return
        except OverflowError:
            pass
        # Some value is beyond int64: those go in as uint64 (wrapped) or, beyond that, text.
        fits = np.array([_INT64_MIN <= v <= _INT64_MAX for v in values], dtype=bool)
        unsigned = np.array([_INT64_MAX < v < (1 << 64) for v in values], dtype=bool)
        small = [v for v, f in zip(values, fits, strict=True) if f]
        self.add(event[fits], name[fits], sk.KIND_INT64, np.array(small, dtype=np.int64))
        wrapped = [v - (1 << 64) for v, u in zip(values, unsigned, strict=True) if u]
        self.add(event[unsigned], name[unsigned], sk.KIND_UINT64,
                 np.array(wrapped, dtype=np.int64))
        huge = ~(fits | unsigned)
        texts = [str(v) for v, h in zip(values, huge, strict=True) if h]
        self.add(event[huge], name[huge], sk.KIND_STR, _intern(self.texts, texts))

    def _json_codes(self, values: list[Any]) -> I64:
        # repr is C-fast and, for values that came from JSON, tells them apart as JSON does;
        # so only one value per distinct repr needs the slower json.dumps.
        rep_code, _ = _encode(list(map(repr, values)))
        _, first = np.unique(rep_code, return_index=True)
        dumped = [json.dumps(values[i], ensure_ascii=False, default=str) for i in first.tolist()]
        return _intern(self.texts, dumped)[rep_code]

    def table(self, typed_names: Iterable[str]) -> tuple[StatTable, dict[str, I64]]:
        """The side table (sorted by event row), with typed stats taken out as (event, value)."""
        if self.event:
            event = np.concatenate(self.event)
            name = np.concatenate(self.name)
            kind = np.concatenate(self.kind).astype(np.int8)
            value = np.concatenate(self.value)
        else:
            event = name = value = np.zeros(0, dtype=np.int64)
            kind = np.zeros(0, dtype=np.int8)
        encoded = [s.encode("utf-8", "replace") for s in self.texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])

        names = [""] * len(self.names)
        for text, index in self.names.items():
            names[index] = text
        taken: dict[str, I64] = {}
        keep = np.ones(len(event), dtype=bool)
        for stat in typed_names:
            code = self.names.get(stat)
            if code is None:
                continue
            rows = np.flatnonzero((name == code) & (kind == sk.KIND_INT64))
            taken[stat] = np.stack([event[rows], value[rows]])
            keep[rows] = False
        order = np.argsort(event[keep], kind="stable")
        event, name = event[keep][order], name[keep][order]
        kind, value = kind[keep][order], value[keep][order]
        used, name = np.unique(name, return_inverse=True)
        side = StatTable(event=event.astype(np.int32),
                         name=name.astype(np.int32).reshape(-1), kind=kind, value=value,
                         text=b"".join(encoded), text_offsets=offsets,
                         stat_names=[names[c] for c in used.tolist()])
        return side, taken


def _counter_rows(counters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row-like event per numeric series of each counter sample."""
    out: list[dict[str, Any]] = []
    for e in counters:
        args = e.get("args")
        if not isinstance(args, dict):
            continue
        base = str(e.get("name", ""))
        for key, value in args.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
                continue
            label = base if key in ("value", base) else f"{base} {key}"
            out.append({"ph": _COUNTER, "name": label, "pid": e.get("pid"),
                        "tid": ("counter", label), "ts": e["ts"], "value": value})
    return out


def _metadata(meta: list[dict[str, Any]]) -> tuple[dict[Any, int], set[Any],
                                                   dict[tuple[Any, Any], str]]:
    """GPU numbers of pids, pids labelled CPU, and thread names, from ``M`` events."""
    gpu: dict[Any, int] = {}
    cpu: set[Any] = set()
    threads: dict[tuple[Any, Any], str] = {}
    for e in meta:
        what = e.get("name")
        raw = e.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        pid = _norm_id(e.get("pid"))
        if what in ("process_labels", "process_name"):
            text = args.get("labels" if what == "process_labels" else "name")
            if not isinstance(text, str):
                continue
            for part in text.split(","):
                match = _GPU_LABEL.fullmatch(part.strip())
                if match:
                    gpu.setdefault(pid, int(match.group(1)))
                elif what == "process_labels" and part.strip() == "CPU":
                    cpu.add(pid)
        elif what == "thread_name" and isinstance(args.get("name"), str):
            threads.setdefault((pid, _norm_id(e.get("tid"))), args["name"].strip())
    return gpu, cpu, threads


def _device_properties(doc: dict[str, Any]) -> list[dict[str, Any]]:
    props = doc.get("deviceProperties")
    if not isinstance(props, list) or not props:
        props = doc.get("computeProperties")  # the 2021 name, with shorter keys
    if not isinstance(props, list):
        return []
    return [p for p in props if isinstance(p, dict)]


def _gpu_plane_stats(device: int, props: list[dict[str, Any]], n_gpus: int,
                     vendor: str | None) -> dict[str, Any]:
    """A GPU plane's capability stats, named as XSpace names them."""
    entry = next((p for p in props if p.get("id") == device), None)
    if entry is None and len(props) == 1 and n_gpus == 1:
        entry = props[0]  # ROCm numbers the device by agent (e.g. 2), its properties from 0
    stats: dict[str, Any] = {}
    if vendor:
        stats["device_vendor"] = vendor
    if entry is None:
        return stats
    fields = (("device_name", ("name",)), ("core_count", ("numSms", "multiProcessorCount")),
              ("memory_size", ("totalGlobalMem",)),
              ("compute_cap_major", ("computeMajor", "major")),
              ("compute_cap_minor", ("computeMinor", "minor")))
    for stat, keys in fields:
        value = next((entry[k] for k in keys if k in entry), None)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            stats[stat] = value
    return stats


def _vendor(doc: dict[str, Any]) -> str | None:
    if any(k in doc for k in ("roctracer_version", "hip_runtime_version", "hip_driver_version")):
        return "AMD"
    if any(k in doc for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version")):
        return "Nvidia"
    return None


def _env_stats(doc: dict[str, Any], start: I64, end: I64, skipped: int) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    # The file's own scalars first, so that the names below win on a clash.
    for key, value in doc.items():
        if isinstance(value, (str, int, float)) and key != "traceEvents":
            stats[key] = value
        elif isinstance(value, Decimal):
            stats[key] = float(value)
    stats[schema.ENV_SOURCE_FORMAT] = "kineto"
    props = _device_properties(doc)
    if props:
        stats[schema.ENV_DEVICE_PROPERTIES] = json.dumps(props, default=str)
    info = doc.get("distributedInfo")
    if isinstance(info, dict):
        for key, stat in (("rank", schema.ENV_RANK), ("world_size", schema.ENV_WORLD_SIZE)):
            if isinstance(info.get(key), int) and not isinstance(info.get(key), bool):
                stats[stat] = info[key]
        stats["distributed_info"] = json.dumps(info, default=str)
    if len(start):
        stats[schema.ENV_PROFILE_START_TIME] = int(start.min())
        stats[schema.ENV_PROFILE_STOP_TIME] = int(end.max())
    stats[ENV_SKIPPED_EVENTS] = skipped
    return stats


@dataclass
class _Rows:
    """The events that become rows, and what is known of them so far (one entry per row)."""

    events: list[dict[str, Any]]
    n_plain: int  # events[:n_plain] are from the file; the rest are counter series
    times: list[Any]  # ts, as the file gives it
    phase: I64  # code into phases
    phases: list[str]
    category: I64  # code into categories (after flows and counters got theirs)
    categories: list[str]
    name: I64  # code into names (after flows got theirs)
    names: list[Any]

    def phase_is(self, wanted: Callable[[str], bool]) -> Bools:
        return _lookup([wanted(p) for p in self.phases], bool)[self.phase]

    def category_is(self, wanted: Callable[[str], bool]) -> Bools:
        return _lookup([wanted(c) for c in self.categories], bool)[self.category]


def _select_rows(events: list[dict[str, Any]]) -> tuple[_Rows, list[dict[str, Any]], int]:
    """The rows (with names and categories), the metadata events, and how many were skipped."""
    phase_code, phase_values = _encode(_field(events, "ph"))

    def of_phase(wanted: Callable[[Any], bool]) -> list[dict[str, Any]]:
        return _take(events, np.flatnonzero(
            _lookup([wanted(p) for p in phase_values], bool)[phase_code]))

    meta = of_phase(lambda p: p == _METADATA)
    rows = of_phase(lambda p: p in _ROW_PHASES)
    counters = [e for e in of_phase(lambda p: p == _COUNTER) if "ts" in e]
    times = _field(rows, "ts")
    if None in times:  # an event without a time cannot be placed
        rows = [e for e, t in zip(rows, times, strict=True) if t is not None]
        times = [t for t in times if t is not None]
    skipped = len(events) - len(meta) - len(rows) - len(counters)
    n_plain = len(rows)
    rows.extend(_counter_rows(counters))
    times.extend(e["ts"] for e in rows[n_plain:])

    ph_code, ph_values = _encode(_field(rows, "ph"))
    cat_code, categories = _recode(*_encode(_field(rows, "cat")), _category)
    name_code, names = _recode(*_encode(_field(rows, "name")),
                               lambda v: "" if v is None else v)
    is_flow = _lookup([p in _FLOW for p in ph_values], bool)[ph_code]

    # A legacy [memory] instant has no category; give it the one later traces give it.
    if "" in categories and "[memory]" in names:
        fix = (cat_code == categories.index("")) & (name_code == names.index("[memory]"))
        if fix.any():
            if "cpu_instant_event" not in categories:
                categories.append("cpu_instant_event")
            cat_code[fix] = categories.index("cpu_instant_event")

    # Flow rows are named after their category and counted under "flow", so that no analysis
    # takes them for ops; counter samples are counted under "counter".
    if is_flow.any():
        table = {v: i for i, v in enumerate(names)}
        flow_name = np.array([table.setdefault(f"flow:{c}", len(table)) for c in categories],
                             dtype=np.int64)
        name_code[is_flow] = flow_name[cat_code[is_flow]]
        names = list(table)
    cat_code[is_flow] = len(categories)
    cat_code[n_plain:] = len(categories) + 1
    categories = [*categories, FLOW_CATEGORY, COUNTER_CATEGORY]
    return _Rows(rows, n_plain, times, ph_code, ph_values, cat_code, categories, name_code,
                 names), meta, skipped


def _gpu_of_pids(rows: _Rows, pid_code: I64, pids: list[Any], device_rows: Bools,
                 gpu_label: dict[Any, int]) -> I64:
    """The GPU number of each pid, -1 for pids that are no GPU."""
    device_of_pid = np.array([gpu_label.get(p, -1) for p in pids], dtype=np.int64)
    used = set(gpu_label.values())
    for k in np.unique(pid_code[device_rows]).tolist():
        if device_of_pid[k] >= 0:
            continue
        # Not labelled (a trimmed trace): the device its events name, else the pid.
        first = int(np.flatnonzero(device_rows & (pid_code == k))[0])
        args = rows.events[first].get("args")
        device = args.get("device") if isinstance(args, dict) else None
        if not isinstance(device, int) or isinstance(device, bool) or device < 0:
            pid = pids[k]
            device = pid if isinstance(pid, int) and pid >= 0 else None
        if device is None:
            device = max(used, default=-1) + 1
        device_of_pid[k] = device
        used.add(device)
    return device_of_pid


def _place(rows: _Rows, doc: dict[str, Any], gpu_label: dict[Any, int],
           cpu_labelled: set[Any]) -> tuple[I32, list[Plane], I64, list[Any]]:
    """Each row's plane, the planes (host first, then GPUs), and the rows' pid codes."""
    pid_code, pids = _recode(*_encode(_field(rows.events, "pid")), _norm_id)
    host_rows = rows.category_is(_is_host_category)
    device_rows = rows.category_is(_is_device_category)
    pid_device = _gpu_of_pids(rows, pid_code, pids, device_rows, gpu_label)[pid_code]
    cpu_pid = np.array([p in cpu_labelled for p in pids], dtype=bool)[pid_code]
    # Device-side events always go to their GPU; others on a GPU's pid too, unless that pid is
    # also labelled CPU (a process whose pid equals a device number).
    on_gpu = (pid_device >= 0) & ~host_rows & (device_rows | ~cpu_pid)
    devices = sorted(np.unique(pid_device[on_gpu]).tolist())
    props, vendor = _device_properties(doc), _vendor(doc)
    planes = [Plane(schema.HOST_PLANE_ID, schema.HOST_PLANE)]
    planes += [Plane(d + 1, f"{schema.GPU_PLANE_PREFIX}{d}",
                     _gpu_plane_stats(d, props, len(devices), vendor)) for d in devices]
    row_plane = np.zeros(len(rows.events), dtype=np.int32)
    if devices:
        lut = np.zeros(max(devices) + 1, dtype=np.int32)
        lut[devices] = np.arange(1, len(devices) + 1, dtype=np.int32)
        row_plane[on_gpu] = lut[pid_device[on_gpu]]
    return row_plane, planes, pid_code, pids


def _lines(rows: _Rows, row_plane: I32, pid_code: I64, pids: list[Any],
           thread_names: dict[tuple[Any, Any], str]) -> tuple[I32, I32, I64, list[str]]:
    """Each row's line, and per line: plane, id and name (by plane, then first appearance)."""
    tid_code, tids = _recode(*_encode(_field(rows.events, "tid")), _norm_id)
    key = (row_plane.astype(np.int64) * max(len(pids), 1) + pid_code) * max(len(tids), 1) \
        + tid_code
    _, first_row, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.lexsort((first_row, row_plane[first_row]))
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    firsts = first_row[order].tolist()
    # Real tids may be negative too; a made-up id must not take one that a later line has.
    real = {(int(row_plane[r]), tids[tid_code[r]]) for r in firsts
            if isinstance(tids[tid_code[r]], int)}
    taken: set[tuple[int, int]] = set()
    line_id: list[int] = []
    line_name: list[str] = []
    synthetic = 0
    for r in firsts:
        plane, pid, tid = int(row_plane[r]), pids[pid_code[r]], tids[tid_code[r]]
        if isinstance(tid, int) and (plane, tid) not in taken:
            ident = tid
        else:
            synthetic -= 1
            while (plane, synthetic) in taken or (plane, synthetic) in real:
                synthetic -= 1
            ident = synthetic
        taken.add((plane, ident))
        line_id.append(ident)
        line_name.append(_line_name(pid, tid, plane > 0, thread_names))
    return (rank[inverse.reshape(-1)], row_plane[first_row[order]].astype(np.int32),
            np.array(line_id, dtype=np.int64), line_name)


def _times(rows: _Rows, base: Any) -> tuple[I64, I64]:
    """Start (ns since the epoch where the file tells) and duration of each row, in ns."""
    base_ns = int(base) if isinstance(base, (int, float, Decimal)) and \
        not isinstance(base, bool) else 0
    start_ns = _to_ns(rows.times) + base_ns
    duration_ns = np.zeros(len(rows.events), dtype=np.int64)
    x_rows = np.flatnonzero(rows.phase_is(lambda p: p == _COMPLETE))
    durations = _field(_take(rows.events, x_rows), "dur")
    if None in durations:
        durations = [0 if d is None else d for d in durations]
    duration_ns[x_rows] = _to_ns(durations)
    return start_ns, duration_ns


def _side_stats(rows: _Rows) -> tuple[StatTable, I64]:
    """The side stats of every row, and the typed correlation_id column."""
    stats = _Stats()
    n = len(rows.events)
    stats.add(np.arange(n, dtype=np.int64), schema.KINETO_CATEGORY, sk.KIND_STR,
              _intern(stats.texts, rows.categories)[rows.category])

    row_args = _field(rows.events[:rows.n_plain], "args")
    type_code, types = _encode(list(map(type, row_args)))
    with_args = np.flatnonzero(type_code == types.index(dict)) if dict in types \
        else np.zeros(0, dtype=np.int64)
    arg_dicts: list[dict[str, Any]] = _take(row_args, with_args)
    del row_args
    counts = np.fromiter(map(len, arg_dicts), dtype=np.int64, count=len(arg_dicts))
    key_code, keys = _encode(list(chain.from_iterable(arg_dicts)))
    key_name = np.array([stats.names.setdefault(_ARG_ALIASES.get(k, str(k)), len(stats.names))
                         for k in keys], dtype=np.int64)
    stats.add_values(np.repeat(with_args.astype(np.int64), counts),
                     key_name[key_code] if len(key_code) else key_code,
                     list(chain.from_iterable(map(dict.values, arg_dicts))))

    flow_rows = np.flatnonzero(rows.phase_is(lambda p: p in _FLOW))
    if len(flow_rows):
        raw_ids = _field(_take(rows.events, flow_rows), "id")
        try:
            flow_ids = np.array(raw_ids, dtype=np.int64)
            has_id = np.ones(len(flow_rows), dtype=bool)
        except (TypeError, ValueError, OverflowError):
            ids = [_flow_id(i) for i in raw_ids]
            has_id = np.array([i is not None for i in ids], dtype=bool)
            flow_ids = np.array([i for i in ids if i is not None], dtype=np.int64)
        stats.add(flow_rows[has_id], FLOW_ID, sk.KIND_INT64, flow_ids)
        stats.add(flow_rows, FLOW_PHASE, sk.KIND_STR,
                  _intern(stats.texts, rows.phases)[rows.phase[flow_rows]])

    counter_rows = np.arange(rows.n_plain, n, dtype=np.int64)
    value_name = stats.names.setdefault(schema.VALUE, len(stats.names))
    stats.add_values(counter_rows, np.full(len(counter_rows), value_name, dtype=np.int64),
                     [rows.events[i]["value"] for i in counter_rows.tolist()])

    # Kineto's integer "correlation" argument is the typed correlation_id.
    side, typed = stats.table(["correlation"])
    correlation = np.full(n, MISSING, dtype=np.int64)
    if "correlation" in typed:
        event, value = typed["correlation"]
        correlation[event] = value
    return side, correlation


def _to_table(doc: dict[str, Any]) -> EventTable:
    rows, meta, skipped = _select_rows(doc["traceEvents"])
    gpu_label, cpu_labelled, thread_names = _metadata(meta)
    row_plane, planes, pid_code, pids = _place(rows, doc, gpu_label, cpu_labelled)
    row_line, line_plane, line_id, line_name = _lines(rows, row_plane, pid_code, pids,
                                                       thread_names)
    start_ns, duration_ns = _times(rows, doc.get("baseTimeNanoseconds"))
    side, correlation = _side_stats(rows)

    # Names: drop the ones only flow rows had before renaming; steps come from the names.
    used, name_code = np.unique(rows.name, return_inverse=True)
    names = [str(rows.names[c]) for c in used.tolist()]
    steps = np.array([int(m.group(1)) if (m := _STEP_NAME.fullmatch(s)) else MISSING
                      for s in names], dtype=np.int64)
    name_code = name_code.reshape(-1)
    typed = {stat: np.full(len(rows.events), MISSING, dtype=np.int64) for stat in TYPED_STATS}
    typed[schema.CORRELATION_ID] = correlation
    typed[schema.STEP_NUM] = steps[name_code] if len(name_code) else typed[schema.STEP_NUM]

    negative = duration_ns < 0
    if negative.any():  # bad data: an event cannot end before it starts
        duration_ns = np.where(negative, 0, duration_ns)
        for index, count in enumerate(np.bincount(row_plane[negative],
                                                  minlength=len(planes)).tolist()):
            if count:
                planes[index].stats[schema.NEGATIVE_DURATIONS] = count
    planes.append(Plane(schema.TASK_ENV_PLANE_ID, schema.TASK_ENV_PLANE,
                        _env_stats(doc, start_ns, start_ns + duration_ns, skipped)))
    host = doc.get("host_name")
    return EventTable(
        planes=planes, line_plane=line_plane, line_id=line_id, line_name=line_name,
        line=narrow_codes(row_line, len(line_name)), name=narrow_codes(name_code, len(names)),
        start_ns=start_ns, duration_ns=narrow_durations(duration_ns), typed=typed, names=names,
        stats=side,
        hostnames=[host] if isinstance(host, str) and host else [],
    )


def _line_name(pid: Any, tid: Any, on_gpu: bool,
               thread_names: dict[tuple[Any, Any], str]) -> str:
    named = thread_names.get((pid, tid))
    if named:
        return named
    if isinstance(tid, tuple):  # a counter's line
        return str(tid[1])
    if isinstance(tid, int):
        return f"{'stream' if on_gpu else 'thread'} {tid}"
    if tid:
        return str(tid)
    return str(pid) if pid not in (None, "") else "(global)"
