"""Binding calls to the signatures recorded from the real torch_npu wheel.

A call the real ``torch.npu`` function would reject (unknown keyword, missing or extra
argument) raises the same ``TypeError`` here, before the emulation runs it.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from torch_npu_double.record import load_record

F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def recorded_signature(name: str) -> inspect.Signature:
    """The recorded signature of ``torch.npu.<name>`` (``Cls`` is its ``__new__``/``__init__``)."""
    apis = load_record()["python_apis"]
    if name not in apis:
        raise KeyError(f"torch.npu.{name} is not in the torch_npu record; add it to "
                       "tools/torch_npu_tables.py PYTHON_APIS and re-run torch_npu_schemas.py")
    return signature_from_text(apis[name]["signature"])


class _Default:
    """A recorded default, shown as its source text (the emulation never uses its value)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return self.source


def signature_from_text(text: str) -> inspect.Signature:
    fn = ast.parse(f"def f{text}: pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    args = fn.args
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    for i, (arg, node) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        default = P.empty if node is None else _Default(ast.unparse(node))
        params.append(P(arg.arg, kind, default=default))
    if args.vararg is not None:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, kw in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(P(arg.arg, P.KEYWORD_ONLY,
                        default=P.empty if kw is None else _Default(ast.unparse(kw))))
    if args.kwarg is not None:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


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
