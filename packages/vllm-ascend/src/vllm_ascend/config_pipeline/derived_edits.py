"""Step 7: VllmConfig edits derived from the deployment (block size, cache dtype, tokens)."""

from __future__ import annotations

import logging
import math
from typing import Any

logger = logging.getLogger("vllm_ascend.config_pipeline.derived_edits")

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
