"""Which attention backend the NPU platform hands to vLLM, as pure decisions."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

VARIANTS: tuple[str, ...] = ("standard", "mla", "sfa", "dsa", "fa3", "310p")
SOCS: tuple[str, ...] = ("A2", "A3", "A5", "310P")
FA3_PACKAGE = "flash_attn_npu_v3"
FA3_FUNCTION = "flash_attn_with_kvcache"

# (use_mla, use_sparse, use_compress) -> variant, on A2/A3/A5 without FA3.
DECISION_TABLE: dict[tuple[bool, bool, bool], str] = {
    (False, False, False): "standard",
    (True, False, False): "mla",
    (True, True, False): "sfa",
    (True, False, True): "dsa",
}


def _flags(use_mla: bool, use_sparse: bool, use_compress: bool) -> str:
    return f"use_mla={use_mla}, use_sparse={use_sparse}, use_compress={use_compress}"


def _supported() -> str:
    return "; ".join(f"({_flags(*key)}) -> {variant}" for key, variant in DECISION_TABLE.items())


def select_attention_variant(*, use_mla: bool, use_sparse: bool, use_compress: bool, soc: str,
                             fa3_requested: bool) -> str:
    """The attention variant for these selector flags, SoC and FA3 request.

    FA3 (no MLA, sparse or compress) -> ``fa3``; SoC 310P -> ``310p``; on A2/A3/A5 by flags: none
    -> ``standard``, mla -> ``mla``, mla+sparse -> ``sfa``, mla+compress -> ``dsa``; else
    ``ValueError``.
    """
    if soc not in SOCS:
        raise ValueError(f"no NPU attention backend for SoC {soc!r}; allowed: {', '.join(SOCS)}")
    key = (bool(use_mla), bool(use_sparse), bool(use_compress))
    if fa3_requested:
        if key != (False, False, False):
            raise ValueError(
                f"the FA3 attention backend (rl_config.enable_training_consistency) does not "
                f"support MLA, SFA or DSA: got {_flags(*key)}; FA3 supports only "
                f"({_flags(False, False, False)})"
            )
        return "fa3"
    if soc == "310P":
        return "310p"  # the 310P backend serves every model it runs
    variant = DECISION_TABLE.get(key)
    if variant is None:
        raise ValueError(f"no Ascend attention backend for {_flags(*key)}; supported: "
                         f"{_supported()}")
    return variant


def selector_flags(attn_selector_config: Any) -> tuple[bool, bool, bool]:
    """(use_mla, use_sparse, use_compress) of vLLM's selector config (a missing field: False)."""
    # vLLM 0.32 has no ``use_compress`` field.
    cfg = attn_selector_config
    return (bool(getattr(cfg, "use_mla", False)), bool(getattr(cfg, "use_sparse", False)),
            bool(getattr(cfg, "use_compress", False)))


def fa3_requested(ascend_config: Any) -> bool:
    """Whether the resolved Ascend config asks for FA3 (RL training consistency)."""
    rl = ascend_config.rl_config
    return bool(rl.enabled and rl.enable_training_consistency)


def require_fa3_kernels(
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> None:
    """ValueError unless ``flash_attn_npu_v3`` is installed and has ``flash_attn_with_kvcache``."""
    try:
        module = import_module(FA3_PACKAGE)
    except ImportError as exc:
        raise ValueError(
            f"rl_config.enable_training_consistency selects the FA3 attention backend, which "
            f"needs the package {FA3_PACKAGE!r}: it cannot be imported ({exc})"
        ) from exc
    if not callable(getattr(module, FA3_FUNCTION, None)):
        raise ValueError(
            f"the FA3 attention backend needs {FA3_PACKAGE}.{FA3_FUNCTION}, which the installed "
            f"{FA3_PACKAGE} does not provide"
        )


def backend_paths(provided: object, class_path: str, source: str) -> dict[str, str]:
    """Variant -> dotted class path from the ``attention`` entry point's object ``provided``."""
    if isinstance(provided, type):
        return {"standard": class_path}
    if not isinstance(provided, Mapping):
        raise ValueError(f"{source} must name a backend class or a mapping variant -> class "
                         f"path, not a {type(provided).__name__}")
    paths: dict[str, str] = {}
    for variant, path in provided.items():
        if variant not in VARIANTS:
            raise ValueError(f"{source}: unknown attention variant {variant!r}; allowed: "
                             f"{', '.join(VARIANTS)}")
        dotted = path.replace(":", ".") if isinstance(path, str) else ""
        module, _, name = dotted.rpartition(".")
        if not module or not name:
            raise ValueError(f"{source}: the {variant!r} backend must be a class path like "
                             f"'package.module.Class', got {path!r}")
        paths[variant] = dotted
    return paths


def backend_for(variant: str, paths: Mapping[str, str], source: str) -> str:
    """The class path of ``variant``, or a RuntimeError naming it and what is provided."""
    path = paths.get(variant)
    if path is None:
        provided = ", ".join(sorted(paths)) or "nothing"
        raise RuntimeError(
            f"the {variant!r} attention backend is needed but {source} provides only: "
            f"{provided}; provide a mapping variant -> class path with a {variant!r} entry"
        )
    return path
