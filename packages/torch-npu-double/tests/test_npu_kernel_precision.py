"""The emulated torch_npu kernels round bfloat16 once: each output is the float64 math of its
bfloat16 inputs, rounded once to bfloat16 (the documented kernels compute in float32 inside
and cast at the end; the harness README's contracts list). A kernel that rounded an intermediate
to bfloat16 (the residual sum before the norm, silu before the product, q.k^T, the softmax)
would miss the correctly rounded value at a large share of the elements.

Expected values: the math written out here in float64 on the inputs the kernel was given.
A float32 computation rounded once matches the correctly rounded value except where the
exact value lies within float32's error of a bfloat16 rounding midpoint (a few elements in
a thousand), and there it is one bfloat16 step off: hence "at least 99% exact, none more
than one step off". One fresh process (the device install is process-wide) runs the kernels
and saves their inputs and outputs.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch_npu_double.fresh_interpreter import run_json

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "1"}
F64, BF16 = torch.float64, torch.bfloat16
EPS = 1e-6
#: FIA case: two prefills (one over a cached prefix) and two decodes, GQA 9/3, head dim 64,
#: 128-token blocks: the SmolLM2 shapes the numerics benchmark runs.
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 128
Q_LENS, KV_LENS = [40, 1, 24, 1], [40, 200, 150, 7]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("precision") / "kernels.pt"
    run_json(f"""
        import json, torch, torch_npu
        torch.manual_seed(0)
        bf = torch.bfloat16
        def npu(t):
            return t.to("npu")
        saved = {{}}
        x1, x2 = torch.randn(64, 256).to(bf), torch.randn(64, 256).to(bf)
        gamma = (torch.rand(256) + 0.5).to(bf)
        y, rstd, summed = torch_npu.npu_add_rms_norm(npu(x1), npu(x2), npu(gamma), epsilon={EPS})
        saved["add_rms_norm"] = dict(x1=x1, x2=x2, gamma=gamma, y=y.cpu(), rstd=rstd.cpu(),
                                     summed=summed.cpu())
        y, rstd = torch_npu.npu_rms_norm(npu(x1), npu(gamma), epsilon={EPS})
        saved["rms_norm"] = dict(x=x1, gamma=gamma, y=y.cpu(), rstd=rstd.cpu())
        gate_up = (torch.randn(64, 512) * 3).to(bf)
        saved["swiglu"] = dict(x=gate_up, y=torch_npu.npu_swiglu(npu(gate_up), dim=-1).cpu())
        positions = torch.randint(0, 2048, (64,))
        inv = 1.0 / 10000 ** (torch.arange(0, {HEAD_DIM}, 2, dtype=torch.float64) / {HEAD_DIM})
        angles = torch.arange(2048, dtype=torch.float64)[:, None] * inv[None]
        cache = torch.cat([angles.cos(), angles.sin()], -1).to(bf)
        q = torch.randn(64, {HEADS * HEAD_DIM}).to(bf)
        k = torch.randn(64, {KV_HEADS * HEAD_DIM}).to(bf)
        q_out, k_out = torch_npu.npu_mrope(npu(positions), npu(q), npu(k), npu(cache), {HEAD_DIM},
                                           mrope_section=[0, 0, 0], rotary_mode="half")
        saved["mrope"] = dict(positions=positions, q=q, k=k, cache=cache, q_out=q_out.cpu(),
                              k_out=k_out.cpu())
        q_lens, kv_lens = {Q_LENS}, {KV_LENS}
        width = {KV_HEADS * HEAD_DIM}
        blocks_per = [-(-n // {BLOCK}) for n in kv_lens]
        table = torch.full((len(kv_lens), max(blocks_per)), 0, dtype=torch.int32)
        ids = torch.randperm(sum(blocks_per)) + 1
        used = 0
        for row, n in enumerate(blocks_per):
            table[row, :n] = ids[used:used + n].int()
            used += n
        key_cache = torch.randn(sum(blocks_per) + 1, {BLOCK}, width).to(bf)
        value_cache = torch.randn(sum(blocks_per) + 1, {BLOCK}, width).to(bf)
        query = (torch.randn(sum(q_lens), {HEADS}, {HEAD_DIM}) * 2).to(bf)
        ends = torch.tensor(q_lens).cumsum(0).tolist()
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            npu(query), npu(key_cache), npu(value_cache), atten_mask=npu(mask),
            block_table=npu(table), input_layout="TND", block_size={BLOCK},
            actual_seq_lengths=ends, actual_seq_lengths_kv=kv_lens,
            num_key_value_heads={KV_HEADS}, num_heads={HEADS}, scale={1 / math.sqrt(HEAD_DIM)},
            sparse_mode=3)
        saved["fia"] = dict(query=query, key_cache=key_cache, value_cache=value_cache,
                            table=table, out=out.cpu())
        torch.save(saved, {str(path)!r})
        print(json.dumps("saved"))
    """, EMU)
    saved: dict[str, Any] = torch.load(path)
    return saved


def assert_rounded_once(got: torch.Tensor, exact: torch.Tensor, what: str) -> None:
    """``got`` (bfloat16) is ``exact`` (float64) rounded once: equal at >= 99% of the
    elements, and at most one bfloat16 step away anywhere."""
    assert got.dtype == BF16, f"{what}: {got.dtype}"
    rounded = exact.to(BF16)
    same = (got == rounded).double().mean().item()
    # one bfloat16 step (8 significant bits) at the exact value m * 2**e, 0.5 <= m < 1
    step = torch.ldexp(torch.ones_like(exact), torch.frexp(exact).exponent - 8)
    worst = ((got.double() - exact).abs() / step).max().item()
    assert same >= 0.99 and worst <= 1.0, (
        f"{what}: {same:.2%} of the elements are the float64 result rounded once, the worst "
        f"is {worst:.2f} bfloat16 steps away: the kernel rounds an intermediate")


def rms64(x: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS)
    return x * rstd * gamma.double(), rstd


def test_add_rms_norm_normalises_the_unrounded_sum_and_rounds_once(kernels) -> None:
    k = kernels["add_rms_norm"]
    total = k["x1"].double() + k["x2"].double()
    y, rstd = rms64(total, k["gamma"])
    assert_rounded_once(k["y"], y, "npu_add_rms_norm y")
    assert_rounded_once(k["summed"], total, "npu_add_rms_norm x")
    assert k["rstd"].dtype == torch.float32
    torch.testing.assert_close(k["rstd"].double(), rstd, rtol=1e-6, atol=0)


def test_rms_norm_rounds_once(kernels) -> None:
    k = kernels["rms_norm"]
    y, rstd = rms64(k["x"].double(), k["gamma"])
    assert_rounded_once(k["y"], y, "npu_rms_norm y")
    torch.testing.assert_close(k["rstd"].double(), rstd, rtol=1e-6, atol=0)


def test_swiglu_rounds_silu_times_up_once(kernels) -> None:
    k = kernels["swiglu"]
    gate, up = k["x"].double().chunk(2, dim=-1)
    assert_rounded_once(k["y"], gate / (1 + torch.exp(-gate)) * up, "npu_swiglu")


def test_mrope_rotates_with_the_given_cache_and_rounds_once(kernels) -> None:
    k = kernels["mrope"]
    rows = k["cache"].double()[k["positions"]]
    half = HEAD_DIM // 2
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    for name in ("q", "k"):
        tokens = k[name].shape[0]
        x = k[name].double().view(tokens, -1, HEAD_DIM)
        x1, x2 = x[..., :half], x[..., half:]
        exact = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).view(tokens, -1)
        assert_rounded_once(k[f"{name}_out"], exact, f"npu_mrope {name}")


def attention64(k: dict[str, Any]) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + bottom-right causal mask) v per request and head, float64,
    with each request's keys and values gathered from its blocks."""
    query, table = k["query"].double(), k["table"]
    out = torch.zeros_like(query)
    group = HEADS // KV_HEADS
    start = 0
    for row, (q_len, kv_len) in enumerate(zip(Q_LENS, KV_LENS, strict=True)):
        blocks = table[row, : -(-kv_len // BLOCK)].long()
        keys = k["key_cache"][blocks].reshape(-1, KV_HEADS, HEAD_DIM)[:kv_len].double()
        values = k["value_cache"][blocks].reshape(-1, KV_HEADS, HEAD_DIM)[:kv_len].double()
        for h in range(HEADS):
            q = query[start : start + q_len, h]
            scores = q @ keys[:, h // group].T / math.sqrt(HEAD_DIM)
            # query token j sees KV positions 0 .. kv_len - q_len + j
            visible = torch.arange(kv_len)[None] <= (kv_len - q_len + torch.arange(q_len))[:, None]
            scores = scores.masked_fill(~visible, -math.inf)
            out[start : start + q_len, h] = torch.softmax(scores, -1) @ values[:, h // group]
        start += q_len
    return out


def test_fia_rounds_the_attention_once(kernels) -> None:
    k = kernels["fia"]
    assert_rounded_once(k["out"], attention64(k), "npu_fused_infer_attention_score")


def test_the_check_sees_one_extra_rounding(kernels) -> None:
    """The criterion catches one extra rounding: the residual sum rounded to bfloat16
    before the norm."""
    k = kernels["add_rms_norm"]
    total = k["x1"].double() + k["x2"].double()
    once, _ = rms64(total, k["gamma"])
    twice, _ = rms64(total.to(BF16).double(), k["gamma"])
    with pytest.raises(AssertionError, match="rounds an intermediate"):
        assert_rounded_once(twice.to(BF16), once, "sum rounded first")

