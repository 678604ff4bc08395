"""Compilation settings: vLLM's GPU-only fusion flags off, then the NPU mode, capture sizes and
compile backend, or the host CPU's ``VLLM_COMPILE`` kept through vLLM's CPU defaults.
"""
# vLLM's CPU platform downgrades VLLM_COMPILE to DYNAMO_TRACE_ONCE, which never runs a platform pass
# manager: the request is read before its defaults and restored after them.

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_ascend.engine.capture_settings import UserCaptureSettings
from vllm_ascend.engine.registry import user_capture_store
from vllm_ascend.ops.custom_ops import all_custom_ops

logger = logging.getLogger(__name__)


# --- vLLM's GPU-only fusion flags (both pipelines) ------------------------------------------------

# PassConfig switches whose passes exist only on CUDA/ROCm/XPU builds of vLLM: its
# PostGradPassManager names their classes only there, so one left on is a NameError on CPU
# and NPU. vLLM switches fuse_norm_quant on by itself whenever rms_norm's first IR provider
# is not "native", which the Ascend IR priority makes true, with or without a model.
VLLM_GPU_FUSION_FLAGS = (
    "fuse_norm_quant", "fuse_act_quant", "fuse_attn_quant", "fuse_allreduce_rms",
    "enable_qk_norm_rope_fusion", "fuse_rope_kvcache_cat_mla", "fuse_act_padding",
    "fuse_mla_dual_rms_norm", "fuse_rope_kvcache", "fuse_qk_norm_rope_kvcache",
)


def disable_vllm_gpu_fusions(vllm_config: Any) -> list[str]:
    """Switch vLLM's own GPU-only fusion flags off (with or without a model); those that were on."""
    pass_config = vllm_config.compilation_config.pass_config
    turned_off = []
    for flag in VLLM_GPU_FUSION_FLAGS:
        if getattr(pass_config, flag, False):
            turned_off.append(flag)
        if hasattr(pass_config, flag):
            setattr(pass_config, flag, False)
    return turned_off


# --- NPU platform: compilation mode, capture sizes, compile backend -------------------------------

MAX_DEFAULT_CAPTURE_SIZE = 512
A5_MAX_CAPTURE_SIZES = 4
COMPILER_PATH = "vllm_ascend.compilation.compiler.AscendCompiler"
NPU_SPLITTING_OPS = ("vllm::mla_forward", "vllm::dsa_forward")


def record_user_capture_settings(vllm_config: Any) -> UserCaptureSettings:
    """Remember the user's capture max and sizes (this hook runs before the engine exists)."""
    cc = vllm_config.compilation_config
    sizes = cc.cudagraph_capture_sizes
    settings = UserCaptureSettings(
        cc.max_cudagraph_capture_size, tuple(sizes) if sizes is not None else None
    )
    return user_capture_store().set(vllm_config, settings)


def user_capture_settings(vllm_config: Any) -> UserCaptureSettings:
    """What :func:`record_user_capture_settings` saw for this config (nothing: defaults)."""
    found = user_capture_store().get(vllm_config)
    return found if found is not None else UserCaptureSettings()


def update_cudagraph_capture_sizes(
    cc: Any, sizes: Sequence[int], *, reason: str, user: UserCaptureSettings | None = None,
    user_sizes_must_stay: bool = False,
) -> list[str]:
    """Replace the capture sizes by ``sizes`` and the max by their last; the notes logged.

    With ``user_sizes_must_stay``, dropping a size the user listed is one ValueError; otherwise
    dropped sizes get one warning.
    """
    new = sorted(set(sizes))
    current = list(cc.cudagraph_capture_sizes or [])
    dropped = [s for s in current if s not in new]
    user = user or UserCaptureSettings()
    if user_sizes_must_stay and user.sizes:
        lost = sorted(set(user.sizes) & set(dropped))
        if lost:
            raise ValueError(
                f"compilation_config.cudagraph_capture_sizes={sorted(set(user.sizes))} includes "
                f"{lost}, which cannot be used: {reason}. Allowed sizes here: {new or 'none'}"
            )
    added = [s for s in new if s not in current]
    old_max = cc.max_cudagraph_capture_size
    new_max = new[-1] if new else 0
    notes = []
    if dropped or added or old_max != new_max:
        what = [f"capture sizes {dropped} dropped"] if dropped or not added else []
        what += [f"capture sizes {added} added"] if added else []
        notes.append(
            f"{' and '.join(what)} ({reason}); max_cudagraph_capture_size "
            f"{old_max} -> {new_max}"
        )
    for note in notes:
        (logger.warning if dropped else logger.info)(note)
    cc.max_cudagraph_capture_size = new_max
    cc.cudagraph_capture_sizes = new
    cc.post_init_cudagraph_sizes()
    return notes


def default_max_capture_size(
    max_num_seqs: int | None, num_speculative_tokens: int = 0,
    user_max: int | None = None, user_sizes: Sequence[int] | None = None,
) -> int | None:
    """``min(max_num_seqs * (1 + spec), 512)``; None when the user chose or it is unknown."""
    # vLLM upstream doubles max_num_seqs; Ascend does not.
    if user_max is not None or user_sizes or max_num_seqs is None:
        return None
    return min(max_num_seqs * (1 + num_speculative_tokens), MAX_DEFAULT_CAPTURE_SIZE)


def largest_decode_batch(
    max_num_seqs: int | None, num_speculative_tokens: int, max_num_batched_tokens: int,
    user: UserCaptureSettings,
) -> int | None:
    """Tokens of the widest decode step that must replay a graph; None when the user chose sizes."""
    cap = default_max_capture_size(max_num_seqs, num_speculative_tokens, user.max_size,
                                   user.sizes)
    return None if cap is None else min(cap, max_num_batched_tokens)


def covering_capture_sizes(
    sizes: Sequence[int], largest: int, max_num_tokens: int, multiple_of: int = 1
) -> list[int]:
    """``sizes`` plus one covering ``largest`` tokens (a ``multiple_of``) when none does."""
    # vLLM pads a batch to the next captured size and runs a larger one eagerly; the added size
    # never exceeds max_num_tokens (the runner's buffers).
    ordered = sorted(set(sizes))
    if ordered and ordered[-1] >= largest:
        return ordered
    size = -(-largest // multiple_of) * multiple_of
    return ordered if size > max_num_tokens else sorted({*ordered, size})


def prune_capture_sizes(sizes: Sequence[int], keep: int = A5_MAX_CAPTURE_SIZES) -> list[int]:
    """Keep ``keep`` sizes evenly spaced over the sorted list (first and last always kept)."""
    ordered = sorted(sizes)
    if len(ordered) <= keep:
        return ordered
    step = (len(ordered) - 1) / (keep - 1)
    picks = {round(i * step) for i in range(keep)} | {0, len(ordered) - 1}
    return [ordered[i] for i in sorted(picks)]


def update_compilation_mode(vllm_config: Any, ascend_config: Any) -> list[str]:
    """Mode rules: eager -> NONE; only NONE/VLLM_COMPILE allowed; xlite; encoder-decoder."""
    from vllm.config import CompilationMode, CUDAGraphMode

    cc, model = vllm_config.compilation_config, vllm_config.model_config
    notes = []
    if model is not None and model.enforce_eager:
        cc.mode = CompilationMode.NONE
        if cc.splitting_ops is None:
            cc.splitting_ops = []
        notes.append("enforce_eager: compilation mode NONE")
    elif cc.mode not in (CompilationMode.NONE, CompilationMode.VLLM_COMPILE):
        notes.append(f"compilation mode {cc.mode} is not supported on Ascend; using NONE")
        logger.warning(notes[-1])
        cc.mode = CompilationMode.NONE
    xlite = ascend_config.xlite_graph_config
    if xlite.enabled:
        if xlite.full_mode and vllm_config.speculative_config is None:
            model.enforce_eager = True
            cc.cudagraph_mode = CUDAGraphMode.NONE
        else:
            cc.cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY
    if model is not None and model.is_encoder_decoder and cc.cudagraph_mode not in (
        CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE
    ):
        vllm_compile = cc.mode == CompilationMode.VLLM_COMPILE
        new_mode = CUDAGraphMode.PIECEWISE if vllm_compile else CUDAGraphMode.NONE
        notes.append(f"encoder-decoder model: cudagraph_mode {cc.cudagraph_mode.name} -> "
                     f"{new_mode.name} (full graphs are not supported)")
        logger.warning(notes[-1])
        cc.cudagraph_mode = new_mode
    return notes


def needs_sp_alignment(tp: int, cudagraph_none: bool, eager: bool, sequence_parallel: bool,
                       shared_expert_dp: bool, dsa_cp: bool) -> bool:
    """Capture sizes must suit sequence parallelism (TP > 1, graphs on, any SP-like feature)."""
    return tp > 1 and not cudagraph_none and not eager and (
        sequence_parallel or shared_expert_dp or dsa_cp
    )


def sp_capture_sizes(sizes: Sequence[int], tp: int) -> list[int]:
    """Capture sizes usable with sequence parallelism: multiples of the TP size."""
    return [s for s in sorted(sizes) if s % tp == 0]


def _cover_largest_decode_batch(vllm_config: Any, sizes: list[int],
                                multiple_of: int) -> list[int]:
    """``sizes`` with a size for the widest decode step when they stop short of it."""
    # vLLM truncates an off-grid default max (9 -> 8) and SP alignment drops non-multiples of TP.
    user = user_capture_store().get(vllm_config)
    if user is None:  # the defaults hook never saw this config: the sizes may be the user's
        return sizes
    sched, spec = vllm_config.scheduler_config, vllm_config.speculative_config
    max_tokens = int(sched.max_num_batched_tokens)
    largest = largest_decode_batch(
        sched.max_num_seqs, int(spec.num_speculative_tokens or 0) if spec is not None else 0,
        max_tokens, user,
    )
    if largest is None:
        return sizes
    return covering_capture_sizes(sizes, largest, max_tokens, multiple_of)


def setup_compile_backend(
    vllm_config: Any, ascend_config: Any, soc: str, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Capture sizes (incl. SP alignment and A5 pruning), splitting ops and AscendCompiler."""
    from vllm.config import CompilationMode, CUDAGraphMode

    env = os.environ if environ is None else environ
    cc, par = vllm_config.compilation_config, vllm_config.parallel_config
    notes: list[str] = []
    cc.cudagraph_num_of_warmups = 1
    vllm_config._set_cudagraph_sizes()
    eager = bool(vllm_config.model_config and vllm_config.model_config.enforce_eager)
    sp = needs_sp_alignment(
        par.tensor_parallel_size, cc.cudagraph_mode == CUDAGraphMode.NONE, eager,
        bool(getattr(par, "use_sequence_parallel_moe", False)),
        bool(ascend_config.enable_shared_expert_dp), bool(ascend_config.enable_dsa_cp),
    )
    sizes = sorted(set(cc.cudagraph_capture_sizes or []))
    if sp:
        tp = par.tensor_parallel_size
        kept = _cover_largest_decode_batch(vllm_config, sp_capture_sizes(sizes, tp), tp)
        if not kept:
            raise ValueError(
                f"no graph capture size in {sizes} suits sequence parallelism with "
                f"TP={tp}; choose sizes that are multiples of TP"
            )
        if kept != sizes:
            notes += update_cudagraph_capture_sizes(
                cc, kept, user=user_capture_settings(vllm_config), user_sizes_must_stay=True,
                reason=f"sequence parallelism with TP={tp} needs multiples of {tp}",
            )
    elif sizes and cc.cudagraph_mode != CUDAGraphMode.NONE and not eager:
        covered = _cover_largest_decode_batch(vllm_config, sizes, 1)
        if covered != sizes:
            notes += update_cudagraph_capture_sizes(
                cc, covered, reason="the largest decode batch must be captured")
    cc.backend = COMPILER_PATH
    mode = cc.cudagraph_mode
    if mode == CUDAGraphMode.NONE:
        cc.mode = CompilationMode.NONE
    elif mode.requires_piecewise_compilation():
        if cc.mode != CompilationMode.VLLM_COMPILE:
            raise ValueError(
                f"cudagraph_mode={mode.name} needs compilation mode VLLM_COMPILE, got {cc.mode}"
            )
        cc.set_splitting_ops_for_v1(par.all2all_backend, par.data_parallel_size)
        cc.splitting_ops = [*(cc.splitting_ops or []), *NPU_SPLITTING_OPS]
        if soc == "A5" and len(cc.cudagraph_capture_sizes or []) > A5_MAX_CAPTURE_SIZES:
            notes += update_cudagraph_capture_sizes(
                cc, prune_capture_sizes(cc.cudagraph_capture_sizes),
                reason=f"A5 captures at most {A5_MAX_CAPTURE_SIZES} sizes",
            )
    else:
        cc.splitting_ops = []
    graph_mode = cc.cudagraph_mode != CUDAGraphMode.NONE
    if graph_mode and env.get("ASCEND_LAUNCH_BLOCKING", "0") == "1":
        raise ValueError(
            "ASCEND_LAUNCH_BLOCKING=1 cannot be used with graph mode; unset it or run with "
            "enforce_eager (plogs are under $HOME/ascend/log/debug)"
        )
    return notes


# --- host-CPU platform: VLLM_COMPILE kept for the Ascend passes -----------------------------------

def wants_vllm_compile(vllm_config: Any) -> bool:
    """Whether the user's settings ask for vLLM's compilation (read before the CPU defaults)."""
    from vllm.config import CompilationMode

    model = vllm_config.model_config
    return (
        vllm_config.compilation_config.mode == CompilationMode.VLLM_COMPILE
        and not (model is not None and model.enforce_eager)
        and vllm_config.lora_config is None
    )


def apply_cpu_compilation(vllm_config: Any, compile_requested: bool) -> dict[str, Any]:
    """Apply the host-CPU compilation settings; returns what was decided (for the log)."""
    from ascend_kernels.inductor_lowering import inductor_settings
    from vllm.config import CompilationMode

    cc = vllm_config.compilation_config
    cc.custom_ops = all_custom_ops(cc.custom_ops)  # every op on; the user's +x/-x kept
    turned_off = disable_vllm_gpu_fusions(vllm_config)
    if compile_requested:
        cc.mode = CompilationMode.VLLM_COMPILE
        cc.backend = "inductor"
        cc.compile_sizes = []
        cc.ir_enable_torch_wrap = False
        # One graph for the whole model, as stock vLLM CPU compiles it: no Python hand-off
        # between pieces at every attention layer, and the passes still run on it.
        cc.splitting_ops = []
        # What inductor needs to inline the Ascend ops without float32 scratch buffers
        # (ascend_kernels.inductor_lowering).
        cc.inductor_compile_config.update(inductor_settings())
    decision = {
        "mode": cc.mode.name if cc.mode is not None else None,
        "backend": cc.backend,
        "splitting_ops": cc.splitting_ops,
        "custom_ops": list(cc.custom_ops),
        "vllm_fusions_off": turned_off,
    }
    logger.info("host-CPU compilation: %s", decision)
    return decision
