"""The key names a client writes its lock keys under: one per acquisition at a time, reused
by the next.

Why reuse: etcd keeps every key ever written under a name in its key index until a
compaction, deleted ones included, and the range compare of an acquire's first try visits
them all, so a key named by each acquisition's token makes every acquisition of a busy name
slower than the one before. A lock key is named ``{client}.{index}`` instead: ``client`` is
random (128 bits) per backend and process (a forked child draws its own), ``index`` the
smallest this client does not use for that name right now, so the acquisitions one after the
other of one handle write the same key again, and two handles of one process never share one
(etcd's own lock service names its keys by lease for the same reason).

**Why a reused name is safe.** No other client writes under ``client``, and this one lets an
index go (``free``) only once nothing it sent about that key can still land: every request
that writes the key is tracked (``Slot.sending`` before it goes, ``Slot.answered`` once a
member answered it), and a request sent again to another member after a failed try (a
timeout, a reset, "leader changed": the first copy may still be applied) doubts the slot
for good. A slot that was doubted, or whose request never came back (an error, a
cancellation), is never freed: its index stays taken, so no later acquisition can find a late
copy's write under its own key, nor have its key deleted by one. So a key under a clean slot
is the current acquisition's or none: a release may delete it by name alone. The index is an
int in the name, never a sequence: it says nothing about order (the creation revision does).

Flavour-free and thread-safe (a lock guards the tables): acquisitions of one backend run in
any thread, the renewal thread's twin shares the tables.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading

__all__ = ["Slot", "Slots"]


@dataclasses.dataclass(eq=False)
class Slot:
    """One key name of this client under one name, and what was sent about it."""

    key: str
    index: int
    in_flight: int = 0
    """Requests writing the key sent and not answered yet (or never: an error, a
    cancellation, which leaves it above 0 for good)."""
    doubted: bool = False
    """A request about the key was sent more than once (a failed try, then another member):
    a copy may land at any later time."""

    def sending(self) -> None:
        self.in_flight += 1

    def answered(self) -> None:
        self.in_flight -= 1

    def doubt(self) -> None:
        self.doubted = True

    @property
    def clean(self) -> bool:
        """Everything sent about the key was answered, once each: nothing can land later."""
        return self.in_flight == 0 and not self.doubted


class Slots:
    """The slots of one backend: by (kind, name, token) for the acquisition holding each, and
    the indexes taken per (kind, name)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._client = secrets.token_hex(16)
        self._of: dict[tuple[str, str, str], Slot] = {}
        self._taken: dict[tuple[str, str], set[int]] = {}

    def claim(self, kind: str, name: str, token: str, prefix: str) -> Slot:
        """The slot of ``token``'s acquisition of ``name`` (the one it has, else the smallest
        free index), its key under ``prefix`` (the name's key prefix)."""
        with self._mutex:
            if self._pid != os.getpid():
                # A forked child: its parent's keys are its parent's (rule 8).
                self._reset()
            slot = self._of.get((kind, name, token))
            if slot is None:
                taken = self._taken.setdefault((kind, name), set())
                index = next(i for i in range(len(taken) + 1) if i not in taken)
                taken.add(index)
                slot = Slot(f"{prefix}{self._client}.{index}", index)
                self._of[kind, name, token] = slot
            return slot

    def get(self, kind: str, name: str, token: str) -> Slot | None:
        with self._mutex:
            if self._pid != os.getpid():
                return None
            return self._of.get((kind, name, token))

    def free(self, kind: str, name: str, token: str) -> None:
        """``token``'s acquisition has ended and left no key: its index is free for the next,
        if the slot is clean; a doubted one stays taken for good (module docstring), and
        stays ``token``'s, so that an undo still finds the key."""
        with self._mutex:
            if self._pid != os.getpid():
                return
            slot = self._of.get((kind, name, token))
            if slot is None or not slot.clean:
                return
            del self._of[kind, name, token]
            taken = self._taken[kind, name]
            taken.discard(slot.index)
            if not taken:
                del self._taken[kind, name]

    def retire(self, kind: str, name: str, token: str) -> None:
        """``token``'s key outlives its acquisition (a release inside a ``hold_at_least``
        window leaves it on a lease of its own): its index stays taken for good."""
        with self._mutex:
            self._of.pop((kind, name, token), None)
