"""Importing ascend_graph is cheap, side-effect free and never imports vLLM."""

from __future__ import annotations

import json
import subprocess
import sys

import ascend_graph
import pytest

_PROBE = """
import json, os, sys
before = dict(os.environ)
import ascend_graph
lazy = sorted(m for m in sys.modules if m.startswith(("torch", "ascend_kernels")))
ascend_graph.GraphFusionPassManager()
ascend_graph.make_backend()
print(json.dumps({"lazy": lazy, "vllm": any(m.split(".")[0] == "vllm" for m in sys.modules),
                  "env_same": before == dict(os.environ)}))
"""


def test_import_is_lazy_and_never_imports_vllm() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts == {"lazy": [], "vllm": False, "env_same": True}


def test_unknown_name_is_an_attribute_error() -> None:
    assert "make_backend" in dir(ascend_graph)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ascend_graph.nope  # noqa: B018
