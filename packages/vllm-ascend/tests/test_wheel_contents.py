"""The published `vllm-ascend` wheel: no test harness in it, and every module it ships imports
with only what the wheel declares (plus vLLM and torch, expected at run time; never torch_npu).

The wheel is built from this checkout (`uv build`, offline). Its modules are imported from the
installed workspace copy in one fresh interpreter (`python -I`) whose import system refuses every
top-level package outside the allowed set:

- a `vllm_ascend` module itself may import the standard library, the closure of the wheel's
  `Requires-Dist` (every extra but `npu`), and vLLM and torch;
- anything else (vLLM, torch, transformers, ...) may also import the closure of the installed
  vLLM and torch distributions;
- a module of the interpreter's own library folders is always allowed, and so is, for anything
  but `vllm_ascend`, a package an allowed package vendors (setuptools' copy of jaraco);
- a package that is not installed is simply absent, as it is in a clean environment.
- `torch_npu` is refused to everybody: the plugin imports it lazily, so importing a module must
  never reach it (transformers and accelerate only look it up to list what is available).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

WORKSPACE = Path(__file__).resolve().parents[3]
PACKAGE = "vllm_ascend"
HARNESS = "vllm_ascend_testing"
# Installed at run time by the user, for the device: vllm and torch come in device-specific
# builds, so the wheel cannot declare them.
RUN_TIME_EXPECTED = ("vllm", "torch")
NEVER_IMPORTED = "torch_npu"

# Runs in the fresh interpreter: argv[1] is a JSON file {"modules", "direct", "wide", "own",
# "never", "path"} ("path": folders put first on sys.path).
_PROBE = r'''
import importlib, importlib.abc, json, os, site, sys, sysconfig, traceback

spec = json.load(open(sys.argv[1], encoding="utf-8"))
direct, wide, own, never = set(spec["direct"]), set(spec["wide"]), spec["own"], spec["never"]
sys.path[:0] = spec["path"]
refused = []
# The interpreter's own library folders (private stdlib modules such as _sysconfigdata_*).
# In a virtual environment "platstdlib" names the environment: ask for the base interpreter's.
base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
stdlib_dirs = sorted({os.path.realpath(sysconfig.get_paths(vars=base)[k])
                      for k in ("stdlib", "platstdlib")})
site_dirs = [os.path.realpath(d) for d in site.getsitepackages()]


def importer_name():
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_globals.get("__name__", "").startswith("importlib")):
        frame = frame.f_back
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


class Gate(importlib.abc.MetaPathFinder):
    """The only finder: a refused top-level package is absent (to `import` and to
    `importlib.util.find_spec` alike); everything else goes to the interpreter's finders."""

    def __init__(self, finders):
        self.finders = finders

    def find_spec(self, fullname, path=None, target=None):
        if fullname == never:  # refused and recorded even where it is not installed
            refused.append({"name": fullname, "by": importer_name()})
            return None
        spec = self.inner_spec(fullname, path, target)
        if spec is None or "." in fullname:
            return spec
        by = importer_name()
        if self.allowed(fullname, spec, by == own or by.startswith(own + ".")):
            return spec
        refused.append({"name": fullname, "by": by})
        return None

    def inner_spec(self, fullname, path, target):
        for finder in self.finders:
            found = getattr(finder, "find_spec", None)
            spec = found(fullname, path, target) if found else None
            if spec is not None:
                return spec
        return None

    def find_distributions(self, *args, **kwargs):  # importlib.metadata asks the finders
        for finder in self.finders:
            yield from getattr(finder, "find_distributions", lambda *a, **k: ())(*args, **kwargs)

    def invalidate_caches(self):
        for finder in self.finders:
            getattr(finder, "invalidate_caches", lambda: None)()

    @staticmethod
    def allowed(name, spec, mine):
        if name in (direct if mine else wide):
            return True
        where = spec.origin or next(iter(spec.submodule_search_locations or ()), "")
        origin = os.path.realpath(where)
        for site_dir in site_dirs:
            if origin.startswith(site_dir + os.sep):
                # A package an allowed package vendors (setuptools' jaraco) counts as that
                # package, for anybody but the plugin.
                top = origin[len(site_dir) + 1:].split(os.sep)[0]
                return not mine and top != name and top in wide
        return any(origin.startswith(d + os.sep) for d in stdlib_dirs)


sys.meta_path[:] = [Gate(list(sys.meta_path))]
results = {}
for module in spec["modules"]:
    try:
        importlib.import_module(module)
        results[module] = None
    except BaseException:
        results[module] = traceback.format_exc()[-2500:]
print(json.dumps({"results": results, "refused": refused,
                  "origin": sys.modules[own].__file__,
                  "loaded": sorted({m.partition(".")[0] for m in sys.modules})}))
'''


def _top_levels() -> dict[str, set[str]]:
    """Installed distribution (normalised name) -> the top-level import names it provides."""
    provided: dict[str, set[str]] = {}
    for top, dists in metadata.packages_distributions().items():
        for dist in dists:
            provided.setdefault(_normalise(dist), set()).add(top)
    return provided


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: Iterable[Requirement], extras_of_root: set[str]) -> set[str]:
    """Normalised names of the installed distributions `requirements` need, transitively
    (markers evaluated for this interpreter; `extras_of_root` for the first level)."""
    seen: set[str] = set()
    done: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements were queued
    pending = [(req, extras_of_root or {""}) for req in requirements]
    while pending:
        req, extras = pending.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = _normalise(req.name)
        wanted = {e for e in set(req.extras) | {""} if (name, e) not in done}
        if not wanted:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed cannot be imported anyway
        seen.add(name)
        done.update((name, e) for e in wanted)
        pending += [(Requirement(r), wanted) for r in dist.requires or ()]
    return seen


def _tops(dists: set[str], provided: dict[str, set[str]]) -> set[str]:
    # Editable workspace members carry no file list: their import name is their own name.
    return set().union(*(provided.get(d) or {d.replace("-", "_")} for d in dists))


def _probe(modules: list[str], direct: set[str], wide: set[str], own: str, folder: Path,
           path: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Import `modules` in a fresh `python -I` behind the gate; the probe's report."""
    spec = folder / "probe.json"
    spec.write_text(json.dumps({"modules": modules, "direct": sorted(direct),
                                "wide": sorted(wide), "own": own, "never": NEVER_IMPORTED,
                                "path": [str(p) for p in path]}))
    flags = ["-X", f"pycache_prefix={sys.pycache_prefix}"] if sys.pycache_prefix else []
    probe = subprocess.run([sys.executable, "-I", *flags, "-c", _PROBE, str(spec)],
                           cwd=folder, capture_output=True, text=True, timeout=300,
                           # torch's device-backend autoload imports the dev environment's own
                           # plugins (the harness's emulated NPU) during `import torch`: not an
                           # import of the package under test, and refused by the gate.
                           env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert probe.returncode == 0, probe.stderr[-3000:]
    report: dict[str, Any] = json.loads(probe.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The vllm-ascend wheel built from this checkout (offline from uv's cache when it holds
    the build backend, else from the index)."""
    uv = shutil.which("uv")
    command = [uv] if uv else [sys.executable, "-m", "uv"]
    out = tmp_path_factory.mktemp("wheel")
    # The suite points HOME at a scratch folder; uv's cache lives under the user's real home.
    env = {**os.environ, "HOME": pwd.getpwuid(os.getuid()).pw_dir}
    build = [*command, "build", "--wheel", "--package", "vllm-ascend", "--quiet", "-o", str(out)]
    offline = subprocess.run([*build, "--offline"], cwd=WORKSPACE, env=env, timeout=300,
                             capture_output=True, text=True)
    if offline.returncode != 0:
        subprocess.run(build, cwd=WORKSPACE, env=env, check=True, timeout=300)
    (built,) = out.glob("vllm_ascend-*.whl")
    return built


@pytest.fixture(scope="module")
def shipped(wheel: Path) -> tuple[list[str], str, str]:
    """(files in the wheel, its METADATA text, its entry_points.txt text)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        (entry,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        return names, archive.read(meta).decode(), archive.read(entry).decode()


def _modules(files: list[str]) -> list[str]:
    paths = [f.removesuffix(".py") for f in files if f.endswith(".py")]
    return sorted(p.removesuffix("/__init__").replace("/", ".") for p in paths)


def _harness_module_names() -> set[str]:
    import vllm_ascend_testing

    folder = Path(vllm_ascend_testing.__file__).parent
    return {p.stem for p in folder.glob("*.py")} - {"__init__"}


def test_the_wheel_ships_no_test_harness(shipped: tuple[list[str], str, str]) -> None:
    files, _, _ = shipped
    tops = {f.split("/", 1)[0] for f in files}
    assert tops == {PACKAGE, "vllm_ascend-0.1.0.dist-info"}
    parts = [Path(f).parts for f in files]
    assert not [f for f, p in zip(files, parts, strict=True)
                if {"testing", "tests"} & set(p) or p[-1] == "conftest.py"
                or p[-1].startswith("test_")]
    harness = _harness_module_names()
    assert harness, "the harness package lists no modules"
    stems = {Path(f).stem for f in files if f.endswith(".py")}
    assert not stems & harness, f"harness modules in the wheel: {sorted(stems & harness)}"


def test_the_wheel_ships_every_source_module(shipped: tuple[list[str], str, str]) -> None:
    files, _, _ = shipped
    source = WORKSPACE / "packages" / "vllm-ascend" / "src"
    expected = sorted(str(p.relative_to(source)) for p in (source / PACKAGE).rglob("*.py"))
    assert sorted(f for f in files if f.endswith(".py")) == expected


def test_console_script_and_plugins_point_into_the_wheel(
    shipped: tuple[list[str], str, str],
) -> None:
    files, _, entry_points = shipped
    assert "vllm-ascend = vllm_ascend.entrypoints.cli:main" in entry_points.splitlines()
    modules = set(_modules(files))
    targets = re.findall(r"=\s*([\w.]+):", entry_points)
    assert targets and set(targets) <= modules


def test_every_shipped_module_imports_with_declared_dependencies_only(
    shipped: tuple[list[str], str, str], tmp_path: Path,
) -> None:
    files, meta_text, _ = shipped
    meta = Parser().parsestr(meta_text)
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist") or ()]
    extras = set(meta.get_all("Provides-Extra") or ()) - {"npu"}
    provided = _top_levels()
    declared = _closure(requires, extras | {""})
    assert {"ascend-config", "ascend-topology", "ascend-kernels", "ascend-graph"} <= declared
    run_time = {d for top in RUN_TIME_EXPECTED for d in metadata.packages_distributions()[top]}
    expected = _closure([Requirement(d) for d in run_time], set())
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {"__main__"}
    direct = stdlib | _tops(declared, provided) | set(RUN_TIME_EXPECTED) | {PACKAGE}
    wide = direct | _tops(expected, provided)
    assert HARNESS not in wide and NEVER_IMPORTED not in wide
    report = _probe(_modules(files), direct, wide, PACKAGE, tmp_path)
    failed = {m: err for m, err in report["results"].items() if err is not None}
    assert not failed, "\n".join(f"{m}:\n{err}" for m, err in failed.items())
    mine = [r for r in report["refused"] if r["by"].split(".")[0] == PACKAGE]
    assert not mine, f"vllm_ascend imported undeclared packages: {mine}"
    # transformers and accelerate look torch_npu up (find_spec) to report what is available;
    # that never imports it. The plugin's own modules must not even ask.
    npu = {r["by"].split(".")[0] for r in report["refused"] if r["name"] == NEVER_IMPORTED}
    assert npu <= {"transformers", "accelerate"}, f"torch_npu was asked for by {npu}"
    assert NEVER_IMPORTED not in report["loaded"] and HARNESS not in report["loaded"]
    assert Path(report["origin"]).is_relative_to(WORKSPACE / "packages" / "vllm-ascend" / "src")


def test_the_gate_refuses_what_a_package_does_not_declare(tmp_path: Path) -> None:
    # A throw-away package whose modules import: the stdlib only, an installed package it does
    # not declare (httpx), and torch_npu behind an ImportError guard.
    pkg = tmp_path / "src" / "gated_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plain.py").write_text("import json\n")
    (pkg / "undeclared.py").write_text("import httpx\n")
    (pkg / "npu.py").write_text("try:\n    import torch_npu\nexcept ImportError:\n    pass\n")
    stdlib = set(sys.stdlib_module_names) | {"gated_pkg"}
    report = _probe(["gated_pkg.plain", "gated_pkg.undeclared", "gated_pkg.npu"],
                    stdlib, stdlib | {"httpx"}, "gated_pkg", tmp_path, (tmp_path / "src",))
    results = report["results"]
    assert results["gated_pkg.plain"] is None and results["gated_pkg.npu"] is None
    assert "No module named 'httpx'" in results["gated_pkg.undeclared"]
    refused = {(r["name"], r["by"]) for r in report["refused"]}
    assert refused == {("httpx", "gated_pkg.undeclared"), ("torch_npu", "gated_pkg.npu")}
