"""The msprobe dump-config step: building a real VllmConfig with ``dump_config`` writes the file."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DUMP = {"task": "statistics", "level": "L1", "dump_path": "/tmp/msprobe", "step": [0, 1],
        "note": "données"}
TARGET = Path(".vllm_ascend") / "msprobe" / "msprobe_dump_config.json"


def test_config_build_writes_the_dump_file(make_vllm_config: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_vllm_config(additional_config={"dump_config": DUMP})  # runs the platform pipeline
    written = tmp_path / TARGET
    assert json.loads(written.read_text(encoding="utf-8")) == DUMP
    assert "données" in written.read_text(encoding="utf-8")  # non-ASCII kept
    assert list(written.parent.iterdir()) == [written]  # no temporary file left behind


def test_no_dump_config_writes_nothing_and_a_path_is_used_as_given(
    make_vllm_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    monkeypatch.chdir(tmp_path)
    make_vllm_config()
    own = tmp_path / "mine.json"
    make_vllm_config(additional_config={"dump_config_path": str(own)})
    assert not (tmp_path / ".vllm_ascend").exists()
    import ascend_config

    resolved = ascend_config.resolve({"dump_config_path": str(own)},
                                     facts=ascend_config.DeploymentFacts())
    assert write_dump_config(resolved, str(tmp_path)) == own


def test_unwritable_target_is_one_clear_error(tmp_path: Path) -> None:
    import ascend_config
    from vllm_ascend.config_pipeline.steps import write_dump_config

    (tmp_path / ".vllm_ascend").write_text("a file where the directory should be")
    resolved = ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())
    with pytest.raises(RuntimeError, match=r"dump_config: cannot write .*msprobe_dump_config"):
        write_dump_config(resolved, str(tmp_path))


# --- the directory msprobe reads from must be this user's alone (issue 26) -----------------

OTHER_UID = 12345
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a path to another uid needs "
                                                          "root (chown)")


@pytest.fixture
def steps_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The step's warnings, also when the vllm_ascend logger no longer propagates to root."""
    logger = logging.getLogger("vllm_ascend.config_pipeline.steps")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def _resolved() -> Any:
    import ascend_config

    return ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())


def _refused(tmp_path: Path, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) is None
    records = {id(r): r for r in caplog.records}.values()  # root may have seen it too
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"dump_config: not writing {tmp_path / TARGET}: ")
    assert reason in warnings[0]


def test_the_dump_directory_is_made_private(tmp_path: Path) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET
    for folder in (tmp_path / ".vllm_ascend", tmp_path / TARGET.parent):
        assert folder.stat().st_mode & 0o777 == 0o700
    assert json.loads((tmp_path / TARGET).read_text(encoding="utf-8")) == DUMP
    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET  # again: fine


@needs_root
def test_a_dump_directory_another_user_made_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    planted = tmp_path / TARGET.parent
    planted.mkdir(parents=True, mode=0o755)
    (planted / TARGET.name).write_text('{"task": "theirs"}')
    os.chown(planted, OTHER_UID, OTHER_UID)
    _refused(tmp_path, steps_warnings, f"owned by uid {OTHER_UID}")
    assert (planted / TARGET.name).read_text() == '{"task": "theirs"}'
    assert sorted(p.name for p in planted.iterdir()) == [TARGET.name]  # no temporary file


def test_a_dump_directory_others_can_write_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    planted = tmp_path / TARGET.parent
    planted.mkdir(parents=True)
    os.chmod(planted, 0o777)
    _refused(tmp_path, steps_warnings, "writable by group or others (mode 777)")
    assert list(planted.iterdir()) == []


@needs_root
def test_a_dump_directory_reached_through_another_users_symlink_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)  # a directory of ours, but the link's owner chose it
    (tmp_path / ".vllm_ascend").symlink_to(theirs)
    os.lchown(tmp_path / ".vllm_ascend", OTHER_UID, OTHER_UID)
    _refused(tmp_path, steps_warnings, f".vllm_ascend is a symlink owned by uid {OTHER_UID}")
    assert list(theirs.iterdir()) == []  # not even the msprobe folder was made
    os.lchown(tmp_path / ".vllm_ascend", 0, 0)  # the same link owned by this user: followed
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET
    assert json.loads((theirs / "msprobe" / TARGET.name).read_text(encoding="utf-8")) == DUMP
