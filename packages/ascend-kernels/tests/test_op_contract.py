"""One op contract: the Python signature is the schema's, written once.

Each op's reference takes the schema's arguments in schema order, with the schema's defaults
(names, order and defaults read from torch's parse of the schema, not from the spec's own
bookkeeping); the NPU adapters and the batch-invariant variants take the bound arguments by
schema name instead of restating the signature.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
from ascend_kernels.ops import SPECS, OpSpec

POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def signature_differences(op: OpSpec) -> list[str]:
    """How ``op.reference``'s signature differs from its schema's (empty: it is the schema's)."""
    schema = torch._C.parse_schema(f"{op.qualname}{op.schema}").arguments
    params = list(inspect.signature(op.reference).parameters.values())
    found: list[str] = []
    names = [p.name for p in params]
    wanted = [a.name for a in schema]
    if names != wanted:
        found.append(f"arguments {names}, schema {wanted}")
    for param in params:
        if param.kind is not POSITIONAL:
            found.append(f"{param.name} is {param.kind.description}, not positional-or-keyword")
    for arg, param in zip(schema, params, strict=False):
        if arg.name != param.name:
            continue
        has = param.default is not inspect.Parameter.empty
        if has != arg.has_default_value() or (has and param.default != arg.default_value):
            want = repr(arg.default_value) if arg.has_default_value() else "none"
            got = repr(param.default) if has else "none"
            found.append(f"{arg.name}: default {got}, schema {want}")
    return found


@pytest.mark.parametrize("name", list(SPECS))
def test_each_reference_takes_the_schema_arguments_in_order_with_its_defaults(
    name: str,
) -> None:
    assert signature_differences(SPECS[name]) == []


def _spec_with(reference: Callable[..., Any]) -> OpSpec:
    base = SPECS["add_rms_norm"]  # (x, residual, weight, eps, bias=None)
    return dataclasses.replace(base, reference=reference)


def _swapped(residual: Any, x: Any, weight: Any, eps: float, bias: Any = None) -> Any: ...
def _renamed(x: Any, res: Any, weight: Any, eps: float, bias: Any = None) -> Any: ...
def _no_default(x: Any, residual: Any, weight: Any, eps: float, bias: Any) -> Any: ...
def _extra_default(x: Any, residual: Any, weight: Any, eps: float = 1e-6,
                   bias: Any = None) -> Any: ...
def _other_default(x: Any, residual: Any, weight: Any, eps: float, bias: Any = 0) -> Any: ...
def _short(x: Any, residual: Any, weight: Any, eps: float) -> Any: ...
def _keyword_only(x: Any, residual: Any, weight: Any, eps: float, *, bias: Any = None) -> Any:
    ...
def _variadic(*args: Any) -> Any: ...


@pytest.mark.parametrize(("reference", "difference"), [
    (_swapped, "arguments ['residual', 'x'"),
    (_renamed, "arguments ['x', 'res'"),
    (_no_default, "bias: default none, schema None"),
    (_extra_default, "eps: default 1e-06, schema none"),
    (_other_default, "bias: default 0, schema None"),
    (_short, "schema ['x', 'residual', 'weight', 'eps', 'bias']"),
    (_keyword_only, "bias is keyword-only"),
    (_variadic, "args is variadic positional"),
])
def test_a_reference_that_differs_from_its_schema_is_reported(
    reference: Callable[..., Any], difference: str
) -> None:
    found = signature_differences(_spec_with(reference))
    assert any(difference in line for line in found), found


def _positional_count(fn: Callable[..., Any]) -> int:
    params = inspect.signature(fn).parameters.values()
    assert all(p.kind is POSITIONAL and p.default is inspect.Parameter.empty for p in params)
    return len(params)


@pytest.mark.parametrize("name", [n for n, s in SPECS.items() if s.npu is not None])
def test_npu_adapters_take_torch_npu_and_the_bound_arguments(name: str) -> None:
    adapter = SPECS[name].npu
    assert adapter is not None
    assert _positional_count(adapter) == 2  # (torch_npu, arguments by schema name)


def test_batch_invariant_variants_take_the_bound_arguments() -> None:
    variants = {n: s.batch_invariant for n, s in SPECS.items() if s.batch_invariant is not None}
    assert set(variants) == {"add_rms_norm"}
    assert all(_positional_count(v) == 1 for v in variants.values() if v is not None)


def test_an_adapter_gets_every_argument_by_schema_name_defaults_filled_in() -> None:
    seen: list[dict[str, Any]] = []

    def adapter(npu: Any, a: Any) -> Any:
        seen.append(dict(a))
        return npu

    op = dataclasses.replace(SPECS["add_rms_norm"], npu=adapter)
    x, w = torch.ones(2, 4), torch.ones(4)
    assert op.checked_npu("torch_npu")(x, x, weight=w, eps=0.5) == "torch_npu"
    assert set(seen[0]) == {"x", "residual", "weight", "eps", "bias"}
    assert seen[0]["bias"] is None and seen[0]["weight"] is w and seen[0]["eps"] == 0.5
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        op.checked_npu("torch_npu")(x, x, w, 0.0)  # the op's checks run first
    assert len(seen) == 1


def test_an_op_without_an_adapter_has_no_npu_kernel() -> None:
    op = dataclasses.replace(SPECS["bgmv_expand"], npu=None)
    with pytest.raises(TypeError, match="ascend::bgmv_expand has no NPU adapter"):
        op.checked_npu("torch_npu")
