"""The ``torch.ops.ascend.*`` ops, one module per family, each declaring its :class:`OpSpec`s.

To add an op: declare an ``OpSpec`` in its family module's ``SPECS`` (or a new module listed
in ``FAMILIES``); registration, the NPU adapter, the fake and the inductor decomposition all
follow from it (README "Adding an op").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ascend_kernels.ops import (
    activation,
    attention,
    elementwise,
    lora,
    mrope,
    mx,
    norm,
    quant,
    rope,
)
from ascend_kernels.ops.spec import NAMESPACE, OpSpec

FAMILIES = (norm, quant, mx, rope, elementwise, lora, activation, mrope, attention)

SPECS: dict[str, OpSpec] = {spec.name: spec for family in FAMILIES for spec in family.SPECS}

#: The public schemas (op name -> ``"(...) -> ..."``), in documentation order.
SCHEMAS: dict[str, str] = {name: spec.schema for name, spec in SPECS.items()}
OP_NAMES: tuple[str, ...] = tuple(SPECS)

#: Op name -> whole-tensor reference that inductor inlines (``inductor_lowering``).
DECOMPOSITIONS: dict[str, Callable[..., Any]] = {
    name: spec.reference for name, spec in SPECS.items() if spec.decompose
}


def spec(op: str) -> OpSpec:
    """The spec of ``ascend::<op>``; ``LookupError`` naming the known ops otherwise."""
    found = SPECS.get(op)
    if found is None:
        raise LookupError(f"no op ascend::{op}; the ops are {', '.join(SPECS)}")
    return found


__all__ = ["DECOMPOSITIONS", "FAMILIES", "NAMESPACE", "OP_NAMES", "SCHEMAS", "SPECS", "OpSpec",
           "spec"]
