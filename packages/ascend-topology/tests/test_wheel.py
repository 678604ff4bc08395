"""The built wheel alone (plus psutil) plans a bundled example host in a fresh venv."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_plans_an_example(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*args], capture_output=True, text=True, timeout=300,
                              check=False, cwd=tmp_path)

    built = run(uv, "build", str(PACKAGE), "--wheel", "--out-dir", str(tmp_path / "dist"))
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("ascend_topology-*.whl")
    assert run(uv, "venv", "-q", str(tmp_path / "venv")).returncode == 0
    python = tmp_path / "venv" / "bin" / "python"
    installed = run(uv, "pip", "install", "-q", "--python", str(python), str(wheel))
    if installed.returncode != 0:
        pytest.skip(f"cannot install psutil into a fresh venv: {installed.stderr[-300:]}")
    done = run(str(tmp_path / "venv" / "bin" / "ascend-topology"), "plan", "--host", "a2-8npu")
    assert done.returncode == 0, done.stderr
    assert "7     7    6     100%     156-167" in done.stdout
    modules = run(str(python), "-c", "import ascend_topology, sys; print(len(sys.modules))")
    assert modules.returncode == 0
