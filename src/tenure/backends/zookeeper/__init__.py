"""``zookeeper://host:port[,host:port...][/chroot]`` (and ``zk://``): Apache ZooKeeper through
kazoo. Every holder and waiter of a name is an ephemeral sequential node of its own; the
``limit`` oldest live nodes hold the name (1 for a lock), the fence is the holder node's
creation zxid (``czxid``), and waiters watch the node ahead. A lease's ttl is judged by the
server's clock: a node whose last write (``mtime``) is older than its ttl, measured against
the server time of a contender's own write, has expired and is removed by that contender.
See ``_nodes`` for the layout and ``_async/store.py`` for each step (and its rooms).
"""

# The registry entry (``tenure._registry``): read without importing any driver.
SCHEMES = ("zookeeper", "zk")
EXTRA = "zookeeper"
