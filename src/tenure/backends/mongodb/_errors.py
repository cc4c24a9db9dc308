"""The MongoDB driver's errors: which mean the store failed (``DRIVER_ERRORS``, the store's
``driver_errors``), and their messages made fit for a one-line BackendError (both flavours).

A server selection that timed out reads, in PyMongo: each server's error, each with the
configured timeouts, then ``Timeout: 4.99s, Topology Description: <...>`` repeating every
server's description and error again: some 700 characters for one server. The BackendError
keeps the first part, which names each server and what went wrong, and the timeout; the
driver's error, chained as ``__cause__``, keeps the whole.
"""

from __future__ import annotations

import re

from bson.errors import BSONError
from pymongo.errors import PyMongoError

__all__ = ["DRIVER_ERRORS", "driver_message"]

DRIVER_ERRORS: tuple[type[BaseException], ...] = (PyMongoError, BSONError)
"""Every PyMongo error (connection, selection timeout, server error, write concern) and a
document BSON cannot encode or decode."""

_CONFIGURED = re.compile(r" \(configured timeouts: [^)]*\)")
_TIMEOUT = re.compile(r", Timeout: ([0-9.]+)s")


def driver_message(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    text, _, _ = text.partition(", Topology Description:")
    found = _TIMEOUT.search(text)
    if found is not None:
        servers = _CONFIGURED.sub("", text[: found.start()])
        return f"no server available within {float(found.group(1)):.1f} s ({servers})"
    return _CONFIGURED.sub("", text)
