"""``python -m tenure``: the ``tenure`` command."""

from __future__ import annotations

import sys

from tenure.cli.main import main

if __name__ == "__main__":  # multiprocessing's spawn imports this module as __mp_main__
    sys.exit(main())
