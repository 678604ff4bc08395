"""Each example in examples/ gives the verdict written beside it (through the CLI)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from ascend_config.cli import main
from ascend_config.envs import REGISTRY

# The workspace root, found by its lock file: the mutation runner (tools/mutation.py) runs
# these tests from a copy one directory deeper.
REPO = next(p for p in Path(__file__).resolve().parents if (p / "uv.lock").is_file())
EXAMPLES = REPO / "examples"
NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "expected.json").exists())


def test_at_least_fifteen_examples_five_of_them_valid() -> None:
    valid = [n for n in NAMES
             if json.loads((EXAMPLES / n / "expected.json").read_text())["exit_code"] == 0]
    assert len(NAMES) >= 15 and len(valid) >= 5
    for name in NAMES:
        assert {"additional_config.json", "facts.json", "expected.json"} <= {
            p.name for p in (EXAMPLES / name).iterdir()}


@pytest.mark.parametrize("name", NAMES)
def test_example_verdict(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in REGISTRY:
        monkeypatch.delenv(var.name, raising=False)
    folder = EXAMPLES / name
    expected = json.loads((folder / "expected.json").read_text())
    env_args = [a for k, v in expected["env"].items() for a in ("--env", f"{k}={v}")]
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", str(folder / "additional_config.json"), "--facts",
                 str(folder / "facts.json"), "--summary", *env_args], out, err)
    assert code == expected["exit_code"], err.getvalue()
    lines = err.getvalue().splitlines()
    if code == 0:
        summary = json.loads(out.getvalue())
        assert {k: summary[k] for k in expected["summary"]} == expected["summary"]
        if "warnings" in expected:  # the exact warning lines, in order
            assert [w.removeprefix("warning: ") for w in lines] == expected["warnings"]
    else:
        paths = [line.split(":", 1)[0] for line in lines[1:]]
        assert sorted(paths) == sorted(expected["problems"])
        if "lines" in expected:  # the exact problem lines, in order
            assert lines[1:] == expected["lines"]
