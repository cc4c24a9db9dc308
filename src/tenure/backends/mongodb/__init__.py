"""``mongodb://`` and ``mongodb+srv://``: one document per lock in a MongoDB collection.

Every operation is one server-side step judged by the server's ``$$NOW``: acquire is a single
``find_one_and_update`` with an aggregation-pipeline update and ``upsert``; release, extend and
break are single conditional updates. The document outlives its releases so the fence never
goes back; a TTL index removes documents unused for a long time. The rooms: ``_config``
(URL and options), ``_errors`` (the driver's errors), ``_async/connection`` (the only code
that touches PyMongo), ``_async/store`` (the verbs), and the flavour-free statements:
``_kinds`` (each kind's, side by side) over ``_documents`` (locks), ``_semaphores`` and
``_rwlocks``, with ``_records`` reading any kind's row as a ``LockInfo``.
"""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("mongodb", "mongodb+srv")
EXTRA = "mongodb"
