"""What an NPU graph capture refuses, as the device does: host reads of device memory and
host-to-device copies from pageable memory (``graphs`` applies them to each dispatched op;
``synchronize()`` is refused by the stream and device APIs)."""

from __future__ import annotations

from typing import Any

import torch

_aten = torch.ops.aten

#: The text every refusal inside a capture carries: the real capture's status for an
#: operation a graph cannot hold (``graph_errors.CAPTURE_FAILURES["not_allowed"]``).
NOT_ALLOWED = "operation not allowed in capture (aclmdlRICaptureBegin status 107027)"

#: Ops that read device data on the host (the host must wait for the device). ``item``,
#: ``is_nonzero``, ``equal`` and ``allclose`` return host values; they reach a dispatch mode
#: undecomposed when host code runs under it (an ``ascend`` op's adapter, expanded).
_HOST_READS = {_aten._local_scalar_dense.default, _aten.item.default,
               _aten.is_nonzero.default, _aten.equal.default, _aten.allclose.default,
               _aten.nonzero.default, _aten.masked_select.default,
               _aten.unique_consecutive.default, _aten._unique2.default}


def copies_pageable(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` copies pageable host memory to the device."""
    if func is _aten.lift_fresh.default:
        # torch.tensor(host data, device="npu"): the copy itself runs below the dispatch
        # modes; the fresh npu tensor it made is what the mode sees.
        return isinstance(args[0], torch.Tensor) and args[0].device.type == "npu"
    if func is _aten._to_copy.default:
        device = kwargs.get("device")
        src = args[0]
        return (device is not None and torch.device(device).type == "npu"
                and src.device.type == "cpu" and not src.is_pinned())
    if func is _aten.copy_.default:
        dst, src = args[0], args[1]
    elif func is _aten._copy_from.default:
        src, dst = args[0], args[1]
    else:
        return False
    return (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
            and dst.device.type == "npu" and src.device.type == "cpu"
            and not src.is_pinned())


def reads_host(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` (given npu operands) makes the host wait for device data."""
    if func in _HOST_READS:
        return True
    if func is _aten._to_copy.default:
        device = kwargs.get("device")
        return device is not None and torch.device(device).type == "cpu"
    # copy_(dst, src) and _copy_from(src, dst): a host destination
    dst = args[0] if func is _aten.copy_.default else (
        args[1] if func is _aten._copy_from.default else None)
    return isinstance(dst, torch.Tensor) and dst.device.type == "cpu"
