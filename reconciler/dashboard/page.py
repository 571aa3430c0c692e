"""The frame every dashboard page shares, and the one way values get into it.

`e()` is the only door from data to markup: it redacts the daemon's known
secret values first (an escaped value would no longer match them) and then
escapes for HTML text and attribute values alike.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote

from reconciler.logsetup import redact

# A cell breaks anywhere a long word (a digest, a path) would push it out of the table: text wraps, never
# clips; the daemon's decision keeps room for a readable line (issue 23).
CSS = """
:root{color-scheme:light dark;--ok:#188038;--bad:#d93025;--warn:#b06000;--dim:#5f6368;--line:#dadce0}
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:.5rem .75rem}
header,nav{display:flex;flex-wrap:wrap;gap:.25rem 1rem;align-items:baseline}
h1{font-size:1.3rem;margin:.4rem 0}h2{font-size:1.1rem;margin:1.4rem 0 .4rem}
.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.3rem .45rem;border-bottom:1px solid var(--line)}
td{overflow-wrap:anywhere}.decision{min-width:16rem;white-space:normal}
th{font-weight:600;white-space:nowrap}code{font-size:.9em;word-break:break-all}
.healthy,.applied,.ok{color:var(--ok)}.failed,.denied,.refused,.degraded,.bad{color:var(--bad)}
.progressing,.blocked,.held,.suspended,.rolled-back,.warn{color:var(--warn)}.dim{color:var(--dim)}
.bar{display:flex;height:1.1rem;border:1px solid var(--line);position:relative;min-width:12rem}
.bar span{display:block;height:100%}.weights{background:#1a73e8}.kv{background:#34a853}
.drafter{background:#a142f4}.overhead{background:#fbbc04}.gap{background:transparent}
.budget{position:absolute;top:-3px;bottom:-3px;border-left:3px solid var(--bad)}
.key span{display:inline-block;width:.8rem;height:.8rem;margin:0 .2rem 0 .6rem;vertical-align:middle}
svg{max-width:100%;height:auto}ul{margin:.2rem 0;padding-left:1.1rem}
@media (max-width:700px){.scroll table,.scroll tbody,.scroll tr,.scroll td{display:block}
.scroll thead{display:none}.scroll tr{border-bottom:2px solid var(--line);padding:.3rem 0}
.scroll td{border:0;padding:.1rem .2rem}.scroll td::before{content:attr(data-label) ": ";font-weight:600}}
"""


REFRESH_S = 15
"""Seconds between the page's own reloads: a phase or a gate changes on that scale."""


def e(value: object) -> str:
    """`value` as HTML text: secrets replaced, then escaped (quotes too, so it also fits attributes)."""
    return html.escape(redact("" if value is None else str(value)), quote=True)


def short(sha: str | None) -> str:
    return e(sha[:12]) if sha else '<span class="dim">none</span>'


def lane_href(name: str) -> str:
    return "/lanes/" + quote(name, safe="")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, label: str) -> str:
    """A table whose cells are markup already built with `e()`; headers are plain text."""
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in headers)
    # On a phone each row becomes a card, each cell led by its column's name (data-label, CSS only).
    labels = [e(h) for h in headers]
    body = "".join(
        "<tr>"
        + "".join(f'<td data-label="{label}">{cell}</td>' for label, cell in zip(labels, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return (
        f'<div class="scroll"><table aria-label="{e(label)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def section(ident: str, title: str, body: str) -> str:
    heading = f'<h2 id="{e(ident)}-h">{e(title)}</h2>'
    return f'<section id="{e(ident)}" aria-labelledby="{e(ident)}-h">{heading}{body}</section>'


def page(title: str, body: str, *, subtitle: str = "") -> str:
    """A whole document; the text is redacted once more as a whole, after every value went through `e()`."""
    nav = '<nav aria-label="pages"><a href="/">overview</a><a href="/status">/status (JSON)</a></nav>'
    sub = f'<p class="dim">{subtitle}</p>' if subtitle else ""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        # The page refreshes itself (no JavaScript: the HTML refresh pragma, WHATWG HTML "Refresh" state).
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        f"<title>{e(title)}</title><style>{CSS}</style></head>"
        f"<body><header><h1>{e(title)}</h1>{nav}</header>{sub}<main>{body}</main></body></html>\n"
    )
    return redact(text)
