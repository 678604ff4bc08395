from __future__ import annotations

from collections.abc import Callable

import pytest
from ascend_topology import (
    ParseError,
    cpu_to_mask,
    format_cpu_list,
    parse_cpu_list,
)
from ascend_topology.cpulist import check_cpu_id, check_cpu_ids, looks_like_cpu_list


def test_parse_cpu_list_tolerates_spaces_and_merges() -> None:
    assert parse_cpu_list("0-2, 4, 6-8") == [0, 1, 2, 4, 6, 7, 8]
    assert parse_cpu_list("3,1-2,2") == [1, 2, 3]
    assert parse_cpu_list("") == []
    assert parse_cpu_list("5\n") == [5]


@pytest.mark.parametrize("bad", ["a", "1-", "3-1", "1-2-3", "-4", "99999"])
def test_parse_cpu_list_rejects_garbage_with_parse_error(bad: str) -> None:
    with pytest.raises(ParseError, match="bad CPU list"):
        parse_cpu_list(bad)


def test_format_cpu_list_compresses_runs() -> None:
    assert format_cpu_list([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""
    assert parse_cpu_list(format_cpu_list([0, 2, 3, 4, 96, 97])) == [0, 2, 3, 4, 96, 97]


def test_looks_like_cpu_list() -> None:
    assert looks_like_cpu_list("144-167")
    assert looks_like_cpu_list("0-47,96-143")
    assert not looks_like_cpu_list("HCCS")
    assert not looks_like_cpu_list("Affinity")


@pytest.mark.parametrize(
    ("cpu", "mask"),
    [(3, "00000008"), (35, "00000008,00000000"), (8, "00000100"), (9, "00000200"),
     (0, "00000001"), (31, "80000000"), (64, "00000001,00000000,00000000")],
)
def test_cpu_to_mask(cpu: int, mask: str) -> None:
    assert cpu_to_mask(cpu) == mask


@pytest.mark.parametrize("bad", [-1, 8192, 10**30, True, 3.0])
def test_cpu_to_mask_rejects_anything_but_a_cpu_id(bad: object) -> None:
    with pytest.raises(ValueError, match=r"CPU id|outside 0\.\.8191"):
        cpu_to_mask(bad)  # type: ignore[arg-type]


def test_cpu_to_mask_at_the_cap() -> None:
    # 8191 = 255 * 32 + 31: bit 31 of group 255, then 255 lower groups.
    assert cpu_to_mask(8191) == "80000000" + ",00000000" * 255


def test_parse_cpu_list_expansion_is_bounded_before_duplicates_are_merged() -> None:
    # 8192 ids in total (ranges counted in full) pass; one more is refused, however the text
    # repeats itself: a short text must not expand into millions of ids.
    assert parse_cpu_list("0-4095,4096-8191") == list(range(8192))
    assert parse_cpu_list("0-8190,0") == list(range(8191))
    for text in ("0-8191,0", "0-8191," * 50_000, "0," * 8193):
        with pytest.raises(ParseError, match="expands to more than 8192 CPU ids"):
            parse_cpu_list(text)


def test_check_cpu_ids_bounds_the_number_of_values() -> None:
    assert check_cpu_ids([3, 1] + [0] * 8190) == [0, 1, 3]
    with pytest.raises(ParseError, match="JSON list holds more than 8192 CPU ids"):
        check_cpu_ids([0] * 8193, "JSON list")


def _message(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize(("text", "message"), [
    ("a", "bad CPU list 'a': 'a' is not 'N' or 'N-M'"),
    ("1-", "bad CPU list '1-': '1-' is not 'N' or 'N-M'"),
    ("1-2-3", "bad CPU list '1-2-3': '1-2-3' is not 'N' or 'N-M'"),
    ("0, 3-1", "bad CPU list '0, 3-1': range '3-1' runs backwards"),
    ("8190-8192", "bad CPU list '8190-8192': CPU 8192 is outside 0..8191"),
    ("1234567", "bad CPU list '1234567': '1234567' is not 'N' or 'N-M'"),
    ("\u00b2", "bad CPU list '\u00b2': '\u00b2' is not 'N' or 'N-M'"),
    # Long values are cut: 60 characters of the list, 20 of the part (quotes included).
    ("9" * 100, f"bad CPU list '{'9' * 59}: '{'9' * 19} is not 'N' or 'N-M'"),
])
def test_cpu_list_errors(text: str, message: str) -> None:
    assert _message(ParseError, lambda: parse_cpu_list(text)) == message


@pytest.mark.parametrize(("text", "cpus"), [
    ("123456", None), ("8191", [8191]), ("8190-8191", [8190, 8191]), (" 1 - 2 ,", [1, 2]),
    ("0,,2", [0, 2]), ("", []), (" , ", []),
])
def test_cpu_list_edges(text: str, cpus: list[int] | None) -> None:
    if cpus is None:  # six digits is an id, but above the cap
        assert "is outside 0..8191" in _message(ParseError, lambda: parse_cpu_list(text))
    else:
        assert parse_cpu_list(text) == cpus


def test_cpu_id_checks() -> None:
    assert check_cpu_id(0) == 0 and check_cpu_id(8191) == 8191
    assert _message(ParseError, lambda: check_cpu_id(-1)) == "CPU id -1 is outside 0..8191"
    assert _message(ParseError, lambda: check_cpu_id(8192, "X")) == "X 8192 is outside 0..8191"
    assert _message(ParseError, lambda: check_cpu_id(False)) == (
        "CPU id False is not an integer CPU id")
    assert check_cpu_ids([5, 1, 5]) == [1, 5]
    assert _message(ParseError, lambda: check_cpu_ids([1, "x"], "L")) == (
        "L: CPU 'x' is not an integer CPU id")
    assert _message(ParseError, lambda: check_cpu_ids([9999])) == (
        "CPU list: CPU 9999 is outside 0..8191")


@pytest.mark.parametrize(("text", "shape"), [
    ("144-167", True), ("0-47,96-143", True), (" 1 , 2-3 ,", True), ("1,", True),
    ("HCCS", False), ("-1", False), ("1-2-3", False), ("1,,2", False), ("", False),
    ("0-47\nx", False),
])
def test_cpu_list_shape(text: str, shape: bool) -> None:
    assert looks_like_cpu_list(text) is shape
