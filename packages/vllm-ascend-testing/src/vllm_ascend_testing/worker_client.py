"""Parent side of `llm_worker`: start the child, send requests, wait with a deadline."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class WorkerError(RuntimeError):
    """The worker failed a request, died, or did not answer in time (message has its log)."""


class LLMWorker:
    """One `python -m vllm_ascend_testing.llm_worker` child with its own environment (and
    working directory, `cwd`).

    vLLM's output goes to `log_path`; error messages quote its tail. Use as a context manager
    or call `close()`.
    """

    def __init__(
        self, env: Mapping[str, str], log_path: str | Path, cwd: str | Path | None = None
    ) -> None:
        self.log_path = Path(log_path)
        read_fd, write_fd = os.pipe()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_ascend_testing.llm_worker", str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                pass_fds=(write_fd,),
                text=True,
            )
        os.close(write_fd)
        self._results = os.fdopen(read_fd, "r", encoding="utf-8")
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._results, selectors.EVENT_READ)

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines the worker wrote (vLLM logs, tracebacks)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def request(self, op: str, *, timeout: float = 300.0, **args: Any) -> dict[str, Any]:
        """Send one request and return its answer; raise `WorkerError` on failure or timeout."""
        if self.proc.poll() is not None:
            raise WorkerError(f"worker exited with {self.proc.returncode}\n{self.log_tail()}")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while not self._selector.select(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                self.close()
                raise WorkerError(f"{op}: no answer within {timeout:.0f} s\n{self.log_tail()}")
        line = self._results.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            raise WorkerError(f"{op}: worker exited with {code}\n{self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise WorkerError(f"{op} failed:\n{answer['error']}")
        return answer

    def close(self, timeout: float = 30.0) -> None:
        """Ask the worker to exit; kill it if it does not within `timeout` seconds."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "exit"}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self._selector.close()
        self._results.close()

    def __enter__(self) -> LLMWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
