"""The MongoDB documents of read-write and fair locks: filters and pipeline updates, shared by
both flavours. Nothing here does I/O.

One document per read-write lock name (a fair lock is the write side of the read-write lock
of the same name), in the collection ``{collection}.rwlocks``::

    {
        "_id": NAME,            # the lock's name, a plain string
        "fence": <int64>,       # the last fence issued, to reads and writes alike; never goes
                                # back (a grant's is at least the server's clock in
                                # microseconds), kept across releases and breaks
        "next_seq": <int64>,    # the last arrival position handed to a waiting place
        "leases": [             # the holders, in grant order
            {"token": <str>, "mode": "read" | "write", "expires_at": <date>,
             "fence": <int64>, "acquired_at": <date>, "host": <str>, "pid": <int>,
             "thread": <str>, "fair": <bool>},
        ],
        "places": [             # the waiters, in arrival order (a refresh keeps a place's spot)
            {"token": <str>, "mode": "read" | "write", "seq": <int64>, "expires_at": <date>,
             "placed_at": <date>, "host": <str>, "pid": <int>, "thread": <str>,
             "fair": <bool>},
                                # (who waits, since when: ``tenure show`` lists them; a
                                # place an older tenure wrote has none, its waiter unknown)
        ],
        "updated_at": <date>,   # the server's clock at the last acquire: a Busy's time left is
                                # a holder's expiry less this, both read from one after-image
        "gc_at": <date>,        # TTL index: the document may be deleted after this
    }

``fair`` is true on a fair lock's lease or place (false on a read-write lock's; an entry
without it, written by a tenure from before it, is a read-write lock's too): it names the
primitive for ``inspect`` only, no grant reads it.

The rules of ``_documents`` hold here too: time is ``$$NOW``, names only appear as ``_id``
equality (or range bounds), every other caller-chosen string written or compared by a
pipeline is wrapped in ``$literal``. Every update drops the leases and places whose expiry has
passed, so a crashed holder or waiter stops counting once its lease ends.

Operators are kept to those the MongoDB stand-in the tests run on (mongoeco) understands as
well as MongoDB 4.2+: ``$filter``, ``$map``, ``$in``, ``$size``, ``$concatArrays``,
``$mergeObjects``, ``$cond``, ``$ifNull``, ``$reduce``, ``$max`` of numbers; no ``$not``
(compared ``$eq`` false), no ``$max`` over an array of dates (the stand-in answers null).
"""

from __future__ import annotations

from typing import Any

from tenure._types import Holder, Mode
from tenure.backends.mongodb._documents import name_filter, next_fence

WRITE = Mode.WRITE.value

__all__ = [
    "acquire_queued_update",
    "break_queue_filter",
    "break_update",
    "extend_lease_update",
    "has_entry",
    "live_entries",
    "queue_info_pipeline",
    "release_update",
]

Document = dict[str, Any]
Pipeline = list[Document]

_SCRATCH = (
    "tenure_leases", "tenure_places", "tenure_mine", "tenure_queued", "tenure_seq",
    "tenure_ahead", "tenure_grant",
)


def live_entries(source: str) -> Document:
    """The leases or places of ``source`` whose expiry is still in the server's future."""
    return {"$filter": {
        "input": {"$ifNull": [source, []]}, "as": "e",
        "cond": {"$gt": ["$$e.expires_at", "$$NOW"]},
    }}


def _without(source: Any, token: str) -> Document:
    return {"$filter": {
        "input": source, "as": "e", "cond": {"$ne": ["$$e.token", {"$literal": token}]},
    }}


def _restarted(source: Any, token: str, expires_at: Document) -> Document:
    """``source`` with the entry of ``token`` given a new expiry (its other fields kept)."""
    return {"$map": {"input": source, "as": "e", "in": {"$cond": [
        {"$eq": ["$$e.token", {"$literal": token}]},
        {"$mergeObjects": ["$$e", {"expires_at": expires_at}]},
        "$$e",
    ]}}}


def _gc_stage(gc_after_ms: int) -> Document:
    """The last stage of every update: the clean-up date is ``gc_after`` past the end of the
    last lease or place still in the record (or past now when none is), so a record is never
    deleted while anything in it could be live, and an unused one goes ``gc_after`` after
    its last entry ended."""
    # ($reduce with a binary $max: the stand-in's $max over an array of dates answers null.)
    latest: Document = {"$reduce": {
        "input": {"$concatArrays": [
            {"$ifNull": ["$leases.expires_at", []]}, {"$ifNull": ["$places.expires_at", []]},
        ]},
        "initialValue": "$$NOW",
        "in": {"$max": ["$$value", "$$this"]},
    }}
    return {"$set": {"gc_at": {"$add": [latest, gc_after_ms]}}}


def has_entry(name: str, token: str) -> Document:
    """Matches the record ``name`` while ``token`` has a lease or a place in it, live or not.
    (A query filter, where a string is compared as data.)"""
    return {"_id": name, "$or": [{"leases.token": token}, {"places.token": token}]}


# Used as ONE find_one_and_update(filter={_id: NAME}, upsert=True, return_document=AFTER).
# Inputs: TOKEN, MODE ("read" / "write"), TTL_MS, QUEUE_TTL_MS, the holder, GC_AFTER_MS.
# Stage 1 keeps the live leases and places. Stage 2 asks: does TOKEN hold a live lease
# ("mine": a retry after a lost reply), has it a place, and at which arrival position.
# Stage 3 takes the places ahead of TOKEN (those that arrived before its place; all of them
# when it has none) and judges the grant: a write needs no live holder and no place ahead; a
# read needs no live write holder and no write place ahead. Stage 4 sets the fence to
# max(fence + 1, $$NOW in microseconds) on a grant and bumps the arrival counter when a new
# place is handed out. Stage 5 writes: on a grant the live
# leases plus TOKEN's (mode, $$NOW + TTL_MS, the new fence, the holder) and the live places
# less TOKEN's; on "mine" TOKEN's lease restarted; otherwise TOKEN's place refreshed to
# $$NOW + QUEUE_TTL_MS where it stands, or added at the tail. Stage 6 removes the scratch;
# a last one (with GC_AFTER_MS) sets the clean-up date.
# Output: the after-image: granted iff TOKEN is among its leases (that lease's fence is the
# grant's); else its leases' expiries less its updated_at ($$NOW of this step) are the
# holders' time left. Two upserts racing on an absent document can fail the loser with
# duplicate key error 11000: the document exists then, so try once more.
# Atomic: a single-document write, so no other step on NAME interleaves.
def acquire_queued_update(
    token: str,
    holder: Holder,
    *,
    mode: str,
    ttl_ms: int,
    queue_ttl_ms: int,
    gc_after_ms: int | None,
    fair: bool = False,
) -> Pipeline:
    me: Document = {"$literal": token}
    leases, places = "$tenure_leases", "$tenure_places"
    new_lease: Document = {
        "token": me, "mode": {"$literal": mode}, "expires_at": {"$add": ["$$NOW", ttl_ms]},
        "fence": "$fence", "acquired_at": "$$NOW", "host": {"$literal": holder.host},
        "pid": {"$literal": holder.pid}, "thread": {"$literal": holder.thread},
        "fair": {"$literal": fair},
    }
    place_expires: Document = {"$add": ["$$NOW", queue_ttl_ms]}
    new_place: Document = {
        "token": me, "mode": {"$literal": mode}, "seq": "$next_seq",
        "expires_at": place_expires, "placed_at": "$$NOW", "host": {"$literal": holder.host},
        "pid": {"$literal": holder.pid}, "thread": {"$literal": holder.thread},
        "fair": {"$literal": fair},
    }
    # Places are compared by arrival position; with no place of its own, all are ahead.
    ahead: Document = {"$filter": {"input": places, "as": "p", "cond": {"$or": [
        {"$eq": ["$tenure_queued", False]}, {"$lt": ["$$p.seq", "$tenure_seq"]},
    ]}}}
    no_write_ahead: Document = {"$eq": [{"$in": [WRITE, "$tenure_ahead.mode"]}, False]}
    if mode == WRITE:
        turn: Document = {"$and": [
            {"$eq": [{"$size": leases}, 0]}, {"$eq": [{"$size": "$tenure_ahead"}, 0]},
        ]}
    else:
        turn = {"$and": [
            {"$eq": [{"$in": [WRITE, f"{leases}.mode"]}, False]}, no_write_ahead,
        ]}
    fresh_place: Document = {"$and": [
        {"$eq": ["$tenure_grant", False]}, {"$eq": ["$tenure_mine", False]},
        {"$eq": ["$tenure_queued", False]},
    ]}
    written: Document = {
        "leases": {"$cond": [
            "$tenure_grant", {"$concatArrays": [leases, [new_lease]]},
            {"$cond": ["$tenure_mine",
                       _restarted(leases, token, {"$add": ["$$NOW", ttl_ms]}), leases]},
        ]},
        "places": {"$cond": [
            "$tenure_grant", _without(places, token),
            {"$cond": ["$tenure_mine", places, {"$cond": [
                "$tenure_queued", _restarted(places, token, place_expires),
                {"$concatArrays": [places, [new_place]]},
            ]}]},
        ]},
        "updated_at": "$$NOW",
    }
    pipeline: Pipeline = [
        {"$set": {"tenure_leases": live_entries("$leases"),
                  "tenure_places": live_entries("$places")}},
        {"$set": {
            "tenure_mine": {"$in": [me, f"{leases}.token"]},
            "tenure_queued": {"$in": [me, f"{places}.token"]},
            # The own place's arrival position (its only element), for "ahead" below.
            "tenure_seq": {"$max": {"$map": {
                "input": _only(places, token), "as": "p", "in": "$$p.seq",
            }}},
        }},
        {"$set": {"tenure_ahead": ahead}},
        {"$set": {"tenure_grant": {"$and": [{"$eq": ["$tenure_mine", False]}, turn]}}},
        {"$set": {
            "fence": {"$cond": [
                "$tenure_grant", next_fence(), {"$ifNull": ["$fence", 0]},
            ]},
            "next_seq": {"$add": [{"$ifNull": ["$next_seq", 0]},
                                  {"$cond": [fresh_place, 1, 0]}]},
        }},
        {"$set": written},
        {"$unset": list(_SCRATCH)},
    ]
    return _with_gc(pipeline, gc_after_ms)


def _only(source: Any, token: str) -> Document:
    return {"$filter": {
        "input": source, "as": "e", "cond": {"$eq": ["$$e.token", {"$literal": token}]},
    }}


# The update of ONE update_one that removes TOKEN's lease and place (and every lapsed entry).
# With ``holds_entry("leases", ...)`` as the filter, matched_count == 1 means TOKEN's lease
# was live and is gone; with has_entry, that TOKEN's lapsed lease or its place is gone. The
# fence is kept.
def release_update(token: str, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {
        "leases": _without(live_entries("$leases"), token),
        "places": _without(live_entries("$places"), token),
    }
    return _with_gc([{"$set": fields}], gc_after_ms)


# With ``holds_entry("leases", ...)`` as the filter of ONE update_one: restarts TOKEN's lease
# at $$NOW + TTL_MS.
def extend_lease_update(token: str, ttl_ms: int, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {
        "leases": _restarted(live_entries("$leases"), token, {"$add": ["$$NOW", ttl_ms]}),
    }
    return _with_gc([{"$set": fields}], gc_after_ms)


# With a filter matching NAME only while a lease is live, the update of ONE update_one that
# breaks every lease; the places (the queue) and the fence are kept.
def break_update(gc_after_ms: int | None) -> Pipeline:
    return _with_gc([{"$set": {"leases": []}}], gc_after_ms)


def _with_gc(pipeline: Pipeline, gc_after_ms: int | None) -> Pipeline:
    return pipeline if gc_after_ms is None else [*pipeline, _gc_stage(gc_after_ms)]


def queue_info_pipeline(match: Document) -> Pipeline:
    """``aggregate`` input: each record ``match`` selects, with its live leases, its live
    places (their waiters), their number (and that of those a fair lock's) and the server's
    time, as ``_records.to_info`` reads."""
    fair_places: Document = {"$filter": {
        "input": live_entries("$places"), "as": "p", "cond": {"$eq": ["$$p.fair", True]},
    }}
    return [
        {"$match": match},
        {"$sort": {"_id": 1}},
        {"$project": {
            "fence": 1, "leases": live_entries("$leases"), "places": live_entries("$places"),
            "queued": {"$size": live_entries("$places")},
            "fair_queued": {"$size": fair_places}, "now": "$$NOW",
        }},
    ]


def break_queue_filter(name: str) -> Document:
    """Matches the record ``name`` only while a lease of it is live (its places stay)."""
    return {**name_filter(name), "$expr": {"$gt": [{"$size": live_entries("$leases")}, 0]}}
