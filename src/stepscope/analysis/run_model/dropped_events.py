"""Events a capture dropped, and the steps that may be missing or cut because of it.

A stepscope capture keeps at most ``max_events`` events; those that end after the cap is
reached are counted and dropped (``ProfilerOptions.max_events``). The profile then covers
the whole run for nothing after that moment: steps that ended later are missing, and the
step under way is cut short. Every view of such a run says so (the overview's
``dropped_events``), from the counts the capture wrote in its Task Environment plane.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.model import schema
from stepscope.model.events import EventTable

# Steps listed by number in the message; more are counted.
_SHOWN_STEPS = 5


@dataclass(frozen=True)
class DroppedEvents:
    """One host's dropped events: how many, the cap, and what they may have cost."""

    host: str
    count: int  # events dropped
    max_events: int  # the cap that was reached
    recorded: int  # events kept
    after_s: float | None  # when the cap was reached, seconds from the profile's start
    missing_s: float | None  # the rest of the profile, in seconds, with no events kept
    steps_cut: tuple[int, ...]  # steps (by number) that ended after the cap was reached
    last_step: int | None  # the last step that ended before it (complete), if any

    def message(self) -> str:
        """One sentence for a person: the count, the cap, and the steps it may have cut."""
        text = (f"Host {self.host}: {self.count:,} events were dropped after max_events="
                f"{self.max_events:,} was reached")
        if self.after_s is not None:
            text += f", {self.after_s:.3g} s into the profile"
            if self.missing_s:
                text += f" (its last {self.missing_s:.3g} s hold no events)"
        if self.steps_cut:
            shown = ", ".join(str(s) for s in self.steps_cut[:_SHOWN_STEPS])
            more = len(self.steps_cut) - _SHOWN_STEPS
            text += (f"; step {shown}" if len(self.steps_cut) == 1 else f"; steps {shown}") + (
                f" and {more} more" if more > 0 else "") + " may be cut short"
        if self.last_step is not None:
            text += f"; the last complete step is step {self.last_step}"
        text += ("; steps that ended later are missing. Raise ProfilerOptions.max_events or "
                 "profile a shorter window.")
        return text

    def to_dict(self) -> dict[str, Any]:
        """The JSON form every interface gives."""
        return {"host": self.host, "count": self.count, "max_events": self.max_events,
                "recorded": self.recorded, "after_s": self.after_s,
                "missing_s": self.missing_s, "steps_cut": list(self.steps_cut),
                "last_step": self.last_step, "message": self.message()}

    def table(self) -> dict[str, list[Any]]:
        """One row: the counts and the cut steps."""
        return {"host": [self.host], "count": [self.count], "max_events": [self.max_events],
                "after_s": [self.after_s], "steps_cut": [len(self.steps_cut)]}


def _env_int(table: EventTable, name: str) -> int | None:
    for plane in table.planes:
        if plane.name != schema.TASK_ENV_PLANE:
            continue
        value = plane.stats.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def host_dropped(host: str, table: EventTable, step_num: Any, step_end_ns: Any
                 ) -> DroppedEvents | None:
    """The dropped events of one host's table (None when none were dropped); steps by their
    numbers and end times, in ns as the table's."""
    count = _env_int(table, schema.ENV_DROPPED_EVENTS) or 0
    if count <= 0:
        return None
    start = _env_int(table, schema.ENV_PROFILE_START_TIME)
    stop = _env_int(table, schema.ENV_PROFILE_STOP_TIME)
    after = _env_int(table, schema.ENV_DROPPED_AFTER)
    after_s = missing_s = None
    cut: tuple[int, ...] = ()
    last: int | None = None
    if after is not None:
        if start is not None:
            after_s = max(0.0, (after - start) / 1e9)
        if stop is not None:
            missing_s = max(0.0, (stop - after) / 1e9)
        ends = np.asarray(step_end_ns, dtype=np.int64)
        nums = np.asarray(step_num, dtype=np.int64)
        cut = tuple(int(n) for n in nums[ends > after].tolist())
        complete = nums[ends <= after]
        last = int(complete.max()) if len(complete) else None
    return DroppedEvents(host, count, _env_int(table, schema.ENV_MAX_EVENTS) or 0,
                         _env_int(table, schema.ENV_RECORDED_EVENTS) or 0, after_s, missing_s,
                         cut, last)
