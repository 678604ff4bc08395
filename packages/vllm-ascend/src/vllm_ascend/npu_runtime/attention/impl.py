"""``AscendAttentionImpl``: the KV-cache write and the attention of one layer, eager or as a
FULL-graph FIA task whose lengths ``update_graph_params`` refreshes before each replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.config import get_current_vllm_config
from vllm.v1.attention.backend import AttentionImpl, AttentionType

from vllm_ascend.compilation.graph_params import graph_params_for
from vllm_ascend.npu_runtime.attention.metadata import AscendMetadata

if TYPE_CHECKING:
    from ascend_graph import GraphParamsStore
    from vllm.config import SpeculativeConfig, VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionLayer


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


def _step_metadata(forward_context: ForwardContext) -> AscendMetadata:
    metadata = forward_context.attn_metadata
    values = metadata.values() if isinstance(metadata, dict) else [metadata]
    for value in values:
        if isinstance(value, AscendMetadata):
            return value
    raise RuntimeError("a FULL graph replay has no Ascend attention metadata in its forward "
                       "context to update the captured attention calls with")


def _torch_npu() -> Any:
    """The torch_npu module the ascend kernels are bound to (FIA's graph task needs it)."""
    # Local: importing ascend_kernels looks torch_npu up and registers its kernels; that
    # belongs to a running NPU runtime, not to importing this module.
    from ascend_kernels.npu_loader import npu_registration

    module = npu_registration.module
    if module is None:
        raise RuntimeError("a FULL graph holds FIA kernels, but torch_npu's kernels are not "
                           f"registered ({npu_registration.error or 'torch_npu not loaded'})")
    return module


def _real_tokens(layer: torch.nn.Module, rows: int) -> int | None:
    """The step's real tokens (padding rows excluded); ``None`` for a dummy step."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return rows
    metadata: object = get_forward_context().attn_metadata
    if metadata is None:
        return None
    if isinstance(metadata, dict):
        metadata = metadata.get(str(getattr(layer, "layer_name", "")))
    if isinstance(metadata, AscendMetadata):
        return min(rows, metadata.num_actual_tokens)
    return rows


def real_slots(slots: torch.Tensor) -> torch.Tensor:
    """``slots`` with each negative (padding) slot replaced by its rank among the padding slots."""
    # Padding rows of a replayed graph are fewer than a block, so they land in vLLM's null block 0,
    # all distinct as the scatter needs; a capture's dummy batch writes blocks nobody holds yet.
    padding = slots < 0
    rank = torch.cumsum(padding, 0, dtype=slots.dtype) - 1
    return torch.where(padding, rank, slots)


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
        self.graph_params: GraphParamsStore | None = None

    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Write the step's keys and values to their slots; padding rows to scratch slots."""
        # npu_scatter_pa_kv_cache documents no negative slot, hence real_slots for vLLM's -1s.
        if kv_cache.numel() == 0:
            return  # profiling run: no cache bound yet
        rows = key.shape[0] if capturing_full_graph() else _real_tokens(layer, key.shape[0])
        if rows is None:
            return
        torch.ops.ascend.reshape_and_cache(key[:rows], value[:rows], kv_cache[0], kv_cache[1],
                                           real_slots(slot_mapping[:rows]))

    def forward(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, kv_cache: torch.Tensor, attn_metadata: AscendMetadata | None,
                output: torch.Tensor, output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("the Ascend attention backend does not fuse output "
                                      "quantization")
        if attn_metadata is None:
            return output  # profiling run
        if capturing_full_graph():
            self._capture(query, kv_cache, attn_metadata, output)
            return output
        n = attn_metadata.num_actual_tokens
        result = torch.ops.ascend.paged_attention(
            query[:n], kv_cache[0], kv_cache[1], attn_metadata.block_table,
            attn_metadata.query_ends, attn_metadata.seq_lens, self.scale)
        output[:n].copy_(result.view_as(output[:n]))
        return output

    def _capture(self, query: torch.Tensor, kv_cache: torch.Tensor, metadata: AscendMetadata,
                 output: torch.Tensor) -> None:
        """Capture the layer's FIA task into the engine's graph parameters for this size."""
        # Local: importing ascend_kernels looks torch_npu up (see _torch_npu).
        from ascend_kernels.fia_graph import fia_lengths, launch_fia_task, new_fia_task
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
        kernels = _torch_npu()
        ends, lens = fia_lengths(metadata.query_ends, metadata.seq_lens, num_tokens,
                                 metadata.block_table.shape[0])
        workspace = params.workspaces.get(num_tokens)
        task = new_fia_task(kernels, query[:num_tokens], kv_cache[0], kv_cache[1],
                            metadata.block_table, output[:num_tokens], ends, lens, self.scale,
                            workspace)
        if workspace is None:
            store.update_workspaces("main", num_tokens, task.workspace)
        npu = _npu()
        stream = npu.current_stream()
        event = npu.ExternalEvent()
        event.wait(stream)
        event.reset(stream)
        npu.graph_task_group_begin(stream)
        launch_fia_task(kernels, task, ends, lens)
        handle = npu.graph_task_group_end(stream)
        params.handles[num_tokens].append(handle)
        params.attn_params[num_tokens].append(task)
        params.events[num_tokens].append(event)

    @classmethod
    def update_graph_params(cls, update_stream: Any, forward_context: ForwardContext,
                            num_tokens: int, vllm_config: VllmConfig,
                            speculative_config: SpeculativeConfig | None = None, *,
                            draft_attn_metadatas: object = None,
                            graph_params: GraphParamsStore | None = None) -> None:
        """Re-issue every captured FIA task of the ``num_tokens`` graph with this step's lengths on
        ``update_stream``; ``graph_params`` defaults to the engine's store."""
        # Local: importing ascend_kernels looks torch_npu up (see _torch_npu).
        from ascend_kernels.fia_graph import fia_lengths, launch_fia_task

        if draft_attn_metadatas is not None:
            raise NotImplementedError("the Ascend attention backend has no draft-model graphs")
        store = graph_params if graph_params is not None else graph_params_for(vllm_config)
        params = store.get("main")
        tasks = [] if params is None else params.attn_params.get(num_tokens, [])
        if params is None or not tasks:
            raise RuntimeError(f"no captured attention calls for a FULL graph of {num_tokens} "
                               "tokens: the graph was captured without the Ascend backend")
        metadata = _step_metadata(forward_context)
        kernels = _torch_npu()
        npu = _npu()
        lengths: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        # The previous replay may still run on the device: the updates wait for it there
        # (the host never waits).
        update_stream.wait_stream(npu.current_stream())
        with npu.stream(update_stream):
            for handle, task, event in zip(params.handles[num_tokens], tasks,
                                           params.events[num_tokens], strict=True):
                shape = (task.num_tokens, task.rows)
                if shape not in lengths:
                    lengths[shape] = fia_lengths(metadata.query_ends, metadata.seq_lens, *shape)
                ends, lens = lengths[shape]
                npu.graph_task_update_begin(update_stream, handle)
                launch_fia_task(kernels, task, ends, lens)
                npu.graph_task_update_end(update_stream)
                event.record(update_stream)
