"""ALLGATHER and ALLTOALL dispatch/combine on a real 2-rank gloo group against a dense
float64 reference written out per token (all experts in one process)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from vllm_ascend.distributed.moe_comm import MoECommType
from vllm_ascend.distributed.moe_dispatch import (
    AllGatherDispatch,
    AllToAllDispatch,
    host_cpu_comm_methods,
    own_rows,
    replicated_share,
)
from vllm_ascend.distributed.moe_experts import ExpertPlacement, ExpertWeights

HIDDEN, INTER = 16, 8
METHODS = {"ALLGATHER": AllGatherDispatch(), "ALLTOALL": AllToAllDispatch()}


def _maps(held: list[list[int]], num_experts: int) -> list[torch.Tensor]:
    """vLLM-style expert maps (global id -> local id, -1 elsewhere) from each rank's experts."""
    maps = []
    for experts in held:
        m = torch.full((num_experts,), -1, dtype=torch.int32)
        m[experts] = torch.arange(len(experts), dtype=torch.int32)
        maps.append(m)
    return maps


def _case(seed: int, tokens: tuple[int, int], num_experts: int, top_k: int,
          held: list[list[int]], allowed: list[int] | None = None,
          dtype: torch.dtype = torch.float32) -> dict:
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(num_experts, 2 * INTER, HIDDEN, generator=g) / 4).to(dtype)
    w2 = (torch.randn(num_experts, HIDDEN, INTER, generator=g) / 4).to(dtype)
    pool = torch.tensor(allowed if allowed is not None else range(num_experts))
    ranks = []
    for n in tokens:
        x = torch.randn(n, HIDDEN, generator=g).to(dtype)
        scores = torch.rand(n, len(pool), generator=g)
        ids = pool[scores.argsort(dim=1)[:, :top_k]].to(torch.int32)
        weights = torch.rand(n, top_k, generator=g)
        ranks.append({"x": x, "ids": ids, "w": weights / weights.sum(1, keepdim=True)})
    return {"w13": w13, "w2": w2, "maps": _maps(held, num_experts), "ranks": ranks}


CASES = {
    "uneven_tokens": _case(0, (5, 3), 4, 2, [[0, 1], [2, 3]]),
    "no_tokens_on_rank_1": _case(1, (4, 0), 4, 2, [[0, 1], [2, 3]]),
    "no_tokens_anywhere": _case(2, (0, 0), 4, 2, [[0, 1], [2, 3]]),
    "all_routed_to_rank_0": _case(3, (3, 4), 4, 2, [[0, 1], [2, 3]], allowed=[0, 1]),
    "all_routed_to_rank_1": _case(4, (3, 4), 4, 2, [[0, 1], [2, 3]], allowed=[2, 3]),
    "top_k_equals_num_experts": _case(5, (3, 2), 4, 4, [[0, 1], [2, 3]]),
    "round_robin_uneven_experts": _case(6, (4, 5), 5, 2, [[0, 2, 4], [1, 3]]),
    "bfloat16": _case(7, (4, 3), 4, 2, [[0, 1], [2, 3]], dtype=torch.bfloat16),
}


def _replicated(seed: int, tokens: int) -> dict:
    case = _case(seed, (tokens, 0), 4, 2, [[0, 1], [2, 3]])
    case["ranks"][1] = case["ranks"][0]  # vLLM hands every EP rank the same tokens
    return case


# Token counts around the split of replicated tokens between 2 ranks (1: rank 1 owns none).
REPLICATED = {f"replicated_{n}": _replicated(10 + n, n) for n in (0, 1, 2, 5)}


def _reference(case: dict, rank: int) -> torch.Tensor:
    """Dense per-token loop in float64: sum_k w * W2_e (silu(G_e x) * (U_e x))."""
    data = case["ranks"][rank]
    w13, w2 = case["w13"].double(), case["w2"].double()
    out = torch.zeros(data["x"].shape[0], HIDDEN, dtype=torch.float64)
    for t, x in enumerate(data["x"].double()):
        for k, e in enumerate(data["ids"][t].tolist()):
            gate, up = w13[e, :INTER] @ x, w13[e, INTER:] @ x
            out[t] += float(data["w"][t, k]) * (w2[e] @ (F.silu(gate) * up))
    return out


def _rank_main(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    sent_splits: list[list[int]] = []
    real_all_to_all = dist.all_to_all_single

    def recording_all_to_all(output, sent, output_split_sizes=None, input_split_sizes=None,
                             **kw):
        if sent.dim() == 2 and sent.shape[1] > HIDDEN:  # the token payload exchange
            sent_splits.append(list(input_split_sizes))
        return real_all_to_all(output, sent, output_split_sizes, input_split_sizes, **kw)

    dist.all_to_all_single = recording_all_to_all
    results: dict[str, object] = {}
    try:
        for name, case in REPLICATED.items():
            data = case["ranks"][rank]
            placement = ExpertPlacement.from_expert_maps(case["maps"])
            local = case["maps"][rank] >= 0
            experts = ExpertWeights(case["w13"][local], case["w2"][local])
            for method_name, method in METHODS.items():
                share = replicated_share(data["x"], data["w"], data["ids"], method, experts,
                                         placement, dist.group.WORLD)
                results[f"{name}/{method_name}/share"] = share.clone()
                dist.all_reduce(share)  # what vLLM's runner does after the MoE op
                results[f"{name}/{method_name}"] = share
        for name, case in CASES.items():
            mine = case["ranks"][rank]
            placement = ExpertPlacement.from_expert_maps(case["maps"])
            local = case["maps"][rank] >= 0
            experts = ExpertWeights(case["w13"][local], case["w2"][local])
            for method_name, method in METHODS.items():
                sent_splits.clear()
                out = method(mine["x"], mine["w"], mine["ids"], experts, placement,
                             dist.group.WORLD)
                results[f"{name}/{method_name}"] = out
                results[f"{name}/{method_name}/splits"] = torch.tensor(sent_splits)
    finally:
        dist.all_to_all_single = real_all_to_all
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


@functools.cache
def _spawned(out_dir: str) -> tuple[dict, dict]:
    mp.spawn(_rank_main, args=(str(Path(out_dir) / "init"), out_dir), nprocs=2, join=True)
    return tuple(  # type: ignore[return-value]
        torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=True) for r in range(2)
    )


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    return _spawned(str(tmp_path_factory.mktemp("gloo")))


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", list(CASES))
def test_outputs_equal_the_single_process_reference(rank_results, case, method) -> None:
    for rank in range(2):
        out = rank_results[rank][f"{case}/{method}"]
        data = CASES[case]["ranks"][rank]
        assert out.shape == data["x"].shape and out.dtype == data["x"].dtype
        tol = 2e-2 if out.dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(out.double(), _reference(CASES[case], rank),
                                   atol=tol, rtol=tol)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", list(REPLICATED))
def test_shares_of_replicated_tokens_sum_to_the_reference(rank_results, case, method) -> None:
    reference = _reference(REPLICATED[case], 0)
    tokens = reference.shape[0]
    for rank in range(2):
        start, end = own_rows(tokens, 2, rank)
        share = rank_results[rank][f"{case}/{method}/share"]
        assert not share[:start].any() and not share[end:].any()  # only its own rows
        torch.testing.assert_close(share[start:end].double(), reference[start:end],
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rank_results[rank][f"{case}/{method}"].double(), reference,
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_all_to_all_sends_each_token_once_to_each_owner_of_its_experts(
    rank_results, case
) -> None:
    owner = ExpertPlacement.from_expert_maps(CASES[case]["maps"]).owner
    for rank in range(2):
        ids = CASES[case]["ranks"][rank]["ids"].long()
        expected = [int((owner[ids] == dest).any(dim=1).sum()) for dest in range(2)]
        assert rank_results[rank][f"{case}/ALLTOALL/splits"].tolist() == [expected]
        # ALLGATHER never uses all-to-all
        assert rank_results[rank][f"{case}/ALLGATHER/splits"].numel() == 0


@pytest.mark.parametrize(
    ("tokens", "size", "expected"),
    [
        (0, 2, [(0, 0), (0, 0)]),
        (1, 2, [(0, 1), (1, 1)]),  # decode of one sequence: rank 1 owns nothing
        (2, 2, [(0, 1), (1, 2)]),
        (3, 2, [(0, 2), (2, 3)]),
        (7, 3, [(0, 3), (3, 5), (5, 7)]),
        (5, 1, [(0, 5)]),
    ],
)
def test_own_rows_split_contiguously(tokens, size, expected) -> None:
    assert [own_rows(tokens, size, r) for r in range(size)] == expected


@pytest.mark.parametrize(("args", "fragment"), [((3, 2, 2), "rank=2"), ((-1, 2, 0), "-1"),
                                                ((3, 0, 0), "size=0")])
def test_own_rows_rejects_bad_arguments(args, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        own_rows(*args)


def test_placement_needs_each_expert_on_exactly_one_rank() -> None:
    # expert 1 on both ranks, expert 3 on none
    with pytest.raises(ValueError, match=r"experts \[1, 3\] are not held by exactly one"):
        ExpertPlacement.from_expert_maps(_maps([[0, 1], [1, 2]], 4))


def test_placement_tables() -> None:
    placement = ExpertPlacement.from_expert_maps(_maps([[0, 2, 4], [1, 3]], 5))
    assert placement.owner.tolist() == [0, 1, 0, 1, 0]
    assert placement.local_id.tolist() == [0, 0, 1, 1, 2]
    ids = torch.tensor([[4, 1], [3, 0]])
    assert placement.local_ids_on(0, ids).tolist() == [[2, -1], [-1, 0]]
    assert placement.local_ids_on(1, ids).tolist() == [[-1, 0], [1, -1]]


def test_host_cpu_executes_allgather_and_alltoall_only() -> None:
    methods = host_cpu_comm_methods()
    assert set(methods) == {MoECommType.ALLGATHER, MoECommType.ALLTOALL}
    assert all(m.comm_type is t for t, m in methods.items())
