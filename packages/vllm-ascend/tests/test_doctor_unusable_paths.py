"""`vllm-ascend doctor` on the broken hosts it exists for never raises: a folder the user may
not enter, a value too long for the file system, a FIFO named like a library, an ELF with the
most section headers the format allows, an oversized ``/proc/meminfo``, a direct-reference
requirement, absolute symbolic links in a recorded tree. Each becomes a finding that names the
path; `vllm-ascend serve`'s one-line import-failure message survives the same environments.
The slow cases run the console script in a child with a time limit (the old code blocked or
took minutes there)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.cli import main

from .doctor_trees import ALL_ACLNN, TOOLKIT, cann_tree, fake_dist, proc_files, sourced_env, under

CLI = Path(sys.executable).parent / "vllm-ascend"
CLEARED = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "ATB_HOME_PATH",
           "LD_LIBRARY_PATH", "ASCEND_RT_VISIBLE_DEVICES", "VLLM_ASCEND_DEVICE", "PYTHONPATH",
           "TORCH_DEVICE_BACKEND_AUTOLOAD", "VLLM_ASCEND_EMULATED_NPUS")
NOBODY = 65534
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2  # <linux/prctl.h>, capability.h
MEMINFO_LIMIT = 64 << 10  # the bound the README states for /proc/meminfo
TOO_LONG = "/" + "x" * 300  # one name longer than NAME_MAX (255)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(extra)
    return env


def without_permission_override() -> None:
    """In the child before it runs the command: give up root's power to enter any folder
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH leave the bounding set, so the command runs
    without them): permission bits then apply to it as to any user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_child(argv: list[str], env: dict[str, str], timeout: float = 120,
              confined: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *argv], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, cwd="/",
                          preexec_fn=without_permission_override if confined else None)


def doctor_child(*argv: str, env: dict[str, str], timeout: float = 120,
                 confined: bool = False) -> tuple[int, dict[str, Any]]:
    done = run_child(["doctor", "--json", *argv], env, timeout, confined)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def by_check(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in report["findings"]}


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder holding ``locked``, a folder of another user (nobody) that only its owner may
    enter."""
    path = Path(tempfile.mkdtemp(prefix="doctor-shared-"))
    (path / "locked" / "toolkit" / "lib64").mkdir(parents=True)
    for folder in ("locked", "locked/toolkit", "locked/toolkit/lib64"):
        os.chown(path / folder, NOBODY, NOBODY)
    (path / "locked").chmod(0o700)
    yield path
    shutil.rmtree(path)


# --- folders the user may not enter, names too long: the doctor and serve's message ---------

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to chown the folder)")


@ROOT_ONLY
def test_paths_in_a_folder_the_user_cannot_enter_are_a_finding(shared_dir: Path) -> None:
    locked = shared_dir / "locked"
    toolkit, lib64 = f"{locked}/toolkit", f"{locked}/toolkit/lib64"
    code, report = doctor_child(env=child_env(ASCEND_TOOLKIT_HOME=toolkit,
                                              LD_LIBRARY_PATH=lib64), confined=True)
    assert code == 0  # the host-CPU platform still works
    unusable = by_check(report)["unusable-paths"]
    assert unusable["verdict"] == "warn"
    assert unusable["details"]["paths"][toolkit] == "Permission denied"
    assert unusable["details"]["paths"][lib64] == "Permission denied"
    assert by_check(report)["cann"]["summary"].startswith("no CANN toolkit found")


def test_values_too_long_for_the_file_system_are_a_finding(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", TOO_LONG)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/usr/lib:{TOO_LONG}/lib64")
    code = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    paths = by_check(report)["unusable-paths"]["details"]["paths"]
    assert paths == {f"{TOO_LONG[:160]}... (301 characters)": "File name too long",
                     f"{TOO_LONG[:160]}... (307 characters)": "File name too long"}


@pytest.fixture(scope="module")
def broken_torch_npu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch-npu 2.13.0 on a PYTHONPATH entry whose import fails as without CANN's libraries,
    with the ``torch.backends`` entry point the real wheel declares (so ``import torch``
    fails)."""
    site = tmp_path_factory.mktemp("site")
    (site / "torch_npu").mkdir()
    (site / "torch_npu" / "__init__.py").write_text('raise ImportError("libhccl.so: missing")\n')
    fake_dist(site, "torch-npu", "2.13.0", ["torch==2.13.0.*"])
    info = next(site.glob("*.dist-info"))
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return site


@pytest.mark.parametrize("case", ["too-long", pytest.param("not-enterable", marks=ROOT_ONLY)])
def test_serve_keeps_its_one_line_import_failure_message(broken_torch_npu: Path,
                                                         shared_dir: Path, tmp_path: Path,
                                                         case: str) -> None:
    toolkit = TOO_LONG if case == "too-long" else f"{shared_dir}/locked/toolkit"
    env = child_env(PYTHONPATH=str(broken_torch_npu), HOME=str(tmp_path),
                    ASCEND_TOOLKIT_HOME=toolkit)
    done = run_child(["serve", str(tmp_path / "model")], env, timeout=300,
                     confined=case == "not-enterable")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vllm-ascend serve: error: import torch failed: torch loads the "
                               "installed torch-npu as its NPU backend")
    assert "Cause (cann): no CANN toolkit found" in lines[0]


# --- a recorded tree (--root) with special, huge and odd files ---------------------------------

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    cann_tree(tmp_path)
    proc_files(tmp_path)
    return tmp_path


def test_a_fifo_named_like_an_operator_library_does_not_block(tree: Path) -> None:
    fifo = under(tree, f"{TOOLKIT}/lib64/libopapi_math.so")
    os.mkfifo(fifo)
    _, report = doctor_child("--root", str(tree), "--host", "a2-8npu",
                             env=child_env(**sourced_env()), timeout=120)
    kernels = by_check(report)["kernels"]
    assert kernels["verdict"] == "fail"
    assert kernels["summary"] == (f"cannot read the operator library {TOOLKIT}/lib64/"
                                  f"libopapi_math.so: {os.path.realpath(fifo)} is not a "
                                  "regular file")


def elf_with_every_section_header(path: Path, exported: list[str], filler: int) -> None:
    """An ELF64 library with 65,535 section headers (the most ``e_shnum`` holds): a
    ``.dynstr``, then 65,533 distinct ``SHT_DYNSYM`` headers over one table of ``exported``
    plus ``filler`` more symbols. The format allows one dynamic symbol table (the ELF gABI);
    a reader that walks every header reads that table 65,533 times."""
    names = [*exported, *(f"filler_{i}" for i in range(filler))]
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    offsets, at = [], 1
    for name in names:
        offsets.append(at)
        at += len(name) + 1
    symtab = bytes(24) + b"".join(struct.pack("<IBBHQQ", o, (1 << 4) | 2, 0, 1, 0, 0)
                                  for o in offsets)
    shnum = 65535
    str_off = 64
    sym_off = str_off + len(strtab)
    shoff = sym_off + len(symtab)

    def sh(name: int, kind: int, off: int, size: int, link: int, entsize: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, off, size, link, 0, 1, entsize)

    headers = [bytes(64), sh(0, 3, str_off, len(strtab), 0, 0)]
    headers += [sh(i, 11, sym_off, len(symtab), 1, 24) for i in range(2, shnum)]
    header = (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
              + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, shnum, 0))
    path.write_bytes(header + strtab + symtab + b"".join(headers))


def test_an_elf_with_65535_section_headers_is_read_in_linear_time(tree: Path) -> None:
    library = under(tree, f"{TOOLKIT}/lib64/libopapi.so")
    elf_with_every_section_header(library, ALL_ACLNN, filler=2000)
    # the old reader: 65,533 passes over 2,013 symbols, and a quadratic header search
    _, report = doctor_child("--root", str(tree), "--host", "a2-8npu",
                             env=child_env(**sourced_env()), timeout=60)
    assert by_check(report)["kernels"]["verdict"] == "ok"


@pytest.mark.parametrize(("size", "read"), [(MEMINFO_LIMIT, True), (MEMINFO_LIMIT + 1, False)])
def test_meminfo_is_read_up_to_its_bound(doctor_in_process: Any, tree: Path, size: int,
                                         read: bool) -> None:
    meminfo = under(tree, "/proc/meminfo")
    head = meminfo.read_bytes()
    meminfo.write_bytes(head + b"\n" * (size - len(head)))
    _, report = doctor_in_process("--root", str(tree))
    memory = by_check(report)["memory"]
    if read:
        assert memory["verdict"] == "ok" and "unusable-paths" not in by_check(report)
    else:
        assert memory["summary"] == "cannot read MemAvailable from /proc/meminfo"
        assert by_check(report)["unusable-paths"]["details"]["paths"] == {
            "/proc/meminfo": f"larger than {MEMINFO_LIMIT} bytes"}


def test_a_one_mib_meminfo_of_distinct_names_is_not_scanned_per_name(tree: Path) -> None:
    meminfo = under(tree, "/proc/meminfo")
    lines = meminfo.read_text() + "".join(f"Field{i}: {i} kB\n" for i in range(60000))
    meminfo.write_text(lines[: 1 << 20])
    _, report = doctor_child("--root", str(tree), env=child_env(), timeout=60)
    assert "/proc/meminfo" in by_check(report)["unusable-paths"]["details"]["paths"]


# --- odd metadata and links ------------------------------------------------------------------

@pytest.fixture
def doctor_in_process(monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> Any:
    def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        for name in CLEARED:
            monkeypatch.delenv(name, raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        code = main(["doctor", "--json", *argv])
        out, err = capsys.readouterr()
        assert err == ""
        return code, json.loads(out)

    return run


@pytest.mark.parametrize("requirement", [
    "torch @ file:///wheels/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl",
    'torch @ https://example.org/torch-2.13.0.whl ; python_version >= "3.10"',
])
def test_a_direct_reference_requirement_does_not_abort_the_report(
        doctor_in_process: Any, tree: Path, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch, requirement: str) -> None:
    site = tmp_path_factory.mktemp("site")
    fake_dist(site, "torch-npu", "2.13.0", [requirement])
    monkeypatch.syspath_prepend(str(site))
    code, report = doctor_in_process("--root", str(tree), "--host", "a2-8npu",
                                     env=sourced_env())
    assert code == 0
    torch_npu = by_check(report)["torch-npu"]
    assert torch_npu["verdict"] == "ok" and "built for torch ?" in torch_npu["summary"]


def test_absolute_links_of_a_recorded_tree_resolve_inside_it(doctor_in_process: Any,
                                                             tree: Path, tmp_path_factory:
                                                             pytest.TempPathFactory) -> None:
    base = under(tree, "/usr/local/Ascend/ascend-toolkit")
    (base / "latest").unlink()
    (base / "latest").symlink_to("/usr/local/Ascend/ascend-toolkit/9.1.0")  # absolute
    # a version file linking to a file that exists on the host running the doctor
    outside = tmp_path_factory.mktemp("outside") / "version.info"
    outside.write_text("version=6.6.6\n")
    info = base / "9.1.0" / "x86_64-linux" / "ascend_toolkit_install.info"
    info.unlink()
    info.symlink_to(outside)
    (base / "9.1.0" / "opp" / "version.info").write_text("Version=9.1.0\n")
    _, report = doctor_in_process("--root", str(tree), "--host", "a2-8npu", env=sourced_env())
    cann = by_check(report)["cann"]
    assert cann["verdict"] == "ok"
    assert cann["details"]["version"] == "9.1.0"
    assert cann["details"]["version_file"] == f"{TOOLKIT}/opp/version.info"


def test_a_link_loop_in_a_recorded_tree_is_a_finding(doctor_in_process: Any,
                                                     tree: Path) -> None:
    meminfo = under(tree, "/proc/meminfo")
    meminfo.unlink()
    meminfo.symlink_to("/proc/meminfo")  # on the tree: itself
    _, report = doctor_in_process("--root", str(tree))
    assert by_check(report)["unusable-paths"]["details"]["paths"] == {
        "/proc/meminfo": "Too many levels of symbolic links"}
    assert by_check(report)["memory"]["verdict"] == "warn"
