"""``NPUCommunicator``: vLLM's collectives for NPU ranks on the ``hccl`` device group."""

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
        """The sum over the group, in a new tensor."""
        # vllm::all_reduce's output may not alias its input (torch's compiled custom-op check); the
        # base class reduces in place.
        out = input_.clone()
        dist.all_reduce(out, group=self.device_group)
        return out
