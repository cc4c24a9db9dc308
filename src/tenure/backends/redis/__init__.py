"""``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://`` and ``redis+sentinel://``:
one Redis master (or a Redis Cluster, or a Sentinel-managed master) holding each lock and each
semaphore as a few keys under one hash tag, every operation one Lua script, waiters woken by
the releaser.

See ``_scripts`` (locks) and ``_semaphores`` (semaphores) for the key layouts and each
script's contract, ``_config`` for the URL forms and options, ``_async`` for the code (the
``_sync`` package is generated from it), ``docs/backends/redis.md`` for the guarantees.
"""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel")
EXTRA = "redis"
