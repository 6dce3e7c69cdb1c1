"""MkDocs hook: the command-line reference page, from ``stepscope``'s own argument parser."""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- cli-reference -->"


def cli_reference() -> str:
    """Markdown with the help of ``stepscope`` and of each of its commands."""
    os.environ["COLUMNS"] = "100"  # argparse wraps help at the terminal's width
    from stepscope.cli import build_parser

    parser = build_parser()
    parts = ["## stepscope", "", "```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        parts += [f"## stepscope {name}", "", "```text", command.format_help().rstrip(), "```",
                  ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Put the reference where the page holds the marker."""
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
