"""YAML scalars that YAML 1.1 (PyYAML) and YAML 1.2's core schema read differently are refused
with their key path: ``010`` (octal 8 or decimal 10), ``1:30`` (base-60 90 or text), ``yes``.
The readings in the expectations are the two specifications' (YAML 1.1 int/bool types, YAML
1.2.2 section 10.3.2), not this code's."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from ascend_config.cli import main
from ascend_config.inputs import InputError, parse_yaml_text
from ascend_config.yaml_scalars import core_schema_tag
from hypothesis import given
from hypothesis import strategies as st

HINT = ("write the value so both read it alike (a plain decimal number, true or false), or "
        "quote it to mean text")


def check_file(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", str(path)], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("key", "text", "old", "new"), [
    ("eplb_config.num_redundant_experts", "010", "8", "10"),
    ("eplb_config.expert_heat_collection_interval", "1:30", "90", "the text '1:30'"),
])
def test_check_refuses_a_config_file_value_yaml_versions_read_differently(
    tmp_path: Path, key: str, text: str, old: str, new: str
) -> None:
    section, name = key.split(".")
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}:\n  {name}: {text}\n")
    assert check_file(path) == (2, "", (
        f"error: config file {str(path)!r}: {key} = {text} is read differently by YAML "
        f"versions: YAML 1.1 (this reader) reads it as {old}, YAML 1.2 as {new}; {HINT}\n"))
    # The boundary: the same value written so that every reader agrees is accepted.
    plain = str(int(old))
    path.write_text(f"{section}:\n  {name}: {plain}\n")
    code, out, err = check_file(path)
    assert (code, err) == (0, "")
    assert json.loads(out)[section][name] == int(plain)


@pytest.mark.parametrize(("text", "path", "old", "new"), [
    ("a: 010\n", "a =", "8", "10"),
    ("a: 08\n", "a =", "the text '08'", "8"),
    ("a:\n  b: [1, 1:30]\n", "a.b[1] =", "90", "the text '1:30'"),
    ("a: 3:25:45\n", "a =", "12345", "the text '3:25:45'"),
    ("a: [{b: yes}]\n", "a[0].b =", "true", "the text 'yes'"),
    ("a: Off\n", "a =", "false", "the text 'Off'"),
    ("a: 1_000\n", "a =", "1000", "the text '1_000'"),
    ("a: 0b11\n", "a =", "3", "the text '0b11'"),
    ("a: 0o17\n", "a =", "the text '0o17'", "15"),
    ("a: 1e3\n", "a =", "the text '1e3'", "1000.0"),
    ("q: {010: x}\n", "key 010 (in q)", "8", "10"),
])
def test_reader_dependent_scalars_are_refused_with_their_key_path(
    text: str, path: str, old: str, new: str
) -> None:
    with pytest.raises(InputError) as info:
        parse_yaml_text(text, "t")
    assert str(info.value).startswith(f"t: {path} ")
    assert f"is read differently by YAML versions: YAML 1.1 (this reader) reads it as {old}, " \
           f"YAML 1.2 as {new}; {HINT}" in str(info.value)


@pytest.mark.parametrize(("text", "value"), [
    ("a: '010'\n", "010"),            # quoted: text to every reader
    ('a: "1:30"\n', "1:30"),
    ("a: !!int 010\n", 8),            # an explicit tag says which reading is meant
    ("a: 07\n", 7),                   # octal or decimal, 7 either way
    ("a: 0\n", 0),
    ("a: -12\n", -12),
    ("a: 0x1F\n", 31),
    ("a: 1.5e-6\n", 1.5e-6),
    ("a: .5\n", 0.5),
    ("a: true\n", True),
    ("a: ~\n", None),
    ("a: text\n", "text"),
])
def test_scalars_every_reader_reads_alike_are_kept(text: str, value: object) -> None:
    assert parse_yaml_text(text, "t") == {"a": value}


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_plain_decimal_integers_are_never_refused(number: int) -> None:
    assert core_schema_tag(str(number)) == "int"
    assert parse_yaml_text(f"a: {number}\n", "t") == {"a": number}
