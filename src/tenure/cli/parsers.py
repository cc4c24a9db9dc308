"""The argparse parts every ``tenure`` parser shares: help laid out for the terminal, the
exit status table and the manual's address its epilogs end with, and usage errors reported
on one line like every other error."""

from __future__ import annotations

import argparse
import shutil
from typing import NoReturn

from tenure.cli import (
    EXIT_BUSY,
    EXIT_LOST,
    EXIT_SOFTWARE,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CommandError,
)

__all__ = ["EXIT_STATUSES", "MANUAL_URL", "Formatter", "Parser"]

# The manual on the documentation site: docs/ is not in the wheel, so --help cannot point
# there (the site is built from docs/cli.md).
MANUAL_URL = "https://tenure-dev.github.io/tenure/cli/"

EXIT_STATUSES = f"""\
exit status:
  0     success (run: the command's own status)
  1     break: nothing was held; show: no such lock; demo: the locked run was not exact
  {EXIT_USAGE}     bad input: arguments, lock name, ttl, URL, backend option
  {EXIT_UNAVAILABLE}    the backend is unreachable or failing
  {EXIT_SOFTWARE}    internal error (a bug: please report it; TENURE_DEBUG=1 shows the traceback)
  {EXIT_BUSY}    run: the lock was not obtained; nothing was run (--busy-exit-code)
  {EXIT_LOST}    run: the lease was lost while the command ran; it was terminated
        (--lost-exit-code)
  126   run: the command could not be executed; 127: not found
  128+N run: the command died of signal N, or tenure got signal N while waiting
"""


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions (one paragraph) are wrapped to the terminal; epilogs (tables, examples,
    laid out by hand with newlines) are kept as written."""

    def __init__(self, prog: str) -> None:
        # argparse reads $COLUMNS, else the terminal, else 80; past 100 lines get hard to read.
        width = min(shutil.get_terminal_size().columns, 100) - 2
        super().__init__(prog, width=width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return super()._fill_text(text, width, indent)
        return argparse.HelpFormatter._fill_text(self, text, width, indent)


class Parser(argparse.ArgumentParser):
    """Usage errors become one line of stderr (no usage dump), like every other error."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)
