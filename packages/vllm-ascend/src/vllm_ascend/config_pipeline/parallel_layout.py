"""The deployment's parallel layout: the NPU pipeline checks it (first, before any setting is
changed), the host-CPU pipeline places its ranks (last: its executor and one CPU pool each).

NPU platform, pure rules that need vLLM's view of the deployment: :func:`parallel_problems`
returns every problem (empty when the layout is valid; the speculative draft model's decode
context parallel (DCP) rules, :func:`draft_problems`, included) and
:func:`check_parallel_layout` raises one ValueError listing them all. vLLM checks DCP against
the target model only; the draft model's attention is split the same way, so its heads and
tensor-parallel size must fit DCP too.

Host-CPU platform: one CPU pool per local rank handed to vLLM's CPU workers.

vLLM's multiprocess executor gives each CPU worker the OpenMP CPU list of its local rank from
``VLLM_CPU_OMP_THREADS_BIND`` (``"0-3|4-7"``, DP x PP x TP order). Its automatic setting
wants one NUMA node per rank and fails on smaller hosts ("Not enough allowed NUMA nodes to bind
threads of 2 local CPUWorkers"), so the plugin plans the lists itself with ascend-topology (a
rank host: one device per local rank over the allowed CPUs) and writes them there. An explicit
value from the user wins; ``enable_cpu_binding: false`` leaves vLLM's own behaviour.

One rank, one engine: vLLM's CPU platform turns the single-rank executor ``"uni"`` into
``"mp"`` whenever the engine core is its own process, so a user's ``vllm.LLM`` or ``vllm-ascend
serve`` runs three processes: front end, engine core and one worker. The engine core then waits
for the worker by polling, which costs one CPU for the whole run: vLLM reserves it (one OpenMP
thread fewer; on a 2-core host the model runs on one core), and a pool over every CPU would
share its cores with the polling. :func:`keep_one_rank_in_engine_core` restores ``"uni"``: the
worker runs in the engine core process (its own process already, apart from the front end), the
scheduler runs between the steps, and OpenMP gets every allowed CPU.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend.base.config_channel import OMP_BIND_ENV, RANK_PLAN_ENV
from vllm_ascend.worker_duties.cpu_binding import handed_rank_plan, local_rank_count

logger = logging.getLogger(__name__)


# --- NPU platform: the speculative draft model under decode context parallel ----------------------

@dataclass(frozen=True)
class DraftFacts:
    """What the DCP rules read about speculative decoding (None fields: not applicable)."""

    # speculative_config.num_speculative_tokens_per_batch_size is set
    per_batch_size_schedule: bool = False
    # a draft model with its own attention (ngram and suffix decoding have none)
    has_model: bool = False
    use_mla: bool = False
    tensor_parallel_size: int = 1
    num_attention_heads: int = 0
    num_key_value_heads: int = 0


def draft_tensor_parallel_size(parallel_tp: int | None, draft_tp_setting: int | None,
                               target_tp: int) -> int:
    """The draft's TP: its parallel config's, else ``draft_tensor_parallel_size``, else the
    target model's."""
    for value in (parallel_tp, draft_tp_setting):
        if value:
            return int(value)
    return target_tp


def draft_of(vllm_config: Any) -> DraftFacts | None:
    """Draft facts of a VllmConfig (None without speculative decoding)."""
    spec = vllm_config.speculative_config
    if spec is None:
        return None
    model = getattr(spec, "draft_model_config", None)
    parallel = getattr(spec, "draft_parallel_config", None)
    schedule = bool(getattr(spec, "num_speculative_tokens_per_batch_size", None))
    if model is None:
        return DraftFacts(per_batch_size_schedule=schedule)
    return DraftFacts(
        per_batch_size_schedule=schedule,
        has_model=True,
        use_mla=bool(getattr(model, "use_mla", False)),
        tensor_parallel_size=draft_tensor_parallel_size(
            getattr(parallel, "tensor_parallel_size", None),
            getattr(spec, "draft_tensor_parallel_size", None),
            vllm_config.parallel_config.tensor_parallel_size,
        ),
        num_attention_heads=int(getattr(model.hf_text_config, "num_attention_heads", 0) or 0),
        num_key_value_heads=int(model.get_total_num_kv_heads()),
    )


def draft_problems(dcp: int, draft: DraftFacts | None) -> list[str]:
    """Every DCP rule the draft model breaks (nothing to check without spec decode or DCP)."""
    if draft is None or dcp <= 1:
        return []
    problems = []
    if draft.per_batch_size_schedule:
        problems.append(
            f"speculative_config.num_speculative_tokens_per_batch_size is not supported with "
            f"decode_context_parallel_size={dcp}; remove it or use DCP 1")
    # MLA keeps one latent KV head that every rank holds: nothing to split.
    if not draft.has_model or draft.use_mla:
        return problems
    tp, heads, kv_heads = (draft.tensor_parallel_size, draft.num_attention_heads,
                           draft.num_key_value_heads)
    if kv_heads <= 0:
        return [*problems, "the draft model reports no KV heads; DCP needs them"]
    if tp <= kv_heads:
        problems.append(
            f"decode_context_parallel_size={dcp} needs the draft model's tensor parallel size "
            f"({tp}) to be greater than its {kv_heads} KV heads; raise "
            f"draft_tensor_parallel_size or use DCP 1")
    elif dcp > tp // kv_heads:
        problems.append(
            f"decode_context_parallel_size={dcp} exceeds draft TP {tp} // {kv_heads} KV heads "
            f"= {tp // kv_heads}; allowed: at most {tp // kv_heads}")
    if (heads // kv_heads) % dcp:
        problems.append(
            f"the draft model's query heads per KV head ({heads} // {kv_heads} = "
            f"{heads // kv_heads}) must be divisible by decode_context_parallel_size={dcp}")
    return problems


# --- NPU platform: the layout rules ---------------------------------------------------------------

PRODUCER_ROLES = ("kv_producer", "kv_both")
CONSUMER_ROLES = ("kv_consumer", "kv_both")
# HCCL serves vLLM's "torch_nccl" device group; gloo stages through the CPU.
EPLB_COMMUNICATORS = (None, "torch_nccl", "torch_gloo")


@dataclass(frozen=True)
class LayoutFacts:
    """Values the rules read beyond DeploymentFacts."""

    use_mrv2: bool = False
    sequence_parallel_moe: bool = False
    cp_kv_cache_interleave_size: int = 1
    kv_extra_config: Mapping[str, Any] = field(default_factory=dict)
    kv_load_failure_policy: str = "fail"
    is_hybrid: bool = False
    eplb_use_async: bool = False
    eplb_communicator: str | None = None
    draft: DraftFacts | None = None
    npus_needed: int | None = None  # ranks this host's engines place on its NPUs
    npus_visible: int | None = None  # NPUs this process sees (None: not counted)
    visible_devices: str | None = None  # ASCEND_RT_VISIBLE_DEVICES, for the message


def npus_needed_here(par: Any) -> int | None:
    """The NPUs this host's workers index (the NPU worker's local rank, shifted by the data
    parallel shard): ranks per engine on this host times the engines on it; None when Ray or
    an external launcher places the ranks."""
    if (par.distributed_executor_backend in ("ray", "external_launcher")
            or par.data_parallel_backend == "ray"):
        return None
    try:
        per_engine = int(par.local_world_size)
    except (AttributeError, ValueError):  # vLLM's own checks name an inconsistent node count
        return None
    return per_engine * max(1, int(par.data_parallel_size_local or 1))


def device_count_problem(layout: LayoutFacts) -> str | None:
    """More ranks on this host than NPUs visible, said before any engine process starts."""
    needed, visible = layout.npus_needed, layout.npus_visible
    if needed is None or visible is None or needed <= visible:
        return None
    where = layout.visible_devices
    shown = f"ASCEND_RT_VISIBLE_DEVICES={where!r}" if where else "ASCEND_RT_VISIBLE_DEVICES unset"
    return (f"this host's ranks (tensor x pipeline x context parallel x local data parallel "
            f"sizes) need {needed} NPUs but {visible} are visible ({shown}); lower the parallel "
            "sizes or make more NPUs visible")


def parallel_problems(facts: Any, layout: LayoutFacts) -> list[str]:
    """Every violated layout rule (the existing plugin's
    _validate_draft_decode_context_parallel_config,
    _validate_parallel_config, _validate_sfa_dcp_kv_sp, check_kv_extra_config, the kv load
    failure policy and vLLM's EPLB), one message each naming the setting and what is allowed."""
    problems = draft_problems(facts.decode_context_parallel_size, layout.draft)
    too_few = device_count_problem(layout)
    if too_few is not None:
        problems.append(too_few)
    tp, dp = facts.tensor_parallel_size, facts.data_parallel_size
    pcp, dcp = facts.prefill_context_parallel_size, facts.decode_context_parallel_size
    if pcp > 1 and not layout.use_mrv2:
        problems.append(f"prefill_context_parallel_size={pcp} needs model runner v2 "
                        "(VLLM_USE_V2_MODEL_RUNNER=1)")
    if facts.uses_sfa and dcp > 1:
        if dcp != tp:
            problems.append(f"SFA with decode_context_parallel_size={dcp} needs it equal to "
                            f"tensor_parallel_size={tp}")
        if facts.soc == "A5":
            problems.append("SFA with decode context parallel is not implemented on A5")
    if facts.kv_connector is not None and pcp * dcp > 1 and (
        facts.block_size != layout.cp_kv_cache_interleave_size
    ):
        problems.append(f"with KV transfer and context parallel, block_size={facts.block_size} "
                        f"must equal cp_kv_cache_interleave_size="
                        f"{layout.cp_kv_cache_interleave_size}")
    if layout.sequence_parallel_moe:
        if tp <= 1:
            problems.append("sequence-parallel MoE needs tensor_parallel_size > 1")
        if facts.is_moe and not facts.enable_expert_parallel:
            problems.append("sequence-parallel MoE on a MoE model needs enable_expert_parallel")
    for role_set, section in ((PRODUCER_ROLES, "prefill"), (CONSUMER_ROLES, "decode")):
        part = layout.kv_extra_config.get(section)
        if facts.kv_role not in role_set or not isinstance(part, Mapping):
            continue
        for key, local in (("tp_size", tp), ("dp_size", dp)):
            if key in part and int(part[key]) != local:
                problems.append(f"kv_connector_extra_config.{section}.{key}={part[key]} must "
                                f"equal this instance's {key.split('_')[0].upper()}={local}")
    if layout.kv_load_failure_policy == "recompute" and layout.is_hybrid:
        problems.append("kv_transfer_config.kv_load_failure_policy='recompute' is not supported "
                        "for hybrid (attention + mamba) models; use 'fail'")
    if layout.use_mrv2 and facts.enable_eplb:
        if layout.eplb_use_async:
            problems.append("eplb_config.use_async=True is not supported on Ascend; set "
                            "use_async to false")
        if layout.eplb_communicator not in EPLB_COMMUNICATORS:
            problems.append(f"eplb_config.communicator={layout.eplb_communicator!r} is not "
                            f"available on Ascend; allowed: {list(EPLB_COMMUNICATORS)}")
    return problems


def layout_of(vllm_config: Any, npus_visible: int | None = None) -> LayoutFacts:
    """The layout of ``vllm_config``; ``npus_visible`` (the NPU platform's device count) turns
    on the device-count rule."""
    par = vllm_config.parallel_config
    kv = vllm_config.kv_transfer_config
    model = vllm_config.model_config
    eplb = getattr(par, "eplb_config", None)
    return LayoutFacts(
        use_mrv2=bool(getattr(vllm_config, "use_v2_model_runner", False)),
        sequence_parallel_moe=bool(getattr(par, "use_sequence_parallel_moe", False)),
        cp_kv_cache_interleave_size=int(getattr(par, "cp_kv_cache_interleave_size", 1) or 1),
        kv_extra_config=dict(kv.kv_connector_extra_config or {}) if kv is not None else {},
        kv_load_failure_policy=str(getattr(kv, "kv_load_failure_policy", "fail")),
        is_hybrid=bool(model is not None and model.is_hybrid),
        eplb_use_async=bool(getattr(eplb, "use_async", False)),
        eplb_communicator=getattr(eplb, "communicator", None),
        draft=draft_of(vllm_config),
        npus_needed=npus_needed_here(par) if npus_visible is not None else None,
        npus_visible=npus_visible,
        visible_devices=os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
    )


def check_parallel_layout(facts: Any, layout: LayoutFacts) -> None:
    problems = parallel_problems(facts, layout)
    if problems:
        raise ValueError("invalid parallel layout for Ascend:\n  " + "\n  ".join(problems))


# --- host-CPU platform: the one-rank executor and the rank plan -----------------------------------

# Executors whose workers are separate processes with a local rank (vLLM's OpenMP lists are
# used by "mp"; Ray workers bind through the worker hook alone).
_WORKER_PROCESS_BACKENDS = ("mp", "ray")


def keep_one_rank_in_engine_core(vllm_config: Any, backend_before: str | type | None,
                                 environ: Mapping[str, str] | None = None) -> str | None:
    """Put vLLM's single-rank executor ``"uni"`` back after the CPU defaults made it ``"mp"``
    (see the module doc); returns the decision line, or None when nothing changed. Kept as it
    is: an executor the user chose, several ranks or data-parallel engines (they get a pool
    each), an in-process engine (vLLM kept ``"uni"`` itself) and a
    ``VLLM_CPU_OMP_THREADS_BIND`` the user set (vLLM's worker process applies it)."""
    env = os.environ if environ is None else environ
    par = vllm_config.parallel_config
    if (backend_before != "uni" or par.distributed_executor_backend != "mp"
            or par.world_size != 1 or int(par.data_parallel_size or 1) != 1):
        return None
    if OMP_BIND_ENV in env and handed_rank_plan(env) is None:
        return None
    par.distributed_executor_backend = "uni"
    return _say("one rank: the worker runs in the engine core process (executor 'uni', "
                "every allowed CPU for OpenMP, no CPU held for polling a worker process)")


def _forget_own_plan(environ: MutableMapping[str, str]) -> None:
    # Only a plan this plugin wrote is removed; a user's VLLM_CPU_OMP_THREADS_BIND stays.
    if handed_rank_plan(environ) is not None:
        environ.pop(OMP_BIND_ENV, None)
    environ.pop(RANK_PLAN_ENV, None)


def omp_lists(plan: Any) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for a rank plan: each rank's CPUs, ``|``-separated."""
    from ascend_topology import format_cpu_list

    return "|".join(format_cpu_list(entry.cpus) for entry in plan.npus)


def hand_rank_plan(vllm_config: Any, resolved: Any,
                   environ: MutableMapping[str, str] | None = None) -> str:
    """Plan one pool per local rank and hand it to vLLM's CPU workers; returns one line saying
    what was decided (also logged). Never raises: a host that cannot be planned keeps vLLM's
    behaviour with one warning."""
    from ascend_topology import TopologyError
    from ascend_topology.rank_hosts import plan_rank_pools

    env = os.environ if environ is None else environ
    par = vllm_config.parallel_config
    if not resolved.enable_cpu_binding:
        _forget_own_plan(env)
        return _say("CPU binding disabled by additional_config.enable_cpu_binding: vLLM's own "
                    "OpenMP binding applies")
    ours = handed_rank_plan(env) is not None
    if OMP_BIND_ENV in env and not ours:
        env.pop(RANK_PLAN_ENV, None)
        return _say(f"CPU binding: {OMP_BIND_ENV}={env[OMP_BIND_ENV]!r} set by the user is "
                    "used as given")
    backend = par.distributed_executor_backend
    if backend not in _WORKER_PROCESS_BACKENDS:
        _forget_own_plan(env)
        return _say(f"CPU binding: executor {backend!r} runs the worker in the engine process, "
                    "which is not bound")
    ranks = local_rank_count(par)
    try:
        plan = plan_rank_pools(ranks)
    except TopologyError as exc:
        _forget_own_plan(env)
        return _say(f"CPU binding skipped: {exc}", warn=True)
    if not plan.ok:
        _forget_own_plan(env)
        return _say(f"CPU binding skipped: {ranks} local ranks cannot get a CPU pool each "
                    f"({plan.reason})", warn=True)
    lists = omp_lists(plan)
    env[OMP_BIND_ENV] = lists
    env[RANK_PLAN_ENV] = json.dumps({"omp": lists, "plan": plan.to_dict()}, sort_keys=True)
    return _say(f"CPU binding: {ranks} local ranks on pools {lists.replace('|', ' | ')} "
                f"({OMP_BIND_ENV}={lists!r})")


def _say(line: str, *, warn: bool = False) -> str:
    (logger.warning if warn else logger.info)("%s", line)
    return line
