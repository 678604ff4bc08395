"""The CANN toolkit and NNAL: where installed, which version, whether sourced, whether the libraries
torch-npu links resolve, and which ``aclnn`` entry points are missing.
"""
# Locations: CANN's documented defaults (root and per-user installs, the ascend-toolkit layout and
# the cann layout of CANN 8.5+) after ASCEND_TOOLKIT_HOME / ASCEND_HOME_PATH.

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from vllm_ascend.doctor.elf_symbols import ElfError, read_elf_dynamic
from vllm_ascend.doctor.findings import FAIL, INFO, NPU, OK, WARN, Finding
from vllm_ascend.doctor.host_paths import HostPaths, shown
from vllm_ascend.doctor.kernel_entry_points import (
    ASCEND_OPS,
    TORCH_NPU_CANN,
    TORCH_NPU_NEEDED,
    missing_by_op,
)

TOOLKIT_ENV = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
TOOLKIT_DIRS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
USER_TOOLKIT_DIRS = ("Ascend/ascend-toolkit/latest", "Ascend/cann")
NNAL_DIRS = ("/usr/local/Ascend/nnal/atb",)
USER_NNAL_DIRS = ("Ascend/nnal/atb",)
SOURCED_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
# Where the loader looks when LD_LIBRARY_PATH does not name the directory.
SYSTEM_LIB_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib",
                   "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                   "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
_VERSION = re.compile(r"^\s*(?:version|Version)\s*=\s*(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Toolkit:
    """A CANN toolkit directory (as the host names it), where it was found, its version."""

    home: str
    found_by: str
    version: str | None
    version_file: str | None

    @property
    def set_env(self) -> str:
        """The ``set_env.sh`` that sets up this toolkit (one level up for ``.../latest``)."""
        parent = str(Path(self.home).parent)
        return f"{parent}/set_env.sh" if Path(self.home).name == "latest" else \
            f"{self.home}/set_env.sh"


def _candidates(paths: HostPaths, env_names: tuple[str, ...], dirs: tuple[str, ...],
                user_dirs: tuple[str, ...]) -> list[tuple[str, str]]:
    found = [(paths.environ[n], n) for n in env_names if paths.environ.get(n)]
    found += [(d, "default location") for d in dirs]
    home = paths.home()
    if home:
        found += [(f"{home}/{d}", "per-user location") for d in user_dirs]
    return found


def toolkit_version(paths: HostPaths, home: str) -> tuple[str | None, str | None]:
    """(version, file read) from the toolkit's install record or a component version file."""
    files = [f"{home}/{entry}/ascend_toolkit_install.info" for entry in paths.list_dir(home)
             if entry.endswith("-linux")]
    files += [f"{home}/{sub}/version.info" for sub in ("compiler", "runtime", "opp")]
    for name in files:
        text = paths.read_text(name)
        found = _VERSION.search(text or "")
        if found:
            return found.group(1), name
    return None, None


def find_toolkit(paths: HostPaths) -> Toolkit | None:
    """The first toolkit directory that exists, in the order of the module docstring."""
    for home, how in _candidates(paths, TOOLKIT_ENV, TOOLKIT_DIRS, USER_TOOLKIT_DIRS):
        if paths.is_dir(home):
            version, source = toolkit_version(paths, home)
            return Toolkit(home, how, version, source)
    return None


def find_nnal(paths: HostPaths) -> str | None:
    for home, _ in _candidates(paths, ("ATB_HOME_PATH",), NNAL_DIRS, USER_NNAL_DIRS):
        if paths.is_dir(home):
            return home
    return None


def library_dirs(paths: HostPaths) -> list[str]:
    return [*paths.env_dirs("LD_LIBRARY_PATH"), *SYSTEM_LIB_DIRS]


def resolve_library(paths: HostPaths, name: str) -> str | None:
    """Where the loader would find ``name`` (LD_LIBRARY_PATH, then the system directories)."""
    for directory in library_dirs(paths):
        # the folder first: an unusable one is reported once, not once per library
        if paths.is_dir(directory) and paths.is_file(f"{directory}/{name}"):
            return f"{directory}/{name}"
    return None


def check_toolkit(paths: HostPaths, toolkit: Toolkit | None) -> Finding:
    if toolkit is None:
        where = ", ".join([*TOOLKIT_ENV, *TOOLKIT_DIRS, *(f"~/{d}" for d in USER_TOOLKIT_DIRS)])
        return Finding("cann", FAIL, f"no CANN toolkit found (looked at {where})",
                       fix=f"install the CANN toolkit {TORCH_NPU_CANN} (the release torch-npu "
                           "is built for) and its kernels package for your SoC", scope=NPU)
    version = toolkit.version or "unknown version (no version file)"
    return Finding("cann", OK if toolkit.version else WARN,
                   f"CANN toolkit {version} at {toolkit.home} ({toolkit.found_by})",
                   scope=NPU, details={"home": toolkit.home, "version": toolkit.version,
                                       "version_file": toolkit.version_file})


def check_sourced(paths: HostPaths, toolkit: Toolkit | None) -> Finding:
    if toolkit is None:
        return Finding("cann-env", FAIL, "no toolkit, so no set_env.sh to source", scope=NPU,
                       fix=f"install the CANN toolkit {TORCH_NPU_CANN}, then source its "
                           "set_env.sh")
    missing = [v for v in SOURCED_VARS if not paths.environ.get(v)]
    wrong = [v for v in TOOLKIT_ENV if paths.environ.get(v)
             and not paths.same_dir(paths.environ[v], toolkit.home)]
    lib64 = f"{toolkit.home}/lib64"
    on_path = any(paths.same_dir(d, lib64) for d in paths.env_dirs("LD_LIBRARY_PATH")
                  if paths.is_dir(d))
    problems = [f"{v} is not set" for v in missing] + [
        f"{v}={paths.environ[v]} is another toolkit" for v in wrong]
    if not on_path:
        problems.append(f"LD_LIBRARY_PATH does not hold {lib64}")
    if problems:
        return Finding("cann-env", FAIL, "CANN's environment is not sourced in this shell: "
                       + "; ".join(problems), fix=f"source {toolkit.set_env}", scope=NPU)
    return Finding("cann-env", OK, f"sourced ({', '.join(SOURCED_VARS)} set, {lib64} on "
                   "LD_LIBRARY_PATH)", scope=NPU)


def check_nnal(paths: HostPaths) -> Finding:
    """NNAL (ATB) as a fact: none of the plugin's kernels call ATB, so its absence costs nothing."""
    home = find_nnal(paths)
    if home is None:
        return Finding("nnal", INFO, "NNAL (ATB) is not installed; the plugin's kernels do not "
                       "call ATB", scope=NPU)
    if resolve_library(paths, "libatb.so") is None or not paths.environ.get("ATB_HOME_PATH"):
        return Finding("nnal", INFO, f"NNAL at {home} is not sourced (ATB_HOME_PATH unset or "
                       "libatb.so not on LD_LIBRARY_PATH); the plugin's kernels do not call "
                       "ATB", scope=NPU)
    return Finding("nnal", OK, f"NNAL (ATB) at {home}, sourced", scope=NPU)


def check_linked_libraries(paths: HostPaths, toolkit: Toolkit | None,
                           needed: tuple[str, ...] = TORCH_NPU_NEEDED) -> Finding:
    unresolved = [name for name in needed if resolve_library(paths, name) is None]
    if unresolved:
        fix = (f"source {toolkit.set_env}" if toolkit is not None
               else f"install the CANN toolkit {TORCH_NPU_CANN} and source its set_env.sh")
        return Finding("torch-npu-libs", FAIL,
                       f"libraries torch-npu links against do not resolve: "
                       f"{', '.join(unresolved)} (import torch_npu fails: 'Failed to load "
                       "the backend extension')", fix=fix, scope=NPU,
                       details={"unresolved": unresolved})
    return Finding("torch-npu-libs", OK, f"{', '.join(needed)} resolve", scope=NPU)


def operator_libraries(paths: HostPaths, toolkit: Toolkit) -> list[str]:
    """The ``lib64/libopapi*.so`` of the toolkit, as the host names them."""
    lib64 = f"{toolkit.home}/lib64"
    return [f"{lib64}/{name}" for name in paths.list_dir(lib64)
            if fnmatch.fnmatchcase(name, "libopapi*.so")]


def check_kernels(paths: HostPaths, toolkit: Toolkit | None) -> Finding:
    if toolkit is None:
        return Finding("kernels", FAIL, "no CANN operator library (no toolkit)", scope=NPU,
                       fix=f"install the CANN toolkit {TORCH_NPU_CANN}")
    libraries = operator_libraries(paths, toolkit)
    if not libraries:
        return Finding("kernels", FAIL, f"no libopapi.so in {toolkit.home}/lib64", scope=NPU,
                       fix=f"reinstall the CANN toolkit {TORCH_NPU_CANN}")
    symbols: set[str] = set()
    for library in libraries:
        try:
            symbols |= read_elf_dynamic(paths.at(library)).exported
        except (OSError, ElfError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return Finding("kernels", FAIL, f"cannot read the operator library "
                           f"{shown(library)}: {reason}", scope=NPU,
                           fix=f"reinstall the CANN toolkit {TORCH_NPU_CANN}",
                           details={"library": library})
    exported = frozenset(symbols)
    missing = missing_by_op(exported)
    if not missing:
        return Finding("kernels", OK, f"every aclnn entry point the plugin's kernels call is "
                       f"exported by {', '.join(Path(p).name for p in libraries)}", scope=NPU)
    by_name: dict[str, list[str]] = {}
    for op, names in missing.items():
        for name in names:
            by_name.setdefault(name, []).append(f"ascend::{op} ({ASCEND_OPS[op][1]})")
    listed = "; ".join(f"{name} for {', '.join(users)}" for name, users in sorted(by_name.items()))
    version = toolkit.version or "this CANN"
    return Finding("kernels", WARN, f"CANN {version}'s operator library lacks {listed}: those "
                   "ops run their reference implementations", scope=NPU,
                   fix=f"install CANN {TORCH_NPU_CANN} (the release torch-npu is built for)",
                   details={"missing": {name: users for name, users in sorted(by_name.items())}})


def cann_findings(paths: HostPaths, needed: tuple[str, ...] = TORCH_NPU_NEEDED) -> list[Finding]:
    toolkit = find_toolkit(paths)
    return [check_toolkit(paths, toolkit), check_sourced(paths, toolkit), check_nnal(paths),
            check_linked_libraries(paths, toolkit, needed), check_kernels(paths, toolkit)]

