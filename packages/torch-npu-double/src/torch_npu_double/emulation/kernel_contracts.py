"""The documented limits of the emulated torch_npu kernels, and how a violation is reported.

Each rule names the document it comes from (``packages/vllm-ascend-testing/README.md``,
"Enforced contracts", lists them with their sources). Where the documentation is silent the
stricter reading is taken and the message says so.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_npu_double.record import dtype_name, recorded_violation

__all__ = ["dtype_name"]  # the kernels' messages spell dtypes as the record does


class KernelContractError(RuntimeError):
    """A torch_npu kernel was called outside its documented contract (the device refuses)."""


def refuse(op: str, problem: str, source: str) -> KernelContractError:
    """The error for ``op`` breaking one rule: what was wrong, what is allowed, the source."""
    return KernelContractError(f"torch_npu.{op}: {problem} ({source})")


def bind(schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every argument of ``schema`` by name: the given value or the schema's default."""
    named: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            named[arg.name] = args[i]
        elif arg.name in kwargs:
            named[arg.name] = kwargs[arg.name]
        else:
            named[arg.name] = arg.default_value if arg.has_default_value() else None
    return named


def check_recorded(op: str, rules: list[dict[str, Any]], named: dict[str, Any]) -> None:
    """The constraints recorded with ``op`` from the wheel's ``_op_plugin_docs.py`` (each
    quotes its documented text), as ``tools/torch_npu_schemas.py`` wrote them."""
    for rule in rules:
        if any(named.get(k) != v for k, v in rule.get("when", {}).items()):
            continue
        name = rule["arg"]
        t = named.get(name)
        if not isinstance(t, torch.Tensor):
            continue
        problem = recorded_violation(rule, t, named)
        if problem is not None:
            raise refuse(op, f"{name} {problem}", f"torch_npu docs: {rule['doc']}")


def require_dtype(op: str, name: str, t: torch.Tensor, allowed: tuple[torch.dtype, ...],
                  source: str) -> None:
    if t.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise refuse(op, f"{name} has dtype {dtype_name(t.dtype)}; allowed: {names}", source)


def require_contiguous(op: str, name: str, t: torch.Tensor, source: str) -> None:
    if not t.is_contiguous():
        raise refuse(op, f"{name} is not contiguous (shape {list(t.shape)}, strides "
                         f"{list(t.stride())}); the kernel takes contiguous inputs only", source)
