"""load_recorded_host over folders whose entries are odd: bad UTF-8, over the size limit,
directories, FIFOs, symlinks (out of the folder, inside it, dangling, looping), and odd
``--host`` paths (too long, through a file). Only ``TopologyError`` may escape, a FIFO never
blocks (the timeout), and an odd entry the loader reads is never taken as a recorded file."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from ascend_topology import TopologyError, example_host_dir, load_recorded_host
from ascend_topology.safe_io import HOST_JSON_LIMIT, RECORDED_FILE_LIMIT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NAMES = ("host.json", "npu-smi-info-m.txt", "npu-smi-info.txt", "npu-smi-info-t-topo.txt",
         "lscpu-e.txt", "lspci.txt")
KINDS = ("keep", "missing", "bad-utf8", "huge", "directory", "fifo", "link-out", "link-in",
         "dangling", "loop")
# Never opened: a2-8npu's host.json gives the NUMA layout, so its lscpu-e.txt is not read.
UNREAD = {("a2-8npu", "lscpu-e.txt")}


def _make(folder: Path, name: str, kind: str, outside: Path) -> None:
    path = folder / name
    original = path.read_bytes() if path.is_file() else b"CPU NODE\n0 0\n"
    if kind == "keep":
        return
    if path.exists():
        path.unlink()
    if kind == "bad-utf8":
        path.write_bytes(original[:40] + b"\xff\xfe\xc3" + original[40:])
    elif kind == "huge":
        limit = HOST_JSON_LIMIT if name == "host.json" else RECORDED_FILE_LIMIT
        path.write_bytes(original + b" " * (limit + 1 - len(original)))
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-out":  # the same content, from outside the folder
        (outside / name).write_bytes(original)
        path.symlink_to(outside / name)
    elif kind == "link-in":
        (folder / f".{name}").write_bytes(original)
        path.symlink_to(f".{name}")
    elif kind == "dangling":
        path.symlink_to(outside / "nothing-here")
    elif kind == "loop":
        path.symlink_to(name)


@pytest.mark.timeout(600)
@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["a2-8npu", "x86-a2"]),
       st.fixed_dictionaries({name: st.sampled_from(KINDS) for name in NAMES}))
def test_odd_entries_raise_only_topology_errors(example: str, kinds: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder, outside = Path(tmp) / "host", Path(tmp) / "outside"
        shutil.copytree(example_host_dir(example), folder)
        outside.mkdir()
        for name, kind in kinds.items():
            _make(folder, name, kind, outside)
        try:
            load_recorded_host(folder)
        except TopologyError as exc:
            assert str(exc) and "\n" not in str(exc).strip()
            return
    odd = {name for name, kind in kinds.items() if kind not in ("keep", "missing")}
    assert all((example, name) in UNREAD for name in odd), kinds


def test_a_host_path_too_long_for_the_file_system_is_a_topology_error(tmp_path: Path) -> None:
    for value in ("x" * 5000, str(tmp_path / ("y" * 300))):
        with pytest.raises(TopologyError, match=r"^--host '.*': cannot be inspected: File name "
                                                r"too long$"):
            load_recorded_host(value)


def test_a_host_path_through_a_file_is_a_topology_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(TopologyError, match="not a folder and not an example host"):
        load_recorded_host(tmp_path / "file" / "host")
