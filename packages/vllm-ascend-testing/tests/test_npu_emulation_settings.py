"""The emulation's variables and its build cache's ownership rule (no device installed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vllm_ascend_testing.npu_emulation import build, settings
from vllm_ascend_testing.npu_emulation.settings import EmulationSettingsError, from_environ


def test_defaults_are_32_gib_and_an_a2_part() -> None:
    s = from_environ({"VLLM_ASCEND_EMULATED_NPUS": "2"})
    assert (s.num_npus, s.hbm_bytes, s.soc_name, s.soc_id) == (2, 32 * 2**30, "Ascend910B1", 220)


def test_soc_by_name_or_id_from_the_recorded_enum() -> None:
    env = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "0.5"}
    by_id = from_environ(env | {"VLLM_ASCEND_EMULATED_SOC": "250"})
    assert (by_id.soc_name, by_id.soc_id, by_id.hbm_bytes) == ("Ascend910_9391", 250, 2**29)
    assert from_environ(env | {"VLLM_ASCEND_EMULATED_SOC": "Ascend310P3"}).soc_id == 202


@pytest.mark.parametrize(("env", "match"), [
    ({"VLLM_ASCEND_EMULATED_NPUS": "two"}, "not a number of NPUs"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "0"}, r"outside 1\.\.64"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "65"}, r"outside 1\.\.64"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "0"}, "above 0 GiB"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_SOC": "999"},
     "Ascend910B1 \\(220\\)"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_SOC": "UnsupportedSocVersion"},
     "not a SoC"),
])
def test_bad_values_name_the_variable_and_what_is_allowed(env: dict[str, str], match: str) -> None:
    with pytest.raises(EmulationSettingsError, match=match):
        from_environ(env)


def test_64_npus_is_the_limit() -> None:
    assert from_environ({"VLLM_ASCEND_EMULATED_NPUS": "64"}).num_npus == 64


def test_requested_only_when_set_and_not_empty() -> None:
    assert not settings.requested({})
    assert not settings.requested({"VLLM_ASCEND_EMULATED_NPUS": " "})
    assert settings.requested({"VLLM_ASCEND_EMULATED_NPUS": "1"})


def test_cache_dir_is_created_private_and_others_writable_is_refused(tmp_path: Path) -> None:
    mine = build.private_dir(tmp_path / "cache")
    assert mine.stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(build.EmulationBuildError, match="not writable by others"):
        build.private_dir(shared)
    os.chmod(shared, 0o755)
    assert build.private_dir(shared) == shared


def test_build_dir_is_per_torch_version_and_source(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    import torch

    monkeypatch.setenv(build.CACHE_VAR, str(tmp_path))
    path = build.build_dir()
    assert path.parent == tmp_path and path.name.startswith(f"torch-{torch.__version__}-")


CONCURRENT_BUILD = """
import sys, time
from pathlib import Path
from vllm_ascend_testing.npu_emulation import build

log = Path(sys.argv[1])

def fake_build(target):
    with open(log, "a") as f:
        f.write("build\\n")
    time.sleep(1.0)  # long enough for the other process to wait on the lock

build._build = fake_build
build._import = lambda path: path
print(build.load_extension())
"""


def test_concurrent_first_builds_build_once(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = dict(os.environ, **{build.CACHE_VAR: str(tmp_path / "cache")})
    log = tmp_path / "builds.log"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_BUILD, str(log)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert log.read_text().splitlines() == ["build"]
    assert len({out.strip() for out, _ in outs}) == 1  # all load the same library
