"""What pyproject.toml publishes agrees with the code: each backend's EXTRA is an extra,
each extra's driver is imported only by the backends that declare it, the core imports only
the standard library, and the installed metadata carries the licence, the classifiers, the
project URLs and no development tools; the version is written once; the sdist carries the
whole project (tests, docs, tools) and the wheel only the library."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

import tenure
from tenure._registry import builtin_backends
from tenure._urls import load_backend_module
from tests.backends import BACKENDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = pathlib.Path(tenure.__file__).resolve().parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PYPROJECT["optional-dependencies"]

# Extras whose drivers are imported outside a backend that declares them, and where: the
# OpenTelemetry API by the observability module (lazily, when installed); hiredis, which
# only speeds up redis-py, by the Redis-family backends.
ALSO_IMPORTED_BY = {"otel": ("_observe.py",), "hiredis": ("backends/redis/", "backends/redlock/")}


def distribution_names(extra: str) -> set[str]:
    names = set()
    for requirement in EXTRAS[extra]:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        assert match is not None, requirement
        names.add(match[0].lower())
    return names


def imported_modules(path: pathlib.Path) -> set[str]:
    """Top-level modules a source file imports, anywhere in it (lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


def test_every_backend_extra_is_a_published_extra_installed_by_all() -> None:
    (everything,) = EXTRAS["all"]
    in_all = set(everything.partition("[")[2].rstrip("]").split(","))
    for scheme, entry in builtin_backends().items():
        if entry.extra is not None:
            assert entry.extra in EXTRAS, (scheme, entry.extra)
            assert entry.extra in in_all, (scheme, entry.extra)


def test_drivers_are_imported_only_by_their_backends() -> None:
    module_to_distributions = importlib.metadata.packages_distributions()
    extra_of: dict[str, str] = {}  # installed driver module -> the extra that brings it
    for extra in EXTRAS:
        if extra in ("all", "postgresql-binary"):  # aggregates / another build of a driver
            continue
        for module, distributions in module_to_distributions.items():
            if {name.lower() for name in distributions} & distribution_names(extra):
                extra_of.setdefault(module, extra)
    assert {"redis", "pymongo", "bson", "pymysql", "psycopg", "httpx", "kazoo"} <= set(extra_of)

    extras_of_backend = {
        entry.package.removeprefix("tenure."): entry.extra for entry in builtin_backends().values()
    }
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for module in imported_modules(path):
            if module == "tenure" or module in sys.stdlib_module_names:
                continue
            assert module in extra_of, f"{relative} imports {module!r}, which no extra installs"
            extra = extra_of[module]
            owners = [
                package.replace(".", "/") + "/"
                for package, declared in extras_of_backend.items()
                if declared == extra
            ]
            allowed = (*owners, *ALSO_IMPORTED_BY.get(extra, ()))
            assert relative.startswith(allowed), (
                f"{relative} imports {module!r} of the {extra!r} extra; only {allowed} may"
            )


def test_the_installed_metadata_is_complete_and_publishes_no_tools() -> None:
    metadata = importlib.metadata.metadata("tenure")
    classifiers = set(metadata.get_all("Classifier") or [])
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert "Typing :: Typed" in classifiers
    assert metadata["License-Expression"] == "MIT"
    assert "LICENSE" in (metadata.get_all("License-File") or [])
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert set(urls) == {"Documentation", "Source", "Issues", "Changelog"}
    assert all(url.startswith("https://") for url in urls.values())
    published = set(metadata.get_all("Provides-Extra") or [])
    assert published == set(EXTRAS)
    assert not published & {"test", "bench"}
    assert (PACKAGE / "py.typed").is_file()


def test_every_floor_is_written_once() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "floors.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_missing_driver_names_its_extra_and_project(monkeypatch: pytest.MonkeyPatch) -> None:
    module_to_distributions = importlib.metadata.packages_distributions()
    seen_extras = set()
    for scheme, entry in builtin_backends().items():
        if entry.extra is None:
            continue
        seen_extras.add(entry.extra)
        projects = distribution_names(entry.extra)
        with monkeypatch.context() as patch:
            blocked = {
                module
                for module, distributions in module_to_distributions.items()
                if {name.lower() for name in distributions} & projects
            }
            for loaded in list(sys.modules):
                if loaded.partition(".")[0] in blocked:  # submodules too: imports look there
                    patch.setitem(sys.modules, loaded, None)
            for module in blocked:
                patch.setitem(sys.modules, module, None)  # import fails: not installed
            # Every backend module, not only this one's: Redlock imports Redis's transport.
            for loaded in [name for name in sys.modules if name.startswith("tenure.backends.")]:
                patch.delitem(sys.modules, loaded)
            with pytest.raises(tenure.ConfigurationError) as caught:
                load_backend_module(f"{scheme}://", "_sync")  # what connect() calls first
        message = str(caught.value)
        assert f"pip install 'tenure[{entry.extra}]'" in message, message
        assert any(project in message.lower() for project in projects), message
        assert "bson" not in message.partition("(")[0], message  # never the wrong project
    # Every backend of the test suite's table whose driver is an extra was tried.
    assert seen_extras == {backend.extra for backend in BACKENDS} - {None}


def test_the_readme_links_work_on_the_package_index() -> None:
    # The README is the package's description on PyPI, where a link relative to the
    # repository (docs/api.md) leads nowhere: every link must be absolute.
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)", text)
    assert targets
    relative = [target for target in targets if not re.match(r"https?://|#", target)]
    assert relative == []


def test_the_version_is_written_once() -> None:
    # pyproject.toml takes it from tenure.__version__: the installed metadata says the same.
    assert "version" not in PYPROJECT
    assert "version" in PYPROJECT["dynamic"]
    assert importlib.metadata.version("tenure") == tenure.__version__
    written = re.findall(r"\b\d+\.\d+\.\d+\b", (ROOT / "pyproject.toml").read_text())
    assert tenure.__version__ not in written


# Directories the sdist carries whole, beside src/: what building, testing and documenting
# tenure from the sdist alone needs.
SDIST_TREES = ("tests", "docs", "scripts", "bench", "safety")
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "mkdocs.yml",
               "tests/conftest.py", "docs/index.md", "src/tenure/py.typed")


def _source_files(root: pathlib.Path) -> set[str]:
    """The project's own files under SDIST_TREES (no caches, no benchmark results)."""
    found = set()
    for tree in SDIST_TREES:
        for path in (root / tree).rglob("*"):
            relative = path.relative_to(root)
            if path.is_file() and "__pycache__" not in relative.parts \
                    and relative.parts[:2] != ("bench", "results") \
                    and path.suffix not in (".pyc", ".so", ".o"):
                found.add(relative.as_posix())
    return found


def test_the_sdist_carries_tests_and_docs_and_the_wheel_only_the_library(
    tmp_path: pathlib.Path,
) -> None:
    # A copy of the checkout, so the build's egg-info never lands in the working tree; built
    # offline with the backend installed in this venv (build, setuptools: the test group).
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "site", "build", "dist", "*.egg-info", ".*_cache", ".hypothesis",
        "__pycache__", "results",
    ))
    out = tmp_path / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
         "--outdir", str(out), str(source)],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sdist,) = out.glob("tenure-*.tar.gz")
    (wheel,) = out.glob("tenure-*.whl")
    assert sdist.name == f"tenure-{tenure.__version__}.tar.gz"

    prefix = f"tenure-{tenure.__version__}/"
    with tarfile.open(sdist) as archive:
        in_sdist = {name.removeprefix(prefix) for name in archive.getnames()}
    missing = (set(SDIST_FILES) | _source_files(source)) - in_sdist
    assert missing == set(), sorted(missing)

    with zipfile.ZipFile(wheel) as archive:
        in_wheel = archive.namelist()
    tops = {name.split("/", 1)[0] for name in in_wheel}
    assert tops == {"tenure", f"tenure-{tenure.__version__}.dist-info"}, tops
    assert "tenure/py.typed" in in_wheel
    assert not [name for name in in_wheel if "conftest" in name or "/tests/" in name]
