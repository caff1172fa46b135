"""Every commit of the engine is followed by a named failpoint.

A commit site is a ``with <store>.transaction():`` block in ``engine/`` or ``service/``.
It is covered when the statement right after it is a failpoint (or a ``raise``: nothing more
happens), or when the block returns and its function is a step that ``loop.step`` follows
with ``after_step_commit``, or a function every caller of which hits a failpoint next.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.paths import PACKAGE

from toolloop_cli.wiring import failpoints

SOURCES = [*sorted((PACKAGE / "engine").glob("*.py")), *sorted((PACKAGE / "service").glob("*.py"))]


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _failpoint_name(stmt: ast.stmt | None) -> str | None:
    """The boundary a statement hits: ``deps.failpoint("x")`` or ``failpoints.failpoint("x")``."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    func, args = stmt.value.func, stmt.value.args
    if isinstance(func, ast.Attribute) and func.attr in ("failpoint", "hit") and args:
        first = args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def _is_transaction(node: ast.AST) -> bool:
    return isinstance(node, ast.With) and any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "transaction"
        for item in node.items
    )


def _next_statement(node: ast.stmt, parents: dict[ast.AST, ast.AST]) -> ast.stmt | None:
    parent = parents[node]
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and node in block:
            i = block.index(node)
            return block[i + 1] if i + 1 < len(block) else None
    return None


def _function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.FunctionDef:
    while not isinstance(node, ast.FunctionDef):
        node = parents[node]
    return node


Overrides = dict[str, str]


def _trees(overrides: Overrides) -> Iterator[tuple[Path, ast.Module]]:
    for path in SOURCES:
        yield path, ast.parse(overrides.get(path.name) or path.read_text())


def _step_functions() -> set[str]:
    """The functions ``loop.advance`` (what ``step`` and ``run`` make each step with) calls in
    its ``match`` (each followed by after_step_commit)."""
    tree = ast.parse((PACKAGE / "engine" / "loop.py").read_text())
    step = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "advance")
    parents = _parents(tree)
    match = next(n for n in ast.walk(step) if isinstance(n, ast.Match))
    assert _failpoint_name(_next_statement(match, parents)) == "after_step_commit"
    return {
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(match)
        if isinstance(n, ast.Call)
    }


def _callers_hit_a_failpoint(name: str, overrides: Overrides, depth: int = 0) -> bool:
    """Every call of ``name`` is followed by a failpoint or a ``raise``, or ends a function
    whose own callers are (nothing else commits or acts in between)."""
    sites = 0
    for _, tree in _trees(overrides):
        parents = _parents(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called != name:
                continue
            sites += 1
            stmt: ast.AST = node
            while not isinstance(stmt, ast.stmt):
                stmt = parents[stmt]
            after = _next_statement(stmt, parents)
            if _failpoint_name(after) is not None or isinstance(after, ast.Raise):
                continue
            outer = _function(stmt, parents).name
            if (
                after is None
                and depth < 3
                and _callers_hit_a_failpoint(outer, overrides, depth + 1)
            ):
                continue
            return False
    return sites > 0


def _uncovered(overrides: Overrides | None = None) -> list[str]:
    overrides = overrides or {}
    steps = _step_functions()
    found = []
    for path, tree in _trees(overrides):
        parents = _parents(tree)
        for node in ast.walk(tree):
            if not _is_transaction(node):
                continue
            assert isinstance(node, ast.With)
            after = _next_statement(node, parents)
            if _failpoint_name(after) is not None or isinstance(after, ast.Raise):
                continue
            returns = after is None or isinstance(after, ast.Return)
            returns = returns or isinstance(node.body[-1], ast.Return)
            function = _function(node, parents).name
            if returns and (function in steps or _callers_hit_a_failpoint(function, overrides)):
                continue
            found.append(f"{path.name}:{node.lineno} in {function}()")
    return found


def test_every_commit_of_the_engine_is_followed_by_a_failpoint() -> None:
    assert _uncovered() == []


def test_every_failpoint_is_hit_somewhere_and_named_in_the_list() -> None:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Expr):
                name = _failpoint_name(node)
                if name is not None:
                    names.add(name)
    assert names == set(failpoints.FAILPOINTS)


def test_control_a_commit_without_a_failpoint_is_found() -> None:
    source = (PACKAGE / "engine" / "executing.py").read_text()
    head, batch = source.split("def _run_batch(", 1)  # the result commit of a side effect
    stripped = (
        head
        + "def _run_batch("
        + batch.replace('        deps.failpoint("after_result_commit")\n', "", 1)
    )
    assert stripped != source
    (found,) = _uncovered({"executing.py": stripped})
    assert "in _run_batch()" in found
