"""A local Hugging Face checkpoint directory given on the command line, checked before use.

Its ``config.json`` must be a bounded, UTF-8 JSON object in a regular file (symlinks allowed);
anything else is one ``ValueError`` naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Final

CONFIG_LIMIT: Final = 16 << 20


def read_model_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed ``config.json`` of the checkpoint ``directory`` (see the module docstring)."""
    path = Path(directory) / "config.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if info.st_size > CONFIG_LIMIT:
            raise ValueError(f"{path} is {info.st_size} bytes; a checkpoint config is at most "
                             f"{CONFIG_LIMIT} bytes")
        try:
            data = handle.read(CONFIG_LIMIT + 1)
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > CONFIG_LIMIT:
        raise ValueError(f"{path} grew over {CONFIG_LIMIT} bytes while read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 (byte {exc.start})") from None
    try:
        config = json.loads(text)
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a checkpoint config") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds a JSON {type(config).__name__}, not an object")
    return config
