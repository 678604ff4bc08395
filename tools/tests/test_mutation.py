"""tools/mutation.py: reading mutmut's results, the equivalent list and the score."""

from __future__ import annotations

from pathlib import Path

import mutation
import pytest


def test_results_lines_become_statuses() -> None:
    text = (
        "    ascend_config.cli.x__parser__mutmut_1: killed\n"
        "    ascend_config.cli.xǁThingǁrun__mutmut_12: survived\n"
        "    ascend_config.resolver.x_resolve__mutmut_3: no tests\n"
        "some other line: not a mutant\n"
    )
    assert mutation.parse_results(text) == {
        "ascend_config.cli.x__parser__mutmut_1": "killed",
        "ascend_config.cli.xǁThingǁrun__mutmut_12": "survived",
        "ascend_config.resolver.x_resolve__mutmut_3": "no tests",
    }


def test_equivalent_list_skips_comments_and_keeps_reasons(tmp_path: Path) -> None:
    (tmp_path / "mutation-equivalent.txt").write_text(
        "# judged equivalent\n\nm.x_f__mutmut_1  the string only reaches a debug log\n"
        "m.x_g__mutmut_2\n", encoding="utf-8")
    assert mutation.read_equivalent(tmp_path) == {
        "m.x_f__mutmut_1": "the string only reaches a debug log", "m.x_g__mutmut_2": ""}
    assert mutation.read_equivalent(tmp_path / "absent") == {}


@pytest.mark.parametrize(
    ("total", "killed", "equivalent", "score"),
    [(100, 90, 0, 0.90), (100, 89, 1, 89 / 99), (10, 10, 0, 1.0), (2, 0, 2, 1.0)],
)
def test_score_leaves_equivalent_mutants_out(total: int, killed: int, equivalent: int,
                                             score: float) -> None:
    outcome = mutation.Outcome(
        package="p", total=total, killed=killed,
        survivors=tuple(f"s{i}" for i in range(total - killed)),
        equivalent=tuple(f"s{i}" for i in range(equivalent)), stale=())
    assert outcome.score == pytest.approx(score)
    assert outcome.row().startswith(f"| p | {total} | {killed} | {total - killed} | {equivalent} |")


def test_unknown_package_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        mutation.main(["vllm-ascend"])
    assert exc.value.code == 2
    assert "unknown package(s) vllm-ascend; allowed: ascend-config" in capsys.readouterr().err


def test_every_library_package_is_configured_for_mutmut() -> None:
    import tomllib

    for package in mutation.PACKAGES:
        pyproject = mutation.ROOT / "packages" / package / "pyproject.toml"
        config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        module = package.replace("-", "_")
        assert config["tool"]["mutmut"]["source_paths"] == [f"src/{module}"]
        assert config["tool"]["mutmut"]["pytest_add_cli_args_test_selection"] == ["tests"]


@pytest.mark.parametrize("limit", ["0", "-5"])
def test_idle_limit_must_be_positive(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        mutation.main(["ascend-config", "--idle-limit", limit])
    assert exc.value.code == 2
    assert f"--idle-limit must be > 0 seconds, got {float(limit)}" in capsys.readouterr().err


def test_a_crash_counts_as_detected_and_a_survivor_does_not() -> None:
    assert "segfault" in mutation.DETECTED
    assert {"killed", "timeout"} <= set(mutation.DETECTED)
    assert not {"survived", "no tests", "not checked", "suspicious"} & set(mutation.DETECTED)
