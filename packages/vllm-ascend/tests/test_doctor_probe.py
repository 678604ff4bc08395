"""The doctor's import probe through `vllm-ascend doctor` (its console script, in a child
process): planted modules in the working directory are not run, and a probe that overruns its
time limit leaves no process behind. torch and torch-npu are fakes on PYTHONPATH (a
``torch_npu`` distribution makes the doctor probe; the real torch is never imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

DOCTOR = Path(sys.executable).parent / "vllm-ascend"
CLEARED = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "ATB_HOME_PATH",
           "LD_LIBRARY_PATH", "VLLM_ASCEND_DEVICE", "PYTHONPATH", "PYTHONSAFEPATH")


def fake_site(site: Path, torch_code: str, torch_npu_code: str) -> Path:
    """``torch`` and ``torch_npu`` packages running the given code, and torch-npu's metadata."""
    for name, code in (("torch", torch_code), ("torch_npu", torch_npu_code)):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(code + "\n")
    info = site / "torch_npu-2.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.13.0\n")
    return site


def run_doctor(cwd: Path, site: Path, *argv: str,
               extra: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update({"PYTHONPATH": str(site), **(extra or {})})
    done = subprocess.run([str(DOCTOR), "doctor", "--json", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def probe_of(report: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["check"] == "torch-npu-import")


def test_modules_planted_in_the_working_directory_do_not_run(tmp_path: Path) -> None:
    site = fake_site(tmp_path / "site", "", 'raise ImportError("the site torch_npu ran")')
    here = tmp_path / "cwd"
    here.mkdir()
    marker = tmp_path / "planted-code-ran"
    for name in ("json", "torch", "torch_npu"):
        (here / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    _, report = run_doctor(here, site)
    assert not marker.exists(), marker.read_text()
    # the probe ran, with the environment's modules (PYTHONPATH kept)
    assert probe_of(report)["summary"].startswith(
        "import torch_npu fails: ImportError: the site torch_npu ran")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_overrunning_probe_leaves_no_process_behind(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    sleeper = "import time; time.sleep(300)"
    # torch's import starts a process in its group and one in a session of its own, then hangs
    torch_code = (
        "import os, subprocess, sys, time\n"
        f"a = subprocess.Popen([sys.executable, '-c', {sleeper!r}])\n"
        f"b = subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{a.pid}} {{b.pid}}')\n"
        "time.sleep(300)\n")
    site = fake_site(tmp_path / "site", torch_code, "")
    started: list[int] = []
    try:
        _, report = run_doctor(tmp_path, site, "--probe-timeout", "8")
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 3
        probe = probe_of(report)
        assert probe["verdict"] == "fail"
        assert "the import did not finish in 8 s" in probe["summary"]
        assert [pid for pid in started if _alive(pid)] == []
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, 9)
