"""The host-CPU platform's large host tensors on transparent huge pages
(``THP_MEM_ALLOC_ENABLE``).
"""
# torch reads the variable at its first CPU allocation, which comes after vLLM asks the platform
# plugin, so register() sets it unless the user did or the kernel's THP mode is "never".

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
    """The kernel's selected THP mode (``always [madvise] never``), or None if unreadable."""
    try:
        text = mode_file.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    found = re.fullmatch(r"\s*(?:\w+\s+)*\[(\w+)\](?:\s+\w+)*\s*", text)
    return found.group(1) if found else None


def huge_page_env(environ: Mapping[str, str], mode: str | None) -> dict[str, str]:
    """``{THP_MEM_ALLOC_ENABLE: "1"}`` if the kernel offers huge pages and the variable is unset."""
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
