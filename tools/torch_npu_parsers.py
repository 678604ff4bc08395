"""Parsers of the torch-npu wheel's files (pure functions on text/bytes, tested offline)."""

from __future__ import annotations

import ast
import re
from typing import Any

TN = "torch_npu"

_SCHEMA = re.compile(
    rb"((?:_?npu_)[a-z0-9_]+(?:\.[A-Za-z0-9_]+)?\((?:[^\x00\n]*?)\) -> [^\x00\n]+)\x00"
)
_ENUM_ITEM = re.compile(r"^\s*(\w+)\s*(?:=\s*(-?\d+))?\s*,?\s*$")


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


def dataclass_fields(source: str, qualname: str) -> dict[str, str]:
    """Fields of dataclass ``qualname``: name -> default value source (``"None"`` if none)."""
    node = _find_def(ast.parse(source), qualname)
    return {
        n.target.id: ast.unparse(n.value) if n.value is not None else "None"
        for n in getattr(node, "body", [])
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


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
    """Source of the function registered with ``@impl(m, "<op>")`` (decorators included),
    preceded by the module-level helper functions it calls, transitively (FIA's meta
    function builds its shapes in helpers), so the recorded source runs on its own."""
    tree = ast.parse(source)
    lines = source.splitlines()
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def text(node: ast.FunctionDef) -> str:
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        assert node.end_lineno is not None
        return "\n".join(lines[start - 1 : node.end_lineno]) + "\n"

    def helpers(node: ast.FunctionDef, seen: list[str]) -> list[str]:
        for name in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}):
            helper = functions.get(name)
            if helper is not None and name not in seen and not helper.decorator_list:
                seen.append(name)
                helpers(helper, seen)
        return seen

    for node in functions.values():
        for deco in node.decorator_list:
            if (isinstance(deco, ast.Call) and len(deco.args) == 2
                    and isinstance(deco.args[1], ast.Constant) and deco.args[1].value == op):
                used = helpers(node, [])
                return "\n\n".join([*(text(functions[n]) for n in used), text(node)])
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


