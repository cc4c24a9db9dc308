"""The MongoDB documents of semaphores: filters and pipeline updates, shared by both flavours.
Nothing here does I/O.

One document per semaphore name, in the collection ``{collection}.semaphores``::

    {
        "_id": NAME,            # the semaphore's name, a plain string
        "fence": <int64>,       # the last fence issued; never goes back (a grant's is at
                                # least the server's clock in microseconds), kept across releases
        "limit": <int>,         # the limit the live permits were taken with
        "permits": [            # the permits, each a lease of its own
            {"token": <str>, "expires_at": <date>, "fence": <int64>, "weight": <int>,
             "acquired_at": <date>, "host": <str>, "pid": <int>, "thread": <str>},
        ],                      # (a permit an older tenure wrote has no weight: it takes 1)
        "next_seq": <int64>,    # the last arrival position handed to a waiting place
        "places": [             # the waiters (weighted FIFO permits), each a queue lease
            {"token": <str>, "weight": <int>, "seq": <int64>, "expires_at": <date>,
             "placed_at": <date>, "host": <str>, "pid": <int>, "thread": <str>},
        ],
        "updated_at": <date>,   # the server's clock at the last acquire: a Busy's time left is
                                # a permit's expiry less this, both read from one after-image
        "gc_at": <date>,        # TTL index: the document may be deleted after this
    }

Weighted FIFO permits: a permit takes its ``weight`` of the limit's units, and is granted iff
the units of the live permits, plus the weights of the live places ahead of the attempt (every
live place, for an attempt without one), plus its weight stay within the limit. A refused
queued attempt (``queue_ttl_ms``: the store offers "weighted") keeps a place, added at the
tail with the next arrival position, refreshed where it stands by each of its tries, removed
by its grant or its token's release, gone by itself ``queue_ttl`` after its waiter's last
try. So a heavy waiter at the head holds back the lighter ones behind it: nobody starves.
With every weight 1 this is a FIFO semaphore.

The rules of ``_documents`` hold here too: time is ``$$NOW``, names only appear as ``_id``
equality (or range bounds), every other caller-chosen string written by a pipeline is wrapped
in ``$literal``. Every update drops the permits whose expiry has passed (and an acquire or a
release the lapsed places), so a crashed holder's units are free once its lease ends, and a
crashed waiter stops holding others back once its place lapses. Operators are those of
``_rwlocks`` (which the stand-in the tests run on understands): units are summed by
``$reduce`` with a binary ``$add``.
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
    "has_permit_or_place",
    "live_permits",
    "release_permit_update",
    "semaphore_info_pipeline",
]

Document = dict[str, Any]
Pipeline = list[Document]

_SCRATCH = (
    "tenure_live", "tenure_places", "tenure_mine", "tenure_queued", "tenure_seq",
    "tenure_ahead", "tenure_fits", "tenure_grant",
)


def live_permits(source: str = "$permits") -> Document:
    """The permits (or places) of ``source`` whose expiry is still in the server's future."""
    return {"$filter": {
        "input": {"$ifNull": [source, []]}, "as": "p",
        "cond": {"$gt": ["$$p.expires_at", "$$NOW"]},
    }}


def units(source: Any) -> Document:
    """The weights of the permits or places of ``source`` added up (no weight: 1)."""
    return {"$reduce": {
        "input": source, "initialValue": 0,
        "in": {"$add": ["$$value", {"$ifNull": ["$$this.weight", 1]}]},
    }}


def _without(source: Any, token: str) -> Document:
    return {"$filter": {
        "input": source, "as": "p", "cond": {"$ne": ["$$p.token", {"$literal": token}]},
    }}


def _restarted(source: Any, token: str, expires_at: Document) -> Document:
    """``source`` with the entry of ``token`` given a new expiry (its other fields kept)."""
    return {"$map": {"input": source, "as": "p", "in": {"$cond": [
        {"$eq": ["$$p.token", {"$literal": token}]},
        {"$mergeObjects": ["$$p", {"expires_at": expires_at}]},
        "$$p",
    ]}}}


# Used as ONE find_one_and_update(filter={_id: NAME}, upsert=True, return_document=AFTER).
# Inputs: TOKEN, TTL_MS, LIMIT, WEIGHT, the holder, QUEUE_TTL_MS (None: an unqueued permit,
# which takes no place), GC_AFTER_MS.
# Stage 1 keeps the live permits and places. Stage 2 asks: does TOKEN hold a live permit
# ("mine": a retry after a lost reply), has it a place, at which arrival position. Stage 3
# takes the places ahead of TOKEN's (all of them when it has none). Stage 4 judges: "fits"
# (no live permit under another limit), and the grant: not mine, fits, and the live permits'
# units + the weights of the places ahead + WEIGHT <= LIMIT. Stage 5 sets the fence to
# max(fence + 1, $$NOW in microseconds) and stores LIMIT on a grant, and bumps the arrival
# counter when a new place is handed out. Stage 6 writes the permits (the live ones plus
# TOKEN's on a grant: $$NOW + TTL_MS, the new fence, WEIGHT, the holder; TOKEN's restarted on
# "mine") and the places (on a grant the live ones less TOKEN's; refused and queued, TOKEN's
# refreshed to $$NOW + QUEUE_TTL_MS where it stands, or added at the tail; a refusal by
# another limit adds none), and $$NOW as updated_at; then the scratch goes, and the clean-up
# date is set.
# Output: the after-image: granted iff TOKEN is among its permits (that permit's fence is the
# grant's); else its limit tells a refused limit from a full semaphore, and its permits'
# expiries less its updated_at are their time left. Two upserts racing on an absent document
# can fail the loser with duplicate key error 11000: try again.
# Atomic: a single-document write, so no other step on NAME interleaves.
def acquire_permit_update(
    token: str, ttl_ms: int, limit: int, holder: Holder, gc_after_ms: int | None, *,
    weight: int = 1, queue_ttl_ms: int | None = None,
) -> Pipeline:
    me: Document = {"$literal": token}
    live, places = "$tenure_live", "$tenure_places"
    expires_at: Document = {"$add": ["$$NOW", ttl_ms]}
    new_permit: Document = {
        "token": me, "expires_at": expires_at, "fence": "$fence", "weight": weight,
        "acquired_at": "$$NOW", "host": {"$literal": holder.host},
        "pid": {"$literal": holder.pid}, "thread": {"$literal": holder.thread},
    }
    count: Document = {"$size": live}
    # Places are compared by arrival position; with no place of its own, all are ahead.
    ahead: Document = {"$filter": {"input": places, "as": "p", "cond": {"$or": [
        {"$eq": ["$tenure_queued", False]}, {"$lt": ["$$p.seq", "$tenure_seq"]},
    ]}}}
    refused_places: Any = places
    fresh_place: Document | bool = False
    if queue_ttl_ms is not None:
        place_expires: Document = {"$add": ["$$NOW", queue_ttl_ms]}
        new_place: Document = {
            "token": me, "weight": weight, "seq": "$next_seq", "expires_at": place_expires,
            "placed_at": "$$NOW", "host": {"$literal": holder.host},
            "pid": {"$literal": holder.pid}, "thread": {"$literal": holder.thread},
        }
        refused_places = {"$cond": [
            {"$or": ["$tenure_mine", {"$eq": ["$tenure_fits", False]}]}, places,
            {"$cond": [
                "$tenure_queued", _restarted(places, token, place_expires),
                {"$concatArrays": [places, [new_place]]},
            ]},
        ]}
        fresh_place = {"$and": [
            {"$eq": ["$tenure_grant", False]}, {"$eq": ["$tenure_mine", False]},
            {"$eq": ["$tenure_queued", False]}, "$tenure_fits",
        ]}
    restarted = _restarted(live, token, expires_at)
    written: Document = {
        "permits": {"$cond": [
            "$tenure_grant", {"$concatArrays": [live, [new_permit]]},
            {"$cond": ["$tenure_mine", restarted, live]},
        ]},
        "places": {"$cond": ["$tenure_grant", _without(places, token), refused_places]},
        "updated_at": "$$NOW",
    }
    pipeline: Pipeline = [
        {"$set": {"tenure_live": live_permits(), "tenure_places": live_permits("$places")}},
        {"$set": {
            "tenure_mine": {"$in": [me, f"{live}.token"]},
            "tenure_queued": {"$in": [me, f"{places}.token"]},
            # The own place's arrival position (its only element), for "ahead" below.
            "tenure_seq": {"$max": {"$map": {
                "input": {"$filter": {"input": places, "as": "p",
                                      "cond": {"$eq": ["$$p.token", me]}}},
                "as": "p", "in": "$$p.seq",
            }}},
        }},
        {"$set": {
            "tenure_ahead": ahead,
            "tenure_fits": {"$or": [{"$eq": [count, 0]}, {"$eq": ["$limit", limit]}]},
        }},
        {"$set": {"tenure_grant": {"$and": [
            # ($eq false, not $not: the MongoDB stand-in lacks $not)
            {"$eq": ["$tenure_mine", False]}, "$tenure_fits",
            {"$lte": [{"$add": [units(live), units("$tenure_ahead"), weight]}, limit]},
        ]}}},
        {"$set": {
            "fence": {"$cond": [
                "$tenure_grant", next_fence(), {"$ifNull": ["$fence", 0]},
            ]},
            "limit": {"$cond": ["$tenure_grant", limit, "$limit"]},
            "next_seq": {"$add": [{"$ifNull": ["$next_seq", 0]},
                                  {"$cond": [fresh_place, 1, 0]}]},
        }},
        {"$set": written},
        {"$unset": list(_SCRATCH)},
    ]
    if gc_after_ms is not None:
        # Past the end of anything just written: a grant's or retry's permit, a place.
        longest = max(ttl_ms, queue_ttl_ms or 0)
        pipeline.append({"$set": {"gc_at": {"$max": [
            {"$ifNull": ["$gc_at", "$$NOW"]}, {"$add": ["$$NOW", longest + gc_after_ms]},
        ]}}})
    return pipeline


def has_permit_or_place(name: str, token: str) -> Document:
    """Matches the semaphore ``name`` while ``token`` has a permit or a place in it, live or
    not. (A query filter, where a string is compared as data.)"""
    return {"_id": name, "$or": [{"permits.token": token}, {"places.token": token}]}


# The update of ONE update_one that removes TOKEN's permit and place (and the expired permits
# and lapsed places). With ``holds_entry("permits", ...)`` as the filter, matched_count == 1
# means TOKEN's permit was live and is gone; with has_permit_or_place, that TOKEN's expired
# permit or its place (a waiter giving up) is gone. The fence is kept.
def release_permit_update(token: str, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {
        "permits": _without(live_permits(), token),
        "places": _without(live_permits("$places"), token),
    }
    if gc_after_ms is not None:
        fields["gc_at"] = {"$add": ["$$NOW", gc_after_ms]}
    return [{"$set": fields}]


# With ``holds_entry("permits", ...)`` as the filter of ONE update_one: restarts our permit
# at $$NOW + TTL_MS (its fence and weight kept).
def extend_permit_update(token: str, ttl_ms: int, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {
        "permits": _restarted(live_permits(), token, {"$add": ["$$NOW", ttl_ms]}),
    }
    if gc_after_ms is not None:
        fields["gc_at"] = {"$max": [
            {"$ifNull": ["$gc_at", "$$NOW"]}, {"$add": ["$$NOW", ttl_ms + gc_after_ms]},
        ]}
    return [{"$set": fields}]


def semaphore_info_pipeline(match: Document) -> Pipeline:
    """``aggregate`` input: each semaphore ``match`` selects, with its live permits (as
    ``leases``), its live places (their waiters, with their weights), their number and the
    server's time, as ``_records.to_info`` reads; one read, so the waiters and the permits
    are of one instant."""
    return [
        {"$match": match},
        {"$sort": {"_id": 1}},
        {"$project": {
            "fence": 1, "limit": 1, "leases": live_permits(),
            "places": live_permits("$places"), "queued": {"$size": live_permits("$places")},
            "now": "$$NOW",
        }},
    ]


def break_permits_filter(name: str) -> Document:
    """Matches the semaphore ``name`` only while a permit of it is live."""
    return {**name_filter(name), "$expr": {"$gt": [{"$size": live_permits()}, 0]}}


def break_permits_update() -> Pipeline:
    """With ``break_permits_filter`` in ONE update_one: every permit goes; the fence and the
    waiters' places stay."""
    return [{"$set": {"permits": []}}]
