"""`vllm-ascend demo`: a real model through real vLLM on the Ascend host-CPU platform, in this
process, with the user's compile cache (the package README, "Running a model on the host-CPU
platform").
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from vllm_ascend.base.trusted_roots import TrustedRoots
from vllm_ascend.checkpoints import CheckpointError, ModelPackageMissing, smollm2_checkpoint
from vllm_ascend.checkpoints.tiny_models import make_tiny_model
from vllm_ascend.doctor.import_advice import torch_import_problem
from vllm_ascend.entrypoints.console import write_stdout
from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs
from vllm_ascend.entrypoints.model_dir import read_model_config
from vllm_ascend.process.owned_tree import (
    become_subreaper,
    end_process_tree,
    interrupt_on_sigterm,
    start_up_interrupted,
)
from vllm_ascend.process.process_setup import current_process_setup

REAL_MODEL: Final = "smollm2"
# --model choice -> tiny-model factory arch.
MODELS: Final = {"llama": "llama", "qwen3": "qwen3", "moe": "qwen3_moe"}
FALLBACK_MODEL: Final = "qwen3"
DEFAULT_PROMPTS: Final = (
    "What is the capital of France?",
    "How many days are in a week?",
)
EXAMPLE_HOST: Final = "a2-8npu"
# The demo's plugin log files, under the compile cache root (a stable path: see run_demo).
DEMO_LOG_DIR: Final = "vllm_ascend_demo_logs"
# Tokens per engine step: the demo's prompts are a few dozen tokens, and vLLM's CPU default
# (4096) makes the warm-up push a 4096-token dummy batch through every layer at each start.
DEMO_BATCHED_TOKENS: Final = 512


@dataclass(frozen=True)
class DemoOptions:
    """What the demo runs: `model` is "smollm2", a key of MODELS or a checkpoint directory."""

    model: str = REAL_MODEL
    fusion: bool = True
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    max_tokens: int = 48
    layers: int = 2

    def __post_init__(self) -> None:
        if self.model != REAL_MODEL and self.model not in MODELS:
            if not os.path.lexists(Path(self.model) / "config.json"):
                raise ValueError(
                    f"model={self.model!r} is not allowed; use {REAL_MODEL} (the default), one "
                    f"of the tiny models {', '.join(MODELS)}, or a local Hugging Face checkpoint "
                    "directory (with a config.json)"
                )
            read_model_config(self.model)  # a bad config.json is a usage error, said now
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens} must be >= 1")
        if not self.prompts:
            raise ValueError("at least one prompt is needed")


@dataclass(frozen=True)
class DemoModel:
    """The model a run uses: name, directory, whether trained, why the tiny fallback replaced it."""

    name: str
    path: Path
    real_weights: bool
    fallback: str | None = None


def resolve_model(options: DemoOptions, workdir: Path) -> DemoModel:
    """The checkpoint directory of `options.model` (SmolLM2 converted on first use, or tiny)."""
    if options.model == REAL_MODEL:
        try:
            return DemoModel(REAL_MODEL, smollm2_checkpoint(), real_weights=True)
        except ModelPackageMissing as exc:
            note = (f"{exc}. Running the tiny random-weight {FALLBACK_MODEL} model instead "
                    "(its answers are noise).")
            print(f"vllm-ascend demo: {note}", file=sys.stderr, flush=True)
            path = make_tiny_model(MODELS[FALLBACK_MODEL], workdir / "model", layers=options.layers)
            return DemoModel(FALLBACK_MODEL, path, real_weights=False, fallback=note)
    if options.model in MODELS:
        path = make_tiny_model(MODELS[options.model], workdir / "model", layers=options.layers)
        return DemoModel(options.model, path, real_weights=False)
    return DemoModel(options.model, Path(os.path.realpath(options.model)), real_weights=True)


class DemoError(RuntimeError):
    """The demo cannot run; the message says why."""


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, with its type."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


def compile_cache_root(environ: dict[str, str] | None = None,
                       roots: TrustedRoots | None = None) -> Path:
    """The user's vLLM cache root as vLLM computes it, or the private fallback if it is refused."""
    env = dict(os.environ if environ is None else environ)
    return (TrustedRoots() if roots is None else roots).secure_vllm_cache_root(env)


def prepare_process(workdir: Path) -> None:
    """Set the environment for an in-process host-CPU engine; call before `import vllm`."""
    roots = current_process_setup().roots  # the process's: one warning per refused root
    env = engine_env(device="cpu", cache_root=compile_cache_root(roots=roots), roots=roots)
    for name in set(os.environ) - set(env):
        del os.environ[name]
    os.environ.update(env)
    # vLLM's logs (errors only, unless the caller set a level) go to stderr: stdout holds
    # only the demo's report.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if sys.pycache_prefix is not None:
        # This interpreter took its prefix from the environment before any check.
        sys.pycache_prefix = prefix
    elif sys.dont_write_bytecode and prefix is not None:
        # uv installs without bytecode; caching it makes the next `import vllm` 2-3x faster.
        sys.pycache_prefix = prefix
        sys.dont_write_bytecode = False


def binding_plans(cpu_binding: Any) -> dict[str, Any]:
    """The CPU-binding plans for this host (or why none) and the bundled example host."""
    import ascend_topology as topo

    options = topo.PlanOptions(
        min_cpus_per_npu=cpu_binding.min_cpus_per_npu,
        bind_irq=cpu_binding.bind_irq,
        migrate_memory=cpu_binding.migrate_memory,
    )
    result: dict[str, Any] = {}
    try:
        live = topo.plan(topo.read_live_host(), options)
        result["this_host"] = {"plan": live.to_dict(), "text": live.explain()}
    except topo.TopologyError as exc:
        result["this_host"] = {"plan": None, "reason": str(exc)}
    example = topo.plan(topo.load_recorded_host(topo.example_host_dir(EXAMPLE_HOST)), options)
    result["example_host"] = {
        "name": EXAMPLE_HOST,
        "plan": example.to_dict(),
        "text": example.explain(),
    }
    return result


def chat(llm: Any, questions: tuple[str, ...], *, max_tokens: int,
         ignore_eos: bool) -> tuple[list[dict[str, Any]], float]:
    """Greedy answers to `questions` through the chat template, and the wall time in seconds."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    start = time.perf_counter()
    if getattr(llm.get_tokenizer(), "chat_template", None):
        conversations = [[{"role": "user", "content": q}] for q in questions]
        results = llm.chat(conversations, params, use_tqdm=False)
    else:
        results = llm.generate(list(questions), params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    outputs = [
        {"prompt": q, "text": r.outputs[0].text.strip(),
         "token_ids": [int(t) for t in r.outputs[0].token_ids]}
        for q, r in zip(questions, results, strict=True)
    ]
    return outputs, elapsed


def run_demo(options: DemoOptions, workdir: Path) -> dict[str, Any]:
    """Run the demo in `workdir` (tiny model and compile cache) and return its result."""
    prepare_process(workdir)

    # `import torch` first: a torch-npu that does not load breaks it, and the model's
    # conversion needs torch. Its time belongs to the engine's start (vLLM imports torch).
    torch_start, torch_cpu = time.perf_counter(), time.process_time()
    problem = torch_import_problem()
    if problem is not None:
        raise DemoError(problem)
    torch_s = time.perf_counter() - torch_start
    torch_cpu_s = time.process_time() - torch_cpu

    model = resolve_model(options, workdir)
    config = read_model_config(model.path)
    start, cpu_start = time.perf_counter(), time.process_time()
    from vllm import LLM
    from vllm.platforms import current_platform

    # Local: torch and vLLM (`vllm-ascend` and its doctor start without them).
    from vllm_ascend.compilation.pass_manager import fusion_report, fusion_sites
    from vllm_ascend.engine import engine_of

    # The plugin's log files go to a fixed directory in the compile cache root: vLLM's cache
    # key covers additional_config (the log path included), so a per-run directory would
    # make every run compile again.
    log_dir = Path(os.environ["VLLM_CACHE_ROOT"]) / DEMO_LOG_DIR
    kwargs = llm_kwargs(str(model.path), fusion=options.fusion, log_dir=str(log_dir),
                        max_num_batched_tokens=DEMO_BATCHED_TOKENS)
    try:
        llm = LLM(**kwargs)
    except Exception as exc:  # vLLM refuses the model: its message, not its traceback
        raise DemoError(f"vLLM cannot run the model in {model.path}: "
                        f"{_first_line(exc)}") from None
    startup_s = time.perf_counter() - start + torch_s
    # CPU seconds of this process (all its threads) over the same span: on a shared host the
    # wall time above mostly measures the other jobs.
    startup_cpu_s = time.process_time() - cpu_start + torch_cpu_s
    # Random weights rarely pick the end-of-turn token: they answer max_tokens tokens.
    outputs, elapsed = chat(llm, options.prompts, max_tokens=options.max_tokens,
                            ignore_eos=not model.real_weights)
    generated = sum(len(o["token_ids"]) for o in outputs)
    platform = type(current_platform)
    vllm_config = llm.llm_engine.vllm_config
    resolved = engine_of(vllm_config).config  # the engine's own: resolved once, by its pipeline
    return {
        "model": model.name,
        "model_dir": str(model.path) if model.real_weights else None,
        "real_weights": model.real_weights,
        "fallback": model.fallback,
        "arch": MODELS.get(model.name, config.get("model_type")),
        "num_layers": config.get("num_hidden_layers"),
        "dtype": kwargs["dtype"],
        "chat": True,
        "platform": f"{platform.__module__}.{platform.__qualname__}",
        "fusion_enabled": options.fusion,
        "fusion": fusion_report(vllm_config),
        "fusion_sites": fusion_sites(vllm_config),
        "compile_cache": os.environ.get("VLLM_CACHE_ROOT"),
        "ascend_config": resolved.summary(),
        "cpu_binding": binding_plans(resolved.cpu_binding_config),
        "outputs": outputs,
        "generated_tokens": generated,
        "generate_s": round(elapsed, 4),
        "tokens_per_s": round(generated / elapsed, 1) if elapsed > 0 else None,
        "startup_s": round(startup_s, 1),
        "startup_cpu_s": round(startup_cpu_s, 1),
    }


def format_text(result: dict[str, Any]) -> str:
    """The human-readable report."""
    if result["real_weights"]:
        what = (f"{result['model']} ({result['arch']}, {result['num_layers']} layers, "
                f"{result['dtype']}, {result['model_dir']})")
    else:
        what = (f"tiny {result['arch']} model ({result['num_layers']} layers, random weights, "
                f"{result['dtype']})")
    lines = []
    if result["fallback"]:
        lines += [f"NOTE: {result['fallback']}", ""]
    cpu = f" ({result['startup_cpu_s']} s of CPU)" if "startup_cpu_s" in result else ""
    lines += [
        f"vllm-ascend demo: {what} on {result['platform'].rsplit('.', 1)[-1]}, engine ready in "
        f"{result['startup_s']} s{cpu}",
        "",
        "== Ascend config (resolved) ==",
    ]
    for key, value in result["ascend_config"].items():
        lines.append(f"  {key}: {value}")
    binding = result["cpu_binding"]
    lines += ["", "== CPU binding: this host =="]
    here = binding["this_host"]
    lines.append(here["text"] if here["plan"] is not None else f"  not applied: {here['reason']}")
    example = binding["example_host"]
    lines += ["", f"== CPU binding: example host {example['name']} ==", example["text"]]
    state = "on" if result["fusion_enabled"] else "off (--no-fusion)"
    lines += ["", f"== Fusion report (passes {state}; sites rewritten) =="]
    sites = result.get("fusion_sites") or {}
    if sites.get("from_cache"):
        lines.append(
            f"  compiled graphs came from the compile cache ({sites.get('loaded_artifacts', 0)} "
            f"artifacts loaded from {result['compile_cache']}): their sites were fused when "
            "they were compiled, so this run's passes rewrote none"
        )
    for name, count in result["fusion"].items():
        lines.append(f"  {name}: {count}")
    lines += ["", "== Chat (greedy, through the model's chat template) =="]
    for output in result["outputs"]:
        answer = output["text"].replace("\n", "\n     ")
        lines += [f"  Q: {output['prompt']}", f"  A: {answer}"]
    lines.append(
        f"  {result['generated_tokens']} tokens in {result['generate_s']:.2f} s: "
        f"{result['tokens_per_s']} tokens/s"
    )
    return "\n".join(lines)


def main(options: DemoOptions, *, as_json: bool = False) -> int:
    """Run the demo and print its report; a failure is one line on stderr and exit status 1."""
    if sys.stdout is None:  # `>&-`: refuse before minutes of work whose report has nowhere to go
        return write_stdout("", "vllm-ascend demo")
    # Owns what it starts: a signal while the engine runs ends the engine processes too.
    become_subreaper()
    interrupt_on_sigterm(exit_status=130)
    try:
        return _run_and_report(options, as_json)
    except KeyboardInterrupt:
        print("vllm-ascend demo: interrupted", file=sys.stderr)
        return 130
    except Exception:
        if not start_up_interrupted():
            raise
        print("vllm-ascend demo: interrupted", file=sys.stderr)
        return 130
    finally:
        end_process_tree()


def _run_and_report(options: DemoOptions, as_json: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="vllm-ascend-demo-") as tmp:
        saved_stdout = os.dup(1)
        try:
            if as_json:
                # Anything a library prints while the engine runs goes to stderr.
                sys.stdout.flush()
                os.dup2(2, 1)
            result = run_demo(options, Path(tmp))
        except (CheckpointError, DemoError, ValueError) as exc:
            print(f"vllm-ascend demo: error: {exc}", file=sys.stderr)
            return 1
        finally:
            sys.stdout.flush()
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
    text = json.dumps(result) if as_json else format_text(result)
    return write_stdout(text + "\n", "vllm-ascend demo")
