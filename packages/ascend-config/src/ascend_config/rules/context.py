"""The working state of one ``resolve`` call, handed to each rule function.

Rules read typed options from ``ctx.opts`` and facts from ``ctx.facts``; they report problems,
warnings and environment changes here and replace effective values with :meth:`set_top` /
:meth:`set_in`. Nothing outside this object is touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_config.envs import BY_NAME, EnvChange, EnvValue, EnvVarError
from ascend_config.errors import Problem, make_problem
from ascend_config.facts import DeploymentFacts
from ascend_config.inputs import text_problem
from ascend_config.schema.top import TopLevelOptions


@dataclass
class RuleContext:
    """Inputs, effective options and findings of one resolution."""

    facts: DeploymentFacts
    environ: Mapping[str, str]
    opts: TopLevelOptions
    given: frozenset[str] = frozenset()
    problems: list[Problem] = field(default_factory=list)
    omitted: int = 0  # problems found beyond the ones listed (see MAX_REPORTED_PROBLEMS)
    warnings: list[str] = field(default_factory=list)
    env_changes: list[EnvChange] = field(default_factory=list)
    derived: dict[str, Any] = field(default_factory=dict)

    def problem(self, path: str, value: object, allowed: str, message: str) -> None:
        """Record one problem."""
        self.problems.append(make_problem(path, value, allowed, message))

    def warn(self, text: str) -> None:
        """Record a warning once."""
        if text not in self.warnings:
            self.warnings.append(text)

    def is_given(self, path: str) -> bool:
        """Whether the user wrote ``path`` (dotted) in additional_config."""
        return path in self.given

    def set_top(self, **updates: Any) -> None:
        """Replace top-level effective values."""
        self.opts = self.opts.model_copy(update=updates)

    def set_in(self, section: str, **updates: Any) -> None:
        """Replace effective values inside a top-level section."""
        current = getattr(self.opts, section)
        self.opts = self.opts.model_copy(update={section: current.model_copy(update=updates)})

    def env(self, name: str) -> EnvValue:
        """Typed value of a registered variable; an invalid value becomes a problem."""
        var = BY_NAME[name]
        if name not in self.environ:
            return var.default
        try:
            return var.parse(self.environ[name])
        except EnvVarError as exc:
            self.problems.extend(exc.problems)
            return var.default

    def env_text(self, name: str) -> str | None:
        """The raw text of ``name`` (None when unset); text that could not be passed on as
        UTF-8 (an undecodable byte in the environment) is a problem and reads as unset."""
        text = self.environ.get(name)
        why = text_problem(text) if text is not None else None
        if why:
            self.problem(f"env {name}", text, "valid UTF-8 text", f"invalid value: {why}")
            return None
        return text

    def set_env(self, name: str, value: str | None) -> None:
        """Ask the caller to set (or, with None, unset) ``name``; no-ops are skipped."""
        if self.environ.get(name) == value:
            return
        self.env_changes = [c for c in self.env_changes if c.name != name]
        self.env_changes.append(EnvChange(name, value))

    @property
    def kv_role(self) -> str | None:
        """The deployment's kv-transfer role (None without kv transfer)."""
        return self.facts.kv_role
