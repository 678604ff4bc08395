"""Build (once per torch version and source) and load the C++ half of the emulated device.

The build lands in a cache directory that passes the root rule (``trusted_cache``, the same
rule as the plugin's cache roots): every directory from ``/`` down is this user's or root's and
not writable by group or others (sticky ones such as ``/tmp`` aside), every symlink on the way
is this user's or root's, and the cache and build folders themselves are this user's, mode
0700 when created.
Another user could otherwise swap the library this process loads. The library is then opened
relative to the checked build folder (no symlink, a regular file of this user) and loaded
through that open descriptor, so what was checked is what is loaded. Concurrent first builds
from several processes take an exclusive file lock; the library counts as built only once a
marker is written after the build, so a process never loads a half-linked file.
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

from torch_npu_double.emulation.trusted_cache import (
    UntrustedPathError,
    make_private_dir,
    open_trusted_dir,
    own_cache_dir,
)

CACHE_VAR = "VLLM_ASCEND_EMULATION_CACHE"
SOURCE = Path(__file__).resolve().parent / "csrc" / "npu_device.cpp"
EXTENSION = "_torch_npu_double_emulation"
# O_NONBLOCK: a FIFO planted under the library's name must not block the open.
_LIBRARY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class EmulationBuildError(RuntimeError):
    """The emulated device's C++ extension could not be built or loaded."""


def cache_root() -> Path:
    """``$VLLM_ASCEND_EMULATION_CACHE``, else ``torch-npu-double/npu-emulation`` in
    ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    override = os.environ.get(CACHE_VAR)
    if override:
        return Path(override)
    # own_cache_dir: the stand-in home's cache when there is no home (Path.home() would raise).
    base = os.environ.get("XDG_CACHE_HOME") or str(own_cache_dir())
    return Path(base) / "torch-npu-double" / "npu-emulation"


def private_dir(path: Path) -> Path:
    """``path`` created 0700 (one component at a time) if missing; an error unless it and
    every directory and symlink above it pass the root rule (see the module docstring)."""
    try:
        return make_private_dir(path)
    except UntrustedPathError as exc:
        raise EmulationBuildError(
            f"the emulated NPU's build cache {path} is not safe to load code from: {exc}; set "
            f"{CACHE_VAR} to a directory of your own") from None


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
    return _load_checked(target, f"{EXTENSION}.so")


def _load_checked(folder: Path, name: str) -> ModuleType:
    """The library ``name`` in ``folder`` (checked again by the root rule), opened without
    following a symlink, refused unless it is this user's regular file, loaded through the
    open descriptor."""
    try:
        folder_fd, _ = open_trusted_dir(folder)
    except UntrustedPathError as exc:
        raise EmulationBuildError(f"the emulated NPU's build folder is not safe: {exc}") from None
    try:
        fd = os.open(name, _LIBRARY_FLAGS, dir_fd=folder_fd)
    except OSError as exc:
        raise EmulationBuildError(
            f"cannot open {folder / name} (a symlink is refused): {exc.strerror}") from None
    finally:
        os.close(folder_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise EmulationBuildError(
                f"{folder / name} is not a regular file of uid {os.geteuid()} (owner "
                f"{info.st_uid}, mode {stat.filemode(info.st_mode)}); remove {folder}")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):  # a group-writable umask at build
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        return _import(Path(f"/proc/self/fd/{fd}"))
    finally:
        os.close(fd)


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
