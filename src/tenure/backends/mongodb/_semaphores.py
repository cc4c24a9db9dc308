"""The MongoDB documents of semaphores: filters and pipeline updates, shared by both flavours.
Nothing here does I/O.

One document per semaphore name, in the collection ``{collection}.semaphores``::

    {
        "_id": NAME,            # the semaphore's name, a plain string
        "fence": <int64>,       # the last fence issued; never goes back (a grant's is at
                                # least the server's clock in microseconds), kept across releases
        "limit": <int>,         # the limit the live permits were taken with
        "permits": [            # the permits, each a lease of its own
            {"token": <str>, "expires_at": <date>, "fence": <int64>,
             "acquired_at": <date>, "host": <str>, "pid": <int>, "thread": <str>},
        ],
        "gc_at": <date>,        # TTL index: the document may be deleted after this
    }

The rules of ``_documents`` hold here too: time is ``$$NOW``, names only appear as ``_id``
equality (or range bounds), every other caller-chosen string written by a pipeline is wrapped
in ``$literal``. Every update drops the permits whose expiry has passed, so a crashed
holder's permit is free once its lease ends.
"""

from __future__ import annotations

from typing import Any

from tenure._types import Holder
from tenure.backends.mongodb._documents import name_filter, next_fence

__all__ = [
    "acquire_permit_update",
    "break_permits_filter",
    "break_permits_update",
    "extend_permit_update",
    "live_permits",
    "release_permit_update",
    "semaphore_info_pipeline",
]

Document = dict[str, Any]
Pipeline = list[Document]

_SCRATCH = ("tenure_live", "tenure_mine", "tenure_grant")


def live_permits(source: str = "$permits") -> Document:
    """The permits of ``source`` whose expiry is still in the server's future."""
    return {"$filter": {
        "input": {"$ifNull": [source, []]}, "as": "p",
        "cond": {"$gt": ["$$p.expires_at", "$$NOW"]},
    }}


# Used as ONE find_one_and_update(filter={_id: NAME}, upsert=True, return_document=AFTER).
# Inputs: TOKEN, TTL_MS, LIMIT, the holder, GC_AFTER_MS. Stage 1 keeps the live permits;
# stage 2 judges: ours is live (a retry), or a grant is allowed (fewer than LIMIT live, and
# none live under another limit); stage 3 sets the fence to max(fence + 1, $$NOW in
# microseconds) and stores LIMIT on a grant;
# stage 4 writes the permits: the live ones plus ours (a grant), with ours restarted (a
# retry), or just the live ones. Output: the after-image: granted iff TOKEN is among its
# permits (that permit's fence is the grant's); else its limit tells a refused limit from a
# full semaphore. Two upserts racing on an absent document can fail the loser with duplicate
# key error 11000: try again. Atomic: a single-document write.
def acquire_permit_update(
    token: str, ttl_ms: int, limit: int, holder: Holder, gc_after_ms: int | None
) -> Pipeline:
    live = "$tenure_live"
    expires_at: Document = {"$add": ["$$NOW", ttl_ms]}
    ours: Document = {"$eq": ["$$p.token", {"$literal": token}]}
    new_permit: Document = {
        "token": {"$literal": token}, "expires_at": expires_at, "fence": "$fence",
        "acquired_at": "$$NOW", "host": {"$literal": holder.host},
        "pid": {"$literal": holder.pid}, "thread": {"$literal": holder.thread},
    }
    restarted: Document = {"$map": {"input": live, "as": "p", "in": {
        "$cond": [ours, {"$mergeObjects": ["$$p", {"expires_at": expires_at}]}, "$$p"],
    }}}
    written: Document = {
        "permits": {"$cond": [
            "$tenure_grant", {"$concatArrays": [live, [new_permit]]},
            {"$cond": ["$tenure_mine", restarted, live]},
        ]},
    }
    if gc_after_ms is not None:
        written["gc_at"] = {"$cond": [
            {"$or": ["$tenure_grant", "$tenure_mine"]},
            {"$add": ["$$NOW", ttl_ms + gc_after_ms]},
            {"$ifNull": ["$gc_at", {"$add": ["$$NOW", gc_after_ms]}]},
        ]}
    count: Document = {"$size": live}
    return [
        {"$set": {"tenure_live": live_permits()}},
        {"$set": {
            "tenure_mine": {"$in": [{"$literal": token}, f"{live}.token"]},
            "tenure_grant": {"$and": [
                # ($eq false, not $not: the MongoDB stand-in lacks $not)
                {"$eq": [{"$in": [{"$literal": token}, f"{live}.token"]}, False]},
                {"$lt": [count, limit]},
                {"$or": [{"$eq": [count, 0]}, {"$eq": ["$limit", limit]}]},
            ]},
        }},
        {"$set": {
            "fence": {"$cond": [
                "$tenure_grant", next_fence(), {"$ifNull": ["$fence", 0]},
            ]},
            "limit": {"$cond": ["$tenure_grant", limit, "$limit"]},
        }},
        {"$set": written},
        {"$unset": list(_SCRATCH)},
    ]


# With ``holds_entry("permits", ...)`` as the filter of ONE update_one: removes our permit
# (and the expired ones); matched_count == 1 means it was live and is gone.
def release_permit_update(token: str, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {"permits": {"$filter": {
        "input": live_permits(), "as": "p",
        "cond": {"$ne": ["$$p.token", {"$literal": token}]},
    }}}
    if gc_after_ms is not None:
        fields["gc_at"] = {"$add": ["$$NOW", gc_after_ms]}
    return [{"$set": fields}]


# With ``holds_entry("permits", ...)`` as the filter of ONE update_one: restarts our permit
# at $$NOW + TTL_MS.
def extend_permit_update(token: str, ttl_ms: int, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {"permits": {"$map": {"input": live_permits(), "as": "p", "in": {
        "$cond": [
            {"$eq": ["$$p.token", {"$literal": token}]},
            {"$mergeObjects": ["$$p", {"expires_at": {"$add": ["$$NOW", ttl_ms]}}]},
            "$$p",
        ],
    }}}}
    if gc_after_ms is not None:
        fields["gc_at"] = {"$max": [
            {"$ifNull": ["$gc_at", "$$NOW"]}, {"$add": ["$$NOW", ttl_ms + gc_after_ms]},
        ]}
    return [{"$set": fields}]


def semaphore_info_pipeline(match: Document) -> Pipeline:
    """``aggregate`` input: each semaphore ``match`` selects, with its live permits and the
    server's time, as ``_records.to_info`` reads (the permits as ``leases``)."""
    return [
        {"$match": match},
        {"$sort": {"_id": 1}},
        {"$project": {"fence": 1, "limit": 1, "leases": live_permits(), "now": "$$NOW"}},
    ]


def break_permits_filter(name: str) -> Document:
    """Matches the semaphore ``name`` only while a permit of it is live."""
    return {**name_filter(name), "$expr": {"$gt": [{"$size": live_permits()}, 0]}}


def break_permits_update() -> Pipeline:
    """With ``break_permits_filter`` in ONE update_one: every permit goes, the fence stays."""
    return [{"$set": {"permits": []}}]
