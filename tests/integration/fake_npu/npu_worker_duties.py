"""One NPU engine with its worker in this process, on the emulated NPU (run by
test_npu_binding.py).

Records, in order, the calls that make up the NPU worker's per-rank duties (the device set, the
SoC read from it, the CPU binding, the model load, the late-thread binding, each rank report
written) and every resolution of the Ascend config, builds the engine, generates two tokens,
and prints one JSON line: the calls, the resolutions, and the rank reports read back. Arguments:
the model directory and the rank-report directory.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any


def recorded(events: list[str], owner: Any, name: str,
             label: Callable[..., str] | None = None) -> None:
    """Replace ``owner.name`` by a wrapper that appends its label to ``events`` first."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        events.append(name if label is None else label(*args, **kwargs))
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def main(model: str, report_dir: str) -> dict[str, Any]:
    import ascend_config
    import torch
    from vllm.v1.worker import gpu_worker
    from vllm_ascend.entrypoints.local_engine import llm_kwargs
    from vllm_ascend.process.process_setup import ProcessSetup
    from vllm_ascend.worker_duties import cpu_binding, duties
    from vllm_ascend.worker_duties.rank_report import read_rank_reports

    events: list[str] = []
    resolutions: list[dict[str, Any]] = []
    recorded(events, torch.npu, "set_device")  # type: ignore[attr-defined]
    recorded(events, ProcessSetup, "device_soc")
    recorded(events, duties, "bind_this_worker",
             lambda par, rank, soc, *rest, **kw: f"bind_this_worker {soc}")
    recorded(events, gpu_worker.Worker, "load_model")
    recorded(events, cpu_binding.WorkerBinding, "bind_late_threads")
    recorded(events, duties, "write_rank_report",
             lambda report, *rest: f"rank_report {report['stage']}")
    recorded(resolutions, ascend_config, "resolve",  # type: ignore[arg-type]
             lambda additional, **kw: dict(additional))

    from vllm import LLM, SamplingParams

    llm = LLM(**llm_kwargs(model, compile=False, max_model_len=128, kv_cache_mib=8))
    out = llm.generate(["Hello, my name is"], SamplingParams(max_tokens=2, temperature=0),
                       use_tqdm=False)
    reports = read_rank_reports(report_dir)
    return {
        "events": events,
        "resolutions": resolutions,
        "tokens": list(out[0].outputs[0].token_ids),
        "platform": type(__import__("vllm.platforms").platforms.current_platform).__name__,
        "reports": {f"{dp}-{rank}": report for (dp, rank), report in reports.items()},
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
