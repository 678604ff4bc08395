"""``ascend::paged_attention`` and ``ascend::reshape_and_cache`` against vLLM's own CPU
attention kernels (``vllm._custom_ops.cpu_attn_reshape_and_cache`` /
``cpu_attention_with_kv_cache``, what ``vllm/v1/attention/backends/cpu_attn.py`` runs) on the
same K/V in the same blocks.

vLLM's CPU cache is ``[num_blocks, num_kv_heads, block_size, 2 * head_size]`` (K and V halves of
one row) with block sizes a multiple of 32; ours is ``[num_blocks, block_size, num_kv_heads,
head_size]`` per cache. Each side's own write kernel fills its layout from the same keys,
values and slots; the block tables are shared. vLLM is imported only in a child process (this
suite's rule), once for every case. Tolerances: float32 1e-5; bfloat16/float16 two ulps of the
output's magnitude (vLLM's kernel rounds its partial products, ours rounds once).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = """
import json, sys
import torch
import ascend_kernels  # noqa: F401
from vllm import _custom_ops as ops
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

def run(seqs, num_heads, num_kv, head, block_size, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q_lens = [q for q, _ in seqs]; seq_lens = [s for _, s in seqs]
    T = sum(q_lens)
    needed = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(needed) + 2
    table = torch.zeros(len(seqs), max(needed), dtype=torch.int32)
    order = torch.randperm(num_blocks, generator=g).tolist()
    slots_all = []
    for b, n in enumerate(needed):
        for i in range(n):
            table[b, i] = order.pop()
        slots_all.append([int(table[b, p // block_size]) * block_size + p % block_size
                          for p in range(seq_lens[b])])
    total = sum(seq_lens)
    keys = torch.randn(total, num_kv, head, generator=g).to(dtype)
    values = torch.randn(total, num_kv, head, generator=g).to(dtype)
    slots = torch.tensor([s for row in slots_all for s in row], dtype=torch.int64)
    # ascend layout: [num_blocks, block_size, num_kv, head]
    kc = torch.zeros(num_blocks, block_size, num_kv, head, dtype=dtype)
    vc = torch.zeros_like(kc)
    torch.ops.ascend.reshape_and_cache(keys, values, kc, vc, slots)
    # vLLM CPU layout: [num_blocks, num_kv, block_size, 2 * head] seen as K and V halves
    kv = torch.zeros(num_blocks, num_kv, block_size, 2 * head, dtype=dtype)
    view = kv.view(num_blocks, num_kv, block_size * 2, head)
    key_cache, value_cache = view.chunk(2, dim=2)
    isa = _get_attn_isa(dtype, block_size, head)
    ops.cpu_attn_reshape_and_cache(keys, values, key_cache, value_cache, slots, isa)
    query = torch.randn(T, num_heads, head, generator=g).to(dtype)
    ends = torch.tensor(q_lens).cumsum(0).tolist()
    qsl = torch.tensor([0, *ends], dtype=torch.int32)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    scale = head ** -0.5
    meta = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(seqs), num_heads=num_heads, num_kv_heads=num_kv, head_dim=head,
        seq_lens=sl, dtype=dtype, query_start_loc=qsl, causal=True, sliding_window_size=-1,
        isa=isa, enable_kv_split=False)
    want = torch.empty_like(query)
    ops.cpu_attention_with_kv_cache(
        query=query, key_cache=key_cache, value_cache=value_cache, output=want,
        query_start_loc=qsl, seq_lens=sl, scale=scale, causal=True, alibi_slopes=None,
        sliding_window=-1, block_table=table, softcap=0.0, scheduler_metadata=meta, s_aux=None)
    got = torch.ops.ascend.paged_attention(query, kc, vc, table, ends, seq_lens, scale)
    return float((got.float() - want.float()).abs().max()), float(want.float().abs().max())

cases = json.loads(sys.argv[1])
print(json.dumps([run([tuple(s) for s in c["seqs"]], c["heads"], c["kv"], c["head"], c["block"],
                      getattr(torch, c["dtype"]), i) for i, c in enumerate(cases)]))
"""

CASES = [
    # every attention state in one mixed batch: prefill without cache, decode, prefix-cache
    # hit, one token, chunked prefill ending on a block boundary (64 = 2 blocks of 32)
    *({"seqs": [[5, 5], [1, 40], [3, 70], [1, 1], [20, 64]], "heads": 2 * r, "kv": 2,
       "head": 64, "block": 32, "dtype": "float32"} for r in (1, 2, 3, 4, 8)),
    {"seqs": [[1, 32], [1, 33], [7, 96]], "heads": 8, "kv": 8, "head": 128, "block": 32,
     "dtype": "float32"},
    {"seqs": [[5, 5], [1, 40], [3, 70], [12, 64]], "heads": 6, "kv": 2, "head": 64,
     "block": 32, "dtype": "bfloat16"},
    {"seqs": [[5, 5], [1, 40], [3, 70], [12, 64]], "heads": 8, "kv": 1, "head": 64,
     "block": 64, "dtype": "float16"},
]
TOL = {"float32": 1e-5, "bfloat16": 2 * 2**-7, "float16": 2 * 2**-10}


@pytest.fixture(scope="module")
def differences() -> list[tuple[float, float]]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True,
        timeout=600, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [tuple(d) for d in json.loads(result.stdout.strip().splitlines()[-1])]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_paged_attention_matches_vllms_cpu_attention(
    case: int, differences: list[tuple[float, float]]
) -> None:
    diff, magnitude = differences[case]
    assert magnitude > 0.5  # the comparison saw real values
    assert diff <= TOL[CASES[case]["dtype"]] * max(1.0, magnitude), (CASES[case], diff)
