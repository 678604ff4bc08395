"""``AscendCPUWorker``: vLLM's CPU worker with the Ascend per-rank duties."""

from __future__ import annotations

from typing import Any

from vllm.config import CompilationMode
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.worker_base import CompilationTimes

from vllm_ascend.compilation.sampler_warmup import warm_up_sampler
from vllm_ascend.cpu_runtime.kv_memory import checked_kv_cache_size
from vllm_ascend.engine.warm_start import LoadBaseline, log_warm_start
from vllm_ascend.worker_duties.duties import RankDuties


class AscendCPUWorker(RankDuties, CPUWorker):
    """One rank on the host CPU with the per-rank duties and KV-cache advice."""

    ascend_load_baseline: LoadBaseline | None = None

    def init_device(self) -> None:
        self.ascend_load_baseline = LoadBaseline.now()
        # Before vLLM's own setup: it pins the OpenMP threads and then forbids changing
        # their count, which the binding sets to the pool's size.
        self.bind_rank()
        super().init_device()
        self.report_rank("device")

    # The engine's work: Dynamo compiles inside these steps are this engine's (ready watch).
    def load_model(self, *args: Any, **kwargs: Any) -> Any:
        with self.ascend_engine.running():
            result = super().load_model(*args, **kwargs)
        self.bind_late_threads()
        return result

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

    def compile_or_warm_up_model(self) -> CompilationTimes:
        with self.ascend_engine.running():
            result = super().compile_or_warm_up_model()
            self._warm_up_eager()
            # What vLLM's sampler compiles on a first logprobs request is compiled now.
            warm_up_sampler(self.model_runner)
        log_warm_start(self.vllm_config, self.ascend_engine.cache_loads,
                       self.ascend_load_baseline or LoadBaseline())
        self.mark_engine_ready()
        return result

    def _warm_up_eager(self) -> None:
        """One dummy step of 1 and one of 2 tokens before ready when the model is not compiled."""
        # vLLM's CPU worker runs no forward then; Dynamo compiles size 1 apart from the others.
        if (self.compilation_config.mode != CompilationMode.NONE
                or not self.model_runner.kv_caches):
            return
        for num_tokens in (1, 2):
            self.model_runner._dummy_run(num_tokens)
