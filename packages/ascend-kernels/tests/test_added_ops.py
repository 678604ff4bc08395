"""The ops added for vLLM CustomOps: ``silu_and_mul`` and ``mrotary_embedding``.

Golden values come from math written out in float64 (SwiGLU) and from Hugging Face
transformers' Qwen2-VL / Qwen3-VL rotary modules (MRoPE, sectioned and interleaved); the NPU
adapters are driven through the recording fake ``torch_npu``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

A = torch.ops.ascend


# ---------------------------------------------------------------- silu_and_mul
def _silu64(v: float) -> float:
    return v / (1.0 + math.exp(-v))


def test_silu_and_mul_golden_values_written_out() -> None:
    x = torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.0, 10.0, -7.0, 2.0]])
    got = A.silu_and_mul(x)
    want = [
        [_silu64(1.0) * 3.0, _silu64(-2.0) * 0.5],  # 2.1931757..., -0.1192029...
        [_silu64(0.0) * -7.0, _silu64(10.0) * 2.0],  # 0, 19.9990920...
    ]
    assert got.shape == (2, 2) and got.dtype == torch.float32
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_silu_and_mul_rounds_once_in_reduced_precision(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    x = (4 * torch.randn(7, 3, 2 * 33, generator=g)).to(dtype)
    got = A.silu_and_mul(x)
    once = A.silu_and_mul(x.float()).to(dtype)  # float32 compute, one cast
    assert got.shape == (7, 3, 33) and got.dtype == dtype
    assert torch.equal(got, once)


def _eager_swiglu(x: torch.Tensor) -> torch.Tensor:
    # Eager silu on the strided half may take a scalar path that differs in the last ulp
    # from its vectorised one; a contiguous gate is the reference arithmetic.
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d].contiguous()) * x[..., d:]


def test_silu_and_mul_float32_equals_eager_swiglu_bitwise() -> None:
    x = torch.randn(37, 2 * 129, generator=torch.Generator().manual_seed(0))
    assert torch.equal(A.silu_and_mul(x), _eager_swiglu(x))


def test_silu_and_mul_many_rows_and_none() -> None:
    x = torch.randn(50, 2 * 9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(A.silu_and_mul(x), _eager_swiglu(x))
    assert A.silu_and_mul(torch.empty(0, 8)).shape == (0, 4)


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.ones(3, 5),
         r"^x must have an even, non-empty last dim \[\.\.\., 2 \* d\], got \[3, 5\]$"),
        (torch.ones(3, 0), "^x must have an even, non-empty last dim"),
        (torch.ones(1), "^x must have an even, non-empty last dim"),  # d would be 0.5
        (torch.tensor(2.0), "^x must have an even, non-empty last dim"),
        (torch.ones(3, 4, dtype=torch.int32), "^x must be float32, bfloat16 or float16"),
    ],
)
def test_silu_and_mul_bad_input(x: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        A.silu_and_mul(x)


# ---------------------------------------------------------------- mrotary_embedding
HEAD, HEADS, KV_HEADS, TOKENS, MAX_POS = 32, 2, 1, 5, 64


def _vllm_cache(inv_freq: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    t = torch.arange(MAX_POS, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    assert freqs.shape[1] == rotary_dim // 2
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def _hf_mrope(
    arch: str, section: list[int], positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """transformers' text rotary module and apply_rotary_pos_emb -> (q, k, vLLM cache)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
    if arch == "qwen2_vl":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (
            Qwen2VLRotaryEmbedding as Rope,
        )
        from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb

        config: Any = Qwen2VLTextConfig(
            hidden_size=HEAD * HEADS, num_attention_heads=HEADS, head_dim=HEAD,
            rope_parameters=rope,
        )
    else:
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import (
            Qwen3VLTextRotaryEmbedding as Rope,
        )
        from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

        config = Qwen3VLTextConfig(
            hidden_size=HEAD * HEADS, num_attention_heads=HEADS, head_dim=HEAD,
            rope_parameters=rope,
        )
    module = Rope(config)
    cos, sin = module(torch.zeros(1), positions[:, None, :])  # [1, T, HEAD]
    q4 = q.view(TOKENS, HEADS, HEAD).transpose(0, 1)[None]  # [1, heads, T, HEAD]
    k4 = k.view(TOKENS, KV_HEADS, HEAD).transpose(0, 1)[None]
    q_hf, k_hf = apply_rotary_pos_emb(q4, k4, cos, sin)
    back = (lambda t: t[0].transpose(0, 1).reshape(TOKENS, -1))  # noqa: E731
    return back(q_hf), back(k_hf), _vllm_cache(module.inv_freq, HEAD)


@pytest.mark.parametrize(
    ("arch", "section", "interleaved"),
    [("qwen2_vl", [4, 6, 6], False), ("qwen3_vl", [6, 5, 5], True)],
)
def test_mrope_matches_transformers_multimodal_rotary(
    arch: str, section: list[int], interleaved: bool
) -> None:
    g = torch.Generator().manual_seed(7)
    positions = torch.randint(0, MAX_POS, (3, TOKENS), generator=g)
    q = torch.randn(TOKENS, HEADS * HEAD, generator=g)
    k = torch.randn(TOKENS, KV_HEADS * HEAD, generator=g)
    q_hf, k_hf, cache = _hf_mrope(arch, section, positions, q, k)
    q_out, k_out = A.mrotary_embedding(positions, q, k, cache, HEAD, HEAD, section, True,
                                       interleaved)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    assert torch.allclose(q_out, q_hf, atol=1e-5) and torch.allclose(k_out, k_hf, atol=1e-5)
    # The other layout gives other values: the section layout really is applied.
    q_other, _ = A.mrotary_embedding(positions, q, k, cache, HEAD, HEAD, section, True,
                                     not interleaved)
    assert not torch.allclose(q_other, q_hf, atol=1e-3)


def test_mrope_with_text_positions_is_rotary_embedding() -> None:
    g = torch.Generator().manual_seed(2)
    positions = torch.randint(0, MAX_POS, (TOKENS,), generator=g)
    q = torch.randn(TOKENS, HEADS, HEAD, generator=g)
    k = torch.randn(TOKENS, KV_HEADS, HEAD, generator=g)
    cache = torch.randn(MAX_POS, 16, generator=g)
    for neox in (True, False):
        got = A.mrotary_embedding(positions, q, k, cache, HEAD, 16, [2, 3, 3], neox, False)
        want = A.rotary_embedding(positions, q, k, cache, HEAD, 16, neox)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_mrope_equal_position_rows_reduce_to_rotary_embedding() -> None:
    """When T, H and W positions agree every section reads the same cache row."""
    g = torch.Generator().manual_seed(4)
    text = torch.randint(0, MAX_POS, (TOKENS,), generator=g)
    q = torch.randn(TOKENS, HEADS * HEAD, generator=g).to(torch.bfloat16)
    k = torch.randn(TOKENS, KV_HEADS * HEAD, generator=g).to(torch.bfloat16)
    cache = torch.randn(MAX_POS, HEAD, generator=g).to(torch.bfloat16)
    for interleaved in (False, True):
        got = A.mrotary_embedding(text.expand(3, -1), q, k, cache, HEAD, HEAD, [4, 6, 6],
                                  False, interleaved)
        want = A.rotary_embedding(text, q, k, cache, HEAD, HEAD, False)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"section": [4, 6, 5]}, r"must add up to rotary_dim / 2 = 16"),
        ({"section": [8, 8]}, "3 non-negative sizes"),
        ({"positions": torch.zeros(2, TOKENS, dtype=torch.long)}, r"\[T\] or \[3, T\]"),
        ({"positions": torch.zeros(3, TOKENS)}, "positions must be an int32 or int64 tensor"),
        ({"rotary_dim": 20}, r"cos_sin_cache must be \[max_position > 0, rotary_dim=20\]"),
        ({"q": torch.zeros(TOKENS, 33)}, r"q must be \[T=5, heads \* 32\]"),
        # Positions at the cache's edge: -1 (would wrap to the last row) and MAX_POS.
        ({"positions": torch.tensor([[0] * TOKENS] * 2 + [[0, 1, 2, 3, -1]])},
         r"positions must lie in \[0, 64\) .* got values in \[-1, 3\]"),
        ({"positions": torch.tensor([[0, 1, 2, 3, MAX_POS]] * 3)},
         r"positions must lie in \[0, 64\) .* got values in \[0, 64\]"),
    ],
)
def test_mrope_bad_input(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "positions": torch.zeros(3, TOKENS, dtype=torch.long),
        "q": torch.zeros(TOKENS, HEADS * HEAD), "k": torch.zeros(TOKENS, HEAD),
        "cache": torch.zeros(MAX_POS, HEAD), "rotary_dim": HEAD, "section": [4, 6, 6],
    }  # fmt: skip
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        A.mrotary_embedding(args["positions"], args["q"], args["k"], args["cache"], HEAD,
                            args["rotary_dim"], args["section"], True, False)


# ---------------------------------------------------------------- NPU adapters (fake torch_npu)
# The fake kernels of tools.npu_seam: the real npu_swiglu / npu_mrope schemas (mrope_section
# and rotary_mode are keyword-only), outputs shaped by the wheel's meta functions.
def test_silu_and_mul_maps_to_npu_swiglu(fake_npu_on_cpu: Any) -> None:
    x = torch.randn(3, 8).to(torch.bfloat16)
    out = A.silu_and_mul(x)
    assert fake_npu_on_cpu.kernels.names() == ["npu_swiglu"]
    (arg,), kwargs = fake_npu_on_cpu.calls[0].args, fake_npu_on_cpu.calls[0].kwargs
    assert arg is x and kwargs == {"dim": -1}
    assert out.shape == (3, 4) and torch.equal(out, fake_npu_on_cpu.calls[0].outputs)


def _mrope_inputs(dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    q = torch.randn(TOKENS, HEADS, HEAD).to(dtype)
    k = torch.randn(TOKENS, KV_HEADS, HEAD).to(dtype)
    return q, k, torch.randn(MAX_POS, HEAD).to(dtype), torch.randint(0, MAX_POS, (3, TOKENS))


def test_mrope_maps_to_npu_mrope_sections_and_modes(fake_npu_on_cpu: Any) -> None:
    q, k, cache, mm = _mrope_inputs()
    q_out, k_out = A.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [4, 6, 6], True, False)
    name, args, kwargs = fake_npu_on_cpu.calls[-1]
    assert name == "npu_mrope" and args[1].shape == (TOKENS, HEADS * HEAD) and args[4] == HEAD
    assert torch.equal(args[0], mm) and torch.equal(args[3], cache)
    assert torch.equal(args[1], q.reshape(TOKENS, -1))
    assert torch.equal(args[2], k.reshape(TOKENS, -1))
    assert kwargs == {"mrope_section": [4, 6, 6], "rotary_mode": "half"}
    outputs = fake_npu_on_cpu.calls[-1].outputs
    assert q_out.shape == q.shape and torch.equal(q_out.reshape(TOKENS, -1), outputs[0])
    assert torch.equal(k_out.reshape(TOKENS, -1), outputs[1])
    A.mrotary_embedding(mm[0], q, k, cache, HEAD, HEAD, [4, 6, 6], False, False)
    assert fake_npu_on_cpu.calls[-1].kwargs == {"mrope_section": [0, 0, 0],
                                                "rotary_mode": "interleave"}
    # Interleaved sections and partial rotary are not the kernel's: the reference runs.
    count = len(fake_npu_on_cpu.calls)
    got = A.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], True, True)
    partial = A.mrotary_embedding(mm, q, k, cache[:, :16], HEAD, 16, [2, 3, 3], True, False)
    assert len(fake_npu_on_cpu.calls) == count
    from ascend_kernels.ops import mrope as ops_mrope  # the reference, called directly

    want = ops_mrope.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], True, True)
    want_partial = ops_mrope.mrotary_embedding(mm, q, k, cache[:, :16], HEAD, 16, [2, 3, 3],
                                               True, False)
    assert all(map(torch.equal, got, want)) and all(map(torch.equal, partial, want_partial))
    sectioned = ops_mrope.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], True, False)
    gptj = ops_mrope.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], False, True)
    assert not torch.equal(want[0], sectioned[0]) and not torch.equal(want[0], gptj[0])


@pytest.mark.parametrize(
    ("head", "dtype", "kernel"),
    [(48, torch.bfloat16, False), (48, torch.float16, False), (48, torch.float32, True),
     (40, torch.float32, False), (64, torch.bfloat16, True)],
)
def test_mrope_rotary_sizes_npu_mrope_rejects_run_the_reference(
    fake_npu_on_cpu: Any, head: int, dtype: torch.dtype, kernel: bool
) -> None:
    # npu_mrope: rotary_dim a multiple of 32 for fp16/bf16, of 16 for float32.
    q = torch.randn(TOKENS, head).to(dtype)
    k = torch.randn(TOKENS, head).to(dtype)
    cache = torch.randn(MAX_POS, head).to(dtype)
    mm = torch.randint(0, MAX_POS, (3, TOKENS))
    section = [head // 4, head // 8, head // 2 - head // 4 - head // 8]
    got = A.mrotary_embedding(mm, q, k, cache, head, head, section, True, False)
    assert (fake_npu_on_cpu.kernels.names() == ["npu_mrope"]) is kernel
    if not kernel:
        from ascend_kernels.ops import mrope as ops_mrope

        want = ops_mrope.mrotary_embedding(mm, q, k, cache, head, head, section, True, False)
        assert all(map(torch.equal, got, want))


def test_silu_and_mul_boundary_shapes_are_accepted() -> None:
    # 1-D input (the smallest rank) and an empty middle dim: shapes from the math, values eager.
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    assert torch.equal(A.silu_and_mul(x), _eager_swiglu(x))
    torch.testing.assert_close(A.silu_and_mul(torch.ones(2)), torch.tensor([_silu64(1.0)]))
    assert A.silu_and_mul(torch.empty(2, 0, 4)).shape == (2, 0, 2)


def test_silu_and_mul_out_names_a_wrong_out() -> None:
    from ascend_kernels.ops import spec

    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match=r"^out must be a contiguous torch.float32 tensor of shape"
                                         r" \[3, 4\], got torch.float32 \[3, 8\]"):
        spec("silu_and_mul").out(x, out=torch.empty(3, 8))
    out = torch.empty(3, 4)
    assert spec("silu_and_mul").out(x, out=out) is out
    assert torch.equal(out, _eager_swiglu(x))


@pytest.mark.parametrize("start", [1, 3_000_000])  # out starts inside x: behind or ahead
def test_silu_and_mul_out_refuses_an_out_that_shares_memory_with_x(start: int) -> None:
    # With out ahead of x in one buffer, rows of out overwrote rows of x not yet read: a
    # silently wrong result over many chunks. Refused, like the other _out ops.
    from ascend_kernels.ops import spec

    buf = torch.randn(6_400_000 + start)
    x = buf[:6_400_000].view(100_000, 64)
    before = buf.clone()
    with pytest.raises(ValueError, match=r"^out must not share memory with x$"):
        spec("silu_and_mul").out(x, out=buf[start:start + 3_200_000].view(100_000, 32))
    assert torch.equal(buf, before)
    whole = torch.cat([x.reshape(-1), torch.empty(3_200_000)])  # out right after x: allowed
    x, out = whole[:6_400_000].view(100_000, 64), whole[6_400_000:].view(100_000, 32)
    assert torch.equal(spec("silu_and_mul").out(x, out=out), _eager_swiglu(x))
