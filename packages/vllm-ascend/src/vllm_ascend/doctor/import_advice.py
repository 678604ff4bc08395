"""Where users fail: ``import torch_npu`` failing when the NPU platform activates. The error
becomes the doctor's finding for that cause (the missing toolkit, the unsourced environment,
the library that does not resolve, the torch-npu built for another torch) with its fix, not
torch's "Failed to load the backend extension"."""

from __future__ import annotations

import os
from collections.abc import Mapping

from vllm_ascend.doctor.cann import cann_findings
from vllm_ascend.doctor.findings import FAIL, Finding
from vllm_ascend.doctor.host_paths import HostPaths
from vllm_ascend.doctor.versions import Installed, check_torch_npu

# Checked in this order: the first failure is the cause a user fixes first.
CAUSES = ("torch-npu", "cann", "cann-env", "torch-npu-libs")


def import_failure_cause(environ: Mapping[str, str] | None = None,
                         dists: Installed | None = None) -> Finding | None:
    """The doctor's first failing finding among :data:`CAUSES` on this host, or None."""
    paths = HostPaths(environ=dict(os.environ if environ is None else environ))
    found = {f.check: f for f in [check_torch_npu(dists or Installed()), *cann_findings(paths)]}
    return next((found[c] for c in CAUSES if c in found and found[c].verdict == FAIL), None)


def torch_npu_import_message(error: BaseException, environ: Mapping[str, str] | None = None,
                             dists: Installed | None = None) -> str:
    """One message: what failed, the cause the doctor finds, the command that fixes it."""
    cause = import_failure_cause(environ, dists)
    head = f"the NPU platform is active but import torch_npu failed ({type(error).__name__}: " \
           f"{error})"
    if cause is None:
        return (f"{head}; vllm-ascend doctor finds no cause in the installed versions or the "
                "CANN environment: run `vllm-ascend doctor` for the full report, or set "
                "VLLM_ASCEND_DEVICE=cpu to run on the host CPU")
    return (f"{head}. Cause ({cause.check}): {cause.summary}. Fix: {cause.fix}. "
            "`vllm-ascend doctor` checks the whole host; VLLM_ASCEND_DEVICE=cpu runs the "
            "Ascend pipeline on the host CPU instead")
