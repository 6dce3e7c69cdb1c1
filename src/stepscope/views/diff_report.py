"""Two runs compared, as people and CI systems read it: terminal lines (at most 100 columns),
Markdown (a GitHub Actions step summary) and JUnit XML (``stepscope diff`` and ``check``)."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from stepscope.analysis.tools.run_diff import Change, CheckResult, RunDiff, Shift

WIDTH = 100
TOP = 10  # ops and kernels shown


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns (an ellipsis shows the cut)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.1f}%"


def _bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= size:
            return f"{v / size:.2f} {unit}"
    return f"{v:.0f} B"


def _noise(c: Change) -> str:
    return "?" if c.beyond_noise is None else "" if c.beyond_noise else "noise"


def step_sentence(s: Shift) -> str:
    """The step time change in one sentence."""
    if s.delta_ms is None:
        return "Step time: no steps on one side, nothing to compare."
    b, n = s.base.median, s.new.median
    head = f"Step time: median {_ms(b)} → {_ms(n)} ms, change {s.delta_ms:+.3f} ms"
    if s.percent is not None:
        head += f" ({s.percent:+.1f}%)"
    if s.ci_ms is None or s.ci_percent is None:
        return head + "; too few steps to tell it from noise."
    lo, hi = s.ci_percent
    verdict = {"slower": "SLOWER", "faster": "FASTER",
               "no change": "no change beyond noise"}[s.verdict]
    return head + f", 95% CI {lo:+.1f}% to {hi:+.1f}%: {verdict}."


def _wrap(text: str, indent: str = "") -> list[str]:
    """``text`` in lines of at most WIDTH columns."""
    lines: list[str] = []
    line = indent
    for word in text.split(" "):
        if len(line) + len(word) + 1 > WIDTH and line.strip():
            lines.append(line.rstrip())
            line = indent + "  "
        line += word + " "
    lines.append(line.rstrip())
    return [_fit(x, WIDTH) for x in lines]


def _times_table(title: str, changes: tuple[Change, ...], top: int) -> list[str]:
    shown = [c for c in changes if c.delta != 0][:top]
    if not shown:
        return [f"{title}: no change."]
    lines = [f"{title} (ms per step, by how much of the change each explains):",
             f"  {'name':<40} {'base':>9} {'new':>9} {'delta':>9} {'%':>8} {'share':>7}"]
    for c in shown:
        share = "" if c.share is None else f"{c.share:.0f}%"
        status = c.status if c.status in ("added", "removed") else _noise(c)
        lines.append(_fit(f"  {_fit(c.name, 40):<40} {_ms(c.base):>9} {_ms(c.new):>9} "
                          f"{c.delta:>+9.3f} {_pct(c.percent):>8} {share:>7} {status}",
                          WIDTH).rstrip())
    rest = len([c for c in changes if c.delta != 0]) - len(shown)
    if rest > 0:
        lines.append(f"  … and {rest} more (--json for all)")
    return lines


def diff_lines(d: RunDiff, top: int = TOP) -> list[str]:
    """``stepscope diff``'s terminal report."""
    lines = _wrap(f"Base {d.base_run} ({d.step.base.count} steps) → new {d.new_run} "
                  f"({d.step.new.count} steps)")
    lines += _wrap(step_sentence(d.step))
    for which, dist in (("base", d.step.base), ("new", d.step.new)):
        if dist.count:
            lines.append(f"  {which:<5} p10 {_ms(dist.p10)}  median {_ms(dist.median)}  "
                         f"p90 {_ms(dist.p90)}  min {_ms(dist.min)}  max {_ms(dist.max)} ms")
    for note in d.notes:
        lines += _wrap("Note: " + note)
    lines.append("")
    lines.append("Step breakdown (ms per step):")
    if not any(c.base or c.new for c in d.breakdown):
        lines.append("  none: no steps were found.")
    for c in d.breakdown:
        if c.base or c.new:
            lines.append(f"  {c.name:<20} {_ms(c.base):>9} → {_ms(c.new):>9} "
                         f"{c.delta:>+9.3f} {_pct(c.percent):>8} {_noise(c)}")
    if d.input_verdict[0] != d.input_verdict[1]:
        lines.append(f"  input-bound: {d.input_verdict[0]} → {d.input_verdict[1]}")
    lines.append("")
    lines += _times_table("Ops", d.ops, top)
    if d.kernels:
        lines.append("")
        lines += _times_table("Kernels", d.kernels, top)
    peaks = [*d.memory, *d.programs]
    if peaks:
        lines.append("")
        lines.append("Peak memory:")
        for c in peaks:
            where = f"{c.name} ({c.detail})" if c.detail else c.name
            lines.append(_fit(f"  {_fit(where, 50):<50} {_bytes(c.base):>11} → "
                              f"{_bytes(c.new):>11} {_pct(c.percent):>8}", WIDTH).rstrip())
    if len(d.hosts) > 1 or any(d.straggler):
        lines.append("")
        lines.append("Hosts (median step time, ms):")
        for h in d.hosts:
            s = h.shift
            ci = "" if s.ci_percent is None else \
                f"  CI {s.ci_percent[0]:+.1f}% to {s.ci_percent[1]:+.1f}%"
            lines.append(_fit(f"  {_fit(h.host, 40):<40} {_ms(s.base.median):>9} → "
                              f"{_ms(s.new.median):>9} {_pct(s.percent):>8}{ci}", WIDTH))
        lines.append(_fit(f"  most often the straggler: {d.straggler[0] or 'none'} → "
                          f"{d.straggler[1] or 'none'}", WIDTH))
    if d.environment:
        lines.append("")
        lines.append("Environment that differs:")
        for k, (b, n) in d.environment.items():
            lines.append(_fit(f"  {k}: {b} → {n}", WIDTH))
    return lines


def check_lines(r: CheckResult) -> list[str]:
    """``stepscope check``'s terminal report."""
    lines = [f"stepscope check: {'PASSED' if r.passed else 'FAILED'} "
             f"(base {r.diff.base_run} → new {r.diff.new_run})"]
    lines += _wrap(step_sentence(r.diff.step))
    for item in r.items:
        mark = "FAIL" if item.failed else "ok  "
        lines += _wrap(f"{mark} {item.explanation}")
    if r.culprits:
        lines.append("Most of the slower step is in:")
        for c in r.culprits:
            share = "" if c.share is None else f", {c.share:.0f}% of the change"
            lines.append(_fit(f"  {c.kind} {c.name}: {c.delta:+.3f} ms per step{share}",
                              WIDTH))
    for note in r.diff.notes:
        lines += _wrap("Note: " + note)
    return lines


def _md(text: str) -> str:
    """Text for a Markdown table cell: no pipes or newlines, HTML escaped."""
    return escape(text).replace("|", "\\|").replace("\n", " ")


def check_markdown(r: CheckResult) -> str:
    """The check as Markdown (a GitHub Actions step summary reads it)."""
    out = [f"## stepscope check: {'✅ passed' if r.passed else '❌ failed'}", "",
           _md(step_sentence(r.diff.step)), "",
           "| | bound | measure | base | new | change |", "|---|---|---|---|---|---|"]
    for i in r.items:
        fmt = _bytes if i.unit == "bytes" else _ms
        change = _pct(i.percent) or "-"
        if i.beyond_noise is False and i.percent and i.percent > 0:
            change += " (inside the noise)"
        out.append(f"| {'❌' if i.failed else '✅'} | +{i.bound.percent:g}% | {_md(i.what)} | "
                   f"{fmt(i.base)} | {fmt(i.new)} | {change} |")
    if r.culprits:
        out += ["", "Most of the slower step is in:", ""]
        out += [f"- {c.kind} `{_md(c.name)}`: {c.delta:+.3f} ms per step"
                + ("" if c.share is None else f" ({c.share:.0f}% of the change)")
                for c in r.culprits]
    for note in r.diff.notes:
        out += ["", f"> {_md(note)}"]
    return "\n".join(out) + "\n"


def check_junit(r: CheckResult) -> str:
    """The check as JUnit XML: one test case per bound held."""
    failures = sum(i.failed for i in r.items)
    cases = []
    for i in r.items:
        name = quoteattr(f"{i.bound.label}: {i.what}")
        body = (f"<failure message={quoteattr(i.explanation)}>{escape(i.explanation)}"
                "</failure>" if i.failed else f"<system-out>{escape(i.explanation)}</system-out>")
        cases.append(f'    <testcase classname="stepscope.check" name={name}>{body}</testcase>')
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites><testsuite name="stepscope check" tests="{len(r.items)}" '
            f'failures="{failures}" errors="0">\n' + "\n".join(cases)
            + "\n</testsuite></testsuites>\n")
