#!/usr/bin/env python3
"""Run every test suite of the workspace, each in its own pytest process, and sum the results.

One process per suite keeps memory bounded (in-process vLLM engines and large tensors of one
suite are freed with its process) and mirrors the per-package CI jobs. The integration suite
runs one pytest process per test file, two files at a time (``PARALLEL_SUITES``): its tests
drive real vLLM engines that use about one core for most of their life (imports, Dynamo tracing
and inductor compiles are single-threaded), so two lanes finish it in much less time than one
on the 2-core CI host. Extra arguments are passed to every pytest run, e.g.
``python tools/run_tests.py -x`` or ``-k fusion``.
Exit status is non-zero when any suite fails or collects no test; the closing line then never
says "0 failed": a suite whose process crashed (killed by a signal, or a non-zero exit without
pytest's summary) counts as one failure there and is named.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = (
    "packages/ascend-config/tests",
    "packages/ascend-topology/tests",
    "packages/ascend-kernels/tests",
    "packages/ascend-graph/tests",
    "packages/vllm-ascend/tests",
    "packages/vllm-ascend-testing/tests",
    "tools/tests",
    "benchmarks/tests",
    "tests/integration",
)
#: Suites run as one pytest process per test file, this many at a time.
PARALLEL_SUITES = {"tests/integration": 2}
#: Files of a parallel suite started first, longest first, so that the lanes end together.
LONGEST_FIRST = (
    "test_numerics_smollm2.py", "test_parallel.py", "test_serve_worker_death.py",
    "test_demo.py", "test_tp_real_model.py", "test_expert_parallel.py", "test_serve.py",
    "test_data_parallel.py", "test_serve_load.py",
)
#: pytest's exit status when a file has no selected test (e.g. ``-k`` matched none there).
NO_TESTS_COLLECTED = 5
_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_KINDS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")


def summary_counts(output: str) -> Counter[str]:
    """Counts from pytest's closing summary line (the last line that has any)."""
    for line in reversed(output.splitlines()):
        found = _SUMMARY.findall(line)
        if found and (" in " in line or line.startswith("=")):
            return Counter(
                {
                    kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                    for n, kind in found
                }
            )
    return Counter()


def _pytest(target: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", target, "--durations=10", *extra]


def run_suite(suite: str, extra: list[str], cwd: Path = ROOT) -> tuple[int, Counter[str], float]:
    """Run one suite, echoing its output; (exit status, counts, seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        _pytest(suite, extra),
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    status = proc.wait()
    return status, summary_counts("".join(lines)), time.perf_counter() - start


def file_order(suite: Path, first: tuple[str, ...] = LONGEST_FIRST) -> list[Path]:
    """The suite's test files: those named in ``first`` in that order, then the rest by name."""
    files = sorted(suite.glob("test_*.py"))
    rank = {name: i for i, name in enumerate(first)}
    return sorted(files, key=lambda f: (rank.get(f.name, len(rank)), f.name))


def run_files(suite: str, extra: list[str], lanes: int, cwd: Path = ROOT,
              first: tuple[str, ...] = LONGEST_FIRST) -> Iterator[SuiteResult]:
    """Run each test file of ``suite`` in its own pytest process, ``lanes`` at a time, and
    yield one result per file as it ends (its output is echoed whole, never interleaved).
    Files with no selected test are left out; if every file is, one empty result stands for
    the suite."""

    def one(path: Path) -> tuple[Path, int, str, float]:
        start = time.perf_counter()
        done = subprocess.run(_pytest(str(path.relative_to(cwd)), extra), cwd=cwd, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        return path, done.returncode, done.stdout, time.perf_counter() - start

    files = file_order(cwd / suite, first)
    kept = 0
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        for future in as_completed([pool.submit(one, f) for f in files]):
            path, status, output, seconds = future.result()
            name = str(path.relative_to(cwd))
            sys.stdout.write(f"\n--> {name} (exit {status}, {seconds:.1f} s)\n{output}")
            sys.stdout.flush()
            if status == NO_TESTS_COLLECTED and not summary_counts(output)["passed"]:
                continue
            kept += 1
            yield SuiteResult(name, status, summary_counts(output), seconds)
    if not kept:
        yield SuiteResult(suite, NO_TESTS_COLLECTED, Counter())


@dataclass(frozen=True)
class SuiteResult:
    """One suite's pytest process: exit status (negative: killed by that signal) and counts."""

    suite: str
    status: int
    counts: Counter[str]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 0 and self.counts["passed"] > 0

    @property
    def crash(self) -> str | None:
        """How the suite's process crashed (killed by a signal; a non-zero exit without pytest's
        summary line), or None."""
        if self.status < 0:
            try:
                name = signal.Signals(-self.status).name
            except ValueError:
                name = f"signal {-self.status}"
            return f"killed by {name}, exit {self.status}"
        if self.status != 0 and not self.counts:
            return f"exit {self.status}, no summary"
        return None

    @property
    def uncounted(self) -> bool:
        """Failed while pytest counted no failure: a crash, or no test passed."""
        return not self.ok and (self.crash is not None
                                or self.counts["failed"] + self.counts["error"] == 0)

    def failures(self) -> int:
        """Failed tests and errors; a crash, or a failure pytest did not count, adds one."""
        return self.counts["failed"] + self.counts["error"] + (1 if self.uncounted else 0)

    def verdict(self) -> str:
        if self.ok:
            return "ok"
        return f"CRASHED ({self.crash})" if self.crash else f"FAILED (exit {self.status})"


def format_totals(totals: Counter[str]) -> str:
    """The plain closing line: 'N passed, N failed' then the other non-zero kinds."""
    parts = [f"{totals['passed']} passed", f"{totals['failed'] + totals['error']} failed"]
    parts += [f"{totals[k]} {k}" for k in ("skipped", "xfailed", "xpassed") if totals[k]]
    return ", ".join(parts)


def closing_line(results: list[SuiteResult]) -> str:
    """Totals over every suite; a crashed suite (or one where no test passed) counts as one
    more failure and is named."""
    totals: Counter[str] = Counter()
    for result in results:
        totals.update(result.counts)
        totals["failed"] += result.failures() - result.counts["failed"] - result.counts["error"]
    line = format_totals(totals)
    crashed = [f"{r.suite} ({r.crash})" for r in results if r.crash is not None]
    empty = [r.suite for r in results if r.uncounted and r.crash is None]
    if crashed:
        line += f"; crashed: {', '.join(crashed)}"
    if empty:
        line += f"; no test passed: {', '.join(empty)}"
    return line


def main(argv: list[str] | None = None, suites: tuple[str, ...] = SUITES,
         cwd: Path = ROOT, parallel: dict[str, int] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    lanes = PARALLEL_SUITES if parallel is None else parallel
    results: list[SuiteResult] = []
    for suite in suites:
        print(f"\n==> {suite}", flush=True)
        if lanes.get(suite, 1) > 1:
            start = time.perf_counter()
            results += run_files(suite, extra, lanes[suite], cwd)
            print(f"\n{suite}: {time.perf_counter() - start:.1f} s in {lanes[suite]} lanes")
            continue
        status, counts, seconds = run_suite(suite, extra, cwd)
        results.append(SuiteResult(suite, status, counts, seconds))
    print("\nsuite results:")
    for r in results:
        print(f"  {r.suite:<48} {r.verdict():<18} {format_totals(r.counts):<40} "
              f"{r.seconds:6.1f} s")
    print(closing_line(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
