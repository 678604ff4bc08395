"""Where the pinned vLLM sdist is fetched from: the package indexes pip and uv are configured
with, never an address written here.

The indexes, in the order they are tried: uv's environment (``UV_DEFAULT_INDEX``,
``UV_INDEX_URL``, ``UV_INDEX``, ``UV_EXTRA_INDEX_URL``), pip's (``PIP_INDEX_URL``,
``PIP_EXTRA_INDEX_URL``), uv's ``uv.toml`` files (``UV_CONFIG_FILE``, else the user's and the
system's; none with ``UV_NO_CONFIG``), pip's configuration files (``PIP_CONFIG_FILE``, else the
global, user and site files; none when it is ``os.devnull``), and when none of them names a
default index, pip's own default (asked from the installed pip). ``find-links`` folders
(``PIP_FIND_LINKS``, ``UV_FIND_LINKS`` and the files' ``find-links``) are looked in first.

Each index is read through its simple API (PEP 691 JSON or PEP 503 HTML; a ``file://`` index
is a folder, its ``index.html`` or its listing). The archive is taken from the first index that
lists ``vllm-<version>.tar.gz``; a hash the index states must be the pin (the caller checks
the bytes against the pin again after the download).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import tomllib

_SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_MAX_PAGE_BYTES = 64 << 20  # a project page larger than this is refused, not read


@dataclass
class Indexes:
    """The configured places, in the order they are tried."""

    default: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # where each setting came from

    def urls(self) -> list[str]:
        """Every index URL once, the default first."""
        return list(dict.fromkeys([*self.default, *self.extra]))


def _split(value: str) -> list[str]:
    return [v for v in value.split() if v]


def _uv_index_value(value: str) -> str:
    """``name=url`` (uv's named index) -> ``url``."""
    name, sep, rest = value.partition("=")
    if sep and "://" not in name and "/" not in name:
        return rest
    return value


def _add(indexes: Indexes, source: str, default: Iterable[str] = (),
         extra: Iterable[str] = (), links: Iterable[str] = ()) -> None:
    default, extra, links = list(default), list(extra), list(links)
    if default and not indexes.default:
        indexes.default = default
    indexes.extra.extend(extra)
    indexes.find_links.extend(links)
    if default or extra or links:
        indexes.sources.append(source)


def _from_env(indexes: Indexes, env: Mapping[str, str]) -> None:
    uv_default = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL") or ""
    _add(indexes, "uv's environment", default=_split(uv_default)[:1],
         extra=[_uv_index_value(v) for v in _split(env.get("UV_INDEX", ""))]
         + _split(env.get("UV_EXTRA_INDEX_URL", "")),
         links=_split(env.get("UV_FIND_LINKS", "")))
    _add(indexes, "pip's environment", default=_split(env.get("PIP_INDEX_URL", ""))[:1],
         extra=_split(env.get("PIP_EXTRA_INDEX_URL", "")),
         links=_split(env.get("PIP_FIND_LINKS", "")))


def _home(env: Mapping[str, str]) -> Path | None:
    home = env.get("HOME")
    return Path(home) if home else None


def uv_config_files(env: Mapping[str, str]) -> list[Path]:
    """uv's configuration files, most important first."""
    if env.get("UV_NO_CONFIG"):
        return []
    if env.get("UV_CONFIG_FILE"):
        return [Path(env["UV_CONFIG_FILE"])]
    files = []
    home = _home(env)
    xdg = env.get("XDG_CONFIG_HOME") or (str(home / ".config") if home else "")
    if xdg:
        files.append(Path(xdg) / "uv" / "uv.toml")
    for folder in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep):
        if folder:
            files.append(Path(folder) / "uv" / "uv.toml")
    files.append(Path("/etc/uv/uv.toml"))
    return files


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, most important first (pip reads them the other way round,
    later ones overriding earlier ones)."""
    chosen = env.get("PIP_CONFIG_FILE")
    if chosen == os.devnull:
        return []
    files = [Path(chosen)] if chosen else []
    files.append(Path(sys.prefix) / "pip.conf")
    home = _home(env)
    xdg = env.get("XDG_CONFIG_HOME") or (str(home / ".config") if home else "")
    if xdg:
        files.append(Path(xdg) / "pip" / "pip.conf")
    if home:
        files.append(home / ".pip" / "pip.conf")
    files.append(Path("/etc/pip.conf"))
    for folder in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep):
        if folder:
            files.append(Path(folder) / "pip" / "pip.conf")
    return files


def _read_small(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > (1 << 20):
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _from_uv_file(indexes: Indexes, path: Path) -> None:
    text = _read_small(path)
    if text is None:
        return
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    default = [data["index-url"]] if isinstance(data.get("index-url"), str) else []
    extra = [v for v in data.get("extra-index-url", []) if isinstance(v, str)]
    for entry in data.get("index", []):
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            (default if entry.get("default") else extra).append(entry["url"])
    links = [v for v in data.get("find-links", []) if isinstance(v, str)]
    _add(indexes, str(path), default=default[:1], extra=extra, links=links)


def _from_pip_file(indexes: Indexes, path: Path) -> None:
    text = _read_small(path)
    if text is None:
        return
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return

    def get(key: str) -> list[str]:
        for section in ("download", "global"):
            if parser.has_option(section, key):
                return _split(parser.get(section, key))
        return []

    _add(indexes, str(path), default=get("index-url")[:1], extra=get("extra-index-url"),
         links=get("find-links"))


def pip_default_index() -> str | None:
    """The index pip uses when none is configured, asked from the installed pip."""
    probe = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
    commands = [[sys.executable, "-c", probe]]
    pip = shutil.which("pip3") or shutil.which("pip")
    if pip:
        try:
            version = subprocess.run([pip, "--version"], capture_output=True, text=True,
                                     timeout=60, check=False).stdout
        except OSError:
            version = ""
        found = re.search(r" from (.+)[/\\]pip \(python", version)
        if found:
            commands.append([sys.executable, "-c",
                             f"import sys; sys.path.insert(0, {found.group(1)!r}); {probe}"])
    for command in commands:
        try:
            answer = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                    check=False)
        except OSError:
            continue
        url = answer.stdout.strip()
        if answer.returncode == 0 and "://" in url:
            return url
    return None


def configured_indexes(env: Mapping[str, str] | None = None) -> Indexes:
    """The indexes pip and uv are configured with in ``env`` (the process's by default)."""
    env = os.environ if env is None else env
    indexes = Indexes()
    _from_env(indexes, env)
    for path in uv_config_files(env):
        _from_uv_file(indexes, path)
    for path in pip_config_files(env):
        _from_pip_file(indexes, path)
    if not indexes.default:
        default = pip_default_index()
        if default:
            _add(indexes, "pip's default", default=[default])
    return indexes


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _read_bounded(handle: Any) -> bytes:
    data = handle.read(_MAX_PAGE_BYTES + 1)
    if len(data) > _MAX_PAGE_BYTES:
        raise ValueError(f"the project page is larger than {_MAX_PAGE_BYTES} bytes")
    return bytes(data)


def _project_links(index: str, project: str) -> list[tuple[str, str, str | None]]:
    """``(file name, URL, sha256 or None)`` of every file the index lists for ``project``."""
    page = index.rstrip("/") + f"/{project}/"
    parsed = urllib.parse.urlparse(page)
    if parsed.scheme == "file":
        folder = Path(urllib.request.url2pathname(parsed.path))
        if not (folder / "index.html").is_file():
            if not folder.is_dir():
                raise FileNotFoundError(f"{folder} is not a folder")
            return [(p.name, p.as_uri(), None) for p in sorted(folder.iterdir()) if p.is_file()]
        page = (folder / "index.html").as_uri()
    request = urllib.request.Request(page, headers={"Accept": _SIMPLE_ACCEPT})
    with urllib.request.urlopen(request, timeout=60) as answer:
        kind = answer.headers.get("Content-Type", "") if answer.headers else ""
        body = _read_bounded(answer)
        base = answer.geturl()
    links: list[tuple[str, str, str | None]] = []
    if "json" in kind:
        for entry in json.loads(body).get("files", []):
            url = urllib.parse.urljoin(base, entry["url"])
            links.append((entry["filename"], url, entry.get("hashes", {}).get("sha256")))
        return links
    anchors = _Anchors()
    anchors.feed(body.decode("utf-8", errors="replace"))
    for href in anchors.hrefs:
        url = urllib.parse.urljoin(base, href)
        clean, _, fragment = url.partition("#")
        name = urllib.parse.unquote(clean.rsplit("/", 1)[-1])
        digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else ""
        links.append((name, clean, digest or None))
    return links


def locate(indexes: Indexes, project: str, filename: str, sha256: str) -> tuple[str, list[str]]:
    """The URL of ``filename`` in the first place that holds it, and the reasons the places
    before it did not; RuntimeError naming every place tried when none does."""
    tried: list[str] = []
    for link in dict.fromkeys(indexes.find_links):
        folder = Path(urllib.request.url2pathname(urllib.parse.urlparse(link).path)) \
            if link.startswith("file:") else Path(link)
        if "://" in link and not link.startswith("file:"):
            continue  # a find-links page: the indexes are read instead
        if (folder / filename).is_file():
            return (folder / filename).as_uri(), tried
        tried.append(f"{link}: no {filename}")
    for index in indexes.urls():
        try:
            links = _project_links(index, project)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            tried.append(f"{index}: {exc}")
            continue
        found = [(url, digest) for name, url, digest in links if name == filename]
        if not found:
            tried.append(f"{index}: lists no {filename}")
            continue
        for url, digest in found:
            if digest is None or digest == sha256:
                return url, tried
        tried.append(f"{index}: {filename} has sha256 {found[0][1]}, pinned {sha256}")
    where = "; ".join(tried) if tried else "no package index is configured"
    raise RuntimeError(f"cannot find {filename} in any configured package index ({where})")
