"""tools/run_tests.py reads pytest's summary lines and prints the plain closing line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import run_tests

ROOT = Path(__file__).resolve().parents[2]


def test_summary_counts_from_the_closing_line() -> None:
    output = (
        "tests ...\n===== 12 passed, 2 failed, 1 skipped, 3 xfailed, 4 warnings in 1.20s =====\n"
    )
    assert run_tests.summary_counts(output) == Counter(passed=12, failed=2, skipped=1, xfailed=3)


def test_errors_count_as_failures_in_the_totals() -> None:
    counts = run_tests.summary_counts("== 5 passed, 2 errors in 3.0s ==")
    assert counts == Counter(passed=5, error=2)
    assert run_tests.format_totals(counts) == "5 passed, 2 failed"


def test_no_summary_means_no_counts() -> None:
    assert run_tests.summary_counts("ImportError: boom\n") == Counter()


def test_every_test_folder_is_a_suite() -> None:
    folders = {str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/tests")}
    folders |= {"tools/tests", "benchmarks/tests", "tests/integration"}
    assert set(run_tests.SUITES) == folders


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "pip install uv && uv run --locked --all-packages python tools/run_tests.py"
    assert command in readme and command in ci
