"""The emulation's variables and its build cache's ownership rule (no device installed)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from torch_npu_double.emulation import build, settings
from torch_npu_double.emulation.settings import EmulationSettingsError, from_environ


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
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "0"}, "out of range"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "\u0662"}, "not a number of NPUs; allowed: 1..64"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1_0"}, "not a number of NPUs"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "nan"},
     "'nan' is not a size in GiB"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": "\u0661"},
     "not a size in GiB"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_SOC": "999"},
     "Ascend910B1 \\(220\\)"),
    ({"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_SOC": "UnsupportedSocVersion"},
     "not a SoC"),
])
def test_bad_values_name_the_variable_and_what_is_allowed(env: dict[str, str], match: str) -> None:
    with pytest.raises(EmulationSettingsError, match=match):
        from_environ(env)


@pytest.mark.parametrize("value", ["inf", "-inf", "1e-12", "0.0009765", "1024.001", "1e400"])
def test_hbm_outside_1_mib_to_1_tib_is_refused_naming_the_range(value: str) -> None:
    env = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": value}
    with pytest.raises(EmulationSettingsError) as info:
        from_environ(env)
    assert str(info.value) == (
        f"VLLM_ASCEND_EMULATED_HBM_GIB={value!r} is out of range; allowed: a finite size in GiB "
        "from 0.000976562 (1 MiB) to 1024")


@pytest.mark.parametrize(("value", "nbytes"), [("0.0009765625", 2**20), ("1024", 2**40)])
def test_hbm_range_ends_are_allowed(value: str, nbytes: int) -> None:
    env = {"VLLM_ASCEND_EMULATED_NPUS": "1", "VLLM_ASCEND_EMULATED_HBM_GIB": value}
    assert from_environ(env).hbm_bytes == nbytes


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
    with pytest.raises(build.EmulationBuildError, match="is writable by group or others"):
        build.private_dir(shared)
    os.chmod(shared, 0o755)
    assert build.private_dir(shared) == shared


def test_cache_below_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    # The cache itself is private, but whoever can write its parent can swap it.
    parent = tmp_path / "open"
    parent.mkdir()
    cache = build.private_dir(parent / "cache")
    os.chmod(parent, 0o777)
    with pytest.raises(build.EmulationBuildError, match=r"above the root.*writable by group"):
        build.private_dir(cache)
    os.chmod(parent, 0o1777)  # sticky (as /tmp): nobody else can rename the entry below it
    assert build.private_dir(cache) == cache


def test_cache_reached_through_another_users_symlink_is_refused(tmp_path: Path) -> None:
    real = build.private_dir(tmp_path / "real")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert build.private_dir(link / "cache") == link / "cache"  # this user's own link
    if os.geteuid() != 0:
        pytest.skip("making a symlink of another user needs root")
    os.lchown(link, 12345, 12345)
    with pytest.raises(build.EmulationBuildError, match="symlink owned by uid 12345"):
        build.private_dir(link / "cache")


def _planted_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache in ``tmp_path`` whose build counts as finished; returns the library's path.
    Building and importing are replaced: importing reports what it was given."""
    monkeypatch.setenv(build.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_build", lambda target: None)
    monkeypatch.setattr(build, "_import", lambda path: os.path.realpath(path))
    target = build.private_dir(build.private_dir(tmp_path / "cache") / build.build_dir().name)
    (target / "built").write_text("x")
    return target / f"{build.EXTENSION}.so"


@pytest.mark.parametrize("plant", ["symlink", "fifo", "foreign", "folder"])
def test_a_library_that_is_not_this_users_file_is_not_loaded(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plant: str) -> None:
    """The cached build holds something else than this user's regular file under the
    library's name: nothing is loaded from it (a FIFO does not block)."""
    if plant == "foreign" and os.geteuid() != 0:
        pytest.skip("making a file of another user needs root")
    library = _planted_build(monkeypatch, tmp_path)
    elsewhere = tmp_path / "elsewhere.so"
    elsewhere.write_bytes(b"\x7fELF")
    if plant == "symlink":
        library.symlink_to(elsewhere)
    elif plant == "fifo":
        os.mkfifo(library)
    elif plant == "folder":
        library.mkdir()
    else:
        library.write_bytes(b"\x7fELF")
        os.chown(library, 12345, 12345)
    with pytest.raises(build.EmulationBuildError, match=re.escape(str(library))):
        build.load_extension()


def test_a_build_folder_others_can_write_is_not_loaded_from(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    library = _planted_build(monkeypatch, tmp_path)
    library.write_bytes(b"\x7fELF")
    os.chmod(library.parent, 0o777)
    with pytest.raises(build.EmulationBuildError, match="writable by group or others"):
        build.load_extension()


def test_the_checked_library_is_loaded_through_its_open_descriptor(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    library = _planted_build(monkeypatch, tmp_path)
    library.write_bytes(b"\x7fELF")
    os.chmod(library, 0o775)  # built under a group-writable umask: made 0755 before loading
    seen: list[Path] = []
    monkeypatch.setattr(build, "_import", lambda path: seen.append(path) or path)
    build.load_extension()
    assert str(seen[0]).startswith("/proc/self/fd/")
    assert library.stat().st_mode & 0o777 == 0o755


def test_build_dir_is_per_torch_version_and_source(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    import torch

    monkeypatch.setenv(build.CACHE_VAR, str(tmp_path))
    path = build.build_dir()
    assert path.parent == tmp_path and path.name.startswith(f"torch-{torch.__version__}-")


CONCURRENT_BUILD = """
import os, sys, time
from pathlib import Path
from torch_npu_double.emulation import build

log = Path(sys.argv[1])

def fake_build(target):
    with open(log, "a") as f:
        f.write("build\\n")
    time.sleep(1.0)  # long enough for the other process to wait on the lock
    (target / (build.EXTENSION + ".so")).write_bytes(b"")

build._build = fake_build
build._import = lambda path: os.path.realpath(path)
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


@pytest.mark.parametrize(("value", "visible", "count"), [
    (None, None, 4), ("", None, 4), ("3,1", (3, 1), 2), (" 0 , 2 ", (0, 2), 2), ("3", (3,), 1)])
def test_visible_devices_are_the_npus_this_process_sees(value: str | None,
                                                        visible: tuple[int, ...] | None,
                                                        count: int) -> None:
    env = {"VLLM_ASCEND_EMULATED_NPUS": "4"}
    if value is not None:
        env["ASCEND_RT_VISIBLE_DEVICES"] = value
    s = from_environ(env)
    assert (s.num_npus, s.visible, s.visible_count) == (4, visible, count)


@pytest.mark.parametrize(("value", "part"), [("4", "'4'"), ("0,0", "'0'"), ("a", "'a'"),
                                             ("1,", "''"), ("\u0661", "'\u0661'")])
def test_a_visible_device_the_host_lacks_or_names_twice_is_refused(value: str, part: str) -> None:
    with pytest.raises(EmulationSettingsError) as info:
        from_environ({"VLLM_ASCEND_EMULATED_NPUS": "4", "ASCEND_RT_VISIBLE_DEVICES": value})
    assert str(info.value) == (
        f"ASCEND_RT_VISIBLE_DEVICES={value!r} names {part}; allowed: distinct NPU ids 0..3 "
        "separated by commas (VLLM_ASCEND_EMULATED_NPUS=4)")
