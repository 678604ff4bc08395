"""Pass and pattern base classes.

A pattern declares its example inputs, the search function (the unfused idiom, eager), the
replacement (the fused op, eager), a structural FX matcher (`extract`, giving the pattern's own
typed, frozen `Match` subclass: the site) and extra checks. It is
keyed by every setting that changes what it matches or produces; registrations live on the
pass instance (so on the manager that owns it), never in a process-global set. The same-stream
check runs for every match before any pattern-specific check.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import fx

from ascend_graph.passes.fx_nodes import same_stream
from ascend_graph.passes.sites import Miss, SiteResult


@dataclass(frozen=True)
class Match:
    """One site found by a pattern's structural matcher; each pattern has its own frozen
    subclass whose fields are the graph values the rewrite consumes or replaces.

    `nodes`: every node the rewrite replaces (stream check; erased when dead afterwards).
    `attrs`: what the site is (eps, dtype, head sizes, scale, bias...), compared with the
    pattern's settings. A subclass names what the fused op takes after the op's schema
    arguments, so the rewrite calls the op by name (`arguments`).
    """

    nodes: tuple[fx.Node, ...]

    @property
    def attrs(self) -> dict[str, Any]:
        """What the site is, by setting name (none by default)."""
        return {}

    def arguments(self, op: Any) -> tuple[Any, ...]:
        """`op`'s positional arguments, each read from this site's field (or property) named
        like the schema argument; a schema argument the site does not name is a `TypeError`."""
        schema = op._schema.arguments
        missing = [a.name for a in schema if not hasattr(self, a.name)]
        if missing:
            raise TypeError(f"{type(self).__name__} does not name {op}'s arguments {missing}")
        return tuple(getattr(self, a.name) for a in schema)


SiteT = TypeVar("SiteT", bound=Match)


def _setting_equal(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, float) and isinstance(found, (int, float)):
        return math.isclose(float(found), wanted, rel_tol=1e-9, abs_tol=0.0)
    return bool(found == wanted)


class FusionPattern(ABC, Generic[SiteT]):
    """A keyed rewrite rule over sites of type `SiteT`. Settings left as None match any value
    found in the graph."""

    #: Call targets whose nodes start a match (the last op of the idiom); a string names a
    #: `torch.ops.ascend` op, resolved when the pass runs (after ascend_kernels registered it).
    anchors: ClassVar[tuple[Any, ...]] = ()

    def __init__(self, *, context: dict[str, Any] | None = None, **settings: Any) -> None:
        # settings: compared with what a site holds; context: fixed facts that still change
        # the outcome (e.g. the SoC for capability checks) and therefore belong to the key.
        self.settings: dict[str, Any] = settings
        self.context: dict[str, Any] = dict(context or {})

    @property
    def key(self) -> tuple[Any, ...]:
        """Identity of the registration: class plus every setting and context value."""
        items = tuple(sorted((k, _key_value(v)) for k, v in self.settings.items()))
        ctx = tuple(sorted((k, _key_value(v)) for k, v in self.context.items()))
        return (type(self).__name__, items, ctx)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in {**self.settings, **self.context}.items())
        return f"{type(self).__name__}({inner})"

    @classmethod
    @abstractmethod
    def extract(cls, anchor: fx.Node) -> SiteT | None:
        """Structural match of the idiom ending at `anchor`, or None."""

    @classmethod
    def is_candidate(cls, anchor: fx.Node) -> bool:
        """True when the graph around `anchor` looks like this idiom, so a model holding it
        expects a rewrite here (default: every anchor node is a candidate)."""
        return True

    @classmethod
    def diagnose(cls, anchor: fx.Node) -> Miss:
        """Where and why `extract` found no match at a candidate `anchor`."""
        return Miss.at(anchor, f"{cls.__name__}: the idiom ending here did not match")

    def accepts(self, site: SiteT) -> bool:
        """True when every non-None setting equals what the site holds."""
        attrs = site.attrs
        return all(
            wanted is None or _setting_equal(attrs.get(name), wanted)
            for name, wanted in self.settings.items()
        )

    def extra_check(self, site: SiteT) -> bool:
        """Pattern-specific checks beyond structure and settings (kernel capability...)."""
        return True

    @abstractmethod
    def rewrite(self, graph: fx.Graph, site: SiteT) -> None:
        """Replace the matched site with the fused op (nodes left dead are erased)."""

    @abstractmethod
    def example_inputs(self) -> tuple[Any, ...]:
        """Small CPU inputs for `search`/`replacement` (used to trace and self-check)."""

    @abstractmethod
    def search(self, *inputs: Any) -> Any:
        """The unfused idiom written with `torch.ops.ascend.*`, eager."""

    @abstractmethod
    def replacement(self, *inputs: Any) -> Any:
        """The fused op call producing the same outputs as `search`, eager."""


def ascend_op(name: str) -> Any:
    """`torch.ops.ascend.<name>.default`, registering the ascend ops first if needed."""
    namespace = torch.ops.ascend
    if not hasattr(namespace, name):
        import ascend_kernels  # noqa: F401  (registers every torch.ops.ascend op)
    return getattr(namespace, name).default


def resolve_target(target: Any) -> Any:
    return ascend_op(target) if isinstance(target, str) else target


def _key_value(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return value


CompileRange = Any  # an object with .start/.end (vLLM's Range), a (start, end) tuple, or None


def range_bounds(compile_range: CompileRange) -> tuple[int | None, int | None]:
    """(start, end) of a compile range given as vLLM's Range, a tuple, or None (any)."""
    if compile_range is None:
        return (None, None)
    if isinstance(compile_range, (tuple, list)) and len(compile_range) == 2:
        return (compile_range[0], compile_range[1])
    start = getattr(compile_range, "start", None)
    end = getattr(compile_range, "end", None)
    if start is None and end is None:
        raise TypeError(
            f"compile_range {compile_range!r} is not understood: pass None, a (start, end) "
            "tuple, or an object with .start and .end"
        )
    return (start, end)


class GraphPass(ABC):
    """A graph rewrite with a name, settings (for the uuid) and a compile-range check."""

    name: ClassVar[str] = ""
    #: Whether `sites` counts candidate sites (False: a clean-up with no expectation).
    counts_candidates: ClassVar[bool] = False

    #: Token counts outside [min_tokens, max_tokens] skip the pass (None = unbounded).
    min_tokens: int | None = None
    max_tokens: int | None = None

    def is_applicable_for_range(self, compile_range: CompileRange) -> bool:
        """True when the whole compile range lies inside the pass's token bounds."""
        start, end = range_bounds(compile_range)
        if self.min_tokens is not None and (start is None or start < self.min_tokens):
            return False
        return not (self.max_tokens is not None and (end is None or end > self.max_tokens))

    def settings(self) -> dict[str, Any]:
        """Everything that changes what the pass does (hashed into the manager's uuid)."""
        return {"min_tokens": self.min_tokens, "max_tokens": self.max_tokens}

    @abstractmethod
    def __call__(self, graph: fx.Graph) -> int:
        """Rewrite `graph` in place; return the number of sites rewritten."""

    def sites(self, graph: fx.Graph) -> SiteResult:
        """Rewrite `graph` like `__call__`; report expected against matched sites (passes
        without candidate sites report no expectation)."""
        return SiteResult(None, self(graph))


class PatternPass(GraphPass):
    """A pass made of keyed patterns registered on this instance."""

    counts_candidates = True

    def __init__(self) -> None:
        self._patterns: dict[tuple[Any, ...], FusionPattern[Any]] = {}

    def register(self, pattern: FusionPattern[Any]) -> bool:
        """Add `pattern` unless one with the same key is already registered here."""
        if pattern.key in self._patterns:
            return False
        self._patterns[pattern.key] = pattern
        return True

    @property
    def patterns(self) -> tuple[FusionPattern[Any], ...]:
        return tuple(self._patterns.values())

    def settings(self) -> dict[str, Any]:
        base = super().settings()
        base["patterns"] = [repr(k) for k in self._patterns]
        return base

    def __call__(self, graph: fx.Graph) -> int:
        return self.sites(graph).matched

    def sites(self, graph: fx.Graph) -> SiteResult:
        by_class: dict[type[FusionPattern[Any]], list[FusionPattern[Any]]] = {}
        for pattern in self._patterns.values():
            by_class.setdefault(type(pattern), []).append(pattern)
        # Candidate anchors -> None once rewritten, else the first reason matching stopped (a
        # node may be tried by several pattern classes sharing its target).
        outcome: dict[fx.Node, Miss | None] = {}
        for cls, patterns in by_class.items():
            for target in map(resolve_target, cls.anchors):
                for node in list(graph.find_nodes(op="call_function", target=target)):
                    if getattr(node, "_erased", False):
                        continue
                    candidate = cls.is_candidate(node) and node not in outcome
                    found = self._try(graph, node, cls, patterns, explain=candidate)
                    if found is None or candidate:
                        outcome[node] = found
        misses = [m for m in outcome.values() if m is not None]
        return SiteResult(len(outcome), len(outcome) - len(misses), misses[0] if misses else None)

    @staticmethod
    def _try(
        graph: fx.Graph,
        node: fx.Node,
        cls: type[FusionPattern[Any]],
        patterns: Sequence[FusionPattern[Any]],
        explain: bool = True,
    ) -> Miss | None:
        """Rewrite the site at `node` (None) or say why not (`explain`: diagnose where the
        idiom stopped, which walks the graph again)."""
        site = cls.extract(node)
        if site is None:
            return cls.diagnose(node) if explain else Miss.at(node, "no match")
        if not same_stream(site.nodes):
            return Miss.at(node, "the site's nodes run on different streams")
        refused = []
        for pattern in patterns:
            if pattern.accepts(site) and pattern.extra_check(site):
                pattern.rewrite(graph, site)
                return None
            refused.append(pattern)
        found = ", ".join(f"{k}={_key_value(v)!r}" for k, v in sorted(site.attrs.items()))
        return Miss.at(node, f"no registered pattern (of {len(refused)}) accepts the site "
                             f"({found}): a setting differs or the kernel does not support it")
