"""`vllm-ascend doctor`: every check, the platform this host would serve on, the exit status."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from vllm_ascend.doctor.cann import cann_findings
from vllm_ascend.doctor.device import DeviceView, device_findings, read_live, read_recorded
from vllm_ascend.doctor.findings import ANY, FAIL, INFO, NPU, OK, Finding, Report, format_text
from vllm_ascend.doctor.host import host_findings
from vllm_ascend.doctor.host_paths import HostPaths, shown, unusable_finding
from vllm_ascend.doctor.install_set import check_install_set
from vllm_ascend.doctor.probe import PROBE_TIMEOUT_S, probe_torch_npu
from vllm_ascend.doctor.versions import Installed, version_findings
from vllm_ascend.entrypoints.console import write_stdout

DEVICE_MODES = ("auto", "npu", "cpu")


def target_platform(environ: dict[str, str] | os._Environ[str], npus_visible: bool) -> str:
    """``npu`` or ``cpu``: what ``VLLM_ASCEND_DEVICE`` selects (auto: npu when NPUs show)."""
    mode = environ.get("VLLM_ASCEND_DEVICE", "auto").strip().lower() or "auto"
    if mode not in DEVICE_MODES:
        raise ValueError(f"VLLM_ASCEND_DEVICE={mode!r} is not valid; allowed: "
                         f"{', '.join(DEVICE_MODES)}")
    if mode == "auto":
        return "npu" if npus_visible else "cpu"
    return mode


def probe_finding(paths: HostPaths, dists: Installed, cann: list[Finding],
                  timeout: float = PROBE_TIMEOUT_S) -> Finding | None:
    """The import probe's finding (at most ``timeout`` s) when torch-npu is installed here."""
    if dists.version("torch-npu") is None or paths.root != Path("/"):
        return None
    result = probe_torch_npu(paths.environ, timeout=timeout)
    if result.ok:
        return Finding("torch-npu-import", OK, f"import torch_npu works: {result.devices} NPUs, "
                       f"CANN {result.cann}", scope=NPU)
    cause = next((f for f in cann if f.verdict == FAIL), None)
    because = f"; cause: {cause.summary}" if cause else ""
    # torch imports torch-npu by itself: a broken torch-npu breaks `import torch` everywhere.
    scope = ANY if result.stage == "torch" else NPU
    fix = cause.fix if cause else 'pip install --force-reinstall "vllm-ascend[npu]"'
    if scope == ANY:
        fix = f"{fix} (or, for the host-CPU platform only: pip uninstall torch-npu)"
    return Finding("torch-npu-import", FAIL, f"import {result.stage} fails: {result.error}"
                   f"{because}", fix=fix, scope=scope)


def platform_finding(platform: str, findings: list[Finding]) -> Finding:
    if platform == "npu":
        return Finding("platform", INFO, "NPU platform (VLLM_ASCEND_DEVICE=npu, or auto with "
                       "NPUs visible): every NPU check above must pass")
    missing = [f.check for f in findings if f.scope == NPU and f.verdict == FAIL]
    pieces = f"; for the NPU platform this host lacks: {', '.join(missing)}" if missing else ""
    return Finding("platform", OK, "the host-CPU platform works here (the Ascend pipeline on "
                   f"the host CPU with vLLM's CPU worker){pieces}",
                   fix="VLLM_ASCEND_DEVICE=cpu vllm-ascend serve MODEL (or: vllm-ascend demo)",
                   details={"missing_npu_pieces": missing})


def diagnose(paths: HostPaths, host_dir: Path | None = None,
             dists: Installed | None = None, probe_timeout: float = PROBE_TIMEOUT_S) -> Report:
    """Run every check against ``paths`` (and the recorded host ``host_dir``)."""
    dists = dists or Installed()
    view: DeviceView = read_recorded(host_dir) if host_dir is not None else read_live(paths)
    platform = target_platform(dict(paths.environ), view.facts is not None)
    findings = [*version_findings(dists), check_install_set(dists)]
    cann = cann_findings(paths)
    findings += cann
    probe = probe_finding(paths, dists, cann, probe_timeout)
    if probe is not None:
        findings.append(probe)
    findings += device_findings(view, paths)
    findings += host_findings(paths, view.facts)
    unusable = unusable_finding(paths)
    if unusable is not None:
        findings.append(unusable)
    findings.append(platform_finding(platform, findings))
    return Report(platform, tuple(findings))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-ascend doctor",
        description="Check whether this host can serve with the Ascend plugin: versions, CANN "
        "and NNAL, the kernels' operator entry points, the NPUs, the host; each check with its "
        "verdict and the command that fixes it. Exit 0: the host can serve; 1: it cannot.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--host", metavar="DIR|NAME",
                        help="a recorded host (ascend-topology's folder format, or an example "
                        "name) instead of running npu-smi")
    parser.add_argument("--root", metavar="DIR",
                        help="look for CANN, NNAL and /proc/meminfo under DIR instead of /")
    parser.add_argument("--probe-timeout", type=float, default=PROBE_TIMEOUT_S, metavar="S",
                        help="seconds the child process that imports torch and torch_npu may "
                        f"take before it is killed and reported (default: {PROBE_TIMEOUT_S:g})")
    return parser


def main(argv: list[str]) -> int:
    """Run the doctor; returns the exit status (argparse exits 2 on bad usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.probe_timeout <= 3600:
        parser.error(f"--probe-timeout {args.probe_timeout:g}: allowed: more than 0, at most "
                     "3600 seconds")
    import ascend_topology as topo
    from ascend_topology.recorded import resolve_host_dir

    host_dir = None
    try:
        if args.host is not None:
            host_dir = resolve_host_dir(args.host)
        root = Path(args.root) if args.root else Path("/")
        root_is_dir = root.is_dir()
    except topo.TopologyError as exc:
        parser.error(str(exc))
    except OSError as exc:  # a name too long for the file system, a folder it cannot enter
        which = "--host" if host_dir is None and args.host is not None else "--root"
        value = args.host if which == "--host" else args.root
        parser.error(f"{which} {shown(str(value))!r}: {exc.strerror or exc}")
    if not root_is_dir:
        parser.error(f"--root {args.root!r} is not a directory")
    try:
        report = diagnose(HostPaths(root=root, environ=dict(os.environ)), host_dir,
                          probe_timeout=args.probe_timeout)
    except (ValueError, topo.RecordedHostError) as exc:
        print(f"vllm-ascend doctor: error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report.to_dict()) if args.json else format_text(report)
    status = write_stdout(f"{text}\n", "vllm-ascend doctor")
    return status or report.exit_code
