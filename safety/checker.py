"""Turn a recorded history into figures. Nothing here trusts what a worker believed: every
figure is recomputed from time stamps, fences and the resource's own log.

- Overlapping sections: two critical sections on the same lock whose intervals intersect on
  the observer's clock. For a semaphore of ``limit`` permits (scenario 12) the same figure
  counts the sections in progress at a moment when more than ``limit`` were (for weighted
  permits, scenario 17, more than ``limit`` units: the sum of their weights). A section's
  interval runs from just after ``acquire`` returned to just before ``release`` was called,
  so it lies inside what the holder took for its lease: an overlap is two processes acting
  as holders at once, never a measuring artefact.
  For a read-write lock (scenario 15) two reads may share the name: only pairs with a write
  in them count (a section of a mutex or a permit has no mode and excludes like a write).
- Silent overlaps: overlapping pairs (for a semaphore, moments over its limit) in which no
  holder was ever told its lease was gone (``lost`` unset and a clean release). In an
  overlap one of the two held a lease that was no longer valid; a lease cannot stop that
  holder, but it must tell it. (Which of the two is judged by who was told, not by fences:
  after a restart that loses them, fences start again from 1 and the stale holder has the
  higher one.)
- Fence regressions: a section whose fence is not above the fence of a section that had
  ended before this one's ``acquire`` was even called (that grant surely came later), plus
  fences handed to two different sections of one lock.
- Write fence regressions (read-write locks): a write whose fence is not above the fence of
  every section of its name that ended before the write's section began. A write excludes
  every other section, so each of those was granted before it; a write whose holder was told
  its lease was gone is exempt (a later grant to another was then rightful).
- Stale writes accepted: writes the resource accepted after it had already seen, from
  another section, a fence at least as high: the writer's lease had been superseded.
- Lost updates: writes the resource accepted minus the final value of the counter (each
  section writes what it read plus one, so the two are equal exactly when no update was
  lost).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from safety.history import Access, Attempt, History, Section

__all__ = [
    "Figures",
    "RaceFigures",
    "check",
    "check_races",
    "excess_moments",
    "fence_regressions",
    "most_at_once",
    "most_units_at_once",
    "overlapping_pairs",
    "stale_writes",
    "write_fence_regressions",
]


@dataclasses.dataclass(frozen=True)
class Figures:
    sections: int
    overlaps: int
    """Sections that overlap at least one other section of the same lock."""
    overlap_pairs: int
    silent_overlaps: int
    fence_regressions: int
    stale_writes_accepted: int | None
    """None when the run had no protected resource."""
    stale_writes_refused: int | None
    writes_accepted: int | None
    final_value: int | None
    lost_updates: int | None
    most_at_once: int = 0
    """The most sections of one name in progress at one moment."""
    write_fence_regressions: int | None = None
    """Read-write locks: writes whose fence was not above every earlier section's (None: the
    history has no read or write sections)."""
    most_readers_at_once: int | None = None
    """Read-write locks: the most reads of one name in progress at one moment."""
    most_units_at_once: int | None = None
    """Weighted permits (scenario 17): the most units of one name in progress at one moment
    (None: the history has no weighted section)."""
    linearizable: str | None = None
    """``tenure verify``'s checker's verdict on the run's calls, where it was asked
    (``safety.linearizable``): "linearizable: N operations ...", or why not."""


def _by_name(sections: Iterable[Section]) -> dict[str, list[Section]]:
    grouped: dict[str, list[Section]] = defaultdict(list)
    for section in sections:
        grouped[section.name].append(section)
    return grouped


def _shared(one: Section, other: Section) -> bool:
    """Whether the two may hold the name together: two reads of a read-write lock."""
    return one.mode == other.mode == "read"


def overlapping_pairs(sections: Iterable[Section]) -> list[tuple[Section, Section]]:
    """Every pair of sections of one lock whose intervals intersect (touching is not
    overlapping: one may start at the very nanosecond the other ended), but for two reads of
    a read-write lock, which may."""
    pairs: list[tuple[Section, Section]] = []
    for group in _by_name(sections).values():
        active: list[Section] = []
        for section in sorted(group, key=lambda s: s.start):
            active = [other for other in active if other.end > section.start]
            pairs.extend((other, section) for other in active if not _shared(other, section))
            active.append(section)
    return pairs


def _units(sections: Iterable[Section]) -> int:
    """The units of a semaphore's limit these sections take: a weighted permit's weight, one
    for every other section."""
    return sum(1 if s.weight is None else s.weight for s in sections)


def excess_moments(sections: Iterable[Section], limit: int) -> list[tuple[Section, ...]]:
    """For each section that started while others of its name still in progress took so
    many units that its own took the total past ``limit``: the sections in progress at that
    moment (it included). A section takes one unit, a weighted permit its weight (scenario
    17): without weights, the sections that started while ``limit`` others were in
    progress. For ``limit`` 1 these are the overlaps; ``overlapping_pairs`` keeps the mutex's
    pairwise count. Checking at each start suffices: the units in progress only grow when a
    section starts."""
    moments: list[tuple[Section, ...]] = []
    for group in _by_name(sections).values():
        active: list[Section] = []
        for section in sorted(group, key=lambda s: s.start):
            active = [other for other in active if other.end > section.start]
            active.append(section)
            if _units(active) > limit:
                moments.append(tuple(active))
    return moments


def most_units_at_once(sections: Iterable[Section]) -> int:
    """The most units (a weighted permit's weight, one for any other section) of one name in
    progress at one moment."""
    most = 0
    for group in _by_name(sections).values():
        active: list[Section] = []
        for section in sorted(group, key=lambda s: s.start):
            active = [other for other in active if other.end > section.start]
            active.append(section)
            most = max(most, _units(active))
    return most


def most_at_once(sections: Iterable[Section]) -> int:
    most = 0
    for group in _by_name(sections).values():
        active: list[Section] = []
        for section in sorted(group, key=lambda s: s.start):
            active = [other for other in active if other.end > section.start]
            active.append(section)
            most = max(most, len(active))
    return most


def fence_regressions(sections: Iterable[Section]) -> int:
    """Sections granted a fence not above one already issued before their request, plus
    sections sharing a fence with another section of the same lock."""
    regressions = 0
    for group in _by_name(sections).values():
        fenced = [s for s in group if s.fence is not None]
        by_end = sorted(fenced, key=lambda s: s.end)
        ends = [s.end for s in by_end]
        # best[i] = highest fence among the first i sections to end
        best = [0]
        for section in by_end:
            assert section.fence is not None
            best.append(max(best[-1], section.fence))
        for section in fenced:
            assert section.fence is not None
            finished_before = bisect.bisect_left(ends, section.asked)
            if finished_before and section.fence <= best[finished_before]:
                regressions += 1
        counts = Counter(s.fence for s in fenced)
        regressions += sum(n - 1 for n in counts.values() if n > 1)
    return regressions


def write_fence_regressions(sections: Iterable[Section], *, every: bool = False
                            ) -> list[tuple[Section, Section]]:
    """(earlier, write) for each write of a read-write lock whose fence is not above that of
    a section of its name that ended before the write's section began (the highest such).
    ``every``: judge every section so, as exclusive as a write (an election's terms).

    Sound because a write excludes every other section: one that ended before the write
    began was granted before it (a grant after the write's would have come while the write
    held), and a write's fence must exceed every earlier fence of the name. A write whose
    holder was told its lease was gone is not judged: its lease may have ended before its
    section began (a reply delayed past the ttl), and others' grants were then rightful."""
    found: list[tuple[Section, Section]] = []
    for group in _by_name(sections).values():
        fenced = sorted((s for s in group if s.fence is not None), key=lambda s: s.end)
        ends = [s.end for s in fenced]
        # best[i] = the section with the highest fence among the first i to end
        best: list[Section | None] = [None]
        for section in fenced:
            top = best[-1]
            assert section.fence is not None
            if top is None or (top.fence is not None and section.fence > top.fence):
                top = section
            best.append(top)
        for write in fenced:
            if (write.mode != "write" and not every) or write.learned_loss:
                continue
            earlier = best[bisect.bisect_left(ends, write.start)]
            if earlier is not None:
                assert write.fence is not None and earlier.fence is not None
                if write.fence <= earlier.fence:
                    found.append((earlier, write))
    return found


def stale_writes(accesses: Sequence[Access]) -> tuple[int, int]:
    """(accepted, refused) writes whose fence was already matched or passed by another
    section's access, in the resource's order."""
    accepted = refused = 0
    highest: int | None = None
    highest_from = ""
    for access in accesses:
        fence = access.fence
        if access.op == "write" and highest is not None and (
            fence is None
            or fence < highest
            or (fence == highest and access.section != highest_from)
        ):
            if access.accepted:
                accepted += 1
            else:
                refused += 1
        if fence is not None and (highest is None or fence > highest):
            highest, highest_from = fence, access.section
    return accepted, refused


def check(history: History, limit: int = 1) -> Figures:
    """The figures of a history of a mutex, or of a semaphore of ``limit`` permits."""
    moments: Sequence[tuple[Section, ...]]
    moments = overlapping_pairs(history.sections) if limit == 1 else excess_moments(
        history.sections, limit)
    involved = {s.key for moment in moments for s in moment}
    sided = any(s.mode is not None for s in history.sections)
    weighted = any(s.weight is not None for s in history.sections)
    # In every such moment one holder's lease had ended: one of them at least must be told.
    silent = sum(1 for moment in moments if not any(s.learned_loss for s in moment))
    if history.accesses:
        stale_accepted, stale_refused = stale_writes(history.accesses)
        writes = [a for a in history.accesses if a.op == "write" and a.accepted]
        final = writes[-1].value if writes else 0
        lost: int | None = len(writes) - final
        written: int | None = len(writes)
        stale_a: int | None = stale_accepted
        stale_r: int | None = stale_refused
        final_value: int | None = final
    else:
        lost = written = stale_a = stale_r = final_value = None
    return Figures(
        sections=len(history.sections),
        overlaps=len(involved),
        overlap_pairs=len(moments),
        silent_overlaps=silent,
        fence_regressions=fence_regressions(history.sections),
        stale_writes_accepted=stale_a,
        stale_writes_refused=stale_r,
        writes_accepted=written,
        final_value=final_value,
        lost_updates=lost,
        most_at_once=most_at_once(history.sections),
        write_fence_regressions=len(write_fence_regressions(history.sections))
        if sided else None,
        most_readers_at_once=most_at_once(s for s in history.sections if s.mode == "read")
        if sided else None,
        most_units_at_once=most_units_at_once(history.sections) if weighted else None,
    )


@dataclasses.dataclass(frozen=True)
class RaceFigures:
    rounds: int
    attempts: int
    rounds_with_several_winners: int
    """Mutual exclusion broken: never allowed."""
    rounds_without_a_winner: int
    """Nobody won: a liveness failure, except where one-shot attempts can split the votes."""
    most_winners: int
    errors: int


def check_races(attempts: Sequence[Attempt]) -> RaceFigures:
    winners: Counter[int] = Counter()
    rounds: set[int] = set()
    errors = 0
    for attempt in attempts:
        rounds.add(attempt.round)
        if attempt.won:
            winners[attempt.round] += 1
        if attempt.error is not None:
            errors += 1
    return RaceFigures(
        rounds=len(rounds),
        attempts=len(attempts),
        rounds_with_several_winners=sum(1 for r in rounds if winners[r] > 1),
        rounds_without_a_winner=sum(1 for r in rounds if winners[r] == 0),
        most_winners=max(winners.values(), default=0),
        errors=errors,
    )
