"""The rule shared by stores where every holder and waiter of a name is an ordered entry of
its own (etcd's keys ordered by creation revision, ZooKeeper's sequential nodes), and why its
fences are sound. No code: each of those stores implements it in its own terms (etcd's
``first_try`` and attempt, ZooKeeper's ``ranking``), and both cite this text.

A lock is the case ``limit = 1`` of the same queue a semaphore uses: an entry is granted when
it is among the ``limit`` oldest live entries of its (kind, name), the kind keeping a lock's,
a semaphore's and a read-write lock's entries apart.

Read-write and fair locks (kind ``"rwlock"``) are the same queue with a mode per entry
("read" or "write", the kazoo ReadLock/WriteLock idea), in place of the limit rule:

- a **write** entry is granted when it is the oldest live entry of the name;
- a **read** entry is granted when no live *write* entry is older than it.

So a waiting writer holds back every reader that arrives after it, the readers that arrived
before it go first, and a fair lock (the write side alone) is granted in arrival order. A
waiter's entry is its place in the queue: a short lease of its own (``queue_ttl``), kept alive
by each of its waits, marked queued until the step that grants it. A write waiter watches the
entry just ahead of it; a read waiter the newest write entry ahead of it; every wait is
bounded and followed by a fresh ranking.

**Fences.** An entry's fence is its creation revision (etcd) or creation zxid (ZooKeeper):
the store's global counter at the write that created the entry, so a later entry always has a
higher fence. What that gives, and why:

1. *A write's fence exceeds every fence granted before it.* Take a write entry W granted at
   time t and any entry G granted before t. If G was created before W, its fence is lower.
   If G was created after W, then W's entry existed (alive, ahead of G) from G's creation to
   t, because an entry that lapses is never revived: its waiter joins again with a new entry
   and so a new, higher fence. When G was granted, W was a live entry older than G, and the
   rule refuses G (write or read) while an older live write entry exists. So that case
   cannot happen. (On ZooKeeper "live" is judged by the contender: a place judged lapsed may
   still be rewritten by its slow waiter; every write of a place therefore checks that its
   previous write was not older than its queue lease by the server's clock, and if it was,
   the waiter drops that entry and joins again, as a renewal that comes too late reports the
   lease lost. The backend's module says why the server's clock makes this sound.)
2. *A read's fence exceeds every write fence granted before it*, by the same argument with
   W a write granted before the read R: if W was created after R, R's entry was a live
   entry older than W when W was granted, which the write rule refuses.
3. Readers granted together (those that waited behind one writer, woken by its release) may
   be granted in any order among themselves, so two such readers' fences need not follow
   their grant order. They hold the name at the same time and exclude the same writers: a
   resource that rejects writes with a fence below the highest it has seen is not affected.
"""
