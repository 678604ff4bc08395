"""Whether the installed vLLM, torch and torch-npu form one consistent set, and the one install line
that restores it; reads metadata only.
"""
# Installing vLLM after the plugin (or the reverse) can replace the torch the other requires.

from __future__ import annotations

from vllm_ascend.doctor.findings import ANY, FAIL, INFO, NPU, OK, Finding
from vllm_ascend.doctor.supported import TESTED_MAX_EXCLUSIVE, TESTED_MIN, VLLM_DISTRIBUTIONS
from vllm_ascend.doctor.version_spec import (
    extra_of,
    readable_requirements,
    release,
    satisfies,
)
from vllm_ascend.doctor.versions import Installed, torch_npu_pin


def _marker_applies(marker: str) -> bool:
    """Whether a requirement marker holds for this interpreter (an extra never does)."""
    if not marker:
        return True
    if extra_of(marker) is not None:
        return False
    from packaging.markers import InvalidMarker, Marker

    try:
        return bool(Marker(marker).evaluate())
    except InvalidMarker:
        return False


def torch_requirement(dists: Installed, name: str) -> str | None:
    """The torch specifier ``name``'s metadata requires here (None: it names no version)."""
    for dep, spec, marker in readable_requirements(dists.requires(name)):
        if dep == "torch" and spec and _marker_applies(marker):
            return spec
    return None


def release_torch(dists: Installed) -> str | None:
    """The torch release this plugin release's pinned torch-npu is built for (``2.13``)."""
    pin = torch_npu_pin(dists)
    if not pin:
        return None
    return ".".join(map(str, release(pin.lstrip("=<>!~ ").rstrip(".*"))[:2]))


def check_install_set(dists: Installed) -> Finding:
    torch = dists.version("torch")
    if torch is None:
        return Finding("install-set", INFO, "torch is not installed: no set to compare")
    holders = [d for d in VLLM_DISTRIBUTIONS if dists.version(d) is not None]
    if dists.version("torch-npu") is not None:
        holders.append("torch-npu")
    needs = {name: torch_requirement(dists, name) for name in holders}
    conflicts = [name for name, spec in needs.items() if spec and not satisfies(torch, spec)]
    said = [f"{name} {dists.version(name)} (torch{spec})" for name, spec in needs.items() if spec]
    if not conflicts:
        verb = "accepts" if len(said) == 1 else "all accept"
        held = f": {', '.join(said)} {verb} it" if said else ""
        return Finding("install-set", OK, f"torch {torch} is the one installed{held}")
    lo, hi = (".".join(map(str, v)) for v in (TESTED_MIN, TESTED_MAX_EXCLUSIVE))
    wanted = release_torch(dists)
    line = [f'"torch=={wanted}.*"'] if wanted else []
    if "torch-npu" in holders:
        line.append(f'"torch-npu{torch_npu_pin(dists) or ""}"')
    line += [f'"{name}>={lo},<{hi}"' for name in holders if name in VLLM_DISTRIBUTIONS]
    wrong = "; ".join(f"{name} {dists.version(name)} requires torch{needs[name]}"
                      for name in conflicts)
    vllm_off = any(name in VLLM_DISTRIBUTIONS for name in conflicts)
    return Finding(
        "install-set", FAIL,
        f"torch {torch} is installed but {wrong}: installing one after the other replaced "
        f"torch. This release's set is torch {wanted or '?'}.* with torch-npu"
        f"{torch_npu_pin(dists) or ''} and vLLM >={lo},<{hi}",
        fix=f"pip install {' '.join(line)}", scope=ANY if vllm_off else NPU,
        details={"torch": torch, "conflicts": {n: needs[n] for n in conflicts}})
