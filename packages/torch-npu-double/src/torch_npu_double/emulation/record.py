"""The record of the real torch-npu wheel (``tools/npu_seam/torch_npu-<version>.json``).

The harness runs from the workspace (it is never published), so it reads the checked-in
record from the repository rather than carrying a second copy that could drift.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import tomllib


def repo_root() -> Path:
    """The workspace root holding ``tools/npu_seam`` (this package lives under it)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "tools" / "npu_seam").is_dir() and (parent / "uv.lock").is_file():
            return parent
    raise FileNotFoundError(
        "the NPU emulation reads tools/npu_seam/torch_npu-<version>.json from the vllm-ascend "
        f"workspace, and {__file__} is not inside one")


def locked_torch_npu_version(root: Path) -> str:
    """The torch-npu version ``uv.lock`` resolves."""
    data = tomllib.loads((root / "uv.lock").read_text(encoding="utf-8"))
    versions = {p["version"] for p in data.get("package", []) if p.get("name") == "torch-npu"}
    if len(versions) != 1:
        raise ValueError(f"uv.lock holds {sorted(versions) or 'no'} torch-npu versions")
    return str(versions.pop())


@functools.cache
def load_record() -> dict[str, Any]:
    """The record of the locked torch-npu release; read-only by convention."""
    root = repo_root()
    path = root / "tools" / "npu_seam" / f"torch_npu-{locked_torch_npu_version(root)}.json"
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record
