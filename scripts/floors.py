"""The driver floors of pyproject.toml as a pip constraints file, so that scripts/floors
installs exactly the lowest release each extra allows: pyproject.toml stays the one place
where a floor is written.

    python scripts/floors.py            # print the constraints ("redis==8.0", ...)
    python scripts/floors.py --check    # fail unless every extra's requirement has a floor

Every requirement of every extra must read ``name>=floor`` (extras and markers allowed):
a requirement without a floor could not be proven, and an upper bound would stop users
from taking fixes.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# name, optional [extras], ">=" floor, optional "; marker"
REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*>=\s*(?P<floor>[0-9][^\s;,]*)"
    r"\s*(?:;.*)?$"
)

# A test tool released in lockstep with a driver must sit at the same version: the
# OpenTelemetry SDK (test group) requires exactly its own version of the API (otel extra).
LOCKSTEP = {"opentelemetry-api": "opentelemetry-sdk"}


def floors(pyproject: pathlib.Path) -> dict[str, str]:
    """Distribution name (as written) -> its floor, over the extras that ``all`` installs
    (the set scripts/floors tests). An extra outside it, such as ``postgresql-binary``
    (another build of a driver in ``all``, with a floor of its own), is checked for a floor
    but not pinned: one environment cannot hold both builds."""
    project = tomllib.loads(pyproject.read_text())["project"]
    name = project["name"]
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    aggregate = re.fullmatch(rf"{re.escape(name)}\[(?P<names>[^\]]*)\]", extras["all"][0])
    if aggregate is None or len(extras["all"]) != 1:
        raise SystemExit(f"floors: extra 'all' should be one '{name}[...]' requirement")
    tested = {extra.strip() for extra in aggregate["names"].split(",")}
    found: dict[str, str] = {}
    problems: list[str] = []
    for extra, requirements in extras.items():
        for requirement in requirements:
            if requirement.startswith(f"{name}["):
                continue  # an aggregate such as "all"
            match = REQUIREMENT.match(requirement)
            if match is None:
                problems.append(f"extra {extra!r}: {requirement!r} is not 'name>=floor'")
                continue
            package, floor = match["name"], match["floor"]
            if extra not in tested:
                continue
            if found.get(package, floor) != floor:
                problems.append(f"{package} has two floors: {found[package]} and {floor}")
            found[package] = floor
    if problems:
        raise SystemExit("floors: " + "; ".join(problems))
    for driver, companion in LOCKSTEP.items():
        if driver in found:
            found[companion] = found[driver]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check, print nothing")
    parser.add_argument("--pyproject", type=pathlib.Path, default=ROOT / "pyproject.toml")
    arguments = parser.parse_args()
    pins = floors(arguments.pyproject)
    if not arguments.check:
        sys.stdout.write("".join(f"{name}=={floor}\n" for name, floor in sorted(pins.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
