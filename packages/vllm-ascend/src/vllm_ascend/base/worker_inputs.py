"""The file that carries the inputs of config resolution from the engine side to its workers.

Inputs over :data:`INLINE_LIMIT` go in a private file named by their sha256; smaller ones stay
inline in the variable (workers on other hosts inherit it but not the file).
"""
# Why a file: an 80-layer W8A8 description exceeds MAX_ARG_STRLEN (128 KiB), and every exec fails.
# The file is never removed: equal inputs share it and a worker may start long after publishing.

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Final

from vllm_ascend.base.trusted_paths import make_private_dir, read_bounded_file, write_atomic

logger = logging.getLogger(__name__)

# Far above the inputs of any checkpoint seen (an 80-layer W8A8 description is ~0.2 MB).
MAX_INPUTS_BYTES: Final = 64 << 20
# Inline up to a quarter of MAX_ARG_STRLEN (128 KiB): room for the rest of the environment.
INLINE_LIMIT: Final = 32 << 10
_NAME = re.compile(r"[0-9a-f]{64}\.json")
_FIELDS: Final = {"soc": str, "additional_config": dict, "facts": dict, "environ": dict}


class WorkerInputsError(ValueError):
    """The published worker inputs cannot be used; the message names the file and why."""


def inputs_dir() -> Path:
    """``<tmp>/vllm-ascend-<uid>/worker-inputs`` (0700), or a fresh private directory if refused."""
    root = Path(tempfile.gettempdir()) / f"vllm-ascend-{os.geteuid()}"
    wanted = root / "worker-inputs"
    try:
        make_private_dir(root)
        return make_private_dir(wanted)
    except OSError as exc:
        fresh = Path(tempfile.mkdtemp(prefix="vllm-ascend-worker-inputs-"))
        logger.warning("worker inputs: not using %s (%s); using %s instead", wanted, exc, fresh)
        return make_private_dir(fresh)


def encode_inputs(inputs: dict[str, Any]) -> bytes:
    """The canonical bytes of ``inputs`` (TypeError/ValueError when not JSON-serialisable)."""
    return json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode("utf-8")


def write_inputs(data: bytes, directory: Path | None = None) -> Path:
    """The file holding ``data`` in ``directory``: an intact one reused, else written atomically."""
    if len(data) > MAX_INPUTS_BYTES:
        raise WorkerInputsError(f"the worker inputs are {len(data)} bytes, over the "
                                f"{MAX_INPUTS_BYTES}-byte limit")
    where = inputs_dir() if directory is None else directory
    target = where / f"{hashlib.sha256(data).hexdigest()}.json"
    with contextlib.suppress(OSError, WorkerInputsError):
        read_inputs(target)  # intact: equal inputs share it
        os.utime(target)  # recently used, for the system's temporary-file cleaning
        return target
    write_atomic(target, data)
    return target


def env_value(data: bytes) -> str:
    """The variable's value: the JSON itself up to :data:`INLINE_LIMIT`, else its file's path."""
    if len(data) <= INLINE_LIMIT:
        return data.decode("utf-8")
    return str(write_inputs(data))


def inputs_from_env(value: str) -> dict[str, Any]:
    """The inputs a variable set by :func:`env_value` stands for (inline JSON or a file)."""
    if value.startswith("{"):
        if len(value) > INLINE_LIMIT:
            raise WorkerInputsError(f"inline worker inputs are {len(value)} characters, over "
                                    f"the {INLINE_LIMIT}-character limit; never set it by hand")
        try:
            inputs = json.loads(value)
        except ValueError as exc:
            raise WorkerInputsError(f"the inline worker inputs are not JSON: {exc}") from None
        return _checked(inputs, "the inline worker inputs")
    return read_inputs(value)


def read_inputs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The inputs at ``path``, checked against their sha256 name (else
    WorkerInputsError/OSError)."""
    file = Path(path)
    if not file.is_absolute() or not _NAME.fullmatch(file.name):
        raise WorkerInputsError(f"{path!r} is not a worker-inputs file (an absolute path "
                                "named <sha256>.json); never set it by hand")
    try:
        data = read_bounded_file(file, MAX_INPUTS_BYTES)
    except FileNotFoundError:
        raise WorkerInputsError(
            f"{file} is missing: the worker inputs live on the host that built the config "
            "(a worker on another host, or a temporary directory cleaned meanwhile)") from None
    if hashlib.sha256(data).hexdigest() != file.stem:
        raise WorkerInputsError(f"{file} is damaged: its content does not match its name")
    try:
        inputs = json.loads(data)
    except ValueError as exc:
        raise WorkerInputsError(f"{file} is not JSON: {exc}") from None
    return _checked(inputs, str(file))


def _checked(inputs: Any, where: str) -> dict[str, Any]:
    """``inputs`` when it is an object with exactly the published fields, of their types."""
    if not isinstance(inputs, dict) or set(inputs) != set(_FIELDS):
        raise WorkerInputsError(f"{where} must be an object with the keys "
                                f"{', '.join(sorted(_FIELDS))}")
    for key, kind in _FIELDS.items():
        if not isinstance(inputs[key], kind):
            raise WorkerInputsError(f"{where}: {key} must be a JSON "
                                    f"{'string' if kind is str else 'object'}")
    if not all(isinstance(v, str) for v in inputs["environ"].values()):
        raise WorkerInputsError(f"{where}: every environ value must be a string")
    return inputs
