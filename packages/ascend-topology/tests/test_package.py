"""Package-level guarantees: no heavy imports, no import side effects, synthetic hosts."""

from __future__ import annotations

import json
import subprocess
import sys

import ascend_topology


def test_import_pulls_in_no_torch_vllm_or_pydantic_and_changes_no_env() -> None:
    code = (
        "import os, sys, json; before = dict(os.environ); "
        "import ascend_topology, ascend_topology.cli; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'torch', 'vllm', 'pydantic', 'numpy'}); "
        "print(json.dumps([heavy, dict(os.environ) == before]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert json.loads(out) == [[], True]


def test_public_names_resolve() -> None:
    for name in ascend_topology.__all__:
        assert getattr(ascend_topology, name) is not None








