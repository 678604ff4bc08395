"""``resolve``: additional_config + deployment facts + environment -> frozen AscendConfig.

Pure and deterministic: the inputs are only read, every problem is collected into one
:class:`AscendConfigError`, side effects come back as ``env_changes`` and notices as
``warnings``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ascend_config.envs import BY_NAME
from ascend_config.errors import AscendConfigError, Problem, make_problem, render_path
from ascend_config.facts import DeploymentFacts, check_fields
from ascend_config.inputs import scan
from ascend_config.limits import MAX_CONFIG_CHARS, MAX_CONFIG_VALUES, MAX_DEPTH
from ascend_config.model import AscendConfig
from ascend_config.rules import RULES
from ascend_config.rules.context import RuleContext
from ascend_config.schema.introspect import field_at
from ascend_config.schema.owners import foreign_warning, misplaced_fix, sort_top_level
from ascend_config.schema.sections import LEGACY_SCHEDULER_KEYS
from ascend_config.schema.top import AdditionalConfig, TopLevelOptions
from ascend_config.schema.validation import validate_best_effort

_ENV_FALLBACKS = tuple(
    (var.config_key, var.name) for var in BY_NAME.values()
    if var.config_key and "." not in var.config_key
)


def _given_paths(raw: Mapping[Any, Any]) -> set[str]:
    """The keys given, as ``key`` and ``section.key`` (the rules ask about no deeper path)."""
    out: set[str] = set()
    for key, value in raw.items():
        if not isinstance(key, str):
            continue
        out.add(key)
        if isinstance(value, Mapping):
            out.update(f"{key}.{inner}" for inner in value if isinstance(inner, str))
    return out


def _check_facts(facts: object) -> tuple[DeploymentFacts, list[Problem]]:
    if not isinstance(facts, DeploymentFacts):
        return DeploymentFacts(), [make_problem("facts", facts, "a DeploymentFacts instance",
                                                "wrong type of deployment facts")]
    problems = [make_problem(f"facts.{name}", value, allowed, "invalid deployment fact")
                for name, value, allowed in check_fields(facts)]
    # Rules would trip over wrongly typed facts; judge the config against the defaults instead.
    return (DeploymentFacts() if problems else facts), problems


_SHAPE_ALLOWED = {
    "depth": f"at most {MAX_DEPTH} levels of objects and lists",
    "values": f"at most {MAX_CONFIG_VALUES} keys and list items in total",
    "chars": f"at most {MAX_CONFIG_CHARS} characters of text in total",
}


def _shape_problem(additional_config: object) -> Problem | None:
    """additional_config too deep or too big to validate within bounded work, else None."""
    if not isinstance(additional_config, Mapping):
        return None
    found = scan(additional_config, max_depth=MAX_DEPTH, max_values=MAX_CONFIG_VALUES,
                 max_chars=MAX_CONFIG_CHARS)
    if found is None:
        return None
    parts: tuple[object, ...] = ()
    value: object = additional_config
    if found.kind == "depth" and found.parts:
        _, _, matched = field_at(found.parts)
        parts = found.parts[: max(matched, 1)]
        for part in parts:
            value = value[part]  # type: ignore[index]  # the scan walked this very path
    return make_problem(render_path(parts), value, _SHAPE_ALLOWED[found.kind], found.reason)


def _prepare(additional_config: object, ctx: RuleContext) -> dict[str, Any]:
    if additional_config is None:
        return {}
    if not isinstance(additional_config, Mapping):
        ctx.problem("<additional_config>", additional_config, "a JSON object",
                    "additional_config must be a mapping")
        return {}
    sorted_keys = sort_top_level(additional_config)
    for key, value, retired in sorted_keys.retired:
        ctx.problem(key, value, retired.allowed(), retired.message())
    for key, value, retired in sorted_keys.retired_typos:
        ctx.problem(key, value, f"remove it; {retired.name} was retired in {retired.version}",
                    f"unknown key, close to the retired key '{retired.name}'")
    for key, value in sorted_keys.misplaced:
        message, allowed = misplaced_fix(key)
        ctx.problem(key, value, allowed, message)
    for owner, keys in sorted_keys.foreign.items():
        ctx.warn(foreign_warning(owner, keys))
    return sorted_keys.ascend


def _merge_legacy(parsed: AdditionalConfig, ctx: RuleContext) -> TopLevelOptions:
    """Top-level scheduler spellings and env-var fallbacks, each with one warning."""
    values = {name: getattr(parsed, name) for name in TopLevelOptions.model_fields}
    sched_updates: dict[str, Any] = {}
    for key in LEGACY_SCHEDULER_KEYS:
        if not ctx.is_given(key):
            continue
        if ctx.is_given(f"scheduler_config.{key}"):
            ctx.warn(f"top-level '{key}' is deprecated and ignored: scheduler_config.{key} "
                     "is set")
        else:
            ctx.warn(f"top-level '{key}' is deprecated; use scheduler_config.{key}")
            if getattr(parsed, key) is not None:
                sched_updates[key] = getattr(parsed, key)
    sched = parsed.scheduler_config.model_copy(update=sched_updates)
    if sched.enable_balance_scheduling is None:
        name = "VLLM_ASCEND_BALANCE_SCHEDULING"
        if name in ctx.environ:
            ctx.warn(_fallback_note("scheduler_config.enable_balance_scheduling", name))
        sched = sched.model_copy(update={"enable_balance_scheduling": bool(ctx.env(name))})
    values["scheduler_config"] = sched
    for key, name in _ENV_FALLBACKS:
        if key is not None and not ctx.is_given(key) and name in ctx.environ:
            before = len(ctx.problems)
            value = ctx.env(name)
            if len(ctx.problems) == before:
                ctx.warn(_fallback_note(key, name))
                values[key] = value
    if ctx.is_given("enable_flashcomm1") or "VLLM_ASCEND_ENABLE_FLASHCOMM1" in ctx.environ:
        ctx.warn("FlashComm (enable_flashcomm1 / VLLM_ASCEND_ENABLE_FLASHCOMM1) is deprecated "
                 "and has no effect; use vLLM's upstream sequence-parallel configuration")
    return TopLevelOptions.model_construct(**values)


def _fallback_note(key: str, env_name: str) -> str:
    return (f"'{key}' falls back to environment variable {env_name}; this fallback is "
            f"deprecated and will be removed in the next release, set '{key}' in "
            "additional_config instead")


def resolve(
    additional_config: Mapping[str, Any] | None = None,
    facts: DeploymentFacts | None = None,
    environ: Mapping[str, str] | None = None,
) -> AscendConfig:
    """Validate ``additional_config`` against the schema and every deployment rule.

    Returns a frozen, fully derived :class:`AscendConfig`; raises :class:`AscendConfigError`
    listing every problem (key path, value given, what is allowed). ``environ`` defaults to
    ``os.environ`` and is only read.
    """
    facts, fact_problems = _check_facts(DeploymentFacts() if facts is None else facts)
    shape = _shape_problem(additional_config)
    if shape is not None:  # nothing else is looked at: the work would not be bounded
        raise AscendConfigError([*fact_problems, shape])
    env: Mapping[str, str] = os.environ if environ is None else environ
    ctx = RuleContext(facts=facts, environ=env, opts=TopLevelOptions())
    ctx.problems.extend(fact_problems)
    raw = _prepare(additional_config, ctx)
    ctx.given = frozenset(_given_paths(raw))
    parsed, schema_problems, omitted = validate_best_effort(raw)
    ctx.problems.extend(schema_problems)
    ctx.omitted += omitted
    ctx.opts = _merge_legacy(parsed, ctx)
    for rule in RULES:
        rule(ctx)
    if ctx.problems:
        raise AscendConfigError(ctx.problems, ctx.omitted)
    values = {name: getattr(ctx.opts, name) for name in TopLevelOptions.model_fields}
    try:
        cfg = AscendConfig(
            **values, **ctx.derived, soc=facts.soc,
            env_changes=tuple(ctx.env_changes), warnings=tuple(ctx.warnings),
        )
        cfg.to_json()  # the engine sends it to the workers; it must serialise
    except ValueError as exc:  # a derivation bug must still surface as our error type
        raise AscendConfigError([make_problem("<resolved>", str(exc)[:80], "a valid config",
                                              "internal derivation error")]) from exc
    return cfg
