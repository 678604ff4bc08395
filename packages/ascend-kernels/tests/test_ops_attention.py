"""``paged_attention`` and ``reshape_and_cache``: against attention written out over each
sequence's contiguous K/V, at every attention state and at the block-table boundaries; the
argument checks' exact messages; the NPU adapters through the seam's fake torch_npu.

Expected values: ``softmax(q . k^T * scale + mask) v`` per query token and head, in float64,
over K/V kept contiguous per sequence (never read back through the paged cache); the mask is
the contract's bottom-right causal rule written as a loop bound. Tolerances: float32 2e-6
(reduction order); bfloat16/float16 one rounding of the float32 result (the written-out
value is computed from the same rounded inputs).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from ascend_kernels import DeviceMismatchError
from ascend_kernels.ops import spec
from torch_npu_double.seam import FakeTorchNpu

from .exact_messages import Message, exact_message_test, positional_args

A = torch.ops.ascend
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
TOL = {F32: 2e-6, BF16: 1e-2, F16: 2e-3}


def written_out(
    q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
    q_lens: list[int], scale: float,
) -> torch.Tensor:
    """softmax(QK^T * scale + mask) V per sequence, token and head, in float64; rows after
    the last sequence stay zero."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    num_heads, num_kv = q.shape[1], keys[0].shape[1] if keys else 1
    row = 0
    for k, v, q_len in zip(keys, values, q_lens, strict=True):
        seq_len = k.shape[0]
        for j in range(q_len):
            for h in range(num_heads):
                kv_head = h // (num_heads // num_kv)
                visible = seq_len - q_len + j + 1  # positions 0 .. seq_len - q_len + j
                scores = [float(q[row + j, h].double() @ k[p, kv_head].double()) * scale
                          for p in range(visible)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                acc = sum(w / total * v[p, kv_head].double() for p, w in enumerate(weights))
                out[row + j, h] = acc
        row += q_len
    return out


def paged(
    seqs: list[tuple[int, int]], *, num_heads: int = 4, num_kv: int = 2, head: int = 8,
    block_size: int = 4, spare_columns: int = 0, padding_rows: int = 0,
    dtype: torch.dtype = F32, seed: int = 0,
) -> dict[str, Any]:
    """A batch of ``(q_len, seq_len)`` sequences: contiguous K/V per sequence, scattered into
    shuffled blocks of a cache (other blocks hold noise); unused block_table entries hold
    ids no cache has."""
    g = torch.Generator().manual_seed(seed)
    keys = [torch.randn(s, num_kv, head, generator=g).to(dtype) for _, s in seqs]
    values = [torch.randn(s, num_kv, head, generator=g).to(dtype) for _, s in seqs]
    needed = [-(-s // block_size) for _, s in seqs]
    columns = max([*needed, 1]) + spare_columns
    num_blocks = sum(needed) + 3
    cache_shape = (num_blocks, block_size, num_kv, head)
    key_cache = torch.randn(cache_shape, generator=g).to(dtype)
    value_cache = torch.randn(cache_shape, generator=g).to(dtype)
    order = torch.randperm(num_blocks, generator=g).tolist()
    table = torch.full((len(seqs), columns), 10**6, dtype=torch.int32)
    for b, ((_, s), n) in enumerate(zip(seqs, needed, strict=True)):
        for i in range(n):
            block = order.pop()
            table[b, i] = block
            rows = slice(i * block_size, min(s, (i + 1) * block_size))
            key_cache[block, : rows.stop - rows.start] = keys[b][rows]
            value_cache[block, : rows.stop - rows.start] = values[b][rows]
    q_lens = [q for q, _ in seqs]
    query = torch.randn(sum(q_lens) + padding_rows, num_heads, head, generator=g).to(dtype)
    ends = torch.tensor([0, *q_lens]).cumsum(0)[1:].tolist()
    return {"query": query, "key_cache": key_cache, "value_cache": value_cache,
            "block_table": table, "query_ends": ends, "seq_lens": [s for _, s in seqs],
            "scale": 1 / math.sqrt(head), "keys": keys, "values": values, "q_lens": q_lens}


def run(case: dict[str, Any]) -> torch.Tensor:
    names = spec("paged_attention").argument_names
    return A.paged_attention(*(case[n] for n in names))  # type: ignore[no-any-return]


def check(case: dict[str, Any]) -> None:
    got = run(case)
    want = written_out(case["query"], case["keys"], case["values"], case["q_lens"],
                       case["scale"])
    assert got.dtype == case["query"].dtype and got.shape == case["query"].shape
    torch.testing.assert_close(got.double(), want.to(got.dtype).double(),
                               atol=TOL[got.dtype], rtol=TOL[got.dtype])


STATES = {
    "prefill_no_cache": [(5, 5), (3, 3)],
    "prefix_cache_hit": [(3, 9), (2, 6)],
    "decode": [(1, 7), (1, 3), (1, 12)],
    "chunked_prefill": [(4, 12), (6, 6)],
    "mixed": [(5, 5), (1, 9), (3, 11), (1, 1), (2, 8)],
}


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("state", list(STATES))
def test_every_attention_state_matches_attention_written_out(
    state: str, dtype: torch.dtype
) -> None:
    check(paged(STATES[state], dtype=dtype))


@pytest.mark.parametrize("ratio", [1, 2, 3, 4, 8])
def test_gqa_ratios(ratio: int) -> None:
    check(paged(STATES["mixed"], num_heads=2 * ratio, num_kv=2, seed=ratio))


@pytest.mark.parametrize(
    "seqs",
    [[(1, 1)], [(8, 8)], [(1, 8), (3, 12)], [(1, 9)], [(2, 4), (1, 4)]],
    ids=["one_token", "prefill_ending_on_a_block_boundary", "filling_the_last_block",
         "one_past_a_block_boundary", "exactly_one_block"],
)
def test_block_boundaries(seqs: list[tuple[int, int]]) -> None:
    # block_size 4: 8 and 12 fill their last block exactly (the block_table row has no
    # spare entry), 9 starts a new block with one token.
    case = paged(seqs)
    assert case["block_table"].shape[1] == max(-(-s // 4) for _, s in seqs)
    check(case)


def test_unused_trailing_block_table_entries_and_padding_rows() -> None:
    case = paged(STATES["mixed"], spare_columns=3, padding_rows=4)
    check(case)
    assert torch.equal(run(case)[-4:], torch.zeros(4, 4, 8))


def test_long_prefill_is_attended_in_row_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_kernels.ops import attention

    monkeypatch.setattr(attention, "_SCORE_BUDGET", 4 * 4 * 9)  # 4 query rows a piece
    check(paged([(9, 9), (7, 10)]))


@pytest.mark.parametrize("budget_sequences", [1, 2, 3, 100])
def test_equal_prefills_are_attended_in_groups_as_each_would_be_alone(
    monkeypatch: pytest.MonkeyPatch, budget_sequences: int
) -> None:
    """Prefills of equal query and KV lengths share a masked softmax, as many at a time as
    the score budget holds (3 query rows x 4 heads x 9 KV positions each); each one's rows
    equal what it gets alone in a batch, bit for bit (decodes share theirs too)."""
    from ascend_kernels.ops import attention

    monkeypatch.setattr(attention, "_SCORE_BUDGET", 3 * 4 * 9 * budget_sequences)
    seqs = [(3, 9), (3, 9), (1, 4), (3, 9), (3, 5), (1, 7), (2, 2), (3, 9)]
    case = paged(seqs, seed=7)
    check(case)
    got, row = run(case), 0
    for b, (q_len, _) in enumerate(seqs):
        alone = paged(seqs, seed=7)
        alone["query_ends"] = [0] * b + [q_len] + [q_len] * (len(seqs) - b - 1)
        alone["query"] = torch.cat([case["query"][row : row + q_len],
                                    torch.zeros(1, *case["query"].shape[1:])])
        if q_len > 1:
            assert torch.equal(run(alone)[:q_len], got[row : row + q_len]), b
        row += q_len


def test_empty_batch_and_all_padding() -> None:
    case = paged([], padding_rows=3)
    case["block_table"] = torch.zeros(0, 1, dtype=torch.int32)
    assert torch.equal(run(case), torch.zeros(3, 4, 8))


# ---------------------------------------------------------------- reshape_and_cache
def test_reshape_and_cache_writes_slots_across_blocks_and_skips_negative_ones() -> None:
    key, value = torch.randn(6, 2, 8), torch.randn(6, 2, 8)
    key_cache, value_cache = torch.randn(5, 4, 2, 8), torch.randn(5, 4, 2, 8)
    k0, v0 = key_cache.clone(), value_cache.clone()
    slots = torch.tensor([3, 4, -1, 19, 0], dtype=torch.int32)  # N=5 < T=6
    assert A.reshape_and_cache(key, value, key_cache, value_cache, slots) is None
    want_k, want_v = k0.clone(), v0.clone()
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            want_k[slot // 4, slot % 4], want_v[slot // 4, slot % 4] = key[i], value[i]
    assert torch.equal(key_cache, want_k) and torch.equal(value_cache, want_v)
    # Row 2 (slot -1) and row 5 (past N) were not written anywhere.
    for row in (2, 5):
        assert not (key_cache == key[row]).all(-1).all(-1).any()


def test_cache_written_by_reshape_and_cache_reads_back_through_paged_attention() -> None:
    case = paged([(3, 7), (1, 5)], block_size=4)
    table, key_cache, value_cache = case["block_table"], case["key_cache"], case["value_cache"]
    new_k, new_v = torch.randn(4, 2, 8), torch.randn(4, 2, 8)
    slots = []
    for b, (q_len, s) in enumerate([(3, 7), (1, 5)]):
        for pos in range(s - q_len, s):
            slots.append(int(table[b, pos // 4]) * 4 + pos % 4)
    A.reshape_and_cache(new_k, new_v, key_cache, value_cache, torch.tensor(slots))
    case["keys"][0][4:], case["values"][0][4:] = new_k[:3], new_v[:3]
    case["keys"][1][4:], case["values"][1][4:] = new_k[3:], new_v[3:]
    check(case)


# ---------------------------------------------------------------- argument checks
def _pa(v: Any, **changes: Any) -> tuple[Any, ...]:
    return positional_args(v, "paged_attention", **changes)


I32 = torch.int32
MESSAGES: list[Message] = [
    ("gqa", lambda v: A.paged_attention(*_pa(v, query=torch.ones(5, 3, 16))), ValueError,
     "num_heads (3) must be a multiple of num_kv_heads (2): query head h reads kv head"
     " h // (num_heads // num_kv_heads)"),
    ("query rank", lambda v: A.paged_attention(*_pa(v, query=torch.ones(5, 64))), ValueError,
     "query must be [T, num_heads > 0, head_size > 0] (TND), got shape [5, 64]"),
    ("cache head size", lambda v: A.paged_attention(*_pa(
        v, key_cache=torch.ones(6, 4, 2, 8), value_cache=torch.ones(6, 4, 2, 8))), ValueError,
     "key_cache must be [num_blocks, block_size, num_kv_heads, 16] (the query's heads and"
     " head_size), got shape [6, 4, 2, 8]"),
    ("value cache", lambda v: A.paged_attention(*_pa(v, value_cache=torch.ones(6, 4, 2, 16,
                                                                              dtype=BF16))),
     ValueError, "value_cache must match key_cache (shape [6, 4, 2, 16], torch.float32), got"
     " shape [6, 4, 2, 16], torch.bfloat16"),
    ("cache dtype", lambda v: A.paged_attention(*_pa(
        v, key_cache=torch.ones(6, 4, 2, 16, dtype=F16),
        value_cache=torch.ones(6, 4, 2, 16, dtype=F16))), ValueError,
     "key_cache must have query's dtype torch.float32, got torch.float16"),
    ("block_table dtype", lambda v: A.paged_attention(*_pa(
        v, block_table=torch.zeros(2, 2, dtype=torch.int64))), ValueError,
     "block_table must be an int32 tensor [num_seqs, max_blocks_per_seq], got torch.int64"
     " [2, 2]"),
    ("lengths", lambda v: A.paged_attention(*_pa(v, seq_lens=[3])), ValueError,
     "query_ends (2 values) and seq_lens (1 values) need one value per block_table row (2)"),
    ("decreasing ends", lambda v: A.paged_attention(*_pa(v, query_ends=[3, 2])), ValueError,
     "query_ends[1] = 2 is below query_ends[0] = 3; query_ends are cumulative query-token"
     " ends (non-decreasing, >= 0)"),
    ("negative end", lambda v: A.paged_attention(*_pa(v, query_ends=[-1, 2])), ValueError,
     "query_ends[0] = -1 is below 0 = 0; query_ends are cumulative query-token ends"
     " (non-decreasing, >= 0)"),
    ("seq shorter than its query", lambda v: A.paged_attention(*_pa(v, seq_lens=[2, 6])),
     ValueError, "sequence 0 has 3 query tokens but seq_lens[0] = 2; seq_lens count the new"
     " tokens too, so each must be >= its query tokens"),
    ("more blocks than the row holds", lambda v: A.paged_attention(*_pa(v, seq_lens=[3, 9])),
     ValueError, "sequence 1 needs 3 blocks of 4 for seq_lens[1] = 9, but block_table rows"
     " hold 2"),
    ("past T", lambda v: A.paged_attention(*_pa(v, query_ends=[3, 6], seq_lens=[3, 6])),
     ValueError, "query_ends[-1] = 6 is past the 5 rows of query; rows at or past"
     " query_ends[-1] are padding, so it must be <= T"),
    ("block id", lambda v: A.paged_attention(*_pa(
        v, block_table=torch.tensor([[2, 0], [6, 1]], dtype=I32))), ValueError,
     "block_table[1, 0] = 6 is not a block of the cache; the entries a sequence uses must lie"
     " in [0, 6)"),
    ("scale", lambda v: A.paged_attention(*_pa(v, scale=float("nan"))), ValueError,
     "scale must be finite, got nan"),
    ("slot", lambda v: A.reshape_and_cache(*positional_args(
        v, "reshape_and_cache", slot_mapping=torch.tensor([3, 24]))), ValueError,
     "slot_mapping[1] = 24 is past the cache's 6 blocks x 4 slots; slots must be < 24"
     " (negative: padding, skipped)"),
    ("slot count", lambda v: A.reshape_and_cache(*positional_args(
        v, "reshape_and_cache", slot_mapping=torch.zeros(6, dtype=torch.int64))), ValueError,
     "slot_mapping must be 1-D with at most T=5 slots, got shape [6]"),
    ("cache heads", lambda v: A.reshape_and_cache(*positional_args(
        v, "reshape_and_cache", key_cache=torch.ones(6, 4, 1, 16),
        value_cache=torch.ones(6, 4, 1, 16))), ValueError,
     "key_cache must be [num_blocks, block_size, 2, 16] (the key's heads and head_size), got"
     " shape [6, 4, 1, 16]"),
    ("value like key", lambda v: A.reshape_and_cache(*positional_args(
        v, "reshape_and_cache", value=torch.ones(5, 2, 8))), ValueError,
     "value must match key (shape [5, 2, 16], torch.float32), got shape [5, 2, 8],"
     " torch.float32"),
    ("device", lambda v: A.paged_attention(*_pa(
        v, block_table=torch.zeros(2, 2, dtype=I32, device="meta"))), DeviceMismatchError,
     "block_table is on meta but query is on cpu; all tensor arguments must be on the same"
     " device"),
]

test_exact_message = exact_message_test(MESSAGES)


def test_unused_block_table_entries_are_not_checked(valid_args: Any) -> None:
    # Sequence 0 uses one block; its second entry may hold anything.
    args = valid_args("paged_attention")
    args["block_table"] = torch.tensor([[2, -7], [5, 1]], dtype=I32)
    assert run(args).shape == (5, 4, 16)


# ---------------------------------------------------------------- NPU adapters (seam)
def _npu_case(dtype: torch.dtype = BF16, padding_rows: int = 2) -> dict[str, Any]:
    return paged([(3, 20), (1, 17)], num_heads=4, num_kv=2, head=16, block_size=16,
                 padding_rows=padding_rows, dtype=dtype, spare_columns=1)


def test_paged_attention_calls_fia_with_the_contracts_arguments(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    case = _npu_case()
    out = run(case)
    call = fake_npu_on_cpu.kernels.last("npu_fused_infer_attention_score")
    assert fake_npu_on_cpu.kernels.names() == ["npu_fused_infer_attention_score"]
    query, key, value = call.args
    # Only the 4 real rows go in; the caches as views [num_blocks, block_size, H * D].
    assert query.shape == (4, 4, 16) and query.data_ptr() == case["query"].data_ptr()
    for view, cache in ((key, case["key_cache"]), (value, case["value_cache"])):
        assert view.shape == (cache.shape[0], 16, 32) and view.data_ptr() == cache.data_ptr()
    mask = call.kwargs.pop("atten_mask")
    assert mask.dtype == torch.int8 and mask.shape == (2048, 2048)
    assert torch.equal(mask, torch.ones(2048, 2048, dtype=torch.int8).triu(1))
    assert call.kwargs.pop("block_table") is case["block_table"]
    assert call.kwargs == {
        "input_layout": "TND", "block_size": 16, "actual_seq_lengths": [3, 4],
        "actual_seq_lengths_kv": [20, 17], "num_key_value_heads": 2, "num_heads": 4,
        "scale": 0.25, "sparse_mode": 3,
    }
    assert torch.equal(out[:4], call.outputs[0]) and torch.equal(out[4:], torch.zeros(2, 4, 16))


def test_paged_attention_without_padding_returns_the_kernels_output(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    out = run(_npu_case(F16, padding_rows=0))
    assert out is fake_npu_on_cpu.kernels.last("npu_fused_infer_attention_score").outputs[0]


@pytest.mark.parametrize("change", ["float32", "block_size_8", "head_size_24"])
def test_paged_attention_runs_the_reference_where_fia_documents_no_support(
    change: str, fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    # FIA: query float16/bfloat16; block_size a multiple of 16 (<= 512); head_size of 16.
    kwargs = {"float32": {"dtype": F32}, "block_size_8": {}, "head_size_24": {}}[change]
    case = (paged([(3, 20), (1, 17)], head=16, block_size=8, dtype=BF16)
            if change == "block_size_8" else
            paged([(3, 20), (1, 17)], head=24, block_size=16, dtype=BF16)
            if change == "head_size_24" else _npu_case(**kwargs))
    check(case)
    assert fake_npu_on_cpu.calls == []


def test_reshape_and_cache_calls_scatter_pa_kv_cache_in_norm_mode(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    key, value = torch.randn(5, 2, 16).to(BF16), torch.randn(5, 2, 16).to(BF16)
    key_cache, value_cache = torch.zeros(3, 16, 2, 16, dtype=BF16), torch.zeros(3, 16, 2, 16,
                                                                                 dtype=BF16)
    slots = torch.tensor([0, 17, 40], dtype=torch.int32)
    A.reshape_and_cache(key, value, key_cache, value_cache, slots)
    call = fake_npu_on_cpu.kernels.last("npu_scatter_pa_kv_cache")
    k, v, kc, vc, sm = call.args
    assert k.shape == (3, 2, 16) and k.data_ptr() == key.data_ptr()  # the first N rows
    assert v.shape == (3, 2, 16) and v.data_ptr() == value.data_ptr()
    assert kc is key_cache and vc is value_cache and sm is slots
    assert call.kwargs == {"cache_mode": "Norm"}
    marker = fake_npu_on_cpu.kernels.marker("npu_scatter_pa_kv_cache", 0)
    assert torch.all(key_cache == marker)  # the kernel wrote the caller's cache in place


def test_reshape_and_cache_hands_the_scatter_contiguous_rows_of_views(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    # The runtime's key and value are column slices of one qkv tensor (non-contiguous views);
    # npu_scatter_pa_kv_cache documents contiguous key, value and slot_mapping only.
    qkv = torch.randn(5, 3 * 32).to(BF16)
    key = qkv[:, 32:64].view(5, 2, 16)
    value = qkv[:, 64:].view(5, 2, 16)
    slots = torch.tensor([9, 0, 17, 40, 3, 99], dtype=torch.int32)[::2]  # strided: [9, 17, 3]
    assert not (key.is_contiguous() or value.is_contiguous() or slots.is_contiguous())
    key_cache, value_cache = (torch.zeros(3, 16, 2, 16, dtype=BF16) for _ in range(2))
    A.reshape_and_cache(key, value, key_cache, value_cache, slots)
    k, v, _, _, sm = fake_npu_on_cpu.kernels.last("npu_scatter_pa_kv_cache").args
    assert k.is_contiguous() and v.is_contiguous() and sm.is_contiguous()
    assert torch.equal(k, key[:3]) and torch.equal(v, value[:3])
    assert sm.tolist() == [9, 17, 3]
