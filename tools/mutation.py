#!/usr/bin/env python3
"""Mutation testing of the library packages with mutmut: one command, one table row per package.

Usage (from the workspace root)::

    uv run --no-sync python tools/mutation.py ascend-config [ascend-topology ...]
        [--max-children N] [--fresh]

For each package it runs ``mutmut run`` in ``packages/<name>/`` with the ``[tool.mutmut]``
table of that package's ``pyproject.toml`` (what to mutate, which tests run, what else the
tests need copied), then prints one Markdown row for ``docs/testing.md``::

    | package | mutants | killed | survived | equivalent | score |

and writes the names of the surviving mutants to ``packages/<name>/mutants/survivors.txt``
(``uv run --no-sync python -m mutmut show NAME`` inside the package shows a mutant's diff).

Killed means a test failed, crashed or timed out with the mutant in place (mutmut's CPU-time
limit, or no CPU progress for ``--idle-limit`` seconds: a hung mutant, see
``mutant_watchdog``). A survivor judged equivalent (it cannot change behaviour that anyone can
observe) is listed, with one line of why, in ``packages/<name>/mutation-equivalent.txt`` as
``<mutant name>  <reason>``; those are left out of the score:
``score = killed / (mutants - equivalent)``. Listed names that no longer survive are reported
as stale.

mutmut keeps its results in ``packages/<name>/mutants/`` (git-ignored) and re-runs only what
changed; ``--fresh`` deletes that directory first. Several minutes per package on 2 cores; it
is not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import tomllib
from mutant_watchdog import guard

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ascend-config", "ascend-topology", "ascend-kernels", "ascend-graph")
# Statuses of a mutant the tests detected: a test failed, ran out of time, or the test process
# crashed (e.g. a mutant handing a null pointer to a native loop).
DETECTED = ("killed", "timeout", "segfault")
# A mutant process idle (no CPU used) this long is hung: see mutant_watchdog.
IDLE_LIMIT_S = 300.0
HEADER = "| package | mutants | killed | survived | equivalent | score |\n|---|---|---|---|---|---|"


@dataclass(frozen=True)
class Outcome:
    """One package's mutation result."""

    package: str
    total: int
    killed: int
    survivors: tuple[str, ...]
    equivalent: tuple[str, ...]
    stale: tuple[str, ...]

    @property
    def score(self) -> float:
        counted = self.total - len(self.equivalent)
        return self.killed / counted if counted else 1.0

    def row(self) -> str:
        return (f"| {self.package} | {self.total} | {self.killed} | {len(self.survivors)} "
                f"| {len(self.equivalent)} | {100 * self.score:.1f}% |")


def read_equivalent(package_dir: Path) -> dict[str, str]:
    """Mutant name -> reason, from ``mutation-equivalent.txt`` (blank and # lines ignored)."""
    path = package_dir / "mutation-equivalent.txt"
    if not path.is_file():
        return {}
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        found[name] = reason.strip()
    return found


def parse_results(text: str) -> dict[str, str]:
    """Mutant name -> status from the lines ``    NAME: STATUS`` printed by ``mutmut results``."""
    statuses: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            statuses[name] = status.strip()
    return statuses


def _mutmut_env() -> dict[str, str]:
    """The environment of mutmut: one OpenMP/MKL thread.

    mutmut forks one process per mutant from a server that has already run torch code; a
    forked child that enters an OpenMP parallel region inherited from its parent waits forever
    for threads that do not exist (libgomp's team barrier), and that hang then counts as a
    "timeout", i.e. a kill. With one thread no team is ever created.
    """
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _mutmut(package_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=package_dir, text=True,
                          capture_output=True, check=False, env=_mutmut_env())


def _run_guarded(package_dir: Path, max_children: int, idle_limit_s: float) -> int:
    """``mutmut run`` with the hung-mutant watchdog beside it; its exit status."""
    run = subprocess.Popen([sys.executable, "-m", "mutmut", "run", "--max-children",
                            str(max_children)], cwd=package_dir, env=_mutmut_env())
    stop = threading.Event()
    watcher = threading.Thread(
        target=guard, args=(run.pid, idle_limit_s, stop, lambda line: print(line, flush=True)),
        daemon=True)
    watcher.start()
    try:
        return run.wait()
    finally:
        stop.set()
        watcher.join()


def run_package(package: str, max_children: int, fresh: bool,
                idle_limit_s: float = IDLE_LIMIT_S) -> Outcome:
    """Run mutmut on one package and summarise its results."""
    package_dir = ROOT / "packages" / package
    config = tomllib.loads((package_dir / "pyproject.toml").read_text(encoding="utf-8"))
    if "mutmut" not in config.get("tool", {}):
        raise SystemExit(f"{package}: pyproject.toml has no [tool.mutmut] table")
    if fresh:
        shutil.rmtree(package_dir / "mutants", ignore_errors=True)
    print(f"==> mutmut run in packages/{package} (max children {max_children})", flush=True)
    returncode = _run_guarded(package_dir, max_children, idle_limit_s)
    if returncode != 0:
        raise SystemExit(f"{package}: mutmut run failed with exit status {returncode}")
    stats = _mutmut(package_dir, "export-cicd-stats")
    if stats.returncode != 0:
        raise SystemExit(f"{package}: mutmut export-cicd-stats failed:\n{stats.stderr}")
    counts = json.loads((package_dir / "mutants" / "mutmut-cicd-stats.json").read_text())
    statuses = parse_results(_mutmut(package_dir, "results", "--all", "true").stdout)
    unchecked = sum(1 for s in statuses.values() if s == "not checked")
    if unchecked:
        raise SystemExit(f"{package}: {unchecked} mutants were not checked (interrupted run?); "
                         "run again to finish them")
    survivors = tuple(sorted(n for n, s in statuses.items() if s not in DETECTED))
    (package_dir / "mutants" / "survivors.txt").write_text(
        "".join(f"{name}\n" for name in survivors), encoding="utf-8")
    equivalent_list = read_equivalent(package_dir)
    equivalent = tuple(n for n in survivors if n in equivalent_list)
    stale = tuple(sorted(set(equivalent_list) - set(survivors)))
    return Outcome(package=package, total=int(counts["total"]),
                   killed=len(statuses) - len(survivors),
                   survivors=survivors, equivalent=equivalent, stale=stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", metavar="PACKAGE",
                        help=f"any of {', '.join(PACKAGES)} (default: all)")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="forget earlier results first")
    parser.add_argument("--idle-limit", type=float, default=IDLE_LIMIT_S, metavar="SECONDS",
                        help="a mutant using no CPU for this long counts as hung (a timeout)")
    args = parser.parse_args(argv)
    unknown = [p for p in args.packages if p not in PACKAGES]
    if unknown:
        parser.error(f"unknown package(s) {', '.join(unknown)}; allowed: {', '.join(PACKAGES)}")
    if args.idle_limit <= 0:
        parser.error(f"--idle-limit must be > 0 seconds, got {args.idle_limit}")
    outcomes = [run_package(p, args.max_children, args.fresh, args.idle_limit)
                for p in args.packages or PACKAGES]
    print("\n" + HEADER)
    for outcome in outcomes:
        print(outcome.row())
    for outcome in outcomes:
        unexplained = [n for n in outcome.survivors if n not in outcome.equivalent]
        if unexplained:
            print(f"\n{outcome.package}: {len(unexplained)} survivors not judged equivalent "
                  f"(packages/{outcome.package}/mutants/survivors.txt)")
        if outcome.stale:
            print(f"{outcome.package}: listed as equivalent but no longer surviving: "
                  + ", ".join(outcome.stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
