"""Logging for vllm-ascend: ``[vllm-ascend]`` prefixes, colours and the per-process log file."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from vllm_ascend.base.trusted_roots import TrustedRoots, own_home
from vllm_ascend.observability.log_files import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    RotatingAscendFileHandler,
)

LOGGER_NAME = "vllm_ascend"
FORMAT = "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
DATE_FORMAT = "%m-%d %H:%M:%S"
_COLOURS = {"DEBUG": "\033[37m", "INFO": "\033[32m", "WARNING": "\033[33m",
            "ERROR": "\033[31m", "CRITICAL": "\033[1;31m"}
_RESET = "\033[0m"


def is_ascend_path(pathname: str | None) -> bool:
    """Whether a record's source path lies inside the vllm_ascend package."""
    return bool(pathname) and "vllm_ascend" in str(pathname).replace("\\", "/")


def infer_module(pathname: str | None) -> str:
    """The vllm_ascend module a path belongs to (sub-package or root file stem), else "core"."""
    parts = str(pathname or "").replace("\\", "/").split("/")
    if "vllm_ascend" not in parts:
        return "core"
    idx = len(parts) - 1 - parts[::-1].index("vllm_ascend")
    rest = [p for p in parts[idx + 1 :] if p]
    if not rest:
        return "core"
    return rest[0][:-3] if len(rest) == 1 and rest[0].endswith(".py") else rest[0]


def prefix_for(pathname: str | None, filename: str | None) -> str:
    """``[vllm-ascend]`` for root-level files, ``[vllm-ascend] [<module>]`` for nested ones."""
    module = infer_module(pathname)
    if filename == f"{module}.py":
        return "[vllm-ascend]"
    return f"[vllm-ascend] [{module}]"


def use_colour(environ: Mapping[str, str] | None = None, stream: Any = None) -> bool:
    """Colour rules: NO_COLOR or VLLM_LOGGING_COLOR=0 -> off; =1 -> on; else the stream's isatty."""
    env = os.environ if environ is None else environ
    if "NO_COLOR" in env or env.get("VLLM_LOGGING_COLOR") == "0":
        return False
    if env.get("VLLM_LOGGING_COLOR") == "1":
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


class AscendFormatter(logging.Formatter):
    """vLLM's log layout plus the Ascend prefix; continuation lines are indented like vLLM's."""

    def __init__(self, colour: bool = False) -> None:
        super().__init__(FORMAT, datefmt=DATE_FORMAT)
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "fileinfo"):
            record.fileinfo = record.filename
        if not is_ascend_path(record.pathname):
            return self._finish(record, super().format(record))
        msg, args = record.msg, record.args
        prefix = prefix_for(record.pathname, record.filename)
        record.msg, record.args = f"{prefix} - {record.getMessage()}", None
        try:
            text = super().format(record)
        finally:  # other handlers must see the original record
            record.msg, record.args = msg, args
        return self._finish(record, text)

    def _finish(self, record: logging.LogRecord, text: str) -> str:
        if "\n" in text:
            head, _, _ = text.partition(record.getMessage().split("\n")[0])
            indent = " " * len(head) if head else ""
            text = text.replace("\n", "\n" + indent) if indent else text
        if self.colour and record.levelname in _COLOURS:
            text = f"{_COLOURS[record.levelname]}{text}{_RESET}"
        return text


def _level(environ: Mapping[str, str]) -> int:
    name = environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.INFO


def configure_console_logging(
    environ: Mapping[str, str] | None = None, stream: IO[str] | None = None
) -> logging.Logger:
    """Give the ``vllm_ascend`` logger one console handler (idempotent; vLLM's config untouched)."""
    env = os.environ if environ is None else environ
    logger = logging.getLogger(LOGGER_NAME)
    if any(isinstance(h, _ConsoleHandler) for h in logger.handlers):
        return logger
    if stream is None:
        stream = sys.stdout if env.get("VLLM_LOGGING_STREAM", "").endswith("stdout") else sys.stderr
    handler = _ConsoleHandler(stream)
    handler.setFormatter(AscendFormatter(colour=use_colour(env, stream)))
    logger.addHandler(handler)
    logger.setLevel(_level(env))
    logger.propagate = False
    return logger


class _ConsoleHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marker type so configure_console_logging stays idempotent."""


def configure_file_logging(
    log_dir: str | os.PathLike[str] | None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    environ: Mapping[str, str] | None = None,
    roots: TrustedRoots | None = None,
) -> RotatingAscendFileHandler | None:
    """Attach one rotating file handler for ``log_dir`` to the vllm and vllm_ascend loggers.

    A refused ``log_dir`` is replaced by its private fallback; idempotent per directory; a file
    that cannot be opened is one warning and logging stays on stderr.
    """
    roots = TrustedRoots() if roots is None else roots
    env = os.environ if environ is None else environ
    targets = [logging.getLogger("vllm"), logging.getLogger(LOGGER_NAME)]
    existing = [h for h in targets[1].handlers if isinstance(h, RotatingAscendFileHandler)]
    if log_dir is None:
        log_dir = default_log_dir(env)
    # ``~`` is expanded by the root rule (the stand-in home when there is none).
    wanted = roots.root(os.fspath(log_dir), "ascend_log_path", env)
    if existing and existing[0].log_dir == wanted:
        return existing[0]
    for handler in existing:
        for logger in targets:
            logger.removeHandler(handler)
        handler.close()
    try:
        handler = RotatingAscendFileHandler(wanted, max_bytes, max_files)
    except OSError as exc:
        configure_console_logging(env)
        logging.getLogger(LOGGER_NAME).warning(
            "cannot write log files to %s (%s); logging to stderr only",
            wanted, exc,
        )
        return None
    vllm_handlers = logging.getLogger("vllm").handlers
    handler.setLevel(vllm_handlers[0].level if vllm_handlers else _level(env))
    handler.setFormatter(AscendFormatter(colour=False))
    for logger in targets:
        logger.addHandler(handler)
    return handler


def default_log_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``~/ascend/log/vllm_ascend`` (``~``: the stand-in home when there is none)."""
    env = os.environ if environ is None else environ
    return own_home(env) / "ascend" / "log" / "vllm_ascend"


def remove_file_logging() -> None:
    """Detach and close the rotating file handler (tests, shutdown)."""
    for name in ("vllm", LOGGER_NAME):
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, RotatingAscendFileHandler)]:
            logger.removeHandler(handler)
            handler.close()
