"""The harness's pause (SIGSTOP) must stop a server whose processes fork while it is being
stopped: a PostgreSQL postmaster forks a backend per connection, and a child forked after
the list was read but before its parent's stop got no signal (CI once waited 10 s on one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.servers._process import descendants, stop_processes, thread_states

FORKER = """
import os, time
for _ in range(2000):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(0.002)
time.sleep(60)
"""


def _family(root: int) -> list[int]:
    return [root, *descendants(root)]


def test_a_child_forked_while_stopping_is_stopped_too() -> None:
    forker = subprocess.Popen([sys.executable, "-c", FORKER], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(_family(forker.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(5):  # several rounds: each one is a chance to fork mid-stop
            stop_processes(lambda: _family(forker.pid), timeout=5.0)
            pids = _family(forker.pid)
            assert len(pids) > 1
            states = [state for pid in pids for state in thread_states(pid)]
            assert states and all(state in ("T", "t", "Z") for state in states)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
    finally:
        os.killpg(forker.pid, signal.SIGKILL)
        forker.wait(10)
