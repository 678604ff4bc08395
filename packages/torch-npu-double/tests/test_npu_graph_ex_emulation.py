"""The emulated npugraph_ex on the emulated device: ascend-graph's NPU backend finds it under
torch_npu's names, and the graph it compiles runs the graph's `ascend.*` ops on `npu` tensors
(through their NPU adapters and the emulated torch_npu kernels), from fresh code and from code
loaded back. One fresh process (the device install is process-wide) answers every check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    code = """
        import json, sys, torch, torch_npu
        import ascend_kernels  # the ascend ops, with their NPU adapters on this device
        from ascend_graph import GraphFusionPassManager, compile_graph
        from ascend_graph.npu_graph_ex import NpuGraphOptions, load_extension
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch_npu_double.emulation.device import installed
        from torch_npu_double.emulation.host_code import BACKEND_KEYS

        class DeviceOps(TorchDispatchMode):
            # ascend.* ops are followed into their PrivateUse1 kernel (the NPU adapter)
            def __init__(self):
                super().__init__()
                self.ops = []
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(f"{func.namespace}.{func._opname}")
                if func.namespace == "ascend":
                    with self:
                        return func.redispatch(BACKEND_KEYS, *args, **(kwargs or {}))
                return func(*args, **(kwargs or {}))

        out = {}
        ext = load_extension()
        out["extension"] = ext.__name__
        out["same_modules"] = [sys.modules["npugraph_ex"] is ext,
                               torch_npu.dynamo.npugraph_ex is ext,
                               sys.modules["torch_npu.dynamo.npugraph_ex"] is ext]
        out["torchair"] = load_extension(("torchair",)).__name__

        def model(x, r, w):
            y, res = torch.ops.ascend.add_rms_norm(x, r, w, 1e-6)
            return torch.ops.ascend.rms_norm(y * 2, w, 1e-6) + res

        torch.manual_seed(0)
        x, r, w = torch.randn(4, 16), torch.randn(4, 16), torch.rand(16) + 0.5
        expected = model(x, r, w)
        npu_inputs = [t.to("npu") for t in (x, r, w)]
        codes = []
        loads = []
        backends = []

        def compiled(options):
            def backend(gm, inputs):
                backends.append(compile_graph(gm, inputs, manager=GraphFusionPassManager(),
                                              backend="npugraph_ex", npu_options=options))
                return backends[-1]
            torch._dynamo.reset()
            return torch.compile(model, backend=backend, fullgraph=True, dynamic=False)

        fresh = compiled(NpuGraphOptions(on_code=lambda c, why: codes.append([c, why])))
        got = fresh(*npu_inputs)
        with DeviceOps() as seen:  # Dynamo refuses such a mode: the compiled graph itself
            again = backends[0](*npu_inputs)[0]
        out["same_again"] = torch.equal(again.cpu(), got.cpu())
        out["device"] = str(got.device)
        out["close"] = torch.allclose(got.cpu(), expected, atol=1e-5, rtol=1e-5)
        out["ops"] = sorted(set(seen.ops))
        out["code"] = codes[0][0] or ""
        out["why_no_code"] = codes[0][1]
        loaded = compiled(NpuGraphOptions(saved_code=codes[0][0], on_load=loads.append))
        out["loaded_close"] = torch.allclose(loaded(*npu_inputs).cpu(), expected,
                                             atol=1e-5, rtol=1e-5)
        out["on_load"] = loads
        out["tally"] = installed().graph_ex.report()
        print(json.dumps(out))
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_EMULATED")}
    env.update(VLLM_ASCEND_EMULATED_NPUS="1", VLLM_ASCEND_EMULATED_HBM_GIB="0.25")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_backend_finds_the_extension_under_torch_npus_names(report) -> None:
    assert report["extension"] == "torch_npu.dynamo.npugraph_ex"
    assert report["same_modules"] == [True, True, True]
    assert report["torchair"] == "torch_npu.dynamo.torchair"


def test_the_compiled_graph_runs_the_ascend_ops_on_the_device(report) -> None:
    assert report["device"] == "npu:0" and report["close"] and report["same_again"]
    ops = report["ops"]
    # The generated code called the ascend ops; their NPU adapters called torch_npu's kernels.
    assert {"ascend.add_rms_norm", "ascend.rms_norm"} <= set(ops), ops
    assert {"torch_npu_emulated.npu_add_rms_norm",
            "torch_npu_emulated.npu_rms_norm"} <= set(ops), ops
    assert report["why_no_code"] is None
    assert "torch.ops.ascend.add_rms_norm.default" in report["code"]
    assert "def kernel(*args)" in report["code"]


def test_saved_code_loads_back_and_the_tally_counts_what_happened(report) -> None:
    assert report["on_load"] == [None] and report["loaded_close"]
    tally = report["tally"]
    assert tally["compiled"] == {"npugraph_ex": 2}
    assert tally["loaded"] == 1 and tally["runs"] == 3
    for ops in tally["graph_ops"]:
        assert ops == {"ascend.add_rms_norm": 1, "ascend.rms_norm": 1}, tally
