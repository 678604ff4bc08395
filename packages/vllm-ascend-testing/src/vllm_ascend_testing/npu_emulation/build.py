"""Build (once per torch version and source) and load the C++ half of the emulated device.

The build lands in a cache directory that must be the user's own (mode 0700): a shared
directory would let another user swap the library this process loads. Concurrent first
builds from several processes take an exclusive file lock; the library counts as built only
once a marker is written after the build, so a process never loads a half-linked file.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import stat
from pathlib import Path
from types import ModuleType

import torch
from vllm_ascend.base.trusted_roots import own_cache_dir

CACHE_VAR = "VLLM_ASCEND_EMULATION_CACHE"
SOURCE = Path(__file__).resolve().parent / "csrc" / "npu_device.cpp"
EXTENSION = "_vllm_ascend_npu_emulation"


class EmulationBuildError(RuntimeError):
    """The emulated device's C++ extension could not be built or loaded."""


def cache_root() -> Path:
    """``$VLLM_ASCEND_EMULATION_CACHE`` or ``$XDG_CACHE_HOME``/``~/.cache`` + the harness."""
    override = os.environ.get(CACHE_VAR)
    if override:
        return Path(override)
    # own_cache_dir: the stand-in home's cache when there is no home (Path.home() would raise).
    base = os.environ.get("XDG_CACHE_HOME") or str(own_cache_dir())
    return Path(base) / "vllm-ascend-testing" / "npu-emulation"


def private_dir(path: Path) -> Path:
    """``path`` created 0700 if missing; an error unless this user owns it and nobody else
    can write to it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise EmulationBuildError(
            f"{path} must be owned by uid {os.getuid()} and not writable by others "
            f"(owner {info.st_uid}, mode {stat.filemode(info.st_mode)}); set {CACHE_VAR} to a "
            "directory of your own")
    return path


def build_dir() -> Path:
    """The directory of this torch version's and this source's build."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_root() / f"torch-{torch.__version__}-{digest}"


def load_extension() -> ModuleType:
    """The built extension module, building it first if no finished build is cached."""
    root = private_dir(cache_root())
    target = build_dir()
    marker = target / "built"
    if not marker.exists():
        with open(root / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                _build(private_dir(target))
                marker.write_text(torch.__version__, encoding="utf-8")
    return _import(target / f"{EXTENSION}.so")


def _build(target: Path) -> None:
    from torch.utils import cpp_extension

    # A build killed mid-way leaves cpp_extension's own baton; under our lock it is stale.
    (target / "lock").unlink(missing_ok=True)
    try:
        cpp_extension.load(EXTENSION, [str(SOURCE)], build_directory=str(target),
                           extra_cflags=["-O2"], is_python_module=False, verbose=False)
    except Exception as err:
        raise EmulationBuildError(
            f"building the emulated NPU device ({SOURCE.name}) in {target} failed: {err}. "
            "It needs g++ and ninja on PATH.") from err


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(EXTENSION, str(path))
    spec = importlib.util.spec_from_file_location(EXTENSION, path, loader=loader)
    if spec is None:
        raise EmulationBuildError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
