"""The harness's command line.

    .venv/bin/python -m safety run --profile full     # every backend; writes docs/safety.md
    .venv/bin/python -m safety run --profile quick --backends sqlite --scenarios 1,killed
    .venv/bin/python -m safety list                   # the scenarios, and where each runs
    .venv/bin/python -m safety render DIR [DIR...]    # the report again from runs' --workdir
    .venv/bin/python -m safety render DIR --section weighted --heading TEXT
                                      # only these runs' rows, as a section of docs/safety.md

Exit status: 0 when every result passed, 1 when any property failed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable

from tests.backends import NAMES, choose

import tenure
from safety import report
from safety.control import ROOT, Target
from safety.scenarios import PROFILES, SCENARIOS, Profile, Result, run_scenario
from safety.servers import (
    NotReady,
    Servers,
    clock_variants,
    driver_versions,
    landed,
    restart_variants,
    server_version,
)

__all__ = ["main"]


def _scenario_keys(text: str) -> list[str]:
    if text == "all":
        return list(SCENARIOS)
    by_number = {str(s.number): key for key, s in SCENARIOS.items()}
    keys = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key = by_number.get(item, item)
        if key not in SCENARIOS:
            raise argparse.ArgumentTypeError(
                f"unknown scenario {item!r}; known: {', '.join(SCENARIOS)} (or 1-{len(SCENARIOS)})"
            )
        keys.append(key)
    return keys


def _backends(text: str) -> list[str]:
    try:
        return choose(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m safety", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run scenarios and report the figures")
    run.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    run.add_argument("--backends", type=_backends, default="all",
                     help=f"comma-separated, default all: {','.join(NAMES)}")
    run.add_argument("--scenarios", type=_scenario_keys, default="all",
                     help=f"comma-separated names or numbers, default all: {','.join(SCENARIOS)}")
    run.add_argument("--report", type=pathlib.Path, default=None,
                     help="write the markdown report here (default for --profile full: "
                     "docs/safety.md; none for quick)")
    run.add_argument("--workdir", type=pathlib.Path, default=None,
                     help="keep histories here (default: a temp dir, removed afterwards)")
    run.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    commands.add_parser("list", help="the scenarios and the backends each applies to")
    render = commands.add_parser(
        "render", help="write the report again from a finished run's --workdir (its "
        "results.json), running nothing"
    )
    render.add_argument("workdir", type=pathlib.Path, nargs="+",
                        help="one run's --workdir, or several runs' that split the backends "
                        "(a scenario run on a backend more than once is taken from the latest run)")
    render.add_argument("--report", type=pathlib.Path, default=ROOT / "docs" / "safety.md")
    render.add_argument("--title", default=report.TITLE,
                        help=f"the page's heading (default: {report.TITLE!r})")
    render.add_argument("--section", default=None, metavar="KEY",
                        help="write only these runs' results, as the section KEY of the "
                        "existing report (replacing the section of that key, else added at "
                        "its end), leaving the rest of the file untouched; a scenario's key "
                        "keeps only that scenario's results")
    render.add_argument("--heading", default=None,
                        help="the section's heading (default: its scenario's title)")
    return top


def _render(args: argparse.Namespace) -> int:
    runs = sorted((report.load(workdir) for workdir in args.workdir),
                  key=lambda run: run[1].started)
    # A scenario that several runs recorded on one backend is taken from the latest of them:
    # a run redone for one backend or one scenario (after a fix) replaces what an earlier
    # run recorded for it, and keeps the rest.
    latest = {(r.backend, r.scenario): index for index, (found, _, _) in enumerate(runs)
              for r in found}
    results = sorted((r for index, (found, _, _) in enumerate(runs) for r in found
                      if latest[r.backend, r.scenario] == index), key=_order)
    used = [env for index, (_, env, _) in enumerate(runs) if index in latest.values()]
    asked = {backend for _, _, backends in runs for backend in backends}
    backends = [backend for backend in NAMES if backend in asked]
    if args.section is not None:
        scenario = SCENARIOS.get(args.section)
        if scenario is not None:
            results = [r for r in results if r.scenario == scenario.number]
        heading = args.heading or (f"{scenario.number}. {scenario.title}" if scenario
                                   else args.section)
        report.splice(args.report, args.section, report.render_section(
            results, report.Environment.merged(used), list(NAMES), args.section, heading))
        print(f"safety: wrote the section {args.section!r} of {args.report}")
        return 0 if all(r.passed for r in results) else 1
    report.write(args.report, results, report.Environment.merged(used), backends,
                 title=args.title)
    sources = ", ".join(str(workdir / "results.json") for workdir in args.workdir)
    print(f"safety: wrote {args.report} from {sources}")
    return 0 if all(r.passed for r in results) else 1


def _list() -> int:
    for scenario in SCENARIOS.values():
        print(f"{scenario.number}. {scenario.key}: {scenario.title} - {scenario.shows}")
        for backend in NAMES:
            why = scenario.not_applicable(backend)
            print(f"     {backend:14} {'yes' if why is None else 'n/a: ' + why}")
    return 0


def _order(result: Result) -> tuple[int, int]:
    # A stable sort: a scenario's variants keep the order the scenario produced them in.
    return result.scenario, NAMES.index(result.backend)


def _run(args: argparse.Namespace) -> int:
    profile = PROFILES[args.profile]
    backends: list[str] = args.backends  # argparse converts the string defaults too
    keys: list[str] = args.scenarios
    destination = args.report
    if destination is None and profile.name == "full":
        destination = ROOT / "docs" / "safety.md"
    own_workdir = args.workdir is None
    workdir: pathlib.Path = (pathlib.Path(tempfile.mkdtemp(prefix="tenure-safety-"))
                             if own_workdir else args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    began = time.monotonic()
    load_before = os.getloadavg()
    source = report.source_revision()
    results: list[Result] = []
    skipped: dict[str, str] = {}
    versions: dict[str, str] = {}
    capabilities: dict[str, tenure.Capabilities] = {}
    print(f"safety: {profile.name} profile, seed {args.seed}, histories in {workdir}",
          flush=True)
    with Servers(workdir) as servers:
        for backend in backends:
            reason = landed(backend)
            if reason is not None:
                skipped[backend] = reason
                print(f"  {backend}: not run: {reason}", flush=True)
                continue
            try:
                target = servers.target(backend)
            except NotReady as exc:
                skipped[backend] = str(exc)
                print(f"  {backend}: not run: {exc}", flush=True)
                continue
            except Exception as exc:  # a server that cannot start fails the run
                results.append(Result(0, "Server start", "", backend, 0, 0, None, None, None,
                                      None, violations=[f"the server did not start: {exc!r}"]))
                continue
            versions[backend] = server_version(target)
            with tenure.connect(target.url) as locks:
                capabilities[backend] = locks.capabilities
            for key in keys:
                if SCENARIOS[key].not_applicable(backend) is not None:
                    continue
                results += _one(key, backend, target, servers, profile=profile,
                                workdir=workdir, seed=args.seed)
    results.sort(key=_order)
    elapsed = time.monotonic() - began
    env = report.Environment.measure(
        command=report.command_line(), profile=profile.name, started=started,
        seconds=elapsed, load_before=load_before, drivers=driver_versions(),
        servers=versions, capabilities=capabilities, skipped=skipped, source=source,
    )
    report.save(workdir, results, env, backends)
    if destination is not None:
        report.write(destination, results, env, backends)
        print(f"safety: wrote {destination}")
    failed = [r for r in results if not r.passed]
    print(f"safety: {len(results)} results, {len(failed)} failed, {elapsed:.0f} s")
    for result in failed:
        print(f"  FAIL {result.label} on {result.backend}: {'; '.join(result.violations)}")
    if own_workdir and not failed and destination is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif failed:
        print(f"safety: histories kept in {workdir}")
    return 1 if failed else 0


def _one(key: str, backend: str, target: Target, servers: Servers, *, profile: Profile,
         workdir: pathlib.Path, seed: int) -> list[Result]:
    directory = workdir / backend / key
    if key in ("restart", "clock"):
        # Each variant on a server of its own: restarted in place, or on a movable clock.
        start: Callable[[str, str], contextlib.AbstractContextManager[Target]]
        if key == "restart":
            variants = restart_variants(backend)
            start = servers.restartable
        else:
            variants = clock_variants(backend)
            start = servers.clocked
        found = []
        for number, variant in enumerate(variants):
            try:
                with start(backend, variant) as own:
                    found += run_scenario(key, own, profile, directory / str(number), seed)
            except Exception as exc:
                scenario = SCENARIOS[key]
                found.append(Result(scenario.number, scenario.title, variant, backend, 0, 0,
                                    None, None, None, None,
                                    violations=[f"the variant could not be set up (its "
                                                f"server, or the clock shim): {exc!r}"]))
    elif key == "failover":
        # A replicated set-up of its own: its primary is killed.
        try:
            with servers.failover(backend) as own:
                found = run_scenario(key, own, profile, directory, seed)
        except Exception as exc:
            scenario = SCENARIOS[key]
            found = [Result(scenario.number, scenario.title, "", backend, 0, 0, None, None,
                            None, None, violations=[f"the set-up could not be started: "
                                                    f"{exc!r}"])]
    else:
        found = run_scenario(key, target, profile, directory, seed)
    for result in found:
        status = "pass" if result.passed else "FAIL " + "; ".join(result.violations)
        print(f"  {backend:12} {result.label}: runs {result.runs}, sections {result.sections}, "
              f"overlaps {result.overlaps}, stale writes accepted "
              f"{result.stale_writes_accepted}, worst recovery {result.worst_recovery} "
              f"[{result.seconds} s] {status}", flush=True)
    return found


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM's default would skip every clean-up: end like Ctrl-C instead, so that the
    # servers and workers this run started are stopped on the way out.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    args = parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "render":
        return _render(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
