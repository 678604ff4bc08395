"""MoE dispatch/combine on an NPU with torch_npu's kernels: the ALLGATHER and ALLTOALL methods
(``reference/npu-moe-quant-facts.md`` section 1.3), each returning this rank's additive share.
"""
# ALLGATHER stays on the device (capturable); ALLTOALL copies split sizes to the host.

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from vllm_ascend.distributed.moe_comm import MoECommType
from vllm_ascend.distributed.moe_dispatch import own_rows


@dataclass(frozen=True)
class NpuExperts:
    """One rank's experts in the grouped-matmul layout (``w13 [L, H, 2I]``, ``w2 [L, I, H]``) and
    its EP rank and size."""

    w13: torch.Tensor
    w2: torch.Tensor
    rank: int = 0
    size: int = 1

    @property
    def num_local(self) -> int:
        return int(self.w13.shape[0])


def _tnpu() -> Any:
    # torch_npu is optional (the ``npu`` extra): looked up when an NPU forward runs.
    return importlib.import_module("torch_npu")


def _mlp(tnpu: Any, rows: torch.Tensor, counts: torch.Tensor,
         experts: NpuExperts) -> torch.Tensor:
    """The local experts' gated MLP over rows sorted by local expert (rows past the counts: 0)."""
    cumsum = counts.cumsum(0)
    h = tnpu.npu_grouped_matmul([rows], [experts.w13], group_list=cumsum, split_item=2,
                                group_type=0, group_list_type=0)[0]
    h = tnpu.npu_swiglu(h)
    y = tnpu.npu_grouped_matmul([h], [experts.w2], group_list=cumsum, split_item=2,
                                group_type=0, group_list_type=0)[0]
    valid = torch.arange(y.shape[0], device=y.device) < cumsum[-1]
    return torch.where(valid.unsqueeze(1), y, torch.zeros((), dtype=y.dtype, device=y.device))


def _counts(keys: torch.Tensor, bins: int) -> torch.Tensor:
    """Int64 count per bin of ``keys`` in ``[0, bins)``, on the device."""
    flat = keys.reshape(-1).to(torch.int64)
    return torch.zeros(bins, dtype=torch.int64, device=keys.device).scatter_add_(
        0, flat, torch.ones_like(flat))


NORM_TYPES = {"softmax": 0, "sigmoid": 1}


def npu_route(router_logits: torch.Tensor, top_k: int, *, renormalize: bool,
              scoring_func: str = "softmax", routed_scaling_factor: float = 1.0,
              bias: torch.Tensor | None = None, num_expert_group: int | None = None,
              topk_group: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights float32, topk_ids int32)`` by ``npu_moe_gating_top_k``, renormalised here
    when the model asks."""
    # The kernel's renorm takes only 0.
    if scoring_func not in NORM_TYPES:
        raise ValueError(f"MoE scoring function {scoring_func!r} is not supported on the NPU; "
                         f"allowed: {', '.join(NORM_TYPES)}")
    weights, ids, _ = _tnpu().npu_moe_gating_top_k(
        router_logits, top_k, bias=bias, k_group=topk_group or 1,
        group_count=num_expert_group or 1, renorm=0, norm_type=NORM_TYPES[scoring_func])
    weights = weights.to(torch.float32)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if routed_scaling_factor != 1.0:
        weights = weights * routed_scaling_factor
    return weights, ids


class NpuAllGather:
    """Every rank computes its local experts for every token (see the module doc)."""

    comm_type = MoECommType.ALLGATHER
    host_syncs = False

    def __call__(self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 experts: NpuExperts, group: Any) -> torch.Tensor:
        tnpu = _tnpu()
        local_num = experts.num_local
        local = topk_ids.to(torch.int32) - experts.rank * local_num
        is_local = (local >= 0) & (local < local_num)
        # non-local entries get the key L, so they sort after every local expert
        keyed = torch.where(is_local, local, torch.full_like(local, local_num))
        rows, sorted_indices = tnpu.npu_moe_token_permute(x, keyed)
        counts = _counts(keyed, local_num + 1)[:local_num]
        y = _mlp(tnpu, rows, counts, experts)
        out: torch.Tensor = tnpu.npu_moe_token_unpermute(y, sorted_indices,
                                                         probs=topk_weights.to(x.dtype))
        return out


class NpuAllToAll:
    """Each entry travels to the rank owning its expert and back (see the module doc)."""

    comm_type = MoECommType.ALLTOALL
    host_syncs = True

    def __call__(self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 experts: NpuExperts, group: Any) -> torch.Tensor:
        tnpu = _tnpu()
        start, end = own_rows(x.shape[0], experts.size, experts.rank)
        share = torch.zeros_like(x)
        mine, ids = x[start:end], topk_ids[start:end].to(torch.int32)
        local_num = experts.num_local
        rows, sorted_indices = tnpu.npu_moe_token_permute(mine, ids)
        # the expert of each permuted row (rows are sorted by expert, so by owner rank too)
        row_expert = torch.empty(ids.numel(), dtype=torch.int32, device=x.device)
        row_expert[sorted_indices.to(torch.int64)] = ids.reshape(-1)
        send_counts = _counts(ids // local_num, experts.size)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=group)
        # the split sizes reach the host: this method cannot be captured in a graph
        send, recv = send_counts.tolist(), recv_counts.tolist()
        received = rows.new_empty(sum(recv), rows.shape[1])
        dist.all_to_all_single(received, rows, recv, send, group=group)
        received_expert = row_expert.new_empty(sum(recv))
        dist.all_to_all_single(received_expert, row_expert, recv, send, group=group)
        local = received_expert - experts.rank * local_num
        local_rows, local_sorted = tnpu.npu_moe_token_permute(received, local)
        y = _mlp(tnpu, local_rows, _counts(local, local_num), experts)
        results = tnpu.npu_moe_token_unpermute(y, local_sorted)
        returned = results.new_empty(rows.shape[0], rows.shape[1])
        dist.all_to_all_single(returned, results, send, recv, group=group)
        share[start:end] = tnpu.npu_moe_token_unpermute(
            returned, sorted_indices, probs=topk_weights[start:end].to(x.dtype))
        return share


def npu_comm_methods() -> dict[MoECommType, Any]:
    """The methods the NPU runtime executes (MC2 is not among them yet)."""
    return {MoECommType.ALLGATHER: NpuAllGather(), MoECommType.ALLTOALL: NpuAllToAll()}
