"""The ``hccl`` c10d backend for ``npu`` tensors, over gloo.

Each collective copies its ``npu`` tensors to host, runs gloo's collective there and copies
the results back (the emulated device computes synchronously, so the returned work is done).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    BarrierOptions,
    BroadcastOptions,
    ProcessGroupGloo,
)
from torch.distributed.distributed_c10d import GroupName

BACKEND = "hccl"


class _DoneWork(dist.Work):
    def __init__(self, result: list[torch.Tensor]) -> None:
        super().__init__()
        self._result = result

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._result


def _host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.cpu() for t in tensors]


def _back(devices: list[torch.Tensor], hosts: list[torch.Tensor]) -> _DoneWork:
    for dev, host in zip(devices, hosts, strict=True):
        dev.copy_(host)
    return _DoneWork(devices)


class HcclOverGloo(dist.ProcessGroup):
    """An ``hccl`` process-group backend whose transport is gloo on host copies."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Any) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the Python-backend form
        self._size = size
        # c10d's stubs do not list the collectives ProcessGroupGloo has at run time.
        self._gloo: Any = ProcessGroupGloo(store, rank, size, timeout)
        self._name = ""

    # c10d names a group through ``_set_group_name`` and reads ``group_name`` back (destroying
    # it); the C++ getter reads the name from a registered backend, which a Python process
    # group does not have ("ProcessGroup name not set"), so the name is kept here.
    def _set_group_name(self, name: GroupName) -> None:
        super()._set_group_name(name)
        self._name = str(name)

    @property
    def group_name(self) -> str:  # type: ignore[override]
        if not self._name:
            raise RuntimeError("ProcessGroup name not set")
        return self._name

    def size(self) -> int:
        return self._size

    def getBackendName(self) -> str:
        return BACKEND

    def _run(self, call: Callable[[], Any]) -> None:
        call().wait()

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> _DoneWork:  # type: ignore[override]
        hosts = _host(tensors)
        self._run(lambda: self._gloo.allreduce(hosts, opts or AllreduceOptions()))
        return _back(tensors, hosts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> _DoneWork:  # type: ignore[override]
        hosts = _host(tensors)
        self._run(lambda: self._gloo.broadcast(hosts, opts or BroadcastOptions()))
        return _back(tensors, hosts)

    def allgather(  # type: ignore[override]
        self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> _DoneWork:
        outs = [_host(outputs) for outputs in output_lists]
        ins = _host(inputs)
        self._run(lambda: self._gloo.allgather(outs, ins, opts or AllgatherOptions()))
        flat_dev = [t for outputs in output_lists for t in outputs]
        return _back(flat_dev, [t for outputs in outs for t in outputs])

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts: Any = None) -> _DoneWork:
        out, inp = output.cpu(), input.cpu()
        chunks = list(out.chunk(self.size()))
        self._run(lambda: self._gloo.allgather([chunks], [inp], AllgatherOptions()))
        return _back([output], [torch.cat(chunks)])

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> _DoneWork:
        return self._allgather_base(output, input, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> _DoneWork:
        return self._reduce_scatter_base(output, input, opts)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,
                             opts: Any = None) -> _DoneWork:
        summed = input.cpu()
        options = AllreduceOptions()
        if opts is not None:
            options.reduceOp = opts.reduceOp
        self._run(lambda: self._gloo.allreduce([summed], options))
        return _back([output], [summed.chunk(self.size())[self.rank()]])

    def reduce_scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any = None
    ) -> _DoneWork:
        results = []
        for inputs in input_lists:
            stacked = torch.stack(_host(inputs))
            options = AllreduceOptions()
            if opts is not None:
                options.reduceOp = opts.reduceOp
            self._gloo.allreduce([stacked], options).wait()
            results.append(stacked[self.rank()])
        return _back(outputs, results)

    def barrier(self, opts: Any = None) -> _DoneWork:
        self._run(lambda: self._gloo.barrier(opts or BarrierOptions()))
        return _DoneWork([])

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> _DoneWork:
        hosts = _host(tensors)
        self._run(lambda: self._gloo.send(hosts, dst, tag))
        return _DoneWork(tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> _DoneWork:
        hosts = _host(tensors)
        self._run(lambda: self._gloo.recv(hosts, src, tag))
        return _back(tensors, hosts)


def _create(store: Any, rank: int, size: int, timeout: Any) -> HcclOverGloo:
    return HcclOverGloo(store, rank, size, timeout)


def register() -> None:
    """Register ``hccl`` for ``npu`` (as torch_npu does), once per process."""
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, devices=["npu"])
