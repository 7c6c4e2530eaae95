"""A small HTML reader for the viewer's tests: the page as a tree of elements, found by tag,
id, class and attributes, with their text (entities decoded, as a browser shows it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def walk(self) -> Iterator[Node]:
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.walk()

    def all(
        self, tag: str | None = None, *, id: str | None = None, cls: str | None = None, **attrs: str
    ) -> list[Node]:
        """Descendants matching every condition given (``data_seq="3"`` is ``data-seq``)."""
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            n
            for n in self.walk()
            if (tag is None or n.tag == tag)
            and (id is None or n.attrs.get("id") == id)
            and (cls is None or cls in n.classes)
            and all(n.attrs.get(k) == v for k, v in wanted.items())
        ]

    def one(self, tag: str | None = None, **conditions: str) -> Node:
        found = self.all(tag, **conditions)
        assert len(found) == 1, f"{len(found)} <{tag or '*'} {conditions}> found, want 1"
        return found[0]

    def maybe(self, tag: str | None = None, **conditions: str) -> Node | None:
        found = self.all(tag, **conditions)
        assert len(found) <= 1, f"{len(found)} <{tag or '*'} {conditions}> found"
        return found[0] if found else None


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
