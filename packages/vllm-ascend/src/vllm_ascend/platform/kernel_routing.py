"""An ``ascend`` op whose CANN ``aclnn`` entry point is missing runs its reference instead."""
# Without it the first request fails with "aclnnX ... not in libopapi.so".

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from vllm_ascend.doctor.cann import find_toolkit, operator_libraries
from vllm_ascend.doctor.elf_symbols import ElfError, exported_symbols
from vllm_ascend.doctor.host_paths import HostPaths
from vllm_ascend.doctor.kernel_entry_points import ASCEND_OPS, TORCH_NPU_CANN, missing_by_op

logger = logging.getLogger(__name__)


def missing_entry_points(environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """``{ascend op: entry points the installed CANN lacks}``; empty when no library can be read."""
    paths = HostPaths(environ=dict(os.environ if environ is None else environ))
    toolkit = find_toolkit(paths)
    if toolkit is None:
        return {}
    libraries = operator_libraries(paths, toolkit)
    if not libraries:
        return {}
    try:
        return missing_by_op(exported_symbols(libraries))
    except (OSError, ElfError):
        return {}


def route_missing_kernels(torch_npu: Any, registration: Any,
                          environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """Re-register the NPU kernels with the ops missing entry points on their references
    (idempotent, one warning); returns those ops."""
    missing = missing_entry_points(environ)
    if not missing or registration.skipped == frozenset(missing):
        return missing
    registration.reset()
    registration.load(torch_npu, skip=frozenset(missing))
    listed = "; ".join(f"ascend::{op} ({ASCEND_OPS[op][1]}) needs {', '.join(names)}"
                       for op, names in sorted(missing.items()))
    logger.warning("the installed CANN's operator library lacks entry points the NPU kernels "
                   "call, so these ops run their reference implementations: %s. CANN %s has "
                   "them (the release torch-npu is built for)", listed, TORCH_NPU_CANN)
    return missing
