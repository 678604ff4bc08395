#!/usr/bin/env python3
"""Record the parts of the real torch-npu wheel this project binds to, as a checked-in JSON.

The fake NPU seam of the tests (``torch_npu_double.seam``) is built from that JSON, so every fake
kernel and API has the real library's schema. The tool downloads the torch-npu wheel of the
locked torch release (``pip download --no-deps`` with this interpreter's pip; never
installed), unzips it and records:

* ``ops``: the schema of every torch_npu op the project calls (from the ``\\0``-terminated
  strings of ``lib/libtorch_npu.so``; the ATB op ``_npu_rotary_embedding`` from
  ``AtbOpsInterface.h``, each 16-byte piece checked against ``lib/libop_plugin_atb.so``), its
  output rule (``outputs``: a small declarative form the seam interprets, checked by the
  tests against ``meta_source``, the op's meta function from
  ``op_plugin/meta/_meta_registrations.py``) and the documented input constraints the
  project relies on (``constraints``, each quoting the ``_op_plugin_docs.py`` text it rests
  on; a quote missing from the wheel is an error);
* ``kernel_schemas``: the schema alone of the kernels in ``KERNEL_SCHEMAS``;
* ``dtype_enum``: the meta module's ``int -> torch dtype`` table (torch_npu dtype ids);
* ``python_apis``: signatures (via ``ast``, no import) of the ``torch_npu.npu`` APIs used;
* ``graph_extensions``: the bundled npugraph_ex / torchair module names, config option
  names, ``get_npu_backend`` / ``_NpuFxCompiler._get_compiled_gm`` signatures and the
  methods of ``_CompiledFxGraph`` with its ``load_artifacts`` signature and the fields of
  the ``_CompiledFxArtifacts`` it takes;
* ``soc_versions``: the ``SocVersion`` enum of ``NpuVariables.h``;
* ``requires_torch``: the wheel METADATA's ``Requires-Dist: torch`` clause;
* ``aclnn``: the ``aclnn*`` entry points of CANN's operator library behind each kernel the
  ``ascend`` ops call (the table of ``vllm_ascend.doctor.kernel_entry_points``, each name
  checked to be among the strings of ``lib/libtorch_npu.so``; a missing one stops the tool);
* ``libtorch_npu_needed``: the ELF NEEDED entries of ``lib/libtorch_npu.so`` (the libraries
  ``import torch_npu`` loads; the CANN ones must resolve on the host).

What is recorded per op and API is listed in ``torch_npu_tables.py``; the parsers are in
``torch_npu_parsers.py``.

Usage: ``python3 tools/torch_npu_schemas.py [--version X] [--wheel PATH] [--out PATH]
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
from torch_npu_parsers import (
    TN,
    atb_loader,
    atb_schema,
    check_in_pieces,
    config_options,
    config_tree,
    dataclass_fields,
    dtype_enum,
    meta_source,
    method_names,
    op_doc,
    parse_op_schemas,
    parse_soc_versions,
    python_signature,
    requires_torch,
)
from torch_npu_tables import (
    ATB_OPS,
    CONSTRAINTS,
    KERNEL_SCHEMAS,
    META_NAMES,
    OUTPUTS,
    PYTHON_APIS,
)
from vllm_ascend.doctor.elf_symbols import read_elf_dynamic
from vllm_ascend.doctor.kernel_entry_points import ACLNN

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "packages" / "torch-npu-double" / "src" / "torch_npu_double"


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
    missing = [op for op in KERNEL_SCHEMAS if op not in all_schemas]
    if missing:
        raise ValueError(f"{missing} not in libtorch_npu.so")
    apis: dict[str, Any] = {}
    for name, (rel, qualname) in PYTHON_APIS.items():
        apis[name] = {"file": f"{TN}/{rel}", "qualname": qualname,
                      "signature": python_signature(read(rel), qualname)}
    aclnn: dict[str, list[str]] = {}
    for kernel, names in sorted(ACLNN.items()):
        for name in names:
            if (name.encode() + b"\0") not in so:
                raise ValueError(f"{kernel}: entry point {name} is not in libtorch_npu.so")
        aclnn[kernel] = list(names)
    return {
        "aclnn": aclnn,
        "libtorch_npu_needed": list(read_elf_dynamic(pkg / "lib" / "libtorch_npu.so").needed),
        "torch_npu_version": version,
        "wheel": wheel_name,
        "requires_torch": requires_torch(
            (wheel_dir / f"torch_npu-{version}.dist-info" / "METADATA").read_text("utf-8")),
        "op_schema_count": len(all_schemas),
        "ops": ops,
        "kernel_schemas": {op: all_schemas[op] for op in KERNEL_SCHEMAS},
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
                "load_artifacts": python_signature(
                    compiler, "_CompiledFxGraph.load_artifacts", drop_first=True),
            },
            "artifacts": {
                "class": "_CompiledFxArtifacts",
                "fields": dataclass_fields(compiler, "_CompiledFxArtifacts"),
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
        "--out", type=Path, help="JSON path (default: torch_npu_double/torch_npu-V.json)",
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
