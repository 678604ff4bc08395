"""Entry-point groups through which other packages supply what this repository lacks (README)."""
# ``vllm_ascend.runtime`` (the group's earlier name) is still read as the same group; the new
# name wins for a name declared under both.

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata

from vllm_ascend.base.attention_selection import backend_paths

logger = logging.getLogger(__name__)

CONNECTORS = "vllm_ascend.connectors"
MODEL_LOADERS = "vllm_ascend.model_loaders"
MODELS = "vllm_ascend.models"
SCHEDULERS = "vllm_ascend.schedulers"
RUNTIME = "vllm_ascend.npu_runtime"
LEGACY_RUNTIME = "vllm_ascend.runtime"
GROUPS = (CONNECTORS, MODEL_LOADERS, MODELS, SCHEDULERS, RUNTIME)
# Earlier names of a group, read after the group itself.
GROUP_ALIASES: dict[str, tuple[str, ...]] = {RUNTIME: (LEGACY_RUNTIME,)}

# This package's own entry points are defaults: an entry of any other distribution with the
# same group and name replaces them (the NPU runtime of ``vllm_ascend.npu_runtime``).
OWN_DISTRIBUTION = "vllm-ascend"

RUNTIME_KEYS = (
    "worker", "worker_310p", "worker_xlite", "attention", "communicator", "punica",
    "kv_cache_specs",
)
SCHEDULER_KEYS = (
    "recompute", "async_recompute", "dyntra_lb", "async_dyntra_lb", "dyntra_lb_recompute",
    "async_dyntra_lb_recompute", "profiling_chunk", "batch_job", "async_batch_job",
    "short_request_first", "async_short_request_first",
)
_ALLOWED_KEYS = {SCHEDULERS: SCHEDULER_KEYS, RUNTIME: RUNTIME_KEYS}


@dataclass(frozen=True)
class Extension:
    """One discovered entry point: ``value`` is ``module:Class``."""

    group: str
    name: str
    value: str
    distribution: str | None = None

    @property
    def module(self) -> str:
        return self.value.partition(":")[0]

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2]

    @property
    def class_path(self) -> str:
        """Dotted ``module.Class`` form vLLM's ``resolve_obj_by_qualname`` takes."""
        return f"{self.module}.{self.attr}"

    def load(self) -> object:
        import importlib

        obj: object = importlib.import_module(self.module)
        for part in self.attr.split("."):
            obj = getattr(obj, part)
        return obj


def discover(group: str) -> dict[str, Extension]:
    """Entry points of one group by name; a bad key or value is skipped with one warning."""
    if group not in GROUPS:
        raise ValueError(f"unknown extension group {group!r}; allowed: {', '.join(GROUPS)}")
    found: dict[str, Extension] = {}
    seen: set[tuple[str | None, str]] = set()
    for ep in _entry_points(group):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        if (dist, ep.name) in seen:
            continue  # the same distribution under the group's earlier name: the new one wins
        seen.add((dist, ep.name))
        ext = Extension(group, ep.name, ep.value, dist)
        problem = _problem(ext)
        if problem:
            logger.warning("ignoring entry point %s=%s of %s in %s: %s",
                           ep.name, ep.value, dist, group, problem)
            continue
        kept = found.get(ext.name)
        if kept is not None:
            if kept.distribution == OWN_DISTRIBUTION and dist != OWN_DISTRIBUTION:
                found[ext.name] = ext  # another package replaces this package's default
                continue
            if dist == OWN_DISTRIBUTION:
                continue
            logger.warning("%s: %r provided twice (%s, %s); keeping the first",
                           group, ext.name, kept.distribution, dist)
            continue
        found[ext.name] = ext
    return found


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    found = list(metadata.entry_points(group=group))
    for alias in GROUP_ALIASES.get(group, ()):
        found += metadata.entry_points(group=alias)
    return found


def _problem(ext: Extension) -> str | None:
    allowed = _ALLOWED_KEYS.get(ext.group)
    if allowed is not None and ext.name not in allowed:
        return f"name must be one of {', '.join(allowed)}"
    if not ext.module or not ext.attr:
        return "value must be 'module:Class'"
    return None


def runtime_class_paths() -> dict[str, str]:
    """Runtime pieces (worker, attention, ...) that installed runtime packages provide."""
    return {name: ext.class_path for name, ext in discover(RUNTIME).items()}


def runtime_attention_backends() -> tuple[dict[str, str], str]:
    """Variant -> class path from the ``attention`` entry point (RuntimeError/ValueError if bad)."""
    ext = discover(RUNTIME).get("attention")
    if ext is None:
        raise RuntimeError(
            "no installed package provides the NPU 'attention': install an Ascend runtime "
            f"package declaring entry point group {RUNTIME!r} name 'attention'"
        )
    source = f"entry point 'attention = {ext.value}' of {ext.distribution or 'an unnamed package'}"
    try:
        provided = ext.load()
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot load {source}: {exc}") from exc
    return backend_paths(provided, ext.class_path, source), source


def scheduler_class_paths() -> dict[str, str]:
    return {name: ext.class_path for name, ext in discover(SCHEDULERS).items()}


def register_connectors(extensions: Iterable[Extension] | None = None) -> list[str]:
    """Register discovered KV connectors with vLLM's factory; returns the names registered."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    done = []
    for ext in extensions if extensions is not None else discover(CONNECTORS).values():
        if ext.name in KVConnectorFactory._registry:  # idempotent: vLLM raises on duplicates
            continue
        KVConnectorFactory.register_connector(ext.name, ext.module, ext.attr)
        done.append(ext.name)
    return done


def register_models(extensions: Iterable[Extension] | None = None) -> list[str]:
    """Register discovered model architectures lazily (``module:Class``) with vLLM."""
    from vllm import ModelRegistry

    done = []
    for ext in extensions if extensions is not None else discover(MODELS).values():
        ModelRegistry.register_model(ext.name, ext.value)
        done.append(ext.name)
    return done


def register_model_loaders(extensions: Iterable[Extension] | None = None) -> list[str]:
    """Register discovered model loaders under their load format with vLLM."""
    from vllm.model_executor import model_loader

    done = []
    for ext in extensions if extensions is not None else discover(MODEL_LOADERS).values():
        cls = ext.load()
        if model_loader._LOAD_FORMAT_TO_MODEL_LOADER.get(ext.name) is cls:
            continue
        model_loader.register_model_loader(ext.name)(cls)
        done.append(ext.name)
    return done
