"""`VllmServer.failure_report`: what a failed start shows (the root cause, then the tail)."""

from __future__ import annotations

from pathlib import Path

from vllm_ascend_testing.serve_process import VllmServer


def _server_with_log(tmp_path: Path, lines: list[str]) -> VllmServer:
    server = object.__new__(VllmServer)  # no process: only the log is read
    server.log_path = tmp_path / "serve.log"
    server.log_path.write_text("\n".join(lines) + "\n")
    return server


def test_failure_report_starts_at_the_first_error_then_gives_the_tail(tmp_path: Path) -> None:
    lines = [f"INFO line {i}" for i in range(100)]
    lines[20] = "(EngineCore pid=7) ERROR 12-06 [core.py:1] EngineCore failed to start."
    lines[21] = "Traceback (most recent call last):"
    report = _server_with_log(tmp_path, lines).failure_report(lines=10).splitlines()
    assert report[:3] == ["first error:", lines[20], lines[21]]
    assert report[11:13] == ["...", "log tail:"]
    assert report[13:] == lines[-10:]


def test_failure_report_is_the_tail_when_the_error_is_in_it_or_absent(tmp_path: Path) -> None:
    lines = [f"INFO line {i}" for i in range(50)]
    assert _server_with_log(tmp_path, lines).failure_report(lines=10).splitlines() == lines[-10:]
    lines[45] = "Traceback (most recent call last):"
    assert _server_with_log(tmp_path, lines).failure_report(lines=10).splitlines() == lines[-10:]
