"""The ``config`` decorator: validated fields and vLLM-style hashing without vLLM."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Literal

import pytest
from ascend_config import (
    config,
)


def _pass_config() -> type:
    # Classes are built inside the tests (not at import) so each test runs the decorator.
    @config
    @dataclass
    class PassConfig:
        """A config with typical field kinds."""

        enabled: bool = True
        level: int = 1
        mode: Literal["fast", "exact"] = "fast"
        sizes: list[int] = field(default_factory=lambda: [1, 2])
        note: str | None = None

    return PassConfig


def _frozen_config() -> type:
    @config(frozen=True)
    class FrozenConfig:
        scale: float = 1.0
        name: str = "x"

    return FrozenConfig


def test_valid_construction_and_defaults() -> None:
    cfg = _pass_config()(level=3, mode="exact")
    assert (cfg.enabled, cfg.level, cfg.mode, cfg.sizes, cfg.note) == (True, 3, "exact", [1, 2],
                                                                       None)


@pytest.mark.parametrize("kwargs", [{"level": "3"}, {"enabled": 1}, {"mode": "slow"},
                                    {"sizes": [1, "2"]}, {"note": 5}, {"unknown": 1}])
def test_field_types_are_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _pass_config()(**kwargs)


def test_assignment_is_validated() -> None:
    cfg = _pass_config()()
    cfg.level = 4
    with pytest.raises(ValueError):
        cfg.level = "five"  # type: ignore[assignment]


def test_compute_hash_follows_values() -> None:
    pass_config = _pass_config()
    a, b = pass_config(), pass_config()
    assert a.compute_hash() == b.compute_hash()  # type: ignore[attr-defined]
    assert len(a.compute_hash()) == 64  # type: ignore[attr-defined]
    b.level = 2
    assert a.compute_hash() != b.compute_hash()  # type: ignore[attr-defined]


def test_frozen_configs_are_hashable_like_vllm_configs() -> None:
    frozen_config = _frozen_config()
    a, b = frozen_config(), frozen_config(scale=2)
    assert hash(a) == hash(frozen_config()) and a == frozen_config()
    assert {a: "first", b: "second"}[frozen_config(scale=2.0)] == "second"
    assert a.compute_hash() != b.compute_hash()  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.scale = 3.0  # type: ignore[misc]


def test_fields_need_defaults() -> None:
    with pytest.raises(TypeError) as info:
        @config
        @dataclass
        class Bad:
            x: int
            w: str
            y: int = 0
            z: list[int] = field(default_factory=list)

    assert str(info.value).endswith("Bad: config fields need defaults: ['x', 'w']")


def test_frozen_stdlib_dataclass_stays_frozen_and_becomes_hashable() -> None:
    @config
    @dataclass(frozen=True)
    class Frozen:
        size: int = 1

    a = Frozen()
    assert hash(a) == hash(Frozen()) and {a: 1}[Frozen(size=1)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.size = 2  # type: ignore[misc]
    with pytest.raises(ValueError):
        Frozen(size="2")  # type: ignore[arg-type]


def test_mutable_configs_validate_assignment_and_are_not_hashable() -> None:
    @config
    class Plain:
        size: int = 1

    cfg = Plain()
    cfg.size = 5
    assert cfg.size == 5
    with pytest.raises(ValueError):
        cfg.size = "6"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        hash(cfg)
    with pytest.raises(ValueError):
        Plain(size=1, other=2)  # type: ignore[call-arg]


def test_hash_depends_on_class_name_and_own_compute_hash_is_kept() -> None:
    @config(frozen=True)
    class One:
        size: int = 1

    @config(frozen=True)
    class Two:
        size: int = 1

    @config
    class Own:
        size: int = 1

        def compute_hash(self) -> str:
            return "own"

    assert One().compute_hash() != Two().compute_hash()  # type: ignore[attr-defined]
    assert Own().compute_hash() == "own"
    digest = One().compute_hash()  # type: ignore[attr-defined]
    assert len(digest) == 64 and int(digest, 16) >= 0


@pytest.mark.child_process
def test_decorator_does_not_import_vllm() -> None:
    code = ("import sys\nfrom dataclasses import dataclass\nfrom ascend_config import config\n"
            "@config\n@dataclass\nclass C:\n    x: int = 1\n"
            "C().compute_hash()\nprint(any(m.split('.')[0] == 'vllm' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "False"


def test_compute_hash_is_sha256_of_the_json_values() -> None:
    import enum
    import hashlib
    import warnings
    from datetime import datetime

    class Color(enum.Enum):
        RED = "red"

    @config
    @dataclass
    class Dated:
        when: datetime = datetime(2024, 1, 2, 3, 4, 5)
        color: Color = Color.RED
        sizes: tuple[int, ...] = (1, 2)

    # JSON-mode values: ISO-8601 datetime, the enum's value, a tuple as a list.
    payload = json.dumps([Dated.__qualname__, {"color": "red", "sizes": [1, 2],
                                               "when": "2024-01-02T03:04:05"}], sort_keys=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no serializer fallback warning either
        digest = Dated().compute_hash()  # type: ignore[attr-defined]
    assert digest == hashlib.sha256(payload.encode()).hexdigest()


def test_decorated_hash_emits_no_warnings() -> None:
    import warnings

    from ascend_config import config

    @config(frozen=True)
    class Small:
        size: int = 1
        name: str = "n"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        digest = Small().compute_hash()  # type: ignore[attr-defined]
    assert digest != Small(size=2).compute_hash()  # type: ignore[attr-defined]


def test_decorator_hash_ignores_dict_order() -> None:
    from dataclasses import field

    from ascend_config import config

    @config
    class WithMap:
        table: dict[str, int] = field(default_factory=dict)

    assert (WithMap(table={"a": 1, "b": 2}).compute_hash()  # type: ignore[attr-defined]
            == WithMap(table={"b": 2, "a": 1}).compute_hash())  # type: ignore[attr-defined]
