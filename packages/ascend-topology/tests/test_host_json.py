"""host.json checks: every value kind at its limits, every message exactly, all problems of
one file reported together."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ascend_topology import (
    RecordedHostError,
    TopologyError,
    example_host_dir,
    load_recorded_host,
)
from ascend_topology.host_json import HostMeta, cpu_list_value, parse_host_json
from hypothesis import example, given
from hypothesis import strategies as st

from .fuzz_checks import check_recorded_host
from .fuzz_inputs import BOUNDED, KEYS, VALUES
from .host_folders import copy_example, edit_meta

W = "H/host.json"


def _meta(**values: Any) -> HostMeta:
    return parse_host_json(json.dumps(values), W)


def _problems(text: str) -> tuple[str, ...]:
    with pytest.raises(RecordedHostError) as caught:
        parse_host_json(text, W)
    return caught.value.problems


def test_defaults_for_absent_and_null_keys() -> None:
    expected = HostMeta(arch="unknown", soc=None, threads_per_core=1, allowed_cpus=None,
                        numa=None, visible_devices=None, pcie={})
    assert parse_host_json("{}", W) == expected
    nulls = dict.fromkeys(["arch", "soc", "threads_per_core", "allowed_cpus", "numa",
                           "visible_devices", "pcie"])
    assert _meta(**nulls) == expected


def test_every_value_read() -> None:
    meta = _meta(arch="x86_64", soc="310P", threads_per_core=8, allowed_cpus="0-3,8",
                 numa={"0": "0-3", "99999": [8, 8]}, visible_devices=[1, 0],
                 pcie={"3": "0000:C1:00.0"})
    assert meta == HostMeta(arch="x86_64", soc="310P", threads_per_core=8,
                            allowed_cpus=[0, 1, 2, 3, 8], numa={0: [0, 1, 2, 3], 99999: [8]},
                            visible_devices=(1, 0), pcie={3: "0000:c1:00.0"})


def test_an_unknown_key_is_named_not_ignored() -> None:
    # A misspelt key would otherwise leave its value unread without a word.
    assert _problems('{"soc": "A2", "visable_devices": "0", "numa": {"0": "0-3"}}') == (
        f"{W}: unknown key 'visable_devices'; known: arch, soc, threads_per_core, "
        "allowed_cpus, numa, visible_devices, pcie",)


def test_one_pcie_address_for_two_npus_is_refused() -> None:
    assert _problems('{"pcie": {"0": "0000:c1:00.0", "1": "0000:C1:00.0"}}') == (
        f"{W}: pcie: NPUs 0 and 1 are both given the address 0000:c1:00.0; each NPU has "
        "its own",)


def test_an_arch_that_cannot_be_printed_is_refused() -> None:
    assert _problems('{"arch": "\\ud800"}') == (
        f"{W}: arch: must be a short string like 'aarch64'; got '\\ud800'",)


@pytest.mark.parametrize("text", ["[1]", '"x"', "1", "null"])
def test_not_an_object(text: str) -> None:
    assert _problems(text) == (f"{W}: must hold a JSON object",)


def test_not_json() -> None:
    assert _problems("{") == (f"{W}: not valid JSON (Expecting property name enclosed in "
                              "double quotes: line 1 column 2 (char 1))",)


def test_deep_nesting_is_one_line() -> None:
    assert _problems("[" * 100_000) == (f"{W}: not valid JSON (nested too deeply)",)


def test_invalid_json_detail_is_cut_at_120_characters() -> None:
    (problem,) = _problems('{"a": ' + "x" * 500)
    assert problem == f"{W}: not valid JSON (Expecting value: line 1 column 7 (char 6))"
    long = _problems("{" + '"k": 1, ' * 3 + "}")[0]
    assert long.startswith(f"{W}: not valid JSON (") and len(long) <= len(W) + 20 + 120 + 1


@pytest.mark.parametrize(("key", "value", "message"), [
    ("arch", 5, "arch: must be a short string like 'aarch64'; got 5"),
    ("arch", "a\0b", "arch: must be a short string like 'aarch64'; got 'a\\x00b'"),
    ("arch", "a" * 65, "arch: must be a short string like 'aarch64'; got '" + "a" * 39),
    ("soc", "A9", "soc: 'A9' is not one of A2, A3, A5, 310P"),
    ("soc", ["A2"], "soc: ['A2'] is not one of A2, A3, A5, 310P"),
    ("threads_per_core", 0, "threads_per_core: must be 1..8; got 0"),
    ("threads_per_core", 9, "threads_per_core: must be 1..8; got 9"),
    ("threads_per_core", True, "threads_per_core: must be 1..8; got True"),
    ("threads_per_core", "2", "threads_per_core: must be 1..8; got '2'"),
    ("allowed_cpus", 5, "allowed_cpus: must be a CPU list like '0-47,96-143' or [0, 1]; got 5"),
    ("allowed_cpus", "0-x", "allowed_cpus: bad CPU list '0-x': '0-x' is not 'N' or 'N-M'"),
    ("allowed_cpus", [1, "2"], "allowed_cpus: CPU list: CPU '2' is not an integer CPU id"),
    ("numa", [], 'numa: must be like {"0": "0-47", "1": "48-95"}'),
    ("numa", {}, 'numa: must be like {"0": "0-47", "1": "48-95"}'),
    ("numa", {"100000": "0"}, "numa: key '100000' is not a node id (0..99999)"),
    ("numa", {"-1": "0"}, "numa: key '-1' is not a node id (0..99999)"),
    ("numa", {"\u0663": "0"}, "numa: key '\u0663' is not a node id (0..99999)"),
    ("numa", {"0": 7}, "numa: node 0: must be a CPU list like '0-47,96-143' or [0, 1]; got 7"),
    ("visible_devices", [0, True], "visible_devices: must be like '0,1' or [0, 1]; got [0, True]"),
    ("visible_devices", 3, "visible_devices: must be like '0,1' or [0, 1]; got 3"),
    ("visible_devices", "0,x", "visible_devices: visible devices '0,x': 'x' is not a device id; "
                               "expected comma-separated integers like '0,1'"),
    ("pcie", [], 'pcie: must be like {"0": "0000:c1:00.0"}'),
    ("pcie", {"a": "0000:c1:00.0"},
     'pcie: must be like {"0": "0000:c1:00.0"}; got \'a\': \'0000:c1:00.0\''),
    ("pcie", {"0": 5}, 'pcie: must be like {"0": "0000:c1:00.0"}; got \'0\': 5'),
    ("pcie", {"0": "0000:c1:00.0/.."},
     'pcie: must be like {"0": "0000:c1:00.0"}; got \'0\': \'0000:c1:00.0/..\''),
])
def test_each_invalid_value(key: str, value: Any, message: str) -> None:
    import json

    assert _problems(json.dumps({key: value})) == (f"{W}: {message}",)


@pytest.mark.parametrize(("arch", "ok"), [("a" * 63, True), ("a" * 64, True), ("a" * 65, False)])
def test_arch_length_limit(arch: str, ok: bool) -> None:
    if ok:
        assert _meta(arch=arch).arch == arch
    else:
        with pytest.raises(RecordedHostError):
            _meta(arch=arch)


@pytest.mark.parametrize("threads", [1, 2, 7, 8])
def test_threads_per_core_accepted(threads: int) -> None:
    assert _meta(threads_per_core=threads).threads_per_core == threads


def test_all_problems_at_once_in_key_order() -> None:
    import json

    text = json.dumps({"pcie": 1, "numa": 1, "soc": 1, "arch": 1, "threads_per_core": 0,
                       "allowed_cpus": 1, "visible_devices": 1.5})
    assert [p.split(": ")[1] for p in _problems(text)] == [
        "arch", "soc", "threads_per_core", "allowed_cpus", "numa", "visible_devices", "pcie"]


def test_cpu_list_value_forms() -> None:
    assert cpu_list_value("3,1-2") == [1, 2, 3]
    assert cpu_list_value([3, 1, 3]) == [1, 3]
    assert cpu_list_value([]) == []
    with pytest.raises(TopologyError, match=r"^must be a CPU list like "):
        cpu_list_value(None)


def test_numa_nodes_sharing_a_cpu_are_a_contradiction() -> None:
    assert _meta(numa={"0": "0-3", "1": "4-7"}).numa == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert _problems(json.dumps({"numa": {"0": "0-3", "1": "3-7"}})) == (
        f"{W}: numa: nodes overlap: CPU 3 is in NUMA node 0 and in NUMA node 1",)
    # Checked node by node: 100 nodes of 0-8191 stop at the second, before expanding the rest.
    many = {str(n): "0-8191" for n in range(100)}
    assert _problems(json.dumps({"numa": many})) == (
        f"{W}: numa: nodes overlap: CPU 0 is in NUMA node 0 and in NUMA node 1",)


@pytest.mark.slow
@BOUNDED
@given(st.sampled_from(["a2-8npu", "x86-a2", "310p"]),
       st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=4))
@example("a2-8npu", {"allowed_cpus": [0, 1, 10**30]})
@example("a2-8npu", {"allowed_cpus": [True, 1, 2, 3, 4, 5]})
@example("a2-8npu", {"numa": {"0": [math.nan]}, "threads_per_core": math.inf})
def test_host_json_values(example_name: str, changes: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "host"
        folder.mkdir()
        source = example_host_dir(example_name)
        for path in source.iterdir():
            (folder / path.name).write_bytes(path.read_bytes())
        meta = json.loads((folder / "host.json").read_text())
        meta.update(changes)
        (folder / "host.json").write_text(json.dumps(meta))  # NaN/Infinity as JSON allows
        check_recorded_host(folder)


def test_oversized_host_json_is_refused(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    text = (folder / "host.json").read_text().rstrip()
    limit = 1024 * 1024
    (folder / "host.json").write_text(text + " " * (limit - len(text)))
    assert load_recorded_host(folder).soc == "A2"
    (folder / "host.json").write_text(text + " " * (limit - len(text) + 1))
    with pytest.raises(RecordedHostError, match=r"host\.json is larger than the 1 MiB limit"):
        load_recorded_host(folder)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([0, 1, 10**30], "CPU 1000000000000000000000000000000 is outside 0..8191"),
        ([0, 8192], "CPU 8192 is outside 0..8191"),
        ([0, True], "CPU True is not an integer CPU id"),
        ([0, 1.0], "CPU 1.0 is not an integer CPU id"),
        ([0, -1], "CPU -1 is outside 0..8191"),
        ("0-8192", "CPU 8192 is outside 0..8191"),
    ],
)
def test_cpu_lists_in_host_json_are_capped_like_strings(
    tmp_path: Path, value: object, message: str
) -> None:
    folder = copy_example(tmp_path)
    edit_meta(folder, allowed_cpus=value)
    with pytest.raises(RecordedHostError, match=message.replace(".", r"\.")):
        load_recorded_host(folder)


def test_cpu_list_at_the_cap_is_accepted(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    edit_meta(folder, numa={"0": [0, 1, 2, 3, 4, 8191]}, allowed_cpus=[0, 1, 2, 3, 4, 8191])
    facts = load_recorded_host(folder)
    assert facts.allowed_cpus == (0, 1, 2, 3, 4, 8191)


def test_numa_cpu_lists_in_host_json_are_capped(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    edit_meta(folder, numa={"0": [0, True], "1": [10**30]})
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    assert caught.value.problems == (
        f"{folder}/host.json: numa: node 0: CPU list: CPU True is not an integer CPU id",
    )


def test_bools_and_huge_ints_elsewhere_in_host_json(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    edit_meta(folder, threads_per_core=True, visible_devices=[True, 10**30],
               soc=1, arch=["x"])
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    where = f"{folder}/host.json"
    # Every problem at once, one line each, in the order of the keys.
    assert caught.value.problems == (
        f"{where}: arch: must be a short string like 'aarch64'; got ['x']",
        f"{where}: soc: 1 is not one of A2, A3, A5, 310P",
        f"{where}: threads_per_core: must be 1..8; got True",
        f"{where}: visible_devices: must be like '0,1' or [0, 1]; got [True, "
        "1000000000000000000000000000000]",
    )
