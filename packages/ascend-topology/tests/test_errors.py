"""The package's error types: each carries its problems, one line each, and survives pickling."""

from __future__ import annotations

from ascend_topology import (
    ParseError,
    RecordedHostError,
)


def test_topology_error_carries_each_problem() -> None:
    import pickle

    error = RecordedHostError("first", "second")
    assert (str(error), error.problems, error.args) == ("first; second", ("first", "second"),
                                                        ("first", "second"))
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RecordedHostError and again.problems == ("first", "second")
    assert str(ParseError("only")) == "only" and ParseError("only").args == ("only",)
