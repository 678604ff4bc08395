"""PerConfig: one value per VllmConfig object, by identity."""

from __future__ import annotations

from types import SimpleNamespace

from vllm_ascend.engine.per_config import PerConfig


def test_values_are_kept_per_config_object_not_per_equal_config() -> None:
    store: PerConfig[list[int]] = PerConfig()
    first, second = SimpleNamespace(model="m"), SimpleNamespace(model="m")
    assert first == second and first is not second
    a = store.get_or_create(first, list)
    a.append(1)
    assert store.get_or_create(first, lambda: [99]) is a == [1]
    assert store.get(second) is None
    assert store.get_or_create(second, lambda: [2]) == [2]
    assert len(store) == 2


def test_a_reused_id_never_matches_a_new_config() -> None:
    store: PerConfig[str] = PerConfig()
    old, new = object(), object()
    store.set(old, "old engine")
    # What a freed config's id reused by a new one looks like to the store.
    store._entries[id(new)] = store._entries.pop(id(old))
    assert store.get(new) is None
    assert store.get_or_create(new, lambda: "new engine") == "new engine"


def test_set_replaces_and_clear_forgets() -> None:
    store: PerConfig[int] = PerConfig()
    cfg = object()
    assert store.set(cfg, 1) == 1 and store.set(cfg, 2) == 2
    assert store.get(cfg) == 2 and len(store) == 1
    store.clear()
    assert store.get(cfg) is None and len(store) == 0
