"""The demo's bytecode folder is code: Python runs a ``.pyc`` it finds there in place of the
source, so `vllm-ascend demo` checks the folder by the root rule before it imports torch and
vLLM, and neither uses nor exports a refused one (issue 47, item 1).

Driven through the console script in a child process. ``import torch`` is made to fail fast
after the check (a torch-npu whose import fails, as on a host without CANN), so the run ends
with the demo's one-line error right after the import a planted ``torch/__init__`` bytecode
would have hijacked.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_ascend.base.trusted_roots import PYCACHE_DIR, TrustedRoots

SCRIPT = Path(sys.executable).with_name("vllm-ascend")
OTHER_UID = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="giving a folder to another uid needs root (chown)")
CLEARED = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "LD_LIBRARY_PATH",
           "TORCH_DEVICE_BACKEND_AUTOLOAD", "VLLM_ASCEND_EMULATED_NPUS", "PYTHONPATH",
           "PYTHONPYCACHEPREFIX", "XDG_CACHE_HOME")


@pytest.fixture(scope="module")
def failing_torch_npu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PYTHONPATH entry with a torch-npu whose import fails: torch loads it as its backend,
    so ``import torch`` fails once torch itself has loaded."""
    site = tmp_path_factory.mktemp("site")
    (site / "torch_npu").mkdir()
    (site / "torch_npu" / "__init__.py").write_text("raise ImportError('libhccl.so: missing')\n")
    info = site / "torch_npu-2.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.13.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return site


def plant_torch_bytecode(prefix: Path, marker: Path) -> Path:
    """A timestamp ``.pyc`` of torch's ``__init__.py`` under the bytecode folder ``prefix``
    (the layout and header of PEP 3147/552: magic, flags 0, source mtime and size), whose code
    writes ``marker`` and ends the process."""
    origin = Path(importlib.util.find_spec("torch").origin)  # type: ignore[union-attr,arg-type]
    st = origin.stat()
    code = compile(f"open({str(marker)!r}, 'w').write('ran')\nimport os\nos._exit(3)\n",
                   str(origin), "exec")
    pyc = (prefix / str(origin.parent).lstrip("/")
           / f"{origin.stem}.{sys.implementation.cache_tag}.pyc")
    pyc.parent.mkdir(parents=True, exist_ok=True)
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
                    + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                    + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(code))
    return pyc


def base_env(tmp_path: Path, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    # The interpreter writes no bytecode of its own: the demo turns the prefix on itself.
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", HOME=str(tmp_path / "home"),
               VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"))
    return env


def run_demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "demo", "--model", "qwen3"], env=env,
                          capture_output=True, text=True, timeout=300)


def _refused_run(marker: Path, prefix: Path, env: dict[str, str]) -> str:
    """Prove the bytecode planted in ``prefix`` runs when Python is pointed at it (it writes
    ``marker``), run the demo, and return its stderr after checking the plant did not run."""
    premise = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                             env={**env, "PYTHONPYCACHEPREFIX": str(prefix)}, timeout=300)
    assert (premise.returncode, marker.exists()) == (3, True)  # Python itself runs it
    marker.unlink()
    proc = run_demo(env)
    assert not marker.exists(), proc.stderr[-2000:]
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("vllm-ascend demo:")]
    assert len(errors) == 1 and errors[0].startswith(
        "vllm-ascend demo: error: import torch failed: "), proc.stderr[-2000:]
    return proc.stderr


@needs_root
def test_demo_ignores_a_bytecode_folder_in_a_home_another_user_owns(
    tmp_path: Path, failing_torch_npu: Path
) -> None:
    home = tmp_path / "home"
    prefix = home / ".cache" / PYCACHE_DIR
    marker = tmp_path / "planted-bytecode-ran"
    plant_torch_bytecode(prefix, marker)
    for folder in (home, home / ".cache", prefix):
        os.chown(folder, OTHER_UID, OTHER_UID)
    stderr = _refused_run(marker, prefix, base_env(tmp_path, failing_torch_npu))
    assert stderr.count("not using the bytecode folder") == 1
    assert (f"not using the bytecode folder {prefix} ({home} (above the root) is owned by uid "
            f"{OTHER_UID}, not by this user (uid 0) or root); using no prefix (bytecode beside "
            "the sources) instead") in stderr


def test_demo_replaces_a_group_writable_bytecode_folder_by_a_private_one(
    tmp_path: Path, failing_torch_npu: Path
) -> None:
    home = tmp_path / "home"
    prefix = home / ".cache" / PYCACHE_DIR
    marker = tmp_path / "planted-bytecode-ran"
    plant_torch_bytecode(prefix, marker)
    for folder in (home, home / ".cache"):
        os.chmod(folder, 0o700)
    os.chmod(prefix, 0o770)
    stderr = _refused_run(marker, prefix, base_env(tmp_path, failing_torch_npu))
    private = home / ".cache" / "vllm_ascend" / "private" / "PYTHONPYCACHEPREFIX"
    assert (f"not using the bytecode folder {prefix} ({prefix} is writable by group or others "
            f"(mode 770)); using the private directory {private} instead") in stderr
    assert stderr.count("not using the bytecode folder") == 1
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


@needs_root
def test_demo_replaces_a_given_bytecode_folder_another_user_owns(
    tmp_path: Path, failing_torch_npu: Path
) -> None:
    # PYTHONPYCACHEPREFIX given in the environment: the interpreter started with it, the
    # demo stops using it before torch is imported.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    env = {**base_env(tmp_path, failing_torch_npu), "PYTHONPYCACHEPREFIX": str(theirs)}
    env.pop("PYTHONDONTWRITEBYTECODE")
    marker = tmp_path / "planted-bytecode-ran"
    plant_torch_bytecode(theirs, marker)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    stderr = _refused_run(marker, theirs, env)
    private = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "PYTHONPYCACHEPREFIX"
    assert (f"not using the bytecode folder {theirs} ({theirs} is owned by uid {OTHER_UID}, "
            f"not by this user (uid 0)); using the private directory {private} instead") in stderr


# --- the rule at its boundaries, and what children get -------------------------------------

def test_bytecode_prefix_accepts_an_own_folder_others_cannot_write(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    made = TrustedRoots().bytecode_prefix(env)  # missing: made private
    assert made == tmp_path / "home" / ".cache" / PYCACHE_DIR
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    os.chmod(made, 0o755)  # readable by others is fine, writable is not
    assert TrustedRoots().bytecode_prefix(env) == made
    os.chmod(made, 0o775)
    assert TrustedRoots().bytecode_prefix(env) != made


@needs_root
def test_bytecode_prefix_refuses_a_folder_reached_through_another_users_link(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    os.lchown(link, OTHER_UID, OTHER_UID)
    env = {"HOME": str(tmp_path / "home"), "PYTHONPYCACHEPREFIX": str(link / "pyc")}
    chosen = TrustedRoots().bytecode_prefix(env)
    assert chosen == tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / \
        "PYTHONPYCACHEPREFIX"
    assert list(mine.iterdir()) == []


@needs_root
def test_engine_env_exports_no_refused_bytecode_folder(tmp_path: Path) -> None:
    from vllm_ascend.entrypoints.local_engine import engine_env

    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, OTHER_UID, OTHER_UID)
    given = {"HOME": str(home), "PYTHONPYCACHEPREFIX": str(home / "pyc")}
    assert "PYTHONPYCACHEPREFIX" not in engine_env(base=given)
    assert "PYTHONPYCACHEPREFIX" not in engine_env(base={"HOME": str(home)})
    os.chown(home, 0, 0)
    os.chmod(home, 0o700)
    assert engine_env(base=given)["PYTHONPYCACHEPREFIX"] == str(home / "pyc")
