"""``AscendAttentionImpl``: the KV-cache write and the attention of one layer.

In a FULL graph the attention call of each layer is captured as one task group; its host
parameters (query ends, sequence lengths) are baked into the graph, so before every replay
``update_graph_params`` re-issues the call with this step's values inside
``graph_task_update_begin/end`` (the captured tensors stay: query, caches, the block table
buffer and the output are the graph's own memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from vllm.config import get_current_vllm_config
from vllm.v1.attention.backend import AttentionImpl, AttentionType

from vllm_ascend.compilation.graph_params import graph_params_for
from vllm_ascend.npu_runtime.attention.metadata import AscendMetadata


@dataclass(frozen=True)
class CapturedAttention:
    """The tensors one layer's captured attention call reads and writes."""

    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    scale: float
    output: torch.Tensor


def attend(call: CapturedAttention, query_ends: Sequence[int], seq_lens: Sequence[int]) -> None:
    """One layer's attention into ``call.output`` (the exact calls a task group holds)."""
    result = torch.ops.ascend.paged_attention(
        call.query, call.key_cache, call.value_cache, call.block_table, list(query_ends),
        list(seq_lens), call.scale,
    )
    # vLLM hands the output per head, shaped like the query: no view then, which a FULL
    # graph's parameter update would otherwise issue from the host for every layer and step.
    same = result.shape == call.output.shape
    call.output.copy_(result if same else result.view_as(call.output))


def _npu() -> Any:
    return torch.npu  # type: ignore[attr-defined]


def capturing_full_graph() -> bool:
    """Whether this forward is being captured into a FULL graph."""
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return False
    mode = get_forward_context().cudagraph_runtime_mode
    return mode == CUDAGraphMode.FULL and bool(_npu().is_current_stream_capturing())


def _step_metadata(forward_context: Any) -> AscendMetadata:
    metadata = forward_context.attn_metadata
    values = metadata.values() if isinstance(metadata, dict) else [metadata]
    for value in values:
        if isinstance(value, AscendMetadata):
            return value
    raise RuntimeError("a FULL graph replay has no Ascend attention metadata in its forward "
                       "context to update the captured attention calls with")


def _fit_rows(values: Sequence[int], rows: int, fill: int) -> list[int]:
    """``values`` cut or extended (with ``fill``) to the captured block table's rows."""
    out = list(values[:rows])
    return out + [fill] * (rows - len(out))


class AscendAttentionImpl(AttentionImpl[AscendMetadata]):
    """Decoder self-attention (GQA when ``num_heads`` is a multiple of ``num_kv_heads``)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None,
                 kv_cache_dtype: str, logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None, **unsupported: Any) -> None:
        refused = {
            "alibi slopes": alibi_slopes is not None,
            "a sliding window": sliding_window is not None,
            "logits soft-capping": bool(logits_soft_cap),
            f"attention type {attn_type!r}": attn_type != AttentionType.DECODER,
            "attention sinks": sinks is not None,
            f"KV cache dtype {kv_cache_dtype!r}": kv_cache_dtype != "auto",
            f"options {sorted(unsupported)}": bool(unsupported),
        }
        found = [what for what, present in refused.items() if present]
        if found:
            raise NotImplementedError(
                f"the Ascend attention backend does not support {', '.join(found)}; it runs "
                "decoder self-attention (causal, GQA) with the model's dtype in the KV cache"
            )
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be a multiple of "
                             f"num_kv_heads={num_kv_heads}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self._vllm_config = get_current_vllm_config()
        #: The graph-parameter store FULL captures record into (set by the model runner to
        #: the one its graph wrapper replays with; default: the engine's).
        self.graph_params: Any = None

    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Write this step's keys and values to their slots (negative slots are padding)."""
        if kv_cache.numel() == 0:
            return  # profiling run: no cache bound yet
        slots = slot_mapping[: key.shape[0]]  # the kernel writes rows 0..len(slots)-1
        torch.ops.ascend.reshape_and_cache(key, value, kv_cache[0], kv_cache[1], slots)

    def forward(self, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: AscendMetadata | None,
                output: torch.Tensor, output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("the Ascend attention backend does not fuse output "
                                      "quantization")
        if attn_metadata is None:
            return output  # profiling run
        n = attn_metadata.num_actual_tokens
        call = CapturedAttention(query[:n], kv_cache[0], kv_cache[1], attn_metadata.block_table,
                                 self.scale, output[:n])
        if capturing_full_graph():
            self._capture(call, attn_metadata)
        else:
            attend(call, attn_metadata.query_ends, attn_metadata.seq_lens)
        return output

    def _capture(self, call: CapturedAttention, metadata: AscendMetadata) -> None:
        """The attention call as one task group of the graph being captured, remembered (with
        its handle) in the engine's graph parameters for this capture size."""
        from vllm.forward_context import get_forward_context


        descriptor = get_forward_context().batch_descriptor
        if descriptor is None:
            raise RuntimeError("a FULL graph capture without vLLM's batch descriptor")
        num_tokens = descriptor.num_tokens
        store = self.graph_params or graph_params_for(self._vllm_config)
        params = store.get("main")
        if params is None or num_tokens not in params.handles:
            raise RuntimeError(
                f"capturing a FULL graph of {num_tokens} tokens, but the engine's graph "
                "parameters have no entry for that size: the NPU model runner sets them for "
                "every capture size before capturing")
        npu = _npu()
        stream = npu.current_stream()
        npu.graph_task_group_begin(stream)
        attend(call, metadata.query_ends, metadata.seq_lens)
        handle = npu.graph_task_group_end(stream)
        params.handles[num_tokens].append(handle)
        params.attn_params[num_tokens].append(call)

    @classmethod
    def update_graph_params(cls, update_stream: Any, forward_context: Any, num_tokens: int,
                            vllm_config: Any, speculative_config: Any = None, *,
                            draft_attn_metadatas: Any = None,
                            graph_params: Any = None) -> None:
        """Re-issue every captured attention call of the ``num_tokens`` graph with this
        step's query ends and sequence lengths (its task groups), before the replay.
        ``graph_params``: the store the replaying wrapper holds (default: the engine's)."""

        if draft_attn_metadatas is not None:
            raise NotImplementedError("the Ascend attention backend has no draft-model graphs")
        store = graph_params if graph_params is not None else graph_params_for(vllm_config)
        params = store.get("main")
        calls = [] if params is None else params.attn_params.get(num_tokens, [])
        if params is None or not calls:
            raise RuntimeError(f"no captured attention calls for a FULL graph of {num_tokens} "
                               "tokens: the graph was captured without the Ascend backend")
        metadata = _step_metadata(forward_context)
        npu = _npu()
        with npu.stream(update_stream):
            for handle, call in zip(params.handles[num_tokens], calls, strict=True):
                rows = call.block_table.shape[0]
                ends = _fit_rows(metadata.query_ends, rows,
                                 metadata.query_ends[-1] if metadata.query_ends else 0)
                npu.graph_task_update_begin(update_stream, handle)
                attend(call, ends, _fit_rows(metadata.seq_lens, rows, 0))
                npu.graph_task_update_end(update_stream)
