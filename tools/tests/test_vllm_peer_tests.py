"""tools/vllm_peer_tests.py and tools/vllm_peer_sdist.py: the pinned sdist cache, each side's
environment, and the command line's checks."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import vllm_peer_sdist as sdist
import vllm_peer_tests as peer


@pytest.fixture(autouse=True)
def _local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The only package index the tool sees: ``tmp_path/index``, a file-based simple index
    (pip's and uv's other settings and configuration files switched off)."""
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL",
                 "UV_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "index").as_uri())
    (tmp_path / "index" / "vllm").mkdir(parents=True)
    return tmp_path / "index"


def _archive(path: Path, members: dict[str, bytes], link: str | None = None,
             publish: bool = True) -> sdist.Sdist:
    """An sdist at ``path``; with ``publish`` the local index lists it (a link to ``path``)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if publish:
        listed = path.parent / "index" / "vllm" / "vllm-9.9.9.tar.gz"
        listed.unlink(missing_ok=True)
        listed.symlink_to(path)
    return sdist.Sdist("9.9.9", digest)


MEMBERS = {
    "vllm-9.9.9/tests/conftest.py": b"# root conftest\n",
    "vllm-9.9.9/tests/v1/test_a.py": b"def test_a():\n    pass\n",
    "vllm-9.9.9/pyproject.toml": b"[tool.pytest.ini_options]\n",
    "vllm-9.9.9/vllm/__init__.py": b"raise SystemExit('never extracted')\n",
}


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_extracted_tests_keeps_only_the_tests_and_pyproject(tmp_path: Path) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    root = sdist.extracted_tests(pinned, tmp_path / "cache")
    assert root.name == "vllm-9.9.9" and root.parent.parent == tmp_path / "cache"
    assert root.parent.name.startswith(".run-") and root.parent.stat().st_mode & 0o777 == 0o700
    assert (root / "tests" / "v1" / "test_a.py").read_bytes() == MEMBERS[
        "vllm-9.9.9/tests/v1/test_a.py"]
    assert (root / "pyproject.toml").is_file() and not (root / "vllm").exists()
    sdist.remove_tests(root)
    # Only the verified archive stays: no tree, no partial download.
    assert _names(tmp_path / "cache") == {"vllm-9.9.9.tar.gz"}


def test_extracted_tests_reuses_the_archive_without_fetching(tmp_path: Path) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    first = sdist.extracted_tests(pinned, tmp_path / "cache")
    (tmp_path / "src.tar.gz").unlink()  # a second fetch would fail
    second = sdist.extracted_tests(pinned, tmp_path / "cache")
    assert second != first  # a fresh tree every run, from the archive as verified
    assert (second / "tests" / "conftest.py").read_bytes() == b"# root conftest\n"


def test_extracted_tests_refuses_an_archive_with_another_sha256(tmp_path: Path) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    wrong = sdist.Sdist(pinned.version, "0" * 64)
    with pytest.raises(RuntimeError, match="pinned 0000"):
        sdist.extracted_tests(wrong, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_extracted_tests_refuses_a_link_among_the_tests(tmp_path: Path) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS, link="vllm-9.9.9/tests/evil.py")
    with pytest.raises(RuntimeError, match=r"tests/evil\.py is neither file nor folder"):
        sdist.extracted_tests(pinned, tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["vllm-9.9.9.tar.gz"]


PLANTED = b"import os; os.system('touch /tmp/owned')  # planted\n"


def _plant_tree(cache: Path, pinned: sdist.Sdist) -> None:
    """A tree as an earlier run left it, whose conftest.py someone replaced."""
    for name in (f"vllm-9.9.9-{pinned.sha256[:12]}", "vllm-9.9.9"):
        (cache / name / "tests").mkdir(parents=True)
        (cache / name / "tests" / "conftest.py").write_bytes(PLANTED)


def test_a_planted_tree_in_the_cache_never_runs(tmp_path: Path) -> None:
    # The pin covers the archive; what runs is extracted from it, never a tree left behind.
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    cache = tmp_path / "cache"
    first = sdist.extracted_tests(pinned, cache)
    for name in (f"vllm-9.9.9-{pinned.sha256[:12]}", "vllm-9.9.9"):
        shutil.rmtree(cache / name, ignore_errors=True)
    _plant_tree(cache, pinned)
    (first / "tests" / "conftest.py").write_bytes(PLANTED)  # the last run's tree too
    root = sdist.extracted_tests(pinned, cache)
    assert (root / "tests" / "conftest.py").read_bytes() == b"# root conftest\n"


def test_a_tampered_archive_in_the_cache_is_fetched_again(tmp_path: Path) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _archive(tmp_path / "forged.tar.gz", {**MEMBERS, "vllm-9.9.9/tests/conftest.py": PLANTED},
             publish=False)
    (cache / "vllm-9.9.9.tar.gz").write_bytes((tmp_path / "forged.tar.gz").read_bytes())
    root = sdist.extracted_tests(pinned, cache)
    assert (root / "tests" / "conftest.py").read_bytes() == b"# root conftest\n"
    assert sdist.sha256_of(cache / "vllm-9.9.9.tar.gz") == pinned.sha256


@pytest.mark.parametrize("how", [
    "0777", "parent 0777 without sticky", "group-writable parent",
    pytest.param("owned by another uid", marks=pytest.mark.skipif(
        os.geteuid() != 0, reason="giving a folder to another uid needs root (chown)"))])
def test_a_cache_another_user_could_write_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    shared = tmp_path / "shared"
    cache = shared / "cache"
    cache.mkdir(parents=True, mode=0o700)
    # What the other user left: the pinned archive (it is public) and a planted tree.
    shutil.copy(tmp_path / "src.tar.gz", cache / "vllm-9.9.9.tar.gz")
    _plant_tree(cache, pinned)
    if how == "0777":
        cache.chmod(0o777)
    elif how == "parent 0777 without sticky":
        shared.chmod(0o777)
    elif how == "group-writable parent":
        shared.chmod(0o775)
    else:
        os.chown(cache, 65534, 65534)
    before = sorted(str(p) for p in cache.rglob("*"))
    root = sdist.extracted_tests(pinned, cache)
    fallback = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "peer-tests"
    assert root.parent.parent == fallback
    assert (root / "tests" / "conftest.py").read_bytes() == b"# root conftest\n"
    [warning] = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"warning: not using the cache {cache} (")
    assert warning.endswith(f"; using the private directory {fallback} instead")
    assert sorted(str(p) for p in cache.rglob("*")) == before  # nothing read or written there


def test_the_partial_download_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    pinned = _archive(tmp_path / "src.tar.gz", MEMBERS)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (cache / f"vllm-9.9.9.tar.gz.{os.getpid()}.part").symlink_to(victim)
    root = sdist.extracted_tests(pinned, cache)
    assert victim.read_bytes() == b"precious\n"
    assert (root / "tests" / "v1" / "test_a.py").is_file()
    assert sdist.sha256_of(cache / "vllm-9.9.9.tar.gz") == pinned.sha256
    assert not os.path.lexists(cache / f"vllm-9.9.9.tar.gz.{os.getpid()}.part")


def test_an_index_that_lists_no_archive_is_named(tmp_path: Path) -> None:
    missing = sdist.Sdist("9.9.9", "0" * 64)
    index_uri = (tmp_path / "index").as_uri()
    with pytest.raises(RuntimeError, match=(
            rf"cannot find vllm-9\.9\.9\.tar\.gz in any configured package index "
            rf"\({index_uri}: lists no vllm-9\.9\.9\.tar\.gz\)")):
        sdist.extracted_tests(missing, tmp_path / "cache")


def test_the_pinned_sdist_is_the_installed_vllm_release() -> None:
    assert peer.installed_vllm() == sdist.VLLM_0_32_0.version
    assert sdist.VLLM_0_32_0.filename == f"vllm-{sdist.VLLM_0_32_0.version}.tar.gz"


def test_side_env_loads_no_plugin_for_stock_and_the_host_cpu_platform_for_the_plugin(
    tmp_path: Path,
) -> None:
    base = {"VLLM_PLUGINS": "x", "VLLM_ASCEND_DEVICE": "npu", "PYTHONPATH": "/mine", "A": "1"}
    stock, plugin = (peer.side_env(s, tmp_path, base, tblib_missing=False) for s in peer.SIDES)
    assert stock["VLLM_PLUGINS"] == "none" and "VLLM_ASCEND_DEVICE" not in stock
    assert plugin["VLLM_ASCEND_DEVICE"] == "cpu" and "VLLM_PLUGINS" not in plugin
    for env in (stock, plugin):
        assert env["A"] == "1" and env["HF_HUB_OFFLINE"] == "1"
        assert env["PYTHONPATH"].split(":") == [str(peer.SUPPORT), "/mine"]
    assert stock["VLLM_CACHE_ROOT"] != plugin["VLLM_CACHE_ROOT"]
    missing = peer.side_env(peer.SIDES[0], tmp_path, {}, tblib_missing=True)
    assert missing["PYTHONPATH"].split(":") == [str(peer.SUPPORT), str(peer.SUPPORT / "no_tblib")]


def _run(tmp_path: Path, returncode: int, platform: str | None, xml: str | None) -> peer.SideRun:
    run = peer.SideRun(peer.SIDES[1], returncode, tmp_path / "p.log", tmp_path / "p.xml",
                       tmp_path / "platform.txt")
    run.log.write_text("pytest output tail\n")
    if platform is not None:
        run.platform_file.write_text(platform)
    if xml is not None:
        run.junit.write_text(xml)
    return run


XML = ('<testsuites><testsuite><testcase classname="tests.test_a" name="test_x"/>'
       "</testsuite></testsuites>")


def test_check_run_reads_a_finished_side(tmp_path: Path) -> None:
    run = _run(tmp_path, 1, "AscendCpuPlatform", XML)
    assert peer.check_run(run, ["tests/test_a.py"]) == {"tests/test_a.py::test_x": "passed"}


@pytest.mark.parametrize(("code", "platform", "xml", "message"), [
    (2, "AscendCpuPlatform", XML, "pytest exited with 2"),
    (-9, "AscendCpuPlatform", XML, "pytest exited with -9"),
    (0, "AscendCpuPlatform", None, "pytest exited with 0"),
    (0, "CpuPlatform", XML, "platform was CpuPlatform, expected AscendCpuPlatform"),
    (0, None, XML, "platform was [?]"),
])
def test_check_run_refuses_a_side_that_crashed_or_ran_elsewhere(
    tmp_path: Path, code: int, platform: str | None, xml: str | None, message: str,
) -> None:
    with pytest.raises(RuntimeError, match=message):
        peer.check_run(_run(tmp_path, code, platform, xml), ["tests/test_a.py"])


def test_the_fast_subset_lies_in_the_allow_list() -> None:
    assert set(peer.files_of(peer.FAST)) <= set(peer.ALL) and len(set(peer.ALL)) == len(peer.ALL)


def test_files_of_keeps_each_file_once_in_order() -> None:
    entries = ["tests/b.py::test_x", "tests/a.py", "tests/b.py::test_y", "tests/b.py"]
    assert peer.files_of(entries) == ("tests/b.py", "tests/a.py")
    assert peer.pytest_command(entries, Path("r.xml"), 9)[3:7] == entries


def test_files_outside_the_allow_list_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peer.parse_args(["--files", "tests/test_envs.py", "tests/models/test_x.py"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "not in the allow-list: tests/models/test_x.py;" in err and "allowed: " in err


def test_a_timeout_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        peer.parse_args(["--timeout", "0"])
    assert "--timeout must be a positive number of seconds, got 0" in capsys.readouterr().err
