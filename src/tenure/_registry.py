"""Every backend tenure knows, each declared once, by its own package.

A built-in backend is a package under ``tenure.backends`` whose ``__init__`` declares
``SCHEMES`` (the URL schemes it serves) and ``EXTRA`` (the pip extra that installs its driver,
None for the standard library) and imports nothing else, so that reading the registry loads
no driver. Its ``_async`` and ``_sync`` modules define ``BACKEND``. Adding a backend is adding
such a package: URL parsing, the guarantees table and the tests all read this registry.
Third-party backends register under the ``tenure.backends`` entry-point group (name = the
scheme, value = the package).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import pkgutil

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendEntry",
    "builtin_backends",
    "entry_for_scheme",
    "extra_requirements",
]

ENTRY_POINT_GROUP = "tenure.backends"


@dataclasses.dataclass(frozen=True, slots=True)
class BackendEntry:
    package: str
    """The backend package; its ``_async`` / ``_sync`` modules define ``BACKEND``."""
    extra: str | None
    """The pip extra that installs its driver (None: standard library only)."""
    schemes: tuple[str, ...] = ()
    """Every URL scheme the package serves."""


@functools.cache
def builtin_backends() -> dict[str, BackendEntry]:
    """Scheme -> entry, for every package under ``tenure.backends`` that declares schemes."""
    import tenure.backends

    found: dict[str, BackendEntry] = {}
    for module in sorted(pkgutil.iter_modules(tenure.backends.__path__), key=lambda m: m.name):
        if not module.ispkg:
            continue
        package = importlib.import_module(f"tenure.backends.{module.name}")
        schemes: tuple[str, ...] = getattr(package, "SCHEMES", ())
        entry = BackendEntry(package.__name__, getattr(package, "EXTRA", None), schemes)
        for scheme in schemes:
            found[scheme] = entry
    return found


def entry_for_scheme(scheme: str) -> BackendEntry | None:
    """The built-in or installed third-party backend serving ``scheme``, if any."""
    entry = builtin_backends().get(scheme)
    if entry is not None:
        return entry
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == scheme:
            return BackendEntry(entry_point.value, None, (scheme,))
    return None


def extra_requirements(extra: str) -> tuple[str, ...]:
    """What installing ``tenure[extra]`` brings, as the installed metadata says (``pyproject.toml``
    is its source), e.g. ``("pymongo>=4.9",)``; empty when tenure's metadata cannot be read
    (running from a source tree that was never installed)."""
    try:
        requirements = importlib.metadata.requires("tenure") or []
    except importlib.metadata.PackageNotFoundError:
        return ()
    found: list[str] = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        # Markers read `extra == "mongodb"` (quotes and spacing vary between build backends).
        normalized = marker.replace(" ", "").replace("'", '"')
        if f'extra=="{extra}"' in normalized:
            found.append(spec.strip())
    return tuple(found)
