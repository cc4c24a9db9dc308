"""``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://`` and ``redis+sentinel://``:
one Redis master (or a Redis Cluster, or a Sentinel-managed master) holding each lock as a few
keys under one hash tag, every operation one Lua script, waiters woken by the releaser.

See ``_scripts`` for the key layout and each script's contract, ``_config`` for the URL forms
and options, ``docs/backends/redis.md`` for the guarantees.
"""
