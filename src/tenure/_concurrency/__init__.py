"""The I/O edge: the only code written twice, once for asyncio and once for threads.

Everything above it (the lock logic, the renewal scheduler, the backends) is written once
under ``_async`` and generated into ``_sync`` by ``scripts/unasync.py``, which swaps
``async_io`` for ``sync_io``. The two modules here therefore export the same names
(``edge.NAMES``); what they share whatever the flavour is ``edge``'s, and the asyncio
flavour's renewal thread is ``renewal_loop``'s.
"""
