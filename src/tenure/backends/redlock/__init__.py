"""``redlock://host:port,host:port,host:port[,...]``: one lock over several independent Redis
masters (the Redlock algorithm), granted only by a majority of them, within a validity time.

Each node runs the single-node Redis backend's Lua scripts (``tenure.backends.redis``); this
package adds the fan-out to every node, the quorum and validity arithmetic (``_quorum``), the
fence design (``_scripts``: the fence floor) and the URL forms (``_config``). What Redlock
guarantees and what it does not is in docs/backends/redlock.md.
"""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("redlock",)
EXTRA = "redis"
