"""Tables for people, read in a terminal, an 80-column window, `less`, a CI log or a pipe: nothing is cut.

One layout for every command's table (`check`, `status`, `apply`, `history`, `upstream`, `bench`):

* columns separated by two spaces under a header line, no box drawing: the same text in a terminal,
  a log and a pipe, and a row splits on runs of two or more spaces (`awk -F '  +'`);
* names and numbers are never wrapped, folded or cut; free text (an error, a change, a list of
  releases) is the only thing that wraps, at word boundaries;
* the width is `$COLUMNS` when set, else the terminal's when stdout is one; in a pipe without
  `$COLUMNS` there is no width: every row is one line, however long (`grep` sees whole rows);
* when a row does not fit the width, its free text first wraps inside its column (while that column
  keeps at least `MIN_TEXT` characters), else moves below the row, indented and wrapped; when the
  names and numbers alone do not fit, the first column (the lane) becomes a heading above its rows.
  A name or number wider than the whole width still prints whole: the line runs past the edge.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Literal

from rich.console import Console
from rich.text import Text

Kind = Literal["key", "num", "word", "text"]
"""key: the row's name (may become a heading); num: right-aligned figure; word: a short value;
text: free text, the only kind that wraps."""

Cell = str | Text
"""A plain string is shown as it is (never read as markup); a Text carries its own styles."""

GAP = 2
MIN_TEXT = 30
"""Narrower than this a free-text column reads as the issue's '6-letter pieces': it moves below the row."""
BELOW_INDENT = 4


@dataclass(frozen=True)
class Column:
    header: str
    kind: Kind = "word"


def output_width(stream: IO[str] | None = None) -> int | None:
    """$COLUMNS when set; else the terminal's width when `stream` (stdout) is one; else None (no limit)."""
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    out = stream if stream is not None else sys.stdout
    try:
        if out.isatty():
            return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def _text(cell: Cell) -> Text:
    return cell.copy() if isinstance(cell, Text) else Text(cell)


def _one_line(text: Text) -> Text:
    """A name, number or short value on one line whatever it holds."""
    return Text(" ").join(text.split("\n")) if "\n" in text.plain else text


def _lines(text: Text) -> list[Text]:
    return list(text.split("\n")) or [Text("")]


def _width(text: Text) -> int:
    return max((line.cell_len for line in _lines(text)), default=0)


def _wrap(text: Text, width: int, console: Console) -> list[Text]:
    """Word-wrapped lines of free text; a word longer than the width is folded, never cut."""
    out: list[Text] = []
    for para in _lines(text):
        wrapped = list(para.wrap(console, max(width, 1), overflow="fold", no_wrap=False)) or [Text("")]
        for line in wrapped:
            line.rstrip()
        out.extend(wrapped)
    return out


def _pad(text: Text, width: int, right: bool) -> Text:
    space = Text(" " * max(width - text.cell_len, 0))
    return Text.assemble(space, text) if right else Text.assemble(text, space)


def _row_line(cells: list[Text], widths: list[int], rights: list[bool]) -> Text:
    parts = [_pad(c, w, r) for c, w, r in zip(cells, widths, rights, strict=True)]
    line = Text(" " * GAP).join(parts)
    line.rstrip()
    return line


def render(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    width: int | None,
    *,
    styles: Sequence[str] | None = None,
) -> list[Text]:
    """The lines of a table laid out as the module says; `styles` colours whole rows."""
    console = Console(width=max(width or 0, 1) if width else 10_000, color_system=None)
    header = [Text(c.header, style="bold") for c in columns]
    cells = [
        [_text(cell) if col.kind == "text" else _one_line(_text(cell)) for col, cell in zip(columns, row, strict=True)]
        for row in rows
    ]
    for i, row in enumerate(cells):
        style = styles[i] if styles else ""
        for cell in row:
            if style:
                cell.stylize(style)
    if width is None:
        # A pipe: one line per row, multi-line text joined.
        cells = [
            [Text("; ").join(_lines(c)) if col.kind == "text" else c for col, c in zip(columns, row, strict=True)]
            for row in cells
        ]
    natural = [max([_width(header[i])] + [_width(row[i]) for row in cells]) for i in range(len(columns))]
    text_cols = [i for i, c in enumerate(columns) if c.kind == "text"]
    fixed_cols = [i for i, c in enumerate(columns) if c.kind != "text"]

    def span(idx: Sequence[int], widths: Sequence[int]) -> int:
        return sum(widths[i] for i in idx) + GAP * max(len(idx) - 1, 0)

    all_cols = list(range(len(columns)))
    if width is None or span(all_cols, natural) <= width:
        return _inline(columns, header, cells, natural, console)
    room = width - span(fixed_cols, natural) - GAP * len(text_cols)
    if text_cols and room >= MIN_TEXT * len(text_cols):
        # Water-filling: a text column narrower than its share keeps its width; the rest share what is left.
        widths = list(natural)
        left = room
        by_need = sorted(text_cols, key=lambda i: natural[i])
        for k, i in enumerate(by_need):
            widths[i] = min(natural[i], max(MIN_TEXT, left // (len(by_need) - k)))
            left -= widths[i]
        return _inline(columns, header, cells, widths, console)
    heading = columns[0].kind == "key" and span(fixed_cols, natural) > width
    return _below(columns, header, cells, natural, width, heading, console)


def _inline(
    columns: Sequence[Column], header: list[Text], cells: list[list[Text]], widths: list[int], console: Console
) -> list[Text]:
    rights = [c.kind == "num" for c in columns]
    out = [_row_line(header, widths, rights)]
    for row in cells:
        stacks = [
            _wrap(c, widths[i], console) if columns[i].kind == "text" and c.cell_len > widths[i] else _lines(c)
            for i, c in enumerate(row)
        ]
        out.extend(
            _row_line([s[n] if n < len(s) else Text("") for s in stacks], widths, rights)
            for n in range(max(len(s) for s in stacks))
        )
    return out


def _below(
    columns: Sequence[Column],
    header: list[Text],
    cells: list[list[Text]],
    natural: list[int],
    width: int,
    heading: bool,
    console: Console,
) -> list[Text]:
    shown = [i for i, c in enumerate(columns) if c.kind != "text" and not (heading and i == 0)]
    rights = [columns[i].kind == "num" for i in shown]
    widths = [natural[i] for i in shown]
    out = [_row_line([header[i] for i in shown], widths, rights)]
    last_key: str | None = None
    for row in cells:
        if heading and row[0].plain != last_key:
            last_key = row[0].plain
            out.append(Text.assemble(row[0].copy(), style="bold"))
        out.append(_row_line([row[i] for i in shown], widths, rights))
        for i, col in enumerate(columns):
            if col.kind != "text" or not row[i].plain.strip():
                continue
            lead = " " * BELOW_INDENT + col.header + ": "
            body = _wrap(row[i], max(width - len(lead), MIN_TEXT), console)
            out.append(Text.assemble(lead, body[0]))
            out.extend(Text.assemble(" " * len(lead), line) for line in body[1:])
    return out


def print_table(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    *,
    title: Cell | None = None,
    styles: Sequence[str] | None = None,
    width: int | Literal["auto"] | None = "auto",
) -> None:
    """Print a table on `console` (its stream decides the width unless `width` is given); never wrapped by rich."""
    w = output_width(console.file) if width == "auto" else width
    if title is not None:
        console.print(_text(title), soft_wrap=True, highlight=False)
    for line in render(columns, rows, w, styles=styles):
        console.print(line, soft_wrap=True, highlight=False)


def paragraph(console: Console, markup: str | Text, indent: int = 0) -> None:
    """Free text outside a table: wrapped at word boundaries at the table width (later lines indented by
    `indent`), one line in a pipe."""
    text = Text.from_markup(markup) if isinstance(markup, str) else markup
    width = output_width(console.file)
    if width is None:
        console.print(text, highlight=False, soft_wrap=True)
        return
    wrapper = Console(width=width, color_system=None)
    first = _wrap(text, width, wrapper)[0]
    console.print(first, highlight=False, soft_wrap=True)
    # What the first line did not hold, wrapped again at the width left beside the indent.
    rest = text[len(first.plain) :]
    rest = rest[len(rest.plain) - len(rest.plain.lstrip()) :]
    if rest.plain:
        for line in _wrap(rest, max(width - indent, MIN_TEXT), wrapper):
            console.print(Text.assemble(" " * indent, line), highlight=False, soft_wrap=True)
