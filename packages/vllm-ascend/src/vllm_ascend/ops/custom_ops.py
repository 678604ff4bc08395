"""Out-of-tree CustomOp classes that put ``torch.ops.ascend.*`` into vLLM's models.

vLLM keys its out-of-tree registry by the Python class name being instantiated, so the Ascend
rotary embedding registers under ``"RotaryEmbedding"``; on the host-CPU platform vLLM calls
``forward_cpu``, on the NPU platform ``forward_oot``. Registered once per process
(:func:`register_ascend_custom_ops`); :func:`reset_ascend_custom_ops` undoes it for tests.
"""

from __future__ import annotations

import torch
from vllm.model_executor.custom_op import op_registry_oot
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

from vllm_ascend.ops.moe import AscendUnquantizedFusedMoEMethod


class AscendRotaryEmbedding(RotaryEmbedding):
    """Neox/GPT-J rotary embedding through ``torch.ops.ascend.rotary_embedding``."""

    def _ascend_forward(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if key is None:  # the op rotates q and k together; query-only callers use native
            return self.forward_native(positions, query, key)
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        q_out, k_out = torch.ops.ascend.rotary_embedding(
            positions, query, key, cos_sin_cache, self.head_size, self.rotary_dim,
            self.is_neox_style,
        )
        return q_out, k_out

    def forward_cpu(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._ascend_forward(positions, query, key)

    def forward_oot(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._ascend_forward(positions, query, key)


# vLLM class name -> Ascend replacement.
ASCEND_CUSTOM_OPS: dict[str, type] = {
    "RotaryEmbedding": AscendRotaryEmbedding,
    "UnquantizedFusedMoEMethod": AscendUnquantizedFusedMoEMethod,
}


def register_ascend_custom_ops() -> list[str]:
    """Register every Ascend CustomOp not yet registered; returns the names registered now."""
    import ascend_kernels  # noqa: F401 - registers torch.ops.ascend.*

    done = []
    for name, cls in ASCEND_CUSTOM_OPS.items():
        current = op_registry_oot.get(name)
        if current is cls:
            continue
        if current is not None:
            raise RuntimeError(
                f"vLLM custom op {name!r} is already replaced by {current.__module__}."
                f"{current.__qualname__}; vllm-ascend cannot register {cls.__qualname__}"
            )
        RotaryEmbedding.register_oot(cls, name=name)
        done.append(name)
    return done


def reset_ascend_custom_ops() -> None:
    """Remove the Ascend classes from vLLM's out-of-tree registry (tests)."""
    for name, cls in ASCEND_CUSTOM_OPS.items():
        if op_registry_oot.get(name) is cls:
            del op_registry_oot[name]
