"""The README's install matrix is the one the pins give, and the pins agree with each other."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import install_matrix as im
import pytest

REPO = Path(__file__).resolve().parents[2]


def test_readme_table_is_generated_from_the_pins() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert im.replace_table(readme, im.render(REPO)) == readme
    assert im.main(["--check"]) == 0


def test_the_pins_agree_with_each_other() -> None:
    from check_versions import satisfies
    from vllm_ascend.doctor.supported import TESTED_MAX_EXCLUSIVE, TESTED_MIN

    table = {name: version for name, version, _ in im.rows(REPO)}
    (record_path,) = (REPO / im.RECORDS).glob("torch_npu-*.json")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    torch = table["torch"].removeprefix("==")
    # the locked torch is the one the recorded torch-npu requires
    assert satisfies(torch, record["requires_torch"].removeprefix("torch"))
    # the npu extra's torch-npu covers the recorded wheel
    assert satisfies(record["torch_npu_version"], table["torch-npu"])
    # the vLLM the workspace tests is inside the range the plugin supports
    lo, hi = (".".join(map(str, v)) for v in (TESTED_MIN, TESTED_MAX_EXCLUSIVE))
    assert satisfies("0.32.0", f">={lo},<{hi}")


@pytest.mark.parametrize(("path", "old", "new", "cell"), [
    ("packages/vllm-ascend/pyproject.toml", 'npu = ["torch-npu==2.13.*"]',
     'npu = ["torch-npu==2.14.*"]', "`==2.14.*`"),
    ("pyproject.toml", 'override-dependencies = ["torch==2.13.0"]',
     'override-dependencies = ["torch==2.14.0"]', "`==2.14.0`"),
])
def test_a_moved_pin_makes_the_check_fail(tmp_path: Path, path: str, old: str, new: str,
                                          cell: str) -> None:
    root = tmp_path / "repo"
    for rel in ("pyproject.toml", "README.md", "packages/vllm-ascend/pyproject.toml",
                "packages/ascend-kernels/pyproject.toml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    shutil.copytree(REPO / im.RECORDS, root / im.RECORDS)
    shutil.copytree(REPO / "packages" / "vllm-ascend" / "src",
                    root / "packages" / "vllm-ascend" / "src")
    text = (root / path).read_text(encoding="utf-8")
    assert old in text
    (root / path).write_text(text.replace(old, new), encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rendered = im.render(root)
    assert cell in rendered
    assert im.replace_table(readme, rendered) != readme


@pytest.mark.parametrize("requirements", [
    ["torchvision==0.28.*", "torch==2.13.0"],
    ["torch-npu==2.13.*", "torch==2.13.0"],
    ["torch_audio>=2", "Torch==2.13.0"],
    ["torch.x==1", "torch [extra] ==2.13.0 ; python_version >= '3.10'"],
])
def test_a_pin_is_found_by_its_exact_name_not_a_prefix(requirements: list[str]) -> None:
    assert im._pin(requirements, "torch") == "==2.13.0"


@pytest.mark.parametrize("name", ["torch_npu", "Torch.NPU", "torch--npu"])
def test_names_compare_as_pep_503_normalises_them(name: str) -> None:
    from packaging.utils import canonicalize_name

    assert im.normalise(name) == canonicalize_name(name) == "torch-npu"
    assert im._pin([f"{name}==2.13.*"], "torch-npu") == "==2.13.*"


def test_no_pin_of_the_name_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="no pin of torch in"):
        im._pin(["torchvision==0.28.*", "torch-npu==2.13.*"], "torch")


def test_the_table_rows_are_the_pins_packaging_reads(tmp_path: Path) -> None:
    """The rows against an independent reader (packaging), with the override list reordered so
    that a prefix match would take the wrong pin."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = tmp_path / "repo"
    for rel in ("pyproject.toml", "README.md", "packages/vllm-ascend/pyproject.toml",
                "packages/ascend-kernels/pyproject.toml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    shutil.copytree(REPO / im.RECORDS, root / im.RECORDS)
    shutil.copytree(REPO / "packages" / "vllm-ascend" / "src",
                    root / "packages" / "vllm-ascend" / "src")
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    old = 'override-dependencies = ["torch==2.13.0"]'
    assert old in text
    (root / "pyproject.toml").write_text(text.replace(
        old, 'override-dependencies = ["torchvision==0.28.*", "torch-npu==2.13.*", '
        '"torch==2.13.0"]'), encoding="utf-8")

    def spec(requirements: list[str], name: str) -> str:
        (req,) = [Requirement(r) for r in requirements
                  if canonicalize_name(Requirement(r).name) == canonicalize_name(name)]
        return str(req.specifier)

    workspace = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    meta = tomllib.loads((root / "packages/vllm-ascend/pyproject.toml").read_text())["project"]
    table = {name: version for name, version, _ in im.rows(root)}
    assert table["torch"] == spec(workspace["tool"]["uv"]["override-dependencies"], "torch")
    assert table["torch"] == "==2.13.0"
    assert table["torch-npu"] == spec(meta["optional-dependencies"]["npu"], "torch-npu")
