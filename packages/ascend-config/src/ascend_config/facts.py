"""Deployment facts: what vLLM knows about the deployment, as plain values (stdlib only).

``vllm-ascend`` fills these from ``VllmConfig``; the CLI loads them from a JSON file. Every field
has a default, so a dense single-device deployment on an A2 is ``DeploymentFacts()``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_config.errors import short_repr
from ascend_config.inputs import (
    InputError,
    parse_json_text,
    read_text_file,
    scan,
    show_path,
    text_problem,
)
from ascend_config.limits import (
    MAX_DEPTH,
    MAX_FACT_TEXT_CHARS,
    MAX_FACTS_BYTES,
    MAX_FACTS_VALUES,
    MODEL_SIZE_RANGE,
    PARALLEL_SIZE_RANGE,
    SCALING_FACTOR_RANGE,
    TOKEN_COUNT_RANGE,
)

SOCS = ("A2", "A3", "A5", "310P", "cpu")
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


class FactsError(ValueError):
    """Deployment facts that cannot be loaded (bad file, unknown field, wrong type)."""


def _frozen_mapping(value: Any) -> Any:
    # Wrong types are left as given so that check_fields can report them.
    return types.MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


@dataclass(frozen=True)
class DeploymentFacts:
    """Facts about the model and the deployment that the Ascend rules depend on."""

    soc: str = "A2"
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    enable_expert_parallel: bool = False
    model_type: str = ""
    architectures: tuple[str, ...] = ()
    is_moe: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    routed_scaling_factor: float = 1.0
    use_mla: bool = False
    index_topk: int | None = None
    has_compress_ratios: bool = False
    num_attention_heads: int = 0
    num_key_value_heads: int = 0
    head_dim: int = 0
    hidden_size: int = 0
    dtype: str = "bfloat16"
    quantization: str | None = None
    quant_description: Mapping[str, Any] | None = None
    kv_role: str | None = None
    kv_connector: str | None = None
    kv_connector_extra_config: Mapping[str, Any] = field(default_factory=dict)
    speculative_method: str | None = None
    num_speculative_tokens: int = 0
    enforce_eager: bool = False
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 128
    use_model_runner_v2: bool = False
    megamoe_available: bool = False
    # vLLM's sequence parallelism for MoE (ParallelConfig.use_sequence_parallel_moe).
    sequence_parallel: bool = False
    # vLLM's scheduling policy (SchedulerConfig.policy: "fcfs" or "priority").
    scheduler_policy: str = "fcfs"
    # How many nodes one data-parallel replica spans (ParallelConfig.nnodes_within_dp).
    nnodes_within_dp: int = 1
    # vLLM's own expert-parallel load balancer (--enable-eplb).
    enable_eplb: bool = False

    def __post_init__(self) -> None:
        # Mappings are wrapped read-only so a shared facts object cannot be changed behind a
        # resolved config's back; lists given for architectures become tuples.
        if isinstance(self.architectures, list):
            object.__setattr__(self, "architectures", tuple(self.architectures))
        object.__setattr__(self, "quant_description", _frozen_mapping(self.quant_description))
        object.__setattr__(self, "kv_connector_extra_config",
                           _frozen_mapping(self.kv_connector_extra_config))

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True, default=str))

    @property
    def uses_sfa(self) -> bool:
        """SFA sparse attention: the model has ``index_topk`` and no ``compress_ratios``."""
        return self.index_topk is not None and not self.has_compress_ratios

    @property
    def is_deepseek_mla(self) -> bool:
        """A DeepSeek-style MLA model (MLA attention)."""
        return self.use_mla

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (mappings copied, tuples as lists)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DeploymentFacts:
        """Build from a mapping; unknown fields, wrong types and values out of range raise
        :class:`FactsError` (one line)."""
        if not isinstance(data, Mapping):
            raise FactsError(f"deployment facts must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = [short_repr(k) for k in data if k not in known]
        if unknown:
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            raise FactsError(f"unknown deployment fact(s) {', '.join(sorted(unknown)[:10])}{more}; "
                             f"known: {', '.join(sorted(known))}")
        problems = [f"{name}: got {short_repr(v)}, expected {want}" for name, v in data.items()
                    if (want := field_problem(name, v))]
        if problems:
            raise FactsError("; ".join(problems))
        return cls(**data)  # __post_init__ turns an architectures list into a tuple

    @classmethod
    def from_json_file(cls, path: str | Path) -> DeploymentFacts:
        """Load facts from a JSON file (an object with any subset of the fields).

        The file must be a regular file of at most ``MAX_FACTS_BYTES`` bytes of UTF-8 JSON
        nested at most ``MAX_DEPTH`` levels (:mod:`ascend_config.limits`).
        """
        try:
            text = read_text_file(path, MAX_FACTS_BYTES, "deployment facts file")
            data = parse_json_text(text, f"deployment facts file {show_path(path)}")
        except InputError as exc:
            raise FactsError(str(exc)) from None
        return cls.from_mapping(data)


_PARALLEL_FIELDS = {
    "tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
    "prefill_context_parallel_size", "decode_context_parallel_size", "nnodes_within_dp",
}
_MODEL_FIELDS = {
    "num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_size",
}
_TOKEN_FIELDS = {"num_speculative_tokens", "max_num_seqs", "max_num_batched_tokens", "block_size"}
_BOOL_FIELDS = {
    "enable_expert_parallel", "is_moe", "use_mla", "has_compress_ratios", "enforce_eager",
    "use_model_runner_v2", "megamoe_available", "sequence_parallel", "enable_eplb",
}
_OPT_STR_FIELDS = {"quantization", "kv_connector", "speculative_method"}
_STR_FIELDS = {"model_type", "dtype", "scheduler_policy"}
_MAPPING_FIELDS = {"quant_description", "kv_connector_extra_config"}


def check_fields(facts: DeploymentFacts) -> list[tuple[str, Any, str]]:
    """(field, value, what is allowed) for every field of ``facts`` that does not fit."""
    out = []
    for f in dataclasses.fields(facts):
        value = getattr(facts, f.name)
        want = field_problem(f.name, value)
        if want:
            out.append((f.name, value, want))
    return out


def _int_in(value: Any, bounds: tuple[int, int]) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and bounds[0] <= value <= bounds[1])


def _text_ok(value: Any) -> bool:
    return isinstance(value, str) and text_problem(value, max_chars=MAX_FACT_TEXT_CHARS) is None


def _json_problem(value: Any) -> str | None:
    found = scan(value, max_depth=MAX_DEPTH, max_values=MAX_FACTS_VALUES, json_only=True)
    return None if found is None else found.text()


def field_problem(name: str, value: Any) -> str | None:
    """What field ``name`` allows when ``value`` does not fit, else None.

    Numbers are range-checked (:mod:`ascend_config.limits`); strings must be valid text of at
    most ``MAX_FACT_TEXT_CHARS`` characters; mappings must be plain JSON (finite numbers).
    """
    text = f"valid text of at most {MAX_FACT_TEXT_CHARS} characters"
    if name in _PARALLEL_FIELDS:
        lo, hi = PARALLEL_SIZE_RANGE
        ok, want = _int_in(value, PARALLEL_SIZE_RANGE), f"an integer from {lo} to {hi}"
    elif name in _MODEL_FIELDS:
        lo, hi = MODEL_SIZE_RANGE
        ok, want = _int_in(value, MODEL_SIZE_RANGE), f"an integer from {lo} to {hi}"
    elif name in _TOKEN_FIELDS:
        lo, hi = TOKEN_COUNT_RANGE
        ok, want = _int_in(value, TOKEN_COUNT_RANGE), f"an integer from {lo} to {hi}"
    elif name in _BOOL_FIELDS:
        ok, want = isinstance(value, bool), "true or false"
    elif name in _OPT_STR_FIELDS:
        ok, want = value is None or _text_ok(value), f"null or {text}"
    elif name == "soc":
        ok, want = isinstance(value, str) and value in SOCS, f"one of {list(SOCS)}"
    elif name == "kv_role":
        ok = value is None or (isinstance(value, str) and value in KV_ROLES)
        want = f"null or one of {list(KV_ROLES)}"
    elif name in _STR_FIELDS:
        ok, want = _text_ok(value), text
    elif name == "architectures":
        ok = (isinstance(value, (list, tuple)) and len(value) <= MAX_FACTS_VALUES
              and all(_text_ok(a) for a in value))
        want = f"a list of strings ({text})"
    elif name == "index_topk":
        lo, hi = MODEL_SIZE_RANGE
        ok = value is None or _int_in(value, (1, hi))
        want = f"null or an integer from 1 to {hi}"
    elif name == "routed_scaling_factor":
        lo_f, hi_f = SCALING_FACTOR_RANGE
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value) and lo_f <= value <= hi_f)
        want = f"a finite number from {lo_f:g} to {hi_f:g}"
    else:  # quant_description (may be null), kv_connector_extra_config
        nullable = name == "quant_description"
        if value is None and nullable:
            return None
        want = ("null or " if nullable else "") + (
            f"a JSON object (finite numbers, at most {MAX_DEPTH} levels, "
            f"{MAX_FACTS_VALUES} keys and list items)")
        if not isinstance(value, Mapping):
            return want
        why = _json_problem(value)
        return None if why is None else f"{want}; {why}"
    return None if ok else want
