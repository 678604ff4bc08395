"""The doctor's finding and fix for a failing ``import torch_npu``, or ``import torch`` that loads
an installed torch-npu by itself, instead of torch's "Failed to load" error.
"""

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


# torch's own wrapper when an autoloaded device backend (an entry point of the
# ``torch.backends`` group, torch-npu's is ``torch_npu``) fails during ``import torch``.
ANY_BACKEND_FAILURE = "Failed to load the backend extension: "
# torch_npu's entry point of torch.backends (another one may share its prefix)
TORCH_NPU_BACKEND = "torch_npu"
CPU_INSTEAD = {
    "torch_npu": "VLLM_ASCEND_DEVICE=cpu runs the Ascend pipeline on the host CPU instead",
    # torch loads an installed torch-npu by itself: the host CPU needs that autoload off too.
    "torch": "VLLM_ASCEND_DEVICE=cpu TORCH_DEVICE_BACKEND_AUTOLOAD=0 runs the Ascend pipeline "
             "on the host CPU instead",
}


def root_error(error: BaseException) -> str:
    """``Type: message`` (first line) of the innermost error of the chain."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def torch_npu_import_message(error: BaseException, environ: Mapping[str, str] | None = None,
                             dists: Installed | None = None, stage: str = "torch_npu") -> str:
    """One message: what failed (``stage``), the cause the doctor finds, the fixing command."""
    if stage not in CPU_INSTEAD:
        raise ValueError(f"stage {stage!r}; allowed: {', '.join(CPU_INSTEAD)}")
    cause = import_failure_cause(environ, dists)
    if stage == "torch":
        head = ("import torch failed: torch loads the installed torch-npu as its NPU backend, "
                f"and importing torch-npu failed ({root_error(error)})")
    else:
        head = f"the NPU platform is active but import torch_npu failed ({root_error(error)})"
    if cause is None:
        return (f"{head}; vllm-ascend doctor finds no cause in the installed versions or the "
                f"CANN environment: run `vllm-ascend doctor` for the full report; "
                f"{CPU_INSTEAD[stage]}")
    return (f"{head}. Cause ({cause.check}): {cause.summary}. Fix: {cause.fix}. "
            f"`vllm-ascend doctor` checks the whole host; {CPU_INSTEAD[stage]}")


def torch_import_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Import torch; None when it imports, else the message for a failing autoloaded backend.

    Any other failure of ``import torch`` propagates.
    """
    try:
        import torch  # noqa: F401 - the import is the check
    except RuntimeError as exc:
        text = str(exc)
        if ANY_BACKEND_FAILURE not in text:
            raise
        name = text.split(ANY_BACKEND_FAILURE, 1)[1].split(". ", 1)[0].rstrip(".")
        if name == TORCH_NPU_BACKEND:
            return torch_npu_import_message(exc, environ, stage="torch")
        # Another package's backend: its own error says what is wrong (the variable, the value).
        return (f"import torch failed: the device backend {name!r} (an entry point of "
                f"torch.backends) did not load: {root_error(exc)}; "
                "TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns torch's backend autoload off")
    return None
