"""``register_meta_if_necessary``: fake/meta kernels for ops a compiled extension defines.

The libraries created here live in ``MetaRegistry`` (one per namespace); ``reset()`` drops them,
which removes every meta kernel this module registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class MetaRegistry:
    """Owns the ``torch.library.Library(ns, "IMPL")`` objects that hold our meta kernels."""

    def __init__(self) -> None:
        self._libraries: dict[str, torch.library.Library] = {}

    def library(self, namespace: str) -> torch.library.Library:
        """The IMPL library for ``namespace`` (created on first use)."""
        lib = self._libraries.get(namespace)
        if lib is None:
            lib = torch.library.Library(namespace, "IMPL")  # type: ignore[no-untyped-call]
            self._libraries[namespace] = lib
        return lib

    def reset(self) -> None:
        """Remove every registration made through this registry."""
        for lib in self._libraries.values():
            lib._destroy()  # type: ignore[no-untyped-call]
        self._libraries.clear()


meta_registry = MetaRegistry()


def register_meta_if_necessary(
    ns: str, op_name: str, fn: Callable[..., Any], overload: str = ""
) -> bool:
    """Register ``fn`` as the Meta kernel of ``ns::op_name[.overload]`` unless one exists.

    Returns True when it registered ``fn``; False when the op already had a Meta kernel.
    Raises ``ValueError`` when the op is not defined.
    """
    name = f"{ns}::{op_name}"
    target = f"{op_name}.{overload}" if overload else op_name
    try:
        torch._C._dispatch_find_schema_or_throw(name, overload)
    except RuntimeError as exc:
        raise ValueError(
            f"operator {name}{'.' + overload if overload else ''} is not defined"
        ) from exc
    if torch._C._dispatch_has_kernel_for_dispatch_key(
        f"{name}{'.' + overload if overload else ''}", "Meta"
    ):
        return False
    meta_registry.library(ns).impl(target, fn, "Meta")  # type: ignore[no-untyped-call]
    return True
