"""The Ascend MoE CustomOp: vLLM's router and runner with the expert step as the opaque op
``vllm_ascend::moe_routed_experts`` running the forward's EP communication method.
"""
# README "Mixture of experts on the host-CPU platform" describes the design.

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import torch
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)

from vllm_ascend.base.forward_context import current_moe_comm
from vllm_ascend.distributed.moe_comm import MoECommType
from vllm_ascend.distributed.moe_dispatch import AllGatherDispatch, replicated_share
from vllm_ascend.distributed.moe_experts import (
    ACTIVATIONS,
    ExpertPlacement,
    ExpertWeights,
)
from vllm_ascend.distributed.npu_moe import NpuAllGather, NpuExperts, npu_route

logger = logging.getLogger(__name__)

OP_NAMESPACE = "vllm_ascend"
OP_NAME = "moe_routed_experts"
OP_SCHEMA = "(Tensor x, Tensor topk_weights, Tensor topk_ids, str layer_name) -> Tensor"


def register_moe_op() -> bool:
    """Define ``vllm_ascend::moe_routed_experts`` once per process; True when defined now."""
    if hasattr(getattr(torch.ops, OP_NAMESPACE), OP_NAME):
        return False
    qualname = f"{OP_NAMESPACE}::{OP_NAME}"
    torch.library.define(qualname, OP_SCHEMA)
    torch.library.impl(qualname, "CompositeExplicitAutograd", _moe_routed_experts)
    torch.library.register_fake(qualname, _moe_routed_experts_fake)
    return True


def _moe_routed_experts(
    x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, layer_name: str
) -> torch.Tensor:
    from vllm.forward_context import get_forward_context

    runner = get_forward_context().no_compile_layers.get(layer_name)
    layer = getattr(runner, "routed_experts", None)
    method = getattr(layer, "quant_method", None)
    if not isinstance(method, AscendUnquantizedFusedMoEMethod):
        raise RuntimeError(
            f"no Ascend MoE layer named {layer_name!r} in the current forward context"
        )
    return method.run(layer, x, topk_weights, topk_ids)


def _moe_routed_experts_fake(
    x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, layer_name: str
) -> torch.Tensor:
    return torch.empty_like(x)


def unsupported_reason(layer: Any) -> str | None:
    """Why the plain-torch experts cannot run ``layer`` (None when they can)."""
    activation = getattr(layer.activation, "value", str(layer.activation))
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} (supported: {', '.join(ACTIVATIONS)})"
    if not layer.moe_config.is_act_and_mul:
        return "a non-gated expert MLP"
    for name in ("swiglu_limit", "swiglu_alpha", "swiglu_beta"):
        if getattr(layer, name, None) is not None:
            return f"{name}={getattr(layer, name)}"
    return None


def plain_torch_supported(layer: Any) -> bool:
    """Whether plain torch runs ``layer``'s experts (with EP: else a ValueError naming why)."""
    reason = unsupported_reason(layer)
    if reason is None:
        return True
    parallel = layer.moe_config.moe_parallel_config
    if parallel.use_ep and parallel.ep_size > 1:
        raise ValueError(
            f"{layer.layer_name}: expert parallelism on the host CPU needs the plain-torch"
            f" experts, which do not support {reason}"
        )
    logger.info("%s: %s; vLLM's CPU MoE kernel runs it", layer.layer_name, reason)
    return False


def placement_of(layer: Any) -> ExpertPlacement | None:
    """Where the layer's experts live in its EP group (vLLM's ``determine_expert_map``, checked
    against the layer's ``expert_map``); None without expert parallelism."""
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    parallel = layer.moe_config.moe_parallel_config
    if not parallel.use_ep or parallel.ep_size == 1:
        return None
    maps = [
        determine_expert_map(parallel.ep_size, rank, layer.global_num_experts,
                             layer.expert_placement_strategy)[1]
        for rank in range(parallel.ep_size)
    ]
    mine = layer.expert_map
    if mine is None or not torch.equal(maps[parallel.ep_rank].to(mine.dtype), mine.cpu()):
        raise RuntimeError(
            f"{layer.layer_name}: the expert map of EP rank {parallel.ep_rank} differs from"
            " vLLM's placement (EPLB or a custom placement is not supported on the host CPU)"
        )
    return ExpertPlacement.from_expert_maps([m for m in maps if m is not None])


class AscendUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    """Unquantized MoE experts with the forward's EP communication (host CPU and NPU)."""

    _on_npu = False  # set per instance in __init__ (read before it by vLLM's base class, if ever)

    def __init__(self, moe: Any) -> None:
        super().__init__(moe)
        self.comm_counts: Counter[tuple[str, int]] = Counter()
        self._placement: ExpertPlacement | None = None
        self._npu_experts: NpuExperts | None = None
        # A plain bool (read while Dynamo traces the runner): the CustomOp's dispatch is fixed
        # at construction.
        self._on_npu = self.runs_npu_path
        if self._on_npu:
            # routes with torch_npu's gating kernel itself (vLLM's fused top-k router calls
            # CUDA's topk_softmax), so vLLM must hand it the logits: a monolithic method. The
            # host class keeps vLLM's property untouched (Dynamo traces it on the host).
            self.__class__ = NpuMonolithicFusedMoEMethod
        self._use_vllm_kernel = not self.runs_ascend_path
        if self.runs_ascend_path:
            register_moe_op()

    def apply_monolithic(self, layer: Any, x: torch.Tensor, router_logits: torch.Tensor,
                         input_ids: torch.Tensor | None = None) -> Any:
        if not self._on_npu:
            return super().apply_monolithic(layer, x, router_logits, input_ids)
        topk_weights, topk_ids = npu_route(
            router_logits, layer.top_k, renormalize=bool(layer.renormalize),
            scoring_func=layer.scoring_func, routed_scaling_factor=layer.routed_scaling_factor,
            bias=layer.e_score_correction_bias,
            num_expert_group=layer.num_expert_group if layer.use_grouped_topk else None,
            topk_group=layer.topk_group if layer.use_grouped_topk else None)
        return self.forward_oot(layer, x, topk_weights, topk_ids, None, None)

    @property
    def runs_npu_path(self) -> bool:
        """True when vLLM dispatched this CustomOp to ``forward_oot`` (an NPU platform)."""
        return bool(self._forward_method == self.forward_oot)

    @property
    def runs_ascend_path(self) -> bool:
        """True when vLLM dispatched this CustomOp to ``forward_cpu`` (enabled, host CPU)."""
        return bool(self._forward_method == self.forward_cpu)

    @property
    def supports_eplb(self) -> bool:
        # EPLB moves experts between ranks at run time; the placement here is static.
        return not self.runs_ascend_path

    def process_weights_after_loading(self, layer: Any) -> None:
        if self.runs_npu_path:
            self._npu_experts = npu_experts_of(layer)
            return
        if not self.runs_ascend_path or not plain_torch_supported(layer):
            self._use_vllm_kernel = True
            super().process_weights_after_loading(layer)
            return
        self._placement = placement_of(layer)
        if self._placement is None:
            # Every expert is local, nothing is exchanged: vLLM's own CPU kernel (prepacked
            # weights) runs in the compiled graph exactly as in stock vLLM, with no opaque op
            # and no per-forward Python around it.
            self._use_vllm_kernel = True
            super().process_weights_after_loading(layer)
        # With EP the weights stay in vLLM's plain layout: no prepacking, no kernel object.

    def forward_cpu(
        self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
        shared_experts: Any, shared_experts_input: torch.Tensor | None,
    ) -> torch.Tensor:
        if self._use_vllm_kernel:
            return super().forward_native(
                layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input
            )
        out: torch.Tensor = torch.ops.vllm_ascend.moe_routed_experts(
            x, topk_weights, topk_ids, layer.layer_name
        )
        return out

    def forward_oot(
        self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
        shared_experts: Any, shared_experts_input: torch.Tensor | None,
    ) -> torch.Tensor:
        """The NPU forward: the method chosen for this forward on torch_npu's kernels."""
        comm_type, method = current_moe_comm()
        if comm_type is None:  # no Ascend fields (e.g. a dummy forward): the table's default
            comm_type, method = MoECommType.ALLGATHER, NpuAllGather()
        if method is None:
            raise RuntimeError(f"{layer.layer_name}: MoE communication {comm_type.name} is not "
                               "executed by the NPU runtime (it runs ALLGATHER and ALLTOALL)")
        from vllm.distributed import get_ep_group

        experts = self._npu_experts
        if experts is None:
            raise RuntimeError(f"{layer.layer_name}: the NPU MoE forward ran before its weights "
                               "were processed")
        group = get_ep_group().device_group if experts.size > 1 else None
        out: torch.Tensor = method(x, topk_weights, topk_ids, experts, group)
        self._record(comm_type, x.shape[0])
        return out

    def run(
        self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
    ) -> torch.Tensor:
        """The routed experts of ``x`` with this forward's communication method (op body)."""
        comm_type, method = current_moe_comm()
        if self._placement is None:
            raise RuntimeError(f"{layer.layer_name}: the Ascend MoE op runs expert-parallel "
                               "layers only (every expert is local here)")
        if comm_type is None:  # a forward without the Ascend fields: the table's default
            comm_type, method = MoECommType.ALLGATHER, AllGatherDispatch()
        if method is None:
            raise RuntimeError(
                f"MoE communication {comm_type.name} needs NPU hardware; the host-CPU platform"
                " executes ALLGATHER and ALLTOALL"
            )
        from vllm.distributed import get_ep_group

        experts = ExpertWeights(
            layer.w13_weight, layer.w2_weight, getattr(layer, "w13_bias", None),
            getattr(layer, "w2_bias", None), layer.activation.value,
            bool(layer.apply_router_weight_on_input),
        )
        share = replicated_share(x, topk_weights, topk_ids, method, experts, self._placement,
                                 get_ep_group().cpu_group)
        self._record(comm_type, x.shape[0])
        return share

    def _record(self, comm_type: MoECommType, tokens: int) -> None:
        self.comm_counts[(comm_type.name, tokens)] += 1


class NpuMonolithicFusedMoEMethod(AscendUnquantizedFusedMoEMethod):
    """The NPU form of the method: monolithic (it routes the logits itself)."""

    is_monolithic = True


def npu_experts_of(layer: Any) -> NpuExperts:
    """The layer's experts in the grouped-matmul layout (weights transposed in place) with its EP
    rank; ``ValueError`` naming the setting when the NPU path cannot run it."""
    reason = unsupported_reason(layer)
    if reason is None and layer.activation.value != "silu":
        reason = f"activation {layer.activation.value!r} (the NPU path runs silu: npu_swiglu)"
    if reason is None and (getattr(layer, "w13_bias", None) is not None
                           or getattr(layer, "w2_bias", None) is not None):
        reason = "expert biases"
    if reason is None and layer.apply_router_weight_on_input:
        reason = "router weights applied on the input"
    if reason is None and layer.custom_routing_function is not None:
        reason = "a custom routing function"
    if reason is not None:
        raise ValueError(f"{layer.layer_name}: the NPU MoE path does not support {reason}")
    parallel = layer.moe_config.moe_parallel_config
    rank, size = 0, 1
    if parallel.use_ep and parallel.ep_size > 1:
        rank, size = parallel.ep_rank, parallel.ep_size
        local = layer.w13_weight.shape[0]
        want = torch.full((layer.global_num_experts,), -1, dtype=torch.int64)
        want[rank * local:(rank + 1) * local] = torch.arange(local)
        mine = layer.expert_map
        if mine is None or not torch.equal(want, mine.cpu().to(torch.int64)):
            raise ValueError(f"{layer.layer_name}: the NPU MoE path needs the linear expert "
                             "placement (EPLB and round_robin are not supported)")
    layer.w13_weight.data = layer.w13_weight.data.transpose(1, 2).contiguous()
    layer.w2_weight.data = layer.w2_weight.data.transpose(1, 2).contiguous()
    return NpuExperts(layer.w13_weight, layer.w2_weight, rank, size)


def _ascend_moe_methods(worker: Any) -> list[AscendUnquantizedFusedMoEMethod]:
    model = worker.model_runner.get_model()
    found: list[AscendUnquantizedFusedMoEMethod] = []
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, AscendUnquantizedFusedMoEMethod) and method not in found:
            found.append(method)
    return found


def moe_comm_counts(worker: Any) -> dict[str, Any]:
    """``{"rank", "layers", "calls": [[method, tokens, forwards], ...]}`` of this worker's MoE."""
    methods = _ascend_moe_methods(worker)
    total: Counter[tuple[str, int]] = Counter()
    for method in methods:
        total.update(method.comm_counts)
    calls = [[name, tokens, count] for (name, tokens), count in sorted(total.items())]
    return {"rank": int(getattr(worker, "rank", 0)), "layers": len(methods), "calls": calls}


def reset_moe_comm_counts(worker: Any) -> int:
    """In a worker (``collective_rpc``): clear the counts; returns the number of layers."""
    methods = _ascend_moe_methods(worker)
    for method in methods:
        method.comm_counts.clear()
    return len(methods)
