"""Dumps of the graphs inductor compiled, and counts of the ops they call.

With `inductor_debug_env(dir)` in a process's environment, inductor writes one directory per
compiled graph under `dir`; its `fx_graph_transformed.py` is the post-grad graph after every
custom pass (vLLM's, and so the Ascend pass manager's), i.e. what the kernels were built from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

TRANSFORMED_GRAPH = "fx_graph_transformed.py"


def inductor_debug_env(dump_dir: str | Path) -> dict[str, str]:
    """Environment variables that make inductor dump every graph it compiles to `dump_dir`."""
    return {"TORCH_COMPILE_DEBUG": "1", "TORCH_COMPILE_DEBUG_DIR": str(dump_dir)}


def transformed_graphs(dump_dir: str | Path) -> list[Path]:
    """Every post-pass graph file under `dump_dir`, sorted."""
    return sorted(Path(dump_dir).rglob(TRANSFORMED_GRAPH))


def count_ops_in_dump(dump_dir: str | Path, ops: Iterable[str]) -> dict[str, int]:
    """Calls of each op (e.g. "ascend.rms_norm", any overload) in the dumped graphs.

    Raises `FileNotFoundError` when `dump_dir` holds no graph (nothing was compiled there).
    """
    files = transformed_graphs(dump_dir)
    if not files:
        raise FileNotFoundError(f"no {TRANSFORMED_GRAPH} under {dump_dir}")
    text = "\n".join(path.read_text(encoding="utf-8") for path in files)
    counts = {}
    for op in ops:
        # A node is `name = torch.ops.NS.OP.OVERLOAD(args)`; count calls, not mentions.
        pattern = re.compile(rf"= torch\.ops\.{re.escape(op)}\.\w+\(")
        counts[op] = len(pattern.findall(text))
    return counts
