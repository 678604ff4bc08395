#!/usr/bin/env python3
"""Record the parts of the real torch-npu wheel this project binds to, as a checked-in JSON.

The fake NPU seam of the tests (``tools/npu_seam``) is built from that JSON, so every fake
kernel and API has the real library's schema. The tool downloads the torch-npu wheel of the
locked torch release (``pip download --no-deps``, never installed), unzips it and records:

* ``ops``: the schema of every torch_npu op the project calls (from the ``\\0``-terminated
  strings of ``lib/libtorch_npu.so``; the ATB op ``_npu_rotary_embedding`` from
  ``AtbOpsInterface.h``, each 16-byte piece checked against ``lib/libop_plugin_atb.so``), its
  output rule (``outputs``: a small declarative form the seam interprets, checked by the
  tests against ``meta_source``, the op's meta function from
  ``op_plugin/meta/_meta_registrations.py``) and the documented input constraints the
  project relies on (``constraints``, each quoting the ``_op_plugin_docs.py`` text it rests
  on; a quote missing from the wheel is an error);
* ``dtype_enum``: the meta module's ``int -> torch dtype`` table (torch_npu dtype ids);
* ``python_apis``: signatures (via ``ast``, no import) of the ``torch_npu.npu`` APIs used;
* ``graph_extensions``: the bundled npugraph_ex / torchair module names, config option
  names, ``get_npu_backend`` / ``_NpuFxCompiler._get_compiled_gm`` signatures and the
  methods of ``_CompiledFxGraph``;
* ``soc_versions``: the ``SocVersion`` enum of ``NpuVariables.h``;
* ``requires_torch``: the wheel METADATA's ``Requires-Dist: torch`` clause.

Usage: ``python tools/torch_npu_schemas.py [--version X] [--wheel PATH] [--out PATH]
[--check]``. Without ``--version`` the torch-npu version is the one in ``uv.lock`` (the
release built for the locked torch). ``--check`` writes nothing and exits 1 when the
recorded JSON differs (the diff is printed).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tools" / "npu_seam"
TN = "torch_npu"

_SCHEMA = re.compile(
    rb"((?:_?npu_)[a-z0-9_]+(?:\.[A-Za-z0-9_]+)?\((?:[^\x00\n]*?)\) -> [^\x00\n]+)\x00"
)
_ENUM_ITEM = re.compile(r"^\s*(\w+)\s*(?:=\s*(-?\d+))?\s*,?\s*$")

# Output rules, one entry per output, in the meta functions' order. dtype: "like:<arg>",
# a torch dtype name, "quant:<arg>" (npu_quantize's dtype table), "fp8:<arg>" (MX: e5m2 /
# e4m3 / packed fp4 as uint8, from the dst_type id). shape: "like:<arg>", "rows:<arg>"
# (all but the last dim), "rstd:<x>,<gamma>", "mxscale:<arg>" ([..., ceil(ceil(H/32)/2), 2]),
# "half:<arg>,<dim arg>" and "fp8:<arg>" (halved last dim for fp4). "mask": [arg, index]
# gives shape [0] when that output is switched off (see npu_add_rms_norm_dynamic_quant).
OUTPUTS: dict[str, list[dict[str, Any]]] = {
    "npu_rms_norm": [
        {"name": "y", "dtype": "like:input", "shape": "like:input"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:input,gamma"},
    ],
    "npu_add_rms_norm": [
        {"name": "y", "dtype": "like:x1", "shape": "like:x1"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:x1,gamma"},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
    ],
    "npu_quantize": [{"name": "y", "dtype": "quant:dtype", "shape": "like:input"}],
    "npu_dynamic_quant": [
        {"name": "y", "dtype": "int8", "shape": "like:input"},
        {"name": "scale", "dtype": "float32", "shape": "rows:input"},
    ],
    "npu_add_rms_norm_quant": [
        {"name": "y1", "dtype": "int8", "shape": "like:x1"},
        {"name": "y2", "dtype": "int8", "shape": "like:x1"},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
    ],
    "npu_add_rms_norm_dynamic_quant": [
        {"name": "y1", "dtype": "int8", "shape": "like:x1", "mask": ["output_mask", 0]},
        {"name": "y2", "dtype": "int8", "shape": "like:x1", "mask": ["output_mask", 1]},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
        {"name": "scale1", "dtype": "float32", "shape": "rows:x1", "mask": ["output_mask", 0]},
        {"name": "scale2", "dtype": "float32", "shape": "rows:x1", "mask": ["output_mask", 1]},
    ],
    "npu_dynamic_mx_quant": [
        {"name": "y", "dtype": "fp8:dst_type", "shape": "fp8:input"},
        {"name": "mxscale", "dtype": "uint8", "shape": "mxscale:input"},
    ],
    "npu_add_rms_norm_dynamic_mx_quant": [
        {"name": "y", "dtype": "fp8:dst_type", "shape": "fp8:x1"},
        {"name": "x_out", "dtype": "like:x1", "shape": "like:x1"},
        {"name": "mxscale", "dtype": "uint8", "shape": "mxscale:x1"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:x1,gamma"},
    ],
    "npu_rms_norm_dynamic_mx_quant": [
        {"name": "y", "dtype": "fp8:dst_type", "shape": "fp8:x"},
        {"name": "mxscale", "dtype": "uint8", "shape": "mxscale:x"},
        {"name": "rstd", "dtype": "float32", "shape": "rstd:x,gamma"},
    ],
    "npu_swiglu": [{"name": "y", "dtype": "like:input", "shape": "half:input,dim"}],
    "npu_mrope": [
        {"name": "query_out", "dtype": "like:query", "shape": "like:query"},
        {"name": "key_out", "dtype": "like:key", "shape": "like:key"},
    ],
    "npu_format_cast": [{"name": "y", "dtype": "like:input", "shape": "like:input"}],
    # In place on query and key (schema: Tensor(a!) query, Tensor(b!) key) -> ().
    "_npu_rotary_embedding": [],
}

# Where each op's meta function is registered (npu_format_cast has none of its own; the
# private _npu_format_cast keeps the input's shape and dtype) and which ops are ATB ops.
META_NAMES = {op: op for op in OUTPUTS} | {"npu_format_cast": "_npu_format_cast"}
META_NAMES.pop("_npu_rotary_embedding")
ATB_OPS = {"_npu_rotary_embedding": "AtbOpsInterface.h"}

# The documented input constraints the project relies on (A2/A3 rows of the docs). Kinds:
# dtypes (allowed dtype names), dims ([min, max] rank), dtype_like / shape_like (another
# argument's), multiple_of (a dim of one argument by the dtype of another). "when" limits a
# rule to calls with those argument values; "doc" is the docs text the rule rests on.
_A2 = "Atlas A2 训练系列产品/Atlas 800I A2 推理产品: 数据类型支持"
_MROPE_2D = "queryIn、keyIn、cosSinCache只支持2维shape输入。"
_BETA = "beta: Tensor类型，归一化偏置项。可选，shape和数据类型与gamma一致。"


def _rule(arg: str, doc: str, **kind: Any) -> dict[str, Any]:
    return {"arg": arg, "doc": doc, **kind}


CONSTRAINTS: dict[str, list[dict[str, Any]]] = {
    "npu_rms_norm": [
        _rule("input", "self：Tensor类型，支持float16、bfloat16、float32",
              dtypes=["float16", "bfloat16", "float32"]),
        _rule("input", "输入shape支持2-8维", dims=[2, 8]),
        _rule("gamma", "gamma：Tensor类型，数据类型需要和self保持一致", dtype_like="input"),
    ],
    "npu_quantize": [
        _rule("scales", _A2 + "float、bfloat16.", dtypes=["float32", "bfloat16"],
              when={"div_mode": True}),
        _rule("zero_points", _A2 + "int8、uint8、int32、bfloat16.",
              dtypes=["int8", "uint8", "int32", "bfloat16"], when={"div_mode": True}),
        _rule("input", _A2 + "float、float16、bfloat16.",
              dtypes=["float32", "float16", "bfloat16"]),
    ],
    "npu_dynamic_quant": [
        _rule("input", "数据类型支持torch.float16、torch.bfloat16", dtypes=["float16", "bfloat16"]),
        _rule("input", "输入x的维度必须大于1", dims=[2, 8]),
    ],
    "npu_add_rms_norm_quant": [
        _rule("x1", "shape支持1-8维。数据类型支持BFLOAT16、FLOAT16",
              dtypes=["bfloat16", "float16"]),
        _rule("x1", "shape支持1-8维", dims=[1, 8]),
        _rule("gamma", "数据类型需要与入参x1保持一致。不支持空tensor。", dtype_like="x1"),
        _rule("scales1", "表示量化过程中得到y1进行的scales张量。shape需要与gamma保持一致。",
              shape_like="gamma"),
        _rule("scales1", "数据类型支持FLOAT32、BFLOAT16", dtypes=["float32", "bfloat16"]),
        _rule("zero_points1", "可选参数。shape需要与gamma保持一致。数据类型支持INT32、BFLOAT16",
              shape_like="gamma"),
        _rule("zero_points1", "数据类型支持INT32、BFLOAT16", dtypes=["int32", "bfloat16"]),
        _rule("beta", "shape需要与gamma的shape保持一致", shape_like="gamma"),
        _rule("beta", "数据类型需要与gamma保持一致", dtype_like="gamma"),
    ],
    "npu_add_rms_norm_dynamic_quant": [
        _rule("x1", "shape支持2-8维，数据类型支持FLOAT16、BFLOAT16",
              dtypes=["float16", "bfloat16"]),
        _rule("x1", "shape支持2-8维", dims=[2, 8]),
        _rule("gamma", "需与x1最后一维一致，数据类型与x1一致", dtype_like="x1"),
        _rule("beta", _BETA, dtype_like="gamma"),
        _rule("beta", _BETA, shape_like="gamma"),
    ],
    "npu_dynamic_mx_quant": [
        _rule("input", "支持1-7维，数据类型支持float16、bfloat16、float32",
              dtypes=["float16", "bfloat16", "float32"]),
        _rule("input", "支持1-7维", dims=[1, 7]),
    ],
    "npu_swiglu": [
        _rule("input", "dtype支持FP32、FP16或BF16类型", dtypes=["float32", "float16", "bfloat16"]),
        _rule("input", "shape支持1-8维", dims=[1, 8]),
    ],
    "npu_mrope": [
        _rule("query", _MROPE_2D, dims=[2, 2]),
        _rule("key", _MROPE_2D, dims=[2, 2]),
        _rule("cos_sin_cache", _MROPE_2D, dims=[2, 2]),
        _rule("cos_sin_cache", "当输入是BFLOAT16或FLOAT16时，rotary_dim要求是32的倍数，"
              "当输入是FLOAT32时，rotary_dim要求是16的倍数。",
              multiple_of={"dim": 1, "by_dtype_of": "query",
                           "multiples": {"bfloat16": 32, "float16": 32, "float32": 16}}),
    ],
}

# torch_npu.npu APIs the project calls: public name -> (file under torch_npu/, qualname).
PYTHON_APIS: dict[str, tuple[str, str]] = {
    "get_soc_version": ("npu/_backends.py", "get_soc_version"),
    "current_stream": ("npu/utils.py", "current_stream"),
    "stream": ("npu/utils.py", "stream"),
    "set_device": ("npu/utils.py", "set_device"),
    "synchronize": ("npu/utils.py", "synchronize"),
    "get_device_name": ("npu/__init__.py", "get_device_name"),
    "get_device_properties": ("npu/__init__.py", "get_device_properties"),
    "device_count": ("npu/__init__.py", "device_count"),
    "reset_peak_memory_stats": ("npu/memory.py", "reset_peak_memory_stats"),
    "max_memory_allocated": ("npu/memory.py", "max_memory_allocated"),
    "empty_cache": ("npu/memory.py", "empty_cache"),
    "host_empty_cache": ("npu/memory.py", "host_empty_cache"),
    "graph_pool_handle": ("npu/graphs.py", "graph_pool_handle"),
    "Stream": ("npu/streams.py", "Stream.__new__"),
    "Stream.synchronize": ("npu/streams.py", "Stream.synchronize"),
    "NPUGraph": ("npu/graphs.py", "NPUGraph.__init__"),
    "NPUGraph.replay": ("npu/graphs.py", "NPUGraph.replay"),
    "NPUGraph.capture_begin": ("npu/graphs.py", "NPUGraph.capture_begin"),
    "NPUGraph.capture_end": ("npu/graphs.py", "NPUGraph.capture_end"),
    "graph": ("npu/graphs.py", "graph.__init__"),
}


# ---------------------------------------------------------------- parsers (tested offline)
def parse_op_schemas(data: bytes) -> dict[str, str]:
    """Every ``[_]npu_*`` schema string in a shared library, by name (first occurrence)."""
    schemas: dict[str, str] = {}
    for match in _SCHEMA.finditer(data):
        text = match.group(1).decode()
        schemas.setdefault(text.split("(", 1)[0], text)
    return schemas


_CPP_TYPES = {"int64_t": "int", "bool": "bool", "double": "float"}


def atb_schema(header: str, name: str) -> str:
    """The op schema of ATB op ``name`` from its C++ declaration (``void`` ops only).

    ``const at::Tensor&`` -> ``Tensor``; a mutable ``at::Tensor&`` -> ``Tensor(a!)`` (then
    ``b!``, ...); ``int64_t``/``bool``/``double`` -> ``int``/``bool``/``float``.
    """
    match = re.search(rf"\bvoid\s+{re.escape(name)}\s*\(([^)]*)\)\s*;", header)
    if match is None:
        raise ValueError(f"no `void {name}(...)` declaration in the ATB header")
    params, alias = [], ord("a")
    for raw in match.group(1).split(","):
        decl = " ".join(raw.replace("&", " & ").split())
        arg = decl.rsplit(" ", 1)[1]
        if "Tensor" in decl and decl.startswith("const "):
            params.append(f"Tensor {arg}")
        elif "Tensor" in decl:
            params.append(f"Tensor({chr(alias)}!) {arg}")
            alias += 1
        else:
            ctype = decl.rsplit(" ", 1)[0]
            if ctype not in _CPP_TYPES:
                raise ValueError(f"{name}: cannot translate C++ type {ctype!r}")
            params.append(f"{_CPP_TYPES[ctype]} {arg}")
    return f"{name}({', '.join(params)}) -> ()"


def check_in_pieces(schema: str, data: bytes, piece: int = 16) -> None:
    """Raise unless every ``piece``-byte slice of ``schema`` occurs in ``data`` (the compiler
    stores long literals as 16-byte immediates, so the whole string is never contiguous)."""
    raw = schema.encode()
    for start in range(0, len(raw), piece):
        if raw[start : start + piece] not in data:
            raise ValueError(f"{schema!r}: piece {raw[start:start + piece]!r} not in the library")


def parse_soc_versions(header: str) -> dict[str, int]:
    """``enum class SocVersion { A = 1, B, ... }`` -> ``{"A": 1, "B": 2, ...}``."""
    body = re.search(r"enum class SocVersion\s*\{(.*?)\};", header, re.S)
    if body is None:
        raise ValueError("no `enum class SocVersion` in the header")
    values: dict[str, int] = {}
    current = -1
    for line in body.group(1).splitlines():
        item = _ENUM_ITEM.match(line.split("//")[0])
        if item is None:
            continue
        current = int(item.group(2)) if item.group(2) is not None else current + 1
        values[item.group(1)] = current
    return values


def requires_torch(metadata: str) -> str:
    """The ``Requires-Dist: torch...`` clause of a wheel's METADATA (``torch==2.13.0.*``)."""
    for line in metadata.splitlines():
        match = re.match(r"Requires-Dist:\s*torch\s*([^;\s]*)", line)
        if match is not None:
            return "torch" + match.group(1)
    raise ValueError("METADATA has no `Requires-Dist: torch` line")


def _find_def(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.ClassDef:
    scope: list[ast.stmt] = tree.body
    node: ast.FunctionDef | ast.ClassDef | None = None
    for part in qualname.split("."):
        node = next(
            (n for n in scope if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part),
            None,
        )
        if node is None:
            raise ValueError(f"no definition {qualname!r}")
        scope = node.body
    assert node is not None
    return node


def python_signature(source: str, qualname: str, drop_first: bool | None = None) -> str:
    """``"(device=None, priority=0, **kwargs)"`` of ``qualname`` (``Cls.method`` too).

    The first parameter (self/cls) is dropped for methods unless ``drop_first`` says otherwise.
    """
    node = _find_def(ast.parse(source), qualname)
    if not isinstance(node, ast.FunctionDef):
        raise ValueError(f"{qualname!r} is a class, not a function")
    args = node.args
    if drop_first is None:
        drop_first = "." in qualname and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list
        )
    if drop_first:
        args = ast.arguments(
            posonlyargs=args.posonlyargs[1:] if args.posonlyargs else [],
            args=args.args if args.posonlyargs else args.args[1:],
            vararg=args.vararg, kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults,
            kwarg=args.kwarg, defaults=args.defaults,
        )
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        arg.annotation = None
    for extra in (args.vararg, args.kwarg):
        if extra is not None:
            extra.annotation = None
    return f"({ast.unparse(args)})"


def method_names(source: str, qualname: str) -> list[str]:
    """Names of the methods defined in class ``qualname`` (sorted)."""
    node = _find_def(ast.parse(source), qualname)
    return sorted(n.name for n in getattr(node, "body", []) if isinstance(n, ast.FunctionDef))


def config_options(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Config classes of a package's ``configs`` modules, keyed ``"<file>:<class>"`` -> their
    ``self.<name> = value`` assignments in ``__init__`` (value source text). A nested config
    (``self.debug = _DebugConfig()``) is resolved to its key, ``{"config": "<file>:<class>"}``,
    through the same file or its ``from ...configs.<module> import <class>`` lines."""
    found: dict[str, tuple[ast.ClassDef, dict[str, str]]] = {}
    for file, source in files.items():
        tree = ast.parse(source)
        imports = {alias.asname or alias.name: f"{node.module.rsplit('.', 1)[-1]}.py"
                   for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
                   for alias in node.names}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found[f"{file}:{node.name}"] = (node, imports)
    # Config classes derive from NpuBaseConfig (directly or through another config class);
    # option value classes (OptionValue, StrOptionValue, ...) do not.
    configs = {"NpuBaseConfig"}
    grew = True
    while grew:
        before = len(configs)
        configs |= {node.name for node, _ in found.values()
                    if any(isinstance(b, ast.Name) and b.id in configs for b in node.bases)}
        grew = len(configs) > before
    classes: dict[str, dict[str, Any]] = {}
    for key, (node, imports) in found.items():
        file = key.split(":", 1)[0]
        init = next((n for n in node.body
                     if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            continue
        attrs: dict[str, Any] = {}
        for stmt in ast.walk(init):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                continue
            target = stmt.targets[0]
            if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                continue
            value: Any = ast.unparse(stmt.value)
            call = re.fullmatch(r"(\w+)\(\)", value)
            if call is not None and call.group(1) in configs:
                name = call.group(1)
                for candidate in (f"{file}:{name}", f"{imports.get(name)}:{name}"):
                    if candidate in found:
                        value = {"config": candidate}
                        break
            attrs[target.attr] = value
        classes[key] = attrs
    return classes


def config_tree(classes: dict[str, dict[str, Any]], root: str) -> dict[str, Any]:
    """The options of config class ``root`` (a key of :func:`config_options`), nested
    configs expanded (``{"debug": {"aclgraph": {...}, ...}, ...}``)."""
    tree: dict[str, Any] = {}
    for name, value in sorted(classes[root].items()):
        if name == "_fixed_attrs":
            continue
        tree[name] = config_tree(classes, value["config"]) if isinstance(value, dict) else value
    return tree


def meta_source(source: str, op: str) -> str:
    """Source of the function registered with ``@impl(m, "<op>")`` (decorators included)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if (isinstance(deco, ast.Call) and len(deco.args) == 2
                    and isinstance(deco.args[1], ast.Constant) and deco.args[1].value == op):
                start = min(d.lineno for d in node.decorator_list)
                assert node.end_lineno is not None
                return "\n".join(lines[start - 1 : node.end_lineno]) + "\n"
    raise ValueError(f"no meta function registered for {op!r}")


def dtype_enum(source: str) -> dict[str, str]:
    """``TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP`` as ``{"1": "int8", ...}``."""
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP"):
            assert isinstance(node.value, ast.Dict)
            return {
                str(ast.literal_eval(k)): v.attr
                for k, v in zip(node.value.keys, node.value.values, strict=True)
                if k is not None and isinstance(v, ast.Attribute)
            }
    raise ValueError("no TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP in the meta module")


def atb_loader(source: str) -> dict[str, Any]:
    """How torch_npu exposes ATB ops: the module, its ``API_LIST`` (set as ``torch_npu.<op>``)
    and the module global holding the load error when NNAL's ``libatb.so`` is missing."""
    tree = ast.parse(source)
    names = {t.id for n in tree.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    if "NNAL_EX" not in names:
        raise ValueError("_atb_ops.py no longer keeps its load error in NNAL_EX")
    api = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
               and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "API_LIST")
    return {"module": f"{TN}.op_plugin.atb._atb_ops", "load_error": "NNAL_EX",
            "api_list": sorted(api)}


def op_doc(docs: str, op: str) -> str:
    """The ``_add_torch_npu_docstr("<op>", \"\"\"...\"\"\")`` text of ``op``."""
    match = re.search(rf'_add_torch_npu_docstr\(\s*"{re.escape(op)}",\s*"""(.*?)"""', docs, re.S)
    if match is None:
        raise ValueError(f"no docstring for {op!r} in _op_plugin_docs.py")
    return match.group(1)


# ---------------------------------------------------------------- the record
def build_record(wheel_dir: Path, version: str, wheel_name: str) -> dict[str, Any]:
    """Everything this project binds to, read from an unzipped torch-npu wheel."""
    pkg = wheel_dir / TN

    def read(rel: str) -> str:
        return (pkg / rel).read_text(encoding="utf-8")

    so = (pkg / "lib" / "libtorch_npu.so").read_bytes()
    atb_so = (pkg / "lib" / "libop_plugin_atb.so").read_bytes()
    atb_header = read("include/third_party/op-plugin/op_plugin/include/AtbOpsInterface.h")
    all_schemas = parse_op_schemas(so)
    meta = read("op_plugin/meta/_meta_registrations.py")
    docs = read("_op_plugin_docs.py")
    ops: dict[str, Any] = {}
    for op, outputs in OUTPUTS.items():
        if op in ATB_OPS:
            schema = atb_schema(atb_header, op)
            check_in_pieces(schema, atb_so)
            entry: dict[str, Any] = {"library": "atb", "schema": schema}
        else:
            if op not in all_schemas:
                raise ValueError(f"{op} is not in libtorch_npu.so")
            entry = {"library": "torch_npu", "schema": all_schemas[op],
                     "meta_source": meta_source(meta, META_NAMES[op]).splitlines()}
        entry["outputs"] = outputs
        constraints = CONSTRAINTS.get(op, [])
        if constraints:
            text = op_doc(docs, op)
            for rule in constraints:
                if rule["doc"] not in text:
                    raise ValueError(f"{op}: documented text {rule['doc']!r} not in its docs")
        entry["constraints"] = constraints
        ops[op] = entry
    apis: dict[str, Any] = {}
    for name, (rel, qualname) in PYTHON_APIS.items():
        apis[name] = {"file": f"{TN}/{rel}", "qualname": qualname,
                      "signature": python_signature(read(rel), qualname)}
    return {
        "torch_npu_version": version,
        "wheel": wheel_name,
        "requires_torch": requires_torch(
            (wheel_dir / f"torch_npu-{version}.dist-info" / "METADATA").read_text("utf-8")),
        "op_schema_count": len(all_schemas),
        "ops": ops,
        "dtype_enum": dtype_enum(meta),
        "python_apis": apis,
        "graph_extensions": _graph_extensions(pkg),
        "atb": atb_loader(read("op_plugin/atb/_atb_ops.py")),
        "soc_versions": parse_soc_versions(
            read("include/torch_npu/csrc/core/npu/NpuVariables.h")),
    }


def _graph_extensions(pkg: Path) -> dict[str, Any]:
    dynamo = pkg / "dynamo"
    ex, ta = dynamo / "npugraph_ex", dynamo / "torchair"

    def configs(root: Path) -> dict[str, dict[str, Any]]:
        files = {p.name: p.read_text("utf-8") for p in sorted((root / "configs").glob("*.py"))}
        return config_options(files)

    compiler = (ex / "npu_fx_compiler.py").read_text("utf-8")
    ta_compiler = (ta / "npu_fx_compiler.py").read_text("utf-8")
    dynamo_init = (dynamo / "__init__.py").read_text("utf-8")
    alias = re.search(r'NPUGRAPH_EX_BACKEND = "(\w+)"', dynamo_init)
    ta_alias = re.search(r'sys\.modules\["(\w+)"\] = _LazyTorchair', dynamo_init)
    if alias is None or ta_alias is None:
        raise ValueError("the lazy npugraph_ex/torchair proxies are not where they were")
    exports = ast.literal_eval(
        re.search(r"__all__ = (\[.*?\])", (ex / "__init__.py").read_text("utf-8"), re.S)
        .group(1))  # type: ignore[union-attr]
    return {
        "npugraph_ex": {
            "module": f"{TN}.dynamo.npugraph_ex",
            "sys_modules_alias": alias.group(1),
            "exports": sorted(exports),
            "compiler_config": config_tree(configs(ex), "compiler_config.py:CompilerConfig"),
            "option_helper": {
                "module": f"{TN}.dynamo.npugraph_ex.configs.compiler_config",
                "signature": python_signature(
                    (ex / "configs" / "compiler_config.py").read_text("utf-8"),
                    "_process_kwargs_options"),
            },
            "get_npu_backend": python_signature(compiler, "get_npu_backend"),
            "fx_compiler": {
                "module": f"{TN}.dynamo.npugraph_ex.npu_fx_compiler",
                "class": "_NpuFxCompiler",
                "_get_compiled_gm": python_signature(
                    compiler, "_NpuFxCompiler._get_compiled_gm", drop_first=False),
            },
            "compiled_graph": {
                "class": "_CompiledFxGraph",
                "methods": method_names(compiler, "_CompiledFxGraph"),
                "attributes": sorted(config_options({"c": compiler})["c:_CompiledFxGraph"]),
            },
        },
        "torchair": {
            "module": f"{TN}.dynamo.torchair",
            "sys_modules_alias": ta_alias.group(1),
            "compiler_config": config_tree(configs(ta), "compiler_config.py:CompilerConfig"),
            "get_npu_backend": python_signature(ta_compiler, "get_npu_backend"),
        },
    }


# ---------------------------------------------------------------- CLI
def locked_version(lock: Path, name: str) -> str:
    """The version of package ``name`` in a ``uv.lock``."""
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    versions = {p["version"] for p in data.get("package", []) if p.get("name") == name}
    if len(versions) != 1:
        raise ValueError(f"uv.lock holds {sorted(versions) or 'no'} versions of {name}")
    return str(versions.pop())


def download_wheel(version: str, dest: Path) -> Path:
    """``pip download --no-deps`` the CPython 3.11 x86_64 wheel of torch-npu ``version``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
         f"torch-npu=={version}", "-d", str(dest)],
        check=True,
    )
    (wheel,) = dest.glob("torch_npu-*.whl")
    return wheel


def render(record: dict[str, Any]) -> str:
    """The JSON text (sorted keys, one value a line: diffs show what moved)."""
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", help="torch-npu release (default: the one in uv.lock)")
    parser.add_argument("--wheel", type=Path, help="use this wheel instead of downloading")
    parser.add_argument(
        "--out", type=Path, help="JSON path (default: tools/npu_seam/torch_npu-V.json)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON would change")
    args = parser.parse_args(argv)
    version = args.version or locked_version(ROOT / "uv.lock", "torch-npu")
    out = args.out or OUT_DIR / f"torch_npu-{version}.json"
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download_wheel(version, Path(tmp))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(Path(tmp) / "wheel")
        text = render(build_record(Path(tmp) / "wheel", version, wheel.name))
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    if args.check:
        diff = list(difflib.unified_diff(old.splitlines(), text.splitlines(), str(out),
                                         "torch-npu wheel", lineterm=""))
        print("\n".join(diff) if diff else f"{out.name}: up to date")
        return 1 if diff else 0
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
