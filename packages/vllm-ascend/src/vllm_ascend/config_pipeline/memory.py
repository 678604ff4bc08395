"""Memory and the KV cache's shape, the pipelines' last edits: the NPU caching allocator's
options and the VllmConfig edits derived from the deployment (block size, cache dtype, context
parallel interleave, token budget) on the NPU platform; the KV-cache reservation on the host-CPU
platform.

Host CPU: the KV-cache reservation defaults to what the run needs, bounded by what is free,
instead of vLLM CPU's share of the whole NUMA node.

vLLM's CPU worker reserves ``gpu_memory_utilization`` (default 0.92) of the node's total
memory and refuses to start when that much is not free (``vllm/v1/worker/cpu_worker.py``),
even for a model whose KV cache needs a few MiB; the API server and the engine core already
hold part of the node, so with the defaults it can fail on an idle machine. When the user gave
none of ``--gpu-memory-utilization``, ``--kv-cache-memory-bytes`` and ``VLLM_CPU_KVCACHE_SPACE``,
:func:`default_kv_cache_reservation` sets ``cache_config.kv_cache_memory_bytes``, which the
worker takes as the KV-cache size of each rank (and skips its node-share check):

- need: ``max_num_seqs`` sequences of ``max_model_len`` tokens, in whole blocks, plus vLLM's
  null block, for every attention layer of one rank;
- wanted: at least ``FLOOR_BYTES`` (room for prefix caching when the need is tiny);
- cap: ``AVAILABLE_SHARE`` of the least free memory of the visible NUMA nodes, shared by the
  ranks of this host (the rest is for weights, activations, compilation, other processes);
- never below one sequence of ``max_model_len`` (vLLM refuses less); when even that is more
  than the free memory of a rank, the configuration is refused with what to change.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from vllm_ascend.worker_duties.kv_cache_advice import KvCacheNeed, kv_cache_memory_error, need_of

logger = logging.getLogger(__name__)


# --- NPU platform: the caching allocator's options (PYTORCH_NPU_ALLOC_CONF) -----------------------

DEFAULT_ALLOC_CONF = "expandable_segments:True"
_USER_TUNED = ("expandable_segments", "max_split_size_mb", "garbage_collection_threshold")


def npu_alloc_conf(current: str | None, enable_sleep_mode: bool) -> str | None:
    """The allocator options to use: expandable segments unless the user tuned the allocator
    (or sleep mode is on, which needs the default segments); None = leave unset."""
    if enable_sleep_mode:
        return current
    value = current or DEFAULT_ALLOC_CONF
    if any(key in value for key in _USER_TUNED):
        return value
    return f"{value},{DEFAULT_ALLOC_CONF}"


def drop_expandable_segments(current: str | None) -> str | None:
    """Remove ``expandable_segments:...`` entries (exact prefix); unset stays unset."""
    if current is None:
        return None
    kept = [p for p in current.split(",") if p and not p.startswith("expandable_segments:")]
    return ",".join(kept)


# --- NPU platform: edits derived from the deployment ----------------------------------------------

DEFAULT_BLOCK_SIZE = 128
DSV4_BLOCK_SIZES = (32, 64, 128)


def refreshed_block_size(
    block_size: int | None, *, model_type: str, is_hybrid: bool, prefix_caching: bool,
    chunked_prefill: bool, xlite: bool,
) -> tuple[int, str | None]:
    """(block size, reason when changed) per the Ascend attention kernels' needs."""
    size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    if model_type == "deepseek_v4":
        if size not in DSV4_BLOCK_SIZES:
            return 32, f"DeepSeek-V4 needs a block size in {DSV4_BLOCK_SIZES}; using 32"
        return size, None
    if is_hybrid:
        return size, None
    if size != DEFAULT_BLOCK_SIZE and (prefix_caching or chunked_prefill):
        return DEFAULT_BLOCK_SIZE, "prefix caching / chunked prefill need block size 128"
    if xlite and size > DEFAULT_BLOCK_SIZE:
        return DEFAULT_BLOCK_SIZE, "xlite supports block sizes up to 128"
    return size, None


def rounded_batched_tokens(max_num_batched_tokens: int, tp: int, pcp: int,
                           sequence_parallel: bool) -> int:
    """Round the token budget up to a multiple of TP x PCP when prefill context parallel
    (PCP > 1) and sequence parallelism both split a batch's tokens; else unchanged."""
    if not sequence_parallel or pcp <= 1:
        return max_num_batched_tokens
    unit = max(tp, 1) * pcp
    return math.ceil(max_num_batched_tokens / unit) * unit


def sfa_interleave_size(interleave: int, block_size: int, *, uses_sfa: bool, pcp: int,
                        dcp: int) -> int:
    """The CP KV-cache interleave size for SFA models: one whole block per rank under context
    parallel, except with the replicated indexer (DCP > 1), whose layout DCP fixes."""
    if uses_sfa and pcp * dcp > 1 and dcp == 1 and interleave != block_size:
        return block_size
    return interleave


def apply_derived_edits(vllm_config: Any, ascend_config: Any, facts: Any) -> list[str]:
    """Block size, cache dtype for index_topk models, SFA interleave size, token rounding;
    returns the notes (each logged as a warning: the user's value was changed)."""
    notes = []
    cache, sched, model = (vllm_config.cache_config, vllm_config.scheduler_config,
                           vllm_config.model_config)
    if cache is not None and model is not None:
        size, why = refreshed_block_size(
            cache.block_size, model_type=facts.model_type, is_hybrid=bool(model.is_hybrid),
            prefix_caching=bool(cache.enable_prefix_caching),
            chunked_prefill=bool(sched.enable_chunked_prefill),
            xlite=bool(ascend_config.xlite_graph_config.enabled),
        )
        if size != cache.block_size:
            cache.block_size = size
            notes.append(f"block_size={size}: {why}")
    if facts.index_topk is not None and cache is not None:
        cache.cache_dtype = facts.dtype
        notes.append(f"cache_dtype={facts.dtype} (model has index_topk)")
    par = vllm_config.parallel_config
    if cache is not None and hasattr(par, "cp_kv_cache_interleave_size"):
        interleave = sfa_interleave_size(
            par.cp_kv_cache_interleave_size, cache.block_size, uses_sfa=facts.uses_sfa,
            pcp=facts.prefill_context_parallel_size, dcp=facts.decode_context_parallel_size,
        )
        if interleave != par.cp_kv_cache_interleave_size:
            notes.append(f"cp_kv_cache_interleave_size={interleave}: SFA with prefill context "
                         f"parallel keeps whole blocks (was {par.cp_kv_cache_interleave_size})")
            par.cp_kv_cache_interleave_size = interleave
    tp = facts.tensor_parallel_size
    tokens = rounded_batched_tokens(sched.max_num_batched_tokens, tp,
                                    facts.prefill_context_parallel_size, facts.sequence_parallel)
    if tokens != sched.max_num_batched_tokens:
        notes.append(f"max_num_batched_tokens={tokens} (was {sched.max_num_batched_tokens}): "
                     f"sequence parallel with prefill context parallel needs a multiple of "
                     f"TP x PCP = {tp * facts.prefill_context_parallel_size}")
        sched.max_num_batched_tokens = tokens
    for note in notes:
        logger.warning(note)
    return notes


# --- host-CPU platform: the KV-cache reservation --------------------------------------------------

MiB: Final = 1 << 20
GiB: Final = 1 << 30
FLOOR_BYTES: Final = 128 * MiB
AVAILABLE_SHARE: Final = 0.5
# vLLM CPU's legacy variable: whole GiB of KV cache (vllm/platforms/cpu.py).
KVCACHE_SPACE_ENV: Final = "VLLM_CPU_KVCACHE_SPACE"


@dataclass(frozen=True)
class KvCacheDemand:
    """What one rank's KV cache must hold: bytes of one block over all its attention layers,
    blocks of one ``max_model_len`` sequence, sequences at a time; ``block_size`` tokens a
    block and the requested ``max_model_len`` (0: whole blocks) for the advice on errors."""

    block_bytes: int
    blocks_per_sequence: int
    max_num_seqs: int
    block_size: int = 1
    max_model_len: int = 0

    def advice_need(self) -> KvCacheNeed:
        """The same demand in the form ``worker_duties.kv_cache_advice`` takes."""
        return KvCacheNeed(
            block_bytes=self.block_bytes, block_size=self.block_size,
            max_model_len=self.max_model_len or self.blocks_per_sequence * self.block_size,
            max_num_seqs=self.max_num_seqs)

    @property
    def sequence_bytes(self) -> int:
        """One ``max_model_len`` sequence plus vLLM's null block: the least vLLM accepts."""
        return self.block_bytes * (self.blocks_per_sequence + 1)

    @property
    def need_bytes(self) -> int:
        """Every sequence at ``max_model_len`` at once, plus vLLM's null block."""
        return self.block_bytes * (self.max_num_seqs * self.blocks_per_sequence + 1)


@dataclass(frozen=True)
class KvCacheBudget:
    """The reservation of one rank and what it was derived from."""

    bytes: int
    need_bytes: int
    cap_bytes: int

    def describe(self) -> str:
        return (f"{self.bytes / MiB:.0f} MiB per rank (the run needs {self.need_bytes / MiB:.1f} "
                f"MiB; floor {FLOOR_BYTES / MiB:.0f} MiB; cap {self.cap_bytes / MiB:.0f} MiB = "
                f"{AVAILABLE_SHARE:g} of the free memory per rank)")


def kv_cache_budget(demand: KvCacheDemand, available_bytes: int, ranks: int) -> KvCacheBudget:
    """The KV-cache bytes of one rank for ``demand`` when ``available_bytes`` are free on the
    node and ``ranks`` workers of this host share them (rules in the module docstring)."""
    if ranks < 1:
        raise ValueError(f"ranks={ranks} is not allowed; at least 1 worker per host")
    if available_bytes < 0:
        raise ValueError(f"available_bytes={available_bytes} is not allowed; at least 0")
    free_per_rank = available_bytes // ranks
    cap = int(free_per_rank * AVAILABLE_SHARE)
    if demand.sequence_bytes > free_per_rank:
        raise kv_cache_memory_error(
            demand.advice_need(), free_per_rank,
            measured=f"{available_bytes / GiB:.2f} GiB free on the NUMA node, shared by "
                     f"{ranks} rank(s) of this host",
            more_memory="--kv-cache-memory-bytes")
    size = max(min(max(demand.need_bytes, FLOOR_BYTES), cap), demand.sequence_bytes)
    return KvCacheBudget(bytes=size, need_bytes=demand.need_bytes, cap_bytes=cap)


def _vllm_default_fractions() -> tuple[object, ...]:
    """The float objects vLLM uses as ``gpu_memory_utilization``'s default: CacheConfig's
    field default (shared by EngineArgs and the CLI parser) and ``LLM()``'s keyword default."""
    from vllm.config import CacheConfig
    from vllm.entrypoints.llm import LLM

    llm_default = inspect.signature(LLM.__init__).parameters["gpu_memory_utilization"].default
    return (CacheConfig.gpu_memory_utilization, llm_default)


def user_chose_reservation(cache_config: Any, environ: Mapping[str, str]) -> bool:
    """True when the user chose the KV-cache memory: ``--kv-cache-memory-bytes``,
    ``VLLM_CPU_KVCACHE_SPACE`` (non-empty, as vLLM reads it) or ``--gpu-memory-utilization``.

    A fraction the user passed is a float object of their own (parsed from the command line or
    written in their code), even when it equals vLLM's 0.92; only vLLM's default is the very
    object vLLM declares. A value that lost its identity (copied through pickling, in another
    process) counts as chosen: vLLM's own rule then applies, never a wrong guess.
    """
    if cache_config.kv_cache_memory_bytes is not None or environ.get(KVCACHE_SPACE_ENV, ""):
        return True
    fraction = cache_config.gpu_memory_utilization
    return not any(fraction is default for default in _vllm_default_fractions())


def demand_of(vllm_config: Any) -> KvCacheDemand:
    """What one rank of this run needs (``worker_duties.kv_cache_advice.need_of``: every layer
    of its pipeline stage counted as an attention layer with its rank's KV heads; MLA: one latent
    cache instead of K and V)."""
    need = need_of(vllm_config)
    return KvCacheDemand(
        block_bytes=need.block_bytes,
        blocks_per_sequence=need.blocks_per_sequence,
        max_num_seqs=need.max_num_seqs,
        block_size=need.block_size,
        max_model_len=need.max_model_len,
    )


def free_memory_and_ranks(vllm_config: Any) -> tuple[int, int]:
    """(least free bytes of the NUMA nodes vLLM's CPU worker may use, as vLLM measures it;
    worker ranks of this host)."""
    from vllm.utils.cpu_resource_utils import get_memory_node_info, get_visible_memory_node

    nodes = get_visible_memory_node() or [0]
    available = min(get_memory_node_info(node).available_memory for node in nodes)
    parallel = vllm_config.parallel_config
    ranks = parallel.local_world_size * max(1, parallel.data_parallel_size_local)
    return available, ranks


def default_kv_cache_reservation(vllm_config: Any,
                                 environ: Mapping[str, str] | None = None) -> KvCacheBudget | None:
    """Set ``cache_config.kv_cache_memory_bytes`` to :func:`kv_cache_budget` unless the user
    chose the reservation; returns the budget set (None: vLLM's own rule applies)."""
    cache = vllm_config.cache_config
    if user_chose_reservation(cache, os.environ if environ is None else environ):
        return None
    available, ranks = free_memory_and_ranks(vllm_config)
    budget = kv_cache_budget(demand_of(vllm_config), available, ranks)
    cache.kv_cache_memory_bytes = budget.bytes
    logger.info("KV cache: %s; --kv-cache-memory-bytes or --gpu-memory-utilization choose "
                "another size", budget.describe())
    return budget
