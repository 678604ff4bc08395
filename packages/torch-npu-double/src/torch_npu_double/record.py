"""The checked-in record of the real torch-npu wheel, ``torch_npu-<version>.json`` beside this
module (written by the repository's ``tools/torch_npu_schemas.py``)."""

from __future__ import annotations

import ast
import functools
import inspect
import json
from pathlib import Path
from typing import Any

import tomllib

HERE = Path(__file__).resolve().parent

def workspace_lock() -> Path:
    """The ``uv.lock`` of the workspace this member lives in (it is never installed elsewhere)."""
    for parent in HERE.parents:
        if (parent / "uv.lock").is_file() and (parent / "packages").is_dir():
            return parent / "uv.lock"
    raise FileNotFoundError(
        f"torch_npu_double reads the torch-npu version from the workspace's uv.lock, and {HERE} "
        "is not inside a workspace; pass the version to load_record()")


def locked_torch_npu_version(lock: Path | None = None) -> str:
    """The torch-npu version ``lock`` (default: the workspace's ``uv.lock``) resolves."""
    data = tomllib.loads((lock or workspace_lock()).read_text(encoding="utf-8"))
    versions = {p["version"] for p in data.get("package", []) if p.get("name") == "torch-npu"}
    if len(versions) != 1:
        raise ValueError(f"uv.lock holds {sorted(versions) or 'no'} torch-npu versions")
    return str(versions.pop())


def record_path(version: str) -> Path:
    """Where the record of torch-npu ``version`` is (or would be) kept."""
    return HERE / f"torch_npu-{version}.json"


@functools.cache
def load_record(version: str | None = None) -> dict[str, Any]:
    """The record of torch-npu ``version`` (default: the locked one); read-only by convention."""
    version = version or locked_torch_npu_version()
    path = record_path(version)
    if not path.exists():
        raise FileNotFoundError(
            f"no record {path.name}; run `python tools/torch_npu_schemas.py --version {version}`"
        )
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record


class RecordedDefault:
    """A recorded default, shown as its source text (the doubles bind calls, never use it)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return self.source


def signature_from_text(text: str) -> inspect.Signature:
    """``"(device=None, *, flag=True, **kwargs)"`` -> an ``inspect.Signature`` to ``bind``."""
    fn = ast.parse(f"def f{text}: pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    args = fn.args
    P = inspect.Parameter

    def default(node: ast.expr | None) -> Any:
        return P.empty if node is None else RecordedDefault(ast.unparse(node))

    params: list[inspect.Parameter] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (arg, node) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=default(node)))
    if args.vararg is not None:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, node in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=default(node)))
    if args.kwarg is not None:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def dtype_name(dtype: Any) -> str:
    """A dtype as the record spells it: ``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


def recorded_violation(rule: dict[str, Any], t: Any, named: dict[str, Any]) -> str | None:
    """How tensor ``t`` breaks ``rule``, one documented constraint of the record (the call's
    arguments by name in ``named``), or None when it keeps it."""
    if "dtypes" in rule and dtype_name(t.dtype) not in rule["dtypes"]:
        return f"has dtype {t.dtype}; allowed: {', '.join(rule['dtypes'])}"
    if "dims" in rule and not rule["dims"][0] <= t.dim() <= rule["dims"][1]:
        return f"has {t.dim()} dims; allowed: {rule['dims'][0]}-{rule['dims'][1]}"
    other: Any = named.get(rule.get("dtype_like", ""))
    if hasattr(other, "dtype") and other.dtype != t.dtype:
        return f"has dtype {t.dtype}, {rule['dtype_like']} has {other.dtype}; they must match"
    other = named.get(rule.get("shape_like", ""))
    if hasattr(other, "shape") and other.shape != t.shape:
        return f"has shape {list(t.shape)}; it must be {rule['shape_like']}'s {list(other.shape)}"
    if "multiple_of" in rule:
        spec = rule["multiple_of"]
        by = dtype_name(named[spec["by_dtype_of"]].dtype)
        multiple = spec["multiples"].get(by)
        if multiple is not None and t.shape[spec["dim"]] % multiple:
            return (f"dim {spec['dim']} is {t.shape[spec['dim']]}; with {by} inputs it must be "
                    f"a multiple of {multiple}")
    if "min_size" in rule:
        spec = rule["min_size"]
        size = t.shape[spec["dim"]]
        if dtype_name(t.dtype) in spec["dtypes"] and size < spec["size"]:
            return f"dim {spec['dim']} is {size}; with {t.dtype} it must be at least {spec['size']}"
    return None
