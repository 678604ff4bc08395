"""Where users fail: a torch-npu that does not load (CANN's set_env.sh not sourced) breaks
``import torch`` itself, because torch loads every installed ``torch.backends`` entry point.
`vllm-ascend serve` and `vllm-ascend demo` say the doctor's cause and fix instead of torch's
"Failed to load the backend extension". Driven through the CLI in a child process with a fake
torch-npu on PYTHONPATH: its package raises the loader's error, its ``*.dist-info`` declares
the entry point the real wheel declares (never the real torch-npu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch_npu_double.record import load_record

RECORD = load_record("2.13.0")
LOADER_ERROR = "libhccl.so: cannot open shared object file: No such file or directory"
CLEARED = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "ATB_HOME_PATH",
           "LD_LIBRARY_PATH", "TORCH_DEVICE_BACKEND_AUTOLOAD", "VLLM_ASCEND_EMULATED_NPUS",
           "PYTHONPATH")


@pytest.fixture(scope="module")
def broken_torch_npu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PYTHONPATH entry holding torch-npu 2.13.0 (its recorded torch requirement) whose
    import fails the way a torch-npu without CANN's libraries does."""
    site = tmp_path_factory.mktemp("site")
    package = site / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text(f"raise ImportError({LOADER_ERROR!r})\n")
    info = site / "torch_npu-2.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.13.0\n"
        f"Requires-Dist: {RECORD['requires_torch']}\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return site


def run_cli(args: list[str], site: Path, home: Path,
            extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update({"PYTHONPATH": str(site), "HOME": str(home), **(extra or {})})
    return subprocess.run([sys.executable, "-m", "vllm_ascend.entrypoints.cli", *args],
                          env=env, capture_output=True, text=True, timeout=300)


def user_toolkit(home: Path) -> Path:
    """CANN installed per user (``~/Ascend/ascend-toolkit/latest``), its set_env.sh beside."""
    real = home / "Ascend" / "ascend-toolkit" / "9.1.0"
    (real / "lib64").mkdir(parents=True)
    (real.parent / "latest").symlink_to(real.name)
    (real.parent / "set_env.sh").write_text("# CANN environment\n")
    return real.parent


def test_the_fake_breaks_import_torch_as_torch_npu_does(broken_torch_npu: Path,
                                                        tmp_path: Path) -> None:
    """The premise: with the fake installed, torch's own import fails with its wrapper."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env["PYTHONPATH"] = str(broken_torch_npu)
    proc = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    assert "Failed to load the backend extension: torch_npu" in proc.stderr
    assert LOADER_ERROR in proc.stderr


@pytest.mark.parametrize("device", ["npu", "auto"])
def test_serve_names_the_unsourced_cann_and_its_set_env(broken_torch_npu: Path, tmp_path: Path,
                                                        device: str) -> None:
    toolkit = user_toolkit(tmp_path)
    proc = run_cli(["serve", str(tmp_path / "model")], broken_torch_npu, tmp_path,
                   {"VLLM_ASCEND_DEVICE": device})
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    line = lines[0]
    assert line.startswith("vllm-ascend serve: error: import torch failed: torch loads the "
                           "installed torch-npu as its NPU backend, and importing torch-npu "
                           f"failed (ImportError: {LOADER_ERROR}). Cause (cann-env): CANN's "
                           "environment is not sourced in this shell: ASCEND_TOOLKIT_HOME is "
                           "not set; ASCEND_HOME_PATH is not set; ASCEND_OPP_PATH is not set; "
                           f"LD_LIBRARY_PATH does not hold {toolkit}/latest/lib64. "
                           f"Fix: source {toolkit}/set_env.sh.")
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in line
    assert "Failed to load the backend extension" not in line


def test_demo_without_any_cann_says_to_install_it(broken_torch_npu: Path,
                                                  tmp_path: Path) -> None:
    proc = run_cli(["demo", "--model", "qwen3"], broken_torch_npu, tmp_path)
    assert proc.returncode == 1, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("vllm-ascend demo:")]
    assert len(error) == 1, proc.stderr
    assert error[0].startswith("vllm-ascend demo: error: import torch failed: ")
    assert f"(ImportError: {LOADER_ERROR}). Cause (cann): no CANN toolkit found" in error[0]
    assert "Fix: install the CANN toolkit " in error[0]
    assert "Traceback" not in proc.stderr
    assert "Failed to load the backend extension" not in proc.stderr


def test_torch_npu_built_for_another_torch_is_the_cause_named_first(
        broken_torch_npu: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    for entry in broken_torch_npu.iterdir():
        (site / entry.name).symlink_to(entry)
    # the same wheel, said to be built for torch 2.14: the version check is the first cause
    info = site / "torch_npu-2.13.0.dist-info"
    info.unlink()
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.13.0\n"
                                   "Requires-Dist: torch==2.14.0.*\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    user_toolkit(tmp_path)
    proc = run_cli(["serve", str(tmp_path / "model")], site, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert ("Cause (torch-npu): torch-npu 2.13.0 is built for torch==2.14.0.*, but torch 2.13.0 "
            'is installed: import torch fails while torch-npu is installed. Fix: pip install '
            '"torch==2.13.*" "torch-npu==2.13.*".') in proc.stderr


# --- the doctor: torch-npu is imported only in its probe's child, which has a time limit ----

def doctor_with(site: Path, home: Path, package_code: str,
                *argv: str) -> tuple[int, dict[str, object], int, float]:
    """Run ``vllm-ascend doctor --json`` with a torch-npu whose package runs
    ``package_code``; (exit status, report, the doctor's pid, seconds it took)."""
    import time

    package = site / "torch_npu"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(package_code)
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update({"PYTHONPATH": str(site), "HOME": str(home)})
    start = time.monotonic()
    with subprocess.Popen([sys.executable, "-m", "vllm_ascend.entrypoints.cli", "doctor",
                           "--json", *argv], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=600)
    assert out, err
    return proc.returncode, json.loads(out), proc.pid, time.monotonic() - start


def installed_fake(tmp_path: Path, broken_torch_npu: Path) -> Path:
    """A copy of the fake torch-npu's metadata (its package is written per test)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "torch_npu-2.13.0.dist-info").symlink_to(broken_torch_npu /
                                                     "torch_npu-2.13.0.dist-info")
    return site


def probe_of(report: dict[str, object]) -> dict[str, str]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return next(f for f in findings if f["check"] == "torch-npu-import")


def test_doctor_imports_torch_npu_only_in_its_probe_child(broken_torch_npu: Path,
                                                          tmp_path: Path) -> None:
    log = tmp_path / "imported-by"
    site = installed_fake(tmp_path, broken_torch_npu)
    code, report, pid, _ = doctor_with(
        site, tmp_path, f"import os\nwith open({str(log)!r}, 'a') as f:\n"
        f"    f.write(f'{{os.getpid()}}\\n')\nraise ImportError({LOADER_ERROR!r})\n")
    importers = {int(line) for line in log.read_text().split()}
    assert importers and pid not in importers  # imported, by the probe's child only
    probe = probe_of(report)
    assert probe["verdict"] == "fail"
    assert probe["summary"].startswith("import torch fails: RuntimeError: Failed to load the "
                                       "backend extension: torch_npu")
    assert code == 1  # torch itself does not import here: no platform can serve


def test_a_probe_that_hangs_is_killed_at_its_time_limit(broken_torch_npu: Path,
                                                        tmp_path: Path) -> None:
    site = installed_fake(tmp_path, broken_torch_npu)
    code, report, _, took = doctor_with(site, tmp_path, "import time\ntime.sleep(600)\n",
                                        "--probe-timeout", "20")
    probe = probe_of(report)
    assert probe["verdict"] == "fail"
    assert probe["summary"].startswith("import torch_npu fails: the import did not finish in "
                                       "20 s")
    assert took < 300  # not the 600 s the import would take
    assert code == 0  # on this host without NPUs the host-CPU verdict stands


def test_a_probe_that_crashes_is_a_finding_not_a_crash(broken_torch_npu: Path,
                                                       tmp_path: Path) -> None:
    site = installed_fake(tmp_path, broken_torch_npu)
    code, report, _, _ = doctor_with(site, tmp_path, "import os\nos.abort()\n")
    probe = probe_of(report)
    assert probe["verdict"] == "fail"
    assert probe["summary"].startswith("import torch_npu fails: the child exited with -6")
    assert code == 0  # the doctor itself finished its report


def test_another_backend_whose_name_starts_with_torch_npu_is_not_taken_for_torch_npu(
        tmp_path: Path) -> None:
    """Only the entry point named ``torch_npu`` is torch-npu's; another package's backend
    (here ``torch_npu_extra``) gets its own error, not the CANN advice."""
    site = tmp_path / "site"
    (site / "torch_npu_extra").mkdir(parents=True)
    (site / "torch_npu_extra" / "__init__.py").write_text(
        "def _autoload():\n    raise ValueError('TORCH_NPU_EXTRA_SETTING is wrong')\n")
    info = site / "torch_npu_extra-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-npu-extra\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[torch.backends]\ntorch_npu_extra = torch_npu_extra:_autoload\n")
    proc = run_cli(["serve", str(tmp_path / "model")], site, tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "vllm-ascend serve: error: import torch failed: the device backend 'torch_npu_extra' "
        "(an entry point of torch.backends) did not load: ValueError: TORCH_NPU_EXTRA_SETTING "
        "is wrong; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns torch's backend autoload off"], \
        proc.stderr
