"""Every adjustment vllm-ascend makes to vLLM in a process, each with its reason (idempotent)."""
# Public vLLM hooks wherever vLLM offers one; the only replaced vLLM functions are listed here.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_ascend.base.amx_permission import ensure_amx_permission, reset_amx_permission
from vllm_ascend.process.batch_invariance import (
    install_cpu_linear_route,
    install_vllm_init_handover,
    remove_cpu_linear_route,
    remove_vllm_init_handover,
)
from vllm_ascend.quantization import register_ascend_quantization

ConfigSource = Callable[[], Any]
"""Returns the resolved AscendConfig published to the process when called (None: none was).
A callable, not a value: the batch-invariance handover reads it when vLLM's worker runs it."""


@dataclass(frozen=True)
class Adjustment:
    """One change to vLLM: apply (given the SoC or command name), undo, and why."""

    name: str
    reason: str
    apply: Callable[[str, ConfigSource], object]
    undo: Callable[[], None]
    socs: tuple[str, ...] = ("A2", "A3", "A5", "310P", "cpu")
    command: str | None = None


def _apply_ir(soc: str, config: ConfigSource) -> object:
    # Local: register()'s start-up budget (ops import torch and vLLM).
    from vllm_ascend.ops.ir_provider import register_ascend_ir_provider

    return register_ascend_ir_provider(soc)


def _undo_ir() -> None:
    # Local: register()'s start-up budget (ops import torch and vLLM).
    from vllm_ascend.ops.ir_provider import reset_ascend_ir_provider

    reset_ascend_ir_provider()


def _apply_custom_ops(soc: str, config: ConfigSource) -> object:
    # Local: register()'s start-up budget (ops import torch and vLLM).
    from vllm_ascend.ops.custom_ops import register_ascend_custom_ops

    # The "ascend" quantization method must exist before vLLM builds its ModelConfig.
    register_ascend_quantization()
    return register_ascend_custom_ops()


def _undo_custom_ops() -> None:
    # Local: register()'s start-up budget (ops import torch and vLLM).
    from vllm_ascend.ops.custom_ops import reset_ascend_custom_ops

    reset_ascend_custom_ops()


def _apply_linear_route(soc: str, config: ConfigSource) -> object:
    return install_cpu_linear_route()


def _undo_linear_route() -> None:
    remove_cpu_linear_route()


def _apply_handover(soc: str, config: ConfigSource) -> object:
    return install_vllm_init_handover(config)


def _undo_handover() -> None:
    remove_vllm_init_handover()


def _apply_amx(soc: str, config: ConfigSource) -> object:
    return ensure_amx_permission()


def _undo_amx() -> None:
    reset_amx_permission()


def _apply_serve_runner(command: str, config: ConfigSource) -> object:
    # Local: register()'s start-up budget (serve_exit imports asyncio, ~13 ms; only the
    # `vllm-ascend serve` process applies this row).
    from vllm_ascend.process.serve_exit import install_single_api_server_runner

    return install_single_api_server_runner()


def _undo_serve_runner() -> None:
    from vllm_ascend.process.serve_exit import remove_single_api_server_runner  # Local: as above

    remove_single_api_server_runner()


ADJUSTMENTS: tuple[Adjustment, ...] = (
    Adjustment(
        "host_cpu_amx_permission",
        "vLLM's CPU kernels choose AMX from the CPU's feature bits, but Linux lets a process "
        "use the AMX tiles only after it asked (stock vLLM gets that from oneDNN's first "
        "GEMM); every process of the host-CPU platform asks first, so no kernel dies with "
        "SIGILL (base.amx_permission)",
        _apply_amx, _undo_amx, socs=("cpu",),
    ),
    Adjustment(
        "ascend_ir_provider",
        "vLLM's RMSNorm layers call the vllm_ir ops rms_norm/fused_add_rms_norm; an 'ascend' "
        "provider (public IrOp.register_impl) makes them run torch.ops.ascend.* kernels",
        _apply_ir, _undo_ir,
    ),
    Adjustment(
        "ascend_custom_ops",
        "vLLM's rotary embeddings, SiluAndMul, GemmaRMSNorm and CPU MoE method call CUDA/CPU "
        "_C kernels; the out-of-tree CustomOp classes of ops.custom_ops.ASCEND_CUSTOM_OPS "
        "(public CustomOp.register_oot) call torch.ops.ascend.* instead",
        _apply_custom_ops, _undo_custom_ops,
    ),
    Adjustment(
        "cpu_linear_batch_invariant_route",
        "vLLM's fp32 CPU linear runs oneDNN (_C.onednn_mm), whose reduction order depends on "
        "the batch; when batch-invariant mode is on at weight-loading time, linear layers use "
        "ascend_kernels.batch_invariant.linear (wraps dispatch_cpu_unquantized_gemm: vLLM has "
        "no public hook for the CPU GEMM choice)",
        _apply_linear_route, _undo_linear_route, socs=("cpu",),
    ),
    Adjustment(
        "vllm_batch_invariance_handover",
        "vLLM's worker calls its own init_batch_invariance, which registers Triton kernels "
        "for the platform's dispatch key; Triton has no CPU backend here and no NPU backend, "
        "so on Ascend platforms that hook enables ascend-kernels' batch-invariant mode instead "
        "(vLLM's env overrides kept; wraps the module function: vLLM has no public hook)",
        _apply_handover, _undo_handover,
    ),
    Adjustment(
        "serve_single_api_server",
        "vLLM 0.32's single API server exits 0 when the engine died while serving "
        "and, after a shutdown signal, waits without limit for open "
        "connections; `vllm-ascend serve` points the run_server of vLLM's serve command at "
        "process.serve_exit's runner (vLLM's own building blocks; engine-death exit "
        "status, bounded HTTP shutdown, open requests aborted before the engine stops). Only "
        "in the `vllm-ascend serve` process: `vllm serve` is unchanged",
        _apply_serve_runner, _undo_serve_runner, command="serve",
    ),
)


def apply_compat_adjustments(soc: str, *, config: ConfigSource) -> list[str]:
    """Apply every adjustment for ``soc`` once; the names applied."""
    applied = []
    for adjustment in ADJUSTMENTS:
        if adjustment.command is None and soc in adjustment.socs:
            adjustment.apply(soc, config)
            applied.append(adjustment.name)
    return applied


def apply_command_adjustments(command: str) -> list[str]:
    """Apply the rows of `vllm-ascend` command ``command``; the names applied."""
    applied = []
    for adjustment in ADJUSTMENTS:
        if adjustment.command == command:
            adjustment.apply(command, lambda: None)  # command rows read no config
            applied.append(adjustment.name)
    return applied


def reset_compat_adjustments() -> None:
    """Undo every adjustment (tests)."""
    for adjustment in ADJUSTMENTS:
        adjustment.undo()
