"""Who owns each top-level key of ``additional_config``: Ascend, retired, or another component.

``additional_config`` is shared. vLLM itself stores some of its own options there, and other
plugins loaded next to this one read their own keys from it. The rule (README "Keys owned by
other components"), applied to every top-level key the Ascend schema does not know:

1. A retired Ascend key, or a key within typo distance of one: an error naming the release
   that retired it (never a did-you-mean to an unrelated key).
2. A key vLLM itself puts into or reads from ``additional_config`` (``VLLM_KEYS``): passed
   through, owner vLLM.
3. The name of one of vLLM's own engine sections (``VLLM_ENGINE_SECTIONS``, e.g.
   ``kv_transfer_config``): an error, since vLLM never reads it from ``additional_config``;
   the fix is to pass it to vLLM itself. ``additional_config`` nested in itself says to move
   its keys up one level.
4. A key that the did-you-mean finds close to an Ascend key: an error with that suggestion
   (a typo of ours, even if it happens to hold an object).
5. A namespace of another component: an object value (``"other_plugin": {...}``) or a
   namespaced name (``"other_plugin.level"``, ``"other_plugin:level"``,
   ``"other_plugin/level"``) whose namespace is not an Ascend key: passed through, owner
   the namespace.
6. Anything else (a bare scalar key far from every Ascend key): an unknown-key error, since
   nothing says who would read it.

Passed-through keys give one warning per owner and are never validated or kept in the
resolved config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_config.limits import MAX_REPORTED_PROBLEMS
from ascend_config.schema.introspect import closest, suggest
from ascend_config.schema.retired import RETIRED, RetiredKey
from ascend_config.schema.top import AdditionalConfig

VLLM_OWNER = "vLLM"

# What vLLM itself keeps in additional_config (vllm/engine/arg_utils.py copies the first three
# from its CLI flags; the KDA models read the last two): never an Ascend option.
VLLM_KEYS: Mapping[str, str] = {
    "gdn_prefill_backend": "set by vLLM's --gdn-prefill-backend",
    "kda_prefill_backend": "set by vLLM's --kda-prefill-backend",
    "kda_decode_backend": "set by vLLM's --kda-decode-backend",
    "kda_prefill_checkpoint": "read by vLLM's KDA models",
    "kda_spec_decode_backend": "read by vLLM's KDA models",
}

# The sections of vLLM's VllmConfig (vllm/config/vllm.py) other than the two names Ascend also
# uses (scheduler_config is an Ascend section; additional_config is the container itself),
# with the vLLM command-line flag that takes the section whole, where there is one
# (vllm/engine/arg_utils.py).
VLLM_ENGINE_SECTIONS: Mapping[str, str | None] = {
    **dict.fromkeys((
        "model_config", "cache_config", "parallel_config", "device_config", "load_config",
        "offload_config", "mamba_config", "lora_config", "observability_config",
        "quant_config"), None),
    **{name: "--" + name.replace("_", "-") for name in (
        "attention_config", "aux_output_config", "compilation_config", "diffusion_config",
        "ec_manager_config", "ec_transfer_config", "engram_config", "kernel_config",
        "kv_events_config", "kv_transfer_config", "logging_config", "profiler_config",
        "reasoning_config", "speculative_config", "structured_outputs_config",
        "watermark_config", "weight_transfer_config")},
}

_NAMESPACE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)[.:/][^.:/]")
# Similarity (difflib ratio) from which a key counts as a misspelt retired key.
RETIRED_TYPO_CUTOFF = 0.85


@dataclass
class TopLevelSort:
    """The top-level keys of one ``additional_config``, sorted by owner."""

    ascend: dict[Any, Any] = field(default_factory=dict)
    retired: list[tuple[str, Any, RetiredKey]] = field(default_factory=list)
    retired_typos: list[tuple[str, Any, RetiredKey]] = field(default_factory=list)
    misplaced: list[tuple[str, Any]] = field(default_factory=list)
    foreign: dict[str, list[str]] = field(default_factory=dict)


def namespace_of(key: str, value: object) -> str | None:
    """The component namespace ``key`` stands for (rule 5), else None.

    Callers check first that ``key`` is not close to an Ascend key."""
    found = _NAMESPACE.match(key)
    if found is not None:
        space = found.group(1)
        if space in AdditionalConfig.model_fields or suggest(space, AdditionalConfig):
            return None  # an Ascend section written as a flat path: the schema judges it
        return space
    return key if isinstance(value, Mapping) else None


def owner_of(key: str, value: object) -> str | None:
    """Who other than Ascend owns the unknown top-level ``key`` (rules 2, 4 and 5), else None."""
    if key in VLLM_KEYS:
        return VLLM_OWNER
    if not isinstance(value, Mapping) and _NAMESPACE.match(key) is None:
        return None  # no namespace shape: the similarity search below would not change that
    if suggest(key, AdditionalConfig):
        return None
    return namespace_of(key, value)


def sort_top_level(raw: Mapping[Any, Any]) -> TopLevelSort:
    """Sort every top-level key of ``raw`` by owner (see the module docstring).

    Only the first ``MAX_REPORTED_PROBLEMS`` unknown keys get the similarity searches (typo of
    a retired key, namespace or typo of ours); any further unknown key is left to the schema as
    unknown, so a config with 50,000 stray keys costs one pass."""
    out = TopLevelSort()
    fields = AdditionalConfig.model_fields
    searched = 0
    for key, value in raw.items():
        if not isinstance(key, str) or key in fields:
            out.ascend[key] = value
        elif key in RETIRED:
            out.retired.append((key, value, RETIRED[key]))
        elif key in VLLM_ENGINE_SECTIONS or key == "additional_config":
            out.misplaced.append((key, value))
        elif key in VLLM_KEYS:
            out.foreign.setdefault(VLLM_OWNER, []).append(key)
        elif searched >= MAX_REPORTED_PROBLEMS or len(key) > 100:
            out.ascend[key] = value
        else:
            searched += 1
            near = closest(key.lower(), RETIRED, RETIRED_TYPO_CUTOFF)
            owner = None if near else owner_of(key, value)
            if near is not None:
                out.retired_typos.append((key, value, RETIRED[near[1]]))
            elif owner is None:
                out.ascend[key] = value  # unknown: the schema reports it with its did-you-mean
            else:
                out.foreign.setdefault(owner, []).append(key)
    return out


def foreign_warning(owner: str, keys: list[str]) -> str:
    """The one warning for every key of ``owner``."""
    names = ", ".join(f"'{k}'" for k in keys[:5])
    if len(keys) > 5:
        names += f" and {len(keys) - 5} more"
    plural = "s" if len(keys) > 1 else ""
    if owner == VLLM_OWNER:
        return (f"additional_config key{plural} {names} belong{'' if plural else 's'} to vLLM, "
                "not to the Ascend plugin: left to vLLM, not checked here")
    return (f"additional_config key{plural} {names}: not an Ascend option, treated as "
            f"belonging to another component ('{owner}'); passed through, not checked here")


def misplaced_fix(key: str) -> tuple[str, str]:
    """(message, allowed) for a vLLM engine section given inside ``additional_config``."""
    if key == "additional_config":
        return ("additional_config nested inside additional_config",
                "move its keys up one level")
    flag = VLLM_ENGINE_SECTIONS.get(key)
    how = f"{flag} or LLM({key}=...)" if flag else "its own engine arguments"
    return (f"'{key}' is a vLLM engine option that vLLM never reads from additional_config",
            f"pass it to vLLM itself ({how})")
