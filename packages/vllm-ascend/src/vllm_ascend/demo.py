"""`vllm-ascend demo`: a tiny model through real vLLM on the Ascend host-CPU platform.

Builds a tiny random-weight model in a temporary directory, runs it with `vllm.LLM` in this
process (so the fusion counts are the ones this process's passes made) with the Ascend compile
backend and a fresh compile cache, and reports the resolved Ascend config, the CPU-binding
plan for this host and for a bundled example host, the fusion report and the generated text.
The demo owns its process: it sets vLLM's environment before importing vLLM.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# --model choice -> tiny-model factory arch.
MODELS: Final = {"llama": "llama", "qwen3": "qwen3", "moe": "qwen3_moe"}
DEFAULT_PROMPTS: Final = ("Hello, my name is", "The capital of France is")
EXAMPLE_HOST: Final = "a2-8npu"


@dataclass(frozen=True)
class DemoOptions:
    """What the demo runs: `model` is a key of MODELS."""

    model: str = "qwen3"
    fusion: bool = True
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    max_tokens: int = 32
    layers: int = 2

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model={self.model!r}; allowed: {', '.join(MODELS)}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens} must be >= 1")
        if not self.prompts:
            raise ValueError("at least one prompt is needed")


def prepare_process(workdir: Path) -> None:
    """Environment for an in-process engine on the host-CPU platform; before `import vllm`."""
    from vllm_ascend.testing.engine_env import engine_env

    env = engine_env(device="cpu", cache_root=workdir / "vllm_cache")
    for name in set(os.environ) - set(env):
        del os.environ[name]
    os.environ.update(env)
    # vLLM's logs (errors only, unless the caller set a level) go to stderr: stdout holds
    # only the demo's report.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    if sys.dont_write_bytecode and sys.pycache_prefix is None:
        # uv installs without bytecode; caching it makes the next `import vllm` 2-3x faster.
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
        sys.dont_write_bytecode = False


def binding_plans(cpu_binding: Any) -> dict[str, Any]:
    """The CPU-binding plan ascend-topology makes for this host (or why it cannot), and for
    the bundled example host, with the options of the resolved config."""
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


def run_demo(options: DemoOptions, workdir: Path) -> dict[str, Any]:
    """Run the demo in `workdir` (model and compile cache) and return its result object."""
    prepare_process(workdir)
    from vllm_ascend.testing.generation import generate, llm_kwargs
    from vllm_ascend.testing.tiny_models import make_tiny_model

    arch = MODELS[options.model]
    model_dir = make_tiny_model(arch, workdir / "model", layers=options.layers)
    start = time.perf_counter()
    from vllm import LLM
    from vllm.platforms import current_platform

    from vllm_ascend.compilation.pass_manager import fusion_report
    from vllm_ascend.config_pipeline.resolve_step import resolve_for

    # The plugin's log files go to the temporary directory: the demo leaves nothing behind.
    llm = LLM(**llm_kwargs(str(model_dir), fusion=options.fusion, log_dir=str(workdir / "logs")))
    startup_s = time.perf_counter() - start
    outputs, elapsed = generate(llm, options.prompts, max_tokens=options.max_tokens)
    generated = sum(len(o["token_ids"]) for o in outputs)
    platform = type(current_platform)
    resolved = resolve_for(llm.llm_engine.vllm_config, str(getattr(platform, "soc", "cpu")))
    return {
        "model": options.model,
        "arch": arch,
        "num_layers": options.layers,
        "platform": f"{platform.__module__}.{platform.__qualname__}",
        "fusion_enabled": options.fusion,
        "fusion": fusion_report(),
        "ascend_config": resolved.summary(),
        "cpu_binding": binding_plans(resolved.cpu_binding_config),
        "outputs": [{k: o[k] for k in ("prompt", "text", "token_ids")} for o in outputs],
        "generated_tokens": generated,
        "generate_s": round(elapsed, 4),
        "tokens_per_s": round(generated / elapsed, 1) if elapsed > 0 else None,
        "startup_s": round(startup_s, 1),
    }


def format_text(result: dict[str, Any]) -> str:
    """The human-readable report."""
    lines = [
        f"vllm-ascend demo: tiny {result['arch']} model ({result['num_layers']} layers, random "
        f"weights) on {result['platform'].rsplit('.', 1)[-1]}, engine ready in "
        f"{result['startup_s']} s",
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
    for name, count in result["fusion"].items():
        lines.append(f"  {name}: {count}")
    lines += ["", "== Generation (greedy) =="]
    for output in result["outputs"]:
        lines.append(f"  {output['prompt']!r} -> {output['text']!r}")
    lines.append(
        f"  {result['generated_tokens']} tokens in {result['generate_s']:.2f} s: "
        f"{result['tokens_per_s']} tokens/s"
    )
    return "\n".join(lines)


def main(options: DemoOptions, *, as_json: bool = False) -> int:
    """Run the demo and print its report (text, or one JSON object with `as_json`)."""
    import json

    with tempfile.TemporaryDirectory(prefix="vllm-ascend-demo-") as tmp:
        saved_stdout = os.dup(1)
        try:
            if as_json:
                # Anything a library prints while the engine runs goes to stderr.
                sys.stdout.flush()
                os.dup2(2, 1)
            result = run_demo(options, Path(tmp))
        finally:
            sys.stdout.flush()
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
    if as_json:
        print(json.dumps(result))
    else:
        print(format_text(result))
    return 0
