"""``npu_runtime.device_assignment``: the NPU of each data-parallel rank's worker.

The oracle is vLLM's own code: the engine side's ``get_physical_gpu_ids_for_local_dp_rank``
(what ``CoreEngineProcManager`` stores in ``assigned_physical_gpu_ids`` for an out-of-tree
platform's DP engine) and the platform's ``logical_device_id_to_visible_device_id`` (what
vLLM's GPU worker turns into ``torch.device``), both with the NPU platform's device-control
variable. The values are also written out in the table.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm_ascend.npu_runtime.device_assignment import NpuAssignment, assign_npu
from vllm_ascend.npu_runtime.device_check import NpuUnavailableError

ENV = "ASCEND_RT_VISIBLE_DEVICES"


def parallel(*, tp: int = 1, dp_local: int | None = 0, assigned: list[int] | None = None,
             backend: str = "mp") -> SimpleNamespace:
    """A dense DP engine's parallel config as vLLM leaves it in the engine core
    (``reconfigure_for_independent_dp_rank``: DP size 1, the DP rank in ``data_parallel_index``
    and ``data_parallel_rank_local``)."""
    return SimpleNamespace(
        tensor_parallel_size=tp, pipeline_parallel_size=1, prefill_context_parallel_size=1,
        world_size=tp, data_parallel_size=1, data_parallel_rank=0,
        data_parallel_rank_local=dp_local, data_parallel_index=dp_local or 0,
        distributed_executor_backend=backend, data_parallel_backend="mp", nnodes_within_dp=1,
        assigned_physical_gpu_ids=assigned)


def vllm_assignment(monkeypatch: pytest.MonkeyPatch, visible: str | None, dp_local: int,
                    tp: int, local_rank: int) -> tuple[list[int], NpuAssignment]:
    """vLLM's shard for this DP engine and the (physical, index) its worker's rank gets."""
    import vllm.platforms.interface as interface
    import vllm.v1.engine.utils as engine_utils
    from vllm_ascend.platform.npu import NPUPlatform

    if visible is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, visible)
    monkeypatch.setattr(engine_utils, "current_platform", NPUPlatform)
    monkeypatch.setattr(interface, "_assigned_physical_gpu_ids", None)
    shard = engine_utils.get_physical_gpu_ids_for_local_dp_rank(ENV, dp_local, tp)
    monkeypatch.setattr(interface, "_assigned_physical_gpu_ids", shard)
    index = NPUPlatform.logical_device_id_to_visible_device_id(local_rank)
    return shard, NpuAssignment(physical=shard[local_rank], index=index)


@pytest.mark.parametrize(("visible", "dp_local", "tp", "local_rank", "physical", "index"), [
    (None, 0, 1, 0, 0, 0),
    (None, 1, 1, 0, 1, 1),       # DP rank 1 of DP=2, TP=1: NPU 1
    (None, 1, 2, 1, 3, 3),       # DP rank 1, TP=2, its second rank: NPU 3
    ("4,5", 1, 1, 0, 5, 1),      # torch numbers the visible devices 0, 1
    ("5,4", 0, 1, 0, 5, 0),
    ("0,2,4,6", 1, 2, 0, 4, 2),
])
def test_each_dp_ranks_worker_gets_the_npu_vllm_assigns_its_engine(
        monkeypatch: pytest.MonkeyPatch, visible: str | None, dp_local: int, tp: int,
        local_rank: int, physical: int, index: int) -> None:
    shard, expected = vllm_assignment(monkeypatch, visible, dp_local, tp, local_rank)
    assert expected == NpuAssignment(physical, index)
    got = assign_npu(parallel(tp=tp, dp_local=dp_local, assigned=shard), local_rank, visible,
                     device_count=8 if visible is None else len(visible.split(",")))
    assert got == expected


@pytest.mark.parametrize(("visible", "physical", "index"), [(None, 3, 3), ("2,3,6,7", 7, 3)])
def test_without_vllms_map_the_local_rank_is_shifted_by_the_dp_shard(
        visible: str | None, physical: int, index: int) -> None:
    """Data-parallel engines without a device map (in one process): vLLM's CUDA worker rule,
    local DP rank x TP + local rank = 1 x 2 + 1 = 3."""
    got = assign_npu(parallel(tp=2, dp_local=1), 1, visible, device_count=4 if visible else 8)
    assert got == NpuAssignment(physical, index)


def test_one_engine_without_map_or_visible_devices_drives_npu_local_rank() -> None:
    assert assign_npu(parallel(tp=2, dp_local=None), 1, None, 2) == NpuAssignment(1, 1)


def test_an_assigned_npu_beyond_the_visible_count_is_one_error_naming_both() -> None:
    with pytest.raises(NpuUnavailableError,
                       match=r"needs NPU 1 .*only 1 NPU\(s\) are visible "
                             r"\(ASCEND_RT_VISIBLE_DEVICES is not set\)"):
        assign_npu(parallel(dp_local=1, assigned=[1]), 0, None, device_count=1)
    assert assign_npu(parallel(dp_local=1, assigned=[1]), 0, None, 2) == NpuAssignment(1, 1)


def test_an_assigned_npu_that_is_not_visible_is_one_error() -> None:
    with pytest.raises(NpuUnavailableError,
                       match=r"data-parallel rank 1, local rank 0 was assigned NPU 3, which is "
                             r"not visible \(ASCEND_RT_VISIBLE_DEVICES='0,1'\)"):
        assign_npu(parallel(dp_local=1, assigned=[3]), 0, "0,1", device_count=2)


def test_a_local_rank_outside_the_engines_devices_is_one_error() -> None:
    with pytest.raises(NpuUnavailableError, match=r"local rank 1 of data-parallel rank 1 has no "
                                                  r"NPU in the devices vLLM assigned .*\[1\]"):
        assign_npu(parallel(tp=2, dp_local=1, assigned=[1]), 1, None, device_count=4)


@pytest.mark.parametrize("visible", ["a,b", "0,0"])
def test_an_unreadable_visible_devices_variable_is_one_error_naming_it(visible: str) -> None:
    with pytest.raises(NpuUnavailableError, match=r"^ASCEND_RT_VISIBLE_DEVICES: visible devices"):
        assign_npu(parallel(), 0, visible, device_count=2)
