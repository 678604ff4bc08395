"""``NPUWorker``: vLLM's GPU ``Worker`` on an Ascend NPU, with the per-rank duties it shares with
the host-CPU worker (``worker_duties``).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar, cast

import torch
from vllm import envs
from vllm.config import CUDAGraphMode, VllmConfig
from vllm.platforms import current_platform
from vllm.utils.mem_utils import MemorySnapshot
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.outputs import AsyncModelRunnerOutput, DraftTokenIds, ModelRunnerOutput
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.utils import request_memory
from vllm.v1.worker.worker_base import CompilationTimes

from vllm_ascend.compilation.sampler_warmup import warm_up_sampler
from vllm_ascend.npu_runtime import device_assignment, device_check, graph_memory, kv_fit
from vllm_ascend.npu_runtime.bindings import NpuBindings
from vllm_ascend.npu_runtime.model_runner import NPUModelRunner
from vllm_ascend.npu_runtime.model_support import (
    refuse_unexecuted_moe_method,
    refuse_unsupported_model,
)
from vllm_ascend.worker_duties.duties import RankDuties
from vllm_ascend.worker_duties.kv_cache_advice import format_size, need_of

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger(__name__)


def _on_npu(method: F) -> F:
    """Run the method as this engine's work, CUDA/accelerator calls rebound to ``torch.npu``."""

    @functools.wraps(method)
    def wrapper(self: NPUWorker, *args: Any, **kwargs: Any) -> Any:
        with self.ascend_engine.running(), self.npu_bindings.scope():
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class NPUWorker(RankDuties, Worker):
    """One rank of an engine on one NPU."""

    def __init__(self, vllm_config: VllmConfig, local_rank: int, rank: int,
                 distributed_init_method: str, is_driver_worker: bool = False) -> None:
        refuse_unsupported_model(vllm_config.model_config)  # before any weight is read
        self.npu_bindings = NpuBindings()
        super().__init__(vllm_config, local_rank, rank, distributed_init_method,
                         is_driver_worker)
        self.use_v2_model_runner = False  # the V1 runner: model runner v2 needs Triton kernels

    def init_device(self) -> None:
        device_check.import_torch_npu()
        npu: Any = torch.npu  # type: ignore[attr-defined]
        assignment = device_assignment.assign_npu(
            self.parallel_config, self.local_rank,
            os.environ.get(current_platform.device_control_env_var), int(npu.device_count()))
        # vLLM's process groups place this rank's tensors on npu:<local rank> (out-of-tree
        # platforms), so the local rank becomes torch's index of the assigned NPU.
        self.engine_local_rank = self.local_rank
        self.local_rank = assignment.index
        self.ascend_npu = assignment.physical
        self.device = torch.device(f"npu:{assignment.index}")
        npu.set_device(self.device)
        self.bind_rank()  # the device's SoC is known now, and its runtime is up
        refuse_unexecuted_moe_method(self.ascend_engine.forward,
                                     self.scheduler_config.max_num_batched_tokens)
        dtype = self.model_config.dtype
        if isinstance(dtype, torch.dtype):  # ModelConfig resolves the dtype name to a torch.dtype
            current_platform.check_if_supports_dtype(dtype)
        with self.npu_bindings.scope():
            init_worker_distributed_environment(
                self.vllm_config, self.rank, self.distributed_init_method, self.local_rank,
                current_platform.dist_backend,
            )
            set_random_seed(self.model_config.seed)
            gc.collect()
            npu.empty_cache()
            self.init_snapshot = MemorySnapshot(device=self.device)
            self.requested_memory = request_memory(self.init_snapshot, self.cache_config)
            self._init_workspace_and_model_runner()
        self.report_rank("device")

    @property
    def _npu_runner(self) -> NPUModelRunner:
        return cast(NPUModelRunner, self.model_runner)

    def _make_model_runner(self) -> NPUModelRunner:
        return NPUModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager[Any]:
        return nullcontext()  # no sleep mode on this runtime: the default allocator serves all

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        with self.ascend_engine.running(), self.npu_bindings.scope():
            super().load_model(load_dummy_weights=load_dummy_weights)
        self.bind_late_threads()  # acl/release (and A5's UVB poll) threads exist by now

    @_on_npu
    def determine_available_memory(self) -> int:
        """vLLM's sizing less the graphs' memory; an error when the cache cannot hold a sequence."""
        # vLLM profiles graph memory only on CUDA and XPU.
        available = super().determine_available_memory()
        need = need_of(self.vllm_config)
        device = str(self.device)
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit:
            free_now = int(torch.npu.mem_get_info(self.device)[0])  # type: ignore[attr-defined]
            kv_fit.check_explicit_kv_cache(device, int(explicit), free_now, need)
            return available
        non_kv = int(self.requested_memory) - int(available)
        graphs = self._graph_memory(available)
        available -= graphs
        self.available_kv_cache_memory_bytes = available
        snapshot = self.init_snapshot
        budget = kv_fit.MemoryBudget(
            device=device, total=int(snapshot.total_memory),
            free_at_start=int(snapshot.free_memory),
            utilization=float(self.cache_config.gpu_memory_utilization),
            requested=int(self.requested_memory), non_kv=non_kv,
            available_for_kv=int(available), graphs=graphs,
        )
        kv_fit.check_kv_cache_fits(budget, need)
        return available

    def _graph_memory(self, kv_share: int) -> int:
        """The captured graphs' memory the KV cache must leave free of ``kv_share`` (0 without
        graphs, or with ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` off); an error when the
        profile cannot fit."""
        if self.compilation_config.cudagraph_mode == CUDAGraphMode.NONE:
            return 0
        try:
            estimate = int(self.model_runner.profile_cudagraph_memory())
        except torch.OutOfMemoryError as exc:
            raise torch.OutOfMemoryError(
                f"{exc}\nThe NPU ran out of memory while profiling what its graphs need (before "
                "the KV cache is sized): capture fewer graphs (fewer compilation_config "
                "cudagraph_capture_sizes, a lower --max-num-seqs) or run eagerly with "
                "--enforce-eager") from exc
        self.cudagraph_memory_estimate = estimate
        if not envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS:
            logger.warning(
                "NPU graphs: their memory (%s, profiled) is not taken from the KV cache's "
                "share because VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0; the capture after "
                "the KV cache is allocated may run out of device memory", format_size(estimate))
            return 0
        self.peak_activation_memory += estimate
        self.graph_memory_applied = estimate
        logger.info("NPU graphs: %s of device memory for the captured graphs (profiled; "
                    "vLLM's extrapolation %s), taken from the KV cache's share of %d bytes",
                    format_size(estimate),
                    format_size(cast(NPUModelRunner, self.model_runner).vllm_graph_estimate),
                    kv_share)
        return estimate

    def _report_graph_memory(self) -> None:
        """Log the graphs' estimated and captured memory and the KV blocks the estimate gave."""
        applied = int(getattr(self, "graph_memory_applied", 0))
        kv_config = getattr(self.model_runner, "kv_cache_config", None)
        if not applied or kv_config is None or not kv_config.num_blocks:
            return
        block_bytes = sum(t.size for t in kv_config.kv_cache_tensors
                          if not t.host_resident) // kv_config.num_blocks
        runner = self._npu_runner
        report = graph_memory.GraphMemoryReport(
            estimate=applied, vllm_estimate=int(runner.vllm_graph_estimate),
            measured=int(runner.captured_graph_bytes),
            kv_blocks=int(kv_config.num_blocks), block_bytes=int(block_bytes))
        logger.info(report.message())
        shortfall = report.shortfall()
        if shortfall is not None:
            logger.warning(shortfall)

    @_on_npu
    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        super().initialize_from_config(kv_cache_config)

    def compile_or_warm_up_model(self) -> CompilationTimes:
        with self.ascend_engine.running(), self.npu_bindings.scope():
            result: CompilationTimes = super().compile_or_warm_up_model()
            # What vLLM's sampler compiles on a first logprobs request is compiled now.
            warm_up_sampler(self.model_runner)
        self._report_graph_memory()
        self.mark_engine_ready()
        return result

    @_on_npu
    def execute_model(self, scheduler_output: SchedulerOutput
                      ) -> ModelRunnerOutput | AsyncModelRunnerOutput | None:
        output: ModelRunnerOutput | AsyncModelRunnerOutput | None = super().execute_model(
            scheduler_output)
        return output

    @_on_npu
    def sample_tokens(self, grammar_output: GrammarOutput | None
                      ) -> ModelRunnerOutput | AsyncModelRunnerOutput:
        output: ModelRunnerOutput | AsyncModelRunnerOutput = super().sample_tokens(grammar_output)
        return output

    @_on_npu
    def execute_dummy_batch(self) -> None:
        super().execute_dummy_batch()

    @_on_npu
    def take_draft_token_ids(self) -> DraftTokenIds | None:
        return super().take_draft_token_ids()

    @_on_npu
    def shutdown(self) -> None:
        super().shutdown()
