"""Every ``torch.ops.ascend.*`` op against a reference that shares no code with the package.

References: ``torch.nn.functional.rms_norm``; Hugging Face transformers' own modules
(``Qwen3RMSNorm`` for the q/k norm, ``LlamaRotaryEmbedding`` for the cos/sin cache, GPT-NeoX's
``apply_rotary_pos_emb`` for neox-style rope with partial rotary, GPT-J's for the interleaved
style); NumPy float64 (or, where the op's contract is float32 arithmetic, NumPy float32)
written from the math otherwise. Nothing from ``ascend_kernels`` is used but the ops.

Sweeps: eps in {1e-6, 1e-5, 1e-2, 0.1} (large eps and small-magnitude inputs make a wrong
eps placement or an ignored eps visible), float32/bfloat16/float16, odd widths, one shape
spanning several internal chunks, inputs of magnitude 0.05, 1 and 30.

Tolerances, in units in the last place (ulp) of the output dtype at the reference value:
- bfloat16/float16: 1 ulp. The op computes in float32 and rounds once; float32 noise is far
  below half an ulp of these dtypes, so the result is the correctly rounded reference or, when
  the exact value sits within that noise of a rounding midpoint, its neighbour. Where the
  transformers module itself rounds more often (``Qwen3RMSNorm`` rounds the normalised value
  before the weight; the rope then rounds again), the bound is the sum of those roundings,
  stated at each test.
- float32: a few ulps. The op and the reference sum H squares in different orders (and
  torch vectorises its reductions), which moves the mean by a few float32 ulps; rsqrt and two
  multiplies add about one more each. 8 ulps is 5e-7 relative: a wrong formula (e.g.
  ``x / (sqrt(ms) + eps)`` at eps=1e-2) is off by far more.
- int8 results are exact against NumPy float32 (the contract's arithmetic); fused quant ops,
  whose input is a norm that may round to a neighbouring value, are within one step.
"""

from __future__ import annotations

import math

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend; nothing else is used)
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.gpt_neox.modeling_gpt_neox import (
    apply_rotary_pos_emb as neox_apply_rotary,
)
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply_rotary
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

A = torch.ops.ascend
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
EPS = [1e-6, 1e-5, 1e-2, 0.1]
F32_ULPS = 8
ROW_SHAPES = [(1, 1), (3, 7), (2, 3, 33), (5, 4096)]
MANY_ROWS = (300, 2049)  # a large batch of long rows


def _rand(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


def ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype`` at ``|ref|`` (subnormal spacing below the smallest normal)."""
    info = torch.finfo(dtype)
    magnitude = ref.double().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude))) * info.eps


def assert_ulps(
    got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, ulps: float, what: str
) -> None:
    """``|got - ref| <= ulps * ulp(ref)`` element-wise (NaN only where the reference has NaN)."""
    assert got.dtype == dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.shape)
    g, r = got.double(), ref.double()
    nan = torch.isnan(r)
    assert torch.equal(torch.isnan(g), nan), f"{what}: NaN pattern differs"
    err = (g - r).abs()[~nan]
    bound = ulps * ulp(r, dtype)[~nan]
    worst = (err / bound).max().item() if err.numel() else 0.0
    assert worst <= 1.0, f"{what}: off by {worst * ulps:.2f} ulps (allowed {ulps})"


def out_ulps(dtype: torch.dtype) -> float:
    return F32_ULPS if dtype == torch.float32 else 1


def np64(t: torch.Tensor) -> np.ndarray:
    return t.double().numpy()


def np_rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm from its definition, in float64: x / sqrt(mean(x^2) + eps) * w."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


# ---------------------------------------------------------------- rms_norm and add_rms_norm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("eps", "shape"),
    [(eps, shape) for eps in EPS for shape in ROW_SHAPES] + [(1e-6, MANY_ROWS), (0.1, MANY_ROWS)],
    ids=str,
)
def test_rms_norm_equals_torch_rms_norm(
    dtype: torch.dtype, eps: float, shape: tuple[int, ...]
) -> None:
    for magnitude in (0.05, 1.0, 30.0) if shape != MANY_ROWS else (1.0,):
        x = _rand(shape, 1, magnitude).to(dtype)
        w = (_rand(shape[-1:], 2) + 1).to(dtype)
        want = F.rms_norm(x.float(), shape[-1:], w.float(), eps).to(dtype)
        # Both round a float32 computation once: 1 ulp apart at most in any dtype.
        assert_ulps(A.rms_norm(x, w, eps), want.double(), dtype, out_ulps(dtype),
                    f"rms_norm vs F.rms_norm at {magnitude}")
        exact = torch.from_numpy(np_rms_norm(np64(x), np64(w), eps))
        assert_ulps(A.rms_norm(x, w, eps), exact, dtype, out_ulps(dtype), "rms_norm vs float64")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eps", EPS)
def test_rms_norm_equals_qwen3_rmsnorm(dtype: torch.dtype, eps: float) -> None:
    x = _rand((6, 4, 128), 3, 0.3).to(dtype)
    norm = Qwen3RMSNorm(128, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(_rand((128,), 4) + 1)
        norm = norm.to(dtype)
        want = norm(x)
    # Qwen3RMSNorm rounds the normalised value to `dtype`, then multiplies by the weight and
    # rounds again: up to 1 ulp of the normalised value times |w| plus our own rounding.
    w = norm.weight.detach()
    got = A.rms_norm(x, w, eps)
    if dtype == torch.float32:
        assert_ulps(got, want.double(), dtype, F32_ULPS, "rms_norm vs Qwen3RMSNorm")
    else:
        normed = (want.double() / w.double())
        bound = ulp(normed, dtype) * w.double().abs() + ulp(want, dtype)
        assert bool(((got.double() - want.double()).abs() <= bound).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (2, 5, 96)], ids=str)
def test_add_rms_norm_equals_add_then_float64_norm(
    dtype: torch.dtype, eps: float, shape: tuple[int, ...]
) -> None:
    x, r = _rand(shape, 5, 0.2).to(dtype), _rand(shape, 6, 0.2).to(dtype)
    w, b = (_rand(shape[-1:], 7) + 1).to(dtype), _rand(shape[-1:], 8).to(dtype)
    # The norm of the unrounded sum (float32 inside, as Ascend's fused kernel).
    normed = torch.from_numpy(np_rms_norm(np64(x) + np64(r), np64(w), eps))
    out, residual_out = A.add_rms_norm(x, r, w, eps)
    assert torch.equal(residual_out, x + r)  # torch's own add in the input dtype
    assert_ulps(out, normed, dtype, out_ulps(dtype), "add_rms_norm")
    # With a bias the sum can cancel: the float32 error is relative to the norm, not the sum.
    out_b, _ = A.add_rms_norm(x, r, w, eps, b)
    want = normed + b.double()
    bound = (1 if dtype != torch.float32 else 0.5) * ulp(want, dtype) + F32_ULPS * ulp(
        normed, torch.float32
    )
    assert bool(((out_b.double() - want).abs() <= bound).all())


# ---------------------------------------------------------------- int8 quantization


def np_quantize(x: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """int8 round-half-to-even of x / scale + offset in float32 arithmetic (the contract)."""
    value = x.astype(np.float32) / scale.astype(np.float32) + offset.astype(np.float32)
    return np.clip(np.rint(value), -128, 127).astype(np.int8)


def np_dynamic_quant(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: scale = amax / 127 (float32); zero rows: scale 0, q 0."""
    x32 = x.astype(np.float32)
    scale = np.max(np.abs(x32), axis=-1) / np.float32(127)
    divisor = np.where(scale == 0, np.float32(1), scale)[..., None]
    q = np.clip(np.rint(x32 / divisor), -128, 127).astype(np.int8)
    return q, scale.astype(np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (9, 33), (3, 4, 70)], ids=str)
def test_quantize_equals_numpy(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = _rand(shape, 9, 4.0).to(dtype)
    width = shape[-1]
    cases = [
        (torch.tensor([0.05]), torch.tensor([0.0])),
        (torch.tensor([0.5]), torch.tensor([3], dtype=torch.int8)),
        (_rand((width,), 10).abs().float() + 0.01, _rand((width,), 11).round().float()),
    ]
    for scale, offset in cases:
        got = A.quantize(x, scale, offset)
        want = np_quantize(x.float().numpy(), scale.numpy(), offset.numpy())
        assert got.dtype == torch.int8 and np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (9, 33), (3, 4, 70), MANY_ROWS], ids=str)
def test_dynamic_quant_equals_numpy(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = _rand(shape, 12, 3.0).to(dtype)
    x[0] = 0  # an all-zero row
    q, scale = A.dynamic_quant(x)
    want_q, want_scale = np_dynamic_quant(x.float().numpy())
    assert np.array_equal(q.numpy(), want_q)
    assert np.array_equal(scale.numpy(), want_scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("eps", EPS)
def test_fused_norm_quant_ops_equal_float64_norm_then_numpy_quant(
    dtype: torch.dtype, eps: float
) -> None:
    x, r = _rand((11, 96), 13, 0.1).to(dtype), _rand((11, 96), 14, 0.1).to(dtype)
    w, b = (_rand((96,), 15) + 1).to(dtype), (_rand((96,), 16) * 0.1).to(dtype)
    summed = x + r
    # The contract quantizes the norm output as stored in `dtype`; a float64 norm rounded to
    # `dtype` may be one ulp away from the op's, which moves q by at most one step.
    # The norm reads the unrounded sum (float32 inside, as Ascend's fused kernel).
    normed = torch.from_numpy(np_rms_norm(np64(x) + np64(r), np64(w), eps) + np64(b)).to(dtype)
    scale, offset = torch.tensor([0.01]), torch.tensor([1.0])
    q, residual_out = A.add_rms_norm_quant(x, r, w, scale, offset, eps, b)
    assert torch.equal(residual_out, summed)
    want = np_quantize(normed.float().numpy(), scale.numpy(), offset.numpy())
    assert np.abs(q.numpy().astype(int) - want.astype(int)).max() <= 1
    assert (q.numpy() == want).mean() > 0.95
    qd, scale_d, residual_d = A.add_rms_norm_dynamic_quant(x, r, w, eps, b)
    want_q, want_scale = np_dynamic_quant(normed.float().numpy())
    assert torch.equal(residual_d, summed)
    assert np.abs(qd.numpy().astype(int) - want_q.astype(int)).max() <= 1
    assert np.allclose(scale_d.numpy(), want_scale, rtol=2 * torch.finfo(dtype).eps, atol=0)


# ---------------------------------------------------------------- MX fp8


def np_round_e4m3(v: np.ndarray) -> np.ndarray:
    """Round float64 values (|v| <= 448) to float8 e4m3fn, nearest with ties to even."""
    magnitude = np.abs(v)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    step = np.exp2(np.maximum(exponent, -6.0) - 3.0)  # 3 mantissa bits; subnormals below 2^-6
    return np.rint(v / step) * step


def np_mx_quant(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OCP MX v1.0 e4m3: per 32 values, scale 2^(floor(log2 amax) - 8) in [2^-127, 2^127]."""
    width = x.shape[-1]
    blocks = -(-width // 32)
    padded = np.zeros((*x.shape[:-1], blocks * 32))
    padded[..., :width] = x
    grouped = padded.reshape(*x.shape[:-1], blocks, 32)
    amax = np.max(np.abs(grouped), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(amax)) - 8
    exponent = np.clip(np.nan_to_num(exponent, nan=-127, neginf=-127), -127, 127)
    scale = np.exp2(exponent)
    scale = np.where(np.isfinite(amax), scale, np.nan)
    q = np_round_e4m3(np.clip(grouped / scale[..., None], -448, 448))
    return q.reshape(*x.shape[:-1], blocks * 32)[..., :width], scale


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 32), (5, 40), (2, 3, 97)], ids=str)
def test_dynamic_mx_quant_equals_numpy_ocp_mx(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    for magnitude in (1e-30, 2.0**-10, 1.0, 3e4):
        x = _rand(shape, 17, magnitude).to(dtype)
        q, scale = A.dynamic_mx_quant(x)
        want_q, want_scale = np_mx_quant(x.double().numpy())
        assert np.array_equal(scale.float().double().numpy(), want_scale, equal_nan=True)
        # Overflowed inputs (float16 at 3e4) make inf/NaN blocks: NaN scale and NaN values.
        assert np.array_equal(q.float().double().numpy(), want_q, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("eps", EPS)
def test_norm_mx_quant_ops_equal_float64_norm_then_numpy_mx(
    dtype: torch.dtype, eps: float
) -> None:
    x, r = _rand((7, 70), 18, 0.1).to(dtype), _rand((7, 70), 19, 0.1).to(dtype)
    w = (_rand((70,), 20) + 1).to(dtype)
    for op, inputs, summed in (
        ("rms_norm_dynamic_mx_quant", (x, w, eps), x),
        ("add_rms_norm_dynamic_mx_quant", (x, r, w, eps), x + r),
    ):
        out = getattr(A, op)(*inputs)
        normed = torch.from_numpy(np_rms_norm(np64(summed), np64(w), eps)).to(dtype)
        want_q, want_scale = np_mx_quant(normed.double().numpy())
        got_q = out[0].float().double().numpy()
        # A one-ulp different norm value can round to the neighbouring e4m3 value (or, at a
        # block amax just below a power of two, change the scale); allow one e4m3 step.
        step = np.exp2(np.floor(np.log2(np.maximum(np.abs(want_q), 2.0**-6))) - 3)
        scale_full = np.repeat(want_scale, 32, axis=-1)[..., :70]
        assert np.all(np.abs(got_q * np.repeat(out[1].float().double().numpy(), 32, axis=-1)
                             [..., :70] - want_q * scale_full) <= step * scale_full * 2)
        assert (out[1].float().double().numpy() == want_scale).mean() > 0.9
        if op.startswith("add"):
            assert torch.equal(out[2], summed)


# ---------------------------------------------------------------- rotary embedding


def hf_cos_sin(rotary_dim: int, max_position: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-width cos/sin ``[max_position, rotary_dim]`` from transformers' Llama rope."""
    config = LlamaConfig(
        hidden_size=rotary_dim, num_attention_heads=1, head_dim=rotary_dim,
        max_position_embeddings=max_position,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    cos, sin = LlamaRotaryEmbedding(config)(torch.zeros(1), torch.arange(max_position)[None])
    return cos[0], sin[0]


def vllm_cache(cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """vLLM's layout: ``[max_position, rotary_dim]``, the cos half then the sin half."""
    half = cos.shape[-1] // 2
    return torch.cat([cos[:, :half], sin[:, :half]], dim=-1).to(dtype)


def hf_rope(
    x: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor, rotary_dim: int,
    is_neox: bool,
) -> torch.Tensor:
    """x ``[T, heads, head]`` rotated by transformers' GPT-NeoX (neox) or GPT-J (gptj) code."""
    half = rotary_dim // 2
    cos_half, sin_half = cache.float()[positions, :half], cache.float()[positions, half:]
    x32 = x.float()
    if is_neox:
        cos = torch.cat([cos_half, cos_half], -1)[None]
        sin = torch.cat([sin_half, sin_half], -1)[None]
        qb = x32.transpose(0, 1)[None]  # [1, heads, T, head]
        out, _ = neox_apply_rotary(qb, qb, cos, sin)
        return out[0].transpose(0, 1)
    rotated = gptj_apply_rotary(x32[None, ..., :rotary_dim], sin_half[None], cos_half[None])
    return torch.cat([rotated[0], x32[..., rotary_dim:]], dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize(("head_size", "rotary_dim"), [(64, 64), (96, 32), (80, 80), (6, 2)])
def test_rotary_embedding_equals_transformers(
    dtype: torch.dtype, is_neox: bool, head_size: int, rotary_dim: int
) -> None:
    tokens, max_position = 9, 40
    cache = vllm_cache(*hf_cos_sin(rotary_dim, max_position), dtype)
    positions = torch.tensor([0, 39, 5, 5, 17, 1, 38, 22, 3])
    q = _rand((tokens, 3, head_size), 21).to(dtype)
    k = _rand((tokens, 2 * head_size), 22).to(dtype)
    q_out, k_out = A.rotary_embedding(positions, q, k, cache, head_size, rotary_dim, is_neox)
    want_q = hf_rope(q, positions, cache, rotary_dim, is_neox)
    want_k = hf_rope(k.view(tokens, 2, head_size), positions, cache, rotary_dim, is_neox)
    # Same float32 formula on both sides, one rounding to `dtype`: 1 ulp (float32: 2 ulps for
    # the fused/unfused multiply-add difference).
    ulps = 2 if dtype == torch.float32 else 1
    assert_ulps(q_out, want_q.double(), dtype, ulps, "q")
    assert_ulps(k_out, want_k.reshape(tokens, -1).double(), dtype, ulps, "k")
    assert torch.equal(q_out[..., rotary_dim:], q[..., rotary_dim:])  # pass-through


# ---------------------------------------------------------------- qk-norm + rope (Qwen3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_split_qkv_rmsnorm_rope_equals_qwen3_norm_and_transformers_rope(
    dtype: torch.dtype, eps: float, is_neox: bool
) -> None:
    tokens, head, qh, kh, rotary_dim = 7, 64, 4, 2, 64
    qkv = _rand((tokens, (qh + 2 * kh) * head), 23, 0.05).to(dtype)
    positions = torch.tensor([3, 0, 31, 8, 8, 2, 30])
    cache = vllm_cache(*hf_cos_sin(rotary_dim, 32), dtype)
    q_norm, k_norm = Qwen3RMSNorm(head, eps=eps), Qwen3RMSNorm(head, eps=eps)
    with torch.no_grad():
        q_norm.weight.copy_(_rand((head,), 24) + 1)
        k_norm.weight.copy_(_rand((head,), 25) + 1)
    qw, kw = q_norm.weight.detach().to(dtype), k_norm.weight.detach().to(dtype)
    q, k, v = A.split_qkv_rmsnorm_rope(
        qkv, qw, kw, positions, cache, qh * head, kh * head, head, rotary_dim, is_neox, eps
    )
    assert torch.equal(v, qkv[:, (qh + kh) * head:])
    # Reference in float32 end to end (Qwen3RMSNorm on float32 values: no rounding in it).
    q32, k32 = q_norm.float(), k_norm.float()
    with torch.no_grad():
        q_n = q32(qkv[:, : qh * head].float().view(tokens, qh, head))
        k_n = k32(qkv[:, qh * head: (qh + kh) * head].float().view(tokens, kh, head))
    want_q = hf_rope(q_n, positions, cache, rotary_dim, is_neox).reshape(tokens, -1)
    want_k = hf_rope(k_n, positions, cache, rotary_dim, is_neox).reshape(tokens, -1)
    for got, want, n in ((q, want_q, qh), (k, want_k, kh)):
        if dtype == torch.float32:
            assert_ulps(got, want.double(), dtype, F32_ULPS, "split_qkv_rmsnorm_rope")
            continue
        # The op stores the norm in `dtype` (0.5 ulp of the normed value, rotated with
        # |cos| + |sin| <= sqrt(2)) and rounds the rope output (0.5 ulp of the output): bound
        # 1 ulp of the largest value of the head plus 1 ulp of the output.
        head_max = want.view(tokens, n, head).abs().amax(-1, keepdim=True)
        bound = (ulp(head_max, dtype) + ulp(want.view(tokens, n, head), dtype)).reshape(
            tokens, -1
        )
        err = (got.double() - want.double()).abs()
        assert bool((err <= bound).all()), f"max excess {(err / bound).max().item():.2f}"


@pytest.mark.parametrize("eps", EPS)
def test_split_qkv_rmsnorm_rope_biases_follow_the_float64_math(eps: float) -> None:
    tokens, head, rotary_dim = 5, 32, 16
    qkv = _rand((tokens, 4 * head), 26, 0.05).float()
    qw, kw, qb, kb = (_rand((head,), s).float() for s in (27, 28, 29, 30))
    positions = torch.tensor([1, 0, 7, 3, 3])
    cache = vllm_cache(*hf_cos_sin(rotary_dim, 8), torch.float32)
    q, k, _ = A.split_qkv_rmsnorm_rope(
        qkv, qw, kw, positions, cache, 2 * head, head, head, rotary_dim, True, eps, qb, kb
    )
    half = rotary_dim // 2
    cos = np64(cache[positions, :half])[:, None, :]
    sin = np64(cache[positions, half:])[:, None, :]
    for got, part, w, b in ((q, qkv[:, : 2 * head], qw, qb), (k, qkv[:, 2 * head: 3 * head], kw,
                                                             kb)):
        x = np_rms_norm(np64(part).reshape(tokens, -1, head), np64(w), eps) + np64(b)
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
        rotated = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rotary_dim:]],
                                 axis=-1)
        # The rotation can cancel: float32 error is relative to the head's largest value.
        head_max = torch.from_numpy(np.abs(x).max(axis=-1, keepdims=True))
        bound = (F32_ULPS * ulp(head_max, torch.float32)).expand(tokens, -1, head)
        err = (got.double().view(tokens, -1, head) - torch.from_numpy(rotated)).abs()
        assert bool((err <= bound).all()), f"max excess {(err / bound).max().item():.2f}"


# ---------------------------------------------------------------- muls_add and LoRA


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale", [0.37, -2.5, 1e-3, 1.0 / 3.0])
@pytest.mark.parametrize("shape", [(), (1,), (7, 33), MANY_ROWS], ids=str)
def test_muls_add_equals_float64_math(
    dtype: torch.dtype, scale: float, shape: tuple[int, ...]
) -> None:
    x, y = _rand(shape, 31, 3.0).to(dtype), _rand(shape, 32).to(dtype)
    got = A.muls_add(x, y, scale)
    product = torch.from_numpy(np.asarray(np64(x) * np.float64(np.float32(scale))))
    y64 = torch.from_numpy(np.asarray(np64(y)))
    want = product + y64
    # One rounding to `dtype` (0.5 ulp; 1 ulp for the half dtypes, whose midpoint can be
    # crossed by float32 noise) plus float32's rounding of the product and of the sum (each
    # 2^-24 relative to its operands).
    slack = 2.0**-23 * (product.abs() + y64.abs())
    err = (got.double() - want).abs()
    bound = (0.5 if dtype == torch.float32 else 1) * ulp(want, dtype) + slack
    assert got.dtype == dtype and bool((err <= bound).all())


def np_expand(
    x: np.ndarray, w: np.ndarray, idx: np.ndarray, y: np.ndarray, offset: int, size: int
) -> np.ndarray:
    """y with y[t, offset:offset+size] += w[idx[t]] @ x[t] for idx[t] >= 0, in float64."""
    out = y.copy()
    for t, lora in enumerate(idx):
        if lora >= 0:
            out[t, offset: offset + size] += w[lora] @ x[t]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lora_expand_ops_equal_float64_math(dtype: torch.dtype) -> None:
    tokens, rank, size, loras = 9, 16, 24, 3
    x = _rand((tokens, rank), 33).to(dtype)
    w = _rand((loras, size, rank), 34, 0.5).to(dtype)
    y = _rand((tokens, 70), 35).to(dtype)
    idx = torch.tensor([0, 2, -1, 1, 1, 0, -1, 2, 2])
    got = A.bgmv_expand(x, w, idx, y, 5, size)
    want = torch.from_numpy(np_expand(np64(x), np64(w), idx.numpy(), np64(y), 5, size))
    # float32 accumulation of `rank` products (2^-24 each, relative to the sum of |terms|)
    # and one rounding to `dtype`.
    terms = torch.from_numpy(np_expand(np.abs(np64(x)), np.abs(np64(w)), idx.numpy(),
                                       np.abs(np64(y)), 5, size))
    bound = ulp(want, dtype) * (0.5 if dtype == torch.float32 else 1) + terms * rank * 2.0**-24
    assert bool(((got.double() - want).abs() <= bound).all())
    assert torch.equal(got[:, :5], y[:, :5]) and torch.equal(got[:, 5 + size:], y[:, 5 + size:])
    seq_len, lora_indices = torch.tensor([2, 0, 4, 3]), torch.tensor([1, 0, -1, 2])
    got_s = A.sgmv_expand(x, w, lora_indices, seq_len, y, 5, size)
    per_token = np.repeat(lora_indices.numpy(), seq_len.numpy())
    want_s = torch.from_numpy(np_expand(np64(x), np64(w), per_token, np64(y), 5, size))
    assert bool(((got_s.double() - want_s).abs() <= bound.max()).all())


def test_helpers_agree_on_known_values() -> None:
    # The references themselves, on values worked out by hand.
    assert np.allclose(np_rms_norm(np.array([[3.0, 4.0]]), np.ones(2), 0.0),
                       [[3 / math.sqrt(12.5), 4 / math.sqrt(12.5)]])
    # Ties to even in [16, 32) (step 2) and among subnormals (step 2^-9); exact values stay.
    assert np_round_e4m3(np.array([17.0, 19.0, 1.5 * 2**-9, 3 * 2**-9, 448.0])).tolist() == [
        16.0, 20.0, 2**-8, 3 * 2**-9, 448.0]
    assert np_quantize(np.array([0.5, 1.5, 2.5, 300.0]), np.array([1.0]),
                       np.array([0.0])).tolist() == [0, 2, 2, 127]
    assert ulp(torch.tensor([1.0]), torch.bfloat16).item() == 2.0**-7
