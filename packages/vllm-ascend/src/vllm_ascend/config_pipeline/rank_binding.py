"""Host-CPU platform steps: the Ascend CPU worker, and one CPU pool per local rank handed to
vLLM's CPU workers.

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
from typing import Any

from vllm_ascend.base.config_channel import OMP_BIND_ENV, RANK_PLAN_ENV
from vllm_ascend.base.cpu_binding import handed_rank_plan, local_rank_count

logger = logging.getLogger("vllm_ascend.config_pipeline.rank_binding")

CPU_WORKER_CLS = "vllm_ascend.runtime.cpu_worker.AscendCPUWorker"
# Executors whose workers are separate processes with a local rank (vLLM's OpenMP lists are
# used by "mp"; Ray workers bind through the worker hook alone).
_WORKER_PROCESS_BACKENDS = ("mp", "ray")


def use_ascend_cpu_worker(vllm_config: Any) -> None:
    """Run vLLM's CPU worker with the Ascend binding hook, unless the user chose a worker."""
    par = vllm_config.parallel_config
    if par.worker_cls == "auto":
        par.worker_cls = CPU_WORKER_CLS


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
