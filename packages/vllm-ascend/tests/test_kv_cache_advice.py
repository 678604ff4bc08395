"""The advising KV-cache memory error (worker_duties.kv_cache_advice): the largest settings that fit
at their boundaries, the message's sizes (never negative), and the host-CPU worker's checks
(cpu_runtime.kv_memory) with vLLM's own decisions."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from vllm_ascend.worker_duties.kv_cache_advice import (
    GiB,
    KvCacheMemoryError,
    KvCacheNeed,
    MiB,
    format_size,
    kv_cache_advice,
    largest_fit,
)

# 16 tokens a block, 1 MiB a block: 64 KiB a token.
NEED = KvCacheNeed(block_bytes=MiB, block_size=16, max_model_len=160, max_num_seqs=4)


def test_need_counts_whole_blocks_and_the_null_block() -> None:
    # 160 tokens = 10 blocks; one sequence 10 + 1 null; four sequences 40 + 1.
    assert NEED.blocks_per_sequence == 10
    assert NEED.sequence_bytes == 11 * MiB
    assert NEED.all_sequences_bytes == 41 * MiB
    odd = KvCacheNeed(block_bytes=MiB, block_size=16, max_model_len=161, max_num_seqs=1)
    assert odd.blocks_per_sequence == 11


@pytest.mark.parametrize("field", ["block_bytes", "block_size", "max_model_len", "max_num_seqs"])
def test_need_rejects_sizes_below_one(field: str) -> None:
    values: dict[str, Any] = {"block_bytes": 1, "block_size": 1, "max_model_len": 1,
                              "max_num_seqs": 1, field: 0}
    with pytest.raises(ValueError, match=f"{field}=0 is not allowed"):
        KvCacheNeed(**values)


@pytest.mark.parametrize(
    ("available", "one_seq", "all_seqs", "seqs"),
    [
        (-5 * GiB, 0, 0, 0),          # negative measurement: nothing fits, no negative size
        (MiB, 0, 0, 0),               # one block is all the null block
        (2 * MiB - 1, 0, 0, 0),       # one byte short of a usable block
        (2 * MiB, 16, 0, 0),          # one usable block: 16 tokens, one sequence
        (5 * MiB, 64, 16, 0),         # 4 usable blocks: one each for 4 sequences
        (11 * MiB - 1, 144, 32, 0),   # 9 usable blocks: one short of a 160-token sequence
        (11 * MiB, 160, 32, 1),       # 10 usable blocks: exactly one sequence of 160
        (41 * MiB, 640, 160, 4),      # exactly the four sequences
    ],
)
def test_largest_fit_at_its_boundaries(available: int, one_seq: int, all_seqs: int,
                                       seqs: int) -> None:
    fit = largest_fit(NEED, available)
    assert (fit.max_model_len_one_seq, fit.max_model_len_all_seqs,
            fit.max_num_seqs_at_len) == (one_seq, all_seqs, seqs)


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [(-0.87 * GiB, "0.0 KiB"), (0, "0.0 KiB"), (1536, "1.5 KiB"), (MiB - 1, "1024.0 KiB"),
     (MiB, "1.00 MiB"), (GiB - 1, "1024.00 MiB"), (GiB, "1.00 GiB")],
)
def test_sizes_are_never_negative_and_switch_units_at_the_boundary(n_bytes: float,
                                                                   text: str) -> None:
    assert format_size(n_bytes) == text


def test_message_has_the_measurement_the_needs_and_the_largest_fitting_values() -> None:
    text = kv_cache_advice(NEED, 5 * MiB, measured="5 MiB free on node 0",
                           more_memory="--kv-cache-memory-bytes")
    assert text == (
        "the KV cache does not fit: 5.00 MiB is available for it (5 MiB free on node 0). "
        "The model needs 64.0 KiB per token: one sequence of max_model_len=160 needs "
        "11.00 MiB and max_num_seqs=4 such sequences need 41.00 MiB. "
        "Largest that fit: --max-model-len 64 (one sequence at a time); --max-model-len 16 "
        "with --max-num-seqs 4. Or free memory, or give the KV cache more with "
        "--kv-cache-memory-bytes.")


def test_message_when_nothing_fits_names_the_smallest_cache_and_no_negative_size() -> None:
    text = kv_cache_advice(NEED, int(-0.87 * GiB), measured="measured",
                           more_memory="--gpu-memory-utilization")
    import re

    assert "0.0 KiB is available" in text
    assert not re.search(r"-\d", text)  # no negative number anywhere
    assert "Not even one block of 16 tokens (2.00 MiB with vLLM's null block) fits" in text
    assert "--gpu-memory-utilization" in text


# --- the host-CPU worker's checks -----------------------------------------------------------

class FakeWorker:
    """What checked_kv_cache_size reads of vLLM's CPU worker; the KV-cache spec is vLLM's."""

    def __init__(self, explicit: int | None, needed: int) -> None:
        self.vllm_config = SimpleNamespace(
            cache_config=SimpleNamespace(kv_cache_memory_bytes=explicit,
                                         gpu_memory_utilization=0.92))
        self.needed = needed


@pytest.fixture
def worker_need(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_ascend.cpu_runtime.kv_memory as module

    monkeypatch.setattr(module, "need_of", lambda config: NEED)
    monkeypatch.setattr(module, "vllm_needed_bytes", lambda worker: worker.needed)


def _memory(available: int) -> Any:
    return lambda: (0, available, 8 * GiB)


@pytest.mark.usefixtures("worker_need")
def test_worker_explicit_size_over_the_free_memory_is_refused_with_advice() -> None:
    from vllm_ascend.cpu_runtime.kv_memory import checked_kv_cache_size

    worker = FakeWorker(explicit=41 * MiB + 1, needed=10 * MiB)
    with pytest.raises(KvCacheMemoryError) as info:
        checked_kv_cache_size(worker, lambda: pytest.fail("vLLM's check must not run"),
                              _memory(41 * MiB))
    assert "41.00 MiB free of 8.00 GiB on NUMA node 0" in str(info.value)
    assert "--max-num-seqs 4 at --max-model-len 160" in str(info.value)
    # exactly the free memory: vLLM decides
    worker = FakeWorker(explicit=41 * MiB, needed=10 * MiB)
    assert checked_kv_cache_size(worker, lambda: 41 * MiB, _memory(41 * MiB)) == 41 * MiB


@pytest.mark.usefixtures("worker_need")
def test_worker_cache_smaller_than_vllms_need_is_refused_at_the_boundary() -> None:
    from vllm_ascend.cpu_runtime.kv_memory import checked_kv_cache_size

    worker = FakeWorker(explicit=None, needed=10 * MiB)
    assert checked_kv_cache_size(worker, lambda: 10 * MiB, _memory(GiB)) == 10 * MiB
    with pytest.raises(KvCacheMemoryError, match=r"given 10\.00 MiB"):
        checked_kv_cache_size(worker, lambda: 10 * MiB - 1, _memory(GiB))


@pytest.mark.usefixtures("worker_need")
def test_worker_vllm_share_error_becomes_advice_other_errors_pass() -> None:
    from vllm_ascend.cpu_runtime.kv_memory import checked_kv_cache_size

    def share_error() -> int:
        raise ValueError("Available memory on node 0 (1/8 GiB) on kv cache allocation ...")

    with pytest.raises(KvCacheMemoryError, match=r"--gpu-memory-utilization 0\.92"):
        checked_kv_cache_size(FakeWorker(None, 1), share_error, _memory(GiB))

    def other() -> int:
        raise ValueError("something else")

    with pytest.raises(ValueError, match="something else"):
        checked_kv_cache_size(FakeWorker(None, 1), other, _memory(GiB))
