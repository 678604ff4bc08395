"""``supports``: which kernels a pass may insert, and the host CPU as the default SoC."""

from __future__ import annotations

import torch
from ascend_graph.capability import supports


def test_capability_default_soc_is_the_host_cpu() -> None:
    for op in ("rms_norm_dynamic_mx_quant", "add_rms_norm_quant", "split_qkv_rmsnorm_rope"):
        for dtype in (torch.float32, torch.bfloat16):
            assert supports(op, dtype=dtype) is supports(op, dtype=dtype, soc="cpu")
    assert supports("rms_norm_dynamic_mx_quant", dtype=torch.float32) is True
