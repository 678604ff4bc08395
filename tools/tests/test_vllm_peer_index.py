"""tools/vllm_peer_index.py and the peer-test tool's command line: the pinned sdist comes from the
index pip and uv are configured with (a local http simple index, a file index, uv.toml,
pip.conf), never an address in the repository; offline and bad folders are one error, exit 2."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import vllm_peer_index as index
import vllm_peer_sdist as sdist

TOOLS = Path(__file__).resolve().parent.parent
TOOL = TOOLS / "vllm_peer_tests.py"
MEMBERS = {"vllm-9.9.9/tests/conftest.py": b"# root conftest\n",
           "vllm-9.9.9/pyproject.toml": b"[tool.pytest.ini_options]\n"}
# Every setting of pip and uv that names an index or a configuration file.
INDEX_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
             "UV_CONFIG_FILE", "UV_NO_CONFIG", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
             "PIP_FIND_LINKS", "PIP_CONFIG_FILE")


def _tarball(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _isolated_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The process environment without pip's or uv's settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in INDEX_ENV}
    env.update({"PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1",
                "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    env.update(settings)
    return env


class _SimpleIndex(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index: ``/simple/vllm/`` lists the archive with a relative link and its
    sha256; the archive is served under ``/files/``."""

    archive = b""
    stated_sha256 = ""
    json_api = False  # answer PEP 691 JSON to a client that accepts it

    def do_GET(self) -> None:
        accepts_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
        if self.path == "/simple/vllm/" and self.json_api and accepts_json:
            hashes = {"sha256": self.stated_sha256} if self.stated_sha256 else {}
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": "vllm", "files": [
                {"filename": "vllm-9.9.9.tar.gz", "url": "/files/vllm-9.9.9.tar.gz",
                 "hashes": hashes}]}).encode()
            kind = "application/vnd.pypi.simple.v1+json"
        elif self.path == "/simple/vllm/":
            stated = f"#sha256={self.stated_sha256}" if self.stated_sha256 else ""
            body = (f'<html><body><a href="../../files/vllm-9.9.9.tar.gz{stated}">'
                    'vllm-9.9.9.tar.gz</a></body></html>').encode()
            kind = "text/html"
        elif self.path == "/files/vllm-9.9.9.tar.gz":
            body, kind = self.archive, "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_index() -> Iterator[tuple[str, type[_SimpleIndex]]]:
    handler = type("Handler", (_SimpleIndex,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", handler
    finally:
        server.shutdown()
        server.server_close()


def test_the_archive_comes_from_a_configured_http_simple_index(
    tmp_path: Path, http_index: tuple[str, type[_SimpleIndex]],
) -> None:
    url, handler = http_index
    handler.archive = _tarball(MEMBERS)
    handler.stated_sha256 = hashlib.sha256(handler.archive).hexdigest()
    pinned = sdist.Sdist("9.9.9", handler.stated_sha256)
    root = sdist.extracted_tests(pinned, tmp_path / "cache",
                                 _isolated_env(tmp_path, UV_DEFAULT_INDEX=url))
    assert (root / "tests" / "conftest.py").read_bytes() == b"# root conftest\n"
    assert sdist.sha256_of(tmp_path / "cache" / "vllm-9.9.9.tar.gz") == pinned.sha256


def test_the_archive_comes_from_a_pep691_json_index(
    tmp_path: Path, http_index: tuple[str, type[_SimpleIndex]],
) -> None:
    url, handler = http_index
    handler.archive = _tarball(MEMBERS)
    handler.stated_sha256 = hashlib.sha256(handler.archive).hexdigest()
    handler.json_api = True
    found = index.configured_indexes(_isolated_env(tmp_path, UV_INDEX_URL=url))
    located, tried = index.locate(found, "vllm", "vllm-9.9.9.tar.gz", handler.stated_sha256)
    assert (located, tried) == (url.replace("/simple", "/files/vllm-9.9.9.tar.gz"), [])
    root = sdist.extracted_tests(sdist.Sdist("9.9.9", handler.stated_sha256), tmp_path / "c",
                                 _isolated_env(tmp_path, UV_INDEX_URL=url))
    assert (root / "pyproject.toml").read_bytes() == b"[tool.pytest.ini_options]\n"


def test_an_index_stating_another_sha256_is_not_used(
    tmp_path: Path, http_index: tuple[str, type[_SimpleIndex]],
) -> None:
    url, handler = http_index
    handler.archive = _tarball(MEMBERS)
    handler.stated_sha256 = "f" * 64
    pinned = sdist.Sdist("9.9.9", hashlib.sha256(handler.archive).hexdigest())
    with pytest.raises(RuntimeError, match=rf"{url}: vllm-9\.9\.9\.tar\.gz has sha256 f{{64}}, "
                                           rf"pinned {pinned.sha256}"):
        sdist.extracted_tests(pinned, tmp_path / "cache",
                              _isolated_env(tmp_path, PIP_INDEX_URL=url))
    assert list((tmp_path / "cache").iterdir()) == []


def test_bytes_other_than_the_pin_are_refused_when_the_index_states_no_hash(
    tmp_path: Path, http_index: tuple[str, type[_SimpleIndex]],
) -> None:
    url, handler = http_index
    handler.archive = _tarball(MEMBERS)
    handler.stated_sha256 = ""  # the index states no hash: the downloaded bytes are checked
    pinned = sdist.Sdist("9.9.9", "0" * 64)
    with pytest.raises(RuntimeError, match=r"/files/vllm-9\.9\.9\.tar\.gz: sha256 [0-9a-f]{64}, "
                                           r"pinned 0{64}; not used"):
        sdist.extracted_tests(pinned, tmp_path / "cache",
                              _isolated_env(tmp_path, PIP_INDEX_URL=url))


def _file_index(root: Path, archive: bytes) -> str:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "vllm-9.9.9.tar.gz").write_bytes(archive)
    return root.as_uri()


def test_uv_toml_default_index_is_used_before_pip_conf(tmp_path: Path) -> None:
    archive = _tarball(MEMBERS)
    good = _file_index(tmp_path / "uv-index", archive)
    (tmp_path / "uv.toml").write_text(f'[[index]]\nurl = "{good}"\ndefault = true\n')
    (tmp_path / "pip.conf").write_text(
        f"[global]\nindex-url = {(tmp_path / 'empty').as_uri()}\n")
    env = _isolated_env(tmp_path, UV_CONFIG_FILE=str(tmp_path / "uv.toml"),
                        PIP_CONFIG_FILE=str(tmp_path / "pip.conf"))
    del env["UV_NO_CONFIG"]
    found = index.configured_indexes(env)
    assert found.default == [good] and found.urls() == [good]
    assert index.locate(found, "vllm", "vllm-9.9.9.tar.gz", "0" * 64)[0].endswith(
        "/uv-index/vllm/vllm-9.9.9.tar.gz")


def test_pip_conf_extra_index_is_tried_after_the_default(tmp_path: Path) -> None:
    archive = _tarball(MEMBERS)
    extra = _file_index(tmp_path / "extra", archive)
    empty = tmp_path / "empty"
    (empty / "vllm").mkdir(parents=True)
    (tmp_path / "pip.conf").write_text(
        f"[global]\nindex-url = {empty.as_uri()}\nextra-index-url = {extra}\n")
    env = _isolated_env(tmp_path, PIP_CONFIG_FILE=str(tmp_path / "pip.conf"))
    pinned = sdist.Sdist("9.9.9", hashlib.sha256(archive).hexdigest())
    url, tried = index.locate(index.configured_indexes(env), "vllm", pinned.filename,
                              pinned.sha256)
    assert url == (tmp_path / "extra" / "vllm" / "vllm-9.9.9.tar.gz").as_uri()
    assert tried == [f"{empty.as_uri()}: lists no vllm-9.9.9.tar.gz"]


def test_the_environment_wins_over_configuration_files(tmp_path: Path) -> None:
    (tmp_path / "pip.conf").write_text("[global]\nindex-url = file:///from/the/file\n")
    env = _isolated_env(tmp_path, PIP_CONFIG_FILE=str(tmp_path / "pip.conf"),
                        UV_INDEX="mirror=file:///named/mirror",
                        PIP_INDEX_URL="file:///from/pip/env")
    found = index.configured_indexes(env)
    assert found.default == ["file:///from/pip/env"]
    assert found.urls() == ["file:///from/pip/env", "file:///named/mirror"]


def test_with_nothing_configured_pip_s_own_default_is_asked() -> None:
    # The default comes from the installed pip, whatever it is; never from this repository.
    default = index.pip_default_index()
    assert default is not None and default.startswith("https://") and "/simple" in default


def test_no_index_address_is_written_in_the_tools() -> None:
    for path in TOOLS.glob("vllm_peer*.py"):
        text = path.read_text()
        assert re.findall(r"https?://\S+", text) == [], path


def _tool(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = _isolated_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg-cache"), **settings)
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)


def test_offline_the_tool_exits_2_with_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a local port nothing listens on: offline
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _tool(tmp_path, "--fast", PIP_INDEX_URL=f"http://127.0.0.1:{port}/simple")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: vLLM 0.32.0's tests are not available: cannot find "
                           "vllm-0.32.0.tar.gz in any configured package index "
                           f"(http://127.0.0.1:{port}/simple: ")
    assert line.endswith(f"or put the archive (sha256 {sdist.VLLM_0_32_0.sha256}) in "
                         f"{tmp_path / 'xdg-cache' / 'vllm-ascend' / 'peer-tests'}")


@pytest.mark.parametrize("option", ["--cache", "--keep"])
def test_a_folder_option_naming_a_file_is_one_usage_error(tmp_path: Path, option: str) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    result = _tool(tmp_path, "--fast", option, str(tmp_path / "a-file"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        f"error: {option} {tmp_path / 'a-file'} is not a folder; give a folder (made when "
        "missing)")
