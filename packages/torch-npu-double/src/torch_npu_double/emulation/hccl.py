"""The ``hccl`` c10d backend for ``npu`` tensors.

All-reduce and reduce-scatter (sum), all-gather into one tensor and broadcast run as device
work between the ranks' emulated NPUs (``hccl_device``): an NPU graph can hold them. The other
collectives copy their ``npu`` tensors to host, run gloo's collective there and copy the
results back; inside a graph capture they are refused, as the host cannot be part of a graph.
The emulated device computes synchronously, so the returned work is done.
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

from torch_npu_double.emulation.graphs import refuse_in_capture
from torch_npu_double.emulation.hccl_device import (
    NAMESPACE,
    DeviceCollectives,
    DeviceExchange,
    define,
)
from torch_npu_double.emulation.hccl_exchange import ExchangeMixin

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


class HcclOverGloo(ExchangeMixin, dist.ProcessGroup):
    """An ``hccl`` process-group backend whose transport is gloo on host copies."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Any,
                 collectives: DeviceCollectives) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the Python-backend form
        self._size = size
        # c10d's stubs do not list the collectives ProcessGroupGloo has at run time.
        self._gloo: Any = ProcessGroupGloo(store, rank, size, timeout)
        self._name = ""
        self._device = collectives
        self._group = collectives.add(DeviceExchange(store, rank, size, timeout))

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

    def _finish(self, devices: list[torch.Tensor], hosts: list[torch.Tensor]) -> _DoneWork:
        return _back(devices, hosts)  # all-to-all and the comm name: hccl_exchange

    def _run(self, call: Callable[[], Any]) -> None:
        call().wait()

    def _on_device(self, what: str, tensors: list[torch.Tensor], opts: Any = None) -> bool:
        """Whether ``what`` runs as device work (npu tensors, one per call, a sum where it
        reduces); otherwise it goes through the host, which a graph capture refuses."""
        op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
        if (len(tensors) >= 1 and all(t.device.type == "npu" for t in tensors)
                and op == dist.ReduceOp.SUM):
            return True
        refuse_in_capture(f"hccl {what} through the host (gloo; the emulated device runs "
                          "sums, all-gathers into one tensor and broadcasts of npu tensors)")
        return False

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> _DoneWork:  # type: ignore[override]
        if len(tensors) == 1 and self._on_device("allreduce", tensors, opts):
            self._device.op("all_reduce_")(tensors[0], self._group)
            return _DoneWork(tensors)
        hosts = _host(tensors)
        self._run(lambda: self._gloo.allreduce(hosts, opts or AllreduceOptions()))
        return _back(tensors, hosts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> _DoneWork:  # type: ignore[override]
        if len(tensors) == 1 and self._on_device("broadcast", tensors):
            src = int(opts.rootRank) if opts is not None else 0
            self._device.op("broadcast_")(tensors[0], src, self._group)
            return _DoneWork(tensors)
        hosts = _host(tensors)
        self._run(lambda: self._gloo.broadcast(hosts, opts or BroadcastOptions()))
        return _back(tensors, hosts)

    def allgather(  # type: ignore[override]
        self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> _DoneWork:
        refuse_in_capture("hccl allgather into tensor lists through the host (gloo)")
        outs = [_host(outputs) for outputs in output_lists]
        ins = _host(inputs)
        self._run(lambda: self._gloo.allgather(outs, ins, opts or AllgatherOptions()))
        flat_dev = [t for outputs in output_lists for t in outputs]
        return _back(flat_dev, [t for outputs in outs for t in outputs])

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts: Any = None) -> _DoneWork:
        if self._on_device("all-gather", [output, input]):
            self._device.op("all_gather_")(output, input, self._group)
            return _DoneWork([output])
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
        if self._on_device("reduce-scatter", [output, input], opts):
            self._device.op("reduce_scatter_")(output, input, self._group)
            return _DoneWork([output])
        summed = input.cpu()
        options = AllreduceOptions()
        if opts is not None:
            options.reduceOp = opts.reduceOp
        self._run(lambda: self._gloo.allreduce([summed], options))
        return _back([output], [summed.chunk(self.size())[self.rank()]])

    def reduce_scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any = None
    ) -> _DoneWork:
        refuse_in_capture("hccl reduce-scatter of tensor lists through the host (gloo)")
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
        refuse_in_capture("hccl barrier (a host wait)")
        self._run(lambda: self._gloo.barrier(opts or BarrierOptions()))
        return _DoneWork([])

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> _DoneWork:
        refuse_in_capture("hccl send through the host (gloo)")
        hosts = _host(tensors)
        self._run(lambda: self._gloo.send(hosts, dst, tag))
        return _DoneWork(tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> _DoneWork:
        refuse_in_capture("hccl recv through the host (gloo)")
        hosts = _host(tensors)
        self._run(lambda: self._gloo.recv(hosts, src, tag))
        return _back(tensors, hosts)


def register() -> None:
    """Register ``hccl`` for ``npu`` (as torch_npu does), once per process, with its device
    collectives (the ``hccl_emulated`` kernels)."""
    if BACKEND in dist.Backend.backend_list:
        return
    collectives = define(torch.library.Library(NAMESPACE, "DEF"))

    def create(store: Any, rank: int, size: int, timeout: Any) -> HcclOverGloo:
        return HcclOverGloo(store, rank, size, timeout, collectives)

    dist.Backend.register_backend(BACKEND, create, devices=["npu"])
