"""Reference ops built from their preallocated-output (``<op>_out``) variants.

A reference op is "allocate the outputs its fake implementation describes, then fill them with
``<op>_out``": the output shapes are written once (in the fake) and the arithmetic once (in the
``_out`` helper), and the fresh-output op runs exactly the arithmetic of the preallocated one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def into_fresh_outputs(
    op: str, out_fn: Callable[..., Any], alloc_fn: Callable[..., Any], *out_names: str
) -> Callable[..., Any]:
    """The reference ``ascend::<op>``: ``out_fn(*args, <out_names>=alloc_fn(*args))``.

    ``alloc_fn`` returns one tensor or a tuple, in the order of ``out_names`` (the keyword
    names of ``out_fn``'s preallocated outputs).
    """

    def reference(*args: Any, **kwargs: Any) -> Any:
        outputs = alloc_fn(*args, **kwargs)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        return out_fn(*args, **kwargs, **dict(zip(out_names, outputs, strict=True)))

    reference.__name__ = reference.__qualname__ = op
    reference.__module__ = out_fn.__module__
    reference.__doc__ = f"Reference ``ascend::{op}``: ``{out_fn.__name__}`` into fresh outputs."
    return reference
