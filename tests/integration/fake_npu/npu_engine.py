"""An "engine" process on the simulated Ascend host (run by test_npu_binding.py).

Runs the plugin's per-process setup (what every vLLM process runs, with no rank), spawns two
worker processes that call the NPU binding hook with their local rank, reads every affinity
back from /proc and prints one JSON line. Arguments: a directory for the plugin's log files,
and the SoC id the workers' fake NPU reports (the schema-bound seam, ``torch_npu_double.seam``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from typing import Any


def cpus_allowed(pid: int) -> list[int]:
    """`Cpus_allowed_list` of a live process, read from /proc."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as status:
        line = next(x for x in status if x.startswith("Cpus_allowed_list:"))
    cpus: list[int] = []
    for part in line.split(":", 1)[1].strip().split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def worker(local_rank: int, soc_id: int, conn: Any) -> None:
    """An NPU worker at the point where its rank is known: the binding hook (the SoC read from
    its device), then wait."""
    import ascend_topology as topo
    import pytest
    from torch_npu_double.seam import install
    from vllm_ascend.process.process_setup import current_process_setup
    from vllm_ascend.worker_duties.cpu_binding import bind_npu_worker

    install(pytest.MonkeyPatch(), soc_id=soc_id)  # this process's torch_npu is the seam
    options = topo.PlanOptions(min_cpus_per_npu=1, migrate_memory=False)
    process = current_process_setup()
    # The SoC read from this worker's device, as the worker's duties read it.
    binding = bind_npu_worker(local_rank, options, process.device_soc(), process.cross_check_soc)
    conn.send({"pid": os.getpid(), "lines": binding.lines, "cpus": list(binding.cpus),
               "soc": binding.soc, "plan_soc": getattr(binding.plan, "soc", None)})
    conn.recv()  # stay alive until the engine has read /proc


def main(log_dir: str, soc_id: int) -> dict[str, Any]:
    import ascend_config
    from vllm_ascend.process.process_setup import ProcessSetup

    before = cpus_allowed(os.getpid())
    config = ascend_config.resolve({"ascend_log_path": log_dir})
    setup = ProcessSetup().setup(config, "A2")
    result: dict[str, Any] = {
        "engine_before": before,
        "engine_after_setup": cpus_allowed(os.getpid()),
        "setup_binding": setup.cpu_binding,
        "workers": [],
    }
    context = multiprocessing.get_context("spawn")
    workers = []
    for rank in (0, 1):
        parent, child = context.Pipe()
        proc = context.Process(target=worker, args=(rank, soc_id, child))
        proc.start()
        workers.append((proc, parent))
    for _, conn in workers:
        answer = conn.recv()
        answer["proc_cpus"] = cpus_allowed(answer["pid"])
        result["workers"].append(answer)
    for proc, conn in workers:
        conn.send("exit")
        proc.join(60)
    result["engine_end"] = cpus_allowed(os.getpid())
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
