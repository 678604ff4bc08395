"""FIA as a task of a captured graph: the ``.out`` form over buffers taken at capture.

A FULL graph holds each layer's attention as one task (captured between
``graph_task_group_begin/end``). A replay runs the captured kernel on the captured addresses, so
before it the runtime re-issues the task between ``graph_task_update_begin/end`` with the step's
sequence lengths, and that update must be the same kernel on the same output and workspace:
``npu_fused_infer_attention_score.out`` with the workspace that
``_npu_fused_infer_attention_score_get_max_workspace`` sized at capture (the torch-npu doc
example of ``graph_task_update_begin``; upstream ``attention_v1.py``). A functional call would
allocate its output during the update, and that memory is freed when the update returns while
the replayed task still writes through it. So :func:`launch_fia_task` allocates nothing.

TND rule: the query's first dimension equals ``actual_seq_lengths[-1]``, and a graph's query
always has its captured row count. :func:`fia_lengths` pads a smaller batch the way upstream's
``_pad_query_start_loc_for_fia`` does: the padding requests take the leftover tokens (one each,
the last one the rest) and a KV length of at least 1 (their block-table rows hold the null
block), so shapes and the task sequence never change between capture and update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import torch

from ascend_kernels.ops.attention import causal_mask, fia_unsupported_reason

FIA_SPARSE_MODE = 3  # causal, bottom-right aligned, with the 2048x2048 mask


@dataclass(frozen=True)
class FiaTask:
    """The fixed tensors and sizes of one layer's FIA task; only the lengths change."""

    query: torch.Tensor  # [T, num_heads, head_size]
    key: torch.Tensor  # [num_blocks, block_size, num_kv_heads * head_size] (a cache view)
    value: torch.Tensor
    block_table: torch.Tensor  # int32 [rows, max_blocks]
    mask: torch.Tensor
    workspace: torch.Tensor
    out: torch.Tensor  # [T, num_heads, head_size], written by every launch
    lse: torch.Tensor  # softmax_lse (not computed: softmax_lse_flag is False)
    num_heads: int
    num_kv_heads: int
    block_size: int
    scale: float

    @property
    def rows(self) -> int:
        """Requests the task attends (its block table's rows)."""
        return int(self.block_table.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.query.shape[0])


def fia_lengths(query_ends: Sequence[int], seq_lens: Sequence[int], num_tokens: int,
                rows: int) -> tuple[list[int], list[int]]:
    """``actual_seq_lengths`` and ``actual_seq_lengths_kv`` for ``rows`` requests over
    ``num_tokens`` query rows. The real requests are the leading ones with a KV length > 0;
    the rest (and rows past the given lists) are padding requests: each takes one leftover
    token (the last one all that remain) and a KV length of max(1, its tokens), so
    ``ends[-1] == num_tokens``. ValueError when that cannot hold (no padding request for
    leftover tokens, or the real tokens exceed the rows)."""
    real = 0
    while real < min(rows, len(seq_lens), len(query_ends)) and seq_lens[real] > 0:
        real += 1
    ends = [int(e) for e in query_ends[:real]]
    lens = [int(s) for s in seq_lens[:real]]
    used = ends[-1] if ends else 0
    padding = rows - real
    if used > num_tokens or (padding == 0 and used != num_tokens):
        raise ValueError(
            f"{real} requests end at query token {used} but the captured task has {rows} "
            f"requests over {num_tokens} tokens: FIA (TND) needs actual_seq_lengths[-1] == "
            f"{num_tokens}, and there is no padding request to take the difference")
    for i in range(padding):
        end = num_tokens if i == padding - 1 else min(used + 1, num_tokens)
        lens.append(max(1, end - used))
        ends.append(end)
        used = end
    return ends, lens


def _fia_kwargs(task: FiaTask, query_ends: Sequence[int], seq_lens: Sequence[int]
                ) -> dict[str, Any]:
    return {
        "atten_mask": task.mask,
        "block_table": task.block_table,
        "input_layout": "TND",
        "block_size": task.block_size,
        "actual_seq_lengths": list(query_ends),
        "actual_seq_lengths_kv": list(seq_lens),
        "num_key_value_heads": task.num_kv_heads,
        "num_heads": task.num_heads,
        "scale": task.scale,
        "sparse_mode": FIA_SPARSE_MODE,
    }


def new_fia_task(npu: ModuleType, query: torch.Tensor, key_cache: torch.Tensor,
                 value_cache: torch.Tensor, block_table: torch.Tensor, out: torch.Tensor,
                 query_ends: Sequence[int], seq_lens: Sequence[int], scale: float,
                 workspace: torch.Tensor | None = None) -> FiaTask:
    """The task for one layer at capture: the caches viewed as FIA reads them, the mask, and
    a workspace from ``_npu_fused_infer_attention_score_get_max_workspace`` (same arguments as
    the call) unless one is given (layers of one graph share it: their tasks run in turn).
    ``query_ends``/``seq_lens`` must already satisfy the TND rule (:func:`fia_lengths`).
    ValueError when FIA cannot run these shapes (the caller then must not capture)."""
    reason = fia_unsupported_reason(query, key_cache)
    if reason is not None:
        raise ValueError(f"attention cannot be a graph task on FIA: {reason}")
    if out.shape != query.shape or out.dtype != query.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {query.dtype} tensor shaped like the query "
                         f"{list(query.shape)}, got {list(out.shape)} {out.dtype}")
    num_blocks, block_size, num_kv_heads, head_size = key_cache.shape
    width = num_kv_heads * head_size
    task = FiaTask(
        query=query, key=key_cache.view(num_blocks, block_size, width),
        value=value_cache.view(num_blocks, block_size, width), block_table=block_table,
        mask=causal_mask(query.device), workspace=torch.empty(0), out=out,
        lse=torch.empty(0, dtype=torch.float32, device=query.device),
        num_heads=int(query.shape[1]), num_kv_heads=int(num_kv_heads),
        block_size=int(block_size), scale=float(scale),
    )
    if workspace is None:
        workspace = npu._npu_fused_infer_attention_score_get_max_workspace(
            task.query, task.key, task.value, **_fia_kwargs(task, query_ends, seq_lens))
    return replace(task, workspace=workspace)


def launch_fia_task(npu: ModuleType, task: FiaTask, query_ends: Sequence[int],
                    seq_lens: Sequence[int]) -> None:
    """Issue the task's kernel: ``npu_fused_infer_attention_score.out`` into ``task.out`` with
    ``task.workspace`` (at capture inside the task group, before a replay inside the update)."""
    npu.npu_fused_infer_attention_score.out(
        task.query, task.key, task.value, **_fia_kwargs(task, query_ends, seq_lens),
        workspace=task.workspace, out=[task.out, task.lse])
