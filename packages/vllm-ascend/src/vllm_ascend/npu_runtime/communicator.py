"""``NPUCommunicator``: vLLM's collectives for NPU ranks, on the ``hccl`` process group.

All-gather, reduce-scatter, gather, broadcast and send/recv are vLLM's base implementations
over ``torch.distributed`` with the device group, which the worker created with the ``hccl``
backend (``NPUPlatform.dist_backend``); all-reduce is out of place (below). No all-to-all
manager: the runtime serves dense models only.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from vllm.distributed.device_communicators.base_device_communicator import (
    DeviceCommunicatorBase,
)


class NPUCommunicator(DeviceCommunicatorBase):
    """Collectives of one vLLM group on NPU tensors."""

    def __init__(self, cpu_group: ProcessGroup, device: torch.device | None = None,
                 device_group: ProcessGroup | None = None, unique_name: str = "",
                 global_ranks: list[int] | None = None, global_world_size: int | None = None,
                 use_all2all: bool = False) -> None:
        super().__init__(cpu_group, device, device_group, unique_name, global_ranks,
                         global_world_size, use_all2all)
        if self.device.type != "npu":
            raise ValueError(f"NPUCommunicator of group {unique_name!r} got device "
                             f"{self.device}; it serves NPU ranks only")
        if device_group is None:
            raise ValueError(f"NPUCommunicator of group {unique_name!r} needs the hccl device "
                             "process group")

    def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
        """The sum over the group, in a new tensor. The NPU platform calls collectives through
        vLLM's ``vllm::all_reduce`` op, whose output may not alias its input (torch's check of
        compiled custom ops raises for that with ``CI`` set, and warns otherwise); the base
        class reduces in place and returns its input."""
        out = input_.clone()
        dist.all_reduce(out, group=self.device_group)
        return out
