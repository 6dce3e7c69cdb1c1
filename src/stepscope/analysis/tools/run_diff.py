"""Comparing two runs (``diff``) and a regression gate over the comparison (``check``).

Both take run summaries (``run_summary``), so either side may be a run or a kept
``summary.json``.

Step time: the change is the Hodges-Lehmann estimate of the shift between the two runs'
per-step times (the median of every difference new - base), with the distribution-free 95 %
confidence interval that the Mann-Whitney rank test gives (the k-th smallest and largest of
those differences; normal approximation of the rank statistic, ties not corrected). With
fewer than four steps on a side there is no interval: the change cannot be told from noise.
A change is "beyond noise" when its interval leaves out zero.

Ops, kernels and breakdown categories carry no per-step times in a summary, only their mean
per step: their change is "beyond noise" when it is larger than the step time's own
uncertainty, a change the step time could show: half the width of the interval of the shift,
or of the change of the mean step time (Welch) where that is wider; and never less than
``BETWEEN_RUNS_PERCENT`` of the base's median step time. That floor is the noise between two
runs, which no interval within a run can see: two processes of the same program on one
machine run at speeds a few percent apart as a whole (other cores, caches, clocks), and a
small op's mean moves by a quarter or more with them. Memory peaks are counted, not timed:
any change is beyond noise.

``check`` fails a bound only when the regression is beyond noise *and* its estimate is beyond
the bound; a regression inside the noise passes, and the result says so. An op's (or
kernel's) regression is confirmed only when the step got slower beyond noise too (its fastest
steps included) by at least half the op's growth at the low end of the step's interval: the
op's time per step is a mean without a spread of its own, and a small op's mean moves by a
fifth with the machine's load while the step barely moves. Step time has one
more test, for machines shared with other work: such work delays steps and never speeds them
up, so a slower program slows its fastest steps too. A step time regression whose fastest
tenth of steps (the 10th percentile) stayed within the bound is put down to a busier machine
and does not fail; the result says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.analysis.run_model.overview_page import CATEGORIES, CATEGORY_LABELS
from stepscope.analysis.tools.run_summary import MemoryPeak, OpTime, RunSummary
from stepscope.errors import StepscopeError

Z_95 = 1.959963984540054  # two-sided 95 % quantile of the normal distribution
MAX_PAIRS = 4_000_000  # pairwise differences computed at most (more steps: a fixed sample)
MIN_STEPS = 4  # per side, for a confidence interval at 95 %
DEFAULT_BOUNDS = ("step_time=+5%", "peak_memory=+10%")


class BoundError(StepscopeError):
    """A bound given to ``check`` (``--max``) cannot be read, or names nothing in the runs."""


# -- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Distribution:
    """The per-step times of one run, summarised (ms)."""

    count: int
    median: float | None
    mean: float | None
    p10: float | None
    p90: float | None
    min: float | None
    max: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "median_ms": self.median, "mean_ms": self.mean,
                "p10_ms": self.p10, "p90_ms": self.p90, "min_ms": self.min,
                "max_ms": self.max}


@dataclass(frozen=True)
class Shift:
    """The change of a per-step time from base to new: estimate and 95 % interval (ms)."""

    base: Distribution
    new: Distribution
    delta_ms: float | None  # Hodges-Lehmann shift; None without steps on a side
    ci_ms: tuple[float, float] | None  # None with too few steps
    verdict: str  # slower, faster, no change, unknown
    # Half the width of the 95 % interval of the change of the *mean* step time (Welch's
    # normal approximation): the noise of figures that are means over the steps.
    mean_noise_ms: float | None = None

    @property
    def percent(self) -> float | None:
        """The shift, in percent of the base median."""
        return _percent(self.delta_ms, self.base.median)

    @property
    def ci_percent(self) -> tuple[float, float] | None:
        if self.ci_ms is None or not self.base.median:
            return None
        return (100.0 * self.ci_ms[0] / self.base.median,
                100.0 * self.ci_ms[1] / self.base.median)

    @property
    def fastest_percent(self) -> float | None:
        """The change of the 10th percentile (the fastest tenth of the steps), in percent."""
        if self.base.p10 is None or self.new.p10 is None or not self.base.p10:
            return None
        return 100.0 * (self.new.p10 - self.base.p10) / self.base.p10

    @property
    def noise_ms(self) -> float | None:
        """How large a change per step noise can hide: half the width of the interval of the
        shift, or of the change of the mean step time where that is wider (outliers, such as
        steps delayed by other work, widen the latter and not the former)."""
        if self.ci_ms is None:
            return None
        return max((self.ci_ms[1] - self.ci_ms[0]) / 2, self.mean_noise_ms or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base.to_dict(), "new": self.new.to_dict(),
                "delta_ms": self.delta_ms, "percent": self.percent,
                "ci_ms": list(self.ci_ms) if self.ci_ms else None,
                "ci_percent": list(self.ci_percent) if self.ci_percent else None,
                "fastest_tenth_percent": self.fastest_percent,
                "noise_ms": self.noise_ms, "verdict": self.verdict}


@dataclass(frozen=True)
class Change:
    """One thing (category, op, kernel, allocator, program) in base and new."""

    kind: str  # category, op, kernel, memory, program
    name: str
    detail: str  # an op's type and side; a kernel's op; an allocator's host
    base: float | None  # ms per step, or bytes; None: absent from that run
    new: float | None
    status: str  # added, removed, slower, faster, larger, smaller, same
    beyond_noise: bool | None  # None: cannot tell (too few steps)
    share: float | None  # of the change of the mean step time, for time per step (percent)
    note: str = ""  # e.g. why an "added" op may have been in the base below its top rows
    side: str = ""  # ops: Host or Device; kernels: Kernel

    @property
    def delta(self) -> float:
        return (self.new or 0.0) - (self.base or 0.0)

    @property
    def percent(self) -> float | None:
        return _percent(self.delta, self.base) if self.base is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail,
                "base": self.base, "new": self.new, "delta": self.delta,
                "percent": self.percent, "status": self.status,
                "beyond_noise": self.beyond_noise, "share_percent": self.share,
                "note": self.note, "side": self.side}


@dataclass(frozen=True)
class HostChange:
    """One host's step time in base and new."""

    host: str
    shift: Shift

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, **self.shift.to_dict()}


@dataclass(frozen=True)
class RunDiff:
    """How ``new`` differs from ``base`` (see the module docs)."""

    base_run: str
    new_run: str
    step: Shift
    breakdown: tuple[Change, ...]  # ms per step, every category
    ops: tuple[Change, ...]  # by how much of the change each explains, largest first
    kernels: tuple[Change, ...]
    memory: tuple[Change, ...]  # allocators' peaks, bytes
    programs: tuple[Change, ...]  # XLA programs' peak heap, bytes
    hosts: tuple[HostChange, ...]
    straggler: tuple[str | None, str | None]  # most often the straggler, before and after
    input_verdict: tuple[str, str]
    environment: dict[str, list[Any]]  # what differs in the environment: key → [base, new]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``stepscope diff --json``)."""
        return {"base": self.base_run, "new": self.new_run, "step_time": self.step.to_dict(),
                "breakdown_ms_per_step": [c.to_dict() for c in self.breakdown],
                "ops": [c.to_dict() for c in self.ops],
                "kernels": [c.to_dict() for c in self.kernels],
                "memory": [c.to_dict() for c in self.memory],
                "programs": [c.to_dict() for c in self.programs],
                "hosts": [h.to_dict() for h in self.hosts],
                "straggler": {"base": self.straggler[0], "new": self.straggler[1]},
                "input_verdict": {"base": self.input_verdict[0], "new": self.input_verdict[1]},
                "environment": self.environment, "notes": list(self.notes)}

    def table(self) -> dict[str, list[Any]]:
        """Ops and kernels, by how much of the change each explains, as columns."""
        rows = [*self.ops, *self.kernels]
        return {"kind": [c.kind for c in rows], "name": [c.name for c in rows],
                "detail": [c.detail for c in rows],
                "base_ms_per_step": [c.base for c in rows],
                "new_ms_per_step": [c.new for c in rows],
                "delta_ms_per_step": [c.delta for c in rows],
                "percent": [c.percent for c in rows], "status": [c.status for c in rows],
                "beyond_noise": [c.beyond_noise for c in rows],
                "share_percent": [c.share for c in rows]}


# -- the statistics -----------------------------------------------------------------------------


def distribution(ms: Sequence[float]) -> Distribution:
    """Count, median, mean, 10th and 90th percentiles, min and max of per-step times."""
    if not len(ms):
        return Distribution(0, None, None, None, None, None, None)
    a = np.asarray(ms, dtype=np.float64)
    p10, p50, p90 = (float(v) for v in np.percentile(a, [10, 50, 90]))
    return Distribution(len(a), p50, float(a.mean()), p10, p90, float(a.min()), float(a.max()))


def shift(base: Sequence[float], new: Sequence[float]) -> Shift:
    """The Hodges-Lehmann shift from ``base`` to ``new`` and its 95 % interval (see above)."""
    b, n = distribution(base), distribution(new)
    if not b.count or not n.count:
        return Shift(b, n, None, None, "unknown")
    x = np.asarray(base, dtype=np.float64)
    y = np.asarray(new, dtype=np.float64)
    if len(x) * len(y) > MAX_PAIRS:  # a fixed sample: the same answer every time
        rng = np.random.default_rng(0)
        side = int(math.sqrt(MAX_PAIRS))
        x = rng.choice(x, min(side, len(x)), replace=False) if len(x) > side else x
        y = rng.choice(y, min(side, len(y)), replace=False) if len(y) > side else y
    d = np.sort((y[:, None] - x[None, :]).ravel())
    estimate = float(np.median(d))
    nx, ny = len(x), len(y)
    k = math.floor(nx * ny / 2 - Z_95 * math.sqrt(nx * ny * (nx + ny + 1) / 12))
    if nx < MIN_STEPS or ny < MIN_STEPS or k < 1:
        return Shift(b, n, estimate, None, "unknown")
    lo, hi = float(d[k - 1]), float(d[len(d) - k])
    verdict = "slower" if lo > 0 else "faster" if hi < 0 else "no change"
    xs, ys = np.asarray(base, dtype=np.float64), np.asarray(new, dtype=np.float64)
    mean_noise = Z_95 * math.sqrt(xs.var(ddof=1) / len(xs) + ys.var(ddof=1) / len(ys))
    return Shift(b, n, estimate, (lo, hi), verdict, mean_noise)


def _percent(delta: float | None, base: float | None) -> float | None:
    if delta is None or not base:
        return None
    return 100.0 * delta / base


# Two runs of one program on one machine: their step times were seen up to 2.9 % apart as a
# whole, their op deltas up to 2.3 % of the step (tests/test_diff.py's program, 60 pairs).
BETWEEN_RUNS_PERCENT = 3.0


# -- the diff -----------------------------------------------------------------------------------


def diff(base: RunSummary, new: RunSummary) -> RunDiff:
    """How ``new`` differs from ``base``: step time, breakdown, ops, kernels, memory, hosts."""
    step = shift(base.step_ms, new.step_ms)
    noise = step.noise_ms
    if noise is not None and step.base.median:
        noise = max(noise, BETWEEN_RUNS_PERCENT / 100 * step.base.median)
    # Shares are of the change of the mean step: op times per step are means too, so that
    # the shares of every op add up to the whole change.
    total = (None if step.new.mean is None or step.base.mean is None
             else step.new.mean - step.base.mean)
    breakdown = tuple(_time_change("category", CATEGORY_LABELS.get(c, c), "",
                                   base.breakdown_ms.get(c), new.breakdown_ms.get(c),
                                   noise, total)
                      for c in dict.fromkeys([*CATEGORIES, *base.breakdown_ms,
                                              *new.breakdown_ms]))
    ops = _times("op", base.ops, new.ops, noise, total,
                 (base.ops_truncated, new.ops_truncated))
    kernels = _times("kernel", base.kernels, new.kernels, noise, total,
                     (base.kernels_truncated, new.kernels_truncated))
    if len(base.hosts) == 1 and len(new.hosts) == 1:  # one host each: the same, by any name
        (bh, bt), (nh, nt) = next(iter(base.hosts.items())), next(iter(new.hosts.items()))
        hosts: tuple[HostChange, ...] = (
            HostChange(bh if bh == nh else f"{bh} → {nh}", shift(bt, nt)),)
    else:
        hosts = tuple(HostChange(h, shift(base.hosts[h], new.hosts[h]))
                      for h in base.hosts if h in new.hosts)
    notes = _notes(base, new, step)
    return RunDiff(
        base.run, new.run, step, breakdown, ops, kernels,
        _peaks("memory", base.memory, new.memory), _peaks("program", base.programs,
                                                          new.programs),
        hosts, (base.straggler, new.straggler), (base.input_verdict, new.input_verdict),
        _environment(base, new), notes)


def _time_change(kind: str, name: str, detail: str, b: float | None, n: float | None,
                 noise: float | None, total: float | None, note: str = "",
                 side: str = "") -> Change:
    delta = (n or 0.0) - (b or 0.0)
    status = ("added" if b is None else "removed" if n is None
              else "slower" if delta > 0 else "faster" if delta < 0 else "same")
    beyond = None if noise is None else abs(delta) > noise
    share = 100.0 * delta / total if total else None
    return Change(kind, name, detail, b, n, status, beyond, share, note, side)


def _times(kind: str, base: Iterable[OpTime], new: Iterable[OpTime], noise: float | None,
           total: float | None, truncated: tuple[bool, bool]) -> tuple[Change, ...]:
    """Each op (or kernel) of either run, by the absolute change of its time per step."""
    b = {o.key: o for o in base}
    n = {o.key: o for o in new}
    out = []
    for key in dict.fromkeys([*b, *n]):
        one = b.get(key) or n[key]
        note = ""
        if key not in b and truncated[0]:
            note = "not among the base's top ops: it may have been there, with less time"
        elif key not in n and truncated[1]:
            note = "not among the new run's top ops: it may be there, with less time"
        detail = one.type if kind == "kernel" else f"{one.side} {one.type}"
        out.append(_time_change(kind, one.name, detail,
                                b[key].ms_per_step if key in b else None,
                                n[key].ms_per_step if key in n else None, noise, total, note,
                                one.side))
    out.sort(key=lambda c: (-abs(c.delta), c.name))
    return tuple(out)


def _peaks(kind: str, base: Iterable[MemoryPeak], new: Iterable[MemoryPeak]
           ) -> tuple[Change, ...]:
    base, new = list(base), list(new)
    # Runs of one host each: the same allocator whatever the hosts are called.
    one_host = len({m.host for m in base}) <= 1 and len({m.host for m in new}) <= 1
    b = {m.name if one_host else m.key: m for m in base}
    n = {m.name if one_host else m.key: m for m in new}
    out = []
    for key in dict.fromkeys([*b, *n]):
        one = b.get(key) or n[key]
        bb = float(b[key].peak_bytes) if key in b else None
        nn = float(n[key].peak_bytes) if key in n else None
        delta = (nn or 0.0) - (bb or 0.0)
        status = ("added" if bb is None else "removed" if nn is None
                  else "larger" if delta > 0 else "smaller" if delta < 0 else "same")
        out.append(Change(kind, one.name, one.host, bb, nn, status, delta != 0, None))
    out.sort(key=lambda c: (-abs(c.delta), c.name))
    return tuple(out)


def _environment(base: RunSummary, new: RunSummary) -> dict[str, list[Any]]:
    pairs = {"device_type": (base.device_type, new.device_type),
             "device_count": (base.device_count, new.device_count),
             "device_names": (list(base.device_names), list(new.device_names)),
             "framework": (base.framework, new.framework),
             "hosts": (len(base.hosts), len(new.hosts))}
    for k in sorted({*base.versions, *new.versions}):
        pairs[f"version:{k}"] = (base.versions.get(k), new.versions.get(k))
    return {k: [b, n] for k, (b, n) in pairs.items() if b != n}


def _notes(base: RunSummary, new: RunSummary, step: Shift) -> tuple[str, ...]:
    notes = []
    if step.delta_ms is None:
        side = "base" if not base.step_count else "new run"
        notes.append(f"The {side} has no steps, so step times cannot be compared; mark each "
                     "step with stepscope.Trace('train', step_num=i, _r=1).")
    elif step.ci_ms is None:
        notes.append(f"Too few steps to tell a change from noise ({base.step_count} and "
                     f"{new.step_count}; at least {MIN_STEPS} on each side): profile more "
                     "steps.")
    if base.device_type != new.device_type or base.device_names != new.device_names:
        notes.append(f"The runs used different devices ({base.device_type} "
                     f"{', '.join(base.device_names) or ''} and {new.device_type} "
                     f"{', '.join(new.device_names) or ''}).".replace(" )", ")"))
    if base.steps_found_by != new.steps_found_by:
        notes.append(f"Steps were found differently ({base.steps_found_by} and "
                     f"{new.steps_found_by}): step times may not measure the same thing.")
    return tuple(notes)


# -- the check ----------------------------------------------------------------------------------


_BOUND = re.compile(r"^\s*(?P<metric>step_time|peak_memory|(?P<kind>op|kernel):(?P<name>.+?))"
                    r"\s*=\s*(?P<value>\+?\d+(\.\d+)?)\s*%\s*$")


@dataclass(frozen=True)
class Bound:
    """How much worse one measure may get, in percent of the baseline."""

    metric: str  # step_time, peak_memory, op, kernel
    name: str  # the op or kernel; "" otherwise
    percent: float

    @property
    def label(self) -> str:
        return f"{self.metric}:{self.name}" if self.name else self.metric

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "name": self.name, "max_percent": self.percent}


def parse_bound(text: str) -> Bound:
    """A bound from its text: ``step_time=+5%``, ``peak_memory=+10%``, ``op:NAME=+20%`` or
    ``kernel:NAME=+20%``; a BoundError for anything else."""
    m = _BOUND.match(text) if len(text) <= 1000 else None
    if m is None:
        raise BoundError(f"Cannot read the bound {text[:80]!r}: write step_time=+5%, "
                         "peak_memory=+10%, op:NAME=+20% or kernel:NAME=+20%.")
    value = float(m["value"])
    if not math.isfinite(value) or value > 100_000:
        raise BoundError(f"The bound {text[:80]!r} is out of range: give a percentage from 0 "
                         "to 100000.")
    if m["kind"]:
        return Bound(m["kind"], m["name"], value)
    return Bound(m["metric"], "", value)


@dataclass(frozen=True)
class CheckItem:
    """One measure held to its bound."""

    bound: Bound
    what: str  # e.g. "step time", "peak memory of GPU_0_bfc on host0", "op matmul"
    unit: str  # "ms" or "bytes"
    base: float | None
    new: float | None
    percent: float | None
    ci_percent: tuple[float, float] | None
    beyond_noise: bool | None  # None: cannot tell
    failed: bool
    explanation: str  # one sentence

    def to_dict(self) -> dict[str, Any]:
        return {"bound": self.bound.to_dict(), "what": self.what, "unit": self.unit,
                "base": self.base, "new": self.new, "percent": self.percent,
                "ci_percent": list(self.ci_percent) if self.ci_percent else None,
                "beyond_noise": self.beyond_noise, "failed": self.failed,
                "explanation": self.explanation}


@dataclass(frozen=True)
class CheckResult:
    """Whether ``new`` stays within its bounds against the baseline."""

    items: tuple[CheckItem, ...]
    culprits: tuple[Change, ...]  # the ops and kernels that explain most of a slower step
    diff: RunDiff

    @property
    def passed(self) -> bool:
        return not any(i.failed for i in self.items)

    @property
    def exit_code(self) -> int:
        """0 within bounds, 1 on a regression beyond noise and bound."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "items": [i.to_dict() for i in self.items],
                "culprits": [c.to_dict() for c in self.culprits],
                "diff": self.diff.to_dict()}

    def table(self) -> dict[str, list[Any]]:
        """One row per bound held."""
        return {"bound": [i.bound.label for i in self.items],
                "what": [i.what for i in self.items],
                "max_percent": [i.bound.percent for i in self.items],
                "percent": [i.percent for i in self.items],
                "beyond_noise": [i.beyond_noise for i in self.items],
                "failed": [i.failed for i in self.items]}


def check(new: RunSummary, base: RunSummary, bounds: Sequence[Bound | str] = DEFAULT_BOUNDS
          ) -> CheckResult:
    """Hold ``new`` to ``bounds`` against ``base``: a bound fails only on a regression
    beyond noise and beyond the bound."""
    parsed = [b if isinstance(b, Bound) else parse_bound(b) for b in bounds]
    d = diff(base, new)
    items: list[CheckItem] = []
    for bound in parsed:
        if bound.metric == "step_time":
            items.append(_step_item(bound, d.step))
        elif bound.metric == "peak_memory":
            items.extend(_memory_items(bound, [*d.memory, *d.programs]))
        else:
            items.append(_op_item(bound, d.ops if bound.metric == "op" else d.kernels,
                                  _step_slowdown_ms(d.step)))
    culprits: tuple[Change, ...] = ()
    if d.step.delta_ms is not None and d.step.delta_ms > 0:
        culprits = tuple(c for c in sorted([*d.ops, *d.kernels], key=lambda c: -c.delta)
                         if c.delta > 0)[:5]
    return CheckResult(tuple(items), culprits, d)


def _judge(percent: float | None, beyond: bool | None, limit: float, what: str,
           change: str) -> tuple[bool, str]:
    """Whether a change fails its bound, and one sentence saying why or why not."""
    if percent is None:
        return False, f"{what}: no figure to compare on both sides; not held to the bound."
    if percent <= limit:
        word = "within" if percent > 0 else "no regression against"
        return False, f"{what}: {change}, {word} the bound of +{limit:g}%."
    if beyond is None:
        return False, (f"{what}: {change}, beyond the bound of +{limit:g}%, but too few "
                       "steps to tell it from noise; not failed.")
    if not beyond:
        return False, (f"{what}: {change}, beyond the bound of +{limit:g}% but inside the "
                       "noise; not failed.")
    return True, f"{what}: {change}, beyond noise and beyond the bound of +{limit:g}%."


def _step_item(bound: Bound, s: Shift) -> CheckItem:
    pct, ci = s.percent, s.ci_percent
    change = "no figure"
    if pct is not None:
        change = f"{pct:+.1f}%"
        if ci is not None:
            change += f" (95% CI {ci[0]:+.1f}% to {ci[1]:+.1f}%)"
    beyond = None if s.ci_ms is None else s.ci_ms[0] > 0
    failed, text = _judge(pct, beyond, bound.percent, "step time", change)
    fastest = s.fastest_percent
    if failed and fastest is not None and fastest <= bound.percent:
        # Other work on the machine delays steps, it never speeds them up: a change of the
        # code slows the fastest steps too, a busier machine mostly the others.
        failed = False
        text = (f"step time: {change}, beyond noise and the bound of +{bound.percent:g}%, but "
                f"the fastest tenth of the steps changed by only {fastest:+.1f}%: the "
                "machine was busier, not the program slower; not failed.")
    return CheckItem(bound, "step time", "ms", s.base.median, s.new.median, pct, ci, beyond,
                     failed, text)


def _memory_items(bound: Bound, changes: list[Change]) -> list[CheckItem]:
    out = []
    for c in changes:
        what = (f"peak memory of {c.name}" + (f" on {c.detail}" if c.detail else "")
                if c.kind == "memory" else f"peak heap of XLA program {c.name}")
        pct = c.percent
        change = "no figure" if pct is None else f"{pct:+.1f}%"
        if c.base is None or c.new is None:
            failed, text = False, (f"{what}: only in the {'new' if c.base is None else 'base'} "
                                   "run; not held to the bound.")
        else:
            failed, text = _judge(pct, c.beyond_noise, bound.percent, what, change)
        out.append(CheckItem(bound, what, "bytes", c.base, c.new, pct, None, c.beyond_noise,
                             failed, text))
    if not out:
        out.append(CheckItem(bound, "peak memory", "bytes", None, None, None, None, None,
                             False, "peak memory: neither run recorded memory; not held to "
                             "the bound."))
    return out


def _step_slowdown_ms(s: Shift) -> float:
    """How much slower the step surely got (ms, the low end of the shift's interval), when
    it got slower beyond noise with its fastest steps too (not a busier machine); else 0:
    the evidence an op's regression needs (see ``_op_item``)."""
    fastest = s.fastest_percent
    if s.ci_ms is None or s.ci_ms[0] <= 0 or (fastest is not None and fastest <= 0):
        return 0.0
    return s.ci_ms[0]


def _op_item(bound: Bound, changes: tuple[Change, ...], step_slowdown_ms: float
             ) -> CheckItem:
    mine = [c for c in changes if c.name == bound.name]
    if not mine:
        known = ", ".join(c.name for c in sorted(changes, key=lambda c: -(c.new or 0))[:5])
        raise BoundError(f"No {bound.metric} named {bound.name[:80]!r} in either run"
                         + (f" (those with most time: {known})" if known else "")
                         + "; name one that the runs have.")
    # One name on both sides (host and device): the side that changed most.
    c = max(mine, key=lambda c: abs(c.delta))
    what = f"{bound.metric} {c.name}"
    pct = c.percent
    change = ("no figure" if pct is None else
              f"{pct:+.1f}% ({c.delta:+.3f} ms per step)")
    if c.base is None:
        failed, text = False, f"{what}: only in the new run ({c.new:.3f} ms per step); " \
                              "not held to the bound."
    elif (c.beyond_noise and pct is not None and pct > bound.percent
          and step_slowdown_ms < c.delta / 2):
        # An op's time per step is a mean without a spread of its own: its regression is
        # confirmed by the step getting surely slower by much of it too. Without that
        # (another op got faster, or the machine was busier), it is reported, not failed.
        failed, text = False, (
            f"{what}: {change}, beyond the bound of +{bound.percent:g}%, but the step did "
            "not get slower beyond noise by half as much"
            + (f" (at least {step_slowdown_ms:+.3f} ms)" if step_slowdown_ms else "")
            + "; not failed.")
    else:
        failed, text = _judge(pct, c.beyond_noise, bound.percent, what, change)
    return CheckItem(bound, what, "ms", c.base, c.new, pct, None, c.beyond_noise, failed, text)
