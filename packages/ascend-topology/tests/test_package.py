"""Package-level guarantees: no heavy imports, no import side effects, synthetic hosts."""

from __future__ import annotations

import json
import subprocess
import sys

import ascend_topology
from ascend_topology import make_synthetic_host, plan


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


def test_synthetic_hosts_plan_cleanly() -> None:
    facts = make_synthetic_host(npus=16, cpus=640, numa_nodes=8)
    result = plan(facts)
    assert result.ok and len(result.npus) == 16
    assert result.npus[0].cpus == tuple(range(40)) and result.npus[1].cpus == tuple(range(40, 80))
    a5 = plan(make_synthetic_host(npus=16, cpus=640, numa_nodes=8, soc="A5", threads_per_core=2))
    assert a5.ok and a5.mode == "cluster_pools" and a5.uvb_cpus == tuple(range(1, 80))
