#!/usr/bin/env python3
"""Run every test suite of the workspace, each in its own pytest process, and sum the results.

One process per suite keeps memory bounded (in-process vLLM engines and large tensors of one
suite are freed with its process) and mirrors the per-package CI jobs. Extra arguments are
passed to every pytest run, e.g. ``python tools/run_tests.py -x`` or ``-k fusion``.
Exit status is non-zero when any suite fails or collects no test.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = (
    "packages/ascend-config/tests",
    "packages/ascend-topology/tests",
    "packages/ascend-kernels/tests",
    "packages/ascend-graph/tests",
    "packages/vllm-ascend/tests",
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


def run_suite(suite: str, extra: list[str]) -> tuple[int, Counter[str], float]:
    """Run one suite, echoing its output; (exit status, counts, seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", suite, "--durations=10", *extra],
        cwd=ROOT,
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


def format_totals(totals: Counter[str]) -> str:
    """The plain closing line: 'N passed, N failed' then the other non-zero kinds."""
    parts = [f"{totals['passed']} passed", f"{totals['failed'] + totals['error']} failed"]
    parts += [f"{totals[k]} {k}" for k in ("skipped", "xfailed", "xpassed") if totals[k]]
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    totals: Counter[str] = Counter()
    rows = []
    for suite in SUITES:
        print(f"\n==> {suite}", flush=True)
        status, counts, seconds = run_suite(suite, extra)
        totals.update(counts)
        ok = status == 0 and counts["passed"] > 0
        rows.append((suite, "ok" if ok else f"FAILED (exit {status})", counts, seconds))
    print("\nsuite results:")
    for suite, verdict, counts, seconds in rows:
        print(f"  {suite:<34} {verdict:<18} {format_totals(counts):<40} {seconds:6.1f} s")
    print(format_totals(totals))
    return 0 if all(verdict == "ok" for _, verdict, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
