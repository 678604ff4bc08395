"""What the emulated ``hccl`` backend adds for MoE: all-to-all and the communicator name.

- ``all_to_all_single`` (c10d calls the group's ``alltoall_base``/``all_to_all_single``) and
  ``all_to_all`` (``alltoall``): host copies through gloo's all-to-all, with per-rank split
  sizes, as ALLTOALL's dispatch and combine use them (``npu-moe-quant-facts.md`` section 1.3).
- ``get_hccl_comm_name(rank)``: the string a torch_npu MC2 kernel takes as ``group_ep``,
  reached as upstream and the wheel's docs reach it
  (``pg._get_backend(torch.device("npu")).get_hccl_comm_name(rank)``, ``_op_plugin_docs.py``
  7408): this backend is a Python process group, which c10d keeps as the group itself, so
  ``_get_backend`` of ``npu`` returns it. Each group's name is its own (c10d's unique group
  name); :func:`group_of` finds the group back from it for the emulated MC2 kernels.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch._C._distributed_c10d import AllToAllOptions

from torch_npu_double.emulation.graphs import refuse_in_capture

COMM_NAME_PREFIX = "hcom_"


class CommNames:
    """Process groups by communicator name (weakly held: a destroyed group drops out)."""

    def __init__(self) -> None:
        self._groups: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

    def reset(self) -> None:
        self._groups.clear()

    def add(self, name: str, group: Any) -> None:
        self._groups[name] = group

    def get(self, name: str) -> Any:
        group = self._groups.get(name)
        if group is None:
            raise RuntimeError(f"no hccl communicator named {name!r} in this process (names "
                               "come from get_hccl_comm_name of a live group)")
        return group


#: The names handed out in this process (the emulated device owns one registry per process,
#: as HCCL does; ``CommNames()`` gives a test a fresh one).
COMM_NAMES = CommNames()


def group_of(name: str) -> Any:
    """The live emulated process group whose ``get_hccl_comm_name`` returned ``name``."""
    return COMM_NAMES.get(name)


class ExchangeMixin:
    """All-to-all and the communicator name, for ``HcclOverGloo`` (which provides ``_gloo``,
    ``group_name``, ``rank()`` and ``_finish``)."""

    _gloo: Any

    def _finish(self, devices: list[torch.Tensor], hosts: list[torch.Tensor]) -> Any:
        raise NotImplementedError

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int],
                      opts: Any = None) -> Any:
        refuse_in_capture("hccl all-to-all through the host (gloo)")
        out, inp = output.cpu(), input.cpu()
        self._gloo.alltoall_base(out, inp, list(output_split_sizes), list(input_split_sizes),
                                 opts or AllToAllOptions()).wait()
        return self._finish([output], [out])

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: list[int], input_split_sizes: list[int],
                          opts: Any = None) -> Any:
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: Any = None) -> Any:
        refuse_in_capture("hccl all-to-all of tensor lists through the host (gloo)")
        outs, ins = [t.cpu() for t in outputs], [t.cpu() for t in inputs]
        self._gloo.alltoall(outs, ins, opts or AllToAllOptions()).wait()
        return self._finish(outputs, outs)

    def get_hccl_comm_name(self, rank: int) -> str:
        # group_name is ProcessGroup's, the class this mixes into
        name = COMM_NAME_PREFIX + str(self.group_name)  # type: ignore[attr-defined]
        COMM_NAMES.add(name, self)
        return name

    def _get_backend(self, device: torch.device) -> Any:
        if torch.device(device).type != "npu":
            raise RuntimeError(f"No backend type associated with device type {device}")
        return self
