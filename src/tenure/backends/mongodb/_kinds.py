"""Each kind's statements, side by side, so that the store writes each verb once (both
flavours; nothing here does I/O).

A kind's records live in their own collection (locks in ``{collection}``, semaphores in
``{collection}.semaphores``, read-write and fair locks in ``{collection}.rwlocks``), so a
lock and a semaphore of one name never meet. Per kind: the acquire pipeline and how its
after-image answers; the filter matching a token's live lease; the release, extend and break
updates; the info pipeline (read by ``_records.to_info``); the key in-process waiters wait
under. The statements' contracts are in the modules they come from.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable
from typing import Any

from tenure._types import Holder, Kind, LeaseSpec
from tenure._waiters import permit_key, queue_key
from tenure.backends.mongodb import _documents, _rwlocks, _semaphores
from tenure.backends.mongodb._documents import Document, Pipeline, milliseconds
from tenure.backends.mongodb._records import utc

__all__ = ["STATEMENTS", "Statements", "acquire_pipeline", "granted_fence", "soonest_expiry"]


@dataclasses.dataclass(frozen=True, slots=True)
class Statements:
    """One kind's filters and updates (each a function of the verb's data)."""

    collection_suffix: str
    wake_key: Callable[[str], str]
    holds: Callable[[str, str], Document]
    """(name, token): matches while token holds a live lease of name."""
    release: Callable[[str, int | None], Pipeline]
    """(token, gc_after_ms): drops token's lease (and place)."""
    leftover: Callable[[str, str], Document] | None
    """(name, token): where a release that found no live lease still tidies token's lapsed
    lease or waiting place (with the same ``release`` update); None: nothing to tidy."""
    extend: Callable[[str, int, int | None], Pipeline]
    """(token, ttl_ms, gc_after_ms): restarts token's lease."""
    break_filter: Callable[[str], Document]
    break_update: Callable[[int | None], Pipeline]
    info: Callable[[Document], Pipeline]


STATEMENTS: dict[Kind, Statements] = {
    Kind.LOCK: Statements(
        collection_suffix="",
        wake_key=lambda name: name,
        holds=_documents.held_by,
        release=lambda token, gc_after_ms: _documents.free_update(gc_after_ms),
        leftover=None,
        extend=lambda token, ttl_ms, gc_after_ms: _documents.extend_update(ttl_ms, gc_after_ms),
        break_filter=_documents.break_filter,
        break_update=_documents.free_update,
        info=_documents.info_pipeline,
    ),
    Kind.SEMAPHORE: Statements(
        collection_suffix=".semaphores",
        wake_key=permit_key,
        holds=functools.partial(_documents.holds_entry, "permits"),
        release=_semaphores.release_permit_update,
        # An expired permit, or a waiter's place (one giving up): only the token's own owner
        # ever adds either, so nothing can come between the two updates.
        leftover=_semaphores.has_permit_or_place,
        extend=_semaphores.extend_permit_update,
        break_filter=_semaphores.break_permits_filter,
        break_update=lambda gc_after_ms: _semaphores.break_permits_update(),
        info=_semaphores.semaphore_info_pipeline,
    ),
    Kind.RWLOCK: Statements(
        collection_suffix=".rwlocks",
        wake_key=queue_key,
        holds=functools.partial(_documents.holds_entry, "leases"),
        release=_rwlocks.release_update,
        # A waiter leaving, or a lease that lapsed: only the token's own owner ever adds
        # either, so nothing can come between the two updates.
        leftover=_rwlocks.has_entry,
        extend=_rwlocks.extend_lease_update,
        break_filter=_rwlocks.break_queue_filter,
        break_update=_rwlocks.break_update,
        info=_rwlocks.queue_info_pipeline,
    ),
}


def acquire_pipeline(
    spec: LeaseSpec, token: str, ttl: float, holder: Holder, gc_after_ms: int | None
) -> Pipeline:
    """The ONE find_one_and_update (upsert, after-image) that takes a lease of ``spec``."""
    if spec.kind is Kind.SEMAPHORE:
        return _semaphores.acquire_permit_update(
            token, milliseconds(ttl), spec.limit, holder, gc_after_ms, weight=spec.weight,
            queue_ttl_ms=None if spec.queue_ttl is None else milliseconds(spec.queue_ttl),
        )
    if spec.kind is Kind.RWLOCK:
        assert spec.mode is not None and spec.queue_ttl is not None
        return _rwlocks.acquire_queued_update(
            token, holder, mode=spec.mode.value, ttl_ms=milliseconds(ttl),
            queue_ttl_ms=milliseconds(spec.queue_ttl), gc_after_ms=gc_after_ms,
            fair=spec.fair,
        )
    return _documents.acquire_update(
        token, milliseconds(ttl), holder, gc_after_ms, value=spec.value
    )


def _leases(kind: Kind, document: Document) -> list[dict[str, Any]]:
    if kind is Kind.LOCK:
        return [document] if document.get("token") is not None else []
    return list(document.get("permits" if kind is Kind.SEMAPHORE else "leases") or [])


def granted_fence(kind: Kind, document: Document, token: str) -> int | None:
    """The fence of ``token``'s lease in an acquire's after-image; None if refused."""
    mine = next((lease for lease in _leases(kind, document) if lease.get("token") == token),
                None)
    return None if mine is None else int(mine["fence"])


def soonest_expiry(kind: Kind, document: Document) -> datetime.datetime | None:
    """When the first lease in a refusing after-image ends, by the server's clock."""
    ends = [end for lease in _leases(kind, document)
            if (end := utc(lease.get("expires_at"))) is not None]
    return min(ends, default=None)
