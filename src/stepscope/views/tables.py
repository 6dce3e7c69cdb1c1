"""Terminal tables that fit a 100-column terminal: numbers whole, names shortened and folded,
and a sentence where a table would have no rows.

Every ``stepscope`` table is made here, so that they all look alike: a rule under the header,
two spaces between columns, no frame. A column is one of three kinds:

- ``num``: right-aligned, never wrapped or cut (its width is its widest cell);
- ``text``: a short label (``Host``, ``yes``, ``384×1×1``), never wrapped;
- ``name``: an op, kernel or host name, the only kind that gives way: it folds over lines
  when the terminal is narrow. Templated C++ names are shortened first (``short_name``);
  the full name is in ``--json`` and ``--csv``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

Kind = Literal["num", "text", "name"]
Column = tuple[str, Kind]
Cell = str | Text

# The longest a shortened name gets, in characters: a 100-column table keeps ~40 for names.
NAME_LIMIT = 60


def _skip_group(name: str, at: int, opening: str, closing: str) -> int:
    """The index just past the group that opens at ``name[at]`` (-1 if it never closes)."""
    depth = 0
    for i in range(at, len(name)):
        if name[i] == opening:
            depth += 1
        elif name[i] == closing:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def short_name(name: str, limit: int = NAME_LIMIT) -> str:
    """A C++ (kernel) name a person can read in a table: the return type dropped, template
    arguments as ``<…>``, the argument list dropped, and, if still longer than ``limit``,
    its middle left out (``…``). Other names are only cut to ``limit``."""
    text = name.removeprefix("void ")
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "<" and not text[:i].endswith("operator"):
            end = _skip_group(text, i, "<", ">")
            if end < 0:  # unbalanced (operator<, a cut name): leave the name as it is
                out, i = [text], len(text)
                break
            out.append("<…>")
            i = end
        elif c == "(" and not text.startswith("(anonymous namespace)", i) and i > 0:
            end = _skip_group(text, i, "(", ")")
            if end < 0:
                out, i = [text], len(text)
                break
            i = end  # an argument list: the kernel's name says enough
        else:
            out.append(c)
            i += 1
    short = "".join(out).strip() or name
    if len(short) <= limit:
        return short
    head = limit // 3
    return short[:head] + "…" + short[len(short) - (limit - head - 1):]


def _cell(value: Cell) -> Text:
    # Cells are text, never markup: an op may be called "[bold]".
    return value if isinstance(value, Text) else Text(value)


def fitted_table(title: str, columns: Sequence[Column],
                 rows: Iterable[Sequence[Cell]]) -> Table:
    """A table of ``columns`` (header, kind) holding ``rows`` of cells (see the module)."""
    materialised = [[_cell(c) for c in row] for row in rows]
    table = Table(title=Text(title, style="table.title"), title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for index, (header, kind) in enumerate(columns):
        widest = max((line.cell_len for row in materialised for line in row[index].split()),
                     default=0)
        if kind == "name":
            table.add_column(header, justify="left", overflow="fold")
        else:
            table.add_column(header, justify="right" if kind == "num" else "left",
                             no_wrap=True, min_width=max(widest, len(header)))
    for row in materialised:
        table.add_row(*row)
    return table


def print_table(console: Console, title: str, columns: Sequence[Column],
                rows: Sequence[Sequence[Cell]], empty: str) -> None:
    """Print ``fitted_table(title, columns, rows)``, or the sentence ``empty`` when there are
    no rows (an empty table says nothing a reader can use)."""
    out: RenderableType = (fitted_table(title, columns, rows) if rows
                           else Text(empty, style="yellow"))
    console.print(out)
