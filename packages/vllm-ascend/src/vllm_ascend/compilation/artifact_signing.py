"""A per-user key that signs compile-cache artifacts, so a planted file cannot pass as ours.

The fused graph in an artifact is a pickle (see ``ascend_graph.dumps_fused_graph``), and
unpickling runs code. Its sha256 header only catches damage: anyone can compute it. So every
artifact ``AscendCompiler`` writes is prefixed with an HMAC-SHA256 of its bytes under a random
32-byte key kept in ``<VLLM_CACHE_ROOT>/ascend/artifact.key`` (mode 0600, in a directory only
this user can write), and nothing is unpickled before that HMAC checks out.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import tempfile
from pathlib import Path

from vllm_ascend.runtime.trusted_paths import (
    UntrustedPathError,
    make_private_dir,
    read_trusted_file,
)

MAGIC = b"ascend-signed-artifact v1\n"
KEY_FILE = "artifact.key"
KEY_BYTES = 32


class ArtifactSignatureError(ValueError):
    """Artifact bytes that do not carry a valid signature of this user's key."""


class ArtifactSigner:
    """Signs and verifies artifact bytes with one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"an artifact key has {KEY_BYTES} bytes, got {len(key)}")
        self._key = key

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest().encode()

    def sign(self, payload: bytes) -> bytes:
        return MAGIC + self._mac(payload) + b"\n" + payload

    def verify(self, data: bytes) -> bytes:
        """The payload of signed ``data``; :class:`ArtifactSignatureError` when it is not."""
        if not data.startswith(MAGIC):
            raise ArtifactSignatureError("not signed by vllm-ascend")
        mac, sep, payload = data[len(MAGIC):].partition(b"\n")
        if not sep or not hmac.compare_digest(mac, self._mac(payload)):
            raise ArtifactSignatureError("signature does not match this user's key")
        return payload


def key_dir(cache_root: str | os.PathLike[str]) -> Path:
    return Path(cache_root) / "ascend"


def load_signer(cache_root: str | os.PathLike[str]) -> ArtifactSigner:
    """The signer of this user's key under ``cache_root`` (created on first use).

    Raises :class:`UntrustedPathError` (an OSError) when the key or its directory could have
    been written by someone else, or OSError when it cannot be created.
    """
    directory = make_private_dir(key_dir(cache_root))
    path = directory / KEY_FILE
    if not os.path.lexists(path):
        # Write a complete key under a temporary name, then link it into place: concurrent
        # first starts agree on one key and never read a partial file.
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{KEY_FILE}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(KEY_BYTES))
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    key = read_trusted_file(path, limit=KEY_BYTES)
    if len(key) != KEY_BYTES:
        raise UntrustedPathError(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key; "
                                 "delete it to make a new one")
    return ArtifactSigner(key)
