"""Materialise ``dump_config`` as the msprobe config file (explicit; never during resolve)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ascend_config.model import AscendConfig

DUMP_RELATIVE_PATH = Path(".vllm_ascend") / "msprobe" / "msprobe_dump_config.json"


def dump_config_file(cwd: str | Path) -> Path:
    """Where ``dump_config`` is written for a process running in ``cwd``."""
    return Path(cwd) / DUMP_RELATIVE_PATH


def write_dump_config(cfg: AscendConfig, cwd: str | Path) -> Path | None:
    """Write ``cfg.dump_config`` atomically to :func:`dump_config_file` and return that path.

    With ``dump_config_path`` set, nothing is written and that path is returned; with neither,
    None. The JSON is UTF-8, indented by 2, non-ASCII kept. The file is written to a temporary
    name in the same directory and renamed, so readers never see a partial file.
    """
    if cfg.dump_config is None:
        return Path(cfg.dump_config_path) if cfg.dump_config_path is not None else None
    target = dump_config_file(cwd)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(cfg.dump_config, indent=2, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
