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
