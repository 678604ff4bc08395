"""The two classic graph-runtime bugs, injected into a running NPU engine's model runner.

- ``skip_update``: full replays skip ``update_full_graph_params`` (the attention calls keep the
  query ends and sequence lengths baked in at capture);
- ``fresh_input``: each step the runner's token-id buffer is a new tensor, so the runtime
  copies the step's tokens into it and hands it to the model instead of writing the tensor
  the graph captured.

On hardware both give silently wrong tokens; the emulated graph must show the same. Each fault
is injected through ``LLM.collective_rpc`` (it runs on every worker) and can be cleared again.
"""

from __future__ import annotations

from typing import Any

FAULTS = ("skip_update", "fresh_input")


def _no_update(*args: Any, **kwargs: Any) -> None:
    """``update_full_graph_params`` that forgets to update anything."""


def set_fault(worker: Any, fault: str | None) -> str:
    """On one worker: inject ``fault`` (one of ``FAULTS``) or clear every fault (None)."""
    import torch

    runner = worker.model_runner
    wrapper = runner.model
    params = getattr(wrapper, "params", None)
    if params is None:
        raise RuntimeError("the model runner holds no NPU graph wrapper (is graph mode on?)")
    original = getattr(runner, "_fault_original", None)
    if original is not None:  # clear: the runner's own step and its captured buffer
        runner.execute_model, runner.input_ids.gpu = original
        del runner._fault_original
    params.__dict__.pop("update_full_graph_params", None)
    if fault is None:
        return "cleared"
    if fault == "skip_update":
        params.update_full_graph_params = _no_update
    elif fault == "fresh_input":
        step = runner.execute_model

        def fresh_input_step(*args: Any, **kwargs: Any) -> Any:
            runner.input_ids.gpu = torch.empty_like(runner.input_ids.gpu)
            return step(*args, **kwargs)

        runner._fault_original = (step, runner.input_ids.gpu)
        runner.execute_model = fresh_input_step
    else:
        raise ValueError(f"unknown graph fault {fault!r}; allowed: {', '.join(FAULTS)}")
    return fault


def graph_report(worker: Any) -> dict[str, Any]:
    """On one worker: the graph mode, the captured FULL graphs (token count -> replays), the
    engine's capture count (FULL and PIECEWISE) and, on the emulated device, what its
    npugraph_ex/torchair did in this process so far (``graph_ex``: ``GraphExTally.report()``;
    None on another device)."""
    from torch_npu_double.emulation.device import installed
    from vllm_ascend.engine import engine_of

    runner = worker.model_runner
    entries = getattr(runner.model, "entries", None) or {}
    emulation = installed()
    return {
        "mode": runner.compilation_config.cudagraph_mode.name,
        "replays": {str(getattr(key, "num_tokens", key)): entry.replays
                    for key, entry in entries.items() if entry.graph is not None},
        "captures": engine_of(runner.vllm_config).captures.count,
        "capture_s": engine_of(runner.vllm_config).captures.seconds,
        "graph_ex": None if emulation is None else emulation.graph_ex.report(),
    }
