"""The host-CPU platform's default KV-cache reservation (config_pipeline.memory): the
rule at its boundaries, the demand of a real VllmConfig against vLLM's own KV-cache spec, what
counts as the user's choice, and the rule inside the platform's config pipeline."""

from __future__ import annotations

import inspect
import pickle

import pytest
from vllm_ascend.config_pipeline.memory import (
    AVAILABLE_SHARE,
    FLOOR_BYTES,
    GiB,
    KvCacheDemand,
    MiB,
    kv_cache_budget,
    user_chose_reservation,
)

BLOCK = 1 * MiB  # one block of every layer, for the rule's arithmetic below


def demand(seqs: int, blocks_per_seq: int = 1) -> KvCacheDemand:
    return KvCacheDemand(block_bytes=BLOCK, blocks_per_sequence=blocks_per_seq,
                         max_num_seqs=seqs)


# --- the rule ------------------------------------------------------------------------------

def test_budget_need_counts_every_sequence_in_whole_blocks_plus_the_null_block() -> None:
    d = KvCacheDemand(block_bytes=1000, blocks_per_sequence=3, max_num_seqs=4)
    assert d.need_bytes == 1000 * (4 * 3 + 1)
    assert d.sequence_bytes == 1000 * (3 + 1)


def test_budget_below_the_floor_reserves_the_floor() -> None:
    floor_blocks = FLOOR_BYTES // BLOCK
    # need = (seqs + 1) blocks: one block under the floor, then exactly the floor
    assert kv_cache_budget(demand(floor_blocks - 2), 100 * GiB, 1).bytes == FLOOR_BYTES
    assert kv_cache_budget(demand(floor_blocks - 1), 100 * GiB, 1).bytes == FLOOR_BYTES


def test_budget_above_the_floor_reserves_what_the_run_needs() -> None:
    floor_blocks = FLOOR_BYTES // BLOCK
    budget = kv_cache_budget(demand(floor_blocks), 100 * GiB, 1)
    assert budget.bytes == budget.need_bytes == FLOOR_BYTES + BLOCK


def test_budget_is_capped_at_a_share_of_the_free_memory() -> None:
    available = 4 * GiB
    cap = int(available * AVAILABLE_SHARE)
    cap_blocks = cap // BLOCK
    assert kv_cache_budget(demand(cap_blocks - 1), available, 1).bytes == cap  # need == cap
    assert kv_cache_budget(demand(cap_blocks), available, 1).bytes == cap  # need one over
    assert kv_cache_budget(demand(10 * cap_blocks), available, 1).cap_bytes == cap


def test_budget_cap_is_shared_by_the_ranks_of_the_host() -> None:
    available = 4 * GiB
    budget = kv_cache_budget(demand(100_000), available, ranks=4)
    assert budget.bytes == int(available // 4 * AVAILABLE_SHARE)


def test_budget_floor_yields_to_the_cap() -> None:
    available = FLOOR_BYTES  # cap: half the floor
    assert kv_cache_budget(demand(1), available, 1).bytes == int(FLOOR_BYTES * AVAILABLE_SHARE)


def test_budget_never_goes_below_one_sequence_of_max_model_len() -> None:
    # cap 50 MiB, one sequence 80 blocks + the null block: the sequence wins
    budget = kv_cache_budget(demand(4, blocks_per_seq=80), 100 * MiB, 1)
    assert budget.bytes == 81 * BLOCK


def test_budget_one_sequence_exactly_fitting_the_free_memory_is_accepted() -> None:
    assert kv_cache_budget(demand(4, blocks_per_seq=99), 100 * MiB, 1).bytes == 100 * MiB


def test_budget_one_sequence_over_the_free_memory_says_what_to_change() -> None:
    with pytest.raises(ValueError) as info:
        kv_cache_budget(demand(4, blocks_per_seq=100), 100 * MiB, 1)
    message = str(info.value)
    # 100 MiB free, 1 MiB blocks of one token: 99 usable blocks after vLLM's null block
    assert "one sequence of max_model_len=100 needs 101.00 MiB" in message
    assert "--max-model-len 99 (one sequence at a time)" in message
    assert "--max-model-len 24 with --max-num-seqs 4" in message
    assert "--kv-cache-memory-bytes" in message


@pytest.mark.parametrize(("available", "ranks", "needle"),
                         [(GiB, 0, "ranks=0"), (-1, 1, "available_bytes=-1")])
def test_budget_rejects_impossible_inputs(available: int, ranks: int, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        kv_cache_budget(demand(1), available, ranks)


# --- the demand of a real config, against vLLM's own KV-cache spec --------------------------

@pytest.mark.parametrize(("dtype", "tp"), [("float32", 1), ("bfloat16", 1), ("bfloat16", 2)])
def test_demand_matches_vllms_attention_page_size(make_vllm_config, dtype: str, tp: int) -> None:
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm_ascend.config_pipeline.memory import demand_of

    cfg = make_vllm_config(dtype=dtype, tensor_parallel_size=tp, max_model_len=200,
                           max_num_seqs=3, distributed_executor_backend="mp")
    block = cfg.cache_config.block_size
    spec = FullAttentionSpec(block_size=block, num_kv_heads=2 // tp, head_size=64,
                             dtype=getattr(torch, dtype))
    d = demand_of(cfg)
    assert d.block_bytes == 2 * spec.page_size_bytes  # the tiny Qwen3's two layers
    assert d.blocks_per_sequence == -(-200 // block)
    assert d.max_num_seqs == 3


# --- what counts as the user's choice ------------------------------------------------------

def _cache_config(**kw):
    from vllm.config import CacheConfig

    return CacheConfig(**kw)


def test_user_choice_vllms_default_fraction_is_not_a_choice() -> None:
    assert not user_chose_reservation(_cache_config(), {})


def test_user_choice_llms_default_fraction_is_not_a_choice() -> None:
    from vllm.entrypoints.llm import LLM

    default = inspect.signature(LLM.__init__).parameters["gpu_memory_utilization"].default
    assert not user_chose_reservation(_cache_config(gpu_memory_utilization=default), {})


def test_user_choice_an_explicit_fraction_equal_to_the_default_is_a_choice() -> None:
    explicit = float("0.92")  # a value of the user's, as the command line parses it
    assert user_chose_reservation(_cache_config(gpu_memory_utilization=explicit), {})


def test_user_choice_fraction_on_the_command_line() -> None:
    from vllm_ascend.entrypoints.serve import build_serve_parser

    parser, _ = build_serve_parser()
    for argv, chosen in ((["serve", "m"], False),
                         (["serve", "m", "--gpu-memory-utilization", "0.92"], True),
                         (["serve", "m", "--device-memory-utilization", "0.5"], True)):
        args = parser.parse_args(argv)
        cache = _cache_config(gpu_memory_utilization=args.gpu_memory_utilization)
        assert user_chose_reservation(cache, {}) is chosen, argv


def test_user_choice_kv_bytes_and_vllms_legacy_variable() -> None:
    assert user_chose_reservation(_cache_config(kv_cache_memory_bytes=1), {})
    assert user_chose_reservation(_cache_config(), {"VLLM_CPU_KVCACHE_SPACE": "1"})
    # vLLM ignores the empty variable: so does the rule
    assert not user_chose_reservation(_cache_config(), {"VLLM_CPU_KVCACHE_SPACE": ""})


def test_user_choice_a_copied_default_counts_as_chosen() -> None:
    # In another process the default's identity is lost: vLLM's own rule applies there.
    copied = pickle.loads(pickle.dumps(_cache_config()))
    assert user_chose_reservation(copied, {})


# --- inside the platform's config pipeline -------------------------------------------------

@pytest.fixture
def host_memory(monkeypatch):
    """The free memory vLLM reports for every NUMA node (the host is the seam)."""
    from vllm.utils import cpu_resource_utils

    state = {"available": 64 * GiB}

    def info(node_id: int = 0):
        return cpu_resource_utils.MemoryNodeInfo(total_memory=128 * GiB,
                                                 available_memory=state["available"])

    monkeypatch.setattr(cpu_resource_utils, "get_memory_node_info", info)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    return state


def test_pipeline_defaults_the_reservation_to_the_runs_need(make_vllm_config,
                                                            host_memory) -> None:
    # 2 layers x K,V x 2 heads x 64 x 4 bytes = 2 KiB a token; 200 seqs x 4 blocks of 128
    cfg = make_vllm_config(max_model_len=512, max_num_seqs=200)
    assert cfg.cache_config.block_size == 128
    token = 2 * 2 * 2 * 64 * 4
    assert cfg.cache_config.kv_cache_memory_bytes == token * 128 * (200 * 4 + 1) > FLOOR_BYTES


def test_pipeline_tiny_need_reserves_the_floor(make_vllm_config, host_memory) -> None:
    cfg = make_vllm_config()
    assert cfg.cache_config.kv_cache_memory_bytes == FLOOR_BYTES


def test_pipeline_reservation_is_bounded_by_free_memory(make_vllm_config, host_memory) -> None:
    host_memory["available"] = 200 * MiB
    cfg = make_vllm_config(max_model_len=512, max_num_seqs=200)  # needs 200.25 MiB
    assert cfg.cache_config.kv_cache_memory_bytes == int(200 * MiB * AVAILABLE_SHARE)


def test_pipeline_explicit_choices_win(make_vllm_config, host_memory, monkeypatch) -> None:
    assert make_vllm_config(gpu_memory_utilization=0.92).cache_config.kv_cache_memory_bytes \
        is None
    assert make_vllm_config(gpu_memory_utilization=0.3).cache_config.kv_cache_memory_bytes \
        is None
    assert make_vllm_config(kv_cache_memory_bytes=5 * MiB).cache_config.kv_cache_memory_bytes \
        == 5 * MiB
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    assert make_vllm_config().cache_config.kv_cache_memory_bytes == 2 * GiB


def test_pipeline_context_too_long_for_free_memory_is_refused(make_vllm_config,
                                                              host_memory) -> None:
    host_memory["available"] = 1 * MiB  # one 512-token sequence: 5 blocks of 256 KiB
    with pytest.raises(ValueError, match="--max-model-len"):
        make_vllm_config(max_model_len=512)
