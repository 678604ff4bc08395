"""Expected against matched sites of one pass run, and where matching stopped.

A pass's *candidate* sites are the nodes its idiom is anchored on that look like the idiom
(e.g. a rotary embedding fed by RMS norms for qknorm_rope); a candidate that is not rewritten
is a *miss*, described by the first node where matching stopped and why. Passes that have no
meaningful candidates (clean-ups such as no-op elimination) report no expectation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import fx


@dataclass(frozen=True)
class Miss:
    """A candidate site left alone: the node where matching stopped and the reason."""

    node: str
    target: str
    why: str

    @classmethod
    def at(cls, node: Any, why: str) -> Miss:
        """The miss at `node` (an FX node, or any value that stood where a node was wanted)."""
        if isinstance(node, fx.Node):
            return cls(node.name, describe_target(node), why)
        return cls(repr(node), type(node).__name__, why)

    def __str__(self) -> str:
        return f"node {self.node!r} ({self.target}): {self.why}"


@dataclass(frozen=True)
class SiteResult:
    """One run of a pass on one graph: `expected` candidate sites (None: the pass has no
    expectation), `matched` sites rewritten, and the first miss when matched < expected."""

    expected: int | None
    matched: int
    miss: Miss | None = None

    @property
    def short(self) -> bool:
        """True when candidates were left alone."""
        return self.expected is not None and self.matched < self.expected


def describe_target(node: fx.Node) -> str:
    """A short name of what `node` calls (`ascend.rms_norm.default`, `getitem`...)."""
    target = node.target
    if node.op != "call_function":
        return f"{node.op} {target}"
    name = getattr(target, "__name__", None)
    if hasattr(target, "_schema") or hasattr(target, "_qualified_op_name"):
        return str(target)
    return str(name or target)


def why_not(node: Any, want: str) -> Miss:
    """The miss of a node that is not what the idiom wants at this step."""
    if isinstance(node, fx.Node):
        return Miss.at(node, f"expected {want}")
    return Miss.at(node, f"expected {want}, found a non-node value")
