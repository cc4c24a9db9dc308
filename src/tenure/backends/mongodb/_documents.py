"""The MongoDB documents behind ``mongodb://``: filters, pipeline updates and projections,
shared by both flavours. Nothing here does I/O.

One document per lock name, in one collection::

    {
        "_id": NAME,            # the lock name, a plain string, never anything else
        "fence": <int64>,       # the last fence issued; never goes back, kept across releases
        "token": <str>,         # the holder's random token       } present only while a
        "expires_at": <date>,   # server clock when the lease ends } lease is (or was, until
        "acquired_at": <date>,  # server clock when it was granted } it expired) held
        "host": <str>, "pid": <int>, "thread": <str>,   # who holds it, for ``tenure ls``
        "gc_at": <date>,        # TTL index: the document may be deleted after this
        "value": <str>,         # an election leader's value, written with its grant or by
        "value_token": <str>,   # set_value; counts only while value_token is the live token
    }

An election's value is tagged with the token that wrote it (``value_token``) and is shown only
while that same token holds a live lease. A plain lock's acquire (and a tenure from before
these fields, which neither writes nor removes them) therefore needs no change: a new grant
carries a new random token, so whatever value an earlier holder left can never look current.
Documents from before these fields have neither and read as "no value".

Rules every document below follows:
- Time is the server's: ``$$NOW`` (one value for the whole operation). The client's wall clock
  is never written and never compared; ttl arrives as whole milliseconds.
- Names are data. A name only ever appears as the value of an equality on ``_id`` (or as a
  range bound / ``$in`` element), never as a key and never inside an aggregation expression,
  where a string starting with ``$`` would be read as a field path. Every other caller-chosen
  string written by a pipeline (token, host, thread) is wrapped in ``$literal`` for the same
  reason: a thread named ``"$where"`` is stored as that text.
- A grant's fence is ``max(fence + 1, $$NOW in microseconds)`` (``next_fence``): it grows
  by at least one per grant in the document, which a release keeps, and never falls below
  the server's clock, so a document the TTL clean-up deleted (unused for ``gc_after``, 30
  days by default) or the server lost starts again above every fence it issued, not at 1.
"""

from __future__ import annotations

from typing import Any

from tenure._types import Holder

__all__ = [
    "GRANTED_FIELDS",
    "next_fence",
    "acquire_update",
    "break_filter",
    "set_value_update",
    "extend_update",
    "free_update",
    "held_by",
    "holds_entry",
    "info_pipeline",
    "milliseconds",
    "name_filter",
    "prefix_filter",
]

Document = dict[str, Any]
Pipeline = list[Document]

# A lease is live while its expiry is in the server's future.
LIVE: Document = {"$gt": ["$expires_at", "$$NOW"]}

# Free: never held, released (token removed), or expired by the server's clock.
FREE: Document = {
    "$or": [
        {"$eq": [{"$ifNull": ["$token", None]}, None]},
        {"$lte": ["$expires_at", "$$NOW"]},
    ]
}

GRANTED_FIELDS = (
    "token", "expires_at", "acquired_at", "host", "pid", "thread", "value", "value_token"
)
"""The fields that exist only while a lease is held; release and break remove them (the
value too: tagging already hides it, removing it keeps the document small)."""

# The scratch field acquire's first stage writes and its last stage removes.
_STATE = "tenure_grant"


def next_fence(stored: str = "$fence") -> Document:
    """The fence of a new grant: one more than the last one issued (``stored``, a field path;
    absent in a new document), and never below the server's clock in microseconds.

    The clock floor is what keeps fences from going back when the document is gone: deleted by
    the TTL clean-up, removed by hand, or lost with the server's data. ``$$NOW`` counts whole
    milliseconds, so two grants of one name within one millisecond (or after the server's
    clock stepped back) share a floor; the ``+ 1`` then still makes each fence larger than the
    last one the document holds. ``$toLong`` of a date is its milliseconds since the epoch
    (MongoDB 4.0+); microseconds since the epoch (~1.8e15) are far inside an int64.
    """
    return {"$max": [
        {"$add": [{"$ifNull": [stored, 0]}, 1]},
        {"$multiply": [{"$toLong": "$$NOW"}, 1000]},
    ]}


def milliseconds(seconds: float) -> int:
    """A ttl as the whole milliseconds BSON dates count in (at least one)."""
    return max(1, round(seconds * 1000))


def name_filter(name: str) -> Document:
    """Exactly the document of ``name``: plain string equality on ``_id``."""
    return {"_id": name}


# ---- acquire -----------------------------------------------------------------------------
#
# Used as ONE find_one_and_update(filter=name_filter(NAME), update=acquire_update(...),
# upsert=True, return_document=AFTER).
# Inputs: NAME (filter), TOKEN, TTL_MS, the holder, GC_AFTER_MS (None: no clean-up date).
# Stage 1 judges the document as it was, by $$NOW, into a scratch field:
#   "new"   - absent (the upsert starts from {_id: NAME}), released, or expired;
#   "again" - held by TOKEN (a retried acquire whose reply was lost): not a new grant;
#   "busy"  - held by another token whose lease is live.
# Stage 2 writes: for "new", max(fence + 1, $$NOW in microseconds), TOKEN, expiry
# $$NOW + TTL_MS, acquired_at $$NOW, the holder; for "again", only the expiry (fence and
# acquired_at kept); for "busy", every field its own value, so nothing changes.
# Stage 3 removes the scratch field.
# Output: the after-image. Granted iff its token is TOKEN; its fence is then this grant's.
# Otherwise it shows the live holder's token and expiry. Two upserts racing on an absent
# document can fail the loser with duplicate key error 11000: that means "held".
# Atomic: a single-document write, so no other write to NAME interleaves.


# With VALUE (an election's campaign; None for a plain lock, whose pipeline is unchanged):
# Stage 2 also writes, for "new", value VALUE tagged value_token TOKEN; for "again", keeps the
# stored value when it is already tagged TOKEN (a retried campaign keeps what a proclaim may
# have set since) and writes VALUE otherwise; for "busy", nothing.


def acquire_update(
    token: str, ttl_ms: int, holder: Holder, gc_after_ms: int | None,
    value: str | None = None,
) -> Pipeline:
    new: Document = {"$eq": [f"${_STATE}", "new"]}
    busy: Document = {"$eq": [f"${_STATE}", "busy"]}
    expires_at: Document = {"$add": ["$$NOW", ttl_ms]}

    def if_new(value: Any, field: str) -> Document:
        return {"$cond": [new, value, f"${field}"]}

    def unless_busy(value: Any, field: str) -> Document:
        return {"$cond": [busy, f"${field}", value]}

    granted: Document = {
        "fence": if_new(next_fence(), "fence"),
        "token": unless_busy({"$literal": token}, "token"),
        "expires_at": unless_busy(expires_at, "expires_at"),
        "acquired_at": if_new("$$NOW", "acquired_at"),
        "host": if_new({"$literal": holder.host}, "host"),
        "pid": if_new({"$literal": holder.pid}, "pid"),
        "thread": if_new({"$literal": holder.thread}, "thread"),
    }
    if gc_after_ms is not None:
        granted["gc_at"] = unless_busy({"$add": ["$$NOW", ttl_ms + gc_after_ms]}, "gc_at")
    if value is not None:
        ours: Document = {"$eq": [{"$ifNull": ["$value_token", None]}, {"$literal": token}]}
        keep: Document = {"$or": [busy, {"$and": [{"$eq": [f"${_STATE}", "again"]}, ours]}]}
        granted["value"] = {"$cond": [keep, "$value", {"$literal": value}]}
        granted["value_token"] = unless_busy({"$literal": token}, "value_token")
    judge: Document = {
        "$switch": {
            "branches": [
                {"case": FREE, "then": "new"},
                {"case": {"$eq": ["$token", {"$literal": token}]}, "then": "again"},
            ],
            "default": "busy",
        }
    }
    return [{"$set": {_STATE: judge}}, {"$set": granted}, {"$unset": _STATE}]


# ---- release, extend, owned, break ---------------------------------------------------------
#
# held_by(NAME, TOKEN) matches the document only while TOKEN holds a live lease on NAME, by
# $$NOW. Used as the filter of ONE update_one for release (with free_update) and extend (with
# extend_update): matched_count == 1 means it was ours and is now released / extended;
# 0 means the lease had expired or belongs to someone else, and nothing was changed.
# Also the filter of owned()'s find_one.


def held_by(name: str, token: str) -> Document:
    return {"_id": name, "token": token, "$expr": LIVE}


def holds_entry(field: str, name: str, token: str) -> Document:
    """Matches the record ``name`` only while ``token`` holds a live entry in its array
    ``field`` (a semaphore's ``permits``, a read-write lock's ``leases``)."""
    return {"_id": name, "$expr": {"$anyElementTrue": [{"$map": {
        "input": {"$ifNull": [f"${field}", []]}, "as": "e",
        "in": {"$and": [
            {"$eq": ["$$e.token", {"$literal": token}]},
            {"$gt": ["$$e.expires_at", "$$NOW"]},
        ]},
    }}]}}


# Inputs: TTL_MS, GC_AFTER_MS. Sets the expiry to $$NOW + TTL_MS (and the clean-up date past
# it); fence, token and holder untouched.
def extend_update(ttl_ms: int, gc_after_ms: int | None) -> Pipeline:
    fields: Document = {"expires_at": {"$add": ["$$NOW", ttl_ms]}}
    if gc_after_ms is not None:
        fields["gc_at"] = {"$add": ["$$NOW", ttl_ms + gc_after_ms]}
    return [{"$set": fields}]


# Inputs: GC_AFTER_MS. Removes the lease (token, expiry, holder) and keeps the document with
# its fence, so the next grant continues from it; the clean-up date restarts from $$NOW.
def free_update(gc_after_ms: int | None) -> Pipeline:
    pipeline: Pipeline = [{"$unset": list(GRANTED_FIELDS)}]
    if gc_after_ms is not None:
        pipeline.append({"$set": {"gc_at": {"$add": ["$$NOW", gc_after_ms]}}})
    return pipeline


# Input: VALUE, TOKEN. Used with held_by(NAME, TOKEN) as the filter of ONE update_one:
# matched_count == 1 means TOKEN held the live lease and its value is now VALUE (tagged with
# TOKEN); 0 means nothing changed. A classic update, not a pipeline: $set stores its operands
# as they are, so a value starting with "$" is text.
def set_value_update(token: str, value: str) -> Document:
    return {"$set": {"value": value, "value_token": token}}


# The operator's break: matches NAME only while anybody holds a live lease on it. Used with
# free_update in ONE update_one; matched_count == 1 means a live lease was broken.
def break_filter(name: str) -> Document:
    return {"_id": name, "$expr": LIVE}


# ---- reading -----------------------------------------------------------------------------
#
# An aggregation projection, so that liveness is judged by $$NOW on the server. Output per
# document, in the shape ``_records.to_info`` reads for every kind: _id, fence, leases (the live
# lease as a one-element list: acquired_at, expires_at, host, pid, thread; empty when none),
# now ($$NOW), value (null unless written by the token holding the lease).
_INFO_PROJECTION: Document = {
    "_id": 1,
    "fence": 1,
    "leases": {
        "$cond": [
            {"$and": [{"$ne": [{"$ifNull": ["$token", None]}, None]}, LIVE]},
            [{"acquired_at": "$acquired_at", "expires_at": "$expires_at", "host": "$host",
              "pid": "$pid", "thread": "$thread"}],
            [],
        ]
    },
    "now": "$$NOW",
    # The value counts only when the live token wrote it (see the module docstring).
    "value": {
        "$cond": [
            {"$and": [
                {"$ne": [{"$ifNull": ["$value_token", None]}, None]},
                {"$eq": ["$value_token", "$token"]},
            ]},
            "$value",
            None,
        ]
    },
}


def info_pipeline(match: Document) -> Pipeline:
    """``aggregate`` input: the documents ``match`` selects, by name, as ``_records.to_info``
    reads."""
    return [{"$match": match}, {"$sort": {"_id": 1}}, {"$project": _INFO_PROJECTION}]


def prefix_filter(prefix: str) -> Document:
    """Every lock whose name starts with ``prefix``, as a range on ``_id``.

    MongoDB orders strings by their UTF-8 bytes, which is code-point order: the names starting
    with ``prefix`` are exactly those >= ``prefix`` and < the next string of the same length.
    A range (not a regular expression) keeps the prefix data and uses the ``_id`` index.
    """
    if not prefix:
        return {"_id": {"$type": "string"}}
    upper = _successor(prefix)
    bounds: Document = {"$gte": prefix}
    if upper is not None:
        bounds["$lt"] = upper
    return {"_id": bounds}


def _successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``, if any."""
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return None
    code = ord(stripped[-1]) + 1
    if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be encoded: skip past them
        code = 0xE000
    return stripped[:-1] + chr(code)
