"""The ``config`` decorator: validated fields and vLLM-style hashing without vLLM."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Literal

import pytest
from ascend_config import config


@config
@dataclass
class PassConfig:
    """A config with typical field kinds."""

    enabled: bool = True
    level: int = 1
    mode: Literal["fast", "exact"] = "fast"
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    note: str | None = None


@config(frozen=True)
class FrozenConfig:
    scale: float = 1.0
    name: str = "x"


def test_valid_construction_and_defaults() -> None:
    cfg = PassConfig(level=3, mode="exact")
    assert (cfg.enabled, cfg.level, cfg.mode, cfg.sizes, cfg.note) == (True, 3, "exact", [1, 2],
                                                                       None)


@pytest.mark.parametrize("kwargs", [{"level": "3"}, {"enabled": 1}, {"mode": "slow"},
                                    {"sizes": [1, "2"]}, {"note": 5}, {"unknown": 1}])
def test_field_types_are_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PassConfig(**kwargs)  # type: ignore[arg-type]


def test_assignment_is_validated() -> None:
    cfg = PassConfig()
    cfg.level = 4
    with pytest.raises(ValueError):
        cfg.level = "five"  # type: ignore[assignment]


def test_compute_hash_follows_values() -> None:
    a, b = PassConfig(), PassConfig()
    assert a.compute_hash() == b.compute_hash()  # type: ignore[attr-defined]
    assert len(a.compute_hash()) == 64  # type: ignore[attr-defined]
    b.level = 2
    assert a.compute_hash() != b.compute_hash()  # type: ignore[attr-defined]


def test_frozen_configs_are_hashable_like_vllm_configs() -> None:
    a, b = FrozenConfig(), FrozenConfig(scale=2)
    assert hash(a) == hash(FrozenConfig()) and a == FrozenConfig()
    assert {a: "first", b: "second"}[FrozenConfig(scale=2.0)] == "second"
    assert a.compute_hash() != b.compute_hash()  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.scale = 3.0  # type: ignore[misc]


def test_fields_need_defaults() -> None:
    with pytest.raises(TypeError, match="need defaults"):
        @config
        @dataclass
        class Bad:
            x: int


@pytest.mark.child_process
def test_decorator_does_not_import_vllm() -> None:
    code = ("import sys\nfrom dataclasses import dataclass\nfrom ascend_config import config\n"
            "@config\n@dataclass\nclass C:\n    x: int = 1\n"
            "C().compute_hash()\nprint(any(m.split('.')[0] == 'vllm' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "False"
