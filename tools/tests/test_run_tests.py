"""tools/run_tests.py reads pytest's summary lines and prints the plain closing line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
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


# --- processes at once, shards of the end-to-end suite --------------------------------------

# Each of the two suites waits for the other's marker file: they pass only when run at once.
_MEETS = (
    "import pathlib, time\n\n\n"
    "def test_meets_the_other():\n"
    "    here, there = pathlib.Path({here!r}), pathlib.Path({there!r})\n"
    "    here.touch()\n"
    "    deadline = time.monotonic() + {wait}\n"
    "    while not there.exists() and time.monotonic() < deadline:\n"
    "        time.sleep(0.05)\n"
    "    assert there.exists()\n"
)


def _meeting(tmp_path: Path, wait: float) -> dict[str, str]:
    a, b = str(tmp_path / "a.marker"), str(tmp_path / "b.marker")
    return {"first": _MEETS.format(here=a, there=b, wait=wait),
            "second": _MEETS.format(here=b, there=a, wait=wait)}


def test_two_jobs_run_two_suites_at_once(tmp_path, capsys) -> None:
    suites = _suites(tmp_path, **_meeting(tmp_path, wait=60))
    status = run_tests.main(["--jobs", "2", "-q", "-p", "no:cacheprovider"], suites=suites,
                            cwd=tmp_path)
    assert (status, capsys.readouterr().out.strip().splitlines()[-1]) == (0, "2 passed, 0 failed")


def test_one_job_runs_the_suites_one_after_the_other(tmp_path, capsys) -> None:
    suites = _suites(tmp_path, **_meeting(tmp_path, wait=1))
    status = run_tests.main(["--jobs=1", "-q", "-p", "no:cacheprovider"], suites=suites,
                            cwd=tmp_path)
    # The first waits alone and fails; the second then finds its marker.
    assert (status, capsys.readouterr().out.strip().splitlines()[-1]) == (1, "1 passed, 1 failed")


def test_each_process_gets_its_own_pytest_temp_folder(tmp_path, capsys) -> None:
    body = ("def test_temp(tmp_path_factory):\n"
            "    print('BASE', tmp_path_factory.getbasetemp())\n")
    suites = _suites(tmp_path, one=body, two=body)
    assert run_tests.main(["-q", "-s", "-p", "no:cacheprovider"], suites=suites,
                          cwd=tmp_path) == 0
    bases = [line.split()[1] for line in capsys.readouterr().out.splitlines()
             if line.startswith("BASE ")]
    assert len(bases) == 2 and bases[0] != bases[1]
    assert not any(Path(base).exists() for base in bases)  # removed after a passing run


@pytest.mark.parametrize("text", ["0", "-1", "two"])
def test_jobs_must_be_a_whole_number_of_at_least_one(text: str, capsys) -> None:
    with pytest.raises(SystemExit):
        run_tests.parse_args(["--jobs", text])
    assert "a whole number of at least 1" in capsys.readouterr().err


def test_child_env_waits_passively_unless_the_caller_chose() -> None:
    assert run_tests.child_env({"PATH": "/bin"}) == {"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE"}
    assert run_tests.child_env({"OMP_WAIT_POLICY": "ACTIVE"}) == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_each_pytest_process_gets_the_child_env(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    body = ("import os\n\n\ndef test_env():\n"
            "    assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'\n")
    status, line = _run(tmp_path, capsys, env=body)
    assert (status, line) == (0, "1 passed, 0 failed")


def test_other_arguments_go_to_pytest() -> None:
    parsed = run_tests.parse_args(["-x", "--jobs", "3", "-k", "fusion"])
    assert parsed == (3, ["-x", "-k", "fusion"])
    assert run_tests.parse_args(["--job", "3"])[1] == ["--job", "3"]  # no abbreviations


def test_integration_shards_keep_listed_files_together_and_run_every_other_file(
        tmp_path: Path) -> None:
    for name in ("test_a.py", "test_b.py", "test_c.py", "test_new.py", "conftest.py"):
        (tmp_path / name).write_text("")
    shards = run_tests.integration_shards(
        tmp_path, [("test_b.py", "test_a.py"), ("test_gone.py",), ("test_c.py",)])
    assert shards == [("test_b.py", "test_a.py"), ("test_c.py",), ("test_new.py",)]


def test_the_processes_start_longest_first_and_run_every_integration_file_once() -> None:
    found = run_tests.units(run_tests.SUITES, ROOT)
    assert [u.seconds for u in found] == sorted((u.seconds for u in found), reverse=True)
    shards = [u for u in found if u.suite == run_tests.INTEGRATION]
    assert len(shards) > 1
    files = [path for u in shards for path in u.paths]
    expected = sorted(str(p.relative_to(ROOT))
                      for p in (ROOT / "tests/integration").glob("test_*.py"))
    assert sorted(files) == expected  # each file in exactly one shard
    assert sorted(u.paths for u in found if u.suite != run_tests.INTEGRATION) == sorted(
        (s,) for s in run_tests.SUITES if s != run_tests.INTEGRATION)
    listed = {name for shard in run_tests.INTEGRATION_SHARDS for name in shard}
    assert listed <= {Path(f).name for f in files}  # no shard names a file that is gone


def test_a_shard_s_seconds_are_its_files_sum(tmp_path: Path) -> None:
    folder = tmp_path / "tests" / "integration"
    folder.mkdir(parents=True)
    for name in ("test_parallel.py", "test_fusion_e2e.py", "test_hf_reference.py",
                 "test_brand_new.py"):
        (folder / name).write_text("")
    found = run_tests.units(("tests/integration", "tools/tests"), tmp_path)
    seconds = run_tests.SECONDS
    assert [(u.label, u.seconds) for u in found] == [
        ("tests/integration [1/2]", seconds["test_fusion_e2e.py"] + seconds["test_parallel.py"]
         + run_tests.DEFAULT_SECONDS),
        ("tools/tests", seconds["tools/tests"]),
        ("tests/integration [2/2]", run_tests.DEFAULT_SECONDS),
    ]
