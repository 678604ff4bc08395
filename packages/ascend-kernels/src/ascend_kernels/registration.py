"""Defines every ``ascend::*`` op with its reference and fake implementation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ascend_kernels import (
    ops_activation,
    ops_elementwise,
    ops_lora,
    ops_mrope,
    ops_mx,
    ops_norm,
    ops_quant,
    ops_rope,
)
from ascend_kernels.schemas import NAMESPACE, SCHEMAS, qualname

# The reference runs on any device (CompositeExplicitAutograd); a backend kernel registered
# for a device key (the NPU's PrivateUse1) takes precedence over it on that device.
REFERENCE_KEY = "CompositeExplicitAutograd"

_MODULES = (
    ops_norm, ops_quant, ops_mx, ops_rope, ops_elementwise, ops_lora, ops_activation, ops_mrope,
)


def _lookup(op: str, suffix: str) -> Callable[..., Any]:
    for module in _MODULES:
        fn = getattr(module, op + suffix, None)
        if fn is not None:
            return fn  # type: ignore[no-any-return]
    raise LookupError(f"no implementation {op}{suffix} in the ascend_kernels op modules")


def reference_impl(op: str) -> Callable[..., Any]:
    """The plain-torch reference implementation of ``ascend::<op>``."""
    return _lookup(op, "")


def fake_impl(op: str) -> Callable[..., Any]:
    """The fake (shape-only) implementation of ``ascend::<op>``."""
    return _lookup(op, "_fake")


def check_impl(op: str) -> Callable[..., None] | None:
    """The argument checks of ``ascend::<op>`` (``<op>_check``), or ``None`` if it has none."""
    try:
        return _lookup(op, "_check")
    except LookupError:
        return None


def _existing_schema(op: str) -> str | None:
    namespace = getattr(torch.ops, NAMESPACE)
    if not hasattr(namespace, op):
        return None
    return str(getattr(namespace, op).default._schema)


def register_all() -> None:
    """Define the ops (once per process) with reference and fake implementations.

    An op already defined with the same schema is left alone; a different schema is an error.
    """
    for op, schema in SCHEMAS.items():
        existing = _existing_schema(op)
        expected = f"{qualname(op)}{schema}"
        if existing is not None:
            if existing != expected:
                raise RuntimeError(
                    f"{qualname(op)} is already defined with schema {existing!r};"
                    f" ascend_kernels needs {expected!r}"
                )
            continue
        torch.library.define(qualname(op), schema)
        torch.library.impl(qualname(op), REFERENCE_KEY, reference_impl(op))
        torch.library.register_fake(qualname(op), fake_impl(op))
