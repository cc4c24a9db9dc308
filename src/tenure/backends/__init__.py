"""One package per backend. Each holds ``_async.py`` (written by hand), ``_sync.py``
(generated from it by ``scripts/unasync.py``) and any shared, flavour-free code; both flavour
modules export ``BACKEND``, the backend class. ``tenure._urls`` maps URL schemes to packages.
"""
