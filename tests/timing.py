"""Durations for tests whose outcome depends on a process getting the CPU in time.

A test that holds a 0.5 s lease with renewal on, and checks that it is still held, needs
the renewer to run every 0.17 s. On an idle machine it does; beside pytest-xdist's other
workers, servers and a benchmark, a process can wait longer than that for a core, and the
lease is lost as the product promises it would be. Such a test is still meant to pass, so
it takes its lease and its waits from ``scaled``: the idle-machine figure times how many
runnable processes each core has now. Bounds that a test asserts about the product scale
the same way; an ordering or a count never does.
"""

from __future__ import annotations

import os

__all__ = ["RENEWED_FOR", "load_factor", "renewed_ttl", "scaled", "short_lease"]

# Beyond this the test's own time grows without telling more; a machine that loaded is
# not one the suite promises to pass on.
_MOST = 8.0


def load_factor() -> float:
    """How many processes want each core now: the larger of the last minute's load average
    and the processes runnable at this instant, per core; at least 1."""
    cores = os.cpu_count() or 1
    with open("/proc/loadavg") as loadavg:
        fields = loadavg.read().split()
    runnable = int(fields[3].split("/")[0]) - 1  # this process is one of them
    return min(_MOST, max(1.0, float(fields[0]) / cores, runnable / cores))


def scaled(seconds: float) -> float:
    """``seconds`` on an idle machine, stretched by the load now (see the module's text)."""
    return seconds * load_factor()


RENEWED_FOR = 1.5
"""How many of its ttls a test keeps a renewed lease before checking it is still held: past
its first ttl (so only renewals can have kept it), four renewals in (one every third)."""


def renewed_ttl() -> float:
    """The ttl of a lease a test keeps alive by renewal: a second on an idle machine,
    scaled. A renewal is due a third of the ttl in, so one that the machine delays by up to
    two thirds of it is still in time; a 0.5 s lease left a 0.33 s margin, which a burst of
    the suite's own load (56 runnable processes on 2 cores, seen in a run) could use up at
    a moment when ``scaled`` saw a quiet machine."""
    return scaled(1.0)


def short_lease() -> float:
    """The ttl of a lease a test lets run out, which must still refuse the call made right
    after its grant: that call's time on an idle machine, scaled, plus room for a store that
    waits out a lease in its last quarter second instead of racing its lapse (ZooKeeper's
    refusals: then the call is granted, not refused). A fixed 0.3 s lease was within that
    quarter second by the next call on a loaded run (CI, stop 31), and the call was granted."""
    return scaled(0.3) + 0.3
