"""A test double: ``broken+memory://``, the memory store with a deliberately broken grant
(threads flavour only: ``tenure.connect``). Every third acquire of a held name is granted
anyway (the holder's lease is thrown away first), which is the failure Jepsen found in etcd
3.4.3's locks; of a read-write lock, every third acquire refused while only readers hold
(a writer granted while readers hold). ``tenure verify`` must catch it. Tests register it with
``register(monkeypatch)``."""

from __future__ import annotations

import pytest

SCHEMES = ("broken+memory",)
EXTRA = None


def register(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make ``broken+memory://`` resolvable for this test; return a URL of a fresh store."""
    import uuid

    from tenure._registry import BackendEntry, builtin_backends

    monkeypatch.setitem(builtin_backends(), "broken+memory",
                        BackendEntry(__name__, None, SCHEMES))
    return f"broken+memory://{uuid.uuid4().hex}"
