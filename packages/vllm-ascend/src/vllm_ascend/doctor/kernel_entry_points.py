"""What the plugin's NPU kernels need from the installed CANN: :data:`ACLNN`, :data:`ASCEND_OPS`,
:data:`TORCH_NPU_NEEDED` and :data:`TORCH_NPU_CANN`.
"""
# Recorded from this release's torch-npu wheel (torch_npu_double/torch_npu-<version>.json) and the
# ops' declarations; a test fails when they disagree.

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Final

TORCH_NPU_VERSION: Final = "2.13.0"
TORCH_NPU_CANN: Final = "9.1.0"



def _load_declarations() -> ModuleType:
    """``ascend_kernels/ops/npu_kernels.py`` executed on its own, without importing torch."""
    # Importing it through its package would import torch, which the doctor's process never does.
    package = importlib.util.find_spec("ascend_kernels")
    if package is None or not package.submodule_search_locations:
        raise ImportError("ascend-kernels is not installed (vllm-ascend requires it)")
    path = Path(next(iter(package.submodule_search_locations))) / "ops" / "npu_kernels.py"
    spec = importlib.util.spec_from_file_location(_DECLARATIONS, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the ops' NPU declarations from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_DECLARATIONS] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


_DECLARATIONS = "vllm_ascend.doctor._ascend_kernels_npu_kernels"
_SUPPORT: Final = {op: support for op, support in _load_declarations().NPU_SUPPORT.items()
                   if support.all_kernels}

ACLNN: Final[dict[str, tuple[str, ...]]] = dict(sorted(
    (kernel.name, kernel.aclnn) for support in _SUPPORT.values()
    for kernel in support.all_kernels))

# ascend op -> (torch_npu kernels it calls, eager then captured; plugin features that use it)
ASCEND_OPS: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    op: (tuple(kernel.name for kernel in support.all_kernels), support.used_by)
    for op, support in _SUPPORT.items()
}

TORCH_NPU_NEEDED: Final[tuple[str, ...]] = (
    "libhccl.so", "libascendcl.so", "libacl_op_compiler.so", "libge_runner.so", "libgraph.so",
)


def entry_points_of(op: str) -> tuple[str, ...]:
    """The aclnn entry points ``torch.ops.ascend.<op>``'s NPU kernels need, each once."""
    kernels, _ = ASCEND_OPS[op]
    # dict: once each, in order (FIA's functional and .out forms share their entry point)
    return tuple(dict.fromkeys(name for kernel in kernels for name in ACLNN[kernel]))


def missing_by_op(exported: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """``{ascend op: its entry points missing from exported}`` for the ops that miss any."""
    result: dict[str, tuple[str, ...]] = {}
    for op in ASCEND_OPS:
        missing = tuple(name for name in entry_points_of(op) if name not in exported)
        if missing:
            result[op] = missing
    return result
