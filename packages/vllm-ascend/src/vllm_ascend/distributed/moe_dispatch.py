"""MoE dispatch/combine over ``torch.distributed``: the ALLGATHER and ALLTOALL methods, each giving
the complete MoE output of the tokens this rank owns.
"""
# Rows travel as one float32 [hidden | topk weights | topk ids] tensor (ids exact below 2**24): one
# collective per exchange. All ranks pick the same method from the DP-wide token count.

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist

from vllm_ascend.distributed.moe_comm import MoECommType
from vllm_ascend.distributed.moe_experts import ExpertPlacement, ExpertWeights, expert_outputs

MAX_PACKED_EXPERT_ID = 2**24


class MoECommMethod(Protocol):
    """One way of moving tokens to their experts and the results back."""

    comm_type: MoECommType

    def __call__(
        self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
        experts: ExpertWeights, placement: ExpertPlacement, group: dist.ProcessGroup,
    ) -> torch.Tensor: ...


def own_rows(num_tokens: int, size: int, rank: int) -> tuple[int, int]:
    """``[start, end)`` of rank ``rank``'s rows of ``num_tokens`` split into ``size`` chunks."""
    if size < 1 or not 0 <= rank < size or num_tokens < 0:
        raise ValueError(f"need num_tokens >= 0 and 0 <= rank < size, got {num_tokens=},"
                         f" {rank=}, {size=}")
    base, extra = divmod(num_tokens, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _pack(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    return torch.cat(
        [x.to(torch.float32), topk_weights.to(torch.float32), topk_ids.to(torch.float32)], dim=1
    )


def _unpack(rows: torch.Tensor, hidden: int, top_k: int) -> tuple[torch.Tensor, ...]:
    x, weights, ids = rows.split([hidden, top_k, top_k], dim=1)
    return x, weights, ids.to(torch.int64)


def _check(topk_ids: torch.Tensor, placement: ExpertPlacement) -> None:
    if placement.owner.numel() > MAX_PACKED_EXPERT_ID:
        raise ValueError(
            f"{placement.owner.numel()} experts: ids travel as float32, at most"
            f" {MAX_PACKED_EXPERT_ID} experts are allowed"
        )
    if topk_ids.numel() and int(topk_ids.max()) >= placement.owner.numel():
        raise ValueError(
            f"expert id {int(topk_ids.max())} out of range for"
            f" {placement.owner.numel()} experts"
        )


def _counts(num_rows: int, group: dist.ProcessGroup, size: int) -> list[int]:
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([num_rows], dtype=torch.int64), group=group)
    return [int(c) for c in counts]


class AllGatherDispatch:
    """Gather every token, compute local experts, reduce-scatter the sums (see module doc)."""

    comm_type = MoECommType.ALLGATHER

    def __call__(
        self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
        experts: ExpertWeights, placement: ExpertPlacement, group: dist.ProcessGroup,
    ) -> torch.Tensor:
        _check(topk_ids, placement)
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        tokens, hidden = x.shape
        top_k = topk_ids.shape[1]
        counts = _counts(tokens, group, size)
        longest = max(counts)
        if longest == 0:  # every rank knows: nobody has tokens
            return x.new_zeros(0, hidden)
        # gloo gathers equal sizes only: pad every rank's rows to the longest.
        padded = torch.zeros(longest, hidden + 2 * top_k, dtype=torch.float32)
        padded[:tokens] = _pack(x, topk_weights, topk_ids)
        gathered = [torch.empty_like(padded) for _ in range(size)]
        dist.all_gather(gathered, padded, group=group)
        rows = torch.cat([g[:n] for g, n in zip(gathered, counts, strict=True)])
        all_x, all_weights, all_ids = _unpack(rows, hidden, top_k)
        partial = expert_outputs(all_x, all_weights, placement.local_ids_on(rank, all_ids),
                                 experts)
        pieces = []
        for piece, n in zip(partial.split(counts), counts, strict=True):
            pieces.append(torch.cat([piece, piece.new_zeros(longest - n, hidden)]))
        mine = torch.empty(longest, hidden, dtype=torch.float32)
        dist.reduce_scatter(mine, pieces, group=group)
        return mine[:tokens].to(x.dtype)


class AllToAllDispatch:
    """Send each token to the owners of its experts and the results back (see module doc)."""

    comm_type = MoECommType.ALLTOALL

    def __call__(
        self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
        experts: ExpertWeights, placement: ExpertPlacement, group: dist.ProcessGroup,
    ) -> torch.Tensor:
        _check(topk_ids, placement)
        size = dist.get_world_size(group)
        tokens, hidden = x.shape
        top_k = topk_ids.shape[1]
        ids = topk_ids.to(torch.int64)
        owners, local = placement.owner[ids], placement.local_id[ids]
        # One (token, destination) row per rank holding at least one of the token's experts;
        # the row carries only that rank's local ids (-1 for the token's other experts).
        send_tokens, send_ids = [], []
        for dest in range(size):
            on_dest = owners == dest
            rows = on_dest.any(dim=1).nonzero().squeeze(1)
            send_tokens.append(rows)
            send_ids.append(torch.where(on_dest[rows], local[rows], -1))
        send_counts = [int(t.numel()) for t in send_tokens]
        token_of = torch.cat(send_tokens)
        payload = _pack(x[token_of], topk_weights[token_of], torch.cat(send_ids))
        recv_counts_t = torch.empty(size, dtype=torch.int64)
        dist.all_to_all_single(recv_counts_t, torch.tensor(send_counts, dtype=torch.int64),
                               group=group)
        recv_counts = [int(n) for n in recv_counts_t]
        received = payload.new_empty(sum(recv_counts), payload.shape[1])
        dist.all_to_all_single(received, payload, recv_counts, send_counts, group=group)
        in_x, in_weights, in_ids = _unpack(received, hidden, top_k)
        results = expert_outputs(in_x, in_weights, in_ids, experts)
        returned = results.new_empty(sum(send_counts), hidden)
        dist.all_to_all_single(returned, results, send_counts, recv_counts, group=group)
        out = torch.zeros(tokens, hidden, dtype=torch.float32)
        out.index_add_(0, token_of, returned)
        return out.to(x.dtype)


def replicated_share(
    x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, method: MoECommMethod,
    experts: ExpertWeights, placement: ExpertPlacement, group: dist.ProcessGroup,
) -> torch.Tensor:
    """This rank's additive share of the MoE output of tokens every rank of ``group`` holds: its own
    rows through ``method``, zeros elsewhere (vLLM's all-reduce sums the shares)."""
    start, end = own_rows(x.shape[0], dist.get_world_size(group), dist.get_rank(group))
    share = torch.zeros_like(x)
    share[start:end] = method(x[start:end], topk_weights[start:end], topk_ids[start:end],
                              experts, placement, group)
    return share


def host_cpu_comm_methods() -> dict[MoECommType, MoECommMethod]:
    """The methods the host-CPU platform can execute (MC2 variants need NPU hardware)."""
    return {MoECommType.ALLGATHER: AllGatherDispatch(), MoECommType.ALLTOALL: AllToAllDispatch()}
