"""tools/torch_npu_schemas.py: its parsers on small inputs (no network, no wheel) and --check."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch_npu_parsers as parsers
import torch_npu_schemas as tns
import torch_npu_tables as tables

REPO = Path(__file__).resolve().parents[2]


def test_op_schemas_are_the_nul_terminated_strings_first_occurrence_wins() -> None:
    data = (b"\x7fELF\x00junk npu_x(\x00"
            b"npu_foo(Tensor input, *, float eps=1e-06) -> (Tensor, Tensor)\x00"
            b"npu_foo(Tensor other) -> Tensor\x00"
            b"npu_foo.out(Tensor input, *, Tensor(a!) out) -> Tensor(a!)\x00"
            b"_npu_bar(Tensor x) -> ()\x00not_npu(Tensor x) -> Tensor\x00")
    assert parsers.parse_op_schemas(data) == {
        "npu_foo": "npu_foo(Tensor input, *, float eps=1e-06) -> (Tensor, Tensor)",
        "npu_foo.out": "npu_foo.out(Tensor input, *, Tensor(a!) out) -> Tensor(a!)",
        "_npu_bar": "_npu_bar(Tensor x) -> ()",
    }


HEADER = """
TORCH_NPU_API void _npu_other(const at::Tensor &x);
TORCH_NPU_API void _npu_rope(const at::Tensor&positions, at::Tensor&query, at::Tensor &key,
    int64_t head_size, const at::Tensor&cache, bool is_neox, double eps);
"""


def test_atb_schema_translates_the_cpp_declaration() -> None:
    assert parsers.atb_schema(HEADER, "_npu_rope") == (
        "_npu_rope(Tensor positions, Tensor(a!) query, Tensor(b!) key, int head_size,"
        " Tensor cache, bool is_neox, float eps) -> ()"
    )
    assert parsers.atb_schema(HEADER, "_npu_other") == "_npu_other(Tensor x) -> ()"
    with pytest.raises(ValueError, match="no `void _npu_missing"):
        parsers.atb_schema(HEADER, "_npu_missing")
    with pytest.raises(ValueError, match="cannot translate C\\+\\+ type 'float'"):
        parsers.atb_schema("void _npu_f(float x);", "_npu_f")


def test_atb_schema_pieces_must_all_be_in_the_library() -> None:
    schema = "_npu_rope(Tensor positions) -> ()"  # pieces: 16 + 16 + 2 bytes
    pieces = b"\x00".join([b"xx" + schema[:16].encode(), schema[16:32].encode() + b"yy",
                           schema[32:].encode()])
    parsers.check_in_pieces(schema, pieces)
    with pytest.raises(ValueError, match="not in the library"):
        parsers.check_in_pieces(schema, pieces.replace(b"positions", b"position_"))


def test_soc_versions_follow_cpp_enum_numbering() -> None:
    header = """
    enum class SocVersion {
      UnsupportedSocVersion = -1,
      A = 100,
      B,  // a comment
      C = 250,
      D,
      E
    };
    void f();
    """
    assert parsers.parse_soc_versions(header) == {
        "UnsupportedSocVersion": -1, "A": 100, "B": 101, "C": 250, "D": 251, "E": 252,
    }
    with pytest.raises(ValueError, match="no `enum class SocVersion`"):
        parsers.parse_soc_versions("enum Other { A };")


def test_requires_torch_reads_the_metadata_clause() -> None:
    metadata = "Name: torch-npu\nRequires-Dist: torchvision\nRequires-Dist: torch==2.13.0.*\n"
    # torchvision is not torch: the clause must be torch's own.
    assert parsers.requires_torch(metadata.replace("torchvision", "numpy")) == "torch==2.13.0.*"
    with pytest.raises(ValueError, match="no `Requires-Dist: torch`"):
        parsers.requires_torch("Requires-Dist: numpy\n")


SOURCE = '''
def free(a: int, b=1, *args, c, d=None, **kw) -> None: ...

class Stream(Base):
    def __new__(cls, device=None, priority=0, **kwargs): ...
    def synchronize(self): ...
    @staticmethod
    def helper(x, y=2): ...
    def __init__(self, runner, config=None):
        self.runner = runner
        self.config = config
'''


def test_python_signature_drops_annotations_and_self() -> None:
    sig = parsers.python_signature
    assert sig(SOURCE, "free") == "(a, b=1, *args, c, d=None, **kw)"
    assert sig(SOURCE, "Stream.__new__") == "(device=None, priority=0, **kwargs)"
    assert sig(SOURCE, "Stream.synchronize") == "()"
    assert sig(SOURCE, "Stream.helper") == "(x, y=2)"
    assert sig(SOURCE, "Stream.synchronize", drop_first=False) == "(self)"
    methods = parsers.method_names(SOURCE, "Stream")
    assert methods == ["__init__", "__new__", "helper", "synchronize"]
    with pytest.raises(ValueError, match=r"no definition 'Stream\.missing'"):
        sig(SOURCE, "Stream.missing")


CONFIGS = {
    "_option_base.py": "class NpuBaseConfig: ...\nclass StrOptionValue:\n"
                       "    def __init__(self):\n        self.v = None\n",
    "debug_config.py": (
        "class _Inner(NpuBaseConfig):\n    def __init__(self):\n"
        "        self.flag = OptionValue(False, [True, False])\n"
        "class _DebugConfig(NpuBaseConfig):\n    def __init__(self):\n"
        "        self.inner = _Inner()\n        self.path = StrOptionValue()\n"
    ),
    "other.py": "class _DebugConfig(NpuBaseConfig):\n    def __init__(self):\n        self.x = 1\n",
    "compiler_config.py": (
        "from pkg.configs.debug_config import _DebugConfig\n"
        "class CompilerConfig(NpuBaseConfig):\n    def __init__(self):\n"
        "        self.debug = _DebugConfig()\n        self.mode = OptionValue('a', ['a'])\n"
        "        self._fixed_attrs = []\n"
    ),
}


def test_config_tree_follows_imports_and_expands_only_config_classes() -> None:
    classes = parsers.config_options(CONFIGS)
    tree = parsers.config_tree(classes, "compiler_config.py:CompilerConfig")
    assert tree == {
        "debug": {"inner": {"flag": "OptionValue(False, [True, False])"},
                  "path": "StrOptionValue()"},
        "mode": "OptionValue('a', ['a'])",
    }


META = '''
import torch

@impl(m, "npu_other")
def other(x):
    return x

@impl(m, "npu_op")
def npu_op_meta(x, *, k=1):
    return torch.empty_like(x)

MAP = 1
TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP = {
    1: torch.int8,
    24: torch.float8_e4m3fn,
}
'''


def test_meta_source_and_dtype_enum() -> None:
    assert parsers.meta_source(META, "npu_op") == (
        '@impl(m, "npu_op")\ndef npu_op_meta(x, *, k=1):\n    return torch.empty_like(x)\n'
    )
    with pytest.raises(ValueError, match="no meta function registered for 'npu_gone'"):
        parsers.meta_source(META, "npu_gone")
    assert parsers.dtype_enum(META) == {"1": "int8", "24": "float8_e4m3fn"}


HELPED = '''
def unused(x):
    return x

def inner(x):
    return x

def outer(x):
    return inner(x)

@impl(m, "npu_other")
def other(x):
    return x

@impl(m, "npu_helped")
def helped_meta(x):
    return outer(x) if other else x
'''


def test_meta_source_brings_the_helpers_it_calls_transitively_and_nothing_else() -> None:
    # FIA's meta function builds its shapes in module-level helpers; registered functions
    # (other) and helpers nobody calls (unused) stay out, the meta function comes last.
    assert parsers.meta_source(HELPED, "npu_helped") == (
        "def outer(x):\n    return inner(x)\n\n\n"
        "def inner(x):\n    return x\n\n\n"
        '@impl(m, "npu_helped")\ndef helped_meta(x):\n    return outer(x) if other else x\n'
    )


def test_op_doc_is_the_ops_own_docstring() -> None:
    docs = ('_add_torch_npu_docstr(\n    "npu_a",\n    """\nA text\n"""\n)\n'
            '_add_torch_npu_docstr(\n    "npu_ab",\n    """\nAB text\n"""\n)\n')
    assert parsers.op_doc(docs, "npu_a") == "\nA text\n"
    with pytest.raises(ValueError, match="no docstring for 'npu_b'"):
        parsers.op_doc(docs, "npu_b")


def test_atb_loader_needs_the_load_error_global() -> None:
    source = "API_LIST = ['_b', '_a']\nNNAL_EX = None\n"
    assert parsers.atb_loader(source) == {
        "module": "torch_npu.op_plugin.atb._atb_ops", "load_error": "NNAL_EX",
        "api_list": ["_a", "_b"],
    }
    with pytest.raises(ValueError, match="NNAL_EX"):
        parsers.atb_loader("API_LIST = []\n")


def test_locked_version_reads_uv_lock(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text('[[package]]\nname = "torch-npu"\nversion = "2.13.0"\n'
                    '[[package]]\nname = "torch"\nversion = "2.13.0"\n')
    assert tns.locked_version(lock, "torch-npu") == "2.13.0"
    with pytest.raises(ValueError, match="no versions of numpy"):
        tns.locked_version(lock, "numpy")


def test_check_reports_a_changed_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = tmp_path / "torch_npu-9.9.0-x.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch_npu/__init__.py", "")
    record: dict[str, Any] = {"b": 1, "a": {"z": [1, 2], "y": "é"}}
    monkeypatch.setattr(tns, "build_record", lambda path, version, name: dict(record))
    out = tmp_path / "rec.json"
    args = ["--version", "9.9.0", "--wheel", str(wheel), "--out", str(out)]
    assert tns.main([*args, "--check"]) == 1  # nothing recorded yet
    assert tns.main(args) == 0
    text = out.read_text(encoding="utf-8")
    assert json.loads(text) == record and text.index('"a"') < text.index('"b"')
    assert '"é"' in text  # diff-friendly: not escaped
    assert tns.main([*args, "--check"]) == 0
    record["b"] = 2
    capsys.readouterr()
    assert tns.main([*args, "--check"]) == 1
    diff = capsys.readouterr().out
    assert '- "b": 1' in diff and '+ "b": 2' in diff


def test_the_checked_in_record_is_for_the_locked_torch_npu() -> None:
    version = tns.locked_version(REPO / "uv.lock", "torch-npu")
    record = json.loads((tns.OUT_DIR / f"torch_npu-{version}.json").read_text("utf-8"))
    assert record["torch_npu_version"] == version
    assert set(record["ops"]) == set(tables.OUTPUTS)
