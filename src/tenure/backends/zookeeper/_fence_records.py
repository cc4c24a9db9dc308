"""The last fence of each name, written to the name's node without waiting.

A grant's fence is its node's ``czxid``; ``inspect`` reads the last one from the name's node,
whose data the grant raises to it. That write goes out beside the grant, not before its
answer (kazoo chains the steps in its own thread): ``record_soon`` returns a result that is
set once the number is there or nothing more can be done. Each write is versioned after a
read (or after our own last write) showing a lower number, so the data never goes back.
The version our last write made is remembered, so the next grant of a name this process
wrote tries without a read. Flavour-free: it runs on kazoo's thread, for either flavour.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException

from tenure.backends.zookeeper._calls import new_result, start

__all__ = ["RECORDS_KEPT", "FenceRecords"]

RECORDS_KEPT = 1024
"""How many names' fence writes ``record_soon`` remembers the version of."""


class FenceRecords:
    """This session's fence writes: each path's last number and the version it made."""

    def __init__(self) -> None:
        self._recorded: dict[str, tuple[int, int]] = {}
        """``record_soon``'s last write of each path: the number and the version it wrote,
        the version to try first next time (no read, when nobody else wrote since)."""

    def recorded(self, path: str) -> bool:
        """Whether ``record_soon`` wrote ``path`` before (and can try without a read)."""
        return path in self._recorded

    def recorded_version(self, path: str, fence: int) -> int | None:
        """The version our last write of ``path`` made, if it wrote a number below
        ``fence`` (None: unknown, read first)."""
        ours = self._recorded.get(path)
        return None if ours is None or ours[0] >= fence else ours[1]

    def remember(self, path: str, fence: int, version: int) -> None:
        """A write of ours of ``fence`` to ``path`` made ``version``."""
        self._recorded.pop(path, None)  # the newest last, the oldest dropped first
        self._recorded[path] = (fence, version)
        if len(self._recorded) > RECORDS_KEPT:
            self._recorded.pop(next(iter(self._recorded)), None)

    def record_soon(
        self, client: KazooClient, path: str, fence: int, version: int | None, *,
        guess: bool = True,
    ) -> Any:
        """Raise ``path``'s data (a decimal number) to ``fence`` unless it already is at
        least that, without waiting: a versioned set (``version``: the one read; None: the
        one our last write of it made, if ``guess`` and there was one, else read it first),
        read again and retried when another write came between. The steps chain in kazoo's
        thread; the result is a kazoo async result set (to True) once the number is there
        or nothing more can be done (a failure: the connection went, and with it every
        lease this was for). The data never goes back: every write is versioned after a
        read (or after our own write) showing a lower number."""
        done = new_result(client)
        if version is None and guess and (ours := self._recorded.get(path)) is not None:
            if ours[0] >= fence:
                done.set(True)  # we wrote a number at least as high: it cannot go back
                return done
            version = ours[1]

        def write(version: int) -> None:
            start(client, "set", path, str(fence).encode(), version=version).rawlink(written)

        def read() -> None:
            start(client, "get", path).rawlink(judge)

        def written(result: Any) -> None:
            if isinstance(result.exception, BadVersionError):
                read()  # another grant wrote it meanwhile: judge its number
                return
            if result.successful():
                self.remember(path, fence, result.get(block=False).version)
            done.set(True)

        def judge(result: Any) -> None:
            if not result.successful():
                done.set(True)
                return
            data, stat = result.get(block=False)
            if int(data or b"0") >= fence:
                done.set(True)
            else:
                write(stat.version)

        try:
            if version is None:
                read()
            else:
                write(version)
        except (KazooException, OSError):
            done.set(True)
        return done
