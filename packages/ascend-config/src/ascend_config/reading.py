"""Read and parse user files within the limits of :mod:`ascend_config.limits` (stdlib only).

Special files (FIFO, device, socket, directory) are refused before they are opened, and again
after opening (the path could have been swapped in between), so a read never blocks; sizes are
checked before parsing, and nesting before anything recurses.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

from ascend_config.bounds import text_problem
from ascend_config.limits import MAX_DEPTH, MAX_YAML_ALIASES


class InputError(ValueError):
    """A file or text that cannot be used as input; the message is one line."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# A JSON string (an unterminated one runs to the end, as for the parser) or a bracket.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))


def show_path(path: str | os.PathLike[str]) -> str:
    """A path for one error line: quoted, non-printable characters escaped, at most 200 long."""
    text = repr(os.fspath(path))
    return text if len(text) <= 200 else text[:197] + "..."


def _refuse_special(mode: int, shown: str) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise InputError(f"{shown} is {kind}; give a regular file")


def read_text_file(path: str | os.PathLike[str], limit: int, what: str) -> str:
    """The UTF-8 text of regular file ``path`` of at most ``limit`` bytes."""
    shown = f"{what} {show_path(path)}"
    why = text_problem(os.fspath(path), is_path=True)
    if why and "\x00" in os.fspath(path):
        raise InputError(f"cannot read {shown}: the path {why}")
    try:
        mode = os.stat(path).st_mode
        _refuse_special(mode, shown)
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise InputError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except UnicodeEncodeError:  # a surrogate that is not an undecodable byte of the argv
        raise InputError(f"cannot read {shown}: the path {why}") from None
    with os.fdopen(fd, "rb") as fh:
        _refuse_special(os.fstat(fh.fileno()).st_mode, shown)
        data = _read_at_most(fh, limit, shown)
    return decode_utf8(data, shown)


def read_stream(stream: IO[bytes], limit: int, what: str) -> str:
    """The UTF-8 text of a binary stream (stdin), at most ``limit`` bytes."""
    try:
        data = _read_at_most(stream, limit, what)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}") from None
    return decode_utf8(data, what)


def _read_at_most(stream: IO[bytes], limit: int, shown: str) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{shown} is larger than the limit of {limit:,} bytes")
    return data


def decode_utf8(data: bytes, shown: str) -> str:
    """``data`` decoded as strict UTF-8; the error names the offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown} is not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at "
                         f"offset {exc.start})") from None


def json_depth(text: str) -> int:
    """Deepest nesting of ``[`` / ``{`` outside strings (linear; exact for valid JSON)."""
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def parse_json_text(text: str, shown: str) -> Any:
    """Parse JSON ``text``; nesting deeper than MAX_DEPTH is refused before parsing."""
    if json_depth(text) > MAX_DEPTH:
        raise InputError(f"{shown} is nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"{shown} is not valid JSON: {exc}") from None


def parse_yaml_text(text: str, shown: str) -> Any:
    """Parse one YAML document (safe types only) with bounded nesting and alias uses."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = aliases = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError(f"{shown} is nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise InputError(f"{shown} uses more than {MAX_YAML_ALIASES} YAML aliases")
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())[:200]
        raise InputError(f"{shown} is not valid YAML: {first}") from None
    except InputError:
        raise
    except ValueError as exc:
        # The constructors raise plain ValueError for scalars that look typed but are not
        # values: 2024-02-30, a +25:00 offset, an int of more than 4,300 digits.
        first = " ".join(str(exc).split())[:200]
        raise InputError(f"{shown} has a value YAML cannot build: {first}") from None


def load_config_file(path: str | os.PathLike[str], limit: int) -> Any:
    """A JSON (or, by suffix ``.yaml``/``.yml``, YAML) config file, parsed within the limits."""
    text = read_text_file(path, limit, "config file")
    shown = f"config file {show_path(path)}"
    if Path(path).suffix in (".yaml", ".yml"):
        return parse_yaml_text(text, shown)
    return parse_json_text(text, shown)
