"""The Ascend fields of vLLM's forward context (model runners v1 and v2, NPU and host CPU)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_ascend.distributed.moe_comm import (
    Mc2Budget,
    MoECommInputs,
    MoECommType,
    mc2_tokens_capacity,
    padded_to_tp,
    select_moe_comm_method,
)
from vllm_ascend.distributed.moe_dispatch import host_cpu_comm_methods
from vllm_ascend.distributed.npu_moe import npu_comm_methods

if TYPE_CHECKING:
    from ascend_config import DeploymentFacts

# The names ExtraForwardContext lets callers read and write (those of the existing
# plugin's ``_EXTRA_CTX`` proxy).
EXTRA_FIELDS = frozenset({
    "capturing", "moe_comm_type", "moe_comm_method", "mmrs_fusion", "num_tokens",
    "padded_length", "num_tokens_across_dp", "mc2_mask", "is_draft_model",
    "is_draft_model_prefill", "prefetch_mlp_gate_up_proj", "prefetch_mlp_down_proj",
    "model_instance", "layer_idx", "max_tokens_across_dp", "max_tokens_across_pcp",
    "num_accept_tokens", "in_profile_run", "padded_num_tokens", "sinks",
    "eplb_heat_collection_status", "draft_attn_metadatas", "is_first_layer",
})
MMRS_MAX_TP = 8  # matmul-reduce-scatter fusion limit

logger = logging.getLogger(__name__)

_mrv2_in_profile_run: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "vllm_ascend_mrv2_in_profile_run", default=False
)


@contextlib.contextmanager
def override_mrv2_in_profile_run(enabled: bool) -> Iterator[None]:
    """Mark the enclosed MRV2 forward passes as profile runs."""
    token = _mrv2_in_profile_run.set(enabled)
    try:
        yield
    finally:
        _mrv2_in_profile_run.reset(token)


def get_mrv2_in_profile_run() -> bool:
    return _mrv2_in_profile_run.get()


@dataclass
class AscendForwardState:
    """Per-engine inputs of the Ascend forward fields: MoE decision inputs and MC2 budget."""

    moe_inputs: MoECommInputs
    budget: Mc2Budget
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    comm_methods: Mapping[MoECommType, Any] = field(default_factory=dict)
    _logged_kinds: set[str] = field(default_factory=set, repr=False)

    def note_method(self, num_tokens: int, comm_type: MoECommType | None) -> None:
        """Log the MoE method of a decode-sized and of a larger (prefill) forward, once each."""
        kind = "decode" if num_tokens <= self.moe_inputs.decode_tokens else "prefill"
        if kind in self._logged_kinds or comm_type is None:
            return
        self._logged_kinds.add(kind)
        logger.info("MoE communication for %s forwards (%d tokens, SoC %s): %s", kind,
                    num_tokens, self.moe_inputs.soc, comm_type.name)

    @classmethod
    def from_vllm_config(
        cls, vllm_config: Any, facts: DeploymentFacts, ascend_config: Any = None, *,
        device: Any = "cpu",
        max_num_reqs: int | None = None, uniform_decode_query_len: int = 1,
    ) -> AscendForwardState:
        soc = facts.soc
        par = vllm_config.parallel_config
        fused = int(getattr(ascend_config, "enable_fused_mc2", 0) or 0)
        capacity = mc2_tokens_capacity(
            tensor_parallel_size=facts.tensor_parallel_size,
            max_num_reqs=max_num_reqs or facts.max_num_seqs,
            uniform_decode_query_len=uniform_decode_query_len,
            max_num_batched_tokens=facts.max_num_batched_tokens,
            enable_prefill_mc2=bool(getattr(ascend_config, "enable_prefill_mc2", False)),
            max_capture_size=vllm_config.compilation_config.max_cudagraph_capture_size,
            enable_fused_mc2=fused, megamoe_available=facts.megamoe_available,
        )
        world = par.world_size_across_dp
        inputs = MoECommInputs(
            soc=soc, is_moe=facts.is_moe, enable_expert_parallel=facts.enable_expert_parallel,
            ep_group_size=world // max(facts.pipeline_parallel_size, 1),
            has_lora=vllm_config.lora_config is not None, world_size_across_dp=world,
            pipeline_parallel_size=facts.pipeline_parallel_size, num_experts=facts.num_experts,
            num_experts_per_tok=facts.num_experts_per_tok, enable_fused_mc2=fused,
            megamoe_available=facts.megamoe_available, mc2_capacity=capacity,
            # a decode-only forward: every sequence with its draft tokens
            decode_tokens=(max_num_reqs or facts.max_num_seqs)
            * max(uniform_decode_query_len, 1 + facts.num_speculative_tokens),
        )
        mask_len = facts.max_num_batched_tokens if facts.is_moe else None
        methods: Mapping[MoECommType, Any] = {}
        if soc == "cpu" and facts.is_moe:
            methods = host_cpu_comm_methods()
        elif facts.is_moe:
            methods = npu_comm_methods()
        return cls(inputs, Mc2Budget(capacity, mask_len, device),
                   facts.tensor_parallel_size, facts.data_parallel_size, methods)

    def fields(
        self, num_tokens: int | None, *, num_tokens_across_dp: Any = None,
        num_actual_tokens: int | None = None, in_profile_run: bool = False,
        model_instance: Any = None, is_draft_model: bool = False, max_tokens_across_pcp: int = 0,
        draft_attn_metadatas: Any = None, has_sinks: bool = False,
        eplb_heat_collection_status: bool = False, mrv2: bool = False,
    ) -> dict[str, Any]:
        """The Ascend fields for one forward pass."""
        max_dp = num_tokens
        if num_tokens_across_dp is not None and self.data_parallel_size > 1:
            max_dp = int(max(int(n) for n in num_tokens_across_dp))
        padded = padded_to_tp(max_dp, self.tensor_parallel_size)
        comm_type = select_moe_comm_method(max_dp, self.moe_inputs)
        out: dict[str, Any] = {
            "moe_comm_type": comm_type,
            # The executor of that method: the host-CPU platform's own (moe_dispatch); on an
            # NPU, None here and supplied by a runtime package's MoE layer.
            "moe_comm_method": self.comm_methods.get(comm_type) if comm_type is not None
            else None,
            "capturing": False,
            "mmrs_fusion": (not self.moe_inputs.is_moe) if mrv2
            else self.tensor_parallel_size <= MMRS_MAX_TP,
            "num_tokens": num_tokens,
            "max_tokens_across_dp": max_dp,
            "is_draft_model": is_draft_model,
            "is_draft_model_prefill": False,
            "in_profile_run": get_mrv2_in_profile_run() if mrv2 else in_profile_run,
            "padded_num_tokens": padded,
            "sinks": has_sinks,
            "mc2_mask": None,
        }
        if num_tokens is not None and padded is not None:
            actual = num_actual_tokens if num_actual_tokens is not None else num_tokens
            out["mc2_mask"] = self.budget.mask_for(padded, actual)
        if mrv2:
            if self.data_parallel_size > 1:
                out["padded_length"] = padded
            return out
        layer_idx = getattr(getattr(model_instance, "model", None), "start_layer", None)
        out.update(
            draft_attn_metadatas=draft_attn_metadatas, is_first_layer=True, layer_idx=layer_idx,
            prefetch_mlp_gate_up_proj=False, prefetch_mlp_down_proj=False,
            model_instance=model_instance, max_tokens_across_pcp=max_tokens_across_pcp,
            padded_length=padded, eplb_heat_collection_status=eplb_heat_collection_status,
        )
        return out


@contextlib.contextmanager
def set_ascend_forward_context(
    attn_metadata: Any, vllm_config: Any, num_tokens: int = 0,
    num_tokens_across_dp: Any = None, in_profile_run: bool = False,
    num_actual_tokens: int | None = None, aclgraph_runtime_mode: Any = None,
    batch_descriptor: Any = None, model_instance: Any = None, is_draft_model: bool = False,
    skip_compiled: bool = False, max_tokens_across_pcp: int = 0,
    draft_attn_metadatas: Any = None, has_sinks: bool = False,
    eplb_heat_collection_status: bool = False, *, state: AscendForwardState,
) -> Iterator[Any]:
    """vLLM's ``set_forward_context`` plus the Ascend fields (model runner v1)."""
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import get_forward_context, set_forward_context

    mode = CUDAGraphMode.NONE if aclgraph_runtime_mode is None else aclgraph_runtime_mode
    with set_forward_context(
        attn_metadata, vllm_config, num_tokens=num_tokens,
        num_tokens_across_dp=num_tokens_across_dp, cudagraph_runtime_mode=mode,
        batch_descriptor=batch_descriptor, skip_compiled=skip_compiled,
    ):
        ctx = get_forward_context()
        for name, value in state.fields(
            num_tokens, num_tokens_across_dp=num_tokens_across_dp,
            num_actual_tokens=num_actual_tokens, in_profile_run=in_profile_run,
            model_instance=model_instance, is_draft_model=is_draft_model,
            max_tokens_across_pcp=max_tokens_across_pcp,
            draft_attn_metadatas=draft_attn_metadatas, has_sinks=has_sinks,
            eplb_heat_collection_status=eplb_heat_collection_status,
        ).items():
            setattr(ctx, name, value)
        yield ctx


class ExtraForwardContext:
    """Ascend fields of the current forward context (missing: None; unknown: AttributeError)."""
    # Model runner v2 keeps them in ``forward_context.additional_kwargs``; v1 as attributes.

    def __init__(self, use_mrv2: bool, get_context: Any = None) -> None:
        object.__setattr__(self, "_mrv2", use_mrv2)
        object.__setattr__(self, "_get", get_context)

    def _ctx(self) -> Any:
        get = self._get
        if get is None:
            from vllm.forward_context import get_forward_context as get
        return get()

    def __getattr__(self, name: str) -> Any:
        if name not in EXTRA_FIELDS:
            raise AttributeError(f"{name!r} is not an Ascend forward-context field")
        ctx = self._ctx()
        if self._mrv2:
            return ctx.additional_kwargs.get(name)
        return getattr(ctx, name, None)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in EXTRA_FIELDS:
            raise AttributeError(f"{name!r} is not an Ascend forward-context field")
        ctx = self._ctx()
        if self._mrv2:
            ctx.additional_kwargs[name] = value
        else:
            setattr(ctx, name, value)


def mrv2_additional_context(
    state: AscendForwardState, *, vllm_config: Any, num_tokens: int | None = 0,
    num_tokens_across_dp: Any = None,
    **_unused: Any,
) -> dict[str, Any]:
    """``Platform.set_additional_forward_context`` for model runner v2 ({} for v1)."""
    if not getattr(vllm_config, "use_v2_model_runner", False):
        return {}
    return state.fields(
        num_tokens, num_tokens_across_dp=num_tokens_across_dp, mrv2=True
    )


def npu_additional_context(
    state: AscendForwardState, *, vllm_config: Any, num_tokens: int | None = 0,
    num_tokens_across_dp: Any = None,
    **_unused: Any,
) -> dict[str, Any]:
    """``Platform.set_additional_forward_context`` of the NPU platform: the fields for model
    runner v2, and for v1 those of an MoE model (its layers read the communication method
    from them; v1's dense forwards need none). The method chosen for a decode-sized and for a
    larger forward is logged once per engine."""
    if not getattr(vllm_config, "use_v2_model_runner", False) and not state.moe_inputs.is_moe:
        return {}
    fields = state.fields(num_tokens, num_tokens_across_dp=num_tokens_across_dp, mrv2=True)
    if state.moe_inputs.is_moe and num_tokens:
        state.note_method(num_tokens, fields["moe_comm_type"])
    return fields


def host_cpu_additional_context(
    state: AscendForwardState, *, vllm_config: Any, num_tokens: int | None = 0,
    num_tokens_across_dp: Any = None,
    **_unused: Any,
) -> dict[str, Any]:
    """``Platform.set_additional_forward_context`` of the host-CPU platform (either runner)."""
    # vLLM's CPU runners enter the forward context themselves, so the Ascend fields travel in
    # ``forward_context.additional_kwargs``.
    return state.fields(
        num_tokens, num_tokens_across_dp=num_tokens_across_dp, mrv2=True
    )


def current_moe_comm() -> tuple[MoECommType | None, Any]:
    """``(moe_comm_type, moe_comm_method)`` of the current forward; ``(None, None)`` when unset."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None, None
    ctx = get_forward_context()
    extra = ctx.additional_kwargs
    if "moe_comm_type" in extra:
        return extra["moe_comm_type"], extra.get("moe_comm_method")
    return getattr(ctx, "moe_comm_type", None), getattr(ctx, "moe_comm_method", None)
