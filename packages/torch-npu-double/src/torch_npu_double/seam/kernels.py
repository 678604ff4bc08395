"""Fake torch_npu kernels: the real schemas, defined in a scratch ``torch.library`` namespace.

Every op of the record is ``define``d with its real schema, so the dispatcher rejects wrong
arity, positional use of keyword-only arguments, unknown keywords and wrong argument types,
exactly as with the real library. The implementation enforces the documented input
constraints (``ContractViolation``) and returns outputs built from the recorded output rules
(dtype, shape, number), each filled with a marker value (:meth:`FakeKernels.marker`) so a
test can tell which kernel output landed where. In-place ops fill their mutated arguments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from torch_npu_double.record import recorded_violation

_NAMESPACES = itertools.count()


class ContractViolation(RuntimeError):
    """A call the real kernel documents as unsupported (wrong input dtype, shape, ...)."""


@dataclass
class KernelCall:
    """One call of a fake kernel: the arguments as the caller passed them, the outputs."""

    op: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: Any
    #: Clones of the arguments the op writes (``Tensor(a!)``), taken before the call.
    before: dict[str, torch.Tensor] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as ``op, args, kwargs``."""
        return iter((self.op, self.args, self.kwargs))


class FakeKernels:
    """The recorded ops, defined in a fresh namespace; ``close()`` removes the definitions."""

    def __init__(self, record: dict[str, Any], *, atb_error: BaseException | None = None) -> None:
        self.record = record
        self.ops: dict[str, dict[str, Any]] = record["ops"]
        self.enum: dict[str, str] = record["dtype_enum"]
        self.atb_error = atb_error
        self.calls: list[KernelCall] = []
        self.namespace = f"npu_seam_{next(_NAMESPACES)}"
        self._order = sorted(self.ops)
        self.library = torch.library.Library(self.namespace, "DEF")  # type: ignore[no-untyped-call]
        for op, entry in self.ops.items():
            self.library.define(entry["schema"])  # type: ignore[no-untyped-call]
            self.library.impl(op, self._implementation(op), "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Remove the scratch definitions."""
        self.library._destroy()  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------ what tests look at
    def marker(self, op: str, index: int) -> int:
        """The value output ``index`` of ``op`` is filled with (before the cast to its dtype)."""
        return 10 * (1 + self._order.index(op)) + index

    def last(self, op: str) -> KernelCall:
        """The latest call of ``op`` (``LookupError`` if it was never called)."""
        for call in reversed(self.calls):
            if call.op == op:
                return call
        raise LookupError(f"{op} was not called; calls: {[c.op for c in self.calls]}")

    def names(self) -> list[str]:
        """The ops called so far, in order."""
        return [c.op for c in self.calls]

    # ------------------------------------------------------------ the callables
    def schema(self, op: str) -> Any:
        """The dispatcher's ``FunctionSchema`` of ``op`` (parsed from the real string)."""
        return getattr(getattr(torch.ops, self.namespace), op).default._schema

    def function(self, op: str) -> Any:
        """``torch_npu.<op>``: records the call and runs it through the dispatcher."""
        packet = getattr(getattr(torch.ops, self.namespace), op)
        schema = self.schema(op)
        writes = [a.name for a in schema.arguments if a.alias_info is not None
                  and a.alias_info.is_write]
        atb = self.ops[op]["library"] == "atb"

        def kernel(*args: Any, **kwargs: Any) -> Any:
            if atb and self.atb_error is not None:
                # torch_npu's lazy ATB wrapper raises the recorded load error when called.
                raise self.atb_error
            named = self._bind(schema, args, kwargs)
            before = {n: named[n].clone() for n in writes if isinstance(named[n], torch.Tensor)}
            out = packet(*args, **kwargs)
            self.calls.append(KernelCall(op, args, dict(kwargs), out, before))
            return out

        kernel.__name__ = kernel.__qualname__ = op
        return kernel

    @staticmethod
    def _bind(schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        named: dict[str, Any] = {}
        for i, arg in enumerate(schema.arguments):
            if arg.name in kwargs:
                named[arg.name] = kwargs[arg.name]
            elif i < len(args) and not arg.kwarg_only:
                named[arg.name] = args[i]
            else:
                named[arg.name] = arg.default_value if arg.has_default_value() else None
        return named

    def _implementation(self, op: str) -> Any:
        entry = self.ops[op]

        def implementation(*args: Any, **kwargs: Any) -> Any:
            named = self._bind(self.schema(op), args, kwargs)
            for rule in entry["constraints"]:
                self._enforce(op, rule, named)
            if not entry["outputs"]:  # in place: mark every written argument
                for i, arg in enumerate(a for a in self.schema(op).arguments
                                        if a.alias_info is not None and a.alias_info.is_write):
                    named[arg.name].fill_(self.marker(op, i))
                return None
            outs = [self._output(op, i, rule, named) for i, rule in enumerate(entry["outputs"])]
            return outs[0] if len(outs) == 1 else tuple(outs)

        return implementation

    # ------------------------------------------------------------ documented constraints
    def _enforce(self, op: str, rule: dict[str, Any], named: dict[str, Any]) -> None:
        if any(named.get(k) != v for k, v in rule.get("when", {}).items()):
            return
        name = rule["arg"]
        t = named[name]
        if t is None:
            return
        problem = recorded_violation(rule, t, named)
        if problem is not None:
            raise ContractViolation(f"{op}: {name} {problem} (torch_npu docs: {rule['doc']})")

    # ------------------------------------------------------------ recorded output rules
    def _enum_dtype(self, value: Any, default: str) -> str:
        if value is None:
            return default
        return self.enum.get(str(int(value)), default)

    def _out_dtype(self, spec: str, named: dict[str, Any]) -> tuple[torch.dtype, bool]:
        """The dtype of an output, and whether it packs two fp4 values a byte."""
        kind, _, arg = spec.partition(":")
        if kind == "like":
            return named[arg].dtype, False
        if kind == "quant":  # npu_quantize's table; anything else is int8
            name = self._enum_dtype(named[arg], "int8")
            table = {"quint8": "uint8", "uint8": "uint8", "qint32": "int32", "int32": "int32",
                     "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}
            return getattr(torch, table.get(name, "int8")), False
        if kind == "fp8":
            value = named[arg]
            name = self._enum_dtype(value, "int8")
            if name == "float8_e5m2" or value == 291:
                return torch.float8_e5m2, False
            if name == "float8_e4m3fn" or value == 292:
                return torch.float8_e4m3fn, False
            return torch.uint8, True
        return getattr(torch, spec), False

    @staticmethod
    def _shape(spec: str, named: dict[str, Any], packed: bool) -> list[int]:
        kind, _, rest = spec.partition(":")
        args = rest.split(",")
        x = named[args[0]]
        shape = list(x.shape)
        if kind == "rows":
            return shape[:-1]
        if kind == "rstd":
            k = x.dim() - named[args[1]].dim()
            return shape[:k] + [1] * (x.dim() - k)
        if kind == "mxscale":
            axis = named.get("axis", -1) % x.dim()
            blocks = math.ceil(shape[axis] / named.get("block_size", 32))
            shape[axis] = (blocks + 1) // 2
            return [*shape, 2]
        if kind == "lse":  # [T, N, 1]: FIA's softmax_lse for TND queries
            return [*shape[:2], 1]
        if kind == "half":
            shape[named[args[1]]] //= 2
            return shape
        if kind == "fp8" and packed:
            if shape[-1] % 2:
                raise ContractViolation("fp4 outputs need an even last dim of the input")
            shape[-1] //= 2
        return shape

    def _output(self, op: str, index: int, rule: dict[str, Any], named: dict[str, Any]) -> Any:
        dtype, packed = self._out_dtype(rule["dtype"], named)
        shape = self._shape(rule["shape"], named, packed)
        if "mask" in rule:
            mask_arg, slot = rule["mask"]
            mask = named[mask_arg]
            if mask is not None and not any(mask):
                raise ContractViolation(f"{op}: {mask_arg} must switch on at least one output")
            on = (slot == 0 or (named.get("smooth_scale1") is not None
                                and named.get("smooth_scale2") is not None)
                  ) if mask is None else bool(mask[slot])
            shape = shape if on else [0]
        if "flag" in rule and not named[rule["flag"]]:  # switched off: an empty output
            shape = [0]
        device = next(v.device for v in named.values() if isinstance(v, torch.Tensor))
        return torch.full(shape, float(self.marker(op, index)), device=device).to(dtype)
