"""The file that carries the inputs of config resolution from the engine side to its workers.

The inputs (additional_config, deployment facts with the whole quantization description, the
Ascend env variables) of an 80-layer W8A8 model are over 200 KB: as one environment string
they pass Linux's 128 KiB limit on a single string (``MAX_ARG_STRLEN``), after which every
``exec`` of that process fails with E2BIG (spawned workers, npu-smi, compiler subprocesses).
So inputs over :data:`INLINE_LIMIT` travel in a file and the environment carries its path;
smaller ones (every config without a large quantization description) stay inline in the
variable, so that workers on other hosts (Ray across nodes), which inherit the variable but not
the file, still read them.

The file is private (mode 0600 in a 0700 directory the plugin creates, so no other user can
read or swap it), written atomically, and named by the sha256 of its bytes: equal inputs share one
file, and a reader checks that the bytes still hash to the name. Its lifetime: it is never
removed by the plugin. Every process that publishes equal inputs (DP engines, restarted
engines, a second ``LLM`` in one process) reuses the same file, and a worker may be spawned
long after the publication (elastic scaling), so no single process knows when the last reader
is done; the files are small, one per distinct set of inputs, and live in the temporary
directory, which the system's temporary-file cleaning empties.
"""

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
    """The private directory of this user's worker-input files (created 0700 when missing).

    ``<tmp>/vllm-ascend-<uid>/worker-inputs``; when ``<tmp>/vllm-ascend-<uid>`` (the root,
    in a directory everyone can write) fails the root rule of ``base.trusted_paths``, one
    warning and a fresh private directory (``mkdtemp``) instead."""
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
    """The file holding ``data`` in ``directory`` (default :func:`inputs_dir`): reused when an
    intact one exists, otherwise written to a temporary file and renamed into place."""
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
    """What the environment variable holds for ``data``: the JSON text itself up to
    :data:`INLINE_LIMIT` bytes, else the path of the file :func:`write_inputs` made."""
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
    """The inputs stored at ``path``, read with a size bound (a symlink or special file
    refused) and checked: the name is the sha256 of the bytes, so what is read is what was
    published, and the content an object with exactly the published fields.
    :class:`WorkerInputsError` (or the OSError of the read) otherwise."""
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
