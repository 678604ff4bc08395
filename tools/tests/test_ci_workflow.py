"""The GitHub workflow and `.ci/run` are one CI: these checks fail when they drift apart.

The workflow's `ci` job must run `.ci/run` itself (so it runs every step CI runs), and its
per-package matrix must name every workspace member with that member's own tests; `.ci/run`'s
mypy step must cover every member's sources and `tools/run_tests.py` every member's suite.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import tomllib
import yaml

from tools.run_tests import SUITES

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
CI_RUN = ROOT / ".ci" / "run"


def _members() -> list[str]:
    names = []
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        names.append(tomllib.loads(pyproject.read_text())["project"]["name"])
    return names


def _workflow() -> dict[str, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _runs(job: dict[str, Any]) -> list[str]:
    return [str(step["run"]).strip() for step in job["steps"] if "run" in step]


def _ci_run_commands() -> list[str]:
    """The logical lines of `.ci/run` (continuations joined), comments dropped."""
    text = re.sub(r"\\\n\s*", " ", CI_RUN.read_text())
    return [line.strip() for line in text.splitlines() if line.strip()
            and not line.lstrip().startswith("#")]


def test_the_ci_job_runs_ci_run_itself() -> None:
    jobs = _workflow()["jobs"]
    running = [name for name, job in jobs.items() if "bash .ci/run" in _runs(job)]
    assert running == ["ci"]
    assert jobs["ci"]["timeout-minutes"] == 90  # CI's own limit


def test_only_the_ci_job_and_the_package_matrix_exist() -> None:
    # Any other job would be a second, drifting copy of a step .ci/run already runs.
    assert set(_workflow()["jobs"]) == {"ci", "package-tests"}


def test_the_package_matrix_names_every_workspace_member() -> None:
    matrix = _workflow()["jobs"]["package-tests"]["strategy"]["matrix"]["package"]
    assert sorted(matrix) == sorted(_members())
    assert len(matrix) == len(set(matrix))


def test_each_member_runs_its_own_tests_alone() -> None:
    runs = _runs(_workflow()["jobs"]["package-tests"])
    pytest_runs = [r for r in runs if "pytest" in r]
    assert pytest_runs == [
        "uv run --locked --package ${{ matrix.package }} --exact python -m pytest "
        "packages/${{ matrix.package }}/tests"
    ]
    for member in _members():
        assert (ROOT / "packages" / member / "tests").is_dir(), member


def test_each_member_declares_what_its_tests_need_alone() -> None:
    # `--exact` keeps only the member and its dev group: pytest and the timeout plugin the
    # suites' markers use must be there, or the job fails at collection.
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        dev = tomllib.loads(pyproject.read_text()).get("dependency-groups", {}).get("dev", [])
        names = {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0] for req in dev}
        assert {"pytest", "pytest-timeout"} <= names, pyproject.parent.name


def test_ci_run_type_checks_every_member() -> None:
    mypy = [c for c in _ci_run_commands() if "mypy" in c and "packages/" in c]
    assert len(mypy) == 1
    checked = {arg for arg in shlex.split(mypy[0]) if arg.startswith("packages/")}
    expected = {f"packages/{p.parent.name}/src"
                for p in (ROOT / "packages").glob("*/pyproject.toml")}
    assert checked == expected


def test_ci_run_checks_import_cycles_and_runs_the_readme_command() -> None:
    commands = _ci_run_commands()
    assert any("tools/import_cycles.py" in c for c in commands)
    assert "uv run --no-sync python tools/import_layers.py" in commands
    readme = (ROOT / "README.md").read_text()
    test_command = next(c for c in commands if "python tools/run_tests.py" in c)
    assert test_command in readme


def test_run_tests_covers_every_member_suite() -> None:
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        assert f"packages/{pyproject.parent.name}/tests" in SUITES
