"""Step 2b (NPU platform): decode context parallel (DCP) rules for the speculative draft model.

vLLM checks DCP against the target model only; the draft model's attention is split the same
way, so its heads and tensor-parallel size must fit DCP too. Pure: :func:`draft_problems`
returns every problem (one message each, naming the setting and what is allowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DraftFacts:
    """What the DCP rules read about speculative decoding (None fields: not applicable)."""

    # speculative_config.num_speculative_tokens_per_batch_size is set
    per_batch_size_schedule: bool = False
    # a draft model with its own attention (ngram and suffix decoding have none)
    has_model: bool = False
    use_mla: bool = False
    tensor_parallel_size: int = 1
    num_attention_heads: int = 0
    num_key_value_heads: int = 0


def draft_tensor_parallel_size(parallel_tp: int | None, draft_tp_setting: int | None,
                               target_tp: int) -> int:
    """The draft's TP: its parallel config's, else ``draft_tensor_parallel_size``, else the
    target model's."""
    for value in (parallel_tp, draft_tp_setting):
        if value:
            return int(value)
    return target_tp


def draft_of(vllm_config: Any) -> DraftFacts | None:
    """Draft facts of a VllmConfig (None without speculative decoding)."""
    spec = vllm_config.speculative_config
    if spec is None:
        return None
    model = getattr(spec, "draft_model_config", None)
    parallel = getattr(spec, "draft_parallel_config", None)
    schedule = bool(getattr(spec, "num_speculative_tokens_per_batch_size", None))
    if model is None:
        return DraftFacts(per_batch_size_schedule=schedule)
    return DraftFacts(
        per_batch_size_schedule=schedule,
        has_model=True,
        use_mla=bool(getattr(model, "use_mla", False)),
        tensor_parallel_size=draft_tensor_parallel_size(
            getattr(parallel, "tensor_parallel_size", None),
            getattr(spec, "draft_tensor_parallel_size", None),
            vllm_config.parallel_config.tensor_parallel_size,
        ),
        num_attention_heads=int(getattr(model.hf_text_config, "num_attention_heads", 0) or 0),
        num_key_value_heads=int(model.get_total_num_kv_heads()),
    )


def draft_problems(dcp: int, draft: DraftFacts | None) -> list[str]:
    """Every DCP rule the draft model breaks (nothing to check without spec decode or DCP)."""
    if draft is None or dcp <= 1:
        return []
    problems = []
    if draft.per_batch_size_schedule:
        problems.append(
            f"speculative_config.num_speculative_tokens_per_batch_size is not supported with "
            f"decode_context_parallel_size={dcp}; remove it or use DCP 1")
    # MLA keeps one latent KV head that every rank holds: nothing to split.
    if not draft.has_model or draft.use_mla:
        return problems
    tp, heads, kv_heads = (draft.tensor_parallel_size, draft.num_attention_heads,
                           draft.num_key_value_heads)
    if kv_heads <= 0:
        return [*problems, "the draft model reports no KV heads; DCP needs them"]
    if tp <= kv_heads:
        problems.append(
            f"decode_context_parallel_size={dcp} needs the draft model's tensor parallel size "
            f"({tp}) to be greater than its {kv_heads} KV heads; raise "
            f"draft_tensor_parallel_size or use DCP 1")
    elif dcp > tp // kv_heads:
        problems.append(
            f"decode_context_parallel_size={dcp} exceeds draft TP {tp} // {kv_heads} KV heads "
            f"= {tp // kv_heads}; allowed: at most {tp // kv_heads}")
    if (heads // kv_heads) % dcp:
        problems.append(
            f"the draft model's query heads per KV head ({heads} // {kv_heads} = "
            f"{heads // kv_heads}) must be divisible by decode_context_parallel_size={dcp}")
    return problems
