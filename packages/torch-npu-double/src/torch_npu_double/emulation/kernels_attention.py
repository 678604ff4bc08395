"""The emulated attention kernels: fused infer attention (functional, ``.out`` and its
workspace query) and the paged KV-cache scatter, with their documented limits.

FIA's rules are from the op-plugin doc ``torch_npu-npu_fused_infer_attention_score.md``
(``FIA_DOC``); the scatter's from ``torch_npu-npu_scatter_pa_kv_cache.md`` (``SCATTER_DOC``),
as ``/work/shared/reference/npu-kernel-contracts.md`` section 3 quotes them.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch

from torch_npu_double.emulation.kernel_contracts import (
    refuse,
    require_contiguous,
    require_dtype,
)

FIA = "npu_fused_infer_attention_score"
FIA_DOC = "doc torch_npu-npu_fused_infer_attention_score.md"
SCATTER = "npu_scatter_pa_kv_cache"
SCATTER_DOC = "doc torch_npu-npu_scatter_pa_kv_cache.md"
FIA_DTYPES = (torch.float16, torch.bfloat16)
MASK_SIZE = 2048
MAX_HEAD_DIM, MAX_HEADS, MAX_GROUP = 512, 256, 64
MAX_BLOCK_SIZE = 512


def _attention_reference() -> ModuleType:
    # Imported at the first call, never during the install (see kernels._reference).
    return importlib.import_module("ascend_kernels.ops.attention")


def check_fia(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              kw: dict[str, Any]) -> None:
    """FIA's documented limits for the page-attention TND calls the runtime makes."""
    if kw["input_layout"] != "TND" or kw.get("block_table") is None:
        raise NotImplementedError(
            f"the emulated {op} runs input_layout='TND' with a block_table only (got "
            f"{kw['input_layout']!r}, block_table={kw.get('block_table') is not None})")
    for name, t in (("query", query), ("key", key), ("value", value)):
        require_dtype(op, name, t, FIA_DTYPES, f"{FIA_DOC}: query/key/value float16 or bfloat16"
                      " (int8 KV only with antiquant, not emulated)")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise refuse(op, f"query {query.dtype}, key {key.dtype}, value {value.dtype} differ",
                     f"{FIA_DOC}: key/value dtype as query's")
    if query.dim() != 3:
        raise refuse(op, f"TND query has {query.dim()} dims; it must be [T, N, D]", FIA_DOC)
    tokens, heads, head_dim = query.shape
    if head_dim > MAX_HEAD_DIM or head_dim % 16:
        raise refuse(op, f"head dim {head_dim}; allowed: at most {MAX_HEAD_DIM} and a multiple"
                         " of 16", f"{FIA_DOC}: D <= 512, 16-aligned")
    num_heads, kv_heads = kw["num_heads"], kw["num_key_value_heads"] or kw["num_heads"]
    if num_heads != heads:
        raise refuse(op, f"num_heads={num_heads} but query has {heads} heads", FIA_DOC)
    if not 0 < num_heads <= MAX_HEADS:
        raise refuse(op, f"num_heads={num_heads}; allowed: 1..{MAX_HEADS}",
                     f"{FIA_DOC}: N <= 256")
    if kv_heads <= 0 or num_heads % kv_heads or num_heads // kv_heads > MAX_GROUP:
        raise refuse(op, f"num_heads {num_heads} / num_key_value_heads {kv_heads}: the ratio "
                         f"must be an integer of at most {MAX_GROUP}",
                     f"{FIA_DOC}: GQA ratio integral, <= 64")
    _check_mask(op, kw)
    _check_pages(op, tokens, key, value, kv_heads * head_dim, kw)


def _check_mask(op: str, kw: dict[str, Any]) -> None:
    if kw["sparse_mode"] != 3:
        raise NotImplementedError(f"the emulated {op} runs sparse_mode=3 only "
                                  f"(got {kw['sparse_mode']})")
    mask = kw.get("atten_mask")
    if mask is None or tuple(mask.shape) != (MASK_SIZE, MASK_SIZE) or mask.dtype not in (
            torch.int8, torch.bool):
        got = "none" if mask is None else f"{tuple(mask.shape)} {mask.dtype}"
        raise refuse(op, f"sparse_mode=3 needs the {MASK_SIZE}x{MASK_SIZE} int8/bool "
                         f"upper-triangular atten_mask; got {got}",
                     f"{FIA_DOC}: sparse_mode 3 optimised mask")


def _check_pages(op: str, tokens: int, key: torch.Tensor, value: torch.Tensor, width: int,
                 kw: dict[str, Any]) -> None:
    table = kw["block_table"]
    if table.dtype != torch.int32 or table.dim() != 2:
        raise refuse(op, f"block_table is {table.dtype} with {table.dim()} dims; it must be "
                         "int32 [batch, max_blocks]", f"{FIA_DOC}: page attention block_table")
    q_ends = list(kw.get("actual_seq_lengths") or [])
    kv_lens = list(kw.get("actual_seq_lengths_kv") or [])
    batch = table.shape[0]
    if len(q_ends) != batch or len(kv_lens) != batch:
        raise refuse(op, f"{len(q_ends)} actual_seq_lengths and {len(kv_lens)} "
                         f"actual_seq_lengths_kv for a block_table of {batch} rows; one each "
                         "per request", FIA_DOC)
    if not q_ends or q_ends[-1] != tokens:
        raise refuse(op, f"TND: actual_seq_lengths[-1] is {q_ends[-1] if q_ends else None}, "
                         f"the query has T={tokens} rows; they must be equal",
                     f"{FIA_DOC}: TND, the last element of actual_seq_lengths equals T")
    starts = [0, *q_ends[:-1]]
    q_lens = [end - start for start, end in zip(starts, q_ends, strict=True)]
    block_size = kw["block_size"]
    if block_size <= 0 or block_size % 16 or block_size > MAX_BLOCK_SIZE:
        raise refuse(op, f"block_size={block_size}; allowed: a multiple of 16 up to "
                         f"{MAX_BLOCK_SIZE}", f"{FIA_DOC}: page attention block_size")
    if max(q_lens) > 1 and (block_size < 128 or block_size % 128):
        raise refuse(op, f"block_size={block_size} with a query of {max(q_lens)} tokens; "
                         "when any query has more than one token it must be 128..512 in "
                         "multiples of 128", f"{FIA_DOC}: page attention block_size")
    for i, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        if q_len < 0 or kv_len < max(q_len, 1) or kv_len > table.shape[1] * block_size:
            raise refuse(op, f"request {i}: query length {q_len}, KV length {kv_len}; each "
                             "KV length must be at least 1 and the query's, at most "
                             f"max_blocks*block_size={table.shape[1] * block_size} (stricter "
                             "reading: the doc is silent on empty requests)", FIA_DOC)
    for name, cache in (("key", key), ("value", value)):
        if cache.dim() != 3 or cache.shape[1] != block_size or cache.shape[2] != width:
            raise refuse(op, f"{name} cache has shape {list(cache.shape)}; page attention "
                             f"takes [num_blocks, block_size={block_size}, "
                             f"kv_heads*head_dim={width}]", FIA_DOC)


def workspace_size(query: torch.Tensor, num_heads: int) -> int:
    """Elements of the workspace ``get_max_workspace`` returns (the emulation's own figure:
    the real size comes from ``aclnnFusedInferAttentionScoreV3GetMaxWorkspaceSize``)."""
    return 4096 + query.shape[0] * max(num_heads, 1) * 32


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            kw: dict[str, Any]) -> torch.Tensor:
    kv_heads = kw["num_key_value_heads"] or kw["num_heads"]
    block_size, head_dim = kw["block_size"], query.shape[-1]
    k_cache = key.view(key.shape[0], block_size, kv_heads, head_dim)
    v_cache = value.view(value.shape[0], block_size, kv_heads, head_dim)
    out: torch.Tensor = _attention_reference().paged_attention(
        query, k_cache, v_cache, kw["block_table"], list(kw["actual_seq_lengths"]),
        list(kw["actual_seq_lengths_kv"]), kw["scale"])
    return out.view(query.shape).to(query.dtype)


def fused_infer_attention_score(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged TND attention, causal bottom-right aligned (``sparse_mode=3``), GQA."""
    check_fia(FIA, query, key, value, kw)
    if kw["softmax_lse_flag"]:
        raise NotImplementedError(f"the emulated {FIA} does not compute softmax_lse")
    return _attend(query, key, value, kw), torch.empty(0, dtype=torch.float32,
                                                          device=query.device)


def fused_infer_attention_score_out(query: torch.Tensor, key: torch.Tensor,
                                    value: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, ...]:
    """The ``.out`` form: writes ``out[0]`` (attention_out) with the given workspace."""
    op = f"{FIA}.out"
    check_fia(op, query, key, value, kw)
    out, workspace = list(kw["out"]), kw["workspace"]
    if len(out) != 2:
        raise refuse(op, f"out holds {len(out)} tensors; it takes [attention_out, "
                         "softmax_lse]", f"{FIA_DOC} (.out)")
    attention_out, lse = out
    if attention_out.shape != query.shape or attention_out.dtype != query.dtype:
        raise refuse(op, f"attention_out is {list(attention_out.shape)} {attention_out.dtype};"
                         f" it must be query's {list(query.shape)} {query.dtype}",
                     f"{FIA_DOC} (.out)")
    if lse.dtype != torch.float32:
        raise refuse(op, f"softmax_lse is {lse.dtype}; it must be float32", f"{FIA_DOC} (.out)")
    if kw["softmax_lse_flag"]:
        raise NotImplementedError(f"the emulated {op} does not compute softmax_lse")
    if workspace is not None:
        need = workspace_size(query, kw["num_heads"])
        if workspace.dim() != 1 or workspace.dtype != query.dtype or workspace.numel() < need:
            raise refuse(op, f"workspace is {list(workspace.shape)} {workspace.dtype}; it must "
                             f"be 1-D {query.dtype} of at least {need} elements (what "
                             "_npu_fused_infer_attention_score_get_max_workspace returns)",
                         f"{FIA_DOC} (.out): workspace 1-D, query's dtype")
    attention_out.copy_(_attend(query, key, value, kw))
    return attention_out, lse


def get_max_workspace(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      **kw: Any) -> torch.Tensor:
    """A fresh 1-D workspace of query's dtype, large enough for any ``.out`` call with these
    shapes (it depends on no sequence length)."""
    check_fia("_npu_fused_infer_attention_score_get_max_workspace", query, key, value, kw)
    return torch.empty(workspace_size(query, kw["num_heads"]), dtype=query.dtype,
                       device=query.device)


def scatter_pa_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                        value_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                        compress_lens: torch.Tensor | None = None,
                        compress_seq_offsets: torch.Tensor | None = None,
                        seq_lens: torch.Tensor | None = None,
                        cache_mode: str | None = "PA_NZ") -> None:
    """Row ``i`` of key/value into slot ``slot_mapping[i]`` (``cache_mode="Norm"``: caches
    ``[num_blocks, block_size, kv_heads, head_dim]``)."""
    if cache_mode != "Norm" or compress_lens is not None or seq_lens is not None:
        raise NotImplementedError(
            f"the emulated {SCATTER} runs cache_mode='Norm' without compression only "
            f"(got cache_mode={cache_mode!r})")
    for name, t in (("key", key), ("value", value), ("slot_mapping", slot_mapping)):
        require_contiguous(SCATTER, name, t, f"{SCATTER_DOC}: 输入参数不支持非连续")
    tokens = slot_mapping.shape[0]
    if key.shape[0] != tokens or value.shape[0] != tokens:
        raise refuse(SCATTER, f"key has {key.shape[0]} rows, value {value.shape[0]}, "
                              f"slot_mapping {tokens}; one slot per row", SCATTER_DOC)
    num_blocks, block_size = key_cache.shape[:2]
    slots = slot_mapping.long()
    bad = (slots < 0) | (slots >= num_blocks * block_size)
    if bool(bad.any()):
        raise refuse(SCATTER, f"slot {int(slots[bad][0])} outside [0, {num_blocks * block_size})"
                              " (stricter reading: whether the kernel skips -1 slots is open "
                              "in the docs)", SCATTER_DOC)
    if slots.unique().numel() != tokens:
        raise refuse(SCATTER, "slot_mapping repeats a slot; each row needs its own slot",
                     SCATTER_DOC)
    _attention_reference().reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
