"""What the emulated device's dispatch modes (graph capture, host-op counting) treat as host
code around device operations, and how they see through it.

On hardware a graph capture records the kernels the host launches, never the Python that
launched them. Two kinds of op are such Python and are expanded into the device ops they issue
(the mode stays active while they run), never recorded themselves:

- ops of ``HOST_WRAPPER_NAMESPACES``: the ``ascend::`` ops (their NPU adapters are Python
  that issues torch_npu kernels), vLLM's attention and KV-cache entry points and this
  project's ``vllm_ascend`` ops (e.g. ``attention_with_kv_update``, the fused pair of them),
  which look the layer up in the forward context in Python;
- higher-order ops, e.g. ``auto_functionalized_v2``, the form of a mutating op in a
  functional (compiled) graph: its eager run clones the mutated tensors and calls the op on
  the clones.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch.utils._pytree import tree_flatten

#: Namespaces of ops that are host functions around device ops (``ascend``: the device-neutral
#: ops, whose NPU adapters issue torch_npu kernels and ATen ops).
HOST_WRAPPER_NAMESPACES = frozenset({"ascend", "vllm", "vllm_ascend"})
BACKEND_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


def npu_tensors(tree: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.device.type == "npu"]


def is_host_code(func: Any) -> bool:
    """Whether ``func`` is host code to expand (see the module doc)."""
    return isinstance(func, HigherOrderOperator) or func.namespace in HOST_WRAPPER_NAMESPACES


def run_host_code(mode: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run host code ``func`` with ``mode`` active, so every op it issues reaches the mode: a
    higher-order op through its eager (CompositeExplicitAutograd) implementation, a wrapper op
    through its device kernel."""
    with mode:
        if isinstance(func, HigherOrderOperator):
            return func.dispatch(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
        return func.redispatch(BACKEND_KEYS, *args, **kwargs)
