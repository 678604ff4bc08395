"""``NPUModelRunner``: vLLM's V1 ``GPUModelRunner`` on an NPU (Ascend KV views, block zeroing
without Triton, FULL graphs through the platform's ``AscendGraphWrapper``).
"""

from __future__ import annotations

import gc
import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from ascend_graph import GraphParamsStore
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from vllm_ascend.compilation.graph_params import graph_params_for
from vllm_ascend.compilation.graph_wrapper import AscendGraphWrapper
from vllm_ascend.engine import engine_of
from vllm_ascend.npu_runtime import graph_memory
from vllm_ascend.npu_runtime.attention.backend import AscendAttentionBackend
from vllm_ascend.npu_runtime.attention.impl import AscendAttentionImpl
from vllm_ascend.npu_runtime.attention.kv_layout import split_kv_view
from vllm_ascend.npu_runtime.graph_capture import npu_capture_context

if TYPE_CHECKING:
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor
    from vllm.sequence import IntermediateTensors
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput

logger = logging.getLogger(__name__)


class NPUModelRunner(GPUModelRunner):
    """vLLM's V1 model runner with the Ascend KV cache layout."""

    #: During the graph-memory profile: the memory each capture took (else None).
    _capture_samples: list[graph_memory.CaptureSample] | None = None
    _profiled_sizes: dict[str, list[int]]
    #: vLLM's own estimate of the graphs' memory (0 before the profile).
    vllm_graph_estimate = 0
    #: What the engine's captures took (0 before capture).
    captured_graph_bytes = 0

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's loading, its FULL-graph wrapper replaced by the platform's static-graph one."""
        from vllm.compilation.cuda_graph import CUDAGraphWrapper
        from vllm.config import CUDAGraphMode


        super().load_model(*args, **kwargs)
        if isinstance(self.model, CUDAGraphWrapper):
            self.model = AscendGraphWrapper(self.model.unwrap(), self.vllm_config,
                                            CUDAGraphMode.FULL)

    def capture_model(self) -> int:
        """vLLM's capture in the NPU capture context, with the graph parameters bound first."""
        from vllm.config import CUDAGraphMode


        cc = self.compilation_config
        if cc.cudagraph_mode != CUDAGraphMode.NONE:
            self._prepare_graph_params()
            logger.info("NPU graphs: cudagraph_mode %s, capture sizes %s; larger batches run "
                        "eagerly", cc.cudagraph_mode.name, cc.cudagraph_capture_sizes or [])
        with npu_capture_context():
            self.captured_graph_bytes = int(super().capture_model())
        return self.captured_graph_bytes

    def profile_cudagraph_memory(self) -> int:
        """The graphs' memory from vLLM's profile, further graphs counted per token
        (``graph_memory.scaled_estimate``); the engine's tally and graph parameters are restored."""
        # vLLM points only its own CUDA wrappers at the profiling pool, so the profile runs with
        # ours.
        samples: list[graph_memory.CaptureSample] = []
        self._capture_samples, self._profiled_sizes = samples, {}
        try:
            self.vllm_graph_estimate = self._profile_with_platform_wrappers()
            sizes = self._profiled_sizes
        finally:
            self._capture_samples = None
        return min(graph_memory.scaled_estimate(samples, sizes), self.vllm_graph_estimate)

    def _warmup_and_capture(self, desc: BatchDescriptor, cudagraph_runtime_mode: CUDAGraphMode,
                            *args: Any, **kwargs: Any) -> None:
        """vLLM's warm-up and capture of one graph, its device memory sampled during the profile."""
        samples = getattr(self, "_capture_samples", None)
        if samples is None:
            super()._warmup_and_capture(desc, cudagraph_runtime_mode, *args, **kwargs)
            return
        if not self._profiled_sizes:  # the profile's own KV cache has set the graph keys up
            self._profiled_sizes = {
                mode.name: [d.num_tokens for d in descs]
                for mode, descs in self.cudagraph_dispatcher.get_capture_descs()}
        npu: Any = torch.npu  # type: ignore[attr-defined]
        free_before = int(npu.mem_get_info(self.device)[0])
        super()._warmup_and_capture(desc, cudagraph_runtime_mode, *args, **kwargs)
        npu.synchronize()
        samples.append(graph_memory.CaptureSample(
            cudagraph_runtime_mode.name, int(desc.num_tokens),
            free_before - int(npu.mem_get_info(self.device)[0])))

    def _profile_with_platform_wrappers(self) -> int:
        engine = engine_of(self.vllm_config)
        wrappers = list(engine.graph_wrappers)
        pools = [wrapper.graph_pool for wrapper in wrappers]
        tally = (engine.captures.count, engine.captures.seconds)
        store = self._prepare_graph_params()
        # A pool of its own, as vLLM's: the profile's blocks do not fragment the runtime pool.
        profiling_pool = torch.npu.graph_pool_handle()  # type: ignore[attr-defined]
        for wrapper in wrappers:
            wrapper.graph_pool = profiling_pool
        try:
            with npu_capture_context():
                return int(super().profile_cudagraph_memory())
        finally:
            for wrapper, pool in zip(wrappers, pools, strict=True):
                wrapper.clear()
                wrapper.graph_pool = pool
            engine.captures.count, engine.captures.seconds = tally
            _forget_captures(store)
            gc.collect()
            torch.npu.empty_cache()  # type: ignore[attr-defined]

    def _prepare_graph_params(self) -> GraphParamsStore:
        """The graph parameter store the FULL wrapper replays with, bound to the attention
        layers."""
        cc = self.compilation_config
        wrapper = self.model if isinstance(self.model, AscendGraphWrapper) else None
        store = wrapper.params if wrapper is not None else graph_params_for(self.vllm_config)
        for layer in cc.static_forward_context.values():
            impl = getattr(layer, "impl", None)
            if isinstance(impl, AscendAttentionImpl):
                impl.graph_params = store
        if store.get("main") is None:
            store.set("main", cc.cudagraph_capture_sizes or [])
        store.bind_attention(AscendAttentionBackend, torch.npu.Stream())  # type: ignore[attr-defined]
        return store

    def execute_model(
        self, scheduler_output: SchedulerOutput, *args: Any, **kwargs: Any
    ) -> ModelRunnerOutput | AsyncModelRunnerOutput | IntermediateTensors | None:
        """vLLM's step; logs the first batch wider than every captured graph."""
        self._note_eager_batch(int(scheduler_output.total_num_scheduled_tokens))
        return super().execute_model(scheduler_output, *args, **kwargs)

    def _note_eager_batch(self, num_tokens: int) -> None:
        from vllm.config import CUDAGraphMode

        cc = self.compilation_config
        largest = int(cc.max_cudagraph_capture_size or 0)
        if (cc.cudagraph_mode == CUDAGraphMode.NONE or num_tokens <= largest
                or getattr(self, "_eager_batch_noted", False)):
            return
        self._eager_batch_noted = True
        logger.info("NPU graphs: a batch of %d tokens is above the largest captured size %d and "
                    "runs eagerly (so does every such batch; logged once)", num_tokens, largest)

    def initialize_kv_cache_tensors(
        self, kv_cache_config: KVCacheConfig, kernel_block_sizes: list[int],
        kv_cache_allocation_context: AbstractContextManager[Any] | None = None,
    ) -> dict[str, torch.Tensor]:
        """vLLM's allocation, then each attention layer's cache as ``kv_layout``'s view."""
        kv_caches = super().initialize_kv_cache_tensors(
            kv_cache_config, kernel_block_sizes, kv_cache_allocation_context
        )
        context = self.compilation_config.static_forward_context
        split = {name: split_kv_view(kv) for name, kv in kv_caches.items()}
        for name, kv in split.items():
            context[name].kv_cache = kv
        self.kv_caches[:] = [split_kv_view(kv) for kv in self.kv_caches]
        return split

    def _init_kv_zero_meta(self) -> None:
        """Nothing to precompute: :meth:`_zero_block_ids` zeroes per layer."""

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        """Zero newly allocated blocks of every full-attention layer."""
        # vLLM's Triton kernel writes through raw addresses; here each layer's keys and values are
        # zeroed.
        if not block_ids:
            return
        index = torch.tensor(block_ids, dtype=torch.int64, device=self.device)
        seen: set[int] = set()
        for group in self.kv_cache_config.kv_cache_groups:
            if not isinstance(group.kv_cache_spec, FullAttentionSpec):
                continue
            for name in group.layer_names:
                layer = self.compilation_config.static_forward_context.get(name)
                kv = getattr(layer, "kv_cache", None)
                if not isinstance(kv, torch.Tensor) or kv.dim() != 5 or id(kv) in seen:
                    continue
                seen.add(id(kv))
                kv.index_fill_(1, index, 0)


def _forget_captures(store: GraphParamsStore) -> None:
    """Drop what captures recorded in ``store``, keeping its capture sizes and attention binding."""
    sizes = {}
    for kind in store.kinds():
        params = store.get(kind)
        sizes[kind] = list(params.handles) if params is not None else []
    attention = store.attention
    store.reset()
    for kind, kind_sizes in sizes.items():
        store.set(kind, kind_sizes)
    store.attention = attention
