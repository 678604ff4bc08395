"""The emulated torch_npu kernels refuse what the documented kernels refuse, at each rule's
boundary (``npu-kernel-contracts.md`` section 3; the harness README's "Enforced contracts").
One fresh process (the device install is process-wide) tries every case."""

from __future__ import annotations

from typing import Any

import pytest
from torch_npu_double.fresh_interpreter import ATTEMPT
from torch_npu_double.fresh_interpreter import run_json as run

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "1"}


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    return run("""
        import json, torch, torch_npu
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.int8, device="npu"), 1)
        def fia(T=2, N=4, KV=2, D=16, bs=128, dtype=torch.bfloat16, ends=None, kv=None,
                m=mask, table_dtype=torch.int32, form="functional", ws_shrink=0):
            ends = ends or [1, 2]
            kv = kv or [3, 4]
            q = torch.randn(T, N, D, device="npu").to(dtype)
            kc = torch.randn(4, bs, KV * D, device="npu").to(dtype)
            table = torch.tensor([[0], [1]], dtype=table_dtype, device="npu")
            kw = dict(atten_mask=m, block_table=table, input_layout="TND", block_size=bs,
                      actual_seq_lengths=ends, actual_seq_lengths_kv=kv,
                      num_key_value_heads=KV, num_heads=N, scale=0.25, sparse_mode=3)
            if form == "functional":
                return torch_npu.npu_fused_infer_attention_score(q, kc, kc, **kw)
            ws = torch_npu._npu_fused_infer_attention_score_get_max_workspace(q, kc, kc, **kw)
            if ws_shrink:
                ws = ws[:-ws_shrink].clone()
            res = [torch.empty_like(q), torch.empty(1, device="npu")]
            got = torch_npu.npu_fused_infer_attention_score.out(
                q, kc, kc, workspace=ws, out=res, **kw)
            out["out_is_given"] = got[0] is res[0] or got[0].data_ptr() == res[0].data_ptr()
            out["out_matches_functional"] = bool(torch.equal(
                res[0], torch_npu.npu_fused_infer_attention_score(q, kc, kc, **kw)[0]))
        attempt("fia_bf16", lambda: fia())
        attempt("fia_fp16", lambda: fia(dtype=torch.float16))
        attempt("fia_fp32", lambda: fia(dtype=torch.float32))
        attempt("fia_d512", lambda: fia(D=512))
        attempt("fia_d528", lambda: fia(D=528))
        attempt("fia_d24", lambda: fia(D=24))
        attempt("fia_ratio64", lambda: fia(N=128, KV=2))
        attempt("fia_ratio65", lambda: fia(N=65, KV=1))
        attempt("fia_ratio_not_integral", lambda: fia(N=6, KV=4))
        attempt("fia_heads256", lambda: fia(N=256, KV=4))
        attempt("fia_heads260", lambda: fia(N=260, KV=5))
        attempt("fia_mask1024", lambda: fia(m=mask[:1024, :1024].contiguous()))
        attempt("fia_mask_float", lambda: fia(m=mask.float()))
        attempt("fia_mask_bool", lambda: fia(m=mask.bool()))
        attempt("fia_last_end_not_T", lambda: fia(T=3))
        attempt("fia_table_int64", lambda: fia(table_dtype=torch.int64))
        attempt("fia_prefill_bs128", lambda: fia(T=3, ends=[2, 3]))
        attempt("fia_prefill_bs16", lambda: fia(T=3, ends=[2, 3], bs=16))
        attempt("fia_decode_bs16", lambda: fia(bs=16))
        attempt("fia_decode_bs24", lambda: fia(bs=24))
        attempt("fia_bs640", lambda: fia(bs=640))
        attempt("fia_empty_kv", lambda: fia(kv=[0, 4]))
        attempt("fia_out", lambda: fia(form="out"))
        attempt("fia_out_small_workspace", lambda: fia(form="out", ws_shrink=1))

        k = torch.arange(12.0, device="npu").reshape(3, 2, 2)
        def scatter(slots, key=None, value=None):
            cache = torch.zeros(2, 2, 2, 2, device="npu")
            key = k if key is None else key
            value = k if value is None else value
            torch_npu.npu_scatter_pa_kv_cache(key, value, cache, cache.clone(),
                                              torch.tensor(slots, device="npu"),
                                              cache_mode="Norm")
        attempt("scatter_ok", lambda: scatter([3, 0, 1]))
        attempt("scatter_last_slot", lambda: scatter([3, 0, 1]))
        attempt("scatter_slot_past_end", lambda: scatter([4, 0, 1]))
        attempt("scatter_minus_one", lambda: scatter([-1, 0, 1]))
        attempt("scatter_repeat", lambda: scatter([1, 0, 1]))
        qkv = torch.arange(36.0, device="npu").reshape(3, 3, 2, 2)
        attempt("scatter_value_view", lambda: scatter([3, 0, 1], value=qkv[:, 1]))
        attempt("scatter_value_contiguous", lambda: scatter([3, 0, 1],
                                                            value=qkv[:, 1].contiguous()))

        def rope(dtype, cache_scale=1.0, tokens=2):
            pos = torch.arange(tokens, device="npu")
            q = torch.ones(tokens, 16, device="npu").to(dtype)
            key = torch.ones(tokens, 16, device="npu").to(dtype)
            cache = (torch.arange(64.0, device="npu").reshape(4, 16) / 64 * cache_scale).to(dtype)
            torch_npu._npu_rotary_embedding(pos, q, key, 16, cache, True)
            return q
        attempt("rope_fp32", lambda: rope(torch.float32))
        first = rope(torch.bfloat16)
        second = rope(torch.bfloat16, cache_scale=3.0)
        # what the second call would give with its own cache: the reference, independently
        from ascend_kernels.ops.rope import rotary_embedding
        cache3 = (torch.arange(64.0).reshape(4, 16) / 64 * 3.0).bfloat16()
        own, _ = rotary_embedding(torch.arange(2), torch.ones(2, 16).bfloat16(),
                                  torch.ones(2, 16).bfloat16(), cache3, 16, 16, True)
        out["rope_second_is_first"] = bool(torch.equal(first.cpu(), second.cpu()))
        out["rope_second_differs_from_own_cache"] = not bool(torch.equal(second.cpu(), own))

        x = torch.ones(2, 8, device="npu")
        attempt("add_rms_norm_fp32", lambda: torch_npu.npu_add_rms_norm(x, x, x[0]))
        attempt("add_rms_norm_int32", lambda: torch_npu.npu_add_rms_norm(
            x.int(), x.int(), x[0].int()))
        attempt("add_rms_norm_mixed", lambda: torch_npu.npu_add_rms_norm(x, x.half(), x[0]))
        attempt("rms_norm_int32", lambda: torch_npu.npu_rms_norm(x.int(), x[0].int()))
        attempt("swiglu_int32", lambda: torch_npu.npu_swiglu(x.int()))
        print(json.dumps(out))
    """, EMU, prelude=ATTEMPT)


def test_fia_takes_fp16_and_bf16_only(cases) -> None:
    assert cases["fia_bf16"] == cases["fia_fp16"] == "ok"
    assert "query has dtype torch.float32" in cases["fia_fp32"]


def test_fia_head_dim_is_at_most_512_and_16_aligned(cases) -> None:
    assert cases["fia_d512"] == "ok"
    assert "head dim 528" in cases["fia_d528"]
    assert "head dim 24" in cases["fia_d24"]


def test_fia_head_counts_and_group_ratio(cases) -> None:
    assert cases["fia_ratio64"] == "ok"
    assert "ratio must be an integer of at most 64" in cases["fia_ratio65"]
    assert "ratio must be an integer" in cases["fia_ratio_not_integral"]
    assert cases["fia_heads256"] == "ok"
    assert "num_heads=260; allowed: 1..256" in cases["fia_heads260"]


def test_fia_sparse_mode_3_needs_the_2048_mask(cases) -> None:
    assert cases["fia_mask_bool"] == "ok"
    assert "2048x2048 int8/bool" in cases["fia_mask1024"]
    assert "(1024, 1024)" in cases["fia_mask1024"]
    # the recorded doc rule (bool/int8/uint8) refuses a float mask first
    assert "atten_mask has dtype torch.float32" in cases["fia_mask_float"]


def test_fia_tnd_last_query_end_is_T_and_block_table_is_int32(cases) -> None:
    assert "actual_seq_lengths[-1] is 2, the query has T=3 rows" in cases["fia_last_end_not_T"]
    assert "block_table is torch.int64" in cases["fia_table_int64"]


def test_fia_block_size_rules(cases) -> None:
    assert cases["fia_prefill_bs128"] == "ok"
    assert "block_size=16 with a query of 2 tokens" in cases["fia_prefill_bs16"]
    assert cases["fia_decode_bs16"] == "ok"
    assert "block_size=24; allowed: a multiple of 16" in cases["fia_decode_bs24"]
    assert "block_size=640" in cases["fia_bs640"]
    assert "KV length 0" in cases["fia_empty_kv"]


def test_fia_out_writes_the_given_output_with_a_large_enough_workspace(cases) -> None:
    assert cases["fia_out"] == "ok"
    assert cases["out_is_given"] is True
    assert cases["out_matches_functional"] is True
    assert "workspace is [" in cases["fia_out_small_workspace"]
    assert "at least" in cases["fia_out_small_workspace"]


def test_scatter_slot_range_repeats_and_contiguity(cases) -> None:
    assert cases["scatter_ok"] == cases["scatter_last_slot"] == "ok"
    assert "slot 4 outside [0, 4)" in cases["scatter_slot_past_end"]
    assert "slot -1 outside [0, 4)" in cases["scatter_minus_one"]
    assert "open in the docs" in cases["scatter_minus_one"]
    assert "repeats a slot" in cases["scatter_repeat"]
    assert "value is not contiguous" in cases["scatter_value_view"]
    assert cases["scatter_value_contiguous"] == "ok"


def test_atb_rope_takes_fp16_bf16_and_keeps_its_first_cache(cases) -> None:
    assert "query has dtype float32; allowed: float16, bfloat16" in cases["rope_fp32"]
    assert cases["rope_second_is_first"] is True
    assert cases["rope_second_differs_from_own_cache"] is True


def test_norm_and_swiglu_dtypes(cases) -> None:
    assert cases["add_rms_norm_fp32"] == "ok"
    assert "x1 has dtype int32" in cases["add_rms_norm_int32"]
    assert "differ" in cases["add_rms_norm_mixed"]
    assert "input has dtype torch.int32" in cases["rms_norm_int32"]
    assert "input has dtype torch.int32" in cases["swiglu_int32"]
