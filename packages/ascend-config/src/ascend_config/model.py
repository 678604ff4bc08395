"""The resolved, frozen Ascend configuration handed to the plugin and its workers.

Also materialises ``dump_config`` as the msprobe config file (explicit; never during resolve).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from ascend_config.envs import EnvChange, apply_env_changes
from ascend_config.errors import AscendConfigError
from ascend_config.schema.base import Bool, Int, Str
from ascend_config.schema.top import TopLevelOptions

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


class AscendConfig(TopLevelOptions):
    """Every Ascend option, validated and derived; build it with :func:`ascend_config.resolve`.

    Values are the effective ones (e.g. ``enable_shared_expert_dp`` is False without expert
    parallel). ``env_changes`` lists environment changes for the caller to apply (never applied
    here), ``warnings`` the deprecation and forcing notices found while resolving.
    """

    soc: Str = Field("A2", description="SoC the config was resolved for")
    batch_invariant: Bool = Field(
        False, description="batch-invariant mode (rl_config or VLLM_BATCH_INVARIANT)")
    pd_tp_ratio: Int = Field(1, description="prefill TP // decode TP (PD disaggregation)")
    pd_head_ratio: Int = Field(1, description="prefill KV heads per decode KV head group")
    num_head_replica: Int = Field(1, description="KV head replicas on the prefill side")
    sparse_li_c8_layer_filter: Bool = Field(
        False, description="the quant description lists per-layer LI-C8 metadata")
    sparse_li_c8_layer_names: tuple[Str, ...] = Field(
        (), description="layers whose indexer is quantized for LI-C8")
    sparse_li_c8_layer_ids: tuple[Int, ...] = Field(
        (), description="layer indices whose indexer is quantized for LI-C8")
    env_changes: tuple[EnvChange, ...] = Field(
        (), description="environment changes for the caller to apply (value None = unset)")
    warnings: tuple[Str, ...] = Field((), description="deprecation and forcing notices")

    def to_json(self) -> str:
        """Serialise exactly; :meth:`from_json` gives back an equal object."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> AscendConfig:
        """Load a config serialised by :meth:`to_json` (no re-derivation)."""
        from ascend_config.schema.validation import problems_from_validation

        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise AscendConfigError(*problems_from_validation(exc, cls)) from None

    def compute_hash(self) -> str:
        """A stable SHA-256 of everything in the config (for compile-cache keys)."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    def log_dir(self) -> Path:
        """``ascend_log_path`` with ``~`` expanded."""
        return Path(os.path.expanduser(self.ascend_log_path))

    def apply_env(self, environ: MutableMapping[str, str]) -> list[str]:
        """Apply :attr:`env_changes` to ``environ`` (explicit; resolve never does)."""
        return apply_env_changes(self.env_changes, environ)

    def is_sparse_li_c8_layer(self, name: str) -> bool:
        """Whether layer ``name`` uses LI-C8 (every layer when no per-layer metadata)."""
        if not self.enable_sparse_li_c8:
            return False
        if not self.sparse_li_c8_layer_filter:
            return True
        norm = name.strip(".")
        if any(norm == n or norm.startswith(n + ".") for n in self.sparse_li_c8_layer_names):
            return True
        match = _LAYER_INDEX.search(norm)
        return match is not None and int(match.group(1)) in self.sparse_li_c8_layer_ids

    def summary(self) -> dict[str, Any]:
        """A short human summary: what is on, what was derived, what the caller must do."""
        comp = self.ascend_compilation_config
        sched = self.scheduler_config
        return {
            "soc": self.soc,
            "fusion_passes": [k for k, v in comp.pass_switches().items() if v],
            "npugraph_ex": comp.enable_npugraph_ex,
            "static_kernel": comp.enable_static_kernel,
            "xlite": self.xlite_graph_config.enabled,
            "weight_nz_mode": self.weight_nz_mode,
            "fused_mc2": self.enable_fused_mc2,
            "eplb": "dynamic" if self.eplb_config.dynamic_eplb else "static",
            "finegrained_tp": self.finegrained_tp_config.enabled_sizes(),
            "scheduler": [
                name for name, on in (
                    ("balance", bool(sched.enable_balance_scheduling)),
                    ("recompute", sched.recompute_scheduler_enable),
                    ("short_request_first", sched.short_request_first_config.enabled),
                    ("profiling_chunk", sched.profiling_chunk_config.enabled),
                    ("batch_job", sched.batch_job_sched_config.enabled),
                    ("dyntra_lb", sched.dyntra_lb_config.enabled),
                ) if on
            ],
            "rl": self.rl_config.enabled,
            "batch_invariant": self.batch_invariant,
            "cpu_binding": self.enable_cpu_binding,
            "log_dir": self.ascend_log_path,
            "env_changes": [f"{c.name}={c.value}" if c.value is not None else f"unset {c.name}"
                            for c in self.env_changes],
            "warnings": len(self.warnings),
        }


DUMP_RELATIVE_PATH = Path(".vllm_ascend") / "msprobe" / "msprobe_dump_config.json"


def dump_config_file(cwd: str | Path) -> Path:
    """Where ``dump_config`` is written for a process running in ``cwd``."""
    return Path(cwd) / DUMP_RELATIVE_PATH


def write_dump_config(cfg: AscendConfig, cwd: str | Path) -> Path | None:
    """Write ``cfg.dump_config`` atomically to :func:`dump_config_file` and return that path.

    With ``dump_config_path`` set, nothing is written and that path is returned; with neither,
    None. The JSON is UTF-8, indented by 2, non-ASCII kept. The file is written to a temporary
    name in the same directory and renamed, so readers never see a partial file.
    """
    if cfg.dump_config is None:
        return Path(cfg.dump_config_path) if cfg.dump_config_path is not None else None
    target = dump_config_file(cwd)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(cfg.dump_config, indent=2, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
