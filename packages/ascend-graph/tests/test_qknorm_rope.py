"""qknorm_rope: split + per-head q/k RMSNorm (+bias) + rope -> split_qkv_rmsnorm_rope."""

from __future__ import annotations

import operator

import ascend_kernels
import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.fusion_passes import QKNormRopePass
from ascend_graph.passes.qknorm_rope import FUSED_OP
from torch.fx.experimental.proxy_tensor import make_fx

FUSED = "ascend.split_qkv_rmsnorm_rope"


def _inputs(dtype: torch.dtype, tokens: int = 6, hidden: int = 128) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(2)
    return torch.randint(0, 64, (tokens,), generator=gen), torch.randn(
        tokens, hidden, generator=gen
    ).to(dtype)


def _fused_nodes(result):
    return [
        n for gm in result.graphs for n in gm.graph.nodes
        if n.op == "call_function" and str(n.target) == "ascend.split_qkv_rmsnorm_rope.default"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("dtype", "dynamic", "bias", "three_splits"),
    [
        (torch.float32, False, False, True),  # fp32 graphs: one split node per getitem
        (torch.bfloat16, False, True, False),  # bf16 graphs: one split, three getitems
        (torch.float32, True, True, False),
        (torch.bfloat16, True, False, True),
    ],
)
def test_fuses(models, compile_module, close, dtype, dynamic, bias, three_splits) -> None:
    module = models["qknorm"](bias=bias, three_splits=three_splits).to(dtype)
    result = compile_module(module, _inputs(dtype), dynamic=dynamic)
    assert result.symbolic() == dynamic
    counts = result.op_counts()
    assert counts[FUSED] == 1 and result.report["qknorm_rope"] == 1
    assert counts["ascend.rms_norm"] == 0 and counts["ascend.rotary_embedding"] == 0
    assert counts["aten.split_with_sizes"] == 0  # v now comes from the fused op
    (node,) = _fused_nodes(result)
    # q_size, kv_size, head_size, rotary_dim, is_neox, eps
    assert node.args[5:11] == (128, 64, 32, 32, True, 1e-6)
    assert (node.args[11] is None) == (not bias)
    close(result.outputs, result.reference, dtype)


def test_two_models_with_different_head_sizes_get_their_own_patterns(
    models, compile_module, close
) -> None:
    small = models["qknorm"](heads=4, kv_heads=2, head_dim=32)
    wide = models["qknorm"](hidden=128, heads=2, kv_heads=1, head_dim=64)
    cfg_small = {"qknorm_shapes": [(32, 128, 64)]}
    cfg_wide = {"qknorm_shapes": [(64, 128, 64)]}
    a = compile_module(small, _inputs(torch.float32), config=cfg_small)
    b = compile_module(wide, _inputs(torch.float32), config=cfg_wide)
    assert a.report["qknorm_rope"] == b.report["qknorm_rope"] == 1
    assert _fused_nodes(a)[0].args[5:8] == (128, 64, 32)
    assert _fused_nodes(b)[0].args[5:8] == (128, 64, 64)
    close(a.outputs, a.reference, torch.float32)
    close(b.outputs, b.reference, torch.float32)
    # the small model's registration does not match the wide model (and vice versa)
    crossed = compile_module(wide, _inputs(torch.float32), config=cfg_small)
    assert crossed.report["qknorm_rope"] == 0


@pytest.mark.parametrize(
    ("kwargs", "config"),
    [
        ({"k_eps": 1e-5}, None),  # q and k norms disagree on eps
        ({"q_extra_user": True}, None),  # normed q heads also used elsewhere
        ({}, {"soc": "A2"}),  # A2 kernel: bf16 with head size 128 only
        ({"eps": 1e-4}, None),  # eps not registered
    ],
)
def test_near_misses_are_left_alone(models, compile_module, close, kwargs, config) -> None:
    result = compile_module(models["qknorm"](**kwargs), _inputs(torch.float32), config=config)
    counts = result.op_counts()
    assert result.report["qknorm_rope"] == 0 and counts[FUSED] == 0
    assert counts["ascend.rotary_embedding"] == 1 and counts["ascend.rms_norm"] == 2
    close(result.outputs, result.reference, torch.float32)


def test_unsupported_head_size_on_npu_soc_is_not_registered() -> None:
    assert not ascend_kernels.supports(FUSED_OP, dtype=torch.bfloat16, head_dim=32, soc="A2")
    assert QKNormRopePass(soc="A2", shapes=[(32, 128, 64)]).patterns == ()
    registered = QKNormRopePass(soc="A2", shapes=[(128, 512, 128)]).patterns
    assert registered and {p.settings["dtype"] for p in registered} == {torch.bfloat16}


def test_mixed_streams_never_fuse() -> None:
    pattern = QKNormRopePass(dtypes=["float32"]).patterns[0]
    gm = make_fx(pattern.search, tracing_mode="fake")(*pattern.example_inputs())
    rope = next(n for n in gm.graph.nodes if "rotary" in str(n.target))
    rope.meta["stream_label"] = "aux"
    assert GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["qknorm_rope"] == 0
    del rope.meta["stream_label"]
    assert GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["qknorm_rope"] == 1
    assert not [n for n in gm.graph.nodes if n.target is operator.getitem and not n.users]
