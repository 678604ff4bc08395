"""tools/check_versions.py catches stale pins, missing workspace sources and bad ranges."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import check_versions as cv
import pytest

REPO = Path(__file__).resolve().parents[2]
GOOD = {
    "ascend-kernels": ("0.3.0", ["torch>=2.9"]),
    "ascend-graph": ("0.2.0", ["ascend-kernels>=0.3,<0.4"]),
    "vllm-ascend": ("1.0.0", ["ascend-kernels==0.3.0", "ascend-graph==0.2.0"]),
}


def test_the_repository_itself_is_consistent() -> None:
    assert cv.check(REPO) == []


def test_good_workspace_has_no_problems(make_workspace: Callable[..., Path]) -> None:
    assert cv.check(make_workspace(GOOD)) == []


def test_member_bump_without_pin_update_fails(make_workspace: Callable[..., Path]) -> None:
    members = dict(GOOD, **{"ascend-graph": ("0.2.1", ["ascend-kernels>=0.3,<0.4"])})
    problems = cv.check(make_workspace(members))
    assert len(problems) == 1
    assert "vllm-ascend -> ascend-graph: pinned ==0.2.0, must be ==0.2.1" in problems[0]


def test_fix_rewrites_the_stale_pin(make_workspace: Callable[..., Path]) -> None:
    members = dict(GOOD, **{"ascend-graph": ("0.2.1", ["ascend-kernels>=0.3,<0.4"])})
    root = make_workspace(members)
    assert cv.fix(root) == ["ascend-graph==0.2.0 -> ascend-graph==0.2.1"]
    assert cv.check(root) == []
    assert '"ascend-graph==0.2.1"' in (root / "packages/vllm-ascend/pyproject.toml").read_text()


def test_sibling_that_is_not_a_workspace_source_fails(make_workspace: Callable[..., Path]) -> None:
    root = make_workspace(GOOD, sources=["ascend-kernels", "vllm-ascend"])
    assert cv.check(root) == [
        "root pyproject.toml: [tool.uv.sources] ascend-graph must be { workspace = true }"
    ]


def test_range_that_excludes_the_sibling_fails(make_workspace: Callable[..., Path]) -> None:
    members = dict(GOOD, **{"ascend-kernels": ("0.4.0", ["torch>=2.9"])})
    members["vllm-ascend"] = ("1.0.0", ["ascend-kernels==0.4.0", "ascend-graph==0.2.0"])
    problems = cv.check(make_workspace(members))
    assert len(problems) == 1 and ">=0.3,<0.4 excludes the member's version 0.4.0" in problems[0]


def test_meta_package_missing_a_sibling_fails(make_workspace: Callable[..., Path]) -> None:
    members = dict(GOOD, **{"vllm-ascend": ("1.0.0", ["ascend-graph==0.2.0"])})
    problems = cv.check(make_workspace(members))
    assert len(problems) == 1
    assert problems[0].endswith("vllm-ascend does not depend on sibling ascend-kernels")


def test_private_member_is_not_pinned_but_its_range_is_checked(
    make_workspace: Callable[..., Path],
) -> None:
    private = {"harness": [cv.PRIVATE_CLASSIFIER]}
    members = dict(GOOD, harness=("0.1.0", ["vllm-ascend>=1.0,<2"]))
    assert cv.check(make_workspace(members, classifiers=private)) == []


def test_public_member_without_a_pin_fails(make_workspace: Callable[..., Path]) -> None:
    members = dict(GOOD, harness=("0.1.0", ["vllm-ascend>=1.0,<2"]))
    problems = cv.check(make_workspace(members))
    assert len(problems) == 1 and problems[0].endswith("does not depend on sibling harness")


def test_private_member_range_that_excludes_the_sibling_fails(
    make_workspace: Callable[..., Path],
) -> None:
    members = dict(GOOD, harness=("0.1.0", ["vllm-ascend>=2"]))
    problems = cv.check(make_workspace(members, classifiers={"harness": [cv.PRIVATE_CLASSIFIER]}))
    assert len(problems) == 1 and "excludes the member's version 1.0.0" in problems[0]


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("0.1.0", ">=0.1,<0.2", True),
        ("0.2.0", ">=0.1,<0.2", False),
        ("0.1.0", "==0.1", True),
        ("1.4.2", "~=1.4", True),
        ("2.0.0", "~=1.4", False),
        ("2.13.0", "==2.13.*", True),
        ("2.14.0", "==2.13.*", False),
        ("2.13.1", "==2.13.0.*", False),  # a trailing zero in a prefix is a segment
        ("2.13", "==2.13.0.*", True),
        ("2.13.0", "!=2.13.*", False),
        ("0.1.0", "!=0.1.0", False),
    ],
)
def test_specifier_evaluation(version: str, spec: str, expected: bool) -> None:
    assert cv.satisfies(version, spec) is expected


def test_cli_exit_codes(make_workspace: Callable[..., Path]) -> None:
    members = dict(GOOD, **{"ascend-graph": ("0.2.1", ["ascend-kernels>=0.3,<0.4"])})
    root = make_workspace(members)
    script = str(REPO / "tools" / "check_versions.py")
    bad = subprocess.run(
        [sys.executable, script, "--root", str(root)], capture_output=True, text=True
    )
    assert bad.returncode == 1 and "must be ==0.2.1" in bad.stderr
    fixed = subprocess.run(
        [sys.executable, script, "--root", str(root), "--fix"], capture_output=True, text=True
    )
    assert fixed.returncode == 0 and "versions ok: 3 members" in fixed.stdout


# ---------------------------------------------------------------- torch-npu vs the locked torch
def _lock(root: Path, torch: str, npu: str | None) -> None:
    text = f'version = 1\n[[package]]\nname = "torch"\nversion = "{torch}"\n'
    if npu is not None:
        text += f'[[package]]\nname = "torch-npu"\nversion = "{npu}"\n'
    (root / "uv.lock").write_text(text)


def _record(root: Path, npu: str, requires: str) -> None:
    folder = root / cv.RECORDS
    folder.mkdir(parents=True, exist_ok=True)
    record = {"torch_npu_version": npu, "requires_torch": requires}
    (folder / f"torch_npu-{npu}.json").write_text(json.dumps(record))


def test_the_locked_torch_npu_requires_the_locked_torch() -> None:
    assert cv.check_torch_npu(REPO) == []


@pytest.mark.parametrize(
    ("torch", "npu", "requires", "problem"),
    [
        ("2.13.0", "2.13.0", "torch==2.13.0.*", None),
        ("2.13.1", "2.13.0", "torch==2.13.0.*", "requires torch==2.13.0.* but torch 2.13.1"),
        ("2.13.0", "2.14.0", "torch==2.14.0.*", "requires torch==2.14.0.* but torch 2.13.0"),
        ("2.12.9", "2.13.0", "torch>=2.13", "requires torch>=2.13 but torch 2.12.9"),
        ("2.13.0", None, "", None),  # no torch-npu locked: nothing to check
    ],
)
def test_a_torch_npu_built_for_another_torch_fails(
    tmp_path: Path, torch: str, npu: str | None, requires: str, problem: str | None
) -> None:
    _lock(tmp_path, torch, npu)
    if npu is not None:
        _record(tmp_path, npu, requires)
    problems = cv.check_torch_npu(tmp_path)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


def test_a_locked_torch_npu_without_a_record_names_the_command(tmp_path: Path) -> None:
    _lock(tmp_path, "2.13.0", "2.15.0")
    (problem,) = cv.check_torch_npu(tmp_path)
    assert "torch-npu 2.15.0 has no record" in problem
    assert "tools/torch_npu_schemas.py --version 2.15.0" in problem
    _record(tmp_path, "2.15.0", "numpy")
    (problem,) = cv.check_torch_npu(tmp_path)
    assert "not a torch-npu 2.15.0 record with a torch requirement" in problem


def test_main_fails_on_a_torch_npu_mismatch(
    make_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_workspace(GOOD)
    _lock(root, "2.13.0", "2.14.0")
    _record(root, "2.14.0", "torch==2.14.0.*")
    assert cv.main(["--root", str(root)]) == 1
    assert "torch-npu 2.14.0 requires torch==2.14.0.*" in capsys.readouterr().err
    _lock(root, "2.14.0", "2.14.0")
    assert cv.main(["--root", str(root)]) == 0
