"""Binding calls to the signatures recorded from the real torch_npu wheel.

A call the real ``torch.npu`` function would reject (unknown keyword, missing or extra
argument) raises the same ``TypeError`` here, before the emulation runs it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from torch_npu_double.record import load_record, signature_from_text

F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def recorded_signature(name: str) -> inspect.Signature:
    """The recorded signature of ``torch.npu.<name>`` (``Cls`` is its ``__new__``/``__init__``)."""
    apis = load_record()["python_apis"]
    if name not in apis:
        raise KeyError(f"torch.npu.{name} is not in the torch_npu record; add it to "
                       "tools/torch_npu_tables.py PYTHON_APIS and re-run torch_npu_schemas.py")
    return signature_from_text(apis[name]["signature"])


def check_call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``TypeError`` naming the API and its real signature when the call does not bind."""
    signature = recorded_signature(name)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"torch.npu.{name}{signature}: {err}") from None


def bound(name: str) -> Callable[[F], F]:
    """Decorate a function (or method: ``self`` is not part of the record) so each call is
    first bound to the recorded signature of ``torch.npu.<name>``."""

    def decorate(fn: F) -> F:
        params = list(inspect.signature(fn).parameters)
        is_method = bool(params) and params[0] == "self"

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check_call(name, args[1:] if is_method else args, kwargs)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
