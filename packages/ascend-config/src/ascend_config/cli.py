"""``ascend-config``: check a config, print the JSON Schema, explain a key, list env vars.

Exit codes: 0 success, 1 the output could not be written (a closed stdout or pipe),
2 invalid input (every problem listed on stderr), 74 no space left on the device behind stdout.
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from ascend_config.envs import BY_NAME, REGISTRY, EnvVarError
from ascend_config.errors import short_repr
from ascend_config.inputs import (
    InputError,
    load_config_file,
    parse_json_text,
    parse_yaml_text,
    read_stream,
)
from ascend_config.limits import MAX_CONFIG_BYTES, MAX_FACTS_BYTES

EXIT_OK = 0
EXIT_OUTPUT = 1
EXIT_INVALID = 2
EXIT_NO_SPACE = 74  # sysexits.h's EX_IOERR


def _is_json(text: str) -> bool:
    """JSON text (an object, a list or null) rather than a file name or YAML."""
    stripped = text.strip()
    return stripped[:1] in ("{", "[") or stripped == "null"


def _load_source(source: str) -> Any:
    """additional_config from ``-`` (stdin), inline JSON text or a JSON/YAML file."""
    if source == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise InputError("cannot read stdin: it is not a byte stream")
        text = read_stream(stream, MAX_CONFIG_BYTES, "stdin")
        parse = parse_json_text if _is_json(text) else parse_yaml_text
        return parse(text, "stdin")
    if _is_json(source):
        if len(source) > MAX_CONFIG_BYTES:
            raise InputError(f"the JSON text is longer than the limit of {MAX_CONFIG_BYTES:,} "
                             "bytes")
        return parse_json_text(source, "the JSON text")
    return load_config_file(source, MAX_CONFIG_BYTES)


def _environ(pairs: Sequence[str]) -> dict[str, str]:
    env = dict(os.environ)
    given: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InputError(f"--env expects NAME=VALUE, got {short_repr(pair)}")
        if name in given and given[name] != value:
            # Which of the two was meant is not for the reader to guess.
            raise InputError(f"--env gives {name} twice ({short_repr(given[name])} and "
                             f"{short_repr(value)}); give each variable once")
        given[name] = env[name] = value
    return env


def _check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ascend_config.errors import AscendConfigError
    from ascend_config.facts import DeploymentFacts, FactsError
    from ascend_config.resolver import resolve

    try:
        data = _load_source(args.source)
        facts = DeploymentFacts.from_json_file(args.facts) if args.facts else DeploymentFacts()
        environ = _environ(args.env or [])
    except (InputError, FactsError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INVALID
    try:
        cfg = resolve(data, facts, environ)
    except AscendConfigError as exc:
        print(str(exc), file=err)
        return EXIT_INVALID
    for warning in cfg.warnings:
        print(f"warning: {warning}", file=err)
    payload = cfg.summary() if args.summary else json.loads(cfg.to_json())
    print(json.dumps(payload, indent=2, ensure_ascii=False), file=out)
    return EXIT_OK


def _schema(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ascend_config.schema.top import json_schema

    print(json.dumps(json_schema(), indent=2), file=out)
    return EXIT_OK


def _explain(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ascend_config.schema.introspect import explain, field_at, iter_keys, suggest

    key = args.key
    if key in BY_NAME:
        var = BY_NAME[key]
        print(f"{var.name} (environment variable)\n  {var.description}\n"
              f"  default: {var.default!r}\n  allowed: {var.allowed()}", file=out)
        if var.config_key:
            print(f"  fallback of: {var.config_key} (deprecated; set the key instead)", file=out)
        return EXIT_OK
    doc = explain(key)
    if doc is None:
        # field_at stops at the first unknown part, inside the section that should hold it.
        parts = key.split(".")
        model, _, matched = field_at(parts)
        guess = suggest(parts[matched], model)
        hint = f"; did you mean '{guess}'?" if guess else ""
        print(f"error: unknown key {short_repr(key)}{hint}", file=err)
        return EXIT_INVALID
    lines = [f"{doc.path} ({doc.type_text})", f"  {doc.description}"]
    if not doc.is_section:
        lines += [f"  default: {json.dumps(doc.default)}", f"  allowed: {doc.allowed}"]
    if doc.env:
        lines.append(f"  env fallback: {doc.env} (deprecated; used only when the key is unset)")
    if doc.deprecated:
        lines.append(f"  deprecated: use {doc.deprecated}")
    if doc.is_section:
        lines.append("  keys:")
        prefix = doc.path + "."
        for sub in iter_keys():
            if sub.path.startswith(prefix) and "." not in sub.path[len(prefix):]:
                lines.append(f"    {sub.path[len(prefix):]} = {json.dumps(sub.default)}")
    print("\n".join(lines), file=out)
    return EXIT_OK


def _env(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    environ: Mapping[str, str] = os.environ
    status = EXIT_OK
    width = max(len(v.name) for v in REGISTRY)
    for var in REGISTRY:
        source = "environment" if var.name in environ else "default"
        try:
            value: object = var.default if source == "default" else var.parse(environ[var.name])
        except EnvVarError as exc:
            value = f"INVALID {environ[var.name]!r} (allowed: {exc.var.allowed()})"
            status = EXIT_INVALID
        print(f"{var.name:<{width}}  {value!s:<12}  [{source}]  {var.description}", file=out)
    return status


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    parser = argparse.ArgumentParser(prog="ascend-config", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a config; print it resolved (exit 0) or "
                                         "every problem (exit 2)")
    check.add_argument("source", help="a JSON/YAML file, JSON text such as '{\"a\": 1}', "
                                      "or - for stdin (JSON or YAML); at most "
                                      f"{MAX_CONFIG_BYTES:,} bytes")
    check.add_argument("--facts", help="JSON file of deployment facts (DeploymentFacts fields; "
                                       f"at most {MAX_FACTS_BYTES:,} bytes)")
    check.add_argument("--env", action="append", metavar="NAME=VALUE",
                       help="override an environment variable for this check (repeatable)")
    check.add_argument("--summary", action="store_true", help="print the short summary only")
    check.set_defaults(func=_check)
    schema = sub.add_parser("schema", help="print the JSON Schema of additional_config")
    schema.set_defaults(func=_schema)
    explain = sub.add_parser("explain", help="type, default, range, description of a key")
    explain.add_argument("key", help="dotted key path or environment variable name")
    explain.set_defaults(func=_explain)
    env = sub.add_parser("env", help="every environment variable, its value and source")
    env.set_defaults(func=_env)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code."""
    _guard_standard_streams()
    args = build_parser().parse_args(argv)
    err = err or _lenient(sys.stderr) or io.StringIO()  # stderr closed too: nowhere to say it
    out = out or _lenient(sys.stdout)
    if out is None:
        print("error: cannot write the output: stdout is closed", file=err)
        return EXIT_OUTPUT
    try:
        code: int = args.func(args, out, err)
        out.flush()
    except BrokenPipeError:  # piped into e.g. `head`: the reader has all it wanted
        _detach_stdout(out)
        return EXIT_OUTPUT
    except OSError as exc:  # e.g. `> /dev/full`
        path = _stdout_path() if out is sys.stdout else "the output"
        _detach_stdout(out)
        if exc.errno == errno.ENOSPC:
            print(f"error: no space left on device writing {path}", file=err)
            return EXIT_NO_SPACE
        print(f"error: cannot write the output: {exc.strerror or exc}", file=err)
        return EXIT_OUTPUT
    return code


def _lenient(stream: TextIO | None) -> TextIO | None:
    """``stream`` escaping what its encoding cannot show (PYTHONIOENCODING=ascii, a path's
    undecodable byte) instead of raising UnicodeEncodeError halfway through the output; None
    for a closed stream."""
    if stream is None:
        return None
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    return stream


def _guard_standard_streams() -> None:
    """``/dev/null`` on a closed descriptor 0, 1 or 2, so no file opened later takes its number
    (``sys.stdout`` stays None: the output is still refused as closed)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            spare = os.open(os.devnull, os.O_RDWR)
            if spare != fd:
                os.dup2(spare, fd)
                os.close(spare)


def _stdout_path() -> str:
    """The file behind descriptor 1 as the kernel names it, or ``stdout``."""
    try:
        return os.fsdecode(os.readlink("/proc/self/fd/1"))
    except OSError:
        return "stdout"


def _detach_stdout(out: TextIO) -> None:
    """Point a failed stdout at /dev/null so the interpreter's exit flush cannot fail again."""
    if out is not sys.stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
