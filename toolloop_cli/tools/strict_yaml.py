"""YAML as toolloop reads it: safe tags, no aliases, no duplicate keys, bounded size and depth.

Registries, price files and cassettes are read by people before toolloop acts on them, so a
file must mean one thing and cost a bounded amount to read. YAML allows three things that break
this: duplicate keys (the last one silently wins while a reviewer reads the first), aliases
(``*a`` repeated through a few anchors makes an 800-byte file expand to 10^9 values when the
document is walked or re-serialised) and nesting deep enough for a ``RecursionError`` in any
recursive consumer. All three are found on the composed node graph, in which an aliased node is
one shared object, by one iterative walk, before anything is constructed.

A leaf: it imports nothing of toolloop, so registries, prices and cassettes share it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DUPLICATE_KEY",
    "MAX_DEPTH",
    "NOT_LOADED",
    "Loader",
    "TextDatesLoader",
    "TooLarge",
    "describe",
    "load",
    "load_all",
    "read_capped",
    "read_capped_bytes",
]

#: Deepest nesting of mappings and sequences accepted in a document.
MAX_DEPTH = 128
DUPLICATE_KEY = "duplicate key"
ALIAS = "a YAML alias (*name) is not allowed here: write the value out"

Problem = tuple[str, str]

#: returned instead of a document that was refused before it was built
NOT_LOADED: Any = object()

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Loader(_Base):  # type: ignore[misc]
    """The safe loader; libyaml's when installed (faster, and it stops at 1000 levels itself)."""


class TextDatesLoader(Loader):
    """Timestamps as text: JSON has no dates, and revisions like ``2026-12-01`` look like them."""


TextDatesLoader.add_constructor("tag:yaml.org,2002:timestamp", TextDatesLoader.construct_scalar)


class TooLarge(ValueError):
    """A file over its size limit, refused before it is parsed."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"the file is {size} bytes, over the limit of {limit} bytes")


def read_capped(path: Path, limit: int) -> str:
    """The file's UTF-8 text; ``TooLarge`` when it has more than ``limit`` bytes."""
    return read_capped_bytes(path, limit).decode("utf-8")


def read_capped_bytes(path: Path, limit: int) -> bytes:
    """The file's bytes; ``TooLarge`` when it has more than ``limit``.

    The size is checked before reading, and the read stops one byte past the limit, so a
    file that grows (or a pipe, which has no size) costs at most ``limit + 1`` bytes. The
    file is opened without waiting: a named pipe nothing writes to (``mkfifo``) reads as
    empty instead of blocking the command for ever; one being written to (``<(…)``) is read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)  # opened without waiting; a writer's pipe is then read whole
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise TooLarge(size, limit)
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(len(data), limit)
    return data


def load(
    text: str,
    loader: type[Any] = Loader,
    *,
    max_depth: int = MAX_DEPTH,
    same_value_repeats: bool = False,
) -> tuple[Any, list[Problem]]:
    """The document and its problems, each ``(path, message)``.

    An alias or nesting deeper than ``max_depth`` is refused before the document is built
    (``NOT_LOADED`` is returned); duplicate keys are reported and the document still built,
    so a caller that lists every problem can go on checking it. What YAML itself refuses
    (syntax, tags outside the safe schema) raises ``yaml.YAMLError``.

    ``same_value_repeats``: a key repeated with the very same scalar value (``version: 1``
    twice, as some recorders leave a cassette) is no problem, since the file still means one
    thing; a repeat with any other value is.
    """
    parser = loader(text)
    try:
        try:
            node = parser.get_single_node()
        except RecursionError:  # the pure-Python composer, without libyaml
            return NOT_LOADED, [("", f"nested deeper than {max_depth} levels")]
        if node is None:
            return None, []
        return _built(parser, node, max_depth, same_value_repeats)
    finally:
        parser.dispose()


def load_all(
    text: str,
    loader: type[Any] = Loader,
    *,
    max_depth: int = MAX_DEPTH,
    same_value_repeats: bool = False,
) -> tuple[list[Any], list[Problem]]:
    """Every document of a stream (``---`` between them), each checked as ``load`` checks
    one; a problem's path starts with its document's index. The list is ``NOT_LOADED`` when
    any document is refused before it is built."""
    parser = loader(text)
    documents: list[Any] = []
    problems: list[Problem] = []
    try:
        while True:
            try:
                if not parser.check_node():
                    return documents, problems
                node = parser.get_node()
            except RecursionError:
                return NOT_LOADED, [
                    (f"[{len(documents)}]", f"nested deeper than {max_depth} levels")
                ]
            document, found = _built(parser, node, max_depth, same_value_repeats)
            problems += [(f"[{len(documents)}].{path}".rstrip("."), why) for path, why in found]
            if document is NOT_LOADED:
                return NOT_LOADED, problems
            documents.append(document)
    finally:
        parser.dispose()


def _built(
    parser: Any, node: yaml.Node, max_depth: int, same_value_repeats: bool
) -> tuple[Any, list[Problem]]:
    """The document of ``node`` and its duplicate keys, or ``NOT_LOADED`` and why not."""
    fatal, duplicates = _walk(node, max_depth, same_value_repeats)
    if fatal:
        return NOT_LOADED, fatal + duplicates
    try:
        return parser.construct_document(node), duplicates
    except ValueError as exc:  # an integer of more than 4,300 digits, say
        return NOT_LOADED, [("", f"a value that cannot be read: {str(exc).split(';')[0]}")]


def describe(exc: yaml.YAMLError) -> str:
    """`` at line L, column C: problem`` on one line (PyYAML's own text spans several)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{where}: {' '.join(str(problem).split())}"


def _walk(
    root: yaml.Node, max_depth: int, same_value_repeats: bool
) -> tuple[list[Problem], list[Problem]]:
    """(the first alias or excess depth, duplicate keys): each node once, without recursion."""
    duplicates: list[Problem] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str, int]] = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if id(node) in seen:  # the composer makes one node per event; a second visit is an alias
            return [(path, ALIAS)], duplicates
        seen.add(id(node))
        if not isinstance(node, yaml.CollectionNode):
            continue
        if depth >= max_depth:
            where = path if len(path) <= 60 else path[:60] + "…"
            return [(where, f"nested deeper than {max_depth} levels")], duplicates
        children: list[tuple[yaml.Node, str, int]] = []
        if isinstance(node, yaml.MappingNode):
            keys: dict[tuple[str, str], yaml.Node] = {}
            for key_node, value_node in node.value:
                label = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "<key>"
                child = f"{path}.{label}" if path else label
                if isinstance(key_node, yaml.ScalarNode):
                    key = (key_node.tag, label)
                    first = keys.get(key)
                    if first is not None and not (
                        same_value_repeats and _same_scalar(first, value_node)
                    ):
                        duplicates.append((child, _duplicate(key_node)))
                    keys.setdefault(key, value_node)
                children += [(key_node, child, depth + 1), (value_node, child, depth + 1)]
        else:
            children += [(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return [], duplicates


def _same_scalar(first: yaml.Node, again: yaml.Node) -> bool:
    return (
        isinstance(first, yaml.ScalarNode)
        and isinstance(again, yaml.ScalarNode)
        and (first.tag, first.value) == (again.tag, again.value)
    )


def _duplicate(key_node: yaml.Node) -> str:
    """``duplicate key at line L``: the repeat, where an editor finds it."""
    mark = key_node.start_mark
    return f"{DUPLICATE_KEY} at line {mark.line + 1}" if mark is not None else DUPLICATE_KEY
