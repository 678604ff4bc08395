#!/usr/bin/env python3
"""Check the packages' import boundaries in fresh interpreters (stdlib only).

For each package: importing it must not load the modules it is forbidden to depend on, must not
change an environment variable and must not write a file (in its working directory, HOME or
XDG folders, all pointed at an empty temporary folder for the probe).
Usage: ``python tools/check_import_boundaries.py`` (exit 1 and one line per violation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Package -> top-level modules its import must never load: only vllm-ascend imports
# vllm, and ascend-config and ascend-topology never import torch.
RULES: dict[str, tuple[str, ...]] = {
    "ascend_config": ("torch", "vllm", "torch_npu"),
    "ascend_topology": ("torch", "vllm", "torch_npu"),
    "ascend_kernels": ("vllm",),
    "ascend_graph": ("vllm",),
    "vllm_ascend": ("torch", "vllm", "torch_npu"),
}

_PROBE = """
import importlib, json, os, sys
before = dict(os.environ)
importlib.import_module(sys.argv[1])
after = dict(os.environ)
changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
print(json.dumps({"modules": sorted(sys.modules), "env_changed": changed}))
"""


@dataclass(frozen=True)
class ImportProbe:
    """What importing one module in a fresh interpreter did."""

    module: str
    modules: frozenset[str]
    env_changed: tuple[str, ...]
    files_written: tuple[str, ...]

    def loaded(self, top_level: str) -> bool:
        return any(m == top_level or m.startswith(top_level + ".") for m in self.modules)


def probe(
    module: str, *, python: str = sys.executable, extra_path: str | None = None
) -> ImportProbe:
    """Import ``module`` in a fresh ``python`` with HOME, XDG dirs and cwd in an empty folder."""
    with tempfile.TemporaryDirectory(prefix="import-probe-") as scratch:
        root = Path(scratch)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "VLLM_"))}
        env.update(
            HOME=str(root),
            XDG_CONFIG_HOME=str(root / "xdg-config"),
            XDG_CACHE_HOME=str(root / "xdg-cache"),
        )
        if extra_path:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra_path, env.get("PYTHONPATH")]))
        result = subprocess.run(
            [python, "-c", _PROBE, module],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
            raise RuntimeError(f"importing {module} failed: {tail[0]}")
        report = json.loads(result.stdout.strip().splitlines()[-1])
        written = tuple(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))
    return ImportProbe(module, frozenset(report["modules"]), tuple(report["env_changed"]), written)


def violations(result: ImportProbe, forbidden: tuple[str, ...]) -> list[str]:
    """Every broken rule in one probe, one readable line each."""
    found = [f"import {result.module} loads {name}" for name in forbidden if result.loaded(name)]
    found += [f"import {result.module} changes env var {name}" for name in result.env_changed]
    found += [f"import {result.module} writes {path}" for path in result.files_written]
    return found


def main() -> int:
    problems: list[str] = []
    for module, forbidden in RULES.items():
        problems += violations(probe(module), forbidden)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(f"import boundaries ok: {', '.join(RULES)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
