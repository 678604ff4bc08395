"""``OpSpec``: everything about one ``torch.ops.ascend.*`` op, declared in one place.

An op family module (``ops/norm.py``, ``ops/rope.py``, ...) declares one spec per op: the
schema (the op's signature, written once), the argument checks, the whole-tensor reference
(which is also the inductor decomposition when ``decompose`` is set), an optional fake (the
default runs the reference on fake tensors), the NPU adapter and an optional batch-invariant
variant. The Python signature is the schema's: the reference takes the schema's arguments in
order (a test holds each reference to its schema) and everything else gets them by schema name
(:data:`Arguments`). ``ascend_kernels.registration`` turns the specs into ``torch.library``
registrations; nothing is looked up by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from ascend_kernels.ops.npu_kernels import NPU_SUPPORT, NpuSupport
from ascend_kernels.validation import check_no_partial_overlap, check_out, overlaps

NAMESPACE = "ascend"

#: A call's arguments by schema name (defaults filled in): what the checks, the fake, the NPU
#: adapter and the batch-invariant variant get.
Arguments = Mapping[str, Any]
#: An NPU adapter: ``npu(torch_npu, arguments)``.
NpuAdapter = Callable[[ModuleType, Arguments], Any]


@dataclass(frozen=True)
class OpSpec:
    """One op: schema, checks, reference, fake, NPU adapter, batch-invariant variant, and its
    ``_out`` helper's outputs.

    - ``schema``: the public contract ``"(Tensor x, ...) -> ..."`` (README "Schema changes").
    - ``check``: argument checks on :data:`Arguments`, shared by the reference, the fake and
      the NPU adapter, so bad input gets the same error on every path.
    - ``reference``: plain torch over whole tensors, arguments in schema order, unchecked;
      numerically the NPU kernel's definition. With ``decompose`` inductor inlines it
      (``inductor_lowering``).
    - ``fake``: output allocation for torch.compile, from :data:`Arguments` (the outputs'
      shapes, dtypes and layouts as the reference makes them); ``None`` runs ``reference``
      on the fake tensors, which costs a trace of its whole arithmetic per call.
    - ``npu``: the adapter onto torch_npu, called as ``npu(torch_npu, arguments)`` with
      :data:`Arguments`; ``None`` keeps the reference on the NPU.
    - ``batch_invariant``: a kernel on :data:`Arguments` whose rows do not depend on the batch
      they come in, where the op's own kernel gives no such promise; it replaces the op's
      kernels while batch-invariant mode is on
      (``ascend_kernels.batch_invariant.enable_batch_invariant_mode()``).
    - ``out_names``: keyword names of the ``<op>_out`` helper's preallocated outputs;
      ``out_may_be_input``: an elementwise op whose output may be one of its inputs itself.
    """

    name: str
    schema: str
    check: Callable[[Arguments], None]
    reference: Callable[..., Any]
    fake: Callable[[Arguments], Any] | None = None
    npu: NpuAdapter | None = None
    batch_invariant: Callable[[Arguments], Any] | None = None
    decompose: bool = False
    out_names: tuple[str, ...] = ("out",)
    out_may_be_input: bool = False

    @property
    def qualname(self) -> str:
        """``"ascend::<name>"``."""
        return f"{NAMESPACE}::{self.name}"

    @functools.cached_property
    def _signature(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        parsed = torch._C.parse_schema(f"{self.qualname}{self.schema}").arguments
        return tuple(a.name for a in parsed), {
            a.name: a.default_value for a in parsed if a.has_default_value()
        }

    @property
    def npu_support(self) -> NpuSupport | None:
        """The kernels :attr:`npu` calls and where it runs (``ops/npu_kernels.py``)."""
        return NPU_SUPPORT.get(self.name)

    @property
    def argument_names(self) -> tuple[str, ...]:
        """The schema's argument names, in order."""
        return self._signature[0]

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by schema name; a missing or unknown one is a ``TypeError``."""
        names = self.argument_names
        if len(args) > len(names):
            raise TypeError(f"{self.qualname} takes {len(names)} arguments, got {len(args)}")
        bound = {**self._signature[1], **dict(zip(names, args, strict=False)), **kwargs}
        missing = [n for n in names if n not in bound]
        unknown = [n for n in kwargs if n not in names]
        if missing or unknown:
            raise TypeError(
                f"{self.qualname}{self.schema}: missing {missing}, unknown {unknown}"
            )
        return bound

    def checked(self, kernel: Callable[..., Any]) -> Callable[..., Any]:
        """``kernel`` (taking the op's arguments) running the op's checks first."""

        def run(*args: Any, **kwargs: Any) -> Any:
            bound = self.arguments(args, kwargs)
            self.check(bound)
            return kernel(*(bound[n] for n in self.argument_names))

        run.__name__ = run.__qualname__ = self.name
        run.__doc__ = kernel.__doc__
        return run

    @functools.cached_property
    def checked_reference(self) -> Callable[..., Any]:
        """The reference op: checks, then :attr:`reference` (fresh outputs)."""
        return self.checked(self.reference)

    def checked_bound(self, kernel: Callable[[Arguments], Any]) -> Callable[..., Any]:
        """``kernel`` (taking :data:`Arguments`) as the op, running the op's checks first."""

        def run(*args: Any, **kwargs: Any) -> Any:
            bound = self.arguments(args, kwargs)
            self.check(bound)
            return kernel(bound)

        run.__name__ = run.__qualname__ = self.name
        return run

    @functools.cached_property
    def checked_fake(self) -> Callable[..., Any]:
        """The fake op: checks, then :attr:`fake` (or the reference on fake tensors)."""
        if self.fake is None:
            return self.checked(self.reference)
        return self.checked_bound(self.fake)

    def checked_npu(self, torch_npu: ModuleType) -> Callable[..., Any]:
        """The NPU op bound to ``torch_npu``: checks, then :attr:`npu`."""
        adapter = self.npu
        if adapter is None:
            raise TypeError(f"{self.qualname} has no NPU adapter")
        return self.checked_bound(functools.partial(adapter, torch_npu))

    def out(self, *args: Any, **kwargs: Any) -> Any:
        """``<op>_out``: the op into preallocated contiguous outputs named :attr:`out_names`.

        Each output must have the shape and dtype of the op's, on its device, and share no
        memory with an argument or another output (except, with ``out_may_be_input``, being
        an input itself): ``ValueError`` naming it otherwise. Returns the output(s).
        """
        if not self.out_names:
            raise TypeError(f"{self.name} has no _out helper (it returns a new tensor)")
        outs = {name: kwargs.pop(name) for name in self.out_names if name in kwargs}
        missing = [name for name in self.out_names if name not in outs]
        if missing:
            raise TypeError(f"{self.name}_out needs the keyword output(s) {missing}")
        bound = self.arguments(args, kwargs)
        self.check(bound)
        result = self.reference(*(bound[n] for n in self.argument_names))
        results = result if isinstance(result, tuple) else (result,)
        for (name, buffer), want in zip(outs.items(), results, strict=True):
            check_out(name, buffer, want, want.shape, want.dtype)
        inputs = [(n, v) for n, v in bound.items() if isinstance(v, torch.Tensor)]
        named = list(outs.items())
        for i, (name, buffer) in enumerate(named):
            _check_no_overlap(name, buffer, inputs, named[i + 1:], self.out_may_be_input)
        for buffer, value in zip(outs.values(), results, strict=True):
            buffer.copy_(value)
        values = tuple(outs.values())
        return values if len(values) > 1 else values[0]


def like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A fake output with ``t``'s shape and layout (an elementwise image of ``t``)."""
    return torch.empty_like(t, dtype=dtype)


def rows_of(t: torch.Tensor, width: Any, dtype: torch.dtype) -> torch.Tensor:
    """A fake contiguous ``t.shape[:-1] + (width,)`` output (``width`` may be a SymInt)."""
    return t.new_empty((*t.shape[:-1], width), dtype=dtype)


def _check_no_overlap(
    name: str,
    buffer: torch.Tensor,
    inputs: list[tuple[str, torch.Tensor]],
    outputs: list[tuple[str, torch.Tensor]],
    may_be_input: bool,
) -> None:
    if may_be_input:
        check_no_partial_overlap(name, buffer, *inputs)
    for other_name, other in (outputs if may_be_input else [*inputs, *outputs]):
        if overlaps(buffer, other):
            raise ValueError(f"{name} must not share memory with {other_name}")
