"""``mongodb://`` and ``mongodb+srv://``: one document per lock in a MongoDB collection.

Every operation is one server-side step judged by the server's ``$$NOW``: acquire is a single
``find_one_and_update`` with an aggregation-pipeline update and ``upsert``; release, extend and
break are single conditional updates. The document outlives its releases so the fence never
goes back; a TTL index removes documents unused for a long time. The pipeline documents, with
their contracts, live in ``_documents``; option parsing in ``_settings``.
"""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("mongodb", "mongodb+srv")
EXTRA = "mongodb"
