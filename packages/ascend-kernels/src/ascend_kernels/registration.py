"""Registers every ``ascend::*`` op from its :class:`~ascend_kernels.ops.spec.OpSpec`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import torch

from ascend_kernels.ops import NAMESPACE, SPECS, OpSpec, spec

logger = logging.getLogger(__name__)

# The reference runs on any device (CompositeExplicitAutograd); a backend kernel registered
# for a device key (the NPU's PrivateUse1) takes precedence over it on that device.
REFERENCE_KEY = "CompositeExplicitAutograd"


def reference_impl(op: str) -> Callable[..., Any]:
    """The plain-torch reference op of ``ascend::<op>`` (checks, then fresh outputs)."""
    return spec(op).checked_reference


def fake_impl(op: str) -> Callable[..., Any]:
    """The fake (shape-only) implementation of ``ascend::<op>``."""
    return spec(op).checked_fake


def _existing_schema(namespace: str, op: str) -> str | None:
    ops = getattr(torch.ops, namespace)
    if not hasattr(ops, op):
        return None
    return str(getattr(ops, op).default._schema)


def register_all(namespace: str = NAMESPACE, specs: Iterable[OpSpec] | None = None) -> None:
    """Define the ops of ``specs`` (default: all) in ``namespace`` with their reference and
    fake implementations.

    An op already defined with the same schema is left alone; a different schema is an error.
    """
    for op_spec in SPECS.values() if specs is None else specs:
        qualname = f"{namespace}::{op_spec.name}"
        existing = _existing_schema(namespace, op_spec.name)
        expected = f"{qualname}{op_spec.schema}"
        if existing is not None:
            if existing != expected:
                raise RuntimeError(
                    f"{qualname} is already defined with schema {existing!r};"
                    f" ascend_kernels needs {expected!r}"
                )
            continue
        torch.library.define(qualname, op_spec.schema)
        torch.library.impl(qualname, REFERENCE_KEY, op_spec.checked_reference)
        torch.library.register_fake(qualname, op_spec.checked_fake)


def register_npu(torch_npu: ModuleType, dispatch_key: str = "PrivateUse1",
                 skip: frozenset[str] = frozenset()) -> torch.library.Library:
    """Register every op's NPU adapter bound to ``torch_npu`` under ``dispatch_key``.

    Each adapter first runs the op's checks (shared with the reference and the fake), so bad
    input gets the same ``ValueError`` on every device. Ops without an adapter, and the ops in
    ``skip`` (e.g. whose CANN entry point is missing), keep the reference. Returns the library;
    keep it alive (``_destroy()`` removes the registrations).
    """
    lib = torch.library.Library(NAMESPACE, "IMPL")  # type: ignore[no-untyped-call]
    for op, op_spec in SPECS.items():
        if op_spec.npu is not None and op not in skip:
            lib.impl(op, op_spec.checked_npu(torch_npu), dispatch_key)  # type: ignore[no-untyped-call]
    return lib
