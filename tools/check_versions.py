#!/usr/bin/env python3
"""Check that the workspace's version pins agree with its members (stdlib only).

uv does not notice a stale pin: the meta package ``vllm-ascend`` pins each sibling library with
``==``, and a member whose version moved without the pin would publish an uninstallable set.
This script fails when

* the meta package does not pin every published sibling with ``==`` to that sibling's current
  version (a member with the classifier ``Private :: Do Not Upload``, the test harness, is not
  published and not pinned),
* a library depends on a sibling through a range that excludes the sibling's current version,
* a sibling is not declared as a workspace source (``{ workspace = true }``) at the root,
* the torch-npu release in ``uv.lock`` requires another torch than the one locked there
  (its ``Requires-Dist: torch`` is read from ``torch_npu_double/torch_npu-<version>.json``,
  which ``tools/torch_npu_schemas.py`` writes from the wheel; torch_npu only imports with
  the torch release it was built for).

``--fix`` rewrites the meta package's pins in place (nothing else is touched).
Usage: ``python tools/check_versions.py [--root DIR] [--fix]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

META_PACKAGE = "vllm-ascend"
# Index servers refuse uploads with this classifier; such a member is never published.
PRIVATE_CLASSIFIER = "Private :: Do Not Upload"
# Where tools/torch_npu_schemas.py writes the records (the torch_npu double's package data).
RECORDS = Path("packages/torch-npu-double/src/torch_npu_double")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*)")
_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")


@dataclass(frozen=True)
class Member:
    """One workspace member: its distribution name, version, dependencies and pyproject path."""

    name: str
    version: str
    dependencies: tuple[str, ...]
    pyproject: Path
    private: bool = False


def normalise(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        parts.append(int(digits.group()) if digits else 0)
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)


def satisfies(version: str, specifier: str) -> bool:
    """Whether a plain release ``version`` satisfies a comma-separated ``specifier``."""
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = _CLAUSE.match(clause)
        if match is None:
            raise ValueError(f"cannot read version clause {clause!r}")
        op, bound = match.groups()
        if bound.endswith(".*"):
            # Prefix match on the release segments as written (PEP 440): 2.13.1 is not
            # ==2.13.0.*, so trailing zeros count here; missing segments are zeros.
            prefix = _release(bound[:-2])
            have = _release(version)
            have = have + (0,) * (len(prefix) - len(have))
            same = have[: len(prefix)] == prefix
            if (op == "==" and not same) or (op == "!=" and same):
                return False
            continue
        have, want = _version_key(version), _version_key(bound)
        ok = {
            "==": have == want,
            "===": version == bound,
            "!=": have != want,
            "<=": have <= want,
            ">=": have >= want,
            "<": have < want,
            ">": have > want,
            "~=": have >= want and have[: len(want) - 1] == want[: len(want) - 1],
        }[op]
        if not ok:
            return False
    return True


def load_members(root: Path) -> dict[str, Member]:
    """Read every workspace member named by the root's ``[tool.uv.workspace] members`` globs."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config.get("tool", {}).get("uv", {}).get("workspace", {}).get("members", [])
    members: dict[str, Member] = {}
    for pattern in globs:
        for folder in sorted(root.glob(pattern)):
            pyproject = folder / "pyproject.toml"
            if not pyproject.is_file():
                continue
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
            name = normalise(str(project.get("name", folder.name)))
            members[name] = Member(
                name=name,
                version=str(project.get("version", "")),
                dependencies=tuple(project.get("dependencies", [])),
                pyproject=pyproject,
                private=PRIVATE_CLASSIFIER in project.get("classifiers", []),
            )
    return members


def _parse_requirement(requirement: str) -> tuple[str, str]:
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"cannot read requirement {requirement!r}")
    return normalise(match.group(1)), match.group(2).strip()


def check(root: Path) -> list[str]:
    """Every problem found in the workspace at ``root``, one readable line each."""
    problems: list[str] = []
    members = load_members(root)
    if not members:
        return [f"{root / 'pyproject.toml'}: no workspace members found"]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    sources = {
        normalise(k): v for k, v in config.get("tool", {}).get("uv", {}).get("sources", {}).items()
    }
    for name in sorted(members):
        if not (isinstance(sources.get(name), dict) and sources[name].get("workspace") is True):
            problems.append(
                f"root pyproject.toml: [tool.uv.sources] {name} must be {{ workspace = true }}"
            )
    for member in members.values():
        for requirement in member.dependencies:
            dep, spec = _parse_requirement(requirement)
            if dep not in members:
                continue
            sibling = members[dep]
            where = f"{member.pyproject}: {member.name} -> {dep}"
            if member.name == META_PACKAGE and spec != f"=={sibling.version}":
                problems.append(
                    f"{where}: pinned {spec or '(unpinned)'!s}, must be =={sibling.version}"
                )
            elif member.name != META_PACKAGE and not spec:
                problems.append(f"{where}: needs a version range that admits {sibling.version}")
            elif spec and not satisfies(sibling.version, spec):
                problems.append(f"{where}: {spec} excludes the member's version {sibling.version}")
    meta = members.get(META_PACKAGE)
    if meta is not None:
        pinned = {_parse_requirement(r)[0] for r in meta.dependencies}
        published = {name for name, member in members.items() if not member.private}
        for name in sorted(published - pinned - {META_PACKAGE}):
            problems.append(f"{meta.pyproject}: {META_PACKAGE} does not depend on sibling {name}")
    return problems


def locked_versions(lock: Path) -> dict[str, set[str]]:
    """``{package name: {versions}}`` of a ``uv.lock``."""
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    versions: dict[str, set[str]] = {}
    for package in data.get("package", []):
        versions.setdefault(normalise(package["name"]), set()).add(str(package.get("version")))
    return versions


def check_torch_npu(root: Path) -> list[str]:
    """The locked torch-npu must require the locked torch (per its recorded METADATA)."""
    lock = root / "uv.lock"
    if not lock.is_file():
        return []
    versions = locked_versions(lock)
    npu, torch = sorted(versions.get("torch-npu", set())), sorted(versions.get("torch", set()))
    if not npu:
        return []
    if len(npu) != 1 or len(torch) != 1:
        return [f"{lock}: expected one torch and one torch-npu version, got torch {torch},"
                f" torch-npu {npu}"]
    record_path = root / RECORDS / f"torch_npu-{npu[0]}.json"
    if not record_path.is_file():
        return [f"{lock}: torch-npu {npu[0]} has no record {record_path.relative_to(root)};"
                f" run `python tools/torch_npu_schemas.py --version {npu[0]}`"]
    record = json.loads(record_path.read_text(encoding="utf-8"))
    requirement = str(record.get("requires_torch", ""))
    if record.get("torch_npu_version") != npu[0] or not requirement.startswith("torch"):
        return [f"{record_path}: not a torch-npu {npu[0]} record with a torch requirement"]
    spec = requirement.removeprefix("torch").strip()
    if not satisfies(torch[0], spec):
        return [f"{lock}: torch-npu {npu[0]} requires {requirement} but torch {torch[0]} is"
                " locked; pin torch-npu to the release built for the locked torch"]
    return []


def fix(root: Path) -> list[str]:
    """Rewrite the meta package's sibling pins to ``==<version>``; returns what changed."""
    members = load_members(root)
    meta = members.get(META_PACKAGE)
    if meta is None:
        return []
    text = meta.pyproject.read_text(encoding="utf-8")
    changes: list[str] = []
    for requirement in meta.dependencies:
        dep, spec = _parse_requirement(requirement)
        if dep in members and spec != f"=={members[dep].version}":
            wanted = f"{dep}=={members[dep].version}"
            text = text.replace(f'"{requirement}"', f'"{wanted}"', 1)
            changes.append(f"{requirement} -> {wanted}")
    if changes:
        meta.pyproject.write_text(text, encoding="utf-8")
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--fix", action="store_true", help="rewrite stale == pins in place")
    args = parser.parse_args(argv)
    if args.fix:
        for change in fix(args.root):
            print(f"fixed: {change}")
    problems = check(args.root) + check_torch_npu(args.root)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        print(
            f"{len(problems)} version problem(s); run with --fix to rewrite pins", file=sys.stderr
        )
        return 1
    print(f"versions ok: {len(load_members(args.root))} members")
    return 0


if __name__ == "__main__":
    sys.exit(main())
