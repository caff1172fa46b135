"""Typer's Rich help and error renderer, loaded without the two modules it never uses here.

``typer.rich_utils`` imports ``rich.markdown`` (for ``rich_markup_mode="markdown"``, which
toolloop does not use; it pulls in markdown-it and Pygments) and ``rich.traceback`` (for
pretty exceptions, which the app turns off; it pulls in ``rich.pretty`` and attrs) at its top.
Together they are about a quarter of ``toolloop --help``'s start-up. ``load`` imports
``typer.rich_utils`` once with a stand-in for each of the two names it takes from them: the
stand-in imports the real class the first time anything uses it (an instance, a class
attribute such as ``Traceback.from_exception``), so the renderer behaves exactly as before in
every mode, and only pays for those modules if it reaches them. The stand-in modules are gone
from ``sys.modules`` once Typer's module is loaded: any later ``import rich.markdown`` gets the
real module.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["load"]

#: the module typer.rich_utils imports each name from, and the name
_DEFERRED = (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback"))


class _Deferred(type):
    """Metaclass of a stand-in: calling it or reading an attribute reaches the real class."""

    _module: str
    _name: str

    def real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls._name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, attr: str) -> Any:
        return getattr(cls.real(), attr)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls.real())


def _stand_in(module: str, name: str) -> types.ModuleType:
    stub = types.ModuleType(module)
    setattr(stub, name, _Deferred(name, (), {"_module": module, "_name": name}))
    return stub


def load(target: str = "typer.rich_utils") -> None:
    """Import ``target`` (Typer's renderer) with the deferred names; a no-op once imported.

    A Typer release whose renderer takes another name from those modules cannot import it
    from a stand-in: the stand-ins are then dropped and the renderer imported as it is.
    """
    if target in sys.modules:
        return
    stand_ins = {
        module: _stand_in(module, name) for module, name in _DEFERRED if module not in sys.modules
    }
    sys.modules.update(stand_ins)
    try:
        importlib.import_module(target)
    except ImportError:
        sys.modules.pop(target, None)
    finally:
        for module, stub in stand_ins.items():
            if sys.modules.get(module) is stub:
                del sys.modules[module]
    if target not in sys.modules:
        importlib.import_module(target)
