"""``vllm_ascend::attention_with_kv_update``: one call that writes the KV cache and attends.

The op runs against vLLM's real CPU attention backend (its kernels, its metadata) for a prefill
then a decode step, and must give what vLLM's two ops give, bit for bit, and what causal
attention written out in float32 gives, to bf16 tolerance.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

HEADS, KV_HEADS, HEAD = 4, 2, 64
BLOCK, BLOCKS = 32, 4
SCALE = HEAD**-0.5
PROMPT_LENS = (5, 3)  # two requests: prefill 5 and 3 tokens, then one decode token each


@pytest.fixture
def cpu_attention(make_vllm_config: Any) -> Any:
    """A factory of attention layers of vLLM's CPU backend: ``layer(impl_cls=..., **impl_kw)``."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl, _get_attn_isa

    config = make_vllm_config(dtype="bfloat16")

    def layer(impl_cls: type = CPUAttentionBackendImpl, **impl_kw: Any) -> Any:
        with set_current_vllm_config(config):
            impl = impl_cls(num_heads=HEADS, head_size=HEAD, scale=SCALE, num_kv_heads=KV_HEADS,
                            alibi_slopes=None, sliding_window=None, kv_cache_dtype="auto",
                            **impl_kw)
        return types.SimpleNamespace(
            impl=impl, isa=_get_attn_isa(torch.bfloat16, BLOCK, HEAD),
            kv_cache=torch.zeros(BLOCKS, KV_HEADS, BLOCK, 2 * HEAD, dtype=torch.bfloat16),
            _k_scale_float=1.0, _v_scale_float=1.0,
        )

    return layer


def _layer_name(name: str) -> Any:
    from vllm.utils.torch_utils import LayerNameType

    return LayerNameType(name)


def _metadata(query_lens: list[int], seq_lens: list[int], isa: str) -> Any:
    """CPU attention metadata for requests with these query and total lengths; request i owns
    block i, so token t of it sits in slot i * BLOCK + t."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    seqs = torch.tensor(seq_lens, dtype=torch.int32)
    slots = torch.cat([torch.arange(s - q, s) + i * BLOCK
                       for i, (q, s) in enumerate(zip(query_lens, seq_lens, strict=True))])
    scheduler = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(query_lens), num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD,
        seq_lens=seqs, dtype=torch.bfloat16, query_start_loc=starts, causal=True,
        sliding_window_size=-1, isa=isa, enable_kv_split=False,
    )
    return CPUAttentionMetadata(
        num_actual_tokens=int(starts[-1]), max_query_len=max(query_lens), query_start_loc=starts,
        max_seq_len=max(seq_lens), seq_lens=seqs,
        block_table=torch.arange(len(query_lens), dtype=torch.int32)[:, None],
        slot_mapping=slots.long(), scheduler_metadata=scheduler,
    )


def _steps() -> list[tuple[list[int], list[int]]]:
    prefill = list(PROMPT_LENS)
    return [(prefill, prefill), ([1, 1], [n + 1 for n in PROMPT_LENS])]


def _qkv(tokens: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    def draw(heads: int) -> torch.Tensor:
        return torch.randn(tokens, heads, HEAD, generator=generator).to(torch.bfloat16)

    return draw(HEADS), draw(KV_HEADS), draw(KV_HEADS)


def _run(layer: Any, call: Any, seed: int = 0) -> list[torch.Tensor]:
    """Both steps through ``call(q, k, v, out, layer_name)`` under a real forward context."""
    from vllm.forward_context import ForwardContext, override_forward_context

    generator = torch.Generator().manual_seed(seed)
    outputs = []
    for query_lens, seq_lens in _steps():
        metadata = _metadata(query_lens, seq_lens, layer.isa)
        q, k, v = _qkv(sum(query_lens), generator)
        out = torch.full_like(q, float("nan"))
        context = ForwardContext(no_compile_layers={"attn": layer},
                                 attn_metadata={"attn": metadata},
                                 slot_mapping={"attn": metadata.slot_mapping})
        with override_forward_context(context):
            call(q, k, v, out, _layer_name("attn"))
        outputs.append(out)
    return outputs


def _vllm_ops(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              name: Any) -> None:
    dependency = torch.ops.vllm.unified_kv_cache_update(k, v, name)
    torch.ops.vllm.unified_attention_with_output(q, k, v, out, name,
                                                 kv_cache_dummy_dep=dependency)


def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
           name: Any) -> None:
    from vllm_ascend.ops.attention_kv import register_attention_op

    register_attention_op()
    torch.ops.vllm_ascend.attention_with_kv_update(q, k, v, out, name)


def _reference(seed: int = 0) -> list[torch.Tensor]:
    """Causal attention over each request's tokens so far, in float32, GQA written out."""
    generator = torch.Generator().manual_seed(seed)
    history: list[list[torch.Tensor]] = [[], []]  # per request: (k, v) rows so far
    outputs = []
    for query_lens, _ in _steps():
        q, k, v = (t.float() for t in _qkv(sum(query_lens), generator))
        rows, start = [], 0
        for request, n in enumerate(query_lens):
            history[request].append(torch.stack([k[start:start + n], v[start:start + n]]))
            kv = torch.cat(history[request], dim=1)  # [2, seq, kv heads, head]
            keys = kv[0].repeat_interleave(HEADS // KV_HEADS, dim=1)
            values = kv[1].repeat_interleave(HEADS // KV_HEADS, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q[start:start + n], keys) * SCALE
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
    expected = _run(unfused, _vllm_ops)
    got = _run(fused, _fused)
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
    got = _run(other, _fused)
    assert other._ascend_cpu_attention_kernels is False  # not the CPU backend itself
    assert calls == ["update", "forward"] * 2  # written before attending, each step
    for step_got, step_expected in zip(got, _run(cpu_attention(), _vllm_ops), strict=True):
        assert torch.equal(step_got, step_expected)


def test_steps_without_slots_or_metadata_touch_nothing(cpu_attention: Any) -> None:
    from vllm.forward_context import ForwardContext, override_forward_context

    layer = cpu_attention()
    layer.kv_cache = torch.empty(0)  # before the KV cache exists (profiling runs)
    q, k, v = _qkv(3, torch.Generator().manual_seed(1))
    out = torch.zeros_like(q)
    context = ForwardContext(no_compile_layers={"attn": layer}, attn_metadata={},
                             slot_mapping={})
    context.attn_metadata = {"attn": None}
    with override_forward_context(context):
        _fused(q, k, v, out, _layer_name("attn"))
    assert torch.equal(out, torch.zeros_like(q))


def test_eligibility_of_the_direct_kernels(cpu_attention: Any) -> None:
    from vllm.v1.attention.backend import AttentionType
    from vllm_ascend.ops.attention_kv import CPUAttentionKernels

    assert CPUAttentionKernels.for_layer(cpu_attention()) is not None
    sinks = torch.zeros(HEADS, dtype=torch.bfloat16)
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
