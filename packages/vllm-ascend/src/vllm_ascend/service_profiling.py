"""The service-profiling symbol file that ms_service_profiler reads.

Written once per vLLM version to ``$XDG_CONFIG_HOME/vllm_ascend/`` (default ``~/.config``),
atomically and never over an existing file (a user's edits win). It lists only symbols that
exist in the installed code: existence is checked from the modules' source (no import).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("vllm_ascend.service_profiling")

_SCHED = "vllm.v1.core.sched.scheduler:Scheduler"
_RUNNER = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"


@dataclass(frozen=True)
class ProfilingSymbol:
    """One entry: ``symbol`` is ``module.path:Qualified.name``."""

    symbol: str
    domain: str
    name: str
    handler: str | None = None

    def to_yaml(self) -> str:
        lines = [f'- symbol: "{self.symbol}"', f"  domain: {self.domain}", f"  name: {self.name}"]
        if self.handler:
            lines.append(f'  handler: "{self.handler}"')
        return "\n".join(lines)


VLLM_CANDIDATES: tuple[ProfilingSymbol, ...] = (
    ProfilingSymbol("vllm.entrypoints.openai.chat_completion.serving:"
                    "OpenAIServingChat.create_chat_completion", "OpenAI", "ChatCompletion"),
    ProfilingSymbol("vllm.entrypoints.openai.completion.serving:"
                    "OpenAIServingCompletion.create_completion", "OpenAI", "Completion"),
    ProfilingSymbol("vllm.v1.engine.async_llm:AsyncLLM.add_request", "Request", "AddRequest"),
    ProfilingSymbol("vllm.v1.engine.async_llm:AsyncLLM.generate", "Request", "Generate"),
    ProfilingSymbol("vllm.v1.engine.output_processor:OutputProcessor.process_outputs",
                    "Request", "ProcessOutputs"),
    ProfilingSymbol("vllm.v1.engine.core:EngineCore.step", "Engine", "EngineStep"),
    ProfilingSymbol("vllm.v1.engine.core:EngineCore.add_request", "Engine", "EngineAddRequest"),
    ProfilingSymbol(f"{_SCHED}.schedule", "Schedule", "Schedule"),
    ProfilingSymbol(f"{_SCHED}.update_from_output", "Schedule", "UpdateFromOutput"),
    ProfilingSymbol(f"{_SCHED}.add_request", "Scheduler", "SchedulerAddRequest"),
    ProfilingSymbol(f"{_SCHED}.finish_requests", "Scheduler", "FinishRequests"),
    ProfilingSymbol("vllm.v1.core.kv_cache_manager:KVCacheManager.allocate_slots",
                    "Scheduler", "AllocateSlots"),
    ProfilingSymbol("vllm.v1.core.kv_cache_manager:KVCacheManager.get_computed_blocks",
                    "Scheduler", "GetComputedBlocks"),
    ProfilingSymbol("vllm.v1.core.kv_cache_manager:KVCacheManager.free", "Scheduler", "FreeBlocks"),
    ProfilingSymbol(f"{_RUNNER}.execute_model", "Execute", "ExecuteModel"),
    ProfilingSymbol(f"{_RUNNER}._prepare_inputs", "Execute", "PrepareInputs"),
    ProfilingSymbol(f"{_RUNNER}.sample_tokens", "Sample", "SampleTokens"),
    ProfilingSymbol("vllm.model_executor.layers.logits_processor:LogitsProcessor.forward",
                    "ModelForward", "ComputeLogits"),
    ProfilingSymbol("vllm.v1.sample.sampler:Sampler.forward", "Sample", "Sampler"),
    ProfilingSymbol("vllm.v1.sample.rejection_sampler:RejectionSampler.forward",
                    "SpecDecode", "RejectionSampler"),
    ProfilingSymbol("vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.propose",
                    "SpecDecode", "Propose"),
    # Candidates kept for other vLLM versions; filtered out when absent.
    ProfilingSymbol("vllm.v1.worker.gpu_model_runner:GPUModelRunner._execute_model_forward",
                    "ModelForward", "ModelForward"),
)

OWN_SYMBOLS: tuple[ProfilingSymbol, ...] = (
    ProfilingSymbol("vllm_ascend.forward_context:set_ascend_forward_context",
                    "ModelForward", "AscendForwardContext"),
    ProfilingSymbol("vllm_ascend.moe_comm:select_moe_comm_method", "ModelForward", "MoECommSelect"),
    ProfilingSymbol("vllm_ascend.pass_manager:AscendPassManager.__call__", "Execute",
                    "AscendFusionPasses"),
    ProfilingSymbol("vllm_ascend.compiler:AscendCompiler.compile", "Execute", "AscendCompile"),
)


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/vllm_ascend`` (``~/.config/vllm_ascend`` when unset)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "vllm_ascend"


def config_path(vllm_version: str, environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / f"service_profiling_symbols.{vllm_version}.yaml"


def symbol_exists(symbol: str) -> bool:
    """Whether ``module:Qual.name`` is defined in the module's source (found without import)."""
    module, _, qualname = symbol.partition(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    body: list[ast.stmt] = tree.body
    for part in qualname.split("."):
        node = next((n for n in body if _defines(n, part)), None)
        if node is None:
            return False
        body = getattr(node, "body", [])
    return True


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name == name
    return False


def runtime_symbols(runtime_classes: Mapping[str, str]) -> list[ProfilingSymbol]:
    """Symbols of installed runtime extensions (their worker's ``execute_model``)."""
    worker = runtime_classes.get("worker")
    if not worker:
        return []
    module, _, cls = worker.rpartition(".")
    return [ProfilingSymbol(f"{module}:{cls}.execute_model", "Execute", "RuntimeExecuteModel")]


def existing_symbols(candidates: Iterable[ProfilingSymbol]) -> list[ProfilingSymbol]:
    return [c for c in candidates if symbol_exists(c.symbol)]


def render(symbols: Iterable[ProfilingSymbol], vllm_version: str) -> str:
    header = (f"# Service-profiling symbols for vLLM {vllm_version}, generated by vllm-ascend.\n"
              "# Edit freely: this file is never overwritten.\n")
    return header + "\n".join(s.to_yaml() for s in symbols) + "\n"


def generate_service_profiling_config(
    vllm_version: str,
    *,
    runtime_classes: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path | None:
    """Write the symbol file for ``vllm_version`` unless it exists; return its path or None.

    Never raises: an unwritable directory is logged once and None returned.
    """
    target = config_path(vllm_version, environ)
    if target.exists():
        return target
    candidates = [*VLLM_CANDIDATES, *OWN_SYMBOLS, *runtime_symbols(runtime_classes or {})]
    text = render(existing_symbols(candidates), vllm_version)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return _write_once(target, text)
    except OSError as exc:
        logger.warning("cannot write service-profiling symbols to %s: %s",
                       target, exc)
        return None


def _write_once(target: Path, text: str) -> Path:
    """Write ``text`` to a temp file in the same directory, then link it into place.

    ``os.link`` fails when the target exists, so concurrent writers never overwrite
    each other or a user's file; the temp file is always removed.
    """
    fd, tmp = tempfile.mkstemp(prefix=f"{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return target
