"""Redlock's connections: one Redis transport (the Redis wing's, one pool) per node, and the
fan-out that asks every node at once and hands back each node's answer or driver error. The
only code of this wing that touches the driver.

A node that answers and refuses us (a wrong or missing password, an ACL user barred from the
scripts, a replica: ``misconfigured``) is not a node that is down: counted as one, a team would
run on a bare majority with no fault tolerance left, and nothing would say so. The store's
acquire (after undoing its grants on the other nodes), inspect, owned, list and break raise
ConfigurationError naming the node (``refusal``); release and renewals, which end or keep a
lease already granted, count it as not answering and log a WARNING naming it (``warn``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tenure._concurrency import async_io as io
from tenure._errors import ConfigurationError
from tenure._types import LockInfo
from tenure.backends.redis._async import AsyncTransport, open_transport
from tenure.backends.redis._records import decode_info
from tenure.backends.redis._scripts import INSPECT, RELEASE, LockKeys
from tenure.backends.redlock._config import RedlockSettings
from tenure.backends.redlock._errors import DRIVER_ERRORS, misconfigured

__all__ = ["AsyncNodes"]

T = TypeVar("T")
logger = logging.getLogger("tenure")


class AsyncNodes:
    """Every node of one Redlock URL."""

    def __init__(self, settings: RedlockSettings) -> None:
        self.settings = settings
        self._nodes: list[AsyncTransport] = [open_transport(node) for node in settings.nodes]
        self.count = len(self._nodes)

    async def each(
        self,
        call: Callable[[AsyncTransport], Awaitable[T]],
        nodes: Sequence[int] | None = None,
        *,
        action: str | None = None,
    ) -> list[T | Exception]:
        """``call`` on every node (or those indexed by ``nodes``) at once; a node's driver
        error is its result. Anything else (a bug) is raised. With ``action``, a node that
        refuses us raises ConfigurationError once every node answered."""
        indexes = list(range(self.count) if nodes is None else nodes)
        targets = [self._nodes[i] for i in indexes]
        results = await io.gather([functools.partial(call, node) for node in targets])
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, DRIVER_ERRORS):
                raise result
        if action is not None:
            refused = self.refusal(action, indexes, results)
            if refused is not None:
                raise refused
        return results

    def refusal(
        self, action: str, indexes: Sequence[int], results: Sequence[object]
    ) -> ConfigurationError | None:
        """The error for the first node whose answer says it refuses us, if any, with the
        driver's error as its cause."""
        for index, result in zip(indexes, results, strict=True):
            if isinstance(result, BaseException) and misconfigured(result):
                detail = str(result) or type(result).__name__
                refused = ConfigurationError(
                    f"Redlock node {self.settings.nodes[index].display} refused {action} "
                    f"({type(result).__name__}: {detail.rstrip('.')}): a node that refuses our "
                    "password, user or commands is misconfigured, not down, and is not "
                    "counted as one that did not answer; fix its credentials or ACL (or "
                    "list its master, not a replica)"
                )
                refused.__cause__ = result
                return refused
        return None

    def warn(self, action: str, results: Sequence[object]) -> None:
        """Log a node that refuses us, counted as one that did not answer."""
        refused = self.refusal(action, range(self.count), results)
        if refused is not None:
            logger.warning("tenure: %s; counted as a node that did not answer", refused)

    async def release_everywhere(self, keys: LockKeys, token: str) -> list[Any]:
        """RELEASE on every node; each node's answer, or its error (never raised)."""
        return await self.each(
            lambda node: node.script(RELEASE, (keys.lease, keys.wake), (token,))
        )

    async def records(self, pattern: str) -> list[dict[str, LockInfo] | Exception]:
        """Every node's lock records whose meta key matches ``pattern``, by name (each node
        scanned page by page, never KEYS), or its error."""
        return await self.each(functools.partial(_node_records, pattern=pattern),
                               action="list locks")

    async def aclose(self) -> None:
        # Closing only drops connections; a node's error here changes nothing for anybody.
        await self.each(lambda node: node.aclose())


async def _node_records(node: AsyncTransport, *, pattern: str) -> dict[str, LockInfo]:
    found: dict[str, LockInfo] = {}
    for page in await node.scan(pattern):
        metas = [key.decode() if isinstance(key, bytes) else key for key in page]
        replies = await node.scripts([(INSPECT, (meta, f"{meta}:lease"), ()) for meta in metas])
        for reply in replies:
            info = decode_info(reply)
            if info is not None:
                found[info.name] = info
    return found
