"""Writable copies of the recorded example hosts for tests that edit them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ascend_topology import example_host_dir


def copy_example(tmp_path: Path, name: str = "a2-8npu") -> Path:
    """A copy of example host ``name`` in ``tmp_path / name``."""
    folder = tmp_path / name
    shutil.copytree(example_host_dir(name), folder)
    return folder


def edit_meta(folder: Path, **changes: object) -> None:
    """Update the top-level keys of ``folder``'s ``host.json`` with ``changes``."""
    meta = json.loads((folder / "host.json").read_text())
    meta.update(changes)
    (folder / "host.json").write_text(json.dumps(meta))
