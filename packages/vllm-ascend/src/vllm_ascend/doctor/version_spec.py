"""Just enough PEP 440 and PEP 508 to compare installed releases with this release's pins and to
read a ``Requires-Dist`` (local labels and pre/post suffixes are ignored).
"""

from __future__ import annotations

import re

_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;)]*)\)?"
                          r"\s*(?:;\s*(.*))?$")
_DIRECT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*@\s*\S+"
                     r"(?:\s+;\s*(.*?))?\s*$")


def normalise(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """The release numbers of ``version`` (``2.13.0+cpu`` -> (2, 13, 0))."""
    parts = []
    for piece in version.split("+", 1)[0].split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets every comma-separated clause of ``specifier``."""
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = _CLAUSE.match(clause)
        if match is None:
            raise ValueError(f"cannot read version clause {clause!r}")
        op, bound = match.groups()
        if bound.endswith(".*"):
            prefix = release(bound[:-2])
            have = release(version) + (0,) * len(prefix)
            same = have[: len(prefix)] == prefix
            if same != (op == "=="):
                return False
            continue
        have, want = _padded(release(version), release(bound))
        ok = {
            "==": have == want, "===": version == bound, "!=": have != want,
            "<=": have <= want, ">=": have >= want, "<": have < want, ">": have > want,
            "~=": have >= want and have[: len(release(bound)) - 1]
            == want[: len(release(bound)) - 1],
        }[op]
        if not ok:
            return False
    return True


def parse_requirement(text: str) -> tuple[str, str, str]:
    """(name, specifier, marker) of a ``Requires-Dist`` value; ``ValueError`` when unreadable."""
    direct = _DIRECT.match(text)
    if direct is not None:
        return normalise(direct.group(1)), "", (direct.group(2) or "").strip()
    match = _REQUIREMENT.match(text)
    if match is None:
        raise ValueError(f"cannot read requirement {text!r}")
    name, spec, marker = match.groups()
    spec = (spec or "").strip()
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        if _CLAUSE.match(clause) is None:
            raise ValueError(f"cannot read version clause {clause!r} of {text!r}")
    return normalise(name), spec, (marker or "").strip()


def readable_requirements(texts: list[str]) -> list[tuple[str, str, str]]:
    """:func:`parse_requirement` of each value it can read (damaged ones are left out)."""
    found = []
    for text in texts:
        try:
            found.append(parse_requirement(text))
        except ValueError:
            continue
    return found


def extra_of(marker: str) -> str | None:
    """The extra a requirement marker names (``extra == "npu"`` -> ``npu``), else None."""
    found = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
    return found.group(1) if found else None
