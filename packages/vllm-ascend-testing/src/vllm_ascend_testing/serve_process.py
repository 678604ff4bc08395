"""`vllm-ascend serve` as a real subprocess on a loopback port, for tests: start, wait healthy,
stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class ServerError(RuntimeError):
    """The server exited or did not become healthy in time (the message quotes its log)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_command() -> list[str]:
    """`vllm-ascend serve` of this interpreter's environment (vLLM's own `serve` code)."""
    return [sys.executable, "-m", "vllm_ascend", "serve"]


def tiny_serve_args(served_name: str, *extra: str, max_num_seqs: int = 4,
                    max_model_len: int = 512, kv_cache_mib: int | None = 64) -> list[str]:
    """`serve` options for a tiny test model on the host CPU: float32, a `max_model_len`
    context, a fixed KV cache of `kv_cache_mib` MiB (None: no memory option, the platform's
    default reservation), at most `max_num_seqs` sequences per step; `extra` options last."""
    memory = [] if kv_cache_mib is None else [
        "--kv-cache-memory-bytes", str(kv_cache_mib * 1024 * 1024)]
    return [
        "--served-model-name", served_name,
        "--dtype", "float32",
        "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(max_num_seqs),
        *memory,
        *extra,
    ]


class VllmServer:
    """`vllm-ascend serve MODEL ARGS...` in its own session, output to `log_path`."""

    def __init__(
        self,
        model: str | Path,
        args: Sequence[str],
        env: Mapping[str, str],
        log_path: str | Path,
        port: int | None = None,
    ) -> None:
        self.port = free_port() if port is None else port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        command = [*serve_command(), str(model), "--host", "127.0.0.1"]
        command += ["--port", str(self.port), *args]
        with self.log_path.open("wb") as log:
            # A new session makes the server and the engine processes it spawns one group
            # that stop() can signal together.
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
            )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def failure_report(self, lines: int = 40) -> str:
        """The log's first error (from its first ``ERROR`` or traceback line on: the root
        cause, which the API server's own traceback at the end only refers to), then its
        tail."""
        log = self.log().splitlines()
        first = next((i for i, line in enumerate(log)
                      if " ERROR " in line or "Traceback (most recent call last)" in line), None)
        tail = "\n".join(log[-lines:])
        if first is None or first >= len(log) - lines:
            return tail
        return "\n".join(["first error:", *log[first:first + lines], "...", "log tail:", tail])

    def wait_healthy(self, timeout: float = 240.0, interval: float = 0.5) -> float:
        """Poll `/health` until it answers 200; return the seconds it took."""
        import httpx

        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"vllm-ascend serve exited with {self.proc.returncode}\n"
                    f"{self.failure_report()}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return time.monotonic() - start
            except httpx.TransportError:
                pass
            # Bounded poll: one short wait per attempt, deadline above.
            self.proc_wait(interval)
        raise ServerError(f"vllm-ascend serve not healthy after {timeout:.0f} s\n{self.log_tail()}")

    def proc_wait(self, seconds: float) -> int | None:
        """Wait up to `seconds` for the server to exit; its return code, or None if running."""
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGINT the server's group (vLLM's graceful path), then SIGTERM, then SIGKILL; then
        `kill_group`. Returns the server's exit status."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            if self.proc_wait(timeout) is not None:
                break
        code = self.proc.wait(timeout=timeout)
        self.kill_group()
        return code

    def kill_group(self) -> None:
        """SIGKILL what is left of the server's process group: the server may have exited
        while processes it started (engine core, workers) still run."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
