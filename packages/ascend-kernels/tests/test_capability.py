"""supports(op, dtype=, head_dim=, soc=): the capability query passes consult."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels import (
    OP_NAMES,
    supports,
)

from .exact_messages import Message, exact_message_test


@pytest.mark.parametrize("op", OP_NAMES)
def test_cpu_supports_every_op_for_float_dtypes_and_any_head_dim(op: str) -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert supports(op, dtype=dtype, head_dim=72, soc="cpu")
    assert supports(op)  # soc None means the reference kernels
    assert not supports(op, dtype=torch.int32, soc="cpu")


def test_qk_norm_rope_on_npu_only_for_its_head_sizes_and_bf16() -> None:
    op = "split_qkv_rmsnorm_rope"
    assert supports(op, dtype=torch.bfloat16, head_dim=128, soc="A2")
    assert supports(op, dtype="bfloat16", head_dim=64, soc="A3")
    assert not supports(op, dtype=torch.bfloat16, head_dim=96, soc="A2")
    assert not supports(op, dtype=torch.float16, head_dim=128, soc="A2")
    assert not supports(op, dtype=torch.bfloat16, head_dim=128, soc="310P")


def test_mx_quant_only_on_a5() -> None:
    for op in ("dynamic_mx_quant", "add_rms_norm_dynamic_mx_quant", "rms_norm_dynamic_mx_quant"):
        assert supports(op, dtype=torch.bfloat16, soc="A5")
        assert not supports(op, dtype=torch.bfloat16, soc="A2")
        assert not supports(op, dtype=torch.bfloat16, soc="A3")


def test_norm_quant_fusions_need_half_precision_and_310p_has_no_bf16() -> None:
    assert supports("ascend::add_rms_norm_dynamic_quant", dtype=torch.bfloat16, soc="A2")
    assert not supports("add_rms_norm_dynamic_quant", dtype=torch.float32, soc="A2")
    assert supports("rms_norm", dtype=torch.float16, soc="310P")
    assert not supports("rms_norm", dtype=torch.bfloat16, soc="310P")
    assert not supports("bgmv_expand", dtype=torch.bfloat16, soc="A5")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"op": "fused_everything"}, "unknown op"),
        ({"op": "rms_norm", "soc": "910B"}, "unknown soc"),
        ({"op": "rms_norm", "dtype": "bfloat17"}, "not a torch dtype"),
        ({"op": "rms_norm", "head_dim": 0}, "head_dim must be positive"),
    ],
)
def test_bad_queries_are_value_errors(kwargs: dict[str, object], message: str) -> None:
    kwargs = dict(kwargs)  # parametrize values are shared between runs: do not mutate
    op = kwargs.pop("op")
    with pytest.raises(ValueError, match=message):
        supports(op, **kwargs)  # type: ignore[arg-type]


# The whole NPU matrix, restated from the upstream plugin's per-SoC op support and the
# package README: op -> (SoCs, activation dtypes, head sizes or None for any).
ALL_NPUS = {"A2", "A3", "A5", "310P"}
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
SPEC: dict[str, tuple[set[str], set[torch.dtype], set[int] | None]] = {
    "rms_norm": (ALL_NPUS, {F32, BF16, F16}, None),
    "add_rms_norm": (ALL_NPUS, {F32, BF16, F16}, None),
    "quantize": (ALL_NPUS, {F32, BF16, F16}, None),
    "dynamic_quant": (ALL_NPUS, {BF16, F16}, None),
    "add_rms_norm_quant": ({"A2", "A3", "A5"}, {BF16, F16}, None),
    "add_rms_norm_dynamic_quant": ({"A2", "A3", "A5"}, {BF16, F16}, None),
    "dynamic_mx_quant": ({"A5"}, {BF16, F16}, None),
    "add_rms_norm_dynamic_mx_quant": ({"A5"}, {BF16, F16}, None),
    "rms_norm_dynamic_mx_quant": ({"A5"}, {BF16, F16}, None),
    "rotary_embedding": ({"A2", "A3", "A5"}, {F32, BF16, F16}, None),  # npu_mrope, not ATB
    "split_qkv_rmsnorm_rope": ({"A2", "A3", "A5"}, {BF16}, {64, 128}),
    "muls_add": (ALL_NPUS, {F32, BF16, F16}, None),
    "bgmv_expand": ({"A2", "A3", "310P"}, {BF16, F16}, None),
    "sgmv_expand": ({"A2", "A3", "310P"}, {BF16, F16}, None),
    # torch-npu docs: FIA and npu_scatter_pa_kv_cache on A2/A3; FIA's query fp16/bf16.
    "paged_attention": ({"A2", "A3"}, {BF16, F16}, None),
    "reshape_and_cache": ({"A2", "A3"}, {F32, BF16, F16}, None),
}


@pytest.mark.parametrize("soc", sorted(ALL_NPUS))
@pytest.mark.parametrize("op", sorted(SPEC))
def test_npu_matrix_matches_the_documented_table(op: str, soc: str) -> None:
    socs, dtypes, heads = SPEC[op]
    for dtype in (F32, BF16, F16, torch.int8):
        # 310P has no bfloat16 at all.
        expected = soc in socs and dtype in dtypes and not (soc == "310P" and dtype == BF16)
        for head in (None, 63, 64, 96, 128, 256):
            allowed = heads is None or head is None or head in heads
            got = supports(op, dtype=dtype, head_dim=head, soc=soc)
            assert got == (expected and allowed), (op, soc, dtype, head)
    # dtype=None: "is this op there at all on this SoC"
    assert supports(op, soc=soc) == (soc in socs)


def test_every_op_has_a_documented_row() -> None:
    assert set(SPEC) <= set(OP_NAMES) and len(SPEC) == 16


def test_bad_query_messages_are_exact() -> None:
    with pytest.raises(ValueError) as info:
        supports("rms_nrom")
    assert str(info.value) == "unknown op 'rms_nrom'; known ops: " + ", ".join(OP_NAMES)
    with pytest.raises(ValueError) as info:
        supports("rms_norm", soc="910B")
    assert str(info.value) == "unknown soc '910B'; allowed: A2, A3, A5, 310P, cpu"


@pytest.mark.parametrize(("head_dim", "ok"), [(-1, False), (0, False), (1, True), (2, True)])
def test_head_dim_must_be_positive_at_the_boundary(head_dim: int, ok: bool) -> None:
    if ok:
        assert supports("rms_norm", head_dim=head_dim) is True
    else:
        with pytest.raises(ValueError, match=f"^head_dim must be positive, got {head_dim}$"):
            supports("rms_norm", head_dim=head_dim)


I64 = torch.int64


A = torch.ops.ascend


MESSAGES: list[Message] = [
    ("supports dtype", lambda v: supports("rms_norm", dtype="bfloat17"), ValueError,
     "dtype 'bfloat17' is not a torch dtype name (e.g. 'bfloat16')"),
    ("supports head", lambda v: supports("rms_norm", head_dim=-1), ValueError,
     "head_dim must be positive, got -1"),
]


test_exact_message = exact_message_test(MESSAGES)


