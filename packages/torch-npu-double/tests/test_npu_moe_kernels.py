"""The emulated MoE kernels (``emulation.kernels_moe``) through ``torch_npu`` on the
emulated device: their math against the documented definitions written out in plain torch
(loops over tokens and experts), and each documented limit at its boundary (harness README,
"Enforced contracts"). One fresh process (the device install is process-wide) runs every case.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch_npu_double.fresh_interpreter import ATTEMPT
from torch_npu_double.fresh_interpreter import run_json as run

EMU = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "1"}


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    return run("""
        import json, math, torch, torch_npu
        g = torch.Generator().manual_seed(0)
        N, E, K, H, I = 5, 8, 2, 16, 12
        logits = torch.randn(N, E, generator=g)
        x = torch.randn(N, H, generator=g)
        w13 = torch.randn(E, H, 2 * I, generator=g)
        npu = lambda t: t.to("npu")

        # gating: softmax, top-k, no renormalisation
        y, ids, norm = torch_npu.npu_moe_gating_top_k(npu(logits), K)
        soft = [[math.exp(v) for v in row] for row in logits.tolist()]
        soft = [[v / sum(row) for v in row] for row in soft]
        want_ids = [sorted(range(E), key=lambda e: -row[e])[:K] for row in soft]
        out["gating_ids"] = ids.cpu().tolist() == want_ids and ids.dtype == torch.int32
        out["gating_y"] = max(abs(y.cpu()[t, j].item() - soft[t][want_ids[t][j]])
                              for t in range(N) for j in range(K))
        out["gating_norm"] = max(abs(norm.cpu()[t, e].item() - soft[t][e])
                                 for t in range(N) for e in range(E))
        # grouped: 2 groups of 4, one group kept -> every id from the best group
        yg, idg, _ = torch_npu.npu_moe_gating_top_k(npu(logits), K, k_group=1, group_count=2)
        best = [0 if max(r[:4]) >= max(r[4:]) else 1 for r in soft]
        out["gating_grouped"] = all(all(i // 4 == best[t] for i in row)
                                    for t, row in enumerate(idg.cpu().tolist()))
        attempt("gating_renorm1", lambda: torch_npu.npu_moe_gating_top_k(npu(logits), K, renorm=1))
        attempt("gating_e2048", lambda: torch_npu.npu_moe_gating_top_k(
            torch.zeros(1, 2048, device="npu"), 1))
        attempt("gating_e2049", lambda: torch_npu.npu_moe_gating_top_k(
            torch.zeros(1, 2049, device="npu"), 1))
        attempt("gating_k_max", lambda: torch_npu.npu_moe_gating_top_k(
            npu(logits), 4, k_group=1, group_count=2))
        attempt("gating_k_over", lambda: torch_npu.npu_moe_gating_top_k(
            npu(logits), 5, k_group=1, group_count=2))
        attempt("gating_group_of_2", lambda: torch_npu.npu_moe_gating_top_k(
            npu(logits), 1, group_count=4))
        attempt("gating_int", lambda: torch_npu.npu_moe_gating_top_k(
            torch.zeros(1, 8, dtype=torch.int32, device="npu"), 1))

        # routing: rows sorted by expert, then by token * K + k; gather index; counts
        topk = torch.tensor([[3, 0], [1, 3], [0, 2], [3, 1], [2, 0]], dtype=torch.int32)
        ex, row_idx, counts, _ = torch_npu.npu_moe_init_routing_v2(
            npu(x), npu(topk), active_num=N * K, expert_num=E, expert_tokens_num_type=1,
            expert_tokens_num_flag=True, active_expert_range=[0, E])
        flat = topk.reshape(-1).tolist()
        order = sorted(range(N * K), key=lambda j: (flat[j], j))
        out["routing_rows"] = bool(torch.equal(ex.cpu(), x[[j // K for j in order]]))
        out["routing_row_idx"] = row_idx.cpu().tolist() == [order.index(j) for j in range(N * K)]
        out["routing_counts"] = counts.cpu().tolist() == [flat.count(e) for e in range(E)]
        # a range of experts [1, 3): the other rows are undefined (NaN), their index -1
        ex2, row2, counts2, _ = torch_npu.npu_moe_init_routing_v2(
            npu(x), npu(topk), active_num=N * K, expert_num=E, expert_tokens_num_type=1,
            expert_tokens_num_flag=True, active_expert_range=[1, 3])
        inside = [j for j in order if 1 <= flat[j] < 3]
        out["routing_range_rows"] = bool(torch.equal(ex2.cpu()[:len(inside)],
                                                     x[[j // K for j in inside]]))
        out["routing_range_tail_nan"] = bool(ex2.cpu()[len(inside):].isnan().all())
        out["routing_range_idx"] = row2.cpu().tolist() == [
            inside.index(j) if j in inside else -1 for j in range(N * K)]
        out["routing_range_counts"] = counts2.cpu().tolist() == [flat.count(1), flat.count(2)]
        def route(**kw):
            args = dict(active_num=N * K, expert_num=E, expert_tokens_num_type=1,
                        expert_tokens_num_flag=True)
            args.update(kw)
            ids_ = args.pop("ids", npu(topk))
            return torch_npu.npu_moe_init_routing_v2(npu(x), ids_, **args)
        attempt("routing_cumsum_type", lambda: route(expert_tokens_num_type=0))
        attempt("routing_no_flag", lambda: route(expert_tokens_num_flag=False))
        attempt("routing_drop_pad", lambda: route(drop_pad_mode=1))
        attempt("routing_static_quant", lambda: route(quant_mode=0))
        attempt("routing_int64_ids", lambda: route(ids=npu(topk.long())))
        attempt("routing_id_out_of_range", lambda: route(expert_num=3))
        attempt("routing_experts_10240", lambda: route(expert_num=10240))
        attempt("routing_experts_10241", lambda: route(expert_num=10241))
        attempt("routing_range_past_num", lambda: route(active_expert_range=[0, E + 1]))

        # permute / unpermute round trip with probs
        perm, sidx = torch_npu.npu_moe_token_permute(npu(x), npu(topk))
        out["permute_rows"] = bool(torch.equal(perm.cpu(), x[[j // K for j in order]]))
        out["permute_index"] = sidx.cpu().tolist() == [order.index(j) for j in range(N * K)]
        probs = torch.rand(N, K, generator=g)
        back = torch_npu.npu_moe_token_unpermute(perm, sidx, probs=npu(probs))
        want = torch.stack([sum(probs[t, k] * x[t] for k in range(K)) for t in range(N)])
        out["unpermute_err"] = (back.cpu() - want).abs().max().item()
        dup = sidx.clone()
        dup[1] = dup[0]
        attempt("unpermute_repeated_index", lambda: torch_npu.npu_moe_token_unpermute(
            perm, dup, probs=npu(probs)))
        neg = sidx.clone()
        neg[0] = -1
        attempt("unpermute_negative_index", lambda: torch_npu.npu_moe_token_unpermute(
            perm, neg, probs=npu(probs)))
        attempt("unpermute_int64_index", lambda: torch_npu.npu_moe_token_unpermute(
            perm, sidx.long(), probs=npu(probs)))
        attempt("unpermute_restore_shape", lambda: torch_npu.npu_moe_token_unpermute(
            perm, sidx, probs=npu(probs), restore_shape=[N, H]))
        attempt("permute_padded", lambda: torch_npu.npu_moe_token_permute(
            npu(x), npu(topk), padded_mode=True))
        attempt("permute_topk512", lambda: torch_npu.npu_moe_token_permute(
            torch.zeros(1, 4, device="npu"), torch.zeros(1, 512, dtype=torch.int32, device="npu")))
        attempt("permute_topk513", lambda: torch_npu.npu_moe_token_permute(
            torch.zeros(1, 4, device="npu"), torch.zeros(1, 513, dtype=torch.int32, device="npu")))

        # grouped matmul: counts (type 1) and cumsum (type 0) give each group its expert
        sizes = [flat.count(e) for e in range(E)]
        cum = torch.tensor(sizes).cumsum(0)
        want = torch.cat([x[[j // K for j in order]][sum(sizes[:e]):sum(sizes[:e + 1])]
                          @ w13[e] for e in range(E)])
        for t, gl in ((1, torch.tensor(sizes)), (0, cum)):
            got = torch_npu.npu_grouped_matmul([ex], [npu(w13)], group_list=npu(gl),
                                               split_item=2, group_type=0, group_list_type=t)
            out[f"gmm_type{t}_err"] = (got[0].cpu() - want).abs().max().item()
        short = torch.tensor(sizes)
        short[3] -= 1
        got = torch_npu.npu_grouped_matmul([ex], [npu(w13)], group_list=npu(short),
                                           split_item=2, group_type=0, group_list_type=1)
        out["gmm_rows_past_sum_nan"] = bool(got[0].cpu()[-1].isnan().all())
        def gmm(gl=None, t=1, a=None, w=None, **kw):
            gl = torch.tensor(sizes) if gl is None else gl
            return torch_npu.npu_grouped_matmul([ex if a is None else a],
                                                [npu(w13) if w is None else w],
                                                group_list=npu(gl), split_item=2,
                                                group_type=0, group_list_type=t, **kw)
        attempt("gmm_decreasing_cumsum", lambda: gmm(cum.flip(0), t=0))
        attempt("gmm_negative_count", lambda: gmm(torch.tensor([-1] + sizes[1:])))
        attempt("gmm_groups_past_rows", lambda: gmm(torch.tensor([N * K + 1] + [0] * (E - 1))))
        attempt("gmm_int32_group_list", lambda: gmm(torch.tensor(sizes, dtype=torch.int32)))
        attempt("gmm_list_length", lambda: gmm(torch.tensor(sizes[:-1])))
        attempt("gmm_group_type_1", lambda: torch_npu.npu_grouped_matmul(
            [ex], [npu(w13)], group_list=npu(torch.tensor(sizes)), split_item=2, group_type=1,
            group_list_type=1))
        attempt("gmm_dtype_mix", lambda: gmm(w=npu(w13).bfloat16()))
        attempt("gmm_n_65535", lambda: gmm(a=torch.zeros(2, 1, device="npu"),
                                          w=torch.zeros(E, 1, 65535, device="npu"),
                                          gl=torch.tensor([2] + [0] * (E - 1))))
        attempt("gmm_n_65536", lambda: gmm(a=torch.zeros(2, 1, device="npu"),
                                          w=torch.zeros(E, 1, 65536, device="npu"),
                                          gl=torch.tensor([2] + [0] * (E - 1))))
        print(json.dumps(out))
    """, env=EMU, prelude=ATTEMPT)


def _refused(text: str, *fragments: str) -> bool:
    return text != "ok" and all(f in text for f in fragments)


def test_gating_top_k_is_softmax_top_k_without_renormalisation(cases: dict[str, Any]) -> None:
    assert cases["gating_ids"] is True
    assert cases["gating_y"] < 1e-6 and cases["gating_norm"] < 1e-6
    assert cases["gating_grouped"] is True


def test_gating_top_k_limits(cases: dict[str, Any]) -> None:
    assert _refused(cases["gating_renorm1"], "renorm=1", "only 0")
    assert cases["gating_e2048"] == "ok"
    assert _refused(cases["gating_e2049"], "2049 experts")
    assert cases["gating_k_max"] == "ok"  # 8 / 2 * 1 = 4
    assert _refused(cases["gating_k_over"], "k=5", "1..4")
    assert _refused(cases["gating_group_of_2"], "more than 2")
    assert _refused(cases["gating_int"], "int32")


def test_init_routing_v2_sorts_by_expert_with_gather_index_and_counts(
        cases: dict[str, Any]) -> None:
    for key in ("routing_rows", "routing_row_idx", "routing_counts", "routing_range_rows",
                "routing_range_tail_nan", "routing_range_idx", "routing_range_counts"):
        assert cases[key] is True, key


def test_init_routing_v2_limits(cases: dict[str, Any]) -> None:
    assert _refused(cases["routing_cumsum_type"], "expert_tokens_num_type=0")
    assert _refused(cases["routing_no_flag"], "expert_tokens_num_flag=False")
    assert _refused(cases["routing_drop_pad"], "drop_pad_mode=1")
    assert _refused(cases["routing_static_quant"], "quant_mode=0")
    assert _refused(cases["routing_int64_ids"], "expert_idx", "int64")
    assert _refused(cases["routing_id_out_of_range"], "outside [0, 3)")
    assert cases["routing_experts_10240"] == "ok"
    assert _refused(cases["routing_experts_10241"], "expert_num=10241")
    assert _refused(cases["routing_range_past_num"], "active_expert_range")


def test_token_permute_and_unpermute_round_trip(cases: dict[str, Any]) -> None:
    assert cases["permute_rows"] is True and cases["permute_index"] is True
    assert cases["unpermute_err"] < 1e-5


def test_token_permute_and_unpermute_limits(cases: dict[str, Any]) -> None:
    assert _refused(cases["unpermute_repeated_index"], "unique")
    assert _refused(cases["unpermute_negative_index"], "unique and in [0, 9]")
    assert _refused(cases["unpermute_int64_index"], "int64")
    assert _refused(cases["unpermute_restore_shape"], "restore_shape")
    assert _refused(cases["permute_padded"], "padded_mode")
    assert cases["permute_topk512"] == "ok"
    assert _refused(cases["permute_topk513"], "topK 513")


def test_grouped_matmul_groups_rows_by_counts_or_cumsum(cases: dict[str, Any]) -> None:
    assert cases["gmm_type1_err"] < 1e-4 and cases["gmm_type0_err"] < 1e-4
    assert cases["gmm_rows_past_sum_nan"] is True


def test_grouped_matmul_limits(cases: dict[str, Any]) -> None:
    assert _refused(cases["gmm_decreasing_cumsum"], "non-decreasing")
    assert _refused(cases["gmm_negative_count"], "negative")
    assert _refused(cases["gmm_groups_past_rows"], "cover 11 rows")
    assert _refused(cases["gmm_int32_group_list"], "group_list", "int32")
    assert _refused(cases["gmm_list_length"], "one entry per weight group")
    assert _refused(cases["gmm_group_type_1"], "group_type=1")
    assert _refused(cases["gmm_dtype_mix"], "differ")
    assert cases["gmm_n_65535"] == "ok"
    assert _refused(cases["gmm_n_65536"], "N=65536")
