"""scripts/unasync.py --check fails on a stale generated file and on a dead rule (one that
rewrites nothing in any source), naming it."""

from __future__ import annotations

import importlib.util
import pathlib
import re
from types import ModuleType

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "unasync.py"


@pytest.fixture
def unasync() -> ModuleType:
    """The script as a module of its own (its rules may be changed by the test)."""
    spec = importlib.util.spec_from_file_location("unasync_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_files_are_current_and_every_rule_is_used(
    unasync: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert unasync.main(["--check"]) == 0, capsys.readouterr().out


def test_a_rule_that_matches_nothing_fails_the_check(
    unasync: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = (r"\bNoSourceSaysThis\b", "Nothing")
    monkeypatch.setattr(unasync, "SUBSTITUTIONS", [*unasync.SUBSTITUTIONS, dead])
    monkeypatch.setattr(unasync, "COMPILED", [
        *unasync.COMPILED, (re.compile(dead[0]), dead[1])
    ])
    assert unasync.main(["--check"]) == 1
    said = capsys.readouterr().out
    assert "match nothing in any source" in said
    assert dead[0] in said.splitlines()[-1]


def test_each_rule_counts_what_it_rewrote(unasync: ModuleType) -> None:
    used = [0] * len(unasync.COMPILED)
    text = unasync.unasync_text("async def f():\n    await g()\n    await h()\n", used)
    assert text == "def f():\n    g()\n    h()\n"
    counts = dict(zip((pattern for pattern, _ in unasync.SUBSTITUTIONS), used, strict=True))
    assert counts[r"\basync def\b"] == 1
    assert counts[r"\bawait "] == 2
    assert unasync.dead_rules(used) == [
        pattern for pattern, _ in unasync.SUBSTITUTIONS
        if pattern not in (r"\basync def\b", r"\bawait ")
    ]
