"""A child process that holds `vllm.LLM` engines and answers JSON requests.

Run as `python -m vllm_ascend_testing.llm_worker RESULT_FD`: requests come one JSON object per
line on stdin, answers go one JSON object per line to file descriptor RESULT_FD (stdout and
stderr stay free for vLLM's logs). The parent (`worker_client.LLMWorker`) sets the environment.
Keeping engines in their own process gives each platform setting a clean vLLM (the platform is
chosen once per process) and lets several tests share one engine.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from vllm_ascend_testing.generation import generate


class EngineHost:
    """Named `vllm.LLM` instances of this process and the operations on them."""

    def __init__(self) -> None:
        self.engines: dict[str, Any] = {}

    def op_load(
        self, name: str, kwargs: dict[str, Any], native_custom_ops: bool = False
    ) -> dict[str, Any]:
        """Build engine `name`; `native_custom_ops` switches every Ascend CustomOp off (vLLM's
        native implementations run instead). Answers the engine-ready seconds (`startup_s`),
        the seconds `from vllm import LLM` took (`import_s`; 0.0 after the process's first
        engine) and the start-up's phases (`startup_phases.PhaseClock`)."""
        import time

        from vllm_ascend_testing.startup_phases import PhaseClock

        start = time.perf_counter()
        from vllm import LLM

        import_s = time.perf_counter() - start

        if native_custom_ops:
            from vllm_ascend.ops.custom_ops import native_directives

            compilation = dict(kwargs.get("compilation_config") or {})
            compilation["custom_ops"] = ["all", *native_directives()]
            kwargs = {**kwargs, "compilation_config": compilation}
        clock = PhaseClock()
        start = time.perf_counter()
        with clock.running():
            self.engines[name] = LLM(**kwargs)
        return {"startup_s": time.perf_counter() - start, "import_s": import_s,
                "phases": clock.phases(self.engines[name])}

    def op_generate(
        self, name: str, prompts: list[str | list[int]], max_tokens: int = 16,
        logprobs: int | None = None, extra_args: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        outputs, elapsed = generate(
            self.engines[name], prompts, max_tokens=max_tokens, logprobs=logprobs,
            extra_args=extra_args,
        )
        return {"outputs": outputs, "elapsed_s": elapsed}

    def op_prompt_logprobs(self, name: str, token_ids: list[int]) -> dict[str, Any]:
        """Teacher-forced scores of ``token_ids`` (see `teacher_forced.engine_scores`)."""
        from vllm_ascend_testing.teacher_forced import engine_scores

        scores = engine_scores(self.engines[name], token_ids)
        return {"chosen": scores.chosen, "top1": scores.top1}

    def op_profile(self, name: str, prompts: list[str], max_tokens: int = 16) -> dict[str, Any]:
        """`op_generate` under the torch profiler (CPU). Per chain of op names (the op, then
        its ancestors outward) the summed self CPU time in microseconds and the call count,
        plus the generation's wall time."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _, elapsed = generate(self.engines[name], prompts, max_tokens=max_tokens)
        totals: dict[tuple[str, ...], list[float]] = {}
        for event in prof.events():
            chain = []
            node = event
            while node is not None:
                chain.append(node.name)
                node = node.cpu_parent
            entry = totals.setdefault(tuple(chain), [0.0, 0])
            entry[0] += event.self_cpu_time_total
            entry[1] += 1
        ops = [[list(chain), us, count] for chain, (us, count) in totals.items()]
        return {"elapsed_s": elapsed, "ops": ops}

    def op_unload(self, name: str) -> dict[str, Any]:
        import gc

        self.engines.pop(name, None)
        gc.collect()
        return {}

    def op_start_ray(self, temp_dir: str, npus: int, num_cpus: int = 1) -> dict[str, Any]:
        """Start a local Ray cluster owned by this process, offering ``npus`` NPU slots (the
        host-CPU platform's ranks); its files stay under ``temp_dir``."""
        import ray

        context = ray.init(
            num_cpus=num_cpus, resources={"NPU": npus}, _temp_dir=temp_dir,
            include_dashboard=False, configure_logging=False, log_to_driver=True,
        )
        address = context.address_info.get("address", "")  # type: ignore[attr-defined]
        return {"address": str(address),
                "resources": ray.cluster_resources()}

    def op_stop_ray(self) -> dict[str, Any]:
        """Shut the cluster of :meth:`op_start_ray` down (its processes end with it)."""
        import ray

        ray.shutdown()
        return {}

    def op_platform(self) -> dict[str, Any]:
        from vllm.platforms import current_platform

        cls = type(current_platform)
        return {"class": f"{cls.__module__}.{cls.__qualname__}", "device_name": cls.device_name}

    def op_fusion_report(self, name: str | None = None) -> dict[str, Any]:
        """Sites rewritten per Ascend pass ("report") and candidate against rewritten sites per
        pass, with the ``ascend.*`` op calls the passes were given ("sites"), of engine
        ``name``; without a name, summed over this process's engines."""
        from vllm_ascend.compilation.pass_manager import fusion_report, fusion_sites

        names = [name] if name is not None else list(self.engines)
        report: dict[str, int] = {}
        sites: dict[str, Any] = {"passes": {}, "graphs": 0, "ascend_ops": {},
                                 "loaded_artifacts": 0, "from_cache": False}
        for each in names:
            config = self.engines[each].llm_engine.vllm_config
            for key, count in fusion_report(config).items():
                report[key] = report.get(key, 0) + count
            found = fusion_sites(config)
            sites["graphs"] += found["graphs"]
            for op, count in found["ascend_ops"].items():
                sites["ascend_ops"][op] = sites["ascend_ops"].get(op, 0) + count
            sites["loaded_artifacts"] = found["loaded_artifacts"]  # per process
            sites["from_cache"] = sites["from_cache"] or found["from_cache"]
            for key, site in found["passes"].items():
                total = sites["passes"].setdefault(key, {"expected": None, "matched": 0})
                total["matched"] += site["matched"]
                if site["expected"] is not None:
                    total["expected"] = (total["expected"] or 0) + site["expected"]
        return {"report": report, "sites": sites}

    def op_graph_fault(self, name: str, fault: str | None) -> dict[str, Any]:
        """Inject a graph-runtime bug into engine ``name``'s workers (``graph_faults``), or
        clear it (``fault`` None)."""
        from vllm_ascend_testing.graph_faults import set_fault

        return {"results": self.engines[name].collective_rpc(set_fault, args=(fault,))}

    def op_graph_report(self, name: str) -> dict[str, Any]:
        """Per worker: the graphs its NPU graph wrapper captured (token counts) and how often
        each replayed, and on the emulated device what its npugraph_ex/torchair compiled and
        ran in the process so far (``graph_faults.graph_report``)."""
        from vllm_ascend_testing.graph_faults import graph_report

        return {"workers": self.engines[name].collective_rpc(graph_report)}

    def op_host_ops(self, name: str, prompts: list[str | list[int]],
                    max_tokens: int) -> dict[str, Any]:
        """`op_generate` counting the device ops dispatched from the host outside graph
        replays (emulated NPU only), the replays and the device-to-host syncs."""
        from torch_npu_double.emulation.host_ops import HostOpCounter

        counter = HostOpCounter()
        with counter:
            outputs, elapsed = generate(self.engines[name], prompts, max_tokens=max_tokens)
        return {"ops": counter.ops, "replays": counter.replays, "syncs": counter.syncs,
                "event_waits": counter.event_waits,
                "sync_reasons": dict(counter.sync_reasons), "elapsed_s": elapsed,
                "outputs": outputs}

    def op_call_counts(self, reset: bool = False) -> dict[str, Any]:
        from ascend_kernels import batch_invariant

        counts = dict(batch_invariant.call_counts())
        if reset:
            batch_invariant.reset_call_counts()
        return {"counts": counts, "enabled": batch_invariant.is_batch_invariant_mode_enabled()}

    def op_process_state(self, env_names: list[str]) -> dict[str, Any]:
        """What this process's setup left behind: the named env variables, torch's
        deterministic-algorithms switch, and the custom-kernel decision."""
        import os

        import torch
        from vllm_ascend.process.process_setup import current_process_setup

        report = current_process_setup().batch_invariance
        return {
            "env": {name: os.environ.get(name) for name in env_names},
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "custom_kernels": None if report is None else report.custom_kernels,
        }

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.pop("op", None)
        handler: Callable[..., dict[str, Any]] | None = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"ok": False, "error": f"unknown op {op!r}"}
        try:
            return {"ok": True, **handler(**request)}
        except Exception:
            return {"ok": False, "error": traceback.format_exc()}


def main(argv: list[str] | None = None) -> int:
    """Serve requests from stdin until it closes or an `{"op": "exit"}` arrives."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m vllm_ascend_testing.llm_worker RESULT_FD", file=sys.stderr)
        return 2
    host = EngineHost()
    with open(int(args[0]), "w", encoding="utf-8") as results:
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("op") == "exit":
                break
            results.write(json.dumps(host.handle(request)) + "\n")
            results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
