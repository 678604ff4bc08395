"""Reference ops built from their preallocated-output (``<op>_out``) variants.

A reference op is "allocate the outputs its fake implementation describes, then fill them with
``<op>_out``": the output shapes are written once (in the fake) and the arithmetic once (in the
``_out`` helper), and the fresh-output op runs exactly the arithmetic of the preallocated one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch


def output_names(out_fn: Callable[..., Any]) -> tuple[str, ...]:
    """The required keyword-only parameters of ``out_fn``: its preallocated outputs, in order."""
    return tuple(
        p.name
        for p in inspect.signature(out_fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    )


def into_fresh_outputs(
    out_fn: Callable[..., Any], alloc_fn: Callable[..., Any]
) -> Callable[..., Any]:
    """The reference op of ``out_fn`` (``<op>_out``): ``out_fn`` into ``alloc_fn``'s outputs.

    ``alloc_fn`` (the op's fake) takes the op's arguments by position and returns one tensor
    or a tuple in the order of ``out_fn``'s required keyword-only parameters.
    """
    op = out_fn.__name__.removesuffix("_out")
    names = output_names(out_fn)
    signature = inspect.signature(out_fn)
    positional = [p.name for p in signature.parameters.values() if p.kind is not p.KEYWORD_ONLY]

    def reference(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            # The dispatcher passes schema arguments by position; a direct call may name them.
            bound = signature.bind_partial(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.arguments[name] for name in positional)
            kwargs = {k: v for k, v in kwargs.items() if k not in positional}
        outputs = alloc_fn(*args)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        return out_fn(*args, **kwargs, **dict(zip(names, outputs, strict=True)))

    reference.__name__ = reference.__qualname__ = op
    reference.__module__ = out_fn.__module__
    reference.__doc__ = f"Reference ``ascend::{op}``: ``{out_fn.__name__}`` into fresh outputs."
    return reference
