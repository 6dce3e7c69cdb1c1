"""The ``stepscope`` command line: the parser of every command and ``main``.

Each command lives in a module of its own (``_COMMAND_MODULES``), with ``add_parser(sub)``;
``common`` holds what they share (opening a run, printing a tool's answer)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from stepscope.errors import StepscopeError, StepscopeWarning
from stepscope.model.locations import redact
from stepscope.version import __version__

DESCRIPTION = ("stepscope: a profiler for machine-learning programs in Python. Profile a "
               "program with `stepscope profile -- python train.py`, read a profile in the "
               "terminal (report, ops, kernels, input, memory, pod, xla, ...) or in the web "
               "UI (serve). PATH is a logdir (its newest run; --run picks another), a run "
               "directory or one profile file.")


class _Formatter(argparse.HelpFormatter):
    """Help that shows each option's default where its text does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (action.option_strings and "default" not in text.lower()
                and default not in (None, False, [], argparse.SUPPRESS)
                and not isinstance(default, bool)):
            text += " (default %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the choice that was probably meant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse's signature: it never returns
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found is not None:
            import difflib

            choices = re.findall(r"'([^']*)'", found.group(2))
            close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean {close[0]!r}?"
        super().error(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every subcommand; with ``command`` (a command's name), of the
    commands its module defines only, where it names one."""
    parser = _Parser(prog="stepscope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"stepscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    modules = [_COMMANDS[command]] if command in _COMMANDS else dict.fromkeys(_COMMANDS.values())
    for module in modules:
        importlib.import_module(module).add_parser(sub)
    for name, parser_of in sub.choices.items():
        if name != "serve" and any(a.dest == "path" for a in parser_of._actions):
            parser_of.add_argument("--run", metavar="NAME",
                                 help="when PATH is a logdir with several runs, this one "
                                 "(`stepscope runs PATH` lists them; default: the newest)")
    return parser


def _pick_run(args: argparse.Namespace) -> None:
    """Point ``args.path`` at the run ``--run`` names under it."""
    import difflib

    from stepscope.model.logdir import list_runs

    runs = list_runs(args.path)
    if args.run in runs:
        args.path = str(runs[args.run])
        return
    if not runs:
        raise StepscopeError(f"{args.path} holds no runs; pass a logdir with profiles.")
    close = difflib.get_close_matches(args.run, list(runs), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise StepscopeError(f"No run {args.run!r} in {args.path}; {hint}"
                         f"`stepscope runs {args.path}` lists its {len(runs)} runs.")


# Every command, by the module that defines it, in the order the help lists them. Each module
# has ``add_parser(sub)``, which adds its commands' subparsers and sets ``func`` (a function of
# the parsed arguments returning the exit code). A command line that names a command builds
# the parser of that module's commands only: what the others import (the web server, the
# capture options) is no part of the command's start-up.
_COMMANDS: dict[str, str] = {
    "demo": "stepscope.cli.serve", "serve": "stepscope.cli.serve",
    **dict.fromkeys(("report", "ops", "kernels", "input", "pod", "memory", "xla",
                     "memory-viewer", "xla-graph", "tool", "tools"),
                    "stepscope.cli.tool_commands"),
    "export": "stepscope.cli.files", "timeline": "stepscope.cli.files",
    "capture": "stepscope.remote.cli",
    "profile": "stepscope.cli.profile",
    "runs": "stepscope.cli.runs",
    "doctor": "stepscope.cli.doctor",
    "summary": "stepscope.cli.summary",
    "diff": "stepscope.cli.diff",
    "check": "stepscope.cli.check",
    "mcp": "stepscope.cli.mcp",
    "gpu": "stepscope.cli.gpu",
    "python": "stepscope.cli.python",
}


# Commands that run the user's program in this process: NumPy's settings stay its own.
_RUNS_USER_CODE = frozenset({"profile"})


def _small_pages() -> None:
    """Have NumPy leave its large arrays on the system's normal pages (no
    ``madvise(MADV_HUGEPAGE)``), unless the user set ``NUMPY_MADVISE_HUGEPAGE``: stepscope's
    commands make columns of hundreds of MB once each, and where memory is lent lazily (a
    VM handing freed memory back to its host) a huge page costs more to fault in than its 512
    small ones: a fresh GB 3.1 s against 0.85-1.4 s, and the trace viewer's overview of a
    1 GB profile 3.8 s against 1.6 s. Set before NumPy is imported (the processes this one
    starts inherit it), or through NumPy's switch where it is already."""
    setting = os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    numpy = sys.modules.get("numpy")
    if numpy is not None and setting == "0":
        with contextlib.suppress(AttributeError):  # another NumPy: its default stands
            numpy._core.multiarray._set_madvise_hugepage(False)


def _show_warning(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: Any = None, line: str | None = None) -> None:
    """stepscope's own warnings as one line each; others as Python shows them."""
    if issubclass(category, StepscopeWarning):
        print(f"stepscope: warning: {message}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run one subcommand; user errors exit 2 with one line, no traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    if not argv or argv[0] not in _RUNS_USER_CODE:
        _small_pages()
    warnings.showwarning = _show_warning
    try:
        if getattr(args, "run", None) is not None and getattr(args, "path", None) is not None:
            _pick_run(args)
        return int(args.func(args))
    except StepscopeError as err:
        print(f"stepscope: error: {redact(str(err))}", file=sys.stderr)  # no credentials
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `stepscope ops logs | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
