#!/usr/bin/env python3
"""Run every test suite of the workspace, each in its own pytest process, and sum the results.

One process per suite keeps memory bounded (in-process vLLM engines and large tensors of one
suite are freed with its process) and mirrors the per-package CI jobs. Extra arguments are
passed to every pytest run, e.g. ``python tools/run_tests.py -x`` or ``-k fusion``.
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


def run_suite(suite: str, extra: list[str], cwd: Path = ROOT) -> tuple[int, Counter[str], float]:
    """Run one suite, echoing its output; (exit status, counts, seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", suite, "--durations=10", *extra],
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
         cwd: Path = ROOT) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    results = []
    for suite in suites:
        print(f"\n==> {suite}", flush=True)
        status, counts, seconds = run_suite(suite, extra, cwd)
        results.append(SuiteResult(suite, status, counts, seconds))
    print("\nsuite results:")
    for r in results:
        print(f"  {r.suite:<34} {r.verdict():<18} {format_totals(r.counts):<40} "
              f"{r.seconds:6.1f} s")
    print(closing_line(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
