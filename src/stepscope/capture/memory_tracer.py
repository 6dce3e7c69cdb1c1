"""Memory tracer: NumPy array allocations and frees, recorded as XSpace memory events.

NumPy (1.22+) lets a program replace the allocator of array data (``PyDataMem_SetHandler``,
NEP 49). While a session records with ``memory_tracer_level=1``, this module installs a handler
that calls NumPy's default one and records every allocation of at least
``memory_threshold_bytes``, and the free of each recorded allocation, as a zero-length host
event ``MemoryAllocation`` / ``MemoryDeallocation`` on the calling thread, with the stats
TensorFlow's allocators write (allocator ``numpy``, heap in use, peak, requested and allocated
size, address). The analysis gives each to the innermost ``Trace`` open on its thread.

The handler is reached through ctypes, so it needs no compiler. Arrays remember the handler
that allocated them and free through it, even after the session: the handler and its
callbacks therefore live as long as the process, and only forward once recording stops.
Python objects other than NumPy arrays are not seen.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from time import time_ns
from typing import Any

from stepscope.capture.recorder import Recorder
from stepscope.model import schema

log = logging.getLogger(__name__)

_VOIDP = ctypes.c_void_p
_SIZE = ctypes.c_size_t
_MALLOC = ctypes.CFUNCTYPE(_VOIDP, _VOIDP, _SIZE)
_CALLOC = ctypes.CFUNCTYPE(_VOIDP, _VOIDP, _SIZE, _SIZE)
_REALLOC = ctypes.CFUNCTYPE(_VOIDP, _VOIDP, _VOIDP, _SIZE)
_FREE = ctypes.CFUNCTYPE(None, _VOIDP, _VOIDP, _SIZE)
# Where NumPy's C API table keeps the handler functions (numpy/__multiarray_api.h).
_SET_HANDLER, _DEFAULT_HANDLER = 304, 306


class _Allocator(ctypes.Structure):
    _fields_ = [("ctx", _VOIDP), ("malloc", _MALLOC), ("calloc", _CALLOC),
                ("realloc", _REALLOC), ("free", _FREE)]


class _Handler(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8),
                ("allocator", _Allocator)]


class MemoryTracerUnavailable(RuntimeError):
    """This NumPy has no replaceable data allocator (or no NumPy at all)."""


class _State:
    """What the installed handler records into (None: forward only)."""

    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        self.threshold = 0
        self.live: dict[int, int] = {}  # address → size of the recorded allocations
        self.in_use = 0
        self.peak = 0
        # Re-entrant: recording allocates, which may run the garbage collector, which may
        # free arrays on this same thread (their free comes back here).
        self.lock = threading.RLock()


_state = _State()
_installed: dict[str, Any] = {}  # the handler, its capsule and callbacks: never freed


def _record(name: str, address: int, size: int, requested: int) -> None:
    rec = _state.recorder
    if rec is None:
        return
    rec.add(name, (now := time_ns()), now, {
        schema.ALLOCATOR_NAME: schema.STEPSCOPE_ALLOCATOR,
        schema.BYTES_ALLOCATED: _state.in_use, schema.BYTES_RESERVED: 0,
        schema.PEAK_BYTES_IN_USE: _state.peak, schema.REQUESTED_BYTES: requested,
        schema.ALLOCATION_BYTES: size, schema.ADDRESS: address})


def _allocated(address: int | None, size: int) -> None:
    if address and _state.recorder is not None and size >= _state.threshold:
        try:
            with _state.lock:
                _state.live[address] = size
                _state.in_use += size
                _state.peak = max(_state.peak, _state.in_use)
                _record(schema.MEMORY_ALLOCATION, address, size, size)
        except Exception:  # noqa: BLE001 - NumPy's allocation must not fail because of us
            log.debug("memory tracer: an allocation was not recorded", exc_info=True)


def _freed(address: int | None) -> None:
    if address and _state.live:
        try:
            with _state.lock:
                size = _state.live.pop(address, None)
                if size is not None:
                    _state.in_use -= size
                    _record(schema.MEMORY_DEALLOCATION, address, size, size)
        except Exception:  # noqa: BLE001 - nor its free
            log.debug("memory tracer: a free was not recorded", exc_info=True)


def _api_table() -> Any:
    import importlib

    umath: Any = None
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:  # NumPy 2, then 1.x
            umath = importlib.import_module(module)
            break
        except ImportError:
            continue
    if umath is None:
        raise MemoryTracerUnavailable("NumPy is not installed.")
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = _VOIDP, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.cast(get(umath._ARRAY_API, None), ctypes.POINTER(_VOIDP))


def _install() -> None:
    """Build the handler once (it forwards to NumPy's default handler) and install it."""
    import numpy as np

    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (1, 22):
        raise MemoryTracerUnavailable(f"NumPy {np.__version__} has no replaceable data "
                                      "allocator (1.22 or later has).")
    table = _api_table()
    if not _installed:
        get = ctypes.pythonapi.PyCapsule_GetPointer
        default_obj = ctypes.cast(table[_DEFAULT_HANDLER], ctypes.POINTER(ctypes.py_object))
        base = ctypes.cast(get(default_obj.contents, b"mem_handler"),
                           ctypes.POINTER(_Handler)).contents.allocator
        ctx = base.ctx

        def malloc(_: Any, size: int) -> int | None:
            address: int | None = base.malloc(ctx, size)
            _allocated(address, size)
            return address

        def calloc(_: Any, n: int, each: int) -> int | None:
            address: int | None = base.calloc(ctx, n, each)
            _allocated(address, n * each)
            return address

        def realloc(_: Any, old: int | None, size: int) -> int | None:
            _freed(old)
            address: int | None = base.realloc(ctx, old, size)
            _allocated(address, size)
            return address

        def free(_: Any, address: int | None, size: int) -> None:
            _freed(address)
            base.free(ctx, address, size)

        callbacks = (_MALLOC(malloc), _CALLOC(calloc), _REALLOC(realloc), _FREE(free))
        handler = _Handler(b"stepscope_memory_tracer", 1, _Allocator(None, *callbacks))
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [_VOIDP, ctypes.c_char_p, _VOIDP]
        capsule = new(ctypes.addressof(handler), b"mem_handler", None)
        _installed.update(handler=handler, callbacks=callbacks, capsule=capsule, table=table)
    if "previous" in _installed:  # already installed (and not given back)
        return
    setter = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[_SET_HANDLER])
    _installed["previous"] = setter(_installed["capsule"])


def _uninstall() -> None:
    if "previous" not in _installed:
        return
    table = _installed["table"]
    setter = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[_SET_HANDLER])
    setter(_installed.pop("previous"))


class MemoryTracer:
    """Records NumPy allocations of at least ``threshold`` bytes, and their frees."""

    def __init__(self, recorder: Recorder, threshold: int) -> None:
        self.recorder = recorder
        self.threshold = threshold

    def install(self) -> None:
        """Give the calling thread's NumPy the handler (MemoryTracerUnavailable where NumPy
        cannot take one); it only forwards until ``start``."""
        _install()
        self._installed = True

    def start(self) -> None:
        """Record from now on (installs the handler first if ``install`` was not called)."""
        if not getattr(self, "_installed", False):
            self.install()
        with _state.lock:
            _state.live.clear()
            _state.in_use = _state.peak = 0
            _state.threshold = self.threshold
            _state.recorder = self.recorder

    def stop(self) -> None:
        """Stop recording and give NumPy its previous handler back."""
        with _state.lock:
            _state.recorder = None
            _state.live.clear()
        if getattr(self, "_installed", False):
            self._installed = False
            _uninstall()
