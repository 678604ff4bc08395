"""The emulated MoE kernels: gating top-k, routing (``init_routing_v2``), token permute and
unpermute, and the grouped matmul of the experts.

Each computes its documented definition in float32 and casts once to the output dtype, and
refuses what the torch_npu 2.13.0 docs (``_op_plugin_docs.py`` in the wheel, lines cited as
``docs:N``; summarised in ``reference/npu-moe-quant-facts.md`` section 2) refuse. Rows the docs
call undefined (past the valid rows of a routing or a grouped matmul) are NaN, so a caller
that reads them sees it. Forms the runtime does not call (hash routing, quantized routing and
matmuls, key-value counts) raise ``NotImplementedError``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch

from torch_npu_double.emulation.kernel_contracts import (
    dtype_name,
    refuse,
    require_dtype,
)

FLOATS = (torch.float16, torch.bfloat16, torch.float32)
GATING = "npu_moe_gating_top_k"
ROUTING = "npu_moe_init_routing_v2"
PERMUTE = "npu_moe_token_permute"
UNPERMUTE = "npu_moe_token_unpermute"
GMM = "npu_grouped_matmul"
GATING_DOC = "docs:10819-10860 npu_moe_gating_top_k"
ROUTING_DOC = "docs:11087-11118 npu_moe_init_routing_v2"
PERMUTE_DOC = "docs:16845-16880 npu_moe_token_permute"
UNPERMUTE_DOC = "docs:16934-16960 npu_moe_token_unpermute"
GMM_DOC = "docs:5814-5906 npu_grouped_matmul"
MAX_GATING_EXPERTS = 2048
MAX_ROUTING_EXPERTS = 10240
MAX_PERMUTE_INDEX = 16777215
MAX_UNPERMUTE_TOP_K = 512
GMM_INNER_LIMIT = 65536
GMM_MAX_LIST = 128


def _require(ok: bool, op: str, problem: str, source: str) -> None:
    if not ok:
        raise refuse(op, problem, source)


def _not_emulated(op: str, what: str) -> NotImplementedError:
    return NotImplementedError(f"the emulated torch_npu.{op} does not compute {what}")


def npu_moe_gating_top_k(x: torch.Tensor, k: int, bias: torch.Tensor | None = None,
                         input_ids: torch.Tensor | None = None,
                         tid2eid: torch.Tensor | None = None, k_group: int = 1,
                         group_count: int = 1, group_select_mode: int = 0, renorm: int = 0,
                         norm_type: int = 0, out_flag: bool = False,
                         routed_scaling_factor: float = 1.0,
                         eps: float = 1e-20) -> tuple[torch.Tensor, ...]:
    """Softmax (norm_type 0) or sigmoid (1) of ``x``, grouped top-k on the scores plus
    ``bias``; returns the top-k norms (no renormalisation: ``renorm`` takes 0 only) times
    ``routed_scaling_factor`` in x's dtype, their int32 ids and the float32 norms."""
    require_dtype(GATING, "x", x, FLOATS, GATING_DOC)
    _require(x.dim() == 2, GATING, f"x has {x.dim()} dims; it must be 2-D", GATING_DOC)
    experts = x.shape[-1]
    _require(experts <= MAX_GATING_EXPERTS, GATING,
             f"x has {experts} experts; at most {MAX_GATING_EXPERTS}", GATING_DOC)
    _require(renorm == 0, GATING, f"renorm={renorm}; only 0 is supported", GATING_DOC)
    _require(norm_type in (0, 1), GATING, f"norm_type={norm_type}; allowed: 0 (softmax), "
             "1 (sigmoid)", GATING_DOC)
    _require(group_select_mode in (0, 1), GATING,
             f"group_select_mode={group_select_mode}; allowed: 0, 1", GATING_DOC)
    _require(group_count > 0 and experts % group_count == 0
             and experts // group_count > 2, GATING,
             f"group_count={group_count} with {experts} experts; the experts must divide into "
             "groups of more than 2", GATING_DOC)
    per_group = experts // group_count
    _require(math.ceil(per_group / 32) * 32 * group_count <= MAX_GATING_EXPERTS, GATING,
             f"groups of {per_group} aligned to 32 times {group_count} groups exceed "
             f"{MAX_GATING_EXPERTS}", GATING_DOC)
    _require(1 <= k_group <= group_count, GATING,
             f"k_group={k_group}; allowed: 1..group_count ({group_count})", GATING_DOC)
    _require(1 <= k <= per_group * k_group, GATING,
             f"k={k}; allowed: 1..{per_group * k_group} (experts / group_count * k_group)",
             GATING_DOC)
    if input_ids is not None or tid2eid is not None:
        raise _not_emulated(GATING, "hash routing (input_ids, tid2eid)")
    if bias is not None:
        _require(bias.dim() == 1 and bias.shape[0] == experts and bias.dtype == x.dtype,
                 GATING, f"bias {list(bias.shape)} {dtype_name(bias.dtype)}; it must be "
                 f"[{experts}] in x's dtype {dtype_name(x.dtype)}", GATING_DOC)
    xf = x.float()
    norm = xf.softmax(dim=-1) if norm_type == 0 else xf.sigmoid()
    scores = norm if bias is None else norm + bias.float()
    if group_count > 1:
        grouped = scores.view(-1, group_count, per_group)
        if group_select_mode == 0:
            group_scores = grouped.max(dim=-1).values
        else:
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        chosen = group_scores.topk(k_group, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, chosen, True)
        scores = scores.masked_fill(~keep.repeat_interleave(per_group, dim=1), -math.inf)
    ids = scores.topk(k, dim=-1).indices
    y = norm.gather(1, ids) * routed_scaling_factor
    return y.to(x.dtype), ids.to(torch.int32), norm


def _nan_rows(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full(shape, math.nan, dtype=dtype, device=device)


def npu_moe_init_routing_v2(x: torch.Tensor, expert_idx: torch.Tensor,
                            scale: torch.Tensor | None = None,
                            offset: torch.Tensor | None = None, active_num: int = -1,
                            expert_capacity: int = -1, expert_num: int = -1,
                            drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                            expert_tokens_num_flag: bool = False, quant_mode: int = -1,
                            active_expert_range: list[int] | None = None,
                            row_idx_type: int = 0,
                            x_dtype: int | None = None) -> tuple[torch.Tensor, ...]:
    """Every (token, k) whose expert is in ``active_expert_range`` copied to a row of
    ``expanded_x``, rows sorted by expert (then by the flat index ``token * K + k``); the
    first ``available`` rows are valid, the rest NaN. ``expanded_row_idx``: for row_idx_type 0
    (gather) the row of each flat index, -1 outside the range; for 1 (scatter) the flat index
    of each valid row. Per-expert counts (type 1) of the range, int64."""
    require_dtype(ROUTING, "x", x, FLOATS, ROUTING_DOC + ": float16, bfloat16, float32, int8 "
                  "(int8 only with quant_mode -1; not emulated)")
    _require(x.dim() == 2 and expert_idx.dim() == 2 and x.shape[0] == expert_idx.shape[0],
             ROUTING, f"x {list(x.shape)} and expert_idx {list(expert_idx.shape)}; both 2-D "
             "with the same rows", ROUTING_DOC)
    require_dtype(ROUTING, "expert_idx", expert_idx, (torch.int32,), ROUTING_DOC)
    _require(drop_pad_mode == 0, ROUTING, f"drop_pad_mode={drop_pad_mode}; only 0 in 2.13.0",
             ROUTING_DOC)
    _require(expert_tokens_num_type in (1, 2), ROUTING,
             f"expert_tokens_num_type={expert_tokens_num_type}; only 1 (count) and 2 "
             "(key_value) in 2.13.0", ROUTING_DOC)
    _require(expert_tokens_num_flag, ROUTING, "expert_tokens_num_flag=False; only True in "
             "2.13.0", ROUTING_DOC)
    _require(quant_mode in (-1, 1), ROUTING, f"quant_mode={quant_mode}; only -1 and 1 in 2.13.0",
             ROUTING_DOC)
    limit = 5120 if expert_tokens_num_type == 2 else MAX_ROUTING_EXPERTS
    _require(0 < expert_num <= limit, ROUTING,
             f"expert_num={expert_num}; allowed: 1..{limit}", ROUTING_DOC)
    _require(offset is None, ROUTING, "offset given; it is not input without static "
             "quantization", ROUTING_DOC)
    _require(active_num >= -1, ROUTING, f"active_num={active_num}; it must be >= -1",
             ROUTING_DOC)
    start, end = (list(active_expert_range) if active_expert_range else [0, expert_num])
    _require(0 <= start < end <= expert_num, ROUTING,
             f"active_expert_range=[{start}, {end}]; it must satisfy 0 <= start < end <= "
             f"expert_num ({expert_num})", ROUTING_DOC)
    if quant_mode == 1 or expert_tokens_num_type == 2:
        raise _not_emulated(ROUTING, "dynamic quantization or key_value counts")
    tokens, top_k = expert_idx.shape
    total = tokens * top_k
    if 0 < active_num < total:
        raise _not_emulated(ROUTING, f"active_num {active_num} below tokens * K ({total})")
    flat = expert_idx.reshape(-1).to(torch.int64)
    _require(bool(((flat >= 0) & (flat < expert_num)).all()), ROUTING,
             f"expert_idx holds ids outside [0, {expert_num})", ROUTING_DOC)
    if scale is not None:
        _require(scale.dtype == torch.float32 and scale.shape == (tokens,), ROUTING,
                 f"scale {list(scale.shape)} {dtype_name(scale.dtype)}; without "
                 f"quantization it must be float32 [{tokens}]", ROUTING_DOC)
    active = (flat >= start) & (flat < end)
    # stable sort by expert: within an expert the flat (token, k) order is kept
    key = torch.where(active, flat, expert_num)
    order = torch.sort(key, stable=True).indices[: int(active.sum())]
    available = order.numel()
    expanded_x = _nan_rows((total, x.shape[1]), x.dtype, x.device)
    expanded_x[:available] = x[order // top_k]
    if row_idx_type == 0:
        row_idx = torch.full((total,), -1, dtype=torch.int32, device=x.device)
        row_idx[order] = torch.arange(available, dtype=torch.int32, device=x.device)
    else:
        row_idx = torch.full((total,), -1, dtype=torch.int32, device=x.device)
        row_idx[:available] = order.to(torch.int32)
    counts = torch.bincount(flat[active] - start, minlength=end - start).to(torch.int64)
    expanded_scale = _nan_rows((total,), torch.float32, x.device)
    if scale is not None:
        expanded_scale[:available] = scale[order // top_k]
    return expanded_x, row_idx, counts, expanded_scale


def npu_moe_token_permute(tokens: torch.Tensor, indices: torch.Tensor,
                          num_out_tokens: int | None = None,
                          padded_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens repeated per expert and stably sorted by expert id; ``sorted_indices[i]`` is
    the row of flat entry ``i`` (token ``i // topK``) in the result (int32)."""
    require_dtype(PERMUTE, "tokens", tokens, FLOATS, PERMUTE_DOC)
    require_dtype(PERMUTE, "indices", indices, (torch.int32, torch.int64), PERMUTE_DOC)
    _require(tokens.dim() == 2 and indices.dim() in (1, 2), PERMUTE,
             f"tokens {tokens.dim()}-D, indices {indices.dim()}-D; tokens 2-D, indices 1-D "
             "or 2-D", PERMUTE_DOC)
    _require(not padded_mode, PERMUTE, "padded_mode=True; only False", PERMUTE_DOC)
    top_k = indices.shape[1] if indices.dim() == 2 else 1
    _require(indices.shape[0] == tokens.shape[0], PERMUTE,
             f"indices has {indices.shape[0]} rows for {tokens.shape[0]} tokens", PERMUTE_DOC)
    _require(top_k <= MAX_UNPERMUTE_TOP_K, PERMUTE, f"topK {top_k} exceeds 512",
             "reference/npu-moe-quant-facts.md section 2 (docs:14306)")
    flat = indices.reshape(-1).to(torch.int64)
    _require(flat.numel() < MAX_PERMUTE_INDEX, PERMUTE,
             f"indices has {flat.numel()} elements; fewer than {MAX_PERMUTE_INDEX}",
             PERMUTE_DOC)
    _require(bool(((flat >= 0) & (flat < MAX_PERMUTE_INDEX)).all()), PERMUTE,
             f"indices outside [0, {MAX_PERMUTE_INDEX})", PERMUTE_DOC)
    total = flat.numel()
    keep = total if not num_out_tokens else (
        min(total, num_out_tokens) if num_out_tokens > 0 else max(total + num_out_tokens, 0))
    order = torch.sort(flat, stable=True).indices
    sorted_indices = torch.empty(total, dtype=torch.int32, device=tokens.device)
    sorted_indices[order] = torch.arange(total, dtype=torch.int32, device=tokens.device)
    return tokens[order[:keep] // top_k].contiguous(), sorted_indices


def npu_moe_token_unpermute(permuted_tokens: torch.Tensor, sorted_indices: torch.Tensor,
                            probs: torch.Tensor | None = None, padded_mode: bool = False,
                            restore_shape: list[int] | None = None) -> torch.Tensor:
    """``out[t] = sum_k probs[t, k] * permuted_tokens[sorted_indices[t * K + k]]`` (K = 1 and
    weight 1 without probs), in float32, cast to permuted_tokens' dtype."""
    require_dtype(UNPERMUTE, "permuted_tokens", permuted_tokens, FLOATS, UNPERMUTE_DOC)
    require_dtype(UNPERMUTE, "sorted_indices", sorted_indices, (torch.int32,), UNPERMUTE_DOC)
    _require(not padded_mode and restore_shape is None, UNPERMUTE,
             "padded_mode/restore_shape given; only False and None are supported",
             UNPERMUTE_DOC)
    _require(permuted_tokens.dim() == 2 and sorted_indices.dim() == 1, UNPERMUTE,
             "permuted_tokens must be 2-D and sorted_indices 1-D", UNPERMUTE_DOC)
    total = sorted_indices.numel()
    top_k = 1
    if probs is not None:
        require_dtype(UNPERMUTE, "probs", probs, FLOATS, UNPERMUTE_DOC)
        _require(probs.dim() == 2 and probs.numel() == total, UNPERMUTE,
                 f"probs {list(probs.shape)}; it must be [tokens, topK] with tokens * topK = "
                 f"{total} (sorted_indices' length)", UNPERMUTE_DOC)
        top_k = probs.shape[1]
    _require(top_k <= MAX_UNPERMUTE_TOP_K, UNPERMUTE, f"topK {top_k} exceeds 512",
             UNPERMUTE_DOC)
    _require(permuted_tokens.shape[0] == total, UNPERMUTE,
             f"permuted_tokens has {permuted_tokens.shape[0]} rows; it must be tokens * topK "
             f"= {total}", UNPERMUTE_DOC)
    idx = sorted_indices.to(torch.int64)
    _require(bool(((idx >= 0) & (idx < total)).all()) and idx.unique().numel() == total,
             UNPERMUTE, f"sorted_indices must be unique and in [0, {total - 1}]",
             UNPERMUTE_DOC)
    rows = permuted_tokens.float()[idx].view(total // top_k, top_k, -1)
    weights = probs.float().unsqueeze(-1) if probs is not None else 1.0
    return (rows * weights).sum(dim=1).to(permuted_tokens.dtype)


def _group_sizes(group_list: torch.Tensor, list_type: int, groups: int) -> list[int]:
    require_dtype(GMM, "group_list", group_list, (torch.int64,), GMM_DOC)
    _require(group_list.dim() == 1 and group_list.numel() == groups, GMM,
             f"group_list {list(group_list.shape)}; it must be 1-D with one entry per weight "
             f"group ({groups})", GMM_DOC)
    values = [int(v) for v in group_list.cpu()]
    _require(all(v >= 0 for v in values), GMM, "group_list has a negative entry", GMM_DOC)
    if list_type == 0:
        _require(all(b >= a for a, b in itertools.pairwise(values)), GMM,
                 "group_list_type 0 (cumsum) needs a non-decreasing group_list", GMM_DOC)
        return [b - a for a, b in zip([0, *values], values, strict=False)]
    _require(list_type == 1, GMM, f"group_list_type={list_type}; allowed: 0 (cumsum), "
             "1 (counts)", GMM_DOC)
    _require(groups != 1, GMM, "group_list_type 1 needs more than one group", GMM_DOC)
    return values


def npu_grouped_matmul(x: list[torch.Tensor], weight: list[torch.Tensor],
                       group_list: torch.Tensor | None = None, split_item: int | None = 0,
                       group_type: int | None = None, group_list_type: int | None = 0,
                       act_type: int | None = 0, output_dtype: int | None = None,
                       **quantized: Any) -> list[torch.Tensor]:
    """The MoE form: one ``x [M, K]``, one ``weight [E, K, N]``, rows grouped along M
    (group_type 0) by ``group_list`` (type 0 cumsum, 1 counts), one output ``[M, N]``
    (split_item 2/3); rows past the groups' sum are undefined (NaN)."""
    _require(0 < len(x) <= GMM_MAX_LIST and 0 < len(weight) <= GMM_MAX_LIST, GMM,
             f"{len(x)} x and {len(weight)} weight tensors; lists of 1..{GMM_MAX_LIST}",
             GMM_DOC)
    for name, t in (("x", x[0]), ("weight", weight[0])):
        require_dtype(GMM, name, t, FLOATS, GMM_DOC + " (int8 is the quantized form)")
    _require(group_type in (-1, 0), GMM, f"group_type={group_type}; allowed: -1, 0", GMM_DOC)
    _require(split_item in (0, 1, 2, 3), GMM, f"split_item={split_item}; allowed: 0-3",
             GMM_DOC)
    given = sorted(k for k, v in quantized.items() if v is not None and not k.endswith("_dtype")
                   and k != "tuning_config")
    if given or act_type or group_type != 0 or split_item not in (2, 3) or len(x) != 1 \
            or len(weight) != 1 or group_list is None:
        raise _not_emulated(GMM, "forms other than one x, one [E, K, N] weight, group_type 0, "
                                 f"split_item 2/3, no activation (got extra {given})")
    a, w = x[0], weight[0]
    _require(a.dim() == 2 and w.dim() == 3 and a.shape[1] == w.shape[1], GMM,
             f"x {list(a.shape)} and weight {list(w.shape)}; x [M, K] and weight [E, K, N]",
             GMM_DOC)
    _require(a.dtype == w.dtype, GMM, f"x {dtype_name(a.dtype)} and weight "
             f"{dtype_name(w.dtype)} differ (unquantized: one dtype)", GMM_DOC)
    _require(a.shape[1] < GMM_INNER_LIMIT and w.shape[2] < GMM_INNER_LIMIT, GMM,
             f"K={a.shape[1]}, N={w.shape[2]}; both must be below {GMM_INNER_LIMIT}", GMM_DOC)
    _require(output_dtype is None, GMM, "output_dtype given for an unquantized matmul "
             "(stricter reading: None, the output takes x's dtype)", GMM_DOC)
    sizes = _group_sizes(group_list, int(group_list_type or 0), w.shape[0])
    rows = sum(sizes)
    _require(rows <= a.shape[0], GMM, f"the groups cover {rows} rows; x has {a.shape[0]}",
             GMM_DOC)
    out = _nan_rows((a.shape[0], w.shape[2]), a.dtype, a.device)
    begin = 0
    for e, n in enumerate(sizes):
        if n:
            out[begin:begin + n] = (a[begin:begin + n].float() @ w[e].float()).to(a.dtype)
        begin += n
    return [out]


#: The MoE kernels with emulated math, by torch_npu name.
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    GATING: npu_moe_gating_top_k,
    ROUTING: npu_moe_init_routing_v2,
    PERMUTE: npu_moe_token_permute,
    UNPERMUTE: npu_moe_token_unpermute,
    GMM: npu_grouped_matmul,
}
