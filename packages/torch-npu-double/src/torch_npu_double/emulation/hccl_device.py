"""``hccl`` collectives as device work between the ranks' emulated NPUs.

HCCL moves data between NPUs without the host, so its collectives can sit in an NPU graph and
a replay re-runs them on the captured buffers. The emulation's counterpart: each process
group has an exchange area in shared memory (one slot per rank, the emulated HBM window every
rank of the group maps) and a barrier made of one FIFO per ordered pair of ranks (a blocking
read: no polling, no sleep). A collective is a kernel of the ``hccl_emulated`` library
(``DeviceCollectives``): it writes its input into its rank's slot, meets the other ranks,
computes its result from the slots in rank order (so every rank gets the same bits) and meets
them again before a slot can be overwritten. A graph capture records the kernel like any
other; its replay runs it again on the tensors it captured, reading their contents then.

The area and FIFOs are created by the group's rank 0 in a private temporary directory named
to the others through the group's store, and removed once every rank has opened them.
"""

from __future__ import annotations

import mmap
import os
import select
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

NAMESPACE = "hccl_emulated"
#: Bytes of one rank's slot: the largest input of one collective. The file is sparse, so only
#: the bytes collectives touch take memory.
SLOT_BYTES = 1 << 30
_DIR_KEY = "hccl_emulated_exchange_dir"
_SHM = "/dev/shm"

SCHEMAS = {
    "all_reduce_": "all_reduce_(Tensor(a!) tensor, int group) -> ()",
    "all_gather_": "all_gather_(Tensor(a!) output, Tensor input, int group) -> ()",
    "reduce_scatter_": "reduce_scatter_(Tensor(a!) output, Tensor input, int group) -> ()",
    "broadcast_": "broadcast_(Tensor(a!) tensor, int src, int group) -> ()",
}


class DeviceExchange:
    """One process group's exchange area and barrier, as rank ``rank`` of ``size`` sees it."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta | None) -> None:
        self.rank, self.size = rank, size
        self._timeout = timeout.total_seconds() if timeout is not None else None
        self._reads: dict[int, int] = {}
        self._writes: dict[int, int] = {}
        if size == 1:
            self._area = mmap.mmap(-1, SLOT_BYTES)
            return
        where = _make_dir(size) if rank == 0 else ""
        if rank == 0:
            store.set(_DIR_KEY, where)
        else:
            where = store.get(_DIR_KEY).decode()
        fd = os.open(os.path.join(where, "area"), os.O_RDWR)
        try:
            self._area = mmap.mmap(fd, size * SLOT_BYTES)
        finally:
            os.close(fd)
        for peer in range(size):
            if peer != rank:
                # O_RDWR: opening a FIFO this way never blocks on the other end (Linux).
                self._reads[peer] = os.open(_fifo(where, peer, rank), os.O_RDWR)
                self._writes[peer] = os.open(_fifo(where, rank, peer), os.O_RDWR)
        self.barrier()
        if rank == 0:
            shutil.rmtree(where, ignore_errors=True)

    def slot(self, rank: int, nbytes: int) -> torch.Tensor:
        """The first ``nbytes`` of ``rank``'s slot, as host bytes aliasing the area."""
        if nbytes > SLOT_BYTES:
            raise RuntimeError(f"hccl (emulated): a collective of {nbytes} bytes per rank is "
                               f"larger than the exchange slot of {SLOT_BYTES} bytes")
        offset = 0 if self.size == 1 else rank * SLOT_BYTES
        return torch.frombuffer(self._area, dtype=torch.uint8, count=nbytes, offset=offset)

    def barrier(self) -> None:
        """Return once every rank of the group has reached its matching call: each rank
        writes one byte to every peer, then reads one byte from every peer (a FIFO per
        ordered pair keeps consecutive barriers apart)."""
        for fd in self._writes.values():
            os.write(fd, b"\0")
        wait_ms = None if self._timeout is None else int(self._timeout * 1000)
        for peer, fd in self._reads.items():
            # poll, not select: a worker may hold file descriptors above select's 1024.
            waiter = select.poll()
            waiter.register(fd, select.POLLIN)
            if not waiter.poll(wait_ms):
                raise RuntimeError(f"hccl (emulated): rank {peer} did not reach the collective "
                                   f"of rank {self.rank} within {self._timeout} s")
            os.read(fd, 1)

    def close(self) -> None:
        for fd in [*self._reads.values(), *self._writes.values()]:
            os.close(fd)
        self._reads, self._writes = {}, {}


def _make_dir(size: int) -> str:
    """A private directory (0700) holding the group's sparse area and its FIFOs."""
    base = _SHM if os.access(_SHM, os.W_OK) else None
    where = tempfile.mkdtemp(prefix="hccl-emulated-", dir=base)
    with open(os.path.join(where, "area"), "wb") as area:
        area.truncate(size * SLOT_BYTES)
    for src in range(size):
        for dst in range(size):
            if src != dst:
                os.mkfifo(_fifo(where, src, dst), 0o600)
    return where


def _fifo(where: str, src: int, dst: int) -> str:
    return os.path.join(where, f"{src}-to-{dst}")


@dataclass
class DeviceCollectives:
    """The ``hccl_emulated`` kernels and the exchanges of this process's groups (a kernel
    names its group by the index ``add`` returned)."""

    library: torch.library.Library
    exchanges: list[DeviceExchange] = field(default_factory=list)

    def add(self, exchange: DeviceExchange) -> int:
        self.exchanges.append(exchange)
        return len(self.exchanges) - 1

    def op(self, name: str) -> Any:
        return getattr(getattr(torch.ops, NAMESPACE), name).default

    # --- the kernels (the device work of one rank) -------------------------------------------
    def _publish(self, group: int, tensor: torch.Tensor) -> DeviceExchange:
        """Write ``tensor`` into this rank's slot of ``group`` and meet the other ranks."""
        exchange = self.exchanges[group]
        flat = tensor.contiguous().view(-1)
        mine = exchange.slot(exchange.rank, flat.numel() * flat.element_size())
        mine.view(flat.dtype).copy_(flat)
        exchange.barrier()
        return exchange

    @staticmethod
    def _slots(exchange: DeviceExchange, like: torch.Tensor) -> list[torch.Tensor]:
        nbytes = like.numel() * like.element_size()
        return [exchange.slot(r, nbytes).view(like.dtype) for r in range(exchange.size)]

    @staticmethod
    def _sum(parts: list[torch.Tensor]) -> torch.Tensor:
        """The sum in rank order, in the parts' dtype: every rank adds the same way."""
        total = parts[0].clone()
        for part in parts[1:]:
            total.add_(part)
        return total

    def all_reduce_(self, tensor: torch.Tensor, group: int) -> None:
        exchange = self._publish(group, tensor)
        total = self._sum(self._slots(exchange, tensor))
        exchange.barrier()
        tensor.copy_(total.view(tensor.shape))

    def all_gather_(self, output: torch.Tensor, input: torch.Tensor, group: int) -> None:
        exchange = self._publish(group, input)
        gathered = torch.cat(self._slots(exchange, input))
        output.copy_(gathered.view(output.shape))
        exchange.barrier()

    def reduce_scatter_(self, output: torch.Tensor, input: torch.Tensor, group: int) -> None:
        exchange = self._publish(group, input)
        mine = [part.view(exchange.size, -1)[exchange.rank]
                for part in self._slots(exchange, input)]
        total = self._sum(mine)
        exchange.barrier()
        output.copy_(total.view(output.shape))

    def broadcast_(self, tensor: torch.Tensor, src: int, group: int) -> None:
        exchange = self.exchanges[group]
        if exchange.rank == src:
            flat = tensor.contiguous().view(-1)
            exchange.slot(src, flat.numel() * flat.element_size()).view(flat.dtype).copy_(flat)
        exchange.barrier()
        if exchange.rank != src:
            tensor.copy_(self._slots(exchange, tensor)[src].view(tensor.shape))
        exchange.barrier()


def define(library: torch.library.Library) -> DeviceCollectives:
    """Define the collective kernels in ``library`` (namespace ``hccl_emulated``) for ``npu``
    tensors; the returned object owns the groups they run on."""
    collectives = DeviceCollectives(library)
    for name, schema in SCHEMAS.items():
        library.define(schema)
        library.impl(name, getattr(collectives, name), "PrivateUse1")
    return collectives
