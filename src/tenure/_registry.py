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
import pkgutil
import re

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendEntry",
    "builtin_backends",
    "entry_for_scheme",
    "extra_requirements",
    "unmet_floors",
    "unmet_implementation_floors",
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
    import importlib.metadata  # read installed metadata only when it is needed (slow to import)

    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == scheme:
            return BackendEntry(entry_point.value, None, (scheme,))
    return None


def extra_requirements(extra: str) -> tuple[str, ...]:
    """What installing ``tenure[extra]`` brings, as the installed metadata says (``pyproject.toml``
    is its source), e.g. ``("pymongo>=4.9",)``; empty when tenure's metadata cannot be read
    (running from a source tree that was never installed)."""
    import importlib.metadata

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


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)")
_VERSION = re.compile(r"\s*v?(\d+(?:\.\d+)*)(.*)")
_PRE_RELEASE = re.compile(r"[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)\d*", re.IGNORECASE)


def _version_key(version: str) -> tuple[tuple[int, ...], bool] | None:
    """A version's release numbers (trailing zeros dropped) and whether it is final (a
    pre-release or dev release of X sorts below X); None when it does not start with a
    number. Enough for the floors tenure's extras state, without the ``packaging`` library
    (the core imports nothing beyond the standard library)."""
    found = _VERSION.match(version)
    if found is None:
        return None
    numbers = tuple(int(part) for part in found.group(1).split("."))
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers = numbers[:-1]
    return numbers, _PRE_RELEASE.match(found.group(2)) is None


def _installed_version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def unmet_floors(extra: str) -> tuple[str, ...]:
    """Each requirement of ``tenure[extra]`` whose distribution is installed below its floor
    (``>=``), as ``"redis>=8.0.1 (7.4.0 is installed)"``. A distribution not installed at
    all is left to the import, whose error names the extra; a requirement tenure's metadata
    does not list (a source tree never installed) is not checked. Read once per process
    (every ``connect`` asks)."""
    unmet: list[str] = []
    for requirement in extra_requirements(extra):
        found = _REQUIREMENT.fullmatch(requirement)
        if found is None:
            continue
        name, specifiers = found.group(1), found.group(2)
        installed = _installed_version(name)
        if installed is None:
            continue
        have = _version_key(installed)
        for specifier in specifiers.split(","):
            operator, _, floor = specifier.strip().partition(">=")
            need = _version_key(floor)
            if operator or need is None or have is None:
                continue
            if have < (need[0], True):
                unmet.append(f"{name}>={floor.strip()} ({installed} is installed)")
    return tuple(unmet)


IMPLEMENTATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "redis": (("hiredis", "hiredis"),),
    "postgresql": (("postgresql-binary", "psycopg-binary"),),
}
"""extra -> (another extra, the distribution it brings): a faster implementation that the
extra's driver uses whenever that distribution is installed (redis-py parses replies with
hiredis; psycopg runs on psycopg-binary's C code and libpq), so that extra's floors hold
then. Not checked when the distribution is absent: ``tenure[postgresql]`` users run plain
psycopg 3.0, below ``tenure[postgresql-binary]``'s 3.1.4."""


@functools.cache
def unmet_implementation_floors(extra: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each installed implementation of ``extra``'s driver (``IMPLEMENTATIONS``), its
    extra and the requirements of that extra installed below their floor. The distribution
    itself is held to the floor of the requirement that brings it: one that names it
    (``hiredis>=3.2``), else the one whose ``[...]`` does (``psycopg[binary]>=3.1.4``:
    psycopg's ``binary`` extra installs psycopg-binary of psycopg's own version)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for other, distribution in IMPLEMENTATIONS.get(extra, ()):
        installed = _installed_version(distribution)
        if installed is None:
            continue
        unmet = list(unmet_floors(other))
        requirements = extra_requirements(other)
        named = [r for r in requirements if _name_of(r) == _normal(distribution)]
        if not named:
            have = _version_key(installed)
            for requirement in requirements:
                brought = _REQUIREMENT.fullmatch(requirement)
                if brought is None or "[" not in requirement:
                    continue
                extras = requirement.partition("[")[2].partition("]")[0].split(",")
                if not any(_normal(f"{brought.group(1)}-{item.strip()}") == _normal(distribution)
                           for item in extras):
                    continue
                for floor in _floors(brought.group(2)):
                    need = _version_key(floor)
                    if have is not None and need is not None and have < (need[0], True):
                        unmet.append(f"{distribution}>={floor} ({installed} is installed)")
        if unmet:
            found.append((other, tuple(unmet)))
    return tuple(found)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _name_of(requirement: str) -> str | None:
    found = _REQUIREMENT.fullmatch(requirement)
    return None if found is None else _normal(found.group(1))


def _floors(specifiers: str) -> list[str]:
    """The ``>=`` versions of a requirement's specifiers."""
    floors = []
    for specifier in specifiers.split(","):
        operator, _, floor = specifier.strip().partition(">=")
        if not operator and floor.strip():
            floors.append(floor.strip())
    return floors
