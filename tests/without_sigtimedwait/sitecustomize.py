"""Python as on macOS, where ``signal.sigtimedwait`` does not exist: put this directory on
PYTHONPATH to run any test (and every ``tenure`` it starts) that way, e.g.

    PYTHONPATH=tests/without_sigtimedwait .venv/bin/pytest tests/unit/test_cli_*.py \\
        tests/integration/test_cli_*.py
"""

import signal

if hasattr(signal, "sigtimedwait"):
    del signal.sigtimedwait
