"""The emulated ``hccl`` backend's device collectives (``emulation.hccl_device``) inside NPU
graphs, between two rank processes with one emulated NPU each.

Each rank captures one graph holding a sum all-reduce, an all-gather, a reduce-scatter and a
broadcast of npu buffers, then overwrites the buffers the graph reads and replays it. The
expected values are the sums written out by hand for the new contents; a collective that
replayed a copy taken at capture (or the capture's result) gives the capture-time numbers,
which differ from them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "2", "VLLM_ASCEND_EMULATED_HBM_GIB": "0.25"}

RANK = """
import json, sys, torch, torch.distributed as dist
rank, rdv = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("hccl", init_method=f"file://{rdv}", rank=rank, world_size=2)
torch.npu.set_device(rank)
dev = f"npu:{rank}"
scale = float(rank + 1)
buf = torch.full((4,), scale, device=dev)               # the graph's input buffer
source = torch.arange(4.0, device=dev) * scale          # the reduce-scatter's input
graph = torch.npu.NPUGraph()
with torch.npu.graph(graph):
    summed = buf * 1
    dist.all_reduce(summed)
    gathered = torch.empty(8, device=dev)
    dist.all_gather_into_tensor(gathered, buf)
    part = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(part, source)
    cast = buf.clone()
    dist.broadcast(cast, src=1)
def read():
    return {"sum": summed.cpu().tolist(), "gather": gathered.cpu().tolist(),
            "scatter": part.cpu().tolist(), "broadcast": cast.cpu().tolist()}
captured = read()
buf.fill_(100.0 * scale)
source.copy_(torch.arange(4.0, device=dev) * 10 * scale)
graph.replay()
replayed = read()
kernels = sorted({str(op.func) for op in graph.recorded_ops if "hccl" in str(op.func)})
refused = {}
for name, call in (("max", lambda: dist.all_reduce(buf, op=dist.ReduceOp.MAX)),
                   ("barrier", lambda: dist.barrier())):
    try:
        with torch.npu.graph(torch.npu.NPUGraph()):
            call()
        refused[name] = None
    except Exception as error:
        refused[name] = str(error)
print(json.dumps({"captured": captured, "replayed": replayed, "kernels": kernels,
                  "refused": refused, "backend": dist.get_backend(), "device": str(buf.device)}))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    rdv = tmp_path_factory.mktemp("hccl") / "rdv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_EMULATED")}
    env.update(EMU)
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), str(rdv)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    found = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def test_a_capture_records_the_collectives_as_device_kernels(ranks: list[dict[str, Any]]) -> None:
    assert [(r["backend"], r["device"]) for r in ranks] == [("hccl", "npu:0"), ("hccl", "npu:1")]
    expected = [f"hccl_emulated.{name}.default" for name in
                ("all_gather_", "all_reduce_", "broadcast_", "reduce_scatter_")]
    assert [r["kernels"] for r in ranks] == [expected, expected]


def test_the_capture_run_computes_the_collectives(ranks: list[dict[str, Any]]) -> None:
    # rank 0's buffer holds 1s, rank 1's 2s; the reduce-scatter adds arange(4) * 1 and * 2.
    for rank, found in enumerate(ranks):
        assert found["captured"] == {"sum": [3.0] * 4, "gather": [1.0] * 4 + [2.0] * 4,
                                     "scatter": [[0.0, 3.0], [6.0, 9.0]][rank],
                                     "broadcast": [2.0] * 4}


def test_a_replay_reads_the_current_contents_of_the_captured_buffers(
    ranks: list[dict[str, Any]]
) -> None:
    # After the capture rank r's buffer holds 100 * (r + 1) and its reduce-scatter input
    # arange(4) * 10 * (r + 1): a replay of capture-time copies would give the numbers above.
    for rank, found in enumerate(ranks):
        assert found["replayed"] == {"sum": [300.0] * 4, "gather": [100.0] * 4 + [200.0] * 4,
                                     "scatter": [[0.0, 30.0], [60.0, 90.0]][rank],
                                     "broadcast": [200.0] * 4}


def test_a_collective_that_needs_the_host_is_refused_inside_a_capture(
    ranks: list[dict[str, Any]]
) -> None:
    for found in ranks:
        assert "hccl allreduce through the host" in found["refused"]["max"]
        assert "hccl barrier" in found["refused"]["barrier"]
        for message in found["refused"].values():
            assert "operation not allowed in capture" in message

