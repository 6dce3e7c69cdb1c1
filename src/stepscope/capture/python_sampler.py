"""The Python sampler: every thread's Python stack, read at a fixed rate from inside the process.

A thread of stepscope's own wakes ``hz`` times a second, takes ``sys._current_frames()`` (all
threads' current frames, under the GIL it holds for that instant) and keeps, per thread, the
id of its stack: stacks are interned, so a sample costs a few list appends and one dict
lookup of a tuple of code objects. Its own thread and stepscope's other threads are left out.

Each sample stands for the time since the previous one (the stack seen at the end of that
span is charged for it, as a statistical profiler does): a thread that holds the GIL through a
long C call delays the sampler, and the span that ends when it lets go is the call's. Where a
thread's innermost frame is stopped on a call instruction, the callee is named (``$module.name``,
as the Python tracer names C functions) when the instruction's operands say what it is: a
global, a builtin or a module attribute; a method of a local object keeps the names the code
spells (``$lock.acquire``). Python cannot tell which C function a thread is in otherwise.

A CPU-bound thread hands the GIL over only every ``sys.getswitchinterval()`` (5 ms by
default): while sampling the interval is lowered to a quarter of the sampling period (where
that is shorter), and put back at stop, so that the rate asked for is the rate got and a
sample waits little for the GIL. With one busy thread this adds no GIL hand-over: the sampler
is the only thread asking for it.

Samples become the ``/host:python-sampler`` plane (``sampler_plane``): one line per thread,
one event per sample spanning the time it stands for, named by its innermost frame, with the
whole stack (root first, one frame a line) as an interned (ref) stat, ``python_stack``.
"""

from __future__ import annotations

import dis
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

import numpy as np

from stepscope.capture import python_tracer
from stepscope.capture.python_tracer import PythonTracer, _c_name
from stepscope.capture.recorder import Recorder
from stepscope.formats import xplane_encoder as enc
from stepscope.model import schema

REF_VALUE = 7  # XStat.ref_value: the id of the stat metadata whose name is the value
MAX_HZ = 10_000

# Instructions that only push one simple value: skipped when looking back from a call for
# the instructions that loaded its callee.
_SIMPLE_LOADS = frozenset({"LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_CLOSURE",
                           "LOAD_GLOBAL", "LOAD_NAME"})
_CALLS = frozenset({"PRECALL", "CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW",
                    "CALL_FUNCTION_EX", "CALL_KW"})


def _callee_chains(code: CodeType) -> dict[int, list[str]]:
    """Per call instruction's offset: the dotted names its callee was loaded by, where the
    arguments are simple loads (else the call is left out)."""
    ins = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "KW_NAMES",
                                                                        "PUSH_NULL")]
    out: dict[int, list[str]] = {}
    for k, instr in enumerate(ins):
        if instr.opname not in _CALLS or not isinstance(instr.arg, int):
            continue
        j = k - 1
        if j >= 0 and ins[j].opname == "PRECALL":
            j -= 1
        argc = instr.arg if instr.opname != "CALL_FUNCTION_EX" else 1
        if instr.opname == "CALL_FUNCTION_KW":
            argc += 1  # the tuple of keyword names
        while argc and j >= 0 and ins[j].opname in _SIMPLE_LOADS:
            argc, j = argc - 1, j - 1
        if argc:
            continue
        chain: list[str] = []
        while j >= 0 and ins[j].opname in ("LOAD_ATTR", "LOAD_METHOD"):
            chain.insert(0, str(ins[j].argval))
            j -= 1
        if j >= 0 and ins[j].opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST",
                                        "LOAD_DEREF"):
            chain.insert(0, str(ins[j].argval))
            out[instr.offset] = chain
    return out


def _first_resume(code: CodeType) -> int:
    """The offset of a code object's first RESUME (its entry), or -1 where it has none."""
    try:
        for instr in dis.get_instructions(code):
            if instr.opname == "RESUME":
                return instr.offset
    except Exception:  # a code object dis cannot read: no entry to recognise
        pass
    return -1


def _resolve(chain: list[str], frame: FrameType) -> str | None:
    """The tracer's name of the C function a chain of names loads, or None for a Python
    function (the sampler sees its frame instead)."""
    head = chain[0]
    known = head in frame.f_globals or head in frame.f_builtins
    if not known:
        return "$" + ".".join(chain)  # a local object: the names the code spells
    obj: Any = frame.f_globals[head] if head in frame.f_globals else frame.f_builtins[head]
    for attr in chain[1:]:
        # Only through modules and classes: looking an attribute up on them runs no code of
        # the program's (an instance's property could).
        if not isinstance(obj, (type, type(sys))):
            return "$" + ".".join(chain)
        try:
            obj = getattr(obj, attr)
        except Exception:  # a module's __getattr__ may raise anything
            return "$" + ".".join(chain)
    if isinstance(obj, type):
        return None  # a constructor: __init__'s frame, if any, is seen
    if hasattr(obj, "__code__") or not callable(obj):
        return None
    return _c_name(obj)


class PythonSampler:
    """Samples every thread's Python stack ``hz`` times a second until stopped."""

    def __init__(self, recorder: Recorder, hz: int) -> None:
        if not 0 < hz <= MAX_HZ:
            raise ValueError(f"hz must be in 1..{MAX_HZ}")
        self.hz = hz
        self._recorder = recorder
        self._period_s = 1.0 / hz
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="stepscope-python-sampler",
                                        daemon=True)
        python_tracer.leave_out(self._thread)
        self._switch_interval: float | None = None
        # What was recorded: one time per tick; per (tick, thread) sample its row.
        self.tick_ns: list[int] = []
        self.sample_tick: list[int] = []
        self.sample_thread: list[int] = []  # threading ident
        self.sample_stack: list[int] = []
        self.stacks: list[tuple[Any, ...]] = []  # innermost first: C name (or None), codes
        self._stack_ids: dict[tuple[Any, ...], int] = {}
        self._c_leaf: dict[tuple[CodeType, int], str | None] = {}
        self._chains: dict[CodeType, dict[int, list[str]]] = {}
        self._entry: dict[CodeType, int] = {}  # per code: the offset of its first RESUME
        self.threads: dict[int, tuple[int, str]] = {}  # ident → (line id, name)
        self._skip: set[int] = set()
        self.start_ns = 0
        self.stop_ns = 0
        self.cpu_ns = 0  # CPU time of the sampler's own thread (its cost, less GIL hand-overs)

    def start(self) -> None:
        """Begin sampling on a thread of its own."""
        interval = sys.getswitchinterval()
        # A quarter period: a sample then waits at most that long for a busy thread to let
        # go of the GIL, and is charged for that wait at most (see the module's docstring).
        wanted = max(self._period_s / 4, 5e-5)
        if wanted < interval:
            self._switch_interval = interval
            sys.setswitchinterval(wanted)
        self.start_ns = time.time_ns()
        self._thread.start()

    def stop(self) -> None:
        """End sampling (and put the GIL's switch interval back)."""
        self._stop = True
        self._thread.join()
        self.stop_ns = time.time_ns()
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
        self._refresh_threads()

    def _refresh_threads(self) -> None:
        """Line ids and names of the threads seen, and the idents to leave out."""
        for t in threading.enumerate():
            if t.ident is None:
                continue
            if t is self._thread or python_tracer.is_left_out(t):
                self._skip.add(t.ident)
            else:
                self.threads[t.ident] = (t.native_id or t.ident, t.name)

    def _run(self) -> None:
        me = threading.get_ident()
        self._skip.add(me)
        self._refresh_threads()
        period = self._period_s
        perf = time.perf_counter
        sleep = time.sleep
        now_ns = time.time_ns
        frames_of = sys._current_frames
        admit = self._recorder.admit
        ticks, s_tick, s_thread, s_stack = (self.tick_ns, self.sample_tick,
                                            self.sample_thread, self.sample_stack)
        ids, stacks, c_leaf, skip, threads = (self._stack_ids, self.stacks, self._c_leaf,
                                              self._skip, self.threads)
        entry = self._entry
        due = perf() + period
        cpu0 = time.thread_time_ns()
        while not self._stop:
            wait = due - perf()
            if wait > 0:
                sleep(wait)
            now = perf()
            due = due + period if due + period > now else now + period  # no catching up
            frames = frames_of()
            tick = len(ticks)
            ticks.append(now_ns())
            for ident, frame in frames.items():
                if ident in skip:
                    continue
                if ident not in threads:
                    self._refresh_threads()
                    if ident in skip:
                        continue
                code = frame.f_code
                first = entry.get(code)
                if first is None:
                    first = entry[code] = _first_resume(code)
                if frame.f_lasti <= first and frame.f_back is not None:
                    # Just entered (stopped on its first instruction, where the GIL is let
                    # go): the time this sample stands for was its caller's, up to the call.
                    frame = frame.f_back
                    code = frame.f_code
                key_c = (code, frame.f_lasti)
                leaf = c_leaf.get(key_c, False)
                if leaf is False:
                    leaf = c_leaf[key_c] = self._callee(frame)
                codes: list[Any] = [leaf]
                f: FrameType | None = frame
                while f is not None:
                    codes.append(f.f_code)
                    f = f.f_back
                key = tuple(codes)
                sid = ids.get(key)
                if sid is None:
                    sid = ids[key] = len(stacks)
                    stacks.append(key)
                if admit():
                    s_tick.append(tick)
                    s_thread.append(ident)
                    s_stack.append(sid)
            del frames
        self.cpu_ns = time.thread_time_ns() - cpu0

    def _callee(self, frame: FrameType) -> str | None:
        """The C function a frame stopped on a call instruction is in, where it can be named."""
        code = frame.f_code
        chains = self._chains.get(code)
        if chains is None:
            try:
                chains = _callee_chains(code)
            except Exception:  # a code object dis cannot read: name no callee in it
                chains = {}
            self._chains[code] = chains
        chain = chains.get(frame.f_lasti)
        if chain is None:
            return None
        try:
            return _resolve(chain, frame)
        except Exception:  # a hostile module or mapping: keep the spelled names
            return "$" + ".".join(chain)

    def frame_names(self) -> list[list[str]]:
        """Each interned stack's frame names, root first."""
        cache: dict[Any, str] = {}
        out = []
        for key in self.stacks:
            names = [_clean(PythonTracer.event_name(c, cache)) for c in reversed(key[1:])]
            if key[0] is not None:
                names.append(_clean(key[0]))
            out.append(names)
        return out


def _clean(name: str) -> str:
    """A frame name fit for a one-frame-a-line stack (no line breaks)."""
    return name.replace("\n", " ").replace("\r", " ")


def sampler_plane(sampler: PythonSampler, timestamp_ns: int,
                  keep_from_ns: int) -> enc.PlaneColumns | None:
    """The samples as the ``/host:python-sampler`` plane (None when none were taken)."""
    if not sampler.sample_tick:
        return None
    ticks = np.asarray(sampler.tick_ns, dtype=np.int64)
    # Each tick stands for the time since the previous one; the first for one period.
    begins = np.empty_like(ticks)
    begins[0] = ticks[0] - int(1e9 / sampler.hz)
    begins[1:] = ticks[:-1]
    begins = np.maximum(begins, timestamp_ns)  # the first may begin before the profile
    tick = np.asarray(sampler.sample_tick, dtype=np.int64)
    ident = np.asarray(sampler.sample_thread, dtype=np.int64)
    stack = np.asarray(sampler.sample_stack, dtype=np.int64)
    keep = begins[tick] >= keep_from_ns if keep_from_ns else np.ones(len(tick), bool)
    tick, ident, stack = tick[keep], ident[keep], stack[keep]
    if not len(tick):
        return None
    frames = sampler.frame_names()
    used, stack = np.unique(stack, return_inverse=True)
    stack = stack.reshape(-1).astype(np.int64)
    leaf_names = [frames[int(s)][-1] if frames[int(s)] else "?" for s in used]
    event_names = sorted(set(leaf_names))
    md_of = {name: i + 1 for i, name in enumerate(event_names)}
    leaf_md = np.array([md_of[n] for n in leaf_names], dtype=np.int64)
    stat_names = [schema.PYTHON_STACK] + ["\n".join(frames[int(s)]) for s in used]
    # Lines by thread, each in time order (ticks are in time order already).
    idents = sorted(set(ident.tolist()))
    order = np.lexsort((tick, np.searchsorted(np.asarray(idents, np.int64), ident)))
    tick, ident, stack = tick[order], ident[order], stack[order]
    counts = np.bincount(np.searchsorted(np.asarray(idents, np.int64), ident),
                         minlength=len(idents))
    line_begin = np.zeros(len(idents) + 1, dtype=np.int64)
    np.cumsum(counts, out=line_begin[1:])
    n = len(tick)
    start, end = begins[tick], ticks[tick]
    return enc.PlaneColumns(
        id=schema.PYTHON_SAMPLER_PLANE_ID, name=schema.PYTHON_SAMPLER_PLANE,
        event_names=event_names, stat_names=stat_names,
        line_id=[sampler.threads.get(i, (i, ""))[0] for i in idents],
        line_name=[sampler.threads.get(i, (i, f"thread {i}"))[1] for i in idents],
        line_timestamp_ns=[timestamp_ns] * len(idents), line_begin=line_begin,
        metadata_id=leaf_md[stack], offset_ps=(start - timestamp_ns) * 1000,
        duration_ps=(end - start) * 1000, nstats=np.ones(n, dtype=np.int32),
        stat_metadata_id=np.ones(n, dtype=np.int64),
        stat_field=np.full(n, REF_VALUE, dtype=np.int8), stat_value=stack + 2, blobs=[])
