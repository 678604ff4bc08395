"""docs/configuration.md is generated from the schema; a stale file fails this test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ascend_config.reference_doc import render_markdown
from ascend_config.schema.introspect import all_paths

# The workspace root, found by its lock file: the mutation runner (tools/mutation.py) runs
# these tests from a copy one directory deeper.
REPO = next(p for p in Path(__file__).resolve().parents if (p / "uv.lock").is_file())
TOOL = REPO / "tools" / "gen_config_docs.py"


@pytest.mark.child_process
def test_committed_reference_is_current() -> None:
    result = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True,
                            text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr


@pytest.mark.child_process
def test_check_detects_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(render_markdown().replace("131072", "131071"))
    result = subprocess.run([sys.executable, str(TOOL), "--check", "--output", str(stale)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "stale" in result.stderr
    subprocess.run([sys.executable, str(TOOL), "--output", str(stale)], check=True,
                   capture_output=True, timeout=60)
    assert stale.read_text() == render_markdown()


def test_every_key_and_env_var_is_documented() -> None:
    text = render_markdown()
    for path in all_paths():
        assert f"`{path.rsplit('.', 1)[-1]}`" in text, path
    assert "`VLLM_ASCEND_DEVICE`" in text and "`min_cpus_per_npu`" in text


def test_every_limit_is_documented() -> None:
    from ascend_config import limits

    text = render_markdown()
    readme = (REPO / "packages" / "ascend-config" / "README.md").read_text()
    names = [name for name in vars(limits) if name.isupper() and name != "DOCUMENTED"]
    assert sorted(names) == sorted(name for name, _, _ in limits.DOCUMENTED)
    for name, value, _ in limits.DOCUMENTED:
        assert f"| `{name}` | {value} |" in text
        assert name in readme, name
    assert "| `MAX_CONFIG_BYTES` | 1,048,576 bytes |" in text  # 2**20


def test_rendered_page_equals_the_committed_page() -> None:
    # In-process twin of the --check run above (the mutation runner sees this one).
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert render_markdown() == committed


def test_table_cell_text() -> None:
    from ascend_config.reference_doc import _cell

    assert _cell("a|b\nc") == "a\\|b c"


def test_forbid_compile_after_ready_row_says_the_request_is_answered() -> None:
    # The strict mode refuses softly (vllm_ascend's ready watch): the reference must not call a
    # compile after ready an error of the request.
    row = next(line for line in render_markdown().splitlines()
               if line.startswith("| `forbid_compile_after_ready` |"))
    assert "not run" in row and "runs uncompiled" in row and "request is answered" in row
