"""Per-test outcomes from pytest's JUnit XML, and the stock-vs-plugin comparison of
``tools/vllm_peer_tests.py``.

A test id is ``<file>::<name>`` (``tests/test_envs.py::test_x[param]``); a file that failed
to import gets one id, ``<file>::<collection>``, whose outcome is ``error``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")
# A test that reports several outcomes (a failure and a teardown error) keeps the worst.
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
COLLECTION = "<collection>"
MISSING = "missing"


def module_of(path: str) -> str:
    """Dotted module of a test file: ``tests/v1/core/test_x.py`` -> ``tests.v1.core.test_x``."""
    if not path.endswith(".py"):
        raise ValueError(f"test file {path!r} is not a .py file")
    return path[: -len(".py")].replace("/", ".")


def file_of(classname: str, files: Iterable[str]) -> str | None:
    """The test file among ``files`` whose module ``classname`` is or lies in (a class in
    it); None when none is."""
    best: str | None = None
    for path in files:
        module = module_of(path)
        inside = classname == module or classname.startswith(module + ".")
        if inside and (best is None or len(path) > len(best)):
            best = path
    return best


def _outcome(case: ET.Element) -> str:
    kinds = {child.tag for child in case}
    if "error" in kinds:
        return "error"
    if "failure" in kinds:
        return "failed"
    if "skipped" in kinds:  # xfail is reported as skipped too
        return "skipped"
    return "passed"


def parse_junit(xml_text: str, files: Iterable[str]) -> dict[str, str]:
    """Outcome of every test in a pytest JUnit XML report, keyed by test id.

    ``files`` are the test files the run was given (paths relative to its working directory);
    a test case outside all of them raises ValueError (the report is not from this run).
    """
    listed = list(files)
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError(f"not a JUnit XML report: {exc}") from exc
    results: dict[str, str] = {}
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        if classname:
            path = file_of(classname, listed)
            test = name
        else:  # a collection error: pytest names the module in ``name``
            path = file_of(name, listed)
            test = COLLECTION
        if path is None:
            raise ValueError(f"test case {classname or name!r} is in none of the run's files")
        module = module_of(path)
        inner = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
        test_id = f"{path}::{inner}::{test}" if inner else f"{path}::{test}"
        outcome = _outcome(case)
        if _RANK[outcome] >= _RANK.get(results.get(test_id, "passed"), 0):
            results[test_id] = outcome
    return results


def read_junit(path: Path, files: Iterable[str]) -> dict[str, str]:
    """:func:`parse_junit` of the report file at ``path``."""
    return parse_junit(path.read_text(encoding="utf-8"), files)


@dataclass(frozen=True)
class Difference:
    """One test whose outcome differs between the two sides."""

    test_id: str
    stock: str
    plugin: str

    @property
    def regression(self) -> bool:
        """The plugin does worse: stock passed, the plugin did not pass."""
        return self.stock == "passed" and self.plugin != "passed"


def compare(stock: Mapping[str, str], plugin: Mapping[str, str]) -> list[Difference]:
    """Every test id whose outcome differs (a test one side lacks is ``missing`` there),
    sorted by id."""
    return [
        Difference(tid, stock.get(tid, MISSING), plugin.get(tid, MISSING))
        for tid in sorted(set(stock) | set(plugin))
        if stock.get(tid, MISSING) != plugin.get(tid, MISSING)
    ]


def file_counts(results: Mapping[str, str], path: str) -> Counter[str]:
    """Outcome counts of the tests of one file."""
    return Counter(o for tid, o in results.items() if tid.split("::", 1)[0] == path)


def _cell(counts: Counter[str]) -> str:
    return "/".join(str(counts[o]) for o in OUTCOMES)


def format_table(
    files: Iterable[str], stock: Mapping[str, str], plugin: Mapping[str, str]
) -> str:
    """One row per file: stock and plugin passed/failed/error/skipped counts and the number
    of tests whose outcome differs, then a total row."""
    differences = compare(stock, plugin)
    head = ("test file", "stock p/f/e/s", "plugin p/f/e/s", "diff")
    rows: list[tuple[str, str, str, str]] = []
    for path in files:
        diff = sum(1 for d in differences if d.test_id.split("::", 1)[0] == path)
        rows.append((path, _cell(file_counts(stock, path)), _cell(file_counts(plugin, path)),
                     str(diff)))
    rows.append(("total", _cell(Counter(stock.values())), _cell(Counter(plugin.values())),
                 str(len(differences))))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]

    def line(row: tuple[str, str, str, str]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True)))

    return "\n".join([line(head), *(line(r) for r in rows)])
