"""``NPUPlatform``: the vLLM platform for Ascend NPUs, its runtime classes taken from the
``vllm_ascend.npu_runtime`` entry points.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from vllm.platforms.interface import Platform, PlatformEnum

from vllm_ascend.base import attention_selection as selection
from vllm_ascend.base.extension_points import runtime_attention_backends, runtime_class_paths
from vllm_ascend.base.forward_context import npu_additional_context
from vllm_ascend.base.npu_device import bootstrap_custom_op_env, require_npu_runtime, torch_npu
from vllm_ascend.npu_runtime.model_support import (
    SUPPORTED_QUANTIZATION,
    refuse_unsupported_quantization,
)
from vllm_ascend.npu_runtime.slot_mapping import SLOT_MAPPING_KERNEL, compute_slot_mapping
from vllm_ascend.platform.kernel_routing import route_missing_kernels
from vllm_ascend.platform.shared import AscendPlatformMixin
from vllm_ascend.process.process_setup import current_process_setup

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

PASS_KEY = "graph_fusion_manager"


def _runtime_class(key: str) -> str:
    path = runtime_class_paths().get(key)
    if path is None:
        raise RuntimeError(
            f"no installed package provides the NPU {key!r}: install an Ascend runtime package "
            f"declaring entry point group 'vllm_ascend.npu_runtime' name {key!r}"
        )
    return path


def _register_backend_name(path: str) -> None:
    """Register the backend at ``path`` under its ``get_name()`` in vLLM's registry, once."""
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    get_name = getattr(resolve_obj_by_qualname(path), "get_name", None)
    name = get_name() if callable(get_name) else None
    if isinstance(name, str) and name not in AttentionBackendEnum.__members__:
        register_backend(name, path)


class NPUPlatform(AscendPlatformMixin, Platform):
    """vLLM platform for Ascend NPUs."""

    _enum = PlatformEnum.OOT
    device_name: str = "npu"
    device_type: str = "npu"
    simple_compile_backend: str = "eager"
    ray_device_key: str = "NPU"
    device_control_env_var: str = "ASCEND_RT_VISIBLE_DEVICES"
    ray_noset_device_env_vars = ["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]  # noqa: RUF012
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "hccl"
    # The quantization methods the NPU runtime runs; see verify_quantization.
    supported_quantization = list(SUPPORTED_QUANTIZATION)  # noqa: RUF012 - vLLM's type

    @classmethod
    def platform_soc(cls) -> str:
        """The NPU's SoC, detected once per process from the device (``base.soc``)."""
        return current_process_setup().device_soc()

    @property
    def pass_key(self) -> str:
        return PASS_KEY

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch_npu().npu.manual_seed_all(seed)

    def is_sleep_mode_available(self) -> bool:
        return False  # the NPU runtime has no sleep-mode memory pool

    def is_cumem_allocator_available(self) -> bool:
        return False  # no pluggable NPU allocator is provided

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        """Refuse, while vLLM builds the model config, a method the NPU runtime does not run."""
        # vLLM reads an empty supported_quantization as "every method", hence the runtime's own
        # list.
        refuse_unsupported_quantization(quant)

    @classmethod
    def check_if_supports_dtype(cls, dtype: Any) -> None:
        """The NPU runtime computes in float16, bfloat16 and float32."""
        import torch

        allowed = (torch.float16, torch.bfloat16, torch.float32)
        if dtype not in allowed:
            raise ValueError(f"dtype {dtype} is not supported on Ascend NPUs; allowed: "
                             f"{', '.join(str(d) for d in allowed)}")

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        """vLLM's V1 slot-mapping Triton kernel, in plain torch (no Triton on this path)."""
        from vllm.triton_utils.dispatcher import register_kernels

        register_kernels({SLOT_MAPPING_KERNEL: compute_slot_mapping})


    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return True

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False  # the NPU runtime serves dense models: one full-attention KV group

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        return True

    @classmethod
    def use_custom_op_collectives(cls) -> bool:
        return True

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> None:
        return None

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return str(torch_npu().npu.get_device_name(device_id))

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        uuid = getattr(torch_npu().npu.get_device_properties(device_id), "uuid", None)
        if uuid is None:
            raise RuntimeError(f"NPU {device_id} reports no uuid")
        return str(uuid)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        # Querying memory would initialise torch_npu, which can happen only once per process.
        raise NotImplementedError("NPU total memory is not queried before the worker starts")

    @classmethod
    def inference_mode(cls) -> Any:
        import torch

        return torch.inference_mode()

    @classmethod
    def set_device(cls, device: Any) -> None:
        torch_npu().npu.set_device(device)

    @classmethod
    def get_current_memory_usage(cls, device: Any = None) -> float:
        npu = torch_npu().npu
        npu.reset_peak_memory_stats(device)
        return float(npu.max_memory_allocated(device))

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        props = torch_npu().npu.get_device_properties(device_id)
        return int(getattr(props, "cube_core_num", 0) or getattr(props, "vector_core_num", 0)
                   or 24)

    @classmethod
    def get_pass_manager_cls(cls) -> str:
        return "vllm_ascend.compilation.pass_manager.AscendPassManager"

    @classmethod
    def get_compile_backend(cls) -> str:
        return "vllm_ascend.compilation.compiler.AscendCompiler"

    @classmethod
    def get_static_graph_wrapper_cls(cls) -> str:
        return "vllm_ascend.compilation.graph_wrapper.AscendGraphWrapper"

    @classmethod
    def get_punica_wrapper(cls) -> str:
        return _runtime_class("punica")

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return _runtime_class("communicator")

    @classmethod
    def get_attn_backend_cls(cls, selected_backend: Any, attn_selector_config: Any,
                             num_heads: int | None = None) -> str:
        """The runtime package's backend for the variant ``attention_selection`` picks."""
        from vllm.config import get_current_vllm_config_or_none

        # Local: vLLM: this class loads while vLLM resolves current_platform.
        from vllm_ascend.engine import engine_of
        from vllm_ascend.engine.registry import published_ascend_config

        use_mla, use_sparse, use_compress = selection.selector_flags(attn_selector_config)
        # The engine being built (vLLM selects inside its config context), else the config
        # published to this process.
        vllm_config = get_current_vllm_config_or_none()
        resolved = engine_of(vllm_config).config if vllm_config is not None \
            else published_ascend_config()
        variant = selection.select_attention_variant(
            use_mla=use_mla, use_sparse=use_sparse, use_compress=use_compress,
            soc=cls.platform_soc(),
            fa3_requested=resolved is not None and selection.fa3_requested(resolved),
        )
        if variant == "fa3":
            selection.require_fa3_kernels()
        paths, source = runtime_attention_backends()
        path = selection.backend_for(variant, paths, source)
        _register_backend_name(path)
        logger.info("attention backend: %s (%s variant)", path, variant)
        return path

    @classmethod
    def register_custom_kv_cache_specs(cls, vllm_config: VllmConfig) -> None:
        from vllm.utils.import_utils import resolve_obj_by_qualname

        path = runtime_class_paths().get("kv_cache_specs")
        if path is not None:
            resolve_obj_by_qualname(path)(vllm_config)

    @classmethod
    def import_kernels(cls) -> None:
        bootstrap_custom_op_env()  # the compiled extension itself is loaded lazily
        from ascend_kernels.npu_loader import npu_registration

        if npu_registration.loaded:  # ops whose aclnn entry point is missing: the reference
            route_missing_kernels(torch_npu(), npu_registration)

    @classmethod
    def pre_register_and_update(cls, parser: Any = None) -> None:
        """Report a missing NPU runtime before any config is built; offer ``--quantization
        ascend``."""
        require_npu_runtime()
        if parser is None:
            return
        for action in getattr(parser, "_actions", []):
            if "--quantization" in action.option_strings and action.choices is not None:
                if "ascend" not in action.choices:
                    action.choices = [*action.choices, "ascend"]
                break

    @classmethod
    def apply_config_platform_defaults(cls, vllm_config: VllmConfig) -> None:
        # Local: vLLM: this class loads while vLLM resolves current_platform.
        from vllm_ascend.config_pipeline.compile_settings import (
            default_max_capture_size,
            record_user_capture_settings,
        )

        record_user_capture_settings(vllm_config)  # before vLLM fills in its defaults
        cc, spec = vllm_config.compilation_config, vllm_config.speculative_config
        size = default_max_capture_size(
            vllm_config.scheduler_config.max_num_seqs,
            spec.num_speculative_tokens if spec is not None else 0,
            cc.max_cudagraph_capture_size, cc.cudagraph_capture_sizes,
        )
        if size is not None:
            cc.max_cudagraph_capture_size = size

    @classmethod
    def update_block_size_for_backend(cls, vllm_config: VllmConfig) -> None:
        super().update_block_size_for_backend(vllm_config)  # the backend's kernel block size
        cache, model = vllm_config.cache_config, vllm_config.model_config
        if (cache.enable_prefix_caching or model is None or not model.is_hybrid
                or vllm_config.kv_transfer_config is None
                or getattr(cache, "mamba_cache_mode", None) != "align"):
            return
        mamba = cache.mamba_block_size
        if mamba is None or mamba == model.max_model_len:
            cache.mamba_block_size = cache.block_size
        elif mamba % cache.block_size != 0:
            raise ValueError(
                f"mamba_block_size={mamba} must be a multiple of block_size={cache.block_size}"
            )

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        # Local: vLLM: this class loads while vLLM resolves current_platform.
        from vllm_ascend.config_pipeline.steps import run_npu_pipeline

        if vllm_config.device_config is not None and (
            vllm_config.device_config.device_type != "npu"
        ):
            return
        run_npu_pipeline(vllm_config, cls.platform_soc)  # detected after the runtime check

    @classmethod
    def set_additional_forward_context(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The Ascend forward fields: every forward of runner v2, MoE forwards of v1."""
        # Local: vLLM: this class loads while vLLM resolves current_platform.
        from vllm_ascend.engine import engine_of

        vllm_config = kwargs.get("vllm_config")
        if vllm_config is None or getattr(vllm_config, "model_config", None) is None:
            return {}
        return npu_additional_context(engine_of(vllm_config).forward, **kwargs)
