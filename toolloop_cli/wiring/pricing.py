"""Model prices, for the cost budget: a bundled table the user can extend with a YAML file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from toolloop_cli.engine.types import Usage
from toolloop_cli.errors import UsageError
from toolloop_cli.tools import strict_yaml

Price = dict[str, float]  # {"input_per_mtok": …, "output_per_mtok": …}

#: A price table is a few KiB; a larger file is refused unread.
MAX_PRICE_FILE_BYTES = 1024 * 1024


def _read(text: str, origin: str) -> dict[str, Price]:
    """The table in ``text``: any problem is one line (no aliases, duplicates, deep nesting)."""
    try:
        doc, problems = strict_yaml.load(text, strict_yaml.TextDatesLoader)
    except yaml.YAMLError as exc:
        raise UsageError(
            f"price file {origin} is not valid YAML{strict_yaml.describe(exc)}"
        ) from None
    if problems:
        where, problem = problems[0]
        raise UsageError(f"price file {origin}: {where or '<document>'}: {problem}")
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise UsageError(f"price file {origin} needs a 'models' mapping")
    table: dict[str, Price] = {}
    for name, entry in models.items():
        table[str(name)] = _price(entry, f"price file {origin}: models.{name}")
    return table


#: USD per million tokens no model costs more than: a larger price (YAML's ``.inf``, ``1e308``)
#: would make a run's cost infinite, which has no JSON form and could not be stored
MAX_PRICE_PER_MTOK = 1_000_000


def _price(entry: Any, where: str) -> Price:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: expected input_per_mtok and output_per_mtok")
    price: Price = {}
    for key in ("input_per_mtok", "output_per_mtok"):
        value = entry.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value <= MAX_PRICE_PER_MTOK  # NaN compares false: refused too
        ):
            raise UsageError(
                f"{where}.{key}: expected a number from 0 to {MAX_PRICE_PER_MTOK:,} "
                f"(USD per million tokens), found {value!r}"
            )
        price[key] = float(value)
    return price


def load_prices(extra: Path | None = None) -> dict[str, Price]:
    """The bundled prices, overridden by ``extra`` when given."""
    bundled = resources.files("toolloop_cli").joinpath("data/prices.yaml").read_text("utf-8")
    table = _read(bundled, "bundled prices")
    if extra is not None:
        try:
            text = strict_yaml.read_capped(extra, MAX_PRICE_FILE_BYTES)
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or over the size limit
            raise UsageError(f"cannot read price file {extra}: {exc}") from exc
        table.update(_read(text, str(extra)))
    return table


def price_for(model: str, table: dict[str, Price]) -> Price | None:
    """The exact entry, else the longest name the model starts with."""
    if model in table:
        return table[model]
    matches = [name for name in table if model.startswith(name)]
    return table[max(matches, key=len)] if matches else None


def cost(price: Price | None, usage: Usage) -> float:
    """USD for one answer's usage (0 without a price)."""
    if price is None:
        return 0.0
    return (
        usage.input_tokens * price["input_per_mtok"]
        + usage.output_tokens * price["output_per_mtok"]
    ) / 1_000_000
