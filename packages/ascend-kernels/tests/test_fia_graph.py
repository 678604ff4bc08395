"""``ascend_kernels.fia_graph``: FIA as a graph task (workspace taken once, the ``.out`` kernel on
fixed buffers, TND padding with dummy requests)."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from ascend_kernels.fia_graph import fia_lengths, launch_fia_task, new_fia_task
from torch.utils._python_dispatch import TorchDispatchMode

BF16 = torch.bfloat16


# ---------------------------------------------------------------- padding (TND rule)
def test_three_requests_in_the_graph_of_four_get_one_dummy_request() -> None:
    # vLLM's padding row: no query tokens, KV length 0 (its block-table row is the null block)
    ends, lens = fia_lengths([1, 2, 3, 3], [7, 9, 4, 0], num_tokens=4, rows=4)
    assert ends == [1, 2, 3, 4] and lens == [7, 9, 4, 1]  # ends[-1] == T; every KV >= 1


def test_five_decodes_in_the_graph_of_eight_pad_one_token_per_padding_request() -> None:
    ends, lens = fia_lengths([1, 2, 3, 4, 5], [3, 3, 3, 3, 3], num_tokens=8, rows=8)
    assert ends == [1, 2, 3, 4, 5, 6, 7, 8] and lens == [3] * 5 + [1, 1, 1]


def test_the_last_padding_request_takes_every_leftover_token() -> None:
    ends, lens = fia_lengths([3, 4], [10, 5], num_tokens=9, rows=3)
    assert ends == [3, 4, 9] and lens == [10, 5, 5]


def test_a_full_batch_is_unchanged() -> None:
    assert fia_lengths([1, 2], [5, 6], num_tokens=2, rows=2) == ([1, 2], [5, 6])


def test_leftover_tokens_without_a_padding_request_are_refused() -> None:
    with pytest.raises(ValueError, match=r"actual_seq_lengths\[-1\] == 4"):
        fia_lengths([1, 2, 3], [5, 5, 5], num_tokens=4, rows=3)


# ---------------------------------------------------------------- the task
class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _fake_torch_npu(calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> Any:
    """The two entry points with the real calling convention (``torch_npu.X.out``), recording
    each call; the workspace is 1-D in the query's dtype."""

    def get_max_workspace(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          **kwargs: Any) -> torch.Tensor:
        calls.append(("get_max_workspace", (query, key, value), kwargs))
        return torch.empty(4096, dtype=query.dtype)

    def fia_out(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                **kwargs: Any) -> Any:
        calls.append(("fia.out", (query, key, value), kwargs))
        return tuple(kwargs["out"])

    fia = types.SimpleNamespace(out=fia_out)
    return types.SimpleNamespace(npu_fused_infer_attention_score=fia,
                                 _npu_fused_infer_attention_score_get_max_workspace=get_max_workspace)


def _task_inputs(dtype: torch.dtype = BF16) -> dict[str, Any]:
    return {
        "query": torch.randn(4, 4, 16).to(dtype),
        "key_cache": torch.zeros(3, 128, 2, 16, dtype=dtype),
        "value_cache": torch.zeros(3, 128, 2, 16, dtype=dtype),
        "block_table": torch.zeros(4, 2, dtype=torch.int32),
        "out": torch.empty(4, 4, 16, dtype=dtype),
    }


def test_the_task_takes_its_workspace_with_the_calls_arguments_and_updates_in_place() -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    npu = _fake_torch_npu(calls)
    inputs = _task_inputs()
    task = new_fia_task(npu, **inputs, query_ends=[1, 2, 3, 4], seq_lens=[5, 6, 7, 1], scale=0.25)
    launch_fia_task(npu, task, [1, 2, 3, 4], [5, 6, 7, 1])
    with _Recorder() as recorder:
        launch_fia_task(npu, task, [1, 2, 3, 4], [6, 7, 8, 1])  # the next step's update
    assert recorder.ops == []  # no allocation, no view, no copy: only host-side arguments
    (name, ws_args, ws_kwargs), capture, update = calls
    assert name == "get_max_workspace"
    for _, args, kwargs in (capture, update):
        assert all(a is b for a, b in zip(args, ws_args, strict=True))  # same query and views
        assert kwargs.pop("workspace") is task.workspace
        out = kwargs.pop("out")
        assert out[0] is inputs["out"] and out[1] is task.lse and task.lse.dtype == torch.float32
    assert capture[2] == ws_kwargs  # the workspace sized for exactly the captured call
    assert ws_kwargs["actual_seq_lengths_kv"] == [5, 6, 7, 1]
    assert update[2]["actual_seq_lengths_kv"] == [6, 7, 8, 1]
    assert {k: v for k, v in update[2].items() if k != "actual_seq_lengths_kv"} == {
        k: v for k, v in ws_kwargs.items() if k != "actual_seq_lengths_kv"}
    assert ws_kwargs["input_layout"] == "TND" and ws_kwargs["sparse_mode"] == 3
    key_view = ws_args[1]
    assert key_view.shape == (3, 128, 32)
    assert key_view.data_ptr() == inputs["key_cache"].data_ptr()


def test_a_given_workspace_is_shared_not_taken_again() -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    shared = torch.empty(4096, dtype=BF16)
    task = new_fia_task(_fake_torch_npu(calls), **_task_inputs(), query_ends=[1, 2, 3, 4],
                        seq_lens=[1, 1, 1, 1], scale=1.0, workspace=shared)
    assert task.workspace is shared and calls == []


@pytest.mark.parametrize(("change", "reason"), [
    ({"dtype": torch.float32}, r"dtype torch.float32 \(FIA takes float16 or bfloat16\)"),
])
def test_a_model_fia_cannot_run_is_no_graph_task(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        new_fia_task(_fake_torch_npu([]), **_task_inputs(**change), query_ends=[1, 2, 3, 4],
                     seq_lens=[1, 1, 1, 1], scale=1.0)
