"""Write docs/safety.md from a run's results. Every figure in it comes from ``Result``s the
harness produced; the only hand-written text is the wording around them."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import tenure
from safety.control import ROOT
from safety.scenarios import SCENARIOS, Result, traits

__all__ = ["TITLE", "Environment", "load", "render", "render_section", "save", "splice",
           "write"]


@dataclasses.dataclass
class Environment:
    """Where and with what the figures were measured."""

    command: str
    profile: str
    started: datetime.datetime
    seconds: float
    cpus: int
    cpu_model: str
    kernel: str
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    python: str
    tenure_version: str
    drivers: dict[str, str]
    servers: dict[str, str]
    capabilities: dict[str, tenure.Capabilities]
    skipped: dict[str, str]
    """Backends asked for but not run, and why."""
    source: str = ""
    """The git commit the run measured (and whether the tree had uncommitted changes)."""
    runs: int = 1
    """How many harness runs the figures come from (``render`` merges several)."""

    @classmethod
    def measure(cls, *, command: str, profile: str, started: datetime.datetime, seconds: float,
                load_before: tuple[float, float, float], drivers: dict[str, str],
                servers: dict[str, str], capabilities: dict[str, tenure.Capabilities],
                skipped: dict[str, str], source: str) -> Environment:
        return cls(
            command=command, profile=profile, started=started, seconds=seconds,
            cpus=len(os.sched_getaffinity(0)), cpu_model=_cpu_model(),
            kernel=f"{platform.system()} {platform.release()}",
            load_before=load_before, load_after=os.getloadavg(),
            python=f"{platform.python_implementation()} {platform.python_version()}",
            tenure_version=tenure.__version__, drivers=drivers, servers=servers,
            capabilities=capabilities, skipped=skipped, source=source,
        )


    @classmethod
    def merged(cls, parts: Sequence[Environment]) -> Environment:
        """One environment for runs that split the backends between them (run one after
        another or side by side on the same machine): their commands, the first start, the
        summed run time, every backend's versions."""
        first, last = parts[0], parts[-1]
        ran = {backend for part in parts for backend in part.servers}
        return cls(
            command="\n".join(part.command for part in parts),
            profile="/".join(dict.fromkeys(part.profile for part in parts)),
            started=min(part.started for part in parts),
            seconds=sum(part.seconds for part in parts),
            cpus=first.cpus, cpu_model=first.cpu_model, kernel=first.kernel,
            load_before=first.load_before, load_after=last.load_after,
            python=first.python, tenure_version=first.tenure_version,
            drivers={k: v for part in parts for k, v in part.drivers.items()},
            servers={k: v for part in parts for k, v in part.servers.items()},
            runs=sum(part.runs for part in parts),
            capabilities={k: v for part in parts for k, v in part.capabilities.items()},
            skipped={k: v for part in parts for k, v in part.skipped.items() if k not in ran},
            source="; ".join(f"{part.source} ({', '.join(part.servers) or 'no backend'})"
                             for part in parts if part.source),
        )

    def to_json(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        body["started"] = self.started.isoformat()
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Environment:
        fields = dict(body)
        fields["started"] = datetime.datetime.fromisoformat(body["started"])
        fields["load_before"] = tuple(body["load_before"])
        fields["load_after"] = tuple(body["load_after"])
        fields["capabilities"] = {name: tenure.Capabilities(**value)
                                  for name, value in body["capabilities"].items()}
        return cls(**fields)


def save(directory: pathlib.Path, results: Sequence[Result], env: Environment,
         backends: Sequence[str]) -> None:
    """Keep a run's figures beside its histories, so that the report can be rendered again
    (``python -m safety render DIR``) without running anything."""
    (directory / "results.json").write_text(json.dumps(
        {"backends": list(backends), "environment": env.to_json(),
         "results": [dataclasses.asdict(r) for r in results]},
        indent=1, default=str,
    ))


def load(directory: pathlib.Path) -> tuple[list[Result], Environment, list[str]]:
    body = json.loads((directory / "results.json").read_text())
    results = [Result(**fields) for fields in body["results"]]
    return results, Environment.from_json(body["environment"]), list(body["backends"])


def source_revision() -> str:
    """The commit being measured, read when the run starts (edits during a long run would
    not be in it)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  check=False).stdout.strip()
        except OSError:  # no git on this machine
            return ""

    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown (not a git checkout, or no git)"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "safety")
    return commit + (" with uncommitted changes to src/ or safety/" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _number(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


NOTE_KEYS: dict[int, list[str]] = {
    1: ["processes", "fence_regressions", "silent_overlaps"],
    2: ["processes", "writes_accepted", "final_value", "lost_updates"],
    3: ["overlap_pairs", "victims_told_of_loss", "silent_overlaps", "stale_writes_refused",
        "lost_updates"],
    4: ["ttl", "median_recovery", "lanes"],
    5: ["sections_spanning_a_restart", "of_which_told_of_loss", "takeovers_inside_a_ttl",
        "fence_regressions", "backend_errors_seen", "restart_seconds"],
    6: ["worst_check_raises_after", "slowest_calls", "worst_recovery_after_heal",
        "lost_to_a_suspension"],
    7: ["held_right_after", "held_after_3_ttl", "renewer_tasks_after_3_ttl",
        "renewer_threads_after_3_ttl"],
    8: ["processes", "threads_each", "attempts", "rounds_with_several_winners",
        "rounds_without_a_winner", "errors"],
    9: ["names_accepted", "names_refused", "look_alikes", "prefix_queries",
        "arguments_refused", "arguments_accepted"],
    10: ["clock_moved", "jump_seconds", "victims_told_of_loss", "silent_overlaps",
         "stale_writes_refused", "sections_retaken_held_on_a_bare_majority"],
    11: ["processes", "stopped", "sections_after_the_stop", "backend_errors_seen",
         "lost_updates", "fence_regressions"],
    12: ["processes", "most_at_once", "victims_told_of_loss", "silent_overlaps",
         "fence_regressions", "median_recovery"],
    13: ["processes", "ttl", "promotion_seconds", "sections_spanning_a_failover",
         "of_which_told_of_loss", "silent_overlaps", "fence_regressions",
         "fence_before_and_after", "lost_updates", "backend_errors_seen"],
    14: ["processes", "records_removed_seen", "records_used_again_seen",
         "sections_on_other_names", "fence_regressions", "silent_overlaps"],
    15: ["processes", "reads", "writes", "most_readers_at_once", "longest_write_wait",
         "longest_read_wait", "victims_told_of_loss", "silent_overlaps", "fence_regressions",
         "write_fence_regressions", "median_recovery"],
    16: ["processes", "victims_told_of_loss", "silent_overlaps", "fence_regressions",
         "term_regressions", "median_recovery"],
    17: ["processes", "threads_each", "permits_by_weight", "most_units_at_once",
         "longest_wait", "acquire_timeouts", "holder_weight", "filler_weights",
         "waiter_weight", "silent_overlaps", "fence_regressions", "median_recovery"],
}


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_format(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    return str(value)


def _notes(result: Result) -> str:
    keys = NOTE_KEYS.get(result.scenario, [])
    return "; ".join(f"{k.replace('_', ' ')}: {_format(result.details[k])}"
                     for k in keys if k in result.details and result.details[k] is not None)


def _linearizable(result: Result) -> str:
    """The checker's verdict in a word: yes (with the calls checked), **no**, unknown, n/a."""
    verdict = result.details.get("linearizable")
    if not isinstance(verdict, str):
        return "n/a"
    if verdict.startswith("linearizable: "):
        return f"yes ({verdict.split()[1]} calls)"
    return "**no**" if verdict.startswith("not linearizable") else "unknown"


def _verdict(result: Result) -> str:
    return "pass" if result.passed else "**FAIL**"


TITLE = "Safety record"


def render(results: Sequence[Result], env: Environment, backends: Sequence[str],
           title: str = TITLE) -> str:
    lines: list[str] = []
    add = lines.append
    failed = [r for r in results if not r.passed]
    add(f"# {title}")
    add("")
    add("<!-- Generated by the safety harness: do not edit. Every figure below comes from "
        "the harness's recorded histories. -->")
    add("")
    commands = " and ".join(f"`{command}`" for command in env.command.splitlines())
    add(f"Generated by {commands} ({env.profile} profile) from "
        f"{env.started:%Y-%m-%d %H:%M} UTC, in {env.seconds / 60:.1f} minutes"
        f"{f' (summed over {env.runs} runs)' if env.runs > 1 else ''}. How the "
        "harness works and what each scenario shows: [safety-method.md](safety-method.md).")
    add("")
    verdict = (f"**{len(results)} results, all passed.**" if not failed else
               f"**{len(failed)} of {len(results)} results FAILED**: see "
               "[Failures](#failures).")
    add(verdict)
    add("")
    add("## Results")
    add("")
    add("Overlaps: critical sections that overlapped another on the same lock, by one "
        "observer's clock. Stale writes accepted: writes the protected resource accepted after "
        "it had seen a newer holder's fence. Worst recovery: what it measures is under each "
        "scenario (its bound in brackets); n/a where it does not apply. Linearizable: "
        "`tenure verify`'s checker's verdict on the calls the clients made (each section's "
        "acquire, last renewal and release, with their times and answers), where the harness "
        "checks the scenario's history (safety-method.md, \"Linearizability\"): \"**no**\" is "
        "expected only where a scenario breaks what the backend promises.")
    add("")
    lines += _table(results)


    add("## Where each scenario runs")
    add("")
    add("| Scenario | " + " | ".join(backends) + " |")
    add("| --- |" + " --- |" * len(backends))
    # backend -> reason -> scenario numbers it keeps out
    reasons: dict[str, dict[str, list[int]]] = {}
    for scenario in SCENARIOS.values():
        cells = []
        for backend in backends:
            if backend in env.skipped:
                cells.append("not run")
                continue
            why = scenario.not_applicable(backend)
            if why is None:
                cells.append("yes")
            else:
                cells.append("n/a")
                reasons.setdefault(backend, {}).setdefault(why, []).append(scenario.number)
        add(f"| {scenario.number}. {scenario.title} | " + " | ".join(cells) + " |")
    add("")
    for backend, grouped in reasons.items():
        parts = [f"{', '.join(map(str, numbers))}: {why}" for why, numbers in grouped.items()]
        add(f"- **{backend}** (n/a): " + "; ".join(parts) + ".")
    for backend, reason in env.skipped.items():
        add(f"- **{backend}** not run: {reason}.")
    add("")

    add("## What each backend does not guarantee")
    add("")
    for backend in backends:
        if backend in env.skipped:
            continue
        add(f"### {backend}")
        add("")
        for statement in limits(backend, env.capabilities.get(backend),
                                [r for r in results if r.backend == backend]):
            add(f"- {statement}")
        add("")

    if failed:
        add("## Failures")
        add("")
        for result in failed:
            add(f"- {result.label} on {result.backend}:")
            for violation in result.violations:
                add(f"  - {_cell(violation)}")
        add("")

    add("## Machine and versions")
    add("")
    add(f"- Machine: {env.cpus} CPUs ({env.cpu_model}), {env.kernel}; load average "
        f"(1/5/15 min) {_load(env.load_before)} before the run, {_load(env.load_after)} after "
        "(the machine was shared with other work).")
    if env.source:
        if env.runs > 1:
            add(f"- Source, run by run, with the backends each covered: commits {env.source} "
                "(where two runs cover the same scenario on a backend, the figures are the "
                "later run's).")
        else:
            add(f"- Source: commit {env.source}.")
    add(f"- {env.python}, tenure {env.tenure_version}; drivers: "
        + ", ".join(f"{k} {v}" for k, v in sorted(env.drivers.items())) + ".")
    for backend, version in env.servers.items():
        add(f"- {backend}: {version}")
    add("")
    return "\n".join(lines)


def _table(results: Sequence[Result]) -> list[str]:
    """The results table, and what each scenario's recovery measures."""
    lines = [
        "| Scenario | Backend | Runs | Sections | Overlaps | Stale writes accepted "
        "| Linearizable | Worst recovery (bound) | Result | Notes |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for result in results:
        bound = "" if result.recovery_bound is None else f" ({result.recovery_bound:.2f} s)"
        lines.append(
            f"| {_cell(result.label)} | {result.backend} | {_number(result.runs)} "
            f"| {_number(result.sections)} | {_number(result.overlaps)} "
            f"| {_number(result.stale_writes_accepted)} | {_linearizable(result)} "
            f"| {_seconds(result.worst_recovery)}{bound} | {_verdict(result)} "
            f"| {_cell(_notes(result))} |")
    lines.append("")
    meanings = sorted({(r.scenario, r.recovery_meaning) for r in results if r.recovery_meaning})
    if meanings:
        lines += ["Recovery, per scenario:", ""]
        lines += [f"- {number}: {meaning}." for number, meaning in meanings]
        lines.append("")
    return lines


def render_section(results: Sequence[Result], env: Environment, backends: Sequence[str],
                   key: str, heading: str) -> str:
    """One section of a report, for figures added to a published record without running
    its other scenarios again (``python -m safety render DIR --section KEY``): a heading,
    the command and profile that produced them, their rows in the report's table, where
    their scenarios run, failures, and the source and versions measured. ``splice`` puts it
    in the report between its markers, leaving the rest of the file as it was."""
    lines = [_begin(key), f"## {heading}", ""]
    add = lines.append
    failed = [r for r in results if not r.passed]
    commands = " and ".join(f"`{command}`" for command in env.command.splitlines())
    add(f"Generated by {commands} ({env.profile} profile) from "
        f"{env.started:%Y-%m-%d %H:%M} UTC, in {env.seconds / 60:.1f} minutes"
        f"{f' (summed over {env.runs} runs)' if env.runs > 1 else ''}, and added to this "
        "page as a section of its own: the rest of the page is the earlier record, "
        "unchanged. Its table has the current harness's columns.")
    add("")
    add(f"**{len(results)} results, all passed.**" if not failed else
        f"**{len(failed)} of {len(results)} results FAILED.**")
    add("")
    lines += _table(results)
    for number in sorted({r.scenario for r in results}):
        scenario = next(s for s in SCENARIOS.values() if s.number == number)
        runs_on: list[str] = []
        kept_out: dict[str, list[str]] = {}
        for backend in backends:
            why = scenario.not_applicable(backend)
            if why is None:
                runs_on.append(backend)
            else:
                kept_out.setdefault(why, []).append(backend)
        add(f"Where scenario {number} runs: {', '.join(runs_on) or 'nowhere'}."
            + "".join(f" Not on {', '.join(names)}: {why}." for why, names in kept_out.items()))
        add("")
    for backend, reason in env.skipped.items():
        add(f"- **{backend}** not run: {reason}.")
    for result in failed:
        add(f"- FAILED: {result.label} on {result.backend}: "
            + "; ".join(_cell(v) for v in result.violations))
    if env.skipped or failed:
        add("")
    add(f"Machine: {env.cpus} CPUs ({env.cpu_model}), {env.kernel}; load average (1/5/15 "
        f"min) {_load(env.load_before)} before the run, {_load(env.load_after)} after (the "
        f"machine was shared with other work). Source: commit {env.source or 'unknown'}. "
        f"{env.python}, tenure {env.tenure_version}; "
        + "; ".join(f"{backend}: {version}" for backend, version in env.servers.items())
        + ".")
    add("")
    add(_end(key))
    return "\n".join(lines)


def _begin(key: str) -> str:
    return (f"<!-- section {key}: generated by the safety harness (python -m safety render "
            f"DIR --section {key}); do not edit -->")


def _end(key: str) -> str:
    return f"<!-- end of section {key} -->"


def splice(path: pathlib.Path, key: str, section: str) -> None:
    """Put ``section`` in the report at ``path``: in place of the section of that key
    already there, else at the end; every other line stays as it was."""
    text = path.read_text(encoding="utf-8")
    begin, end = _begin(key), _end(key)
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def limits(backend: str, capabilities: tenure.Capabilities | None,
           results: Sequence[Result]) -> list[str]:
    """Plain statements of what ``backend`` does not guarantee, from its declared
    capabilities and the figures measured here."""
    statements = []
    paused = {r.variant: r for r in results if r.scenario == 3}
    lease_only = next((r for v, r in paused.items() if v.startswith("lease")), None)
    fenced = next((r for v, r in paused.items() if v.startswith("fence")), None)
    if lease_only is not None and fenced is not None:
        statements.append(
            "A lease alone does not stop a paused holder. With the holder stopped for 1.5x "
            f"its TTL ({lease_only.runs} + {fenced.runs} pauses), critical sections overlapped "
            f"({lease_only.overlaps} and {fenced.overlaps}); stale writes accepted: "
            f"{lease_only.stale_writes_accepted} by a resource without a fence check, "
            f"{fenced.stale_writes_accepted} with the fence check."
        )
    else:
        statements.append("A lease alone does not stop a paused holder: only a resource that "
                          "checks fences rejects its late writes.")
    server = traits(backend).restart is None
    if capabilities is not None:
        statements.append(f"Fencing: {capabilities.fencing}.")
        if not capabilities.multi_host:
            statements.append("Processes on one host only.")
    if capabilities is not None and server:
        restarts = [r for r in results if r.scenario == 5 and r.runs]
        measured = "; ".join(
            f"{r.details.get('fence_regressions', 0)} fences repeated or went back and "
            f"{r.overlaps} sections overlapped across {r.runs} restarts ({r.variant})"
            for r in restarts
        )
        measured = f" Measured: {measured}." if measured else ""
        if not capabilities.fences_survive_restart:
            statements.append("Fences may repeat or go back after the server restarts, unless "
                              f"its configuration makes them durable.{measured}")
        if not capabilities.leases_survive_restart:
            statements.append("A server restart may forget every lease: holders are told "
                              "(lost, LockLost), but another process may enter before a "
                              "holder that does not check."
                              + ("" if not capabilities.fences_survive_restart else measured))
        if not capabilities.fault_tolerant:
            statements.append("No fault tolerance: while the server is unreachable nobody "
                              "acquires, renews or releases, and held leases run out.")
    split = traits(backend).split_votes
    races = next((r for r in results if r.scenario == 8 and r.runs), None)
    if split is not None and races is not None:
        statements.append(
            "A non-blocking acquire can find nobody winning: "
            f"{split}. Measured: {races.details.get('rounds_without_a_winner', 0)} of "
            f"{races.runs} rounds of {races.variant} ended without a winner; "
            f"{races.details.get('rounds_with_several_winners', 0)} with more than one."
        )
    statements.extend(_clock_limits(results))
    statements.extend(_failover_limits(results))
    statements.extend(KNOWN_LIMITS.get(backend, []))
    return statements


def _clock_limits(results: Sequence[Result]) -> list[str]:
    jumps = [r for r in results if r.scenario == 10 and r.runs]
    ending = [r for r in jumps if r.details.get("may_end_leases")]
    harmless = [r for r in jumps if not r.details.get("may_end_leases")]
    statements = []
    if ending:
        measured = "; ".join(
            f"{r.details.get('clock_moved')}: {r.overlaps} overlapping sections in {r.runs} "
            f"jumps, {r.details.get('victims_told_of_loss', 0)} holders told, "
            f"{r.stale_writes_accepted} stale writes accepted with the fence check"
            for r in ending
        )
        statements.append(
            "Expiry is judged by a wall clock: when that clock jumps forward (an NTP step, an "
            "operator's date -s), leases end early and another process may enter while the "
            "holder is still inside; the holder learns it at its next renewal, and only a "
            f"fence check stops its late write. Measured: {measured}. A backward jump only "
            "lengthens leases (a dead holder's lock stays taken longer)."
        )
    if harmless:
        statements.append(
            "Jumps of a clock that does not judge expiry end no lease. Measured: "
            + "; ".join(f"{r.details.get('clock_moved')}: {r.overlaps} overlaps and "
                        f"{r.details.get('victims_told_of_loss', 0)} leases ended in "
                        f"{r.runs} jumps" for r in harmless)
            + "."
        )
    return statements


def _failover_limits(results: Sequence[Result]) -> list[str]:
    failovers = [r for r in results if r.scenario == 13 and r.runs]
    if not failovers:
        return []
    measured = "; ".join(
        f"{r.runs} failovers ({r.details.get('processes')} processes, ttl "
        f"{_format(r.details.get('ttl'))} s): {r.overlaps} overlapping sections, "
        f"{r.details.get('silent_overlaps', 0)} of them silent, "
        f"{r.details.get('fence_regressions', 0)} fence regressions, "
        f"{r.stale_writes_accepted} stale writes accepted with the fence check"
        for r in failovers
    )
    return [
        "Replication to a Sentinel-managed replica is asynchronous: a failover can lose what "
        "the primary had not yet sent (a lease, the last fence increments). Measured with "
        f"the primary SIGKILLed under contention: {measured}."
    ]


KNOWN_LIMITS: dict[str, list[str]] = {
    "memory": ["One process only: it is a test double, not a lock between processes. "
               "Nothing survives the process."],
    "sqlite": ["Needs a local file system: SQLite's locking is unreliable on network file "
               "systems (NFS, SMB).",
               "No fault tolerance beyond the file's: a lost or corrupted file loses every "
               "lease and fence."],
    "redis": ["Replication is asynchronous: after a failover to a replica, a lease (and the "
              "fence counter) may be lost. Sentinel failover: scenario 13; a Cluster's "
              "failover is not measured (no replicas)."],
    "redis_cluster": ["Replication is asynchronous, as for a single Redis: a failover may "
                      "lose a lease. Not measured here."],
    "redlock": ["Safety assumes the nodes' clocks run at about the same rate (bounded "
                "drift) and process pauses shorter than the validity time: a clock jump on "
                "a majority of nodes breaks the first assumption (scenario 10)."],
    "mongodb": ["Measured against the mongoeco wire-protocol stand-in, not a real mongod: "
                "replica-set failover and write concerns are not exercised."],
    "mysql": ["Measured on MariaDB with innodb_flush_log_at_trx_commit=2: a killed server "
              "loses nothing committed, a power cut could lose the last second."],
    "postgresql": ["Measured with fsync=off: a killed server loses nothing committed, a "
                   "power cut could."],
}


def write(path: pathlib.Path, results: Sequence[Result], env: Environment,
          backends: Sequence[str], title: str = TITLE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, env, backends, title) + "\n", encoding="utf-8")


def command_line() -> str:
    return ".venv/bin/python -m safety " + " ".join(sys.argv[1:])
