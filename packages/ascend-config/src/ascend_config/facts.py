"""Deployment facts: what vLLM knows about the deployment, as plain values (stdlib only).

``vllm-ascend`` fills these from ``VllmConfig``; the CLI loads them from a JSON file. Every field
has a default, so a dense single-device deployment on an A2 is ``DeploymentFacts()``.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        """Build from a mapping; unknown fields and wrong types raise :class:`FactsError`."""
        if not isinstance(data, Mapping):
            raise FactsError(f"deployment facts must be a JSON object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise FactsError(f"unknown deployment fact(s) {unknown}; known: {sorted(known)}")
        problems = [f"{name}: got {v!r:.60}, expected {want}" for name, v in data.items()
                    if (want := field_problem(name, v))]
        if problems:
            raise FactsError("; ".join(problems))
        kwargs = dict(data)
        if "architectures" in kwargs:
            kwargs["architectures"] = tuple(kwargs["architectures"])
        return cls(**kwargs)

    @classmethod
    def from_json_file(cls, path: str | Path) -> DeploymentFacts:
        """Load facts from a JSON file (an object with any subset of the fields)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FactsError(f"cannot read deployment facts from {path}: {exc}") from None
        return cls.from_mapping(data)


_INT_FIELDS = {
    "tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
    "prefill_context_parallel_size", "decode_context_parallel_size", "num_experts",
    "num_experts_per_tok", "moe_intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_size", "num_speculative_tokens",
    "max_num_seqs", "max_num_batched_tokens", "block_size", "nnodes_within_dp",
}
_BOOL_FIELDS = {
    "enable_expert_parallel", "is_moe", "use_mla", "has_compress_ratios", "enforce_eager",
    "use_model_runner_v2", "megamoe_available", "sequence_parallel", "enable_eplb",
}
_OPT_STR_FIELDS = {"quantization", "kv_connector", "speculative_method"}


def check_fields(facts: DeploymentFacts) -> list[tuple[str, Any, str]]:
    """(field, value, what is allowed) for every field of ``facts`` with a wrong type."""
    out = []
    for f in dataclasses.fields(facts):
        value = getattr(facts, f.name)
        want = field_problem(f.name, value)
        if want:
            out.append((f.name, value, want))
    return out


def field_problem(name: str, value: Any) -> str | None:
    """What field ``name`` allows when ``value`` does not fit, else None."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if name in _INT_FIELDS:
        ok = is_int and value >= 0
        want = "an integer >= 0"
    elif name in _BOOL_FIELDS:
        ok, want = isinstance(value, bool), "true or false"
    elif name in _OPT_STR_FIELDS:
        ok, want = value is None or isinstance(value, str), "a string or null"
    elif name == "soc":
        ok, want = value in SOCS, f"one of {list(SOCS)}"
    elif name == "kv_role":
        ok, want = value is None or value in KV_ROLES, f"null or one of {list(KV_ROLES)}"
    elif name in ("model_type", "dtype", "scheduler_policy"):
        ok, want = isinstance(value, str), "a string"
    elif name == "architectures":
        ok = isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value)
        want = "a list of strings"
    elif name == "index_topk":
        ok, want = value is None or (is_int and value > 0), "null or an integer > 0"
    elif name == "routed_scaling_factor":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        want = "a number"
    elif name == "quant_description":
        ok, want = value is None or isinstance(value, Mapping), "an object or null"
    else:  # kv_connector_extra_config
        ok, want = isinstance(value, Mapping), "an object"
    return None if ok else want
