"""The exact-error-message test each ascend-kernels test module instantiates with its own
``MESSAGES``: messages are part of the contract (they name the argument, what it got and what
is allowed), so each is checked in full."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

#: ``(case id, call taking the valid_args fixture, exception type, exact message)``.
Message = tuple[str, Callable[[Any], Any], type[Exception], str]


def positional_args(valid_args: Any, op: str, **changes: Any) -> tuple[Any, ...]:
    """``op``'s valid arguments with ``changes`` applied, in schema order."""
    return tuple({**valid_args(op), **changes}.values())


def exact_message_test(messages: list[Message]) -> Callable[..., None]:
    """A test, parametrized over ``messages``, that each call raises exactly the given type with
    exactly the given text; bind it to a ``test_*`` name in the module of the unit it covers."""

    @pytest.mark.parametrize(
        ("case", "call", "error", "message"),
        messages,
        ids=[c[0] for c in messages],
    )
    def test_exact_message(
        case: str, call: Callable[[Any], Any], error: type[Exception], message: str,
        valid_args: Any,
    ) -> None:
        with pytest.raises(error) as info:
            call(valid_args)
        assert type(info.value) is error
        assert str(info.value) == message

    return test_exact_message
