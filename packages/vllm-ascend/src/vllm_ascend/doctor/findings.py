"""A diagnosis: one :class:`Finding` per check, and the :class:`Report` that decides the exit status
(0: the host can serve on its platform, 1: it cannot).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

OK: Final = "ok"
WARN: Final = "warn"  # works, with less (a fallback, a missing extra)
FAIL: Final = "fail"  # the platform it applies to cannot serve
INFO: Final = "info"  # a fact, no judgement
VERDICTS: Final = (OK, WARN, FAIL, INFO)

# Which platform a finding is about: both, or only the NPU one.
ANY: Final = "any"
NPU: Final = "npu"


@dataclass(frozen=True)
class Finding:
    """One check: its verdict, what was found, the one command or setting that fixes it."""

    check: str
    verdict: str
    summary: str
    fix: str | None = None
    scope: str = ANY
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}; allowed: {', '.join(VERDICTS)}")
        if self.scope not in (ANY, NPU):
            raise ValueError(f"scope {self.scope!r}; allowed: {ANY}, {NPU}")


@dataclass(frozen=True)
class Report:
    """Every finding, and the platform the host would serve on (``npu`` or ``cpu``)."""

    platform: str
    findings: tuple[Finding, ...]

    def blocking(self) -> list[Finding]:
        """Failed findings that stop this host's platform (NPU-only ones stop only ``npu``)."""
        return [f for f in self.findings
                if f.verdict == FAIL and (f.scope == ANY or self.platform == "npu")]

    @property
    def can_serve(self) -> bool:
        return not self.blocking()

    @property
    def exit_code(self) -> int:
        return 0 if self.can_serve else 1

    def missing_npu_pieces(self) -> list[Finding]:
        """On the host-CPU platform: the NPU checks that failed (what an NPU would need)."""
        return [f for f in self.findings if f.scope == NPU and f.verdict == FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "can_serve": self.can_serve,
            "exit_code": self.exit_code,
            "findings": [asdict(f) for f in self.findings],
        }


_MARK = {OK: "ok  ", WARN: "WARN", FAIL: "FAIL", INFO: "info"}


def format_text(report: Report) -> str:
    """The human-readable report: one line per finding, its fix indented below it."""
    lines = []
    for finding in report.findings:
        mark = _MARK[finding.verdict]
        if finding.verdict == FAIL and finding.scope == NPU and report.platform != "npu":
            mark = "miss"  # an NPU piece this host lacks; it does not stop the host-CPU platform
        lines.append(f"[{mark}] {finding.check}: {finding.summary}")
        if finding.fix:
            lines.append(f"         fix: {finding.fix}")
    lines.append("")
    if report.can_serve:
        where = "its NPUs" if report.platform == "npu" else "the host-CPU platform"
        lines.append(f"verdict: this host can serve on {where} (exit 0)")
    else:
        names = ", ".join(f.check for f in report.blocking())
        lines.append(f"verdict: this host cannot serve: {names} (exit 1)")
    return "\n".join(lines)
