"""``vllm_ascend::attention_with_kv_update``: one call that writes the KV cache and attends.

The op runs against vLLM's real CPU attention backend (its kernels, its metadata) for a prefill
then a decode step, and must give what vLLM's two ops give, bit for bit, and what causal
attention written out in float32 gives, to bf16 tolerance.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vllm_ascend_testing.cpu_attention import (
    AttentionShape,
    attention_context,
    cpu_attention_layer,
    cpu_attention_metadata,
    fused_attention,
    layer_name,
    vllm_attention,
)

SHAPE = AttentionShape(heads=4, kv_heads=2, head=64, block=32, blocks=4)
PROMPT_LENS = (5, 3)  # two requests: prefill 5 and 3 tokens, then one decode token each


@pytest.fixture
def cpu_attention(make_vllm_config: Any) -> Any:
    """A factory of attention layers of vLLM's CPU backend: ``layer(impl_cls=..., **impl_kw)``."""
    config = make_vllm_config(dtype="bfloat16")

    def layer(impl_cls: type | None = None, **impl_kw: Any) -> Any:
        return cpu_attention_layer(config, SHAPE, impl_cls, **impl_kw)

    return layer


def _steps() -> list[tuple[list[int], list[int]]]:
    prefill = list(PROMPT_LENS)
    return [(prefill, prefill), ([1, 1], [n + 1 for n in PROMPT_LENS])]


def _qkv(tokens: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    def draw(heads: int) -> torch.Tensor:
        return torch.randn(tokens, heads, SHAPE.head, generator=generator).to(torch.bfloat16)

    return draw(SHAPE.heads), draw(SHAPE.kv_heads), draw(SHAPE.kv_heads)


def _run(layer: Any, call: Any, seed: int = 0) -> list[torch.Tensor]:
    """Both steps through ``call(q, k, v, out, layer_name)`` under a real forward context."""
    from vllm.forward_context import override_forward_context

    generator = torch.Generator().manual_seed(seed)
    outputs = []
    for query_lens, seq_lens in _steps():
        metadata = cpu_attention_metadata(query_lens, seq_lens, SHAPE, layer.isa)
        q, k, v = _qkv(sum(query_lens), generator)
        out = torch.full_like(q, float("nan"))
        with override_forward_context(attention_context("attn", layer, metadata)):
            call(q, k, v, out, layer_name("attn"))
        outputs.append(out)
    return outputs


def _reference(seed: int = 0) -> list[torch.Tensor]:
    """Causal attention over each request's tokens so far, in float32, GQA written out."""
    generator = torch.Generator().manual_seed(seed)
    history: list[list[torch.Tensor]] = [[], []]  # per request: (k, v) rows so far
    group = SHAPE.heads // SHAPE.kv_heads
    outputs = []
    for query_lens, _ in _steps():
        q, k, v = (t.float() for t in _qkv(sum(query_lens), generator))
        rows, start = [], 0
        for request, n in enumerate(query_lens):
            history[request].append(torch.stack([k[start:start + n], v[start:start + n]]))
            kv = torch.cat(history[request], dim=1)  # [2, seq, kv heads, head]
            keys = kv[0].repeat_interleave(group, dim=1)
            values = kv[1].repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q[start:start + n], keys) * SHAPE.scale
            seq = keys.shape[0]
            visible = torch.arange(seq)[None, :] <= torch.arange(seq - n, seq)[:, None]
            weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
            rows.append(torch.einsum("hqk,khd->qhd", weights, values))
            start += n
        outputs.append(torch.cat(rows))
    return outputs


def test_the_fused_op_equals_vllms_two_ops_bit_for_bit_and_the_written_out_attention(
    cpu_attention: Any,
) -> None:
    from vllm_ascend.ops.attention_kv import CPUAttentionKernels

    unfused, fused = cpu_attention(), cpu_attention()
    expected = _run(unfused, vllm_attention)
    got = _run(fused, fused_attention)
    assert isinstance(fused._ascend_cpu_attention_kernels, CPUAttentionKernels)  # fast path
    for step_got, step_expected, reference in zip(got, expected, _reference(), strict=True):
        assert torch.equal(step_got, step_expected)
        torch.testing.assert_close(step_got.float(), reference, atol=2e-2, rtol=2e-2)
    assert torch.equal(fused.kv_cache, unfused.kv_cache)
    # Request i's tokens went to block i (the kernel's layout inside a block is its own).
    assert fused.kv_cache[:len(PROMPT_LENS)].flatten(1).ne(0).any(dim=1).all()
    assert fused.kv_cache[len(PROMPT_LENS):].eq(0).all()


def test_another_backend_goes_through_vllms_own_bodies_with_the_same_result(
    cpu_attention: Any,
) -> None:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    calls: list[str] = []

    class OtherImpl(CPUAttentionBackendImpl):
        def do_kv_cache_update(self, *args: Any) -> None:
            calls.append("update")
            super().do_kv_cache_update(*args)

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("forward")
            return super().forward(*args, **kwargs)

    other = cpu_attention(OtherImpl)
    got = _run(other, fused_attention)
    assert other._ascend_cpu_attention_kernels is False  # not the CPU backend itself
    assert calls == ["update", "forward"] * 2  # written before attending, each step
    for step_got, step_expected in zip(got, _run(cpu_attention(), vllm_attention), strict=True):
        assert torch.equal(step_got, step_expected)


def test_steps_without_slots_or_metadata_touch_nothing(cpu_attention: Any) -> None:
    from vllm.forward_context import override_forward_context

    layer = cpu_attention()
    layer.kv_cache = torch.empty(0)  # before the KV cache exists (profiling runs)
    q, k, v = _qkv(3, torch.Generator().manual_seed(1))
    out = torch.zeros_like(q)
    with override_forward_context(attention_context("attn", layer, None)):
        fused_attention(q, k, v, out, layer_name("attn"))
    assert torch.equal(out, torch.zeros_like(q))


def test_eligibility_of_the_direct_kernels(cpu_attention: Any) -> None:
    import types

    from vllm.v1.attention.backend import AttentionType
    from vllm_ascend.ops.attention_kv import CPUAttentionKernels

    assert CPUAttentionKernels.for_layer(cpu_attention()) is not None
    sinks = torch.zeros(SHAPE.heads, dtype=torch.bfloat16)
    assert CPUAttentionKernels.for_layer(cpu_attention(sinks=sinks)) is None
    assert CPUAttentionKernels.for_layer(
        cpu_attention(attn_type=AttentionType.ENCODER_ONLY)) is None
    assert CPUAttentionKernels.for_layer(types.SimpleNamespace(impl=object())) is None


def test_registration_and_the_handles_the_pass_gets() -> None:
    from vllm_ascend.ops.attention_kv import attention_op_handles, register_attention_op

    handles = attention_op_handles()
    assert register_attention_op() is False  # already defined by the call above
    fused = torch.ops.vllm_ascend.attention_with_kv_update.default
    assert handles == (torch.ops.vllm.unified_kv_cache_update.default,
                       torch.ops.vllm.unified_attention_with_output.default, fused)
    schema = fused._schema
    vllm_schema = torch.ops.vllm.unified_attention_with_output.default._schema
    assert [a.name for a in schema.arguments] == ["query", "key", "value", "output", "layer_name"]
    # layer_name has the type vLLM's own attention op gives it in this vLLM/torch
    assert str(schema.arguments[4].type) == str(vllm_schema.arguments[4].type)
    assert schema.arguments[3].alias_info is not None and schema.arguments[3].alias_info.is_write
    assert len(schema.returns) == 0
