"""vLLM's CPU worker with the Ascend per-rank hooks (the host-CPU platform's worker class).

Imported only in worker processes (vLLM resolves ``parallel_config.worker_cls`` there).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.cpu_worker import CPUWorker

from vllm_ascend.compilation.ready_watch import mark_engine_ready, ready_watch_for
from vllm_ascend.compilation.sampler_warmup import warm_up_sampler
from vllm_ascend.compilation.warm_start import LoadBaseline, log_warm_start
from vllm_ascend.runtime.cpu_binding import WorkerBinding
from vllm_ascend.runtime.cpu_kv_memory import checked_kv_cache_size
from vllm_ascend.runtime.rank_report import build_rank_report, write_rank_report
from vllm_ascend.runtime.worker_setup import prepare_worker


class AscendCPUWorker(CPUWorker):
    """Runs the per-rank setup (endpoints, CPU pool: ``runtime.worker_setup``) before the
    device and the model are set up, watches its compiles (``compilation.ready_watch``: ready
    once warm-up is over), logs what a warm start loaded from the compile cache
    (``compilation.warm_start``), writes its rank report (``VLLM_ASCEND_RANK_REPORT_DIR``) and
    refuses a KV cache that does not fit with advice (``runtime.cpu_kv_memory``)."""

    ascend_binding: WorkerBinding | None = None
    ascend_load_baseline: LoadBaseline | None = None

    def init_device(self) -> None:
        self.ascend_load_baseline = LoadBaseline.now()
        self.ascend_binding = prepare_worker(self.vllm_config, self.local_rank)
        ready_watch_for(self.vllm_config).install()
        super().init_device()
        self._report("device")

    def determine_available_memory(self) -> int:
        return checked_kv_cache_size(self, super().determine_available_memory)

    def compile_or_warm_up_model(self) -> Any:
        result = super().compile_or_warm_up_model()
        # What vLLM's sampler compiles on a first logprobs request is compiled now, before ready.
        warm_up_sampler(self.model_runner)
        log_warm_start(self.vllm_config, self.ascend_load_baseline or LoadBaseline())
        mark_engine_ready(self.vllm_config, lambda: self._report("serving"))
        self._report("warmed_up")
        return result

    def _report(self, stage: str) -> None:
        write_rank_report(build_rank_report(
            self.vllm_config, rank=self.rank, local_rank=self.local_rank,
            binding=self.ascend_binding, stage=stage,
        ))
