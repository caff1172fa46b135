"""The error tree: every ``ToolloopError`` is defined in ``errors.py``, whose docstring draws it."""

from __future__ import annotations

import importlib
import pkgutil
import re

import toolloop_cli
from toolloop_cli import errors


def _error_classes() -> set[type[errors.ToolloopError]]:
    """Every ``ToolloopError`` (the base included) that a toolloop_cli module defines."""
    for module in pkgutil.walk_packages(toolloop_cli.__path__, "toolloop_cli."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: set[type[errors.ToolloopError]] = {errors.ToolloopError}
    todo = [errors.ToolloopError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found and sub.__module__.startswith("toolloop_cli"):
                found.add(sub)
                todo.append(sub)
    return found


def _drawn_parents() -> dict[str, str | None]:
    """Class name -> its parent's name, as the indentation of the docstring drawing says."""
    lines = (errors.__doc__ or "").splitlines()
    start = lines.index("    ToolloopError")
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in lines[start:]:
        match = re.match(r"( {4,})([A-Z]\w+)(\s|$)", line)
        if match is None:
            break
        depth = (len(match[1]) - 4) // 2
        del stack[depth:]
        parents[match[2]] = stack[-1] if stack else None
        stack.append(match[2])
    return parents


def test_every_toolloop_error_is_defined_in_errors_py() -> None:
    elsewhere = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _error_classes()
        if cls.__module__ != errors.__name__
    )
    assert elsewhere == []


def test_the_docstring_draws_every_error_under_its_parent() -> None:
    actual: dict[str, str | None] = {
        cls.__name__: None if cls is errors.ToolloopError else cls.__bases__[0].__name__
        for cls in _error_classes()
    }
    assert _drawn_parents() == actual


def test_the_old_homes_still_export_the_same_classes() -> None:
    from toolloop_cli.audit import canonical
    from toolloop_cli.engine import loop
    from toolloop_cli.store import lease

    assert loop.OperationTerminal is errors.OperationTerminal
    assert lease.OperationBusy is errors.OperationBusy
    assert canonical.CanonicalJSONError is errors.CanonicalJSONError
    assert toolloop_cli.OperationTerminal is errors.OperationTerminal
