"""``stepscope.torch``: profile chosen steps of a long PyTorch job, as ``torch.profiler`` does.

Mirrors ``torch.profiler.schedule`` and the ``step()`` protocol of ``torch.profiler.profile``::

    with stepscope.torch.profile("logs", schedule=stepscope.torch.schedule(
            wait=1, warmup=1, active=3, repeat=2)) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

DataLoader iterators made after ``__enter__`` (``for batch in loader`` inside the ``with``)
have their worker processes recorded in every recorded cycle; the workers of one made before
it cannot be reached, and the input analysis says so.

Steps count from 0 at ``__enter__``; ``step()`` ends one. After ``skip_first`` steps, each
cycle waits ``wait`` steps, warms up for ``warmup`` steps (a stepscope session, with PyTorch's
profiler through the bridge, is already running, but what it records then is left out), then
records ``active`` steps and writes them as one run; ``repeat`` cycles (0: until the job ends).
Each recorded step is a root event ``ProfilerStep#<n>`` with ``step_num=n`` and ``_r=1``,
which stepscope, XProf and PyTorch's tools all take as a step.

This module does not import ``torch``: the session's PyTorch bridge runs ``torch.profiler``
when ``torch`` is imported, so ops and kernels join the steps in the same profile.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from time import time_ns
from types import TracebackType

from stepscope.capture import input_pipeline, session, trace
from stepscope.capture.bridges.pytorch import last_profiler
from stepscope.capture.options import ProfilerOptions
from stepscope.errors import InvalidOptionError
from stepscope.model.locations import as_path

log = logging.getLogger(__name__)

__all__ = ["Action", "Schedule", "last_profiler", "profile", "schedule"]

STEP_EVENT = "ProfilerStep#{}"


class Action(enum.Enum):
    """What the profiler does during one step, as ``torch.profiler.ProfilerAction``."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


@dataclass(frozen=True)
class Schedule:
    """Which steps are waited, warmed up and recorded (see ``schedule``)."""

    wait: int
    warmup: int
    active: int
    repeat: int = 0
    skip_first: int = 0

    def __call__(self, step: int) -> Action:
        """The action for step ``step`` (counting from 0)."""
        if step < self.skip_first:
            return Action.NONE
        step -= self.skip_first
        cycle = self.wait + self.warmup + self.active
        if self.repeat and step // cycle >= self.repeat:
            return Action.NONE
        within = step % cycle
        if within < self.wait:
            return Action.NONE
        if within < self.wait + self.warmup:
            return Action.WARMUP
        return Action.RECORD_AND_SAVE if within == cycle - 1 else Action.RECORD


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0) -> Schedule:
    """A step schedule with ``torch.profiler.schedule``'s arguments and meaning."""
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active),
                        ("repeat", repeat), ("skip_first", skip_first)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidOptionError(f"schedule {name} must be a non-negative integer, "
                                     f"got {value!r}.")
    if active < 1:
        raise InvalidOptionError("schedule active must be at least 1: it is the number of "
                                 "steps each cycle records.")
    return Schedule(wait, warmup, active, repeat, skip_first)


class profile:  # noqa: N801 - named as torch.profiler.profile, which it stands in for
    """Record the steps ``schedule`` picks into ``logdir``, one run per recorded cycle.

    Without a schedule, every step from ``__enter__`` to ``__exit__`` is recorded as one run.
    ``paths`` lists the profiles written so far.
    """

    def __init__(self, logdir: str | os.PathLike[str], *, schedule: Schedule | None = None,
                 options: ProfilerOptions | None = None) -> None:
        if schedule is not None and not isinstance(schedule, Schedule):
            raise InvalidOptionError("schedule must come from stepscope.torch.schedule(...), "
                                     f"got {type(schedule).__name__}.")
        self.logdir = as_path(logdir)
        self.schedule = schedule
        self.options = options
        self.paths: list[Path] = []
        self.step_num = 0
        self._step_begin = 0
        self._running = False  # a session this object started
        self._recorded = 0  # steps recorded in the running session
        self._armed = False  # DataLoader workers hooked from now on (input_pipeline.arm)

    def _action(self, step: int) -> Action:
        return Action.RECORD if self.schedule is None else self.schedule(step)

    def start(self) -> None:
        """Begin at step 0."""
        if not self._armed:
            # ``for batch in loader`` starts the DataLoader's workers before the first
            # recorded step: hook them now, so that the session records them when it runs.
            input_pipeline.arm()
            self._armed = True
        self.step_num = 0
        self._step_begin = time_ns()
        self._enter_step()

    def stop(self) -> None:
        """End profiling; a cycle cut short is written with the steps it recorded."""
        self._end_session()
        if self._armed:
            input_pipeline.disarm()
            self._armed = False

    def step(self) -> None:
        """Mark the end of the current step (call once per training step)."""
        end = time_ns()
        action = self._action(self.step_num)
        if self._running and action in (Action.RECORD, Action.RECORD_AND_SAVE):
            trace.record(STEP_EVENT.format(self.step_num), self._step_begin, end, level=1,
                         step_num=self.step_num, _r=1)
            self._recorded += 1
        if action is Action.RECORD_AND_SAVE:
            self._end_session()
        self.step_num += 1
        self._step_begin = time_ns()
        self._enter_step()

    def _enter_step(self) -> None:
        """Start the session or drop the warm-up, as the new step's action says."""
        action = self._action(self.step_num)
        if action is Action.NONE:
            return
        if not self._running:
            if session.is_running():
                log.warning("stepscope.torch.profile: a stepscope session is already running; "
                            "step %d is not profiled.", self.step_num)
                return
            session.start(self.logdir, self.options)
            self._running, self._recorded = True, 0
            self._step_begin = time_ns()  # events before the session's start are not kept
        if action in (Action.RECORD, Action.RECORD_AND_SAVE) and self._recorded == 0:
            session.discard_before(self._step_begin)

    def _end_session(self) -> None:
        if not self._running:
            return
        self._running = False
        path = session.stop(save=self._recorded > 0)
        if path is not None:
            self.paths.append(path)
            log.info("stepscope profile of %d PyTorch steps written to %s", self._recorded,
                     path)

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
