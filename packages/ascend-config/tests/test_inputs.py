"""ascend_config.inputs: what a read refuses and the exact one-line messages, in-process."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from ascend_config import (
    DeploymentFacts,
    FactsError,
)
from ascend_config.inputs import (
    InputError,
    json_depth,
    load_config_file,
    parse_json_text,
    parse_yaml_text,
    read_text_file,
    show_path,
)
from ascend_config.limits import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_FACTS_BYTES,
)
from hypothesis import given
from hypothesis import strategies as st

from .fuzz_checks import resolve_ok_or_error
from .fuzz_inputs import CONFIG, FUZZ, JSON


@pytest.mark.parametrize(("text", "depth"), [
    ("", 0), ("1", 0), ("[]", 1), ("[][]", 1), ("[[]]", 2), ('["a", "b", [1]]', 2),
    ('{"a": [{"b": []}]}', 4), ('"[[["', 0), ('"\\"[["', 0), ('["\\\\", [[]]]', 3),
    ("]]][", 0), ("[[]][[[]]]", 3), ('{"a": {}, "b": {}}', 2), ('[{}, {}, {}]', 2),
    ('["abc' + "[" * 5, 1), ("[" * 5 + '"x', 5)])
def test_json_depth(text: str, depth: int) -> None:
    assert json_depth(text) == depth


@pytest.mark.parametrize(("length", "shown"), [(198, None), (199, "cut")])
def test_show_path_bound(length: int, shown: str | None) -> None:
    path = "a" * length  # repr adds two quotes: 200 and 201 characters
    text = show_path(path)
    if shown is None:
        assert text == repr(path) and len(text) == 200
    else:
        assert text == repr(path)[:197] + "..." and len(text) == 200


def test_show_path_escapes() -> None:
    assert show_path("a\nb\udcff") == "'a\\nb\\udcff'"


def test_missing_and_unreachable_paths(tmp_path: Path) -> None:
    file = tmp_path / "f.json"
    file.write_text("{}")
    with pytest.raises(InputError) as info:
        read_text_file(file / "x.json", 100, "config file")
    assert str(info.value) == (f"cannot read config file {str(file / 'x.json')!r}: Not a "
                               "directory")
    with pytest.raises(InputError) as info:
        read_text_file("a\x00b.json", 100, "config file")
    assert str(info.value) == ("cannot read config file 'a\\x00b.json': the path contains a NUL "
                               "byte")
    with pytest.raises(InputError) as info:
        read_text_file("/tmp/\ud800.json", 100, "config file")
    assert str(info.value) == ("cannot read config file '/tmp/\\ud800.json': the path contains "
                               "an unpaired surrogate (not valid Unicode text)")


def test_undecodable_argv_bytes_are_a_usable_path(tmp_path: Path) -> None:
    # A non-UTF-8 file name arrives as a surrogate-escaped str and must still open.
    raw = os.fsencode(tmp_path) + b"/\xff.json"
    with open(raw, "wb") as fh:
        fh.write(b'{"a": 1}')
    assert read_text_file(os.fsdecode(raw), 100, "config file") == '{"a": 1}'


def test_path_swapped_for_a_fifo_after_the_check(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "swap.json"
    os.mkfifo(fifo)
    real_stat = os.stat

    def regular_looking(path: object, *args: object, **kwargs: object) -> os.stat_result:
        result = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        fields = list(result)
        fields[0] = stat.S_IFREG | 0o644
        return os.stat_result(fields)

    monkeypatch.setattr(os, "stat", regular_looking)
    with pytest.raises(InputError) as info:
        read_text_file(fifo, 100, "config file")
    assert str(info.value) == (f"config file {str(fifo)!r} is a named pipe (FIFO); give a "
                               "regular file")


@pytest.mark.parametrize(("size", "accepted"), [(9, True), (10, True), (11, False)])
def test_read_limit(tmp_path: Path, size: int, accepted: bool) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(b"x" * size)
    if accepted:
        assert read_text_file(path, 10, "what") == "x" * size
    else:
        with pytest.raises(InputError) as info:
            read_text_file(path, 10, "what")
        assert str(info.value) == f"what {str(path)!r} is larger than the limit of 10 bytes"


def test_facts_file_messages(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b'{"soc": "A\xe9"}')
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_json_file(path)
    assert str(info.value) == (f"deployment facts file {str(path)!r} is not UTF-8 text "
                               "(invalid byte 0xe9 at offset 10)")
    path.write_text("[1]")
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_json_file(path)
    assert str(info.value) == "deployment facts must be a JSON object, got list"
    assert MAX_FACTS_BYTES == 32 << 20


@pytest.mark.parametrize(("count", "suffix"), [(10, ""), (11, " and 1 more")])
def test_unknown_facts_are_listed_up_to_ten(count: int, suffix: str) -> None:
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({f"x{i:02}": 1 for i in range(count)})
    names = ", ".join(repr(f"x{i:02}") for i in range(10))
    assert str(info.value).startswith(f"unknown deployment fact(s) {names}{suffix}; known: "
                                      "architectures, block_size, data_parallel_size, ")


# --- JSON and YAML text ----------------------------------------------------------------------

def test_json_parse_error_message() -> None:
    with pytest.raises(InputError) as info:
        parse_json_text('{"a": }', "stdin")
    assert str(info.value) == "stdin is not valid JSON: Expecting value: line 1 column 7 (char 6)"


@pytest.mark.parametrize(("depth", "accepted"), [(MAX_DEPTH, True), (MAX_DEPTH + 1, False)])
@pytest.mark.parametrize("flow", [True, False])
def test_yaml_depth_boundary(depth: int, accepted: bool, flow: bool) -> None:
    if flow:
        text = "[" * depth + "]" * depth
    else:  # block style: one mapping level per indentation step
        text = "".join(f"{'  ' * level}k:\n" for level in range(depth - 1))
        text += "  " * (depth - 1) + "k: 1\n"
    if accepted:
        value = parse_yaml_text(text, "t")
        levels = 0
        while isinstance(value, (list, dict)):
            levels += 1
            value = value[0] if isinstance(value, list) and value else (
                value.get("k") if isinstance(value, dict) else None)
        assert levels == depth
    else:
        with pytest.raises(InputError) as info:
            parse_yaml_text(text, "t")
        assert str(info.value) == f"t is nested deeper than {MAX_DEPTH} levels"


def test_yaml_siblings_do_not_add_depth() -> None:
    text = "".join(f"k{i}: [[1]]\n" for i in range(3 * MAX_DEPTH))
    assert parse_yaml_text(text, "t")["k0"] == [[1]]


def test_yaml_error_is_one_bounded_line() -> None:
    with pytest.raises(InputError) as info:
        parse_yaml_text("a: [1,\n  b: {", "stdin")
    text = str(info.value)
    assert text.startswith("stdin is not valid YAML: while parsing a flow node did not find "
                           'expected node content in "<unicode string>", line 3, column 1')
    assert "\n" not in text and len(text) <= len("stdin is not valid YAML: ") + 200


def test_yaml_refuses_python_tags() -> None:
    with pytest.raises(InputError, match="could not determine a constructor"):
        parse_yaml_text("!!python/object/apply:os.system ['true']", "t")


def test_load_config_file_by_suffix(tmp_path: Path) -> None:
    for name in ("c.yml", "c.yaml"):
        (tmp_path / name).write_text("a: [1, 2]\n")
        assert load_config_file(tmp_path / name, 100) == {"a": [1, 2]}
    (tmp_path / "c.json").write_text("a: 1")
    with pytest.raises(InputError) as info:
        load_config_file(tmp_path / "c.json", 100)
    assert str(info.value).startswith(f"config file {str(tmp_path / 'c.json')!r} is not valid "
                                      "JSON: ")


def test_stream_limit_reads_at_most_one_byte_more() -> None:
    from ascend_config.inputs import read_stream

    stream = io.BytesIO(b"x" * 100)
    with pytest.raises(InputError):
        read_stream(stream, 10, "stdin")
    assert stream.tell() == 11


def test_yaml_depth_counts_closed_siblings_back_out() -> None:
    # "a" closes a list one level below the root mapping, then "b" nests to MAX_DEPTH + 1 in
    # total: the count must come back to 2 after "a", not drop lower.
    deep = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    text = f"x:\n  a: [1]\n  b: {deep}\n"  # root map (1) + x map (2) + lists (MAX_DEPTH - 1)
    with pytest.raises(InputError) as info:
        parse_yaml_text(text, "t")
    assert str(info.value) == f"t is nested deeper than {MAX_DEPTH} levels"
    shallower = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    assert parse_yaml_text(f"x:\n  a: [1]\n  b: {shallower}\n", "t")["x"]["a"] == [1]


def test_yaml_without_libyaml_uses_the_pure_python_safe_loader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert parse_yaml_text("a: [1, {b: 2}]\n", "t") == {"a": [1, {"b": 2}]}
    with pytest.raises(InputError, match="could not determine a constructor"):
        parse_yaml_text("!!python/object/apply:os.system ['true']", "t")


def test_yaml_error_text_is_cut_at_200_characters() -> None:
    # PyYAML's constructor error quotes the unknown tag in full; the tag makes it 300+ long.
    prefix = "could not determine a constructor for the tag '!"
    with pytest.raises(InputError) as info:
        parse_yaml_text("!" + "a" * 300 + " 1\n", "t")
    assert str(info.value) == "t is not valid YAML: " + prefix + "a" * (200 - len(prefix))


def test_a_file_type_without_a_name_is_refused_in_words(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    # A mode that is none of the named kinds (a symlink type, as lstat would report it).
    path = tmp_path / "c.json"
    path.write_text("{}")
    real_stat = os.stat

    def fake_stat(target: object, *args: object, **kwargs: object) -> os.stat_result:
        st = real_stat(target, *args, **kwargs)  # type: ignore[arg-type]
        return os.stat_result((stat.S_IFLNK | 0o644, *tuple(st)[1:]))

    monkeypatch.setattr(os, "stat", fake_stat)
    with pytest.raises(InputError) as info:
        read_text_file(path, 100, "config file")
    assert str(info.value) == (f"config file {show_path(path)} is not a regular file; give a "
                               "regular file")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: 2024-02-30\n", "day is out of range for month"),
        ("a: 2024-01-01 10:00:00+25:00\n", "offset must be a timedelta strictly between"),
        ("a: " + "1" * 4301 + "\n", "Exceeds the limit (4300 digits)"),
    ],
)
def test_yaml_scalars_that_cannot_be_built_are_input_errors(text: str, why: str) -> None:
    with pytest.raises(InputError) as info:
        parse_yaml_text(text, "t")
    assert str(info.value).startswith("t has a value YAML cannot build: ")
    assert why in str(info.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: 2024-02-29\n", "2024-02-29"),
        ("a: 2024-01-01 10:00:00+23:59\n", "2024-01-01 10:00:00+23:59"),
        ("a: " + "1" * 4300 + "\n", "1" * 4300),
    ],
)
def test_yaml_scalars_at_the_edge_still_parse(text: str, value: str) -> None:
    assert str(parse_yaml_text(text, "t")["a"]) == value


@pytest.mark.parametrize(("make", "kind"), [
    ("fifo", "a named pipe (FIFO)"), ("dir", "a directory"), ("/dev/null", "a character device"),
    ("/dev/zero", "a character device")])
def test_special_files_refused_in_process(tmp_path: Path, make: str, kind: str) -> None:
    from ascend_config.inputs import InputError, read_text_file

    path = tmp_path / "x"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "dir":
        path.mkdir()
    else:
        path = Path(make)
    with pytest.raises(InputError) as info:
        read_text_file(path, MAX_CONFIG_BYTES, "what")
    assert str(info.value) == f"what {str(path)!r} is {kind}; give a regular file"


def _nest_text(depth: int, inner: str) -> str:
    return '{"dump_config": ' + '{"a": ' * depth + inner + "}" * depth + "}"


JSON_TEXT = st.one_of(
    st.text(max_size=200),
    st.builds(lambda v: json.dumps(v, allow_nan=True), JSON),
    st.builds(lambda v: json.dumps(v, ensure_ascii=True), CONFIG),
    st.builds(_nest_text, st.integers(0, 3 * MAX_DEPTH), st.sampled_from(["1", "[", '"\\udcff"'])),
    st.builds(lambda n: "[" * n, st.integers(0, 5000)),
)


def _yaml_with_aliases(value: Any, uses: int) -> str:
    body = yaml.safe_dump({"dump_config": {"a": value}}, allow_unicode=False)
    anchor = "dump_config:\n  base: &b " + json.dumps(value, ensure_ascii=True) + "\n"
    return anchor + "  uses: [" + ", ".join(["*b"] * uses) + "]\n" + body.split("\n", 1)[1]


YAML_TEXT = st.one_of(
    st.text(max_size=200),
    st.builds(lambda v: yaml.safe_dump(v, allow_unicode=False), CONFIG),
    st.builds(_yaml_with_aliases, st.lists(st.integers(), max_size=3), st.integers(0, 150)),
    st.sampled_from(["a: &a [*a]\n", "!!python/object:os.system {}\n", "? [1, 2]\n: x\n",
                     "x: !!binary aGk=\n", "t: 2024-01-01\n", "s: !!set {a, b}\n",
                     "---\na: 1\n---\nb: 2\n", "dump_config: " + "[" * 40 + "]" * 40 + "\n"]),
)


@FUZZ
@given(text=JSON_TEXT)
def test_json_text(text: str) -> None:
    try:
        data = parse_json_text(text, "text")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    resolve_ok_or_error(data)


@FUZZ
@given(text=YAML_TEXT)
def test_yaml_text(text: str) -> None:
    try:
        data = parse_yaml_text(text, "text")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    resolve_ok_or_error(data)


def test_scan_depth_of_list_items_and_of_container_keys() -> None:
    from ascend_config.inputs import Finding, scan

    # Lists: [[0]] is 2 levels, [[[0]]] is 3.
    assert scan([[0]], max_depth=2, max_values=100) is None
    assert scan([[[0]]], max_depth=2, max_values=100) == Finding(
        (0, 0), "nested deeper than 2 levels", "depth")
    # A tuple used as a key sits one level below its mapping, like a value.
    assert scan({"a": {(1, 2): 0}}, max_depth=3, max_values=100) is None
    assert scan({"a": {(1, 2): 0}}, max_depth=2, max_values=100) == Finding(
        ("a",), "nested deeper than 2 levels", "depth")


@pytest.mark.parametrize(("text", "accepted"), [
    # 31 levels, an empty list closes back to 31, then two more levels: 33 in all
    ("[" * 31 + "[], [[]]" + "]" * 31, False),
    # three empty lists beside a 32-deep chain: still 33 with the outer list
    ("[[], [], [], " + "[" * 32 + "]" * 32 + "]", False),
    ("[[], [], [], " + "[" * 31 + "]" * 31 + "]", True),
])
def test_yaml_depth_after_closing(text: str, accepted: bool) -> None:
    from ascend_config.inputs import InputError, parse_yaml_text

    if accepted:
        assert parse_yaml_text(text, "t")[0] == []
    else:
        with pytest.raises(InputError, match="nested deeper than 32 levels"):
            parse_yaml_text(text, "t")
