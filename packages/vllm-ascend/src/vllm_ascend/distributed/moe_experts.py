"""One rank's routed experts in plain torch (float32 results), and where every expert lives in an EP
group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


@dataclass(frozen=True)
class ExpertWeights:
    """The experts held by one rank (vLLM's ``w13 [L, 2I, H]``, ``w2 [L, H, I]``)."""

    w13: torch.Tensor
    w2: torch.Tensor
    w13_bias: torch.Tensor | None = None
    w2_bias: torch.Tensor | None = None
    activation: str = "silu"
    weight_on_input: bool = False

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"MoE activation {self.activation!r} is not supported;"
                f" allowed: {', '.join(ACTIVATIONS)}"
            )
        if self.w13.dim() != 3 or self.w2.dim() != 3 or self.w13.shape[0] != self.w2.shape[0]:
            raise ValueError(
                "expert weights must be w13 [E, 2*I, H] and w2 [E, H, I] with the same E, got"
                f" {list(self.w13.shape)} and {list(self.w2.shape)}"
            )
        if self.w13.shape[1] != 2 * self.w2.shape[2] or self.w13.shape[2] != self.w2.shape[1]:
            raise ValueError(
                f"w13 {list(self.w13.shape)} and w2 {list(self.w2.shape)} disagree on H or I"
            )

    @property
    def num_local(self) -> int:
        return int(self.w13.shape[0])

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Local expert ``e`` applied to float32 rows ``x`` (float32 result)."""
        h = x @ self.w13[e].to(torch.float32).T
        if self.w13_bias is not None:
            h = h + self.w13_bias[e].to(torch.float32)
        gate, up = h.chunk(2, dim=-1)
        y = (ACTIVATIONS[self.activation](gate) * up) @ self.w2[e].to(torch.float32).T
        if self.w2_bias is not None:
            y = y + self.w2_bias[e].to(torch.float32)
        return y


def expert_outputs(
    x: torch.Tensor, topk_weights: torch.Tensor, local_ids: torch.Tensor, experts: ExpertWeights
) -> torch.Tensor:
    """Float32 ``[T, H]`` router-weighted sum of each token's local experts (ids ``>= 0``)."""
    tokens, top_k = local_ids.shape
    out = torch.zeros(tokens, x.shape[-1], dtype=torch.float32, device=x.device)
    if tokens == 0:
        return out
    flat_ids = local_ids.reshape(-1).to(torch.int64)
    flat_weights = topk_weights.reshape(-1).to(torch.float32)
    token_of = torch.arange(tokens, device=x.device).repeat_interleave(top_k)
    x32 = x.to(torch.float32)
    for e in torch.unique(flat_ids[flat_ids >= 0]).tolist():
        if e >= experts.num_local:
            raise ValueError(f"local expert id {e} out of range for {experts.num_local} experts")
        entries = (flat_ids == e).nonzero().squeeze(1)
        rows, weights = token_of[entries], flat_weights[entries].unsqueeze(1)
        if experts.weight_on_input:
            out.index_add_(0, rows, experts.expert(e, x32[rows] * weights))
        else:
            out.index_add_(0, rows, experts.expert(e, x32[rows]) * weights)
    return out


@dataclass(frozen=True)
class ExpertPlacement:
    """Owner rank and local id of every global expert of an EP group."""

    owner: torch.Tensor  # [num_experts] int64
    local_id: torch.Tensor  # [num_experts] int64

    @classmethod
    def from_expert_maps(cls, maps: Sequence[torch.Tensor]) -> ExpertPlacement:
        """From each rank's vLLM ``expert_map``; every expert must be held by exactly one rank."""
        table = torch.stack([m.to(torch.int64) for m in maps])
        held = (table >= 0).sum(dim=0)
        if not bool((held == 1).all()):
            bad = (held != 1).nonzero().squeeze(1).tolist()
            raise ValueError(f"experts {bad} are not held by exactly one EP rank")
        owner = (table >= 0).to(torch.int64).argmax(dim=0)
        local_id = table.gather(0, owner.unsqueeze(0)).squeeze(0)
        return cls(owner, local_id)

    @classmethod
    def single_rank(cls, num_experts: int) -> ExpertPlacement:
        """Every expert on rank 0 under its global id (no expert parallelism)."""
        ids = torch.arange(num_experts, dtype=torch.int64)
        return cls(torch.zeros_like(ids), ids)

    def local_ids_on(self, rank: int, topk_ids: torch.Tensor) -> torch.Tensor:
        """``topk_ids`` (global) as local ids of ``rank``; -1 where another rank holds it."""
        ids = topk_ids.to(torch.int64)
        return torch.where(self.owner[ids] == rank, self.local_id[ids], -1)
