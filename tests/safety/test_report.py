"""The report's sections: figures added to a published record leave the rest of it as it
was (``python -m safety render DIR --section KEY``)."""

from __future__ import annotations

import datetime
import pathlib

from safety.scenarios import KILL_RECOVERY, Result

from safety import report


def environment() -> report.Environment:
    return report.Environment(
        command=".venv/bin/python -m safety run --profile quick --scenarios weighted",
        profile="quick", started=datetime.datetime(2026, 12, 2, 4, 0, tzinfo=datetime.UTC),
        seconds=42.0, cpus=2, cpu_model="cpu", kernel="Linux", load_before=(1.0, 1.0, 1.0),
        load_after=(1.0, 1.0, 1.0), python="CPython 3.11", tenure_version="0.1.0",
        drivers={}, servers={"sqlite": "SQLite 3"}, capabilities={}, skipped={},
        source="abc123",
    )


def results(*, passed: bool = True) -> list[Result]:
    return [
        Result(17, "Weighted permits, limit 8", "baseline", "sqlite", 1, 240, 0, None, None,
               None, details={"processes": 6, "most_units_at_once": 8}),
        Result(17, "Weighted permits, limit 8", "holder killed (SIGKILL)", "sqlite", 6, 16,
               0, None, 0.5, 2.67, KILL_RECOVERY, details={"holder_weight": 3},
               violations=[] if passed else ["9 units at once"]),
    ]


def test_a_section_is_added_at_the_end_then_replaced_in_place(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "safety.md"
    earlier = "# Safety record\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"
    page.write_text(earlier)
    section = report.render_section(results(), environment(), ["memory", "sqlite"],
                                    "weighted", "17. Weighted permits, limit 8")
    report.splice(page, "weighted", section)
    text = page.read_text()
    assert text.startswith(earlier)  # the earlier record, byte for byte
    assert "## 17. Weighted permits, limit 8" in text
    assert "(quick profile)" in text and "**2 results, all passed.**" in text
    assert ("| 17. Weighted permits, limit 8 (baseline) | sqlite | 1 | 240 | 0 | n/a | n/a "
            "| n/a | pass | processes: 6; most units at once: 8 |") in text
    assert "| 0.500 s (2.67 s) | pass | holder weight: 3 |" in text
    assert "- 17: SIGKILL to the next acquisition" in text
    # Again, with other figures: replaced where it was, nothing else changed, not added twice.
    page.write_text(text + "\nlater text\n")
    report.splice(page, "weighted", report.render_section(
        results(passed=False), environment(), ["memory", "sqlite"], "weighted", "17. W"))
    again = page.read_text()
    assert again.startswith(earlier) and again.endswith("\nlater text\n")
    assert again.count("<!-- section weighted:") == 1
    assert "**1 of 2 results FAILED.**" in again and "9 units at once" in again
    assert "**2 results, all passed.**" not in again
