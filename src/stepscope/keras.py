"""``ProfilerCallback``: profile chosen training batches of a Keras 3 ``fit`` with stepscope.

A drop-in for the profiling half of ``keras.callbacks.TensorBoard(profile_batch=...)``, on any
Keras backend::

    model.fit(x, y, callbacks=[stepscope.keras.ProfilerCallback("logs", profile_batch="10,15")])

Batches are counted as Keras' TensorBoard callback counts them: from 1, across epochs (the
``global`` training batch), so ``profile_batch=(10, 15)`` records the 10th to the 15th batch
that ``fit`` runs, inclusive. Each recorded batch is one step: a root event named ``train``
with ``step_num`` set to that batch number and ``_r=1``, which both stepscope's step finder and
XProf take as a step, spanning the callback's batch-begin hook to its batch-end hook; nested
in it, ``keras_batch`` spans the time between the two hooks, when Keras runs the batch.

The profile goes where Keras' TensorBoard callback puts it,
``<log_dir>/train/plugins/profile/<run>/<host>.xplane.pb``, so TensorBoard shows it as the
``train`` run beside the callback's scalars, and ``stepscope.load(log_dir)`` finds it.

This module imports ``keras`` (it subclasses ``keras.callbacks.Callback``); importing
``stepscope`` alone never does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from time import time_ns
from typing import Any

import keras

from stepscope.capture import session, trace
from stepscope.capture.options import ProfilerOptions
from stepscope.errors import StepscopeError
from stepscope.model.locations import as_path

log = logging.getLogger(__name__)

# The event name of a profiled batch, as Keras' TensorFlow backend names its batch traces'
# graph type.
STEP_EVENT = "train"
# The event nested in each step for the time between this callback's batch hooks, when Keras
# runs the batch. XProf counts a root event as a step only if some event is nested in it (and
# it treats an event named "train_function" specially, dropping the step: hence this name).
BATCH_EVENT = "keras_batch"
# Sub-folder of log_dir that Keras' TensorBoard callback writes training profiles into.
TRAIN_SUBDIR = "train"


def parse_profile_batch(profile_batch: Any) -> tuple[int, int]:
    """``profile_batch`` as an inclusive ``(start, stop)`` pair; ``(0, 0)`` disables profiling.

    Accepts what Keras' TensorBoard callback accepts: a non-negative int (that one batch),
    a ``"start,stop"`` string, or a pair of ints.
    """
    message = ("profile_batch must be a non-negative integer, a 'start,stop' string or a "
               "(start, stop) pair of positive integers with start <= stop (batches count "
               f"from 1; 0 disables profiling); got {profile_batch!r}.")
    value: Any = profile_batch
    if isinstance(value, str):
        try:
            value = [int(part) for part in value.split(",")]
        except ValueError:
            raise ValueError(message) from None
        if len(value) == 1:
            value = value[0]
    if isinstance(value, bool):
        raise ValueError(message)
    if isinstance(value, int):
        start = stop = value
    elif (isinstance(value, (tuple, list)) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        start, stop = value
    else:
        raise ValueError(message)
    if start < 0 or stop < start or (start == 0 and stop != 0):
        raise ValueError(message)
    return start, stop


class ProfilerCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Profile training batches ``profile_batch`` of ``fit`` into ``log_dir`` with stepscope.

    ``options`` are the session's ``ProfilerOptions`` (default: stepscope's defaults). If a
    stepscope session is already running when the first batch to profile begins, the
    callback leaves it alone and records nothing (it only stops a session it started).
    After ``fit``, ``path`` is the written profile (None if nothing was profiled).
    """

    def __init__(self, log_dir: str | os.PathLike[str] = "logs",
                 profile_batch: int | str | tuple[int, int] | list[int] = "10,15",
                 options: ProfilerOptions | None = None) -> None:
        super().__init__()
        self.start_batch, self.stop_batch = parse_profile_batch(profile_batch)
        if options is not None and not isinstance(options, ProfilerOptions):
            raise TypeError(
                f"options must be a stepscope.ProfilerOptions, got {type(options).__name__}.")
        if options is not None and options.delay_ms:
            raise ValueError("ProfilerOptions.delay_ms cannot be used with ProfilerCallback: "
                             "profile_batch already says when profiling starts.")
        self.log_dir = as_path(log_dir)
        self.options = options
        self.path: Path | None = None
        self._global_batch = 0
        self._started = False
        self._batch_start_ns = 0
        self._work_start_ns = 0

    @property
    def profile_dir(self) -> Path:
        """The logdir the session writes into (``<log_dir>/train``)."""
        return self.log_dir / TRAIN_SUBDIR

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """Count batches afresh for each ``fit``, as Keras' TensorBoard callback does."""
        self._global_batch = 0

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Start the session at the first batch to profile; open this batch's step."""
        begin = time_ns()
        self._global_batch += 1
        if self.start_batch == 0:
            return
        if self._global_batch == self.start_batch:
            self._start_session()
            # The session's clock starts in start(); XProf misreads events that begin before it.
            begin = time_ns()
        if self._started:
            self._batch_start_ns = begin
            self._work_start_ns = time_ns()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Close this batch's step; stop the session after the last batch to profile."""
        work_end = time_ns()
        if not self._started:
            return
        if self._batch_start_ns:
            # level 1: user annotations, recorded at any host_tracer_level >= 1.
            trace.record(BATCH_EVENT, self._work_start_ns, work_end, level=1)
            trace.record(STEP_EVENT, self._batch_start_ns, time_ns(), level=1,
                         step_num=self._global_batch, _r=1)
            self._batch_start_ns = 0
        if self._global_batch >= self.stop_batch:
            self._stop_session()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """Stop the session if training ended before the last batch to profile."""
        if self._started:
            self._stop_session()

    def _start_session(self) -> None:
        if session.is_running():
            log.warning("stepscope.keras.ProfilerCallback: a stepscope session is already "
                        "running; batches %d..%d are not profiled by the callback.",
                        self.start_batch, self.stop_batch)
            return
        session.start(self.profile_dir, self.options)
        self._started = True

    def _stop_session(self) -> None:
        self._started = False
        self._batch_start_ns = self._work_start_ns = 0
        try:
            self.path = session.stop()
        except StepscopeError as err:
            # Someone else stopped our session; training goes on without the profile.
            log.warning("stepscope.keras.ProfilerCallback could not write its profile: %s", err)
            return
        log.info("stepscope profile of batches %d..%d written to %s", self.start_batch,
                 min(self.stop_batch, self._global_batch), self.path)
