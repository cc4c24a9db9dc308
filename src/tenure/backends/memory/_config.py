"""``memory://`` URLs and options, parsed once into ``MemorySettings`` for both flavours.

    memory://[NAME][?gc_after=S]

``NAME`` picks one of this process's servers (``memory://`` is the unnamed one). One option,
in the URL query or as a ``connect()`` keyword (keywords win): ``gc_after``, seconds (default
30 days) a name's record is kept after its last lease, waiting place or release ended;
``none`` keeps records forever. See docs/backends/memory.md.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option
from tenure._urls import redact

__all__ = ["MemorySettings", "settings_from_url"]


@dataclasses.dataclass(frozen=True, slots=True)
class MemorySettings:
    server_name: str = ""
    gc_after: float | None = DEFAULT_GC_AFTER
    """Seconds a record outlives its last use (None: forever). A server shared by
    connections with different values keeps each record by the last writer's."""


def settings_from_url(url: str, options: dict[str, Any]) -> MemorySettings:
    parts = urllib.parse.urlsplit(url)
    if parts.path not in ("", "/"):
        raise ConfigurationError(
            f"memory:// URLs name a store only: memory://NAME[?gc_after=S], not {redact(url)!r}"
        )
    try:
        query = urllib.parse.parse_qsl(
            parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)
        )
    except ValueError:
        raise ConfigurationError(f"memory:// URL query is malformed: {redact(url)!r}") from None
    settings: dict[str, Any] = dict(query)
    settings.update(options)
    unknown = sorted(set(settings) - {"gc_after"})
    if unknown:
        raise ConfigurationError(f"memory:// takes only gc_after, got {unknown}")
    gc_after = gc_after_option("memory", settings.get("gc_after", DEFAULT_GC_AFTER))
    return MemorySettings(parts.netloc, gc_after)
