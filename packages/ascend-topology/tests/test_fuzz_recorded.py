"""Hypothesis (derandomized, bounded) over whole recorded-host folders: random host.json
values (lists, bools, huge integers, NaN, nesting) and garbled npu-smi texts. Only
``RecordedHostError`` may escape ``load_recorded_host`` (as documented); what loads is a valid
host whose plan holds its invariants, and the CLI answers with exit 0, 1 or 2 and no
traceback."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ascend_topology import (
    MAX_CPU_ID,
    SOCS,
    RecordedHostError,
    example_host_dir,
    load_recorded_host,
    plan,
)
from ascend_topology.cli import main
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

# Seconds per suite: marked slow so that mutation runs, which repeat every covering test for
# each mutant, leave them out; the package's normal test command runs them.
pytestmark = pytest.mark.slow
BOUNDED = settings(max_examples=80, deadline=None, database=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KEYS = ["arch", "soc", "allowed_cpus", "threads_per_core", "numa", "visible_devices", "pcie"]
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 10),
    st.sampled_from([8191, 8192, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["0-3", "0-8191", "0-8192", "3-1", "0,1", "x", "", "A2", "A5", "310P",
                     "0000:c1:00.0", "\u00b2", "1" * 40]),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.sampled_from(["0", "1", "7", "99999", "100000", "-1", "a", ""]), inner, max_size=4),
    max_leaves=12,
)
GARBLE = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["", "NPU ID  Chip ID  Chip Logic ID\n0 0 0\n",
                     "NPU ID  Chip ID\n99999999 0\n", "| NPU Chip | Process id |\n| 0 0 | 1 |\n",
                     "NPU0  X  CPU Affinity\nNPU0 X 0-8192\n", "CPU NODE\n8192 0\n"]),
)


def _check_facts(folder: Path) -> None:
    try:
        facts = load_recorded_host(folder)
    except RecordedHostError as exc:
        assert exc.problems and all(p and "\n" not in p for p in exc.problems)
        return
    assert facts.soc in SOCS and 1 <= facts.threads_per_core <= 8
    every = [*facts.allowed_cpus, *(c for cpus in facts.numa.values() for c in cpus),
             *(c for cpus in facts.affinity.values() for c in cpus)]
    assert all(type(c) is int and 0 <= c <= MAX_CPU_ID for c in every)
    result = plan(facts)
    used = [c for p in result.npus for c in p.cpus]
    assert len(used) == len(set(used)) and set(used) <= set(facts.allowed_cpus)
    assert result.ok == (not result.problems and bool(result.npus))
    data = json.loads(result.to_json())
    assert all(type(c) is int for e in data["npus"] for c in e["cpus"])


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
        _check_facts(folder)


@BOUNDED
@given(st.fixed_dictionaries({}, optional={
    "npu-smi-info-m.txt": GARBLE, "npu-smi-info.txt": GARBLE, "npu-smi-info-t-topo.txt": GARBLE,
    "lscpu-e.txt": GARBLE, "lspci.txt": GARBLE,
    "host.json": st.one_of(GARBLE, VALUES.map(json.dumps),
                           st.dictionaries(st.sampled_from(KEYS), VALUES).map(json.dumps))}))
def test_garbled_folders(files: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            Path(tmp, name).write_text(text, encoding="utf-8", errors="surrogateescape")
        _check_facts(Path(tmp))


@settings(max_examples=25, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=3),
       st.sampled_from([["plan", "--json"], ["show"], ["bind", "--rank", "0", "--dry-run"]]))
def test_cli_on_fuzzed_hosts(
    capsys: pytest.CaptureFixture[str], changes: dict[str, Any], argv: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "host"
        folder.mkdir()
        for path in example_host_dir("a2-8npu").iterdir():
            (folder / path.name).write_bytes(path.read_bytes())
        meta = json.loads((folder / "host.json").read_text())
        meta.update(changes)
        (folder / "host.json").write_text(json.dumps(meta))
        status = main([*argv, "--host", str(folder)])
    out, err = capsys.readouterr()
    assert status in (0, 1, 2)
    assert "Traceback" not in err and "unexpected" not in err
    if status == 2:
        assert out == "" and err and all(
            line.startswith("ascend-topology: error: ") for line in err.splitlines())
    if status == 0 and argv[0] == "plan":
        assert json.loads(out)["ok"] is True
