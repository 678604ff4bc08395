"""``AscendConfigError`` and ``Problem``: the line wording, clipping, the reported-problems cap."""

from __future__ import annotations

import pytest
from ascend_config import AscendConfigError, Problem, resolve
from ascend_config.errors import AscendConfigError as Err
from ascend_config.errors import make_problem


@pytest.mark.parametrize(("count", "listed", "last"), [
    (49, 49, None), (50, 50, None),
    (51, 50, "... and 1 more problem (the first 50 are listed)"),
    (52, 50, "... and 2 more problems (the first 50 are listed)")])
def test_reported_problems_cap(count: int, listed: int, last: str | None) -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({f"k{i:03}": i for i in range(count)}, environ={})
    err = info.value
    lines = str(err).splitlines()
    assert lines[0] == f"{count} problems in the Ascend configuration:"
    assert len(err.problems) == listed and err.omitted == count - listed
    assert lines[1:listed + 1] == err.lines()
    assert lines[listed + 1:] == ([last] if last else [])


def test_error_counts_given_omissions() -> None:
    problem = make_problem("a", 1, "x", "")
    err = Err([problem], omitted=4)
    assert str(err).splitlines() == [
        "5 problems in the Ascend configuration:", problem.line(),
        "... and 4 more problems (the first 1 are listed)"]
    assert str(Err([problem])).splitlines() == [
        "1 problem in the Ascend configuration:", problem.line()]


def test_problem_line_without_message() -> None:
    assert Problem("a.b", "1", "x", "").line() == "a.b: (given 1; allowed: x)"
    assert Problem("a", "1", "x", "m\nn").line() == "a: m n (given 1; allowed: x)"


def test_short_repr_bounds() -> None:
    from ascend_config.errors import short_repr

    fits = {"x" * 30: 1, "y" * 36: 1}
    assert short_repr(fits) == repr(fits) and len(repr(fits)) == 80
    long = {"x" * 30: 1, "y" * 37: 1}
    assert short_repr(long) == repr(long)[:77] + "..."

    class Hostile(list):  # type: ignore[type-arg]
        # reprlib dispatches on the class name and calls len() itself, unguarded
        def __len__(self) -> int:
            raise RuntimeError("no")

    Hostile.__name__ = "list"

    class Multiline:
        def __repr__(self) -> str:
            return "a\nb\u2028"

    assert short_repr(Hostile()) == "<list>"
    assert short_repr(Multiline()) == "a\\nb\\u2028"


def test_render_path() -> None:
    from ascend_config.errors import render_path

    assert render_path(["a", 0, "b c", 1, "d"]) == "a[0].'b c'[1].d"
    assert render_path([0, "x"]) == "[0].x"
    assert render_path([]) == "<additional_config>"
    assert render_path(["a\nb"]) == "'a\\nb'"


@pytest.mark.parametrize(("field", "limit"), [("path", 120), ("allowed", 160),
                                              ("message", 160)])
def test_problem_parts_are_clipped(field: str, limit: int) -> None:
    from ascend_config.errors import make_problem

    parts = {"path": "p", "allowed": "a", "message": "m"}
    parts[field] = "z" * limit
    problem = make_problem(parts["path"], 1, parts["allowed"], parts["message"])
    assert getattr(problem, field) == "z" * limit
    parts[field] = "z" * (limit + 1)
    problem = make_problem(parts["path"], 1, parts["allowed"], parts["message"])
    assert getattr(problem, field) == "z" * (limit - 3) + "..."


def test_problem_line_is_clipped_at_300() -> None:
    # 100 + ": " + 20 + " (given 1; allowed: " + 157 + ")" = 300 characters: kept whole
    fits = Problem("p" * 100, "1", "a" * 157, "m" * 20)
    assert len(fits.line()) == 300 and fits.line().endswith("a)")
    over = Problem("p" * 100, "1", "a" * 158, "m" * 20)
    assert over.line() == fits.line()[:297] + "..."
    short = Problem("p", "1", "a" * 100, "m")
    assert short.line() == "p: m (given 1; allowed: " + "a" * 100 + ")"
