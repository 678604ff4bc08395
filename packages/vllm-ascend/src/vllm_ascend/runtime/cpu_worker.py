"""vLLM's CPU worker with the Ascend per-rank hooks (the host-CPU platform's worker class).

Imported only in worker processes (vLLM resolves ``parallel_config.worker_cls`` there).
"""

from __future__ import annotations

from typing import Any

from vllm.config import CompilationMode
from vllm.v1.worker.cpu_worker import CPUWorker

from vllm_ascend.base.cpu_binding import WorkerBinding
from vllm_ascend.compilation.sampler_warmup import warm_up_sampler
from vllm_ascend.engine import AscendEngine, engine_of
from vllm_ascend.engine.warm_start import LoadBaseline, log_warm_start
from vllm_ascend.process.worker_setup import prepare_worker
from vllm_ascend.runtime.cpu_kv_memory import checked_kv_cache_size
from vllm_ascend.runtime.rank_report import build_rank_report, write_rank_report


class AscendCPUWorker(CPUWorker):
    """Runs the per-rank setup (endpoints, CPU pool: ``process.worker_setup``) before the
    device and the model are set up, watches its compiles (``engine.ready_watch``: ready
    once warm-up is over), logs what a warm start loaded from the compile cache
    (``engine.warm_start``), writes its rank report (``VLLM_ASCEND_RANK_REPORT_DIR``) and
    refuses a KV cache that does not fit with advice (``runtime.cpu_kv_memory``)."""

    ascend_binding: WorkerBinding | None = None
    ascend_load_baseline: LoadBaseline | None = None

    @property
    def ascend_engine(self) -> AscendEngine:
        return engine_of(self.vllm_config)

    def init_device(self) -> None:
        self.ascend_load_baseline = LoadBaseline.now()
        self.ascend_binding = prepare_worker(self.vllm_config, self.local_rank)
        super().init_device()
        self._report("device")

    # The engine's work: Dynamo compiles inside these steps are this engine's (ready watch).
    def load_model(self, *args: Any, **kwargs: Any) -> Any:
        with self.ascend_engine.running():
            return super().load_model(*args, **kwargs)

    def determine_available_memory(self) -> int:
        with self.ascend_engine.running():
            return checked_kv_cache_size(self, super().determine_available_memory)

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        with self.ascend_engine.running():
            return super().execute_model(*args, **kwargs)

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        with self.ascend_engine.running():
            return super().sample_tokens(*args, **kwargs)

    def execute_dummy_batch(self) -> None:
        with self.ascend_engine.running():
            super().execute_dummy_batch()

    def compile_or_warm_up_model(self) -> Any:
        engine = self.ascend_engine
        with engine.running():
            result = super().compile_or_warm_up_model()
            self._warm_up_eager()
            # What vLLM's sampler compiles on a first logprobs request is compiled now.
            warm_up_sampler(self.model_runner)
        log_warm_start(self.vllm_config, engine.cache_loads,
                       self.ascend_load_baseline or LoadBaseline())
        engine.mark_ready(lambda: self._report("serving"))
        self._report("warmed_up")
        return result

    def _warm_up_eager(self) -> None:
        """One dummy step of 1 token and one of 2 before ready when the model is not
        compiled. vLLM's CPU worker runs no forward pass then (its warm-up returns at
        compilation mode NONE), so a pipeline stage after the first had no buffer for the
        activations it receives (its first step failed), and vLLM's own small compiled helpers
        (the vocabulary-parallel embedding's mask with TP > 1) compiled on the first request,
        in every rank. Two sizes: Dynamo compiles a size of 1 apart from the others."""
        if (self.compilation_config.mode != CompilationMode.NONE
                or not self.model_runner.kv_caches):
            return
        for num_tokens in (1, 2):
            self.model_runner._dummy_run(num_tokens)

    def _report(self, stage: str) -> None:
        write_rank_report(build_rank_report(
            self.vllm_config, rank=self.rank, local_rank=self.local_rank,
            binding=self.ascend_binding, stage=stage,
        ))
