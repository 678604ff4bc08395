"""Paged attention over a block KV cache, and the KV-cache write: ``paged_attention`` and
``reshape_and_cache``.

Layouts (the NPU runtime's): ``query`` ``[T, num_heads, head_size]`` (TND); each cache
``[num_blocks, block_size, num_kv_heads, head_size]``; ``block_table`` int32
``[num_seqs, max_blocks_per_seq]``; ``query_ends`` the cumulative query-token ends per
sequence; ``seq_lens`` each sequence's KV length, its new tokens included.

Attention is causal, bottom-right aligned (FIA ``sparse_mode=3``): query token ``j`` of a
sequence with ``q`` query tokens and ``s`` KV tokens sees KV positions ``0 .. s - q + j``.
That one rule covers prefill without cache (``q == s``), a prefix-cache hit and chunked
prefill (``q < s``) and decode (``q == 1``) in one batch. GQA: query head ``h`` reads KV head
``h // (num_heads // num_kv_heads)``. Query rows at or past ``query_ends[-1]`` are padding and
come out as zeros. float32 compute, one cast to the query dtype at the end.

The NPU adapters call ``npu_fused_infer_attention_score`` (TND, ``sparse_mode=3`` with the
2048x2048 int8 mask it documents, the caches viewed ``[num_blocks, block_size, H*D]``) and
``npu_scatter_pa_kv_cache(..., cache_mode="Norm")``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from types import ModuleType

import torch

from ascend_kernels.ops.spec import Arguments, OpSpec
from ascend_kernels.validation import check_devices, check_floating, check_index

F32 = torch.float32
#: FIA's optimised causal mask for sparse_mode 2-4: (2048, 2048), 1 = masked out.
FIA_MASK_SIZE = 2048
#: FIA (page attention, TND): query float16/bfloat16 (int8 only quantized); block_size
#: non-zero, at most 512 and a multiple of 16; head_size a multiple of 16; the
#: (blocknum, blocksize, H) cache layout needs KV_N * D <= 65535 (torch-npu docs).
FIA_DTYPES = (torch.float16, torch.bfloat16)
FIA_MAX_BLOCK_SIZE, FIA_ALIGN, FIA_MAX_KV_WIDTH = 512, 16, 65535
#: head size <= 512, at most 256 query heads, query/KV head ratio integral and <= 64.
FIA_MAX_HEAD_SIZE, FIA_MAX_HEADS, FIA_MAX_GROUP = 512, 256, 64
# Query rows attended in one piece: bounds the float32 score buffer (rows x heads x KV
# length) to about 2**26 values (256 MiB) for long prefills.
_SCORE_BUDGET = 1 << 26


# ---------------------------------------------------------------- checks
def _check_caches(
    key_cache: torch.Tensor, value_cache: torch.Tensor, num_kv_heads: int | None,
    head_size: int, dtype: torch.dtype, owner: str,
) -> None:
    if key_cache.dim() != 4:
        raise ValueError(
            "key_cache must be [num_blocks, block_size, num_kv_heads, head_size], got shape"
            f" {list(key_cache.shape)}"
        )
    if value_cache.shape != key_cache.shape or value_cache.dtype != key_cache.dtype:
        raise ValueError(
            f"value_cache must match key_cache (shape {list(key_cache.shape)},"
            f" {key_cache.dtype}), got shape {list(value_cache.shape)}, {value_cache.dtype}"
        )
    _, block_size, kv_heads, cache_head = key_cache.shape
    if block_size <= 0 or kv_heads <= 0:
        raise ValueError(
            f"key_cache needs block_size > 0 and num_kv_heads > 0, got shape"
            f" {list(key_cache.shape)}"
        )
    if cache_head != head_size or (num_kv_heads is not None and kv_heads != num_kv_heads):
        want = "num_kv_heads" if num_kv_heads is None else str(num_kv_heads)
        raise ValueError(
            f"key_cache must be [num_blocks, block_size, {want}, {head_size}] (the"
            f" {owner}'s heads and head_size), got shape {list(key_cache.shape)}"
        )
    if key_cache.dtype != dtype:
        raise ValueError(f"key_cache must have {owner}'s dtype {dtype}, got {key_cache.dtype}")


def check_paged_attention(a: Arguments) -> None:
    """``paged_attention``: shapes, dtypes, GQA divisibility, and that ``query_ends``,
    ``seq_lens`` and ``block_table`` describe the same sequences (block ids themselves are
    data: the reference checks them)."""
    query, key_cache, value_cache, block_table = (
        a["query"], a["key_cache"], a["value_cache"], a["block_table"])
    query_ends, seq_lens, scale = a["query_ends"], a["seq_lens"], a["scale"]
    check_devices(("query", query), ("key_cache", key_cache), ("value_cache", value_cache),
                  ("block_table", block_table))
    check_floating("query", query)
    if query.dim() != 3 or query.shape[1] == 0 or query.shape[2] == 0:
        raise ValueError(
            "query must be [T, num_heads > 0, head_size > 0] (TND), got shape"
            f" {list(query.shape)}"
        )
    num_tokens, num_heads, head_size = query.shape
    _check_caches(key_cache, value_cache, None, head_size, query.dtype, "query")
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}):"
            " query head h reads kv head h // (num_heads // num_kv_heads)"
        )
    if block_table.dtype != torch.int32 or block_table.dim() != 2:
        raise ValueError(
            "block_table must be an int32 tensor [num_seqs, max_blocks_per_seq], got"
            f" {block_table.dtype} {list(block_table.shape)}"
        )
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale!r}")
    num_seqs = block_table.shape[0]
    if len(query_ends) != num_seqs or len(seq_lens) != num_seqs:
        raise ValueError(
            f"query_ends ({len(query_ends)} values) and seq_lens ({len(seq_lens)} values) need"
            f" one value per block_table row ({num_seqs})"
        )
    max_blocks = block_table.shape[1]
    start = 0
    for b, (end, seq_len) in enumerate(zip(query_ends, seq_lens, strict=True)):
        if end < start:
            raise ValueError(
                f"query_ends[{b}] = {end} is below {'query_ends[' + str(b - 1) + ']' if b else '0'}"
                f" = {start}; query_ends are cumulative query-token ends (non-decreasing, >= 0)"
            )
        if seq_len < end - start:
            raise ValueError(
                f"sequence {b} has {end - start} query tokens but seq_lens[{b}] = {seq_len};"
                " seq_lens count the new tokens too, so each must be >= its query tokens"
            )
        needed = -(-seq_len // block_size)
        if needed > max_blocks:
            raise ValueError(
                f"sequence {b} needs {needed} blocks of {block_size} for seq_lens[{b}] ="
                f" {seq_len}, but block_table rows hold {max_blocks}"
            )
        start = end
    if start > num_tokens:
        raise ValueError(
            f"query_ends[-1] = {start} is past the {num_tokens} rows of query; rows at or past"
            " query_ends[-1] are padding, so it must be <= T"
        )


def check_reshape_and_cache(a: Arguments) -> None:
    """``reshape_and_cache``: key/value ``[T, num_kv_heads, head_size]``, caches to match,
    ``slot_mapping`` 1-D int of N <= T slots (slot values: checked by the reference)."""
    key, value, key_cache, value_cache, slots = (
        a["key"], a["value"], a["key_cache"], a["value_cache"], a["slot_mapping"])
    check_devices(("key", key), ("value", value), ("key_cache", key_cache),
                  ("value_cache", value_cache), ("slot_mapping", slots))
    check_floating("key", key)
    if key.dim() != 3:
        raise ValueError(
            f"key must be [T, num_kv_heads, head_size], got shape {list(key.shape)}")
    if value.shape != key.shape or value.dtype != key.dtype:
        raise ValueError(
            f"value must match key (shape {list(key.shape)}, {key.dtype}), got shape"
            f" {list(value.shape)}, {value.dtype}"
        )
    _check_caches(key_cache, value_cache, key.shape[1], key.shape[2], key.dtype, "key")
    check_index("slot_mapping", slots)
    if slots.dim() != 1 or slots.shape[0] > key.shape[0]:
        raise ValueError(
            f"slot_mapping must be 1-D with at most T={key.shape[0]} slots, got shape"
            f" {list(slots.shape)}"
        )


# ---------------------------------------------------------------- references
def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """Masked softmax attention, float32, for ``n`` sequences at once:
    ``softmax(q k^T * scale + mask) v`` through torch's ``scaled_dot_product_attention``
    (its fused CPU kernel; ``enable_gqa`` maps query head ``h`` to kv head ``h // G``).

    ``q`` ``[n, Q, H, D]``, ``k``/``v`` ``[n, L, KVH, D]``, ``visible`` ``[n, Q]``: query row
    ``i`` sees KV positions ``< visible[., i]``. Returns ``[n, Q, H, D]``.
    """
    positions = torch.arange(k.shape[1], device=k.device)
    allowed = positions.view(1, 1, -1) < visible.unsqueeze(-1)  # [n, Q, L]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=allowed[:, None],
        scale=scale, enable_gqa=True,
    )
    return out.transpose(1, 2)


def _check_block_ids(
    block_table: torch.Tensor, blocks_needed: torch.Tensor, num_blocks: int
) -> None:
    columns = torch.arange(block_table.shape[1], device=block_table.device)
    used = columns.view(1, -1) < blocks_needed.view(-1, 1)
    bad = used & ((block_table < 0) | (block_table >= num_blocks))
    if block_table.device.type != "meta" and bool(bad.any()):  # meta: no values to check
        b, j = (int(i) for i in bad.nonzero()[0].tolist())
        raise ValueError(
            f"block_table[{b}, {j}] = {int(block_table[b, j])} is not a block of the cache;"
            f" the entries a sequence uses must lie in [0, {num_blocks})"
        )


def _attend_rows(
    out: torch.Tensor, query: torch.Tensor, rows: torch.Tensor, k: torch.Tensor,
    v: torch.Tensor, visible: torch.Tensor, scale: float,
) -> None:
    """``out[rows]`` = attention of ``query[rows]`` (``n`` sequences of ``Q`` rows each, in
    order) over ``k``/``v`` ``[n, L, KVH, D]``, with ``visible`` ``[n, Q]``."""
    n, q_len = visible.shape
    num_heads, head_size = query.shape[1:]
    q = query[rows].to(F32).view(n, q_len, num_heads, head_size)
    out[rows] = _attend(q, k, v, visible, scale).reshape(n * q_len, num_heads, head_size)


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_ends: Sequence[int],
    seq_lens: Sequence[int],
    scale: float,
) -> torch.Tensor:
    """Reference ``ascend::paged_attention`` (see the module docstring).

    Sequences with the same number of query tokens are attended together (the decodes, and
    the equal prefills of a warm-up or capture batch), each over its KV gathered from the
    block table once, in groups whose score buffer stays within ``_SCORE_BUDGET``; a prefill
    too long for that alone gets one masked softmax in row pieces.
    """
    num_tokens, num_heads, head_size = query.shape
    num_blocks, block_size, num_kv_heads, _ = key_cache.shape
    device = query.device
    out = torch.zeros((num_tokens, num_heads, head_size), dtype=F32, device=device)
    starts = [0, *query_ends][: len(query_ends)]
    lens = torch.tensor(list(seq_lens), dtype=torch.int64, device=device)
    blocks_needed = (lens + block_size - 1) // block_size
    _check_block_ids(block_table, blocks_needed, num_blocks)

    def kv_of(rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        # Each row's blocks up to the longest row's; ids a sequence does not use may hold
        # anything, so they read block 0 and the mask hides them.
        width = max(-(-seq_lens[b] // block_size) for b in rows)
        index = torch.tensor(rows, device=device)
        ids = block_table[index, :width].long()
        columns = torch.arange(width, device=device).view(1, -1)
        ids = torch.where(columns < blocks_needed[index].view(-1, 1), ids, 0)
        shape = (len(rows), width * block_size, num_kv_heads, head_size)
        flat = ids.flatten()  # index_select copies whole blocks (advanced indexing is ~400x
        # slower here)
        return (key_cache.index_select(0, flat).reshape(shape).to(F32),
                value_cache.index_select(0, flat).reshape(shape).to(F32))

    # Decodes share one group (their KV padded to the longest, masked); prefills share one
    # when their query and KV lengths are equal (a warm-up or capture batch), so each
    # prefill's scores are exactly those it gets alone.
    groups: dict[tuple[int, int], list[int]] = {}
    for b, (start, end) in enumerate(zip(starts, query_ends, strict=True)):
        if end - start == 1:
            groups.setdefault((1, 0), []).append(b)
        elif end > start:
            groups.setdefault((end - start, seq_lens[b]), []).append(b)
    for (q_len, seq_len), members in groups.items():
        kv_len = seq_len or max(-(-seq_lens[b] // block_size) for b in members) * block_size
        group = _SCORE_BUDGET // (num_heads * q_len * kv_len)
        if group == 0:  # a long prefill: alone, in pieces of query rows
            piece = max(1, _SCORE_BUDGET // (num_heads * seq_len))
            for b in members:
                k, v = kv_of([b])
                k, v = k[:, :seq_len], v[:, :seq_len]
                for first in range(0, q_len, piece):
                    last = min(q_len, first + piece)
                    rows = torch.arange(starts[b] + first, starts[b] + last, device=device)
                    # Query token j sees positions < seq_len - q_len + j + 1.
                    visible = torch.arange(first, last, device=device) + (seq_len - q_len + 1)
                    _attend_rows(out, query, rows, k, v, visible.view(1, -1), scale)
            continue
        for first in range(0, len(members), group):
            chosen = members[first : first + group]
            k, v = kv_of(chosen)
            if seq_len:
                k, v = k[:, :seq_len], v[:, :seq_len]
            firsts = torch.tensor([starts[b] for b in chosen], device=device)
            steps = torch.arange(q_len, device=device)
            rows = (firsts.view(-1, 1) + steps.view(1, -1)).flatten()
            visible = lens[torch.tensor(chosen, device=device)].view(-1, 1) - q_len + 1 + steps
            _attend_rows(out, query, rows, k, v, visible, scale)
    return out.to(query.dtype)


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Reference ``ascend::reshape_and_cache``: row ``i < N`` of key/value goes to block
    ``slot // block_size``, offset ``slot % block_size``; negative slots are skipped."""
    num_blocks, block_size = key_cache.shape[:2]
    slots = slot_mapping.long()
    too_far = slots >= num_blocks * block_size
    if bool(too_far.any()):
        i = int(too_far.nonzero()[0, 0])
        raise ValueError(
            f"slot_mapping[{i}] = {int(slots[i])} is past the cache's {num_blocks} blocks x"
            f" {block_size} slots; slots must be < {num_blocks * block_size} (negative:"
            " padding, skipped)"
        )
    rows = (slots >= 0).nonzero().squeeze(1)
    kept = slots[rows]
    blocks, offsets = kept // block_size, kept % block_size
    key_cache[blocks, offsets] = key[rows]
    value_cache[blocks, offsets] = value[rows]


# ---------------------------------------------------------------- NPU adapters
@functools.lru_cache(maxsize=8)
def causal_mask(device: torch.device) -> torch.Tensor:
    """FIA's mask for ``sparse_mode=3``: 2048x2048 int8, 1 above the diagonal (masked).

    One per device for the process, as the existing plugin's ``AttentionMaskBuilder`` keeps
    it: it is constant and would otherwise be 4 MiB allocated per layer per step.
    """
    ones = torch.ones(FIA_MASK_SIZE, FIA_MASK_SIZE, dtype=torch.int8, device=device)
    return torch.triu(ones, diagonal=1)


def fia_unsupported_reason(query: torch.Tensor, key_cache: torch.Tensor) -> str | None:
    """Why FIA's documented page-attention rules do not admit these shapes and dtypes (a
    ``[T, num_heads, head_size]`` query over ``[num_blocks, block_size, num_kv_heads,
    head_size]`` caches), or ``None`` when they do."""
    _, block_size, num_kv_heads, head_size = key_cache.shape
    num_heads = query.shape[1] if query.dim() == 3 else 0
    rules = (
        (query.dtype in FIA_DTYPES, f"dtype {query.dtype} (FIA takes float16 or bfloat16)"),
        (0 < head_size <= FIA_MAX_HEAD_SIZE and head_size % FIA_ALIGN == 0,
         f"head size {head_size} (FIA takes at most {FIA_MAX_HEAD_SIZE}, a multiple of "
         f"{FIA_ALIGN})"),
        (0 < num_heads <= FIA_MAX_HEADS, f"{num_heads} query heads (FIA takes 1 to "
         f"{FIA_MAX_HEADS})"),
        (num_kv_heads > 0 and num_heads % num_kv_heads == 0
         and num_heads // num_kv_heads <= FIA_MAX_GROUP,
         f"{num_heads} query heads over {num_kv_heads} KV heads (FIA takes an integral ratio"
         f" of at most {FIA_MAX_GROUP})"),
        (0 < block_size <= FIA_MAX_BLOCK_SIZE and block_size % FIA_ALIGN == 0,
         f"block size {block_size} (FIA takes a multiple of {FIA_ALIGN} up to "
         f"{FIA_MAX_BLOCK_SIZE})"),
        (num_kv_heads * head_size <= FIA_MAX_KV_WIDTH,
         f"KV width {num_kv_heads * head_size} (FIA's paged layout takes at most "
         f"{FIA_MAX_KV_WIDTH})"),
    )
    return next((why for ok, why in rules if not ok), None)


def fia_supported(query: torch.Tensor, key_cache: torch.Tensor) -> bool:
    """Whether FIA's documented page-attention rules admit these shapes and dtypes."""
    return fia_unsupported_reason(query, key_cache) is None


def npu_paged_attention(npu: ModuleType, a: Arguments) -> torch.Tensor:
    """NPU: ``npu_fused_infer_attention_score`` over the paged cache (TND, sparse_mode 3);
    padding rows are not passed to the kernel and come back as zeros."""
    query, key_cache, value_cache = a["query"], a["key_cache"], a["value_cache"]
    query_ends = a["query_ends"]
    rows = query_ends[-1] if len(query_ends) else 0
    if not fia_supported(query, key_cache) or rows == 0:
        return paged_attention(**a)
    num_blocks, block_size, num_kv_heads, head_size = key_cache.shape
    width = num_kv_heads * head_size
    out: torch.Tensor = npu.npu_fused_infer_attention_score(
        query[:rows],
        key_cache.view(num_blocks, block_size, width),
        value_cache.view(num_blocks, block_size, width),
        atten_mask=causal_mask(query.device),
        block_table=a["block_table"],
        input_layout="TND",
        block_size=block_size,
        actual_seq_lengths=list(query_ends),
        actual_seq_lengths_kv=list(a["seq_lens"]),
        num_key_value_heads=num_kv_heads,
        num_heads=query.shape[1],
        scale=a["scale"],
        sparse_mode=3,
    )[0]
    if rows == query.shape[0]:
        return out
    padded: torch.Tensor = query.new_zeros(query.shape)
    padded[:rows] = out
    return padded


def npu_reshape_and_cache(npu: ModuleType, a: Arguments) -> None:
    """NPU: ``npu_scatter_pa_kv_cache`` (ND caches, ``cache_mode="Norm"``) of the first N
    rows. The kernel documents contiguous key, value and slot_mapping ("输入参数不支持非连续")
    and slots in ``[0, num_blocks * block_size)``: the rows are made contiguous here (the
    runtime's value is a view of the qkv split), and callers pass real slots only (skipping
    negative ones here would need a device sync)."""
    slot_mapping = a["slot_mapping"]
    count = slot_mapping.shape[0]
    npu.npu_scatter_pa_kv_cache(a["key"][:count].contiguous(), a["value"][:count].contiguous(),
                                a["key_cache"], a["value_cache"], slot_mapping.contiguous(),
                                cache_mode="Norm")


SPECS = (
    OpSpec(
        "paged_attention",
        "(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_table,"
        " int[] query_ends, int[] seq_lens, float scale) -> Tensor",
        check_paged_attention, paged_attention,
        fake=lambda a: a["query"].new_empty(a["query"].shape),
        npu=npu_paged_attention,
    ),
    OpSpec(
        "reshape_and_cache",
        "(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache,"
        " Tensor slot_mapping) -> ()",
        check_reshape_and_cache, reshape_and_cache, fake=lambda a: None,
        npu=npu_reshape_and_cache, out_names=(),
    ),
)
