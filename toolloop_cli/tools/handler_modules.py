"""Importing a registry's handler modules without letting the registry's folder shadow anything.

A registry names handlers as ``module:function``; the module may live beside the registry file.
That folder used to be put in front of ``sys.path`` while importing, so a planted ``smtplib.py``
next to a registry ran as soon as a handler imported ``smtplib`` (``registry check`` included).
Now a module found in the folder is executed from its own file, and refused when its top-level
name is a standard-library module or one importable from elsewhere; the folder is appended to
``sys.path`` only while importing, for the modules a handler imports itself, after the standard
library and site-packages.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType

__all__ = ["import_handler_module"]

#: top-level module name → the file this module loaded it from, for a registry's folder
_LOADED: dict[str, str] = {}


def import_handler_module(module_name: str, folder: Path) -> tuple[ModuleType | None, str]:
    """The handler's module: from the registry's folder by file when it is there, else by name.

    The folder is appended to ``sys.path`` while importing (so a handler module finds its
    siblings after the standard library and site-packages, never instead of them).
    """
    entry = str(folder.resolve())
    added = entry not in sys.path
    if added:
        sys.path.append(entry)
    importlib.invalidate_caches()
    top = module_name.partition(".")[0]
    try:
        local = PathFinder.find_spec(top, [entry])
        if local is not None:
            refusal = _shadowing(top, local, entry)
            if refusal:
                return None, refusal
            _load_local(top, local)
        return importlib.import_module(module_name), ""
    except Exception as exc:
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if missing and f"{module_name}.".startswith(f"{missing}."):
            return None, f"cannot import module '{module_name}'"
        return None, f"importing module '{module_name}' failed: {type(exc).__name__}: {exc}"
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _shadowing(top: str, local: ModuleSpec, folder: str) -> str:
    """Why the folder's module ``top`` may not be loaded ('' when it may): its name is taken."""
    origin = _origin(local)
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return f"module '{top}' in the registry folder has the name of a standard-library module"
    loaded = sys.modules.get(top)
    if loaded is not None and loaded.__spec__ is not None:
        where = _origin(loaded.__spec__)
        if where != origin and where != _LOADED.get(top):
            return f"module '{top}' in the registry folder shadows '{top}' imported from {where}"
    other = [p for p in sys.path if str(Path(p or ".").resolve()) != folder]
    for finder in sys.meta_path:
        try:
            if finder is PathFinder:
                found = PathFinder.find_spec(top, other)
            else:
                found = getattr(finder, "find_spec", lambda *_: None)(top, None)
        except Exception:  # a third-party finder that cannot answer is no conflict
            found = None
        if found is not None and found.origin is not None and _origin(found) != origin:
            return f"module '{top}' in the registry folder shadows '{top}' from {_origin(found)}"
    return ""


def _load_local(top: str, spec: ModuleSpec) -> None:
    """Execute the folder's module ``top`` from its file, once; a same-named one it replaces
    came from another registry's folder (anything else was refused by ``_shadowing``)."""
    origin = _origin(spec)
    loaded = sys.modules.get(top)
    if loaded is not None and loaded.__spec__ is not None and _origin(loaded.__spec__) == origin:
        return
    for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
        del sys.modules[name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        if spec.loader is not None:
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(top, None)
        raise
    _LOADED[top] = origin


def _origin(spec: ModuleSpec) -> str:
    """The file (or, for a namespace package, the folder) a module comes from, resolved."""
    where = spec.origin if spec.has_location and spec.origin else None
    if where is None and spec.submodule_search_locations:
        where = next(iter(spec.submodule_search_locations), None)
    return str(Path(where).resolve()) if where else str(spec.origin)
