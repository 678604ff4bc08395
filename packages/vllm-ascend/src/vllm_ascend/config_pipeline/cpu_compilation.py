"""Step 4 (host-CPU platform): keep vLLM's ``VLLM_COMPILE`` so the Ascend passes run.

vLLM's CPU platform downgrades ``VLLM_COMPILE`` to ``DYNAMO_TRACE_ONCE``, which never runs a
platform pass manager. After its defaults this step restores ``VLLM_COMPILE`` with inductor,
sets ``compile_sizes=[]`` (otherwise inductor compiles a 4096-token shape outside the compile
ranges), compiles the whole model as one graph (``splitting_ops=[]``, as stock vLLM CPU does;
no piecewise split at attention), lets inductor recompute the Ascend ops' bodies in place
with no more bf16 roundings than vLLM's native ops get (``inductor_settings`` of
``ascend_kernels.inductor_lowering``), turns vLLM's IR torch wrap off (so Dynamo traces the
``ascend`` IR provider and the graphs hold ``torch.ops.ascend.*``), switches vLLM's own CUDA-only
fusion flags off (``gpu_fixes.disable_vllm_gpu_fusions``: their pass classes do not exist on
CPU) and enables every custom op (the
Ascend rotary embedding). The pass manager then has inductor inline the ``torch.ops.ascend.*``
ops after the passes (``ascend_kernels.inductor_lowering``).
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_ascend.config_pipeline.gpu_fixes import disable_vllm_gpu_fusions
from vllm_ascend.ops.custom_ops import all_custom_ops

logger = logging.getLogger("vllm_ascend.config_pipeline.cpu_compilation")


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
