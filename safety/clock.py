"""Jumping a process's wall clock, for scenario 10: ``clockshift.c`` built into a preload
library, and the shared file its processes read their offset from.

A ``WallClock`` is one clock: every process started with ``env()`` reads the same offset,
as the processes of one host share one clock. ``jump()`` moves it for all of them at once.
"""

from __future__ import annotations

import atexit
import hashlib
import mmap
import os
import pathlib
import shutil
import struct
import subprocess
import tempfile

__all__ = ["ClockUnavailable", "WallClock", "preload_library"]

SOURCE = pathlib.Path(__file__).with_name("clockshift.c")
_OFFSET = struct.Struct("<q")  # nanoseconds, the shim reads the file's first 8 bytes


class ClockUnavailable(RuntimeError):
    """The shim cannot be built (no C compiler): the scenario fails, it does not skip."""


def _shared_directory(prefix: str) -> pathlib.Path:
    # Servers may run as another user (PostgreSQL runs as postgres): they must be able to
    # load the library and read the offset.
    directory = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    directory.chmod(0o755)
    return directory


_built: dict[str, pathlib.Path] = {}


def preload_library() -> pathlib.Path:
    """``clockshift.c`` compiled, once per source version and harness process."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    library = _built.get(digest)
    if library is not None and library.exists():
        return library
    directory = _shared_directory("tenure-clockshift-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    library = directory / f"clockshift-{digest}.so"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ClockUnavailable("no C compiler to build safety/clockshift.c: run "
                               "scripts/install-servers (it installs gcc)")
    built = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(library),
         str(SOURCE)],
        capture_output=True, text=True, check=False,
    )
    if built.returncode != 0:
        raise ClockUnavailable(f"building {SOURCE.name} failed: {built.stderr[-2000:]}")
    library.chmod(0o755)
    _built[digest] = library
    return library


class WallClock:
    """One wall clock, shared by the processes started with ``env()``; starts true."""

    def __init__(self, name: str = "clock") -> None:
        self.library = preload_library()
        self.directory = _shared_directory(f"tenure-{name}-")
        self.path = self.directory / "offset"
        self.path.write_bytes(_OFFSET.pack(0))
        self.path.chmod(0o644)
        with self.path.open("r+b") as file:
            # Written through a shared mapping: one aligned 8-byte store, never a torn value.
            self._mapped = mmap.mmap(file.fileno(), _OFFSET.size)
        self.offset = 0.0

    def env(self) -> dict[str, str]:
        """Environment for a process whose wall clock this is."""
        preload = " ".join(filter(None, [str(self.library), os.environ.get("LD_PRELOAD")]))
        return {"LD_PRELOAD": preload, "TENURE_CLOCK_SHIFT_FILE": str(self.path)}

    def jump(self, seconds: float) -> None:
        """Move the clock by ``seconds`` (forward if positive), for every process at once."""
        self.offset += seconds
        _OFFSET.pack_into(self._mapped, 0, round(self.offset * 1e9))

    def close(self) -> None:
        self._mapped.close()
        shutil.rmtree(self.directory, ignore_errors=True)
