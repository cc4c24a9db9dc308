"""Numeric and yes/no backend options, parsed one way by every backend.

An option arrives as a Python value (a ``connect()`` keyword) or as text (a URL's query
string), so both are accepted; anything else, ``bool`` for a number included (``True`` is
an ``int`` to Python, never a timeout to a user), is a ConfigurationError naming the backend,
the option and the value. Numbers must be finite: an infinite timeout is spelled by the
API's ``timeout=None``, never by an option.
"""

from __future__ import annotations

import math
import operator
import urllib.parse
from collections.abc import Collection, Mapping
from typing import Any

from tenure._errors import ConfigurationError

__all__ = [
    "DEFAULT_GC_AFTER", "flag_option", "gc_after_option", "integer_option", "merged_options",
    "namespace_option", "number_option",
]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _refuse(owner: str, name: str, rule: str, value: object) -> ConfigurationError:
    return ConfigurationError(f"{owner} option {name} must be {rule}, not {value!r}")


def _bounded(owner: str, name: str, found: float, value: object, unit: str, *,
             above: float | None, at_least: float | None, below: float | None,
             at_most: float | None) -> None:
    for bound, relation, holds in (
        (above, ">", operator.gt),
        (at_least, ">=", operator.ge),
        (below, "<", operator.lt),
        (at_most, "<=", operator.le),
    ):
        if bound is not None and not holds(found, bound):
            raise _refuse(owner, name, f"{relation} {bound:g}{unit}", value)


def number_option(owner: str, name: str, value: object, *, unit: str = "",
                  above: float | None = None, at_least: float | None = None,
                  below: float | None = None, at_most: float | None = None) -> float:
    """A finite number within the given bounds. ``unit`` (" seconds") is for the message."""
    kind = f"a number{' of' + unit if unit else ''}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _refuse(owner, name, kind, value)
    try:
        found = float(value)
    except ValueError:
        raise _refuse(owner, name, kind, value) from None
    if not math.isfinite(found):
        raise _refuse(owner, name, f"a finite number{' of' + unit if unit else ''}", value)
    _bounded(owner, name, found, value, unit, above=above, at_least=at_least, below=below,
             at_most=at_most)
    return found


def integer_option(owner: str, name: str, value: object, *, at_least: int | None = None,
                   at_most: int | None = None) -> int:
    """A whole number (an int, or its decimal text) within the given bounds."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _refuse(owner, name, "an integer", value)
    try:
        found = int(value)
    except ValueError:
        raise _refuse(owner, name, "an integer", value) from None
    _bounded(owner, name, found, value, "", above=None, at_least=at_least, below=None,
             at_most=at_most)
    return found


def flag_option(owner: str, name: str, value: object) -> bool:
    """A bool, or its text: 1/0, true/false, yes/no, on/off (any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _refuse(owner, name, "true or false", value)


DEFAULT_GC_AFTER = 600.0
"""How long the record of an idle name (its fence, a semaphore's limit) outlives its last
lease, waiting place or release before clean-up may remove it: 10 minutes.

Short, because every name ever locked would otherwise cost storage for that long (per-entity
names, ``orders:{id}``, come by the million), and the record is not what keeps fences
rising: each fence is at least the server's clock in microseconds, so a name whose record
went starts again above every fence it had. Not zero, because for those minutes the record
still serves: ``inspect``/``tenure show`` tell an operator the last fence of a name just
released, a name locked again soon updates its record instead of writing a new one, and
its counter keeps fences rising through a server clock stepped back by less than that
(an NTP step), where the clock alone would not. ``gc_after=None`` keeps records forever."""

_FOREVER = ("none", "off", "never")


def gc_after_option(owner: str, value: object) -> float | None:
    """The ``gc_after`` option, the same on every backend: seconds > 0, or None (also the
    text none/off/never) to keep records forever. Fences never go back either way."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _FOREVER):
        return None
    return number_option(owner, "gc_after", value, unit=" seconds", above=0)


def merged_options(
    owner: str, query_text: str, options: Mapping[str, Any], known: Collection[str]
) -> dict[str, Any]:
    """A URL's query options with ``connect()``'s keywords over them; ConfigurationError
    naming the ones ``owner`` does not know."""
    query = dict(urllib.parse.parse_qsl(query_text, keep_blank_values=True))
    merged: dict[str, Any] = {**query, **options}
    unknown = set(merged) - set(known)
    if unknown:
        raise ConfigurationError(
            f"unknown {owner} option(s) {sorted(unknown)}; known: {list(known)}"
        )
    return merged


def namespace_option(owner: str, value: object) -> str:
    """The key prefix a consensus store's nodes live under (default "tenure"): one path
    segment, so that it cannot reach outside itself."""
    if not isinstance(value, str) or not value or "/" in value:
        raise ConfigurationError(
            f"{owner} option namespace must be a non-empty name without '/', not {value!r}"
        )
    return value
