"""``stepscope summary RUN -o summary.json``: a run's summary, the baseline a repository keeps;
and how ``diff`` and ``check`` read either side (a run, or a kept summary)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from stepscope.errors import StepscopeError

MAX_SUMMARY_BYTES = 64 << 20  # a summary is small: a larger .json is not one
_SOFTWARE = re.compile(r"^[\w.+-]{1,64}=[\w.+:-]{1,64}$")


def add_parser(sub: Any) -> None:
    """Register ``summary`` on ``sub`` (from ``add_subparsers``)."""
    p = sub.add_parser("summary", help="a run's small, versioned summary (summary.json): the "
                       "baseline that `stepscope diff` and `stepscope check` compare with",
                       description="Summarise a run: per-step times (per host), the step "
                       "breakdown, top ops and kernels per step, memory peaks, device and "
                       "framework. The JSON schema is in docs/diff-and-ci.md.")
    p.add_argument("path", metavar="RUN",
                   help="a logdir (its newest run), a run directory or one file")
    p.add_argument("-o", "--output", metavar="FILE", default="-",
                   help="where to write the summary (default: standard output)")
    p.add_argument("--software", metavar="NAME=VERSION", action="append", default=[],
                   help="a version to record (e.g. torch=2.4.1), as the profile does not "
                   "hold them; repeat for several")
    p.add_argument("--no-cache", action="store_true",
                   help="read the profile afresh, bypassing the on-disk cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stepscope.views.report import write_text

    versions = {}
    for item in args.software:
        if not _SOFTWARE.match(item):
            raise StepscopeError(f"Cannot read --software {item[:80]!r}: write NAME=VERSION, "
                                 "e.g. torch=2.4.1.")
        name, version = item.split("=", 1)
        versions[name] = version
    summary = summarize_run(args.path, use_cache=not args.no_cache, versions=versions)
    text = json.dumps(summary.to_dict(), indent=1, allow_nan=False) + "\n"
    write_text(args.output, text)
    return 0


def summarize_run(path: str, *, use_cache: bool = True,
                  versions: dict[str, str] | None = None) -> Any:
    """The ``RunSummary`` of the run ``path`` names (``Run.summary``), with ``versions``."""
    from dataclasses import replace

    from stepscope.run import Run
    from stepscope.run.tools import run_summary

    summary = run_summary(Run.open(path, cache=use_cache))
    return replace(summary, versions=dict(versions)) if versions else summary


def is_summary_file(path: Path) -> bool:
    """Whether ``path`` is (meant as) a summary.json rather than a profile."""
    if not path.name.endswith(".json") or not path.is_file():
        return False
    if path.name == "summary.json" or path.name.endswith(".summary.json"):
        return True
    with path.open("rb") as f:
        head = f.read(4096)
    return b'"stepscope.run_summary"' in head


def load_side(path: str, *, use_cache: bool = True) -> Any:
    """The ``RunSummary`` of one side of a diff: a summary.json, or a run to summarise."""
    from stepscope.analysis.tools.run_summary import RunSummary, SummaryError

    local = Path(path)
    if is_summary_file(local):
        if local.stat().st_size > MAX_SUMMARY_BYTES:
            raise SummaryError(f"{path} is larger than a run summary can be "
                               f"({MAX_SUMMARY_BYTES >> 20} MiB); give a summary.json "
                               "written by `stepscope summary`.")
        try:
            data = json.loads(local.read_bytes())
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise SummaryError(f"{path} is not valid JSON ({type(err).__name__}); give a "
                               "summary.json written by `stepscope summary`.") from err
        except OSError as err:
            raise SummaryError(f"Cannot read {path} ({err.strerror}).") from err
        try:
            return RunSummary.from_dict(data)
        except SummaryError as err:
            raise SummaryError(f"{path}: {err}") from err
    return summarize_run(path, use_cache=use_cache)
