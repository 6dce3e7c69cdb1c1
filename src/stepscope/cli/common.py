"""What the command line's commands share: the console, the tool answers a command prints
(``Answers``: kept ones without opening the run, else from the run opened with a progress
bar), printing a tool's answer, and the arguments several commands take."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stepscope.errors import StepscopeError

if TYPE_CHECKING:
    from stepscope.run import Run, ToolResult
    from stepscope.run.kept import KeptRun


def console(stderr: bool = False) -> Any:
    """A rich console (on standard error with ``stderr``), 160 columns wide when piped."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped: no terminal width to fit, keep names whole
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def open_run(args: argparse.Namespace, *, notes: bool = True) -> Run:
    """The run ``args.path`` names, its model read with a progress bar; checks ``args.host``,
    warns of hosts that could not be read and (``notes``) names the files left out."""
    from stepscope.run import Run
    from stepscope.views import report

    with report.loading_progress(console(stderr=True)) as progress:
        run = Run.open(args.path, engine=getattr(args, "engine", "auto"),
                       cache=not getattr(args, "no_cache", False), progress=progress)
        run.model  # noqa: B018  (read here, under the progress bar)
    run.check_host(getattr(args, "host", None))
    for name, why in run.failed.items():
        print(f"stepscope: warning: host {name} could not be read: {why}", file=sys.stderr)
    if notes:
        note_skipped(args.path)
    return run


class Answers:
    """The tool answers a command prints for the run ``args.path`` names.

    While every answer asked for is kept in the on-disk cache for the run's files as they are
    (``run.kept``), it comes from there: the run is not opened, and neither NumPy nor the run
    model nor a reader is imported (the command line's fixed cost). At the first miss the run
    is opened (``open_run``) and answers from then on, exactly as it would have throughout:
    a kept answer is the one the opened run reads back. ``--no-cache`` opens the run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._run: Run | None = None
        self._kept: KeptRun | None = None
        self._hits = 0

    def tool(self, name: str, host: str | None = None, **params: object) -> ToolResult:
        """Tool ``name``'s answer, as ``Run.tool`` gives it."""
        from stepscope.run.kept import KeptRun
        from stepscope.run.tools import TOOLS

        keeps = name in TOOLS and TOOLS[name].keep
        if self._run is None and keeps and not getattr(self.args, "no_cache", False):
            self._kept = self._kept or KeptRun.find(self.args.path)
            hit = self._kept.tool(name, host, **params) if self._kept else None
            if hit is not None:
                if not self._hits:
                    note_skipped(self.args.path)  # as open_run does
                self._hits += 1
                return hit
        return self.run.tool(name, host, **params)

    @property
    def run(self) -> Run:
        """The run, opened (with its progress bar) on first use."""
        if self._run is None:
            self._run = open_run(self.args, notes=not self._hits)
            self._kept = None
        return self._run

    @property
    def hosts(self) -> list[str]:
        """The run's hosts that could be read (all of them, where answers were kept: an
        answer is kept only while every host could be read)."""
        if self._run is None and self._kept is not None and self._hits:
            return self._kept.hosts
        return self.run.hosts


def print_json(result: ToolResult) -> None:
    """Print ``result``'s JSON (indented), written as it is made: not held whole."""
    result.write_json(sys.stdout, indent=2)
    print()


def emit(args: argparse.Namespace, result: ToolResult, what: str,
          render: Callable[[], None]) -> None:
    """Write ``--csv``, print ``--json``, or render the result (the default)."""
    if getattr(args, "csv", None):
        from stepscope.views import report

        report.write_text(args.csv, result.to_csv())
        rows = len(next(iter(result.table().values()), []))
        print(f"wrote {rows} {what} to {args.csv}", file=sys.stderr)
    if args.json:
        print_json(result)
    elif not getattr(args, "csv", None):
        render()


def note_skipped(path: str) -> None:
    """Name the files at the top of a logdir that were left out as not profiles."""
    from stepscope.model.logdir import skipped_files

    for skipped in skipped_files(path):
        print(f"stepscope: note: skipped {skipped} (beside the runs, not a profile)",
              file=sys.stderr)


def add_listen_args(parser: argparse.ArgumentParser) -> None:
    """--host, --port and --allow-host of a command that serves the web UI."""
    from stepscope.web.http_server import DEFAULT_HOST, DEFAULT_PORT

    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}, this machine "
                        "only; 0.0.0.0 exposes the profiles to the network)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests addressed to this host name (repeatable; "
                        "requests naming any other host than 127.0.0.1, localhost, [::1] and "
                        "--host are refused, against DNS rebinding)")


def add_path_arg(parser: argparse.ArgumentParser) -> None:
    """The profile a command reads."""
    parser.add_argument("path", help="a logdir (its newest run), a run directory or one file")


def add_no_cache_arg(parser: argparse.ArgumentParser) -> None:
    """``--no-cache``: parse the profile afresh."""
    parser.add_argument("--no-cache", action="store_true",
                        help="parse the profile again instead of using the on-disk cache")


def add_limit_arg(parser: argparse.ArgumentParser, default: int, what: str = "rows") -> None:
    """``--limit``: how many of ``what`` a terminal table shows."""
    parser.add_argument("--limit", type=int, default=default,
                        help=f"{what} shown in the terminal (0: all; default {default})")


def add_engine_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="auto", type=engine_choice, metavar="ENGINE",
                        help="where each host's file is read and analysed: local (this "
                        "process), pool (a process per core), ray or ray://ADDRESS (a Ray "
                        "cluster); default auto: pool for several large hosts, else local")


def engine_choice(value: str) -> str:
    if value == "auto":  # the default: nothing to check, no module to import
        return value
    from stepscope.run.engines import check_engine

    try:
        return check_engine(value)
    except StepscopeError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
