"""The five wheels build, carry matching pins, and install (topology alone; all with --no-deps)."""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
MEMBERS = ("ascend-config", "ascend-topology", "ascend-kernels", "ascend-graph", "vllm-ascend")
UV = shutil.which("uv") or "uv"


def _version(member: str) -> str:
    data = tomllib.loads((REPO / "packages" / member / "pyproject.toml").read_text())
    return str(data["project"]["version"])


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}
    }
    env["UV_PYTHON_DOWNLOADS"] = "never"
    result = subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        **kwargs,  # type: ignore[call-overload]
    )
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # The published members only: the workspace's test harness (vllm-ascend-testing) is never
    # built for release.
    for member in MEMBERS:
        _run(UV, "build", "--package", member, "--no-sources", "--wheel", "-o", str(out),
             cwd=REPO)
    built = sorted(out.glob("*.whl"))
    by_name = {w.name.split("-")[0].replace("_", "-"): w for w in built}
    assert len(built) == 5 and set(by_name) == set(MEMBERS), [w.name for w in built]
    return by_name


def test_exactly_five_wheels_with_their_versions(wheels: dict[str, Path]) -> None:
    for member, wheel in wheels.items():
        meta = _metadata(wheel)
        assert meta["Version"] == _version(member)
        assert meta["Requires-Python"] == ">=3.10"


def test_meta_package_pins_match_member_versions(wheels: dict[str, Path]) -> None:
    requires = _metadata(wheels["vllm-ascend"]).get_all("Requires-Dist") or []
    for sibling in MEMBERS[:-1]:
        assert f"{sibling}=={_version(sibling)}" in requires
    assert not any(r.startswith("vllm") and not r.startswith("vllm-ascend") for r in requires)
    npu_only = [r for r in requires if r.startswith("torch-npu")]
    assert npu_only and all("extra == 'npu'" in r or 'extra == "npu"' in r for r in npu_only)


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    _run(UV, "venv", "--python", sys.executable, str(venv))
    _run(UV, "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel))
    return venv


def test_topology_wheel_installs_alone_without_torch(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    venv = _fresh_venv(tmp_path, wheels["ascend-topology"])
    listed = _run(UV, "pip", "list", "--python", str(venv / "bin" / "python")).stdout.lower()
    assert "psutil" in listed and "torch" not in listed
    plan = _run(str(venv / "bin" / "ascend-topology"), "plan", "--host", "a2-8npu", "--json")
    assert '"npus"' in plan.stdout


def test_config_wheel_installs_alone_without_torch(wheels: dict[str, Path], tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path, wheels["ascend-config"])
    listed = _run(UV, "pip", "list", "--python", str(venv / "bin" / "python")).stdout.lower()
    assert "pydantic" in listed and "torch" not in listed
    schema = _run(str(venv / "bin" / "ascend-config"), "schema")
    assert '"properties"' in schema.stdout


def test_all_wheels_install_together_beside_the_workspace_dependencies(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "site"
    _run(
        UV,
        "pip",
        "install",
        "--python",
        sys.executable,
        "--no-deps",
        "--target",
        str(target),
        *map(str, wheels.values()),
    )
    code = (
        "import ascend_config, ascend_topology, ascend_kernels, ascend_graph, vllm_ascend\n"
        "mods = [ascend_config, ascend_topology, ascend_kernels, ascend_graph, vllm_ascend]\n"
        f"outside = [m.__file__ for m in mods if not m.__file__.startswith({str(target)!r})]\n"
        "assert not outside, outside\n"
        "import torch\n"
        "torch.ops.ascend.rms_norm\n"
        "print('ok')"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_wheels_carry_their_data_files(wheels: dict[str, Path]) -> None:
    # Non-Python files the packages open at run time through importlib.resources.
    expected = {
        "ascend-kernels": ["ascend_kernels/py.typed"],
    }
    for dist, names in expected.items():
        with zipfile.ZipFile(wheels[dist]) as archive:
            missing = sorted(set(names) - set(archive.namelist()))
        assert not missing, f"{dist} wheel lacks {missing}"


# What product code must never reach: the unpublished harness, the torch_npu double (where the
# emulated NPU lives), the repository's tools, or the emulation's switches (the same code runs
# on a real host).
FORBIDDEN_IMPORTS = ("vllm_ascend_testing", "torch_npu_double", "tools")
EMULATION_MARKERS = ("VLLM_ASCEND_EMULATED_", "npu_emulation", "_emulated_device")


def _imported_roots(source: str) -> set[str]:
    import ast

    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            roots.add(node.args[0].value.split(".")[0])
    return roots


def test_no_published_wheel_imports_the_harness_or_branches_on_emulation(
    wheels: dict[str, Path]
) -> None:
    problems = []
    scanned = 0
    for dist, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if not name.endswith(".py"):
                    continue
                source = archive.read(name).decode()
                scanned += 1
                bad = _imported_roots(source) & set(FORBIDDEN_IMPORTS)
                if bad:
                    problems.append(f"{dist}:{name} imports {sorted(bad)}")
                problems += [f"{dist}:{name} mentions {m!r}" for m in EMULATION_MARKERS
                             if m in source]
    assert scanned > 100  # every wheel's modules were read
    assert not problems, "\n".join(problems)


def test_the_scan_sees_a_harness_import_and_an_emulation_switch() -> None:
    assert _imported_roots("import vllm_ascend_testing.llm_worker as w") == {
        "vllm_ascend_testing"}
    assert _imported_roots("import torch_npu_double.emulation as e") == {"torch_npu_double"}
    assert _imported_roots("from tools.vllm_peer_support import x") == {"tools"}
    assert _imported_roots("importlib.import_module('vllm_ascend_testing')") == {
        "vllm_ascend_testing"}
    assert _imported_roots("from . import tools") == set()  # a relative sibling is not tools/
    source = "if os.environ.get('VLLM_ASCEND_EMULATED_NPUS'): pass"
    assert any(m in source for m in EMULATION_MARKERS)


def _requirement_names(member: str) -> set[str]:
    data = tomllib.loads((REPO / "packages" / member / "pyproject.toml").read_text())
    names = set()
    for requirement in data["project"].get("dependencies", []):
        name = requirement.split(";")[0]
        for stop in "<>=!~[ ":
            name = name.split(stop)[0]
        names.add(name.strip().lower().replace("_", "-"))
    return names


def test_the_torch_npu_double_depends_on_neither_vllm_nor_vllm_ascend() -> None:
    """The double (record, seam, emulation) must run without vLLM: its dependencies, and those
    of the workspace members it pulls in, name no vllm distribution."""
    members = {p.parent.name for p in (REPO / "packages").glob("*/pyproject.toml")}
    seen, pending = set(), ["torch-npu-double"]
    while pending:
        member = pending.pop()
        seen.add(member)
        pending += sorted(_requirement_names(member) & members - seen)
    names = set().union(*(_requirement_names(m) for m in seen))
    assert "ascend-kernels" in names  # the walk read the member's real dependency list
    assert not {n for n in names if n.startswith("vllm")}, sorted(names)
    assert not {m for m in seen if m.startswith("vllm")}, sorted(seen)
