"""A small element tree of an HTML document (stdlib `html.parser`), enough for DOM assertions in tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

BLOCK = frozenset({"br", "li", "td", "th", "tr", "p", "div", "section", "figure", "figcaption", "h1", "h2", "ul"})
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})


@dataclass
class Node:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find_all(self, tag: str, **attrs: str) -> list[Node]:
        """Descendants (and self) named `tag` whose attributes hold `attrs` (`class_` matches one class)."""
        out = []
        for node in self.walk():
            if node.tag != tag:
                continue
            ok = True
            for key, want in attrs.items():
                if key == "class_":
                    ok = ok and want in node.attrs.get("class", "").split()
                else:
                    ok = ok and node.attrs.get(key.replace("_", "-")) == want
            if ok:
                out.append(node)
        return out

    def one(self, tag: str, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} {attrs}> found"
        return found[0]

    @property
    def text(self) -> str:
        """The text as a reader sees it: whitespace collapsed, a line break or a block boundary as one space."""
        return " ".join(self._raw().split())

    def _raw(self) -> str:
        inner = "".join(c if isinstance(c, str) else c._raw() for c in self.children)
        return f" {inner} " if self.tag in BLOCK else inner

    def rows(self) -> list[list[str]]:
        """A table's body rows as the text of their cells."""
        return [[td.text for td in tr.find_all("td")] for tr in self.one("tbody").find_all("tr")]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(text: str) -> Node:
    builder = _Builder()
    builder.feed(text)
    builder.close()
    return builder.root
