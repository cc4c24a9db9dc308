"""The requests tenure sends to etcd, as the JSON gateway's bodies and their parts (keys and
values base64, 64-bit integers as strings), and the reads of their answers. Flavour-free:
the store and its attempt (``_async``) put them together into transactions.

**The last fence.** A ``{kind}.fence`` key per name remembers the last fence granted, for
``inspect`` after release, written by the granting transaction itself:

- a first try that writes into a range with no key that blocks it puts the fence key with
  an empty value (``fence_here``): its mod revision, the transaction's revision, is the
  holder key's creation revision, and it is above every fence granted before (each was
  granted at a lower revision), so a plain put never moves the last fence back;
- a grant from the queue (or a semaphore's first try, whose rank is read after its write)
  writes the fence as the value (``fence_at``), zero-padded so that etcd's byte-wise compare
  orders it as a number, only if it is above the last fence recorded: a nested transaction
  compares the fence key's mod revision (an empty value's fence, and never below a written
  value's) and, when that is not below, the value (readers granted together take theirs in
  any order).

The last fence is the value when there is one, else the mod revision (``_records``); a value
written by an earlier release of tenure reads the same way.

**Its clean-up** (``gc_after``, DESIGN rule 10). A lock's grant puts the fence key on the
``gc_after`` lease itself (``AsyncEtcdBackend.fence_lease``: one shared by a tenth of
``gc_after`` of grants and releases, lasting ``gc_after`` past the last of them), so its
release only deletes the holder key; a release after that lease's margin (a hold longer than
the reuse) puts the fence key again, onto the current one, in a transaction guarded by the
holder key's creation revision (no later grant of a lock can exist before that key is gone).
A holder that dies leaves it for ``gc_after`` after its grant. A semaphore's or a read-write
lock's grant puts it on the holder's own lease, so a holder that dies or is broken takes it
along at its lease's end; a release moves it, in the release's own transaction, onto the
``gc_after`` lease (``fence_released``: only if the last fence recorded is this holder's, so
a later grant's record stays on that holder's lease). Either way a released name's fence
key goes ``gc_after`` after its last release. Nothing a removal does can make fences go
back: they are revisions, which never do; the key only lets ``inspect`` show the last fence of
a released name.
"""

from __future__ import annotations

from typing import Any

from tenure._types import Mode
from tenure.backends.etcd._keys import b64, entry_name, prefix_end

__all__ = [
    "JSON", "blocking", "created_at", "empty", "fence_at", "fence_here", "fence_released", "kvs",
    "newest_before", "none_before", "oldest", "put", "revision",
]

JSON = dict[str, Any]


def kvs(response: JSON) -> list[JSON]:
    """The keys of a range answer (alone, or one response of a transaction)."""
    found: list[JSON] = response.get("response_range", response).get("kvs", [])
    return found


def revision(answer: JSON) -> int:
    """The cluster's revision when it answered."""
    return int(answer["header"]["revision"])


def put(key: str, value: str, lease: str) -> JSON:
    return {"request_put": {"key": b64(key), "value": value, "lease": lease}}


def oldest(prefix: str, limit: int | None) -> JSON:
    """A read of the range's keys, oldest first (at most ``limit``)."""
    request: JSON = {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)),
        "sort_order": "ASCEND", "sort_target": "CREATE",
    }
    if limit is not None:
        request["limit"] = str(limit)
    return {"request_range": request}


def created_at(key: str, revision: int) -> JSON:
    """A compare that holds while ``key`` is the one created at ``revision``."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL",
            "create_revision": str(revision)}


def empty(prefix: str) -> JSON:
    """A compare that holds when no key starts with ``prefix``."""
    return created_at(prefix, 0) | {"range_end": b64(prefix_end(prefix))}


def newest_before(prefix: str, revision: int) -> JSON:
    """A read of the newest key of the range created before ``revision``: the one a waiter
    whose key was created at ``revision`` watches."""
    return {"request_range": {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)),
        "sort_order": "DESCEND", "sort_target": "CREATE",
        "max_create_revision": str(revision - 1), "limit": "1", "keys_only": True,
    }}


def none_before(prefix: str, revision: int) -> JSON:
    """A compare that holds when every key of the range was created at ``revision`` or
    later; etcd compares each key of a range. The range must hold the waiter's own key: on an
    empty range etcd compares a missing key (creation revision 0) and the compare fails."""
    return {"key": b64(prefix), "range_end": b64(prefix_end(prefix)), "target": "CREATE",
            "result": "GREATER", "create_revision": str(revision - 1)}


def blocking(prefix: str, mode: str) -> str:
    """The keys of a read-write lock name that a ``mode`` key waits behind, as one range:
    every key for a writer, the write keys for a reader."""
    return prefix if mode == Mode.WRITE else prefix + entry_name(Mode.WRITE, "")


def fence_here(fence_key: str, lease: str) -> JSON:
    """The put that makes this transaction's revision the name's last fence (the fence
    key's mod revision, its value empty): for a grant whose key this transaction creates,
    on ``lease`` (a lock's: the ``gc_after`` lease, "0" for none; else the holder's)."""
    return {"request_put": {"key": b64(fence_key), "value": "", "lease": lease}}


def fence_at(fence_key: str, fence: int, lease: str | None) -> JSON:
    """A nested transaction that records ``fence`` as the name's last fence, on ``lease``
    (a lock's: the ``gc_after`` lease; else the holder's; None: on none), unless a later one
    is recorded (module docstring): a missing key's mod revision is 0."""
    key = b64(fence_key)
    value = b64(f"{fence:020d}")
    put: JSON = {"key": key, "value": value}
    if lease is not None:
        put["lease"] = lease
    written = {"request_put": put}
    if_above_value = {"request_txn": {
        # A value below ours, and not empty (an empty value's fence is its mod revision,
        # which is not below ours here): "" compares below every value.
        "compare": [
            {"key": key, "target": "VALUE", "result": "GREATER", "value": ""},
            {"key": key, "target": "VALUE", "result": "LESS", "value": value},
        ],
        "success": [written],
    }}
    return {"request_txn": {
        "compare": [{"key": key, "target": "MOD", "result": "LESS",
                     "mod_revision": str(fence)}],
        "success": [written],
        "failure": [if_above_value],
    }}


def fence_released(
    fence_key: str, fence: int, lease: str | None, *, record: bool = False
) -> JSON:
    """A nested transaction for the holder granted ``fence``: if the name's last fence
    recorded is that one (an empty value whose mod revision is ``fence``, or the value
    ``fence``), it moves onto ``lease``, written as the value (a put moves the mod
    revision): at a release, the ``gc_after`` lease (None: no lease, kept for ever); when
    the holder key moves to a new lease (a new ttl), that one. A later fence recorded, or
    none (gone with its lease), is left as it is; with ``record`` (a semaphore's permit,
    whose first try leaves the recording to its release), a fence key that records
    neither this fence nor a later one gets this one, on ``lease`` (``fence_at``)."""
    key = b64(fence_key)
    written: JSON = {"key": key, "value": b64(f"{fence:020d}")}
    if lease is not None:
        written["lease"] = lease
    as_value = {"request_txn": {
        "compare": [{"key": key, "target": "VALUE", "result": "EQUAL",
                     "value": b64(f"{fence:020d}")}],
        "success": [{"request_put": written}],
        "failure": [fence_at(fence_key, fence, lease)] if record else [],
    }}
    return {"request_txn": {
        "compare": [
            {"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(fence)},
            {"key": key, "target": "VALUE", "result": "EQUAL", "value": ""},
        ],
        "success": [{"request_put": written}],
        "failure": [as_value],
    }}
