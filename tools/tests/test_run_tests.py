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


# --- crashed suites, with real pytest processes ------------------------------------------

_PASSING = "def test_one():\n    assert 1 + 1 == 2\n\n\ndef test_two():\n    assert 'a' < 'b'\n"
_FAILING = "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2\n"
# Dies as an AMX instruction without permission does: SIGILL (no core file written).
_SIGILL = (
    "import os, resource, signal\n\n\n"
    "def test_dies():\n"
    "    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "    os.kill(os.getpid(), signal.SIGILL)\n"
)
# Leaves before pytest can print its summary, with a non-zero status.
_EXITS = "import os\n\n\ndef test_leaves():\n    os._exit(3)\n"


def _suites(root: Path, **bodies: str) -> tuple[str, ...]:
    for name, body in bodies.items():
        folder = root / name
        folder.mkdir()
        (folder / f"test_{name}.py").write_text(body)
    return tuple(bodies)


def _run(root: Path, capsys, **bodies: str) -> tuple[int, str]:
    suites = _suites(root, **bodies)
    status = run_tests.main(["-q", "-p", "no:cacheprovider"], suites=suites, cwd=root)
    return status, capsys.readouterr().out.strip().splitlines()[-1]


def test_crashed_suite_counts_as_a_failure_named_in_the_closing_line(tmp_path, capsys) -> None:
    status, line = _run(tmp_path, capsys, passing=_PASSING, sigill=_SIGILL)
    assert status == 1
    assert line == "2 passed, 1 failed; crashed: sigill (killed by SIGILL, exit -4)"


def test_exit_without_summary_counts_as_a_crash(tmp_path, capsys) -> None:
    status, line = _run(tmp_path, capsys, passing=_PASSING, exits=_EXITS)
    assert status == 1
    assert line == "2 passed, 1 failed; crashed: exits (exit 3, no summary)"


def test_counted_failures_are_not_crashes(tmp_path, capsys) -> None:
    status, line = _run(tmp_path, capsys, passing=_PASSING, failing=_FAILING)
    assert status == 1
    assert line == "3 passed, 1 failed"


def test_two_crashed_suites_two_failures(tmp_path, capsys) -> None:
    status, line = _run(tmp_path, capsys, a=_SIGILL, b=_SIGILL, c=_PASSING)
    assert status == 1
    assert line == ("2 passed, 2 failed; crashed: a (killed by SIGILL, exit -4), "
                    "b (killed by SIGILL, exit -4)")


def test_all_passing_suites_close_with_no_failure(tmp_path, capsys) -> None:
    status, line = _run(tmp_path, capsys, passing=_PASSING)
    assert (status, line) == (0, "2 passed, 0 failed")


def test_suite_where_no_test_passed_is_one_failure() -> None:
    deselected = run_tests.SuiteResult("x", 5, Counter(deselected=3))
    assert run_tests.closing_line([deselected]) == "0 passed, 1 failed; no test passed: x"
    assert deselected.verdict() == "FAILED (exit 5)"


def test_signal_after_counted_failures_adds_one() -> None:
    late = run_tests.SuiteResult("x", -11, Counter(passed=4, failed=2))
    assert late.failures() == 3
    assert late.verdict() == "CRASHED (killed by SIGSEGV, exit -11)"
