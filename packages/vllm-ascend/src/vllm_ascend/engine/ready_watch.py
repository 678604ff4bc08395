"""Compiles, pass-manager runs and graph captures of an engine, before and after it is ready
(counted, logged once per cause, or refused: the package README, "No compile after ready").
"""
# torch's compile callbacks are per process, so a watch counts only compiles inside its engine's
# work on the compiling thread (ReadyWatch.watching); the callbacks hold the watch weakly.

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

STRICT_KEY = "ascend_compilation_config.forbid_compile_after_ready"
KINDS = ("compiles", "pass_runs", "captures")
MAX_REPORTED_CAUSES = 50  # the rank report lists this many; the log has every one
_LABELS = {"compiles": "compile", "pass_runs": "pass-manager run", "captures": "graph capture"}


class CompileAfterReadyError(RuntimeError):
    """A compile, pass-manager run or capture after the engine was ready, in strict mode."""


def _refusal(message: str) -> Exception:
    """The exception a Dynamo start callback raises to refuse a compile (``Unsupported``)."""
    # A soft failure: Dynamo runs the frame uncompiled from then on instead of failing the caller.
    from torch._C._dynamo.eval_frame import _FrameAction as FrameAction
    from torch._C._dynamo.eval_frame import _FrameExecStrategy as FrameExecStrategy
    from torch._dynamo.exc import Unsupported

    class CompileRefused(Unsupported, CompileAfterReadyError):
        pass

    refused = CompileRefused(message, gb_type="compile after ready")
    refused.frame_exec_strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    return refused


def _strip_compile_id(reason: str) -> str:
    """A guard-failure reason without Dynamo's leading compile id, so recompiles share a cause."""
    head, sep, rest = reason.partition(": ")
    return rest if sep and "/" in head and " " not in head else reason


def _code_name(code: Any) -> str:
    name = getattr(code, "co_name", None)
    if name is None:
        return str(code)
    return f"{name} ({getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')})"


@dataclass
class ReadyWatch:
    """Counts of one engine's compiles, pass-manager runs and captures, before and after ready."""

    failures: Any = None
    ready: bool = False
    strict: bool = False
    compiles: int = 0
    compile_seconds: float = 0.0
    pass_runs: int = 0
    aot_compiles: int = 0
    aot_seconds: float = 0.0
    after_ready: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    causes: list[str] = field(default_factory=list)
    on_after_ready: Callable[[], None] | None = None
    _started: dict[str, float] = field(default_factory=dict, repr=False)
    _scope: threading.local = field(default_factory=threading.local, repr=False)
    _callbacks: tuple[Callable[[Any], None], Callable[[Any], None]] | None = field(
        default=None, repr=False)
    _seen_failures: dict[Any, int] = field(default_factory=dict, repr=False)
    _logged: set[str] = field(default_factory=set, repr=False)

    def mark_ready(self, *, strict: bool = False,
                   on_after_ready: Callable[[], None] | None = None,
                   aot: tuple[int, float] = (0, 0.0)) -> None:
        """Make later events ``after_ready`` (errors with ``strict``); ``aot``: vLLM's AOT
        compiles."""
        self.ready, self.strict, self.on_after_ready = True, strict, on_after_ready
        self.aot_compiles, self.aot_seconds = aot
        self._new_failures()  # those of start-up are not causes of later compiles
        totals = self.as_report()["compiles"]
        logger.info("engine ready after %d compiles (%.3f s) and %d pass-manager runs; "
                    "compiles after ready are %s", totals["count"], totals["seconds"],
                    self.pass_runs, f"errors ({STRICT_KEY})" if strict else "counted")

    def note(self, kind: str, cause: str, *, refusable: bool = False) -> None:
        """Count one event of ``kind``; after ready, log its cause once (strict: refuse it)."""
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not allowed; allowed: {', '.join(KINDS)}")
        if kind == "pass_runs":
            self.pass_runs += 1
        if not self.ready:
            return
        self.after_ready[kind] += 1
        message = f"{_LABELS[kind]} after the engine was ready: {cause}"
        refused = self.strict and refusable
        if cause not in self._logged:
            self._logged.add(cause)
            if len(self.causes) < MAX_REPORTED_CAUSES:
                self.causes.append(cause)
            if refused:
                logger.error("%s; refused (%s is true): the function runs uncompiled from now "
                             "on (%s after ready so far: %s)", message, STRICT_KEY, kind,
                             self.after_ready[kind])
            else:
                logger.warning("%s (%s after ready so far: %s)", message, kind,
                               self.after_ready[kind])
        if self.on_after_ready is not None:
            self.on_after_ready()
        if refused:
            raise _refusal(f"{message}; refused because {STRICT_KEY} is true")
        if self.strict:
            raise CompileAfterReadyError(
                f"{message}; {STRICT_KEY} is true, so the engine does not compile after it is "
                f"ready (set it to false to count such compiles instead)")

    def as_report(self) -> dict[str, Any]:
        """The rank report's fields: ``compiles``, ``pass_runs``, ``ready``, ``after_ready``."""
        return {
            "compiles": {"count": self.compiles + self.aot_compiles,
                         "seconds": round(self.compile_seconds + self.aot_seconds, 6),
                         "dynamo": self.compiles, "aot": self.aot_compiles},
            "pass_runs": self.pass_runs,
            "ready": self.ready,
            "after_ready": {**self.after_ready, "causes": list(self.causes)},
        }

    @property
    def active(self) -> bool:
        """Whether this thread is inside the engine's work (:meth:`watching`)."""
        return bool(getattr(self._scope, "depth", 0))

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """The engine's work on this thread: Dynamo compiles inside it are the engine's."""
        self._scope.depth = getattr(self._scope, "depth", 0) + 1
        try:
            yield
        finally:
            self._scope.depth -= 1

    # Dynamo compiles, through torch._dynamo.callback_handler.
    def install(self) -> None:
        """Register the Dynamo compile callbacks (idempotent; again after
        ``torch._dynamo.reset()``)."""
        from torch._dynamo.callback import callback_handler

        if self.failures is None:
            from torch._dynamo.utils import guard_failures

            self.failures = guard_failures
        if self._callbacks is None:
            self._callbacks = _weak_callbacks(self)
            weakref.finalize(self, _remove_callbacks, self._callbacks)
        started, ended = self._callbacks
        if started not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(started)
        if ended not in callback_handler.end_callbacks:
            callback_handler.register_end_callback(ended)

    def uninstall(self) -> None:
        """Remove the Dynamo compile callbacks (idempotent)."""
        if self._callbacks is not None:
            _remove_callbacks(self._callbacks)

    @property
    def installed(self) -> bool:
        """Whether the watch's callbacks are registered with Dynamo."""
        from torch._dynamo.callback import callback_handler

        return self._callbacks is not None and \
            self._callbacks[0] in callback_handler.start_callbacks

    def compile_started(self, args: Any) -> None:
        """Dynamo's start callback: count the compile and note its cause after ready."""
        if not self.active:
            self._new_failures()  # not causes of this engine's later compiles
            return
        compile_id = str(getattr(args, "compile_id", "?"))
        self._started[compile_id] = time.perf_counter()
        self.compiles += 1
        new = self._new_failures()
        if not self.ready:
            return
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        if new:
            cause = "guard failure: " + "; ".join(
                f"{name}: {_strip_compile_id(str(reason).splitlines()[0])}"
                for name, reason in new)
        elif trigger != "DYNAMO":
            cause = f"{trigger.lower()} compile"
        else:
            cause = "a function compiled for the first time"
        self.note("compiles", f"Dynamo compile {compile_id}: {cause}",
                  refusable=trigger == "DYNAMO")

    def compile_ended(self, args: Any) -> None:
        start = self._started.pop(str(getattr(args, "compile_id", "?")), None)
        if start is not None:
            self.compile_seconds += time.perf_counter() - start

    def _new_failures(self) -> list[tuple[str, Any]]:
        """Guard failures recorded since the last look, as (function, reason)."""
        found: list[tuple[str, Any]] = []
        for code, reasons in list((self.failures or {}).items()):
            seen = self._seen_failures.get(code, 0)
            if len(reasons) < seen:  # the list was emptied and refilled
                seen = 0
            found.extend((_code_name(code), reason) for reason in reasons[seen:])
            self._seen_failures[code] = len(reasons)
        return found


def _weak_callbacks(watch: ReadyWatch) -> tuple[Callable[[Any], None], Callable[[Any], None]]:
    """Dynamo callbacks that reach ``watch`` weakly (a freed watch's callbacks do nothing)."""
    ref = weakref.ref(watch)

    def started(args: Any) -> None:
        found = ref()
        if found is not None:
            found.compile_started(args)

    def ended(args: Any) -> None:
        found = ref()
        if found is not None:
            found.compile_ended(args)

    return started, ended


def _remove_callbacks(callbacks: tuple[Callable[[Any], None], Callable[[Any], None]]) -> None:
    from torch._dynamo.callback import callback_handler

    started, ended = callbacks
    if started in callback_handler.start_callbacks:
        callback_handler.remove_start_callback(started)
    if ended in callback_handler.end_callbacks:
        callback_handler.remove_end_callback(ended)
