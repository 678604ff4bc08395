"""Which NPU a worker drives: vLLM's device map for its engine, the visible devices, torch's
index.
"""
# vLLM 0.32 gives a DP engine its shard's physical ids (parallel_config.assigned_physical_gpu_ids,
# see vLLM's v1/engine/utils.py); without one the local rank is shifted by the local DP shard.

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ascend_topology.errors import TopologyError
from ascend_topology.facts import parse_visible_devices

from vllm_ascend.npu_runtime.device_check import NpuUnavailableError, check_device_index

if TYPE_CHECKING:
    from vllm.config import ParallelConfig

VISIBLE_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"


@dataclass(frozen=True)
class NpuAssignment:
    """A worker's NPU: ``physical`` as npu-smi numbers it, ``index`` as torch does (``npu:N``)."""

    physical: int
    index: int


def dp_shifted_local_rank(parallel_config: ParallelConfig, local_rank: int) -> int:
    """``local_rank`` offset by this engine's local DP shard (vLLM's CUDA worker rule)."""
    par = parallel_config
    if (par.distributed_executor_backend in ("ray", "external_launcher")
            or par.data_parallel_backend == "ray" or par.nnodes_within_dp != 1):
        return local_rank
    dp_local = par.data_parallel_rank_local
    if dp_local is None:
        dp_local = par.data_parallel_index
    shard = (par.pipeline_parallel_size * par.prefill_context_parallel_size
             * par.tensor_parallel_size)
    return int(local_rank + int(dp_local or 0) * shard)


def assign_npu(parallel_config: ParallelConfig, local_rank: int, visible: str | None,
               device_count: int) -> NpuAssignment:
    """The NPU of the worker with ``local_rank``, given ``visible`` (``ASCEND_RT_VISIBLE_DEVICES``)
    and ``device_count``; :class:`NpuUnavailableError` naming rank and NPU when it is not there."""
    where = (f"{VISIBLE_DEVICES_ENV}={visible!r}" if visible
             else f"{VISIBLE_DEVICES_ENV} is not set")
    try:
        visible_ids = parse_visible_devices(visible)
    except TopologyError as exc:
        raise NpuUnavailableError(f"{VISIBLE_DEVICES_ENV}: {exc}") from None
    dp = parallel_config.data_parallel_index
    assigned = parallel_config.assigned_physical_gpu_ids
    if assigned is not None:
        if not 0 <= local_rank < len(assigned):
            raise NpuUnavailableError(
                f"local rank {local_rank} of data-parallel rank {dp} has no NPU in the devices "
                f"vLLM assigned to its engine ({list(assigned)}); lower the tensor/pipeline "
                "parallel sizes or assign more devices")
        physical = int(assigned[local_rank])
    else:
        logical = dp_shifted_local_rank(parallel_config, local_rank)
        if visible_ids is not None and logical >= len(visible_ids):
            check_device_index(logical, len(visible_ids), visible)  # its one-line error
        physical = visible_ids[logical] if visible_ids is not None else logical
    if visible_ids is None:
        index = physical
    elif physical in visible_ids:
        index = visible_ids.index(physical)
    else:
        raise NpuUnavailableError(
            f"data-parallel rank {dp}, local rank {local_rank} was assigned NPU {physical}, "
            f"which is not visible ({where}); make it visible or assign visible devices")
    check_device_index(index, device_count, visible)
    return NpuAssignment(physical=physical, index=index)
