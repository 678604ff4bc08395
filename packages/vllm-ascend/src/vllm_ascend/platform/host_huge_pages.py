"""The host-CPU platform's large host tensors on transparent huge pages.

A decode step reads every weight once. With 4 KiB pages the tiny 8-layer benchmark model alone
spans some 35,000 pages, far more than the TLB holds, so the matmuls keep walking page tables.
torch's CPU allocator asks the kernel for huge pages (``madvise(MADV_HUGEPAGE)`` on every
allocation of 2 MiB or more) when ``THP_MEM_ALLOC_ENABLE=1``. torch reads the variable once, at
its first CPU allocation. In an engine process that comes before ``check_and_update_config``
but after vLLM asks the platform plugin which platform to load, so `vllm_ascend.register`
applies this when it activates the host-CPU platform, in every process vLLM resolves the
platform in (worker processes also inherit the variable).

The variable is set unless the user set it (``0`` opts out) or the kernel's THP mode offers
nothing (``never``, or no THP support at all).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path

logger = logging.getLogger(__name__)

THP_ENV = "THP_MEM_ALLOC_ENABLE"
THP_MODE_FILE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# Modes in which a madvise(MADV_HUGEPAGE) region gets huge pages.
USABLE_MODES = ("always", "madvise")


def kernel_thp_mode(mode_file: Path = THP_MODE_FILE) -> str | None:
    """The kernel's selected THP mode (the bracketed word of ``always [madvise] never``), or
    None when the file is missing, unreadable or in another format."""
    try:
        text = mode_file.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    found = re.fullmatch(r"\s*(?:\w+\s+)*\[(\w+)\](?:\s+\w+)*\s*", text)
    return found.group(1) if found else None


def huge_page_env(environ: Mapping[str, str], mode: str | None) -> dict[str, str]:
    """The environment edit: ``{THP_MEM_ALLOC_ENABLE: "1"}`` when the kernel can give huge
    pages to torch's large allocations and the user has not set the variable; else none."""
    if THP_ENV in environ or mode not in USABLE_MODES:
        return {}
    return {THP_ENV: "1"}


def apply_host_huge_pages(environ: MutableMapping[str, str] | None = None,
                          mode_file: Path = THP_MODE_FILE) -> dict[str, str]:
    """Apply `huge_page_env` to ``environ`` (default: this process's); returns the edit."""
    target = os.environ if environ is None else environ
    mode = kernel_thp_mode(mode_file)
    edit = huge_page_env(target, mode)
    target.update(edit)
    if edit:
        logger.info("host tensors of 2 MiB and more use transparent huge pages (%s=1; kernel "
                    "THP mode %s)", THP_ENV, mode)
    else:
        logger.debug("huge pages left as they are (%s=%r, kernel THP mode %s)",
                     THP_ENV, target.get(THP_ENV), mode)
    return edit
