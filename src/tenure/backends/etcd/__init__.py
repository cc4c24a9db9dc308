"""``etcd://host:port[,host:port...]`` and ``etcds://`` (TLS): etcd v3 (3.4+), a Raft
consensus store, spoken through its built-in JSON gateway (``/v3/...``) over httpx.

Every holder and every waiter is a key of its own under the name's prefix, attached to an
etcd lease; a name is granted to the ``limit`` oldest keys (1 for a lock), in creation order,
so waiting is first in, first out. The fence is the holder key's creation revision. See
``_keys`` for the layout, ``_async/backend.py`` for each step (and the modules beside it),
``docs/backends/etcd.md`` for the guarantees and why the JSON gateway.
"""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("etcd", "etcds")
EXTRA = "etcd"
