"""The models of the primitives built on the fenced lease (``tenure.verify.model``): the
read-write lock, whose leases have a mode, and the election, a lock whose fence is the term
and whose leader can be read. ``model_for`` picks the model of a primitive.

**Read-write locks** (``RwLockModel``; a fair lock is the write side). ``_room`` is the mode
rule of ``tenure.backends._ordered_queue``: a write lease needs no other live lease, a read
lease no live write lease. Fences follow what every store promises (docs/guarantees.md): a
write's fence is above every fence granted before it, read or write; a read's is above
every write fence granted before it, and differs from the live leases' (readers granted
together by one release may get theirs in any order among themselves: etcd, ZooKeeper).
Waiting places are invisible to the model: refusals prove little (as for every store that
queues), and so does ``locked()`` answering True, which any waiter causes (a write handle's
``locked()`` is True while anybody waits, a read handle's too); ``strict_refusals`` makes
both need a conflicting live lease. ``inspect`` is checked against the live leases: the mode
it lists (readers, or one writer alone) and their fences; a lease it leaves out must have
been able to end by the call's completion.

**Elections** (``ElectionModel``): the lock model, campaigns being acquires and resignations
releases, so terms (fences) strictly increase. ``leader()`` answers (value, term); the
workload campaigns with the lease's name as the value, so an answer names the lease it
read: that lease must be live with that term (an answer of "no leader" needs the leader's
lease able to have ended). A leader whose campaign went unanswered has an unknown term;
``leader()`` reading it teaches the model the term, which must be above every earlier one.
"""

from __future__ import annotations

from tenure.verify.history import Operation
from tenure.verify.model import ClockAllowance, Lease, LeaseModel, State

__all__ = ["ElectionModel", "RwLockModel", "model_for"]

Step = tuple[list[State], str]


def model_for(primitive: str, limit: int = 1, allowance: ClockAllowance | None = None, *,
              strict_refusals: bool = False) -> LeaseModel:
    """The model of one name of ``primitive`` (``limit``: a semaphore's permits)."""
    model = {"rwlock": RwLockModel, "election": ElectionModel}.get(primitive, LeaseModel)
    return model(limit, allowance, strict_refusals=strict_refusals)


class RwLockModel(LeaseModel):
    """A read-write lock's name: leases with a mode (the module docstring)."""

    @staticmethod
    def _in_the_way(state: State, mode: str | None) -> list[Lease]:
        """The live leases a new lease of ``mode`` must wait for."""
        if mode == "write":
            return list(state.leases)
        return [live for live in state.leases if live.mode == "write"]

    def _full(self, state: State, op: Operation) -> bool:
        return bool(self._in_the_way(state, op.mode))

    def _room(self, state: State, op: Operation) -> list[State]:
        return self._room_for(state, op, op.mode)

    def _room_for(self, state: State, op: Operation, mode: str | None) -> list[State]:
        """``state`` with room for a lease of ``mode`` by ``op``'s time: every lease in its
        way expired (each must be able to have run out by then), or none when one cannot."""
        blocking = self._in_the_way(state, mode)
        if not blocking:
            return [state]
        if any(live.ends_after > op.latest for live in blocking):
            return []
        return [self._with(state, [live for live in state.leases if live not in blocking])]

    def _why_full(self, state: State, op: Operation) -> str:
        return self._why_blocked(state, op, op.mode)

    def _why_blocked(self, state: State, op: Operation, mode: str | None) -> str:
        return "; ".join(self._why_live(live, op) for live in self._in_the_way(state, mode)
                         if live.ends_after > op.latest)

    def _why_not_full(self, state: State, op: Operation) -> str:
        return "free" if not state.leases else "only readers held"

    def _fence_refused(self, room: State, op: Operation) -> str:
        assert op.fence is not None
        if op.mode == "write":
            if room.last_fence is not None and op.fence <= room.last_fence:
                return (f"granted write fence {op.fence}, not above fence {room.last_fence} "
                        "granted before it")
            return ""
        if room.last_write is not None and op.fence <= room.last_write:
            return (f"granted read fence {op.fence}, not above write fence {room.last_write} "
                    "granted before it")
        if any(live.fence == op.fence for live in room.leases):
            return f"granted read fence {op.fence}, which a live lease holds"
        return ""

    def _granted(self, room: State, lease: Lease) -> State:
        granted = super()._granted(room, lease)
        if lease.mode != "write":
            return granted
        assert lease.fence is not None
        last = room.last_write
        return granted._replace(last_write=lease.fence if last is None else max(last, lease.fence))

    def _locked(self, state: State, index: int, op: Operation) -> Step:
        if op.held and not self.strict_refusals:
            return [state], ""  # a waiting place makes locked() True: proves little
        return super()._locked(state, index, op)

    def _inspect(self, state: State, index: int, op: Operation) -> Step:
        if not op.held:
            rooms = self._room_for(state, op, "write")
            if rooms:
                return rooms, ""
            return [], "inspect listed no lease while " + self._why_blocked(state, op, "write")
        if op.mode == "write":
            return self._inspect_writer(state, op)
        return self._inspect_readers(state, op)

    def _inspect_writer(self, state: State, op: Operation) -> Step:
        fences = op.fences
        if fences is not None and len(fences) > 1:
            return [], (f"inspect listed a writer among {len(fences)} leases (fences "
                        f"{', '.join(map(str, fences))}): a writer is alone")
        writers = [live for live in state.leases if live.mode == "write"]
        if not writers:
            readers = ", ".join(live.lease for live in state.leases)
            return [], ("inspect listed a writer while no write lease was live"
                        + (f" (read leases {readers} were)" if readers else ""))
        following = []
        why = ""
        for writer in writers:
            if fences is not None and writer.fence not in (None, fences[0]):
                why = (f"inspect listed the writer with fence {fences[0]}, but the live write "
                       f"lease {writer.lease} has fence {writer.fence}")
                continue
            others = [live for live in state.leases if live is not writer]
            stuck = [live for live in others if live.ends_after > op.latest]
            if stuck:
                why = ("inspect listed a writer alone while "
                       + "; ".join(self._why_live(live, op) for live in stuck))
                continue
            following.append(self._with(state, [writer]))
        return following, ("" if following else why)

    def _inspect_readers(self, state: State, op: Operation) -> Step:
        kept = []
        unmatched = set(op.fences or ())
        for live in state.leases:
            listed = live.mode == "read" and (
                op.fences is None or live.fence is None or live.fence in unmatched)
            if listed:
                if live.fence is not None:
                    unmatched.discard(live.fence)
                kept.append(live)
            elif live.ends_after > op.latest:
                what = "listed only readers" if live.mode == "write" else "left out"
                return [], f"inspect {what} while {self._why_live(live, op)}"
        unknown = sum(1 for live in kept if live.fence is None)
        if len(unmatched) > unknown:
            shown = ", ".join(str(fence) for fence in sorted(unmatched))
            return [], f"inspect listed readers with fence(s) {shown}, which no live lease has"
        if not kept:
            return [], "inspect listed readers while no read lease was live"
        return [self._with(state, kept)], ""


class ElectionModel(LeaseModel):
    """An election's name: the lock model, and ``leader()`` (the module docstring)."""

    def _leader(self, state: State, index: int, op: Operation) -> Step:
        if not op.held:
            rooms = self._room(state, op)
            if rooms:
                return rooms, ""
            return [], "leader() answered no leader while " + self._why_full(state, op)
        assert op.fence is not None
        live = self._find(state, op.lease)
        if live is None:
            return [], (f"leader() named lease {op.lease} (term {op.fence}), which was not "
                        "live (resigned, expired or never elected)")
        if live.fence is not None:
            if live.fence == op.fence:
                return [state], ""
            return [], (f"leader() read term {op.fence} for lease {op.lease}, elected with "
                        f"term {live.fence}")
        # Its campaign's answer was lost (or it gave up waiting): now its term is known.
        if state.last_fence is not None and op.fence <= state.last_fence:
            return [], (f"leader() read term {op.fence} for lease {op.lease}, not above term "
                        f"{state.last_fence} elected before it")
        learned = [live._replace(fence=op.fence) if lease is live else lease
                   for lease in state.leases]
        return [self._with(state, learned, op.fence)], ""
