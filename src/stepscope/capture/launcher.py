"""Run a Python program under a stepscope session: ``stepscope profile -- python train.py``.

The program runs in this process, as ``python`` would run it (``runpy``: its ``__main__``,
``sys.argv`` and ``sys.path[0]``), between ``session.start`` and ``session.stop``, so that its
output and exit code are its own and Ctrl-C (``KeyboardInterrupt``) still leaves a profile.

A framework the program imports after the session began gets its bridge then (an import
hook), and steps are marked where the framework knows them and the program does not say:

- PyTorch: each ``step()`` of the first optimizer that steps ends a step (PyTorch's global
  optimizer hooks); ``ProfilerStep#N`` of a ``torch.profiler`` schedule is kept as recorded;
- Keras 3: each training batch of ``Model.fit`` (a callback added to ``fit``); Keras 2
  (``tf_keras``) marks its batches itself, as TensorFlow ``Trace`` events;
- JAX ``StepTraceAnnotation`` and ``Trace(..., _r=1)`` in the program are recorded as they are.

The marked steps are root events ``train`` with ``step_num`` and ``_r=1``, as stepscope's
``Trace`` and TensorFlow's write them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import time_ns
from types import ModuleType
from typing import Any

from stepscope.capture import session, trace
from stepscope.capture.options import ProfilerOptions
from stepscope.errors import StepscopeError

STEP_EVENT = "train"  # the root event of each marked step
OPTIMIZER_EVENT = "optimizer.step"  # nested in each PyTorch step: the optimizer's own time
KERAS_BATCH_EVENT = "keras_batch"  # nested in each Keras step: the batch's time in fit

# Interpreter options that change nothing here (the program runs in this interpreter).
_IGNORED_PYTHON_FLAGS = frozenset({"-u", "-B", "-s", "-E", "-I", "-q"})


class LaunchError(StepscopeError):
    """The command to profile cannot be run."""


@dataclass(frozen=True)
class Program:
    """What to run: a script path, a module (``-m``) or code (``-c``), and its ``sys.argv``."""

    kind: str  # "path", "module" or "code"
    target: str
    argv: tuple[str, ...]

    def describe(self) -> str:
        """The program as a person would type it."""
        if self.kind == "module":
            return f"python -m {self.target}"
        if self.kind == "code":
            return "python -c …"
        return f"python {self.target}"


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name == "python" or (name.startswith("python")
                                and name[6:].replace(".", "").isdigit())


def parse_command(command: Sequence[str]) -> Program:
    """The program of ``python [FLAGS] (SCRIPT | -m MODULE | -c CODE) ARGS`` or ``SCRIPT ARGS``."""
    words = list(command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise LaunchError("No program given: pass it after --, e.g. "
                          "stepscope profile -- python train.py --epochs 1")
    if _is_python(words[0]):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] not in ("-m", "-c", "-"):
            if words[0] not in _IGNORED_PYTHON_FLAGS:
                raise LaunchError(f"The Python option {words[0]} is not supported by stepscope "
                                  "profile; run the program without it.")
            words = words[1:]
        if not words:
            raise LaunchError("No script given to python: pass a script, -m MODULE or -c CODE.")
        if words[0] in ("-m", "-c"):
            if len(words) < 2:
                raise LaunchError(f"python {words[0]} needs an argument.")
            kind = "module" if words[0] == "-m" else "code"
            argv = (words[1] if kind == "module" else "-c", *words[2:])
            return Program(kind, words[1], argv)
        if words[0] == "-":
            raise LaunchError("stepscope profile cannot run a program from standard input; "
                              "save it to a file.")
    elif not words[0].endswith(".py"):
        raise LaunchError(f"stepscope profile runs Python programs in its own interpreter, and "
                          f"{words[0]!r} is not one: pass -- python SCRIPT ARGS or -- python -m "
                          "MODULE ARGS.")
    script = words[0]
    if not Path(script).is_file():
        raise LaunchError(f"No such script: {script}; pass the path of a Python file.")
    return Program("path", script, tuple(words))


@dataclass
class LaunchResult:
    """How the program ended and where its profile went."""

    exit_code: int
    profile: Path | None  # the written profile (None: nothing was recorded)
    steps_marked: int  # steps the launcher marked (PyTorch optimizer steps, Keras batches)
    interrupted: bool  # Ctrl-C ended the program
    error: str | None = None  # why the profile could not be written


class _StepMarker:
    """Marks the program's steps; stops the session after ``max_steps`` of them."""

    def __init__(self, max_steps: int | None, stop: Callable[[], None]) -> None:
        self.max_steps = max_steps
        self.count = 0
        self.boundary_ns = time_ns()
        self._stop = stop
        self._owner: int | None = None  # id() of the optimizer whose steps count
        self._inner_start_ns = 0

    def begin_inner(self, owner: int) -> None:
        """The framework's own part of a step starts (optimizer.step, a Keras batch)."""
        if self._owner is None:
            self._owner = owner
        if owner == self._owner:
            self._inner_start_ns = time_ns()

    def end_step(self, owner: int, inner_event: str) -> None:
        """A step ends: record it, nested event first, and stop when enough were seen."""
        if owner != self._owner or not session.is_running():
            return
        end = time_ns()
        start = max(self.boundary_ns, session.recording_since_ns())
        if self._inner_start_ns:
            trace.record(inner_event, max(self._inner_start_ns, start), end, level=1)
        trace.record(STEP_EVENT, start, time_ns(), level=1, step_num=self.count, _r=1)
        self.count += 1
        self.boundary_ns = time_ns()
        self._inner_start_ns = 0
        if self.max_steps is not None and self.count >= self.max_steps:
            self._stop()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callbacks[name](module)`` once the top-level module ``name`` has been imported."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks
        self._finding: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        callback = self.callbacks.get(fullname)
        if callback is None or fullname in self._finding:
            return None
        self._finding.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(spec.loader, callback)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    """A loader that runs the module with the original loader, then tells the callback."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader (importlib.resources and friends ask it).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        # The module has run to its end; importlib marks it done only after we return, and
        # the bridges wait for that mark (a framework mid-import is not started).
        spec = module.__spec__
        was = getattr(spec, "_initializing", False)
        if spec is not None:
            spec._initializing = False  # type: ignore[attr-defined]
        try:
            self._callback(module)
        finally:
            if spec is not None:
                spec._initializing = was  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Hooks:
    """The import hook and the framework patches of one launch; ``remove`` undoes them all."""

    def __init__(self, marker: _StepMarker) -> None:
        self.marker = marker
        self._undo: list[Callable[[], None]] = []
        self._finder = _AfterImport({"torch": self._torch, "jax": self._bridges,
                                     "tensorflow": self._bridges, "keras": self._keras})

    def install(self) -> None:
        sys.meta_path.insert(0, self._finder)
        for name in self._finder.callbacks:  # imported before the program ran
            module = sys.modules.get(name)
            if module is not None:
                self._finder.callbacks[name](module)

    def remove(self) -> None:
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        for undo in reversed(self._undo):
            # A half-torn-down framework at exit: nothing left to undo.
            with contextlib.suppress(Exception):
                undo()
        self._undo.clear()

    def _bridges(self, module: ModuleType) -> None:
        session.start_new_bridges()

    def _torch(self, torch: ModuleType) -> None:
        session.start_new_bridges()
        try:  # torch.optim leaves its submodules out of its namespace
            optim = importlib.import_module("torch.optim.optimizer")
        except ImportError:
            return
        pre = getattr(optim, "register_optimizer_step_pre_hook", None)
        post = getattr(optim, "register_optimizer_step_post_hook", None)
        if pre is None or post is None:  # PyTorch before 2.0
            return
        marker = self.marker

        def before(optimizer: Any, args: Any, kwargs: Any) -> None:
            marker.begin_inner(id(optimizer))

        def after(optimizer: Any, args: Any, kwargs: Any) -> None:
            marker.end_step(id(optimizer), OPTIMIZER_EVENT)

        for handle in (pre(before), post(after)):
            self._undo.append(handle.remove)

    def _keras(self, keras: ModuleType) -> None:
        model = getattr(keras, "Model", None)
        callbacks = getattr(keras, "callbacks", None)
        version = str(getattr(keras, "__version__", "0"))
        if model is None or callbacks is None or not version[:1].isdigit() or int(
                version.split(".")[0]) < 3:
            return  # Keras 2 marks its batches itself (TensorFlow Trace events)
        marker = self.marker

        class _MarkBatches(callbacks.Callback):  # type: ignore[misc, name-defined]
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                marker.begin_inner(0)

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                marker.end_step(0, KERAS_BATCH_EVENT)

        original = model.fit

        @functools.wraps(original)
        def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) < 6:  # callbacks is fit's sixth parameter
                given = kwargs.get("callbacks") or []
                kwargs["callbacks"] = [*given, _MarkBatches()]
            return original(self, *args, **kwargs)

        model.fit = fit
        self._undo.append(lambda: setattr(model, "fit", original))


def run(program: Program, logdir: str | os.PathLike[str], options: ProfilerOptions, *,
        max_steps: int | None = None, duration_s: float | None = None,
        on_interrupt: Callable[[], None] | None = None) -> LaunchResult:
    """Run ``program`` under a session writing into ``logdir``; record until the program ends,
    ``max_steps`` steps were marked or ``duration_s`` seconds went by, whichever is first."""
    written: list[Path | None] = []
    failures: list[str] = []
    lock = threading.Lock()

    def stop() -> None:
        with lock:
            if written or failures:
                return
            try:
                written.append(session.stop())
            except StepscopeError as err:  # e.g. the program stopped our session itself
                failures.append(str(err))

    session.start(logdir, options)
    marker = _StepMarker(max_steps, stop)
    hooks = _Hooks(marker)
    timer: threading.Timer | None = None
    if duration_s is not None:
        # The delay counts too: the duration is how long recording lasts.
        timer = threading.Timer(duration_s + (options.delay_ms or 0) / 1000, stop)
        timer.daemon = True
        timer.name = "stepscope-profile-duration"
        timer.start()
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    exit_code, interrupted = 0, False
    try:
        hooks.install()
        exit_code = _run_main(program)
    except KeyboardInterrupt:
        interrupted, exit_code = True, 130
        if on_interrupt is not None:
            on_interrupt()
    finally:
        if timer is not None:
            timer.cancel()
        hooks.remove()
        sys.argv[:] = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
        stop()
    return LaunchResult(exit_code, written[0] if written else None, marker.count, interrupted,
                        failures[0] if failures else None)


def run_flight(program: Program, logdir: str | os.PathLike[str], recorder: dict[str, Any], *,
               on_interrupt: Callable[[], None] | None = None) -> tuple[int, list[Any], bool]:
    """Run ``program`` under a flight recorder (``capture.flight.start_from_args`` with
    ``recorder``) instead of a session: nothing is written unless a trigger fires (a slow
    step the program marks with ``stepscope.flight_recorder.step(i)``, SIGUSR1, SIGTERM, a
    snapshot, or an exception that ends the program). Returns the exit code, the dumps and
    whether Ctrl-C ended it."""
    from stepscope.capture import flight

    recording = flight.start_from_args(str(logdir), **recorder)
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    exit_code, interrupted = 0, False
    try:
        exit_code = _run_main(program, on_error=recording.report_exception)
    except KeyboardInterrupt:
        interrupted, exit_code = True, 130
        if on_interrupt is not None:
            on_interrupt()
    finally:
        sys.argv[:] = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
        dumps = flight.stop()
    return exit_code, dumps, interrupted


def _run_main(program: Program,
              on_error: Callable[[BaseException], object] | None = None) -> int:
    """Run the program as ``__main__``; its exit code (1 after an uncaught exception, which
    ``on_error`` hears of first)."""
    sys.argv[:] = list(program.argv)
    # sys.path[0] as python sets it: the script's folder, or the working directory.
    first = {"module": os.getcwd(), "code": ""}.get(
        program.kind, str(Path(program.target).resolve().parent))
    if sys.path:
        sys.path[0] = first
    else:
        sys.path.append(first)
    try:
        if program.kind == "module":
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        elif program.kind == "code":
            code = compile(program.target, "<string>", "exec")
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            runpy.run_path(program.target, run_name="__main__")
    except SystemExit as done:
        return _exit_code(done.code)
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # the program's own failure: shown as Python shows it
        if on_error is not None:
            on_error(err)
        traceback.print_exc()
        return 1
    return 0


def _exit_code(code: object) -> int:
    """The process exit code ``sys.exit(code)`` gives."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
