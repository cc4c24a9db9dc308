"""The frame of every MySQL clean-up pass (the lock table's, the semaphores' and the read-write
locks'; see ``_sql``): one text of statements that opens with ``sweep_window`` and ends with
``sweep_answer``, each kind's DELETE in between. Inputs: ``after`` (hex of the name the last
pass ended at; '' for the start), ``batch``, ``gc_us``."""

from __future__ import annotations

__all__ = ["SWEEP_BATCH", "sweep_answer", "sweep_window", "sweeping_records"]


def sweep_window(table: str, order: str = "name") -> str:
    """The pass's window: the last name of the next ``batch`` rows of ``table`` after
    ``after`` in key order (``order``), into @tenure_sweep_end, and their count, into
    @tenure_sweep_rows. A range of the primary key: it reads at most ``batch`` rows."""
    return f"""SELECT MAX(name), COUNT(*) INTO @tenure_sweep_end, @tenure_sweep_rows FROM (
    SELECT name FROM {table} WHERE name > UNHEX(%(after)s) ORDER BY {order} LIMIT %(batch)s
) AS batch;"""


SWEEP_BATCH = "name > UNHEX(%(after)s) AND name <= @tenure_sweep_end"
"""The names of the pass's window."""


def sweep_answer(deleted: str) -> str:
    """The pass's one row: hex of the name it ended at (NULL: the window reached the end of
    the table, so the next pass starts over), and ``deleted``."""
    return f"SELECT IF(@tenure_sweep_rows < %(batch)s, NULL, HEX(@tenure_sweep_end)), {deleted}"


def sweeping_records(
    records: str, idle: str, *, order: str = "name", record: str = "", tidy: str = ""
) -> str:
    """The pass of a kind whose records are rows beside its leases (semaphores, read-write
    locks), one transaction: the window (``order``: the key's columns), its records locked
    (``record``: what else tells a record row of ``records``), those of the names ``idle``
    selects deleted (their count is the answer's), then ``tidy`` (statements ending in
    ``;`` whose rows are not counted)."""
    return f"""
START TRANSACTION;
{sweep_window(records, order)}
SELECT COUNT(*) INTO @tenure_sweep_locked FROM {records}
WHERE {SWEEP_BATCH}{record} FOR UPDATE;
DELETE FROM {records} WHERE {SWEEP_BATCH} AND name IN (
    SELECT name FROM ({idle}) AS idle
);
SET @tenure_sweep_deleted = ROW_COUNT();
{tidy}
COMMIT;
{sweep_answer("@tenure_sweep_deleted")}
"""
