"""The plugin's one trust policy for files (the package README, "Trust and files").

Threat: another local user who can write a directory the plugin reads from, or a symlink on the
way to it, can plant files the plugin (or vLLM, from the same cache root) would load or
overwrite. So:

- A *root* the plugin is given (``VLLM_CACHE_ROOT``, ``XDG_CACHE_HOME``, the Ascend log path, a
  compile-cache dir) is trusted when it is a directory owned by this user, not writable by group
  or others, and no symlink on the way to it is owned by anyone but this user or root. Every
  component is inspected with ``lstat``, never followed by the kernel; a symlink that passes is
  resolved and its target walked by the same rule. Missing components are created 0700.
- :class:`TrustedRoots` checks each root once per process; a refused root gets one warning and
  a private directory (0700) in this user's own cache instead (``$HOME/.cache``, or a fresh
  temporary directory when that is refused too). ``VLLM_CACHE_ROOT`` is redirected the same way
  before vLLM reads it (:meth:`TrustedRoots.secure_vllm_cache_root`), so vLLM's own artifacts
  are protected too.
- Inside a trusted root only this user writes, so entries need no ownership checks: files are
  written atomically (:func:`write_atomic`) and read with a size bound, refusing symlinks and
  special files (:func:`read_bounded_file`). Damage is caught by checksums where the entries
  are defined (``compilation.compile_cache``, ``checkpoints.cache_entry``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path

logger = logging.getLogger("vllm_ascend.runtime.trusted_paths")

MAX_READ_BYTES = 1 << 30
_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup


class UntrustedPathError(OSError):
    """A path or file the policy refuses; the message says which part and why."""


def _walk(path: Path, *, create: bool) -> tuple[Path, os.stat_result]:
    """``lstat`` every component of the absolute ``path`` from ``/`` down without letting the
    kernel follow a link; a symlink is followed (its target walked the same way) only when this
    user or root owns it. Missing components are made (0700) when ``create``. Returns the real
    path reached and its ``lstat``."""
    euid = os.geteuid()
    current = Path("/")
    pending = list(reversed(path.parts[1:]))
    links = 0
    while pending:
        name = pending.pop()
        candidate = current.parent if name == ".." else current / name
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile: inspected below
                os.mkdir(candidate, 0o700)
            st = os.lstat(candidate)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (euid, 0):
                raise UntrustedPathError(
                    f"{candidate} is a symlink owned by uid {st.st_uid}, not by this user "
                    f"(uid {euid}) or root")
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
            target = Path(os.readlink(candidate))
            pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
            if target.is_absolute():
                current = Path("/")
            continue
        if pending and not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(candidate))
        current = candidate
    return current, os.lstat(current)


def _checked(path: Path, *, create: bool) -> Path:
    _, st = _walk(Path(os.path.abspath(path)), create=create)
    euid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedPathError(f"{path} is not a directory")
    if st.st_uid != euid:
        raise UntrustedPathError(f"{path} is owned by uid {st.st_uid}, not by this user "
                                 f"(uid {euid})")
    if st.st_mode & 0o022:
        raise UntrustedPathError(f"{path} is writable by group or others "
                                 f"(mode {stat.S_IMODE(st.st_mode):o})")
    return Path(os.path.abspath(path))


def check_trusted_dir(directory: str | os.PathLike[str]) -> Path:
    """``directory`` (absolute) when it passes the root rule; :class:`UntrustedPathError`
    saying why not (OSError, e.g. FileNotFoundError, when it cannot be inspected)."""
    return _checked(Path(directory), create=False)


def make_private_dir(directory: str | os.PathLike[str]) -> Path:
    """:func:`check_trusted_dir` after creating what is missing (mode 0700, one component at a
    time, so nothing is made behind another user's symlink)."""
    return _checked(Path(directory), create=True)


def read_bounded_file(path: str | os.PathLike[str], limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; a symlink, a special
    file (opened without blocking, never read) or a longer file is an
    :class:`UntrustedPathError`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedPathError(f"{path} is a symlink") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPathError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise UntrustedPathError(f"{path} is {st.st_size} bytes, over the {limit}-byte limit")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UntrustedPathError(f"{path} grew over the {limit}-byte limit while read")
    return data


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) so that readers see the old file or the new one,
    never a partial write: a temporary file in the same directory, then ``os.replace``."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class TrustedRoots:
    """The roots this process was given, each checked once (held by the process setup)."""

    def __init__(self) -> None:
        self._chosen: dict[tuple[Path, str], Path] = {}

    def root(self, wanted: str | os.PathLike[str], what: str,
             environ: Mapping[str, str] | None = None) -> Path:
        """``wanted`` (created 0700 when missing) when it passes the root rule; otherwise, with
        one warning naming ``what`` and why, the private fallback for ``what``."""
        key = (Path(os.path.abspath(os.path.expanduser(wanted))), what)
        if key not in self._chosen:
            try:
                chosen = make_private_dir(key[0])
            except OSError as exc:
                chosen = private_fallback(what, environ)
                logger.warning("not using %s %s (%s); using the private directory %s instead",
                               what, key[0], exc, chosen)
            self._chosen[key] = chosen
        return self._chosen[key]

    def secure_vllm_cache_root(self, environ: MutableMapping[str, str] | None = None) -> Path:
        """Check vLLM's cache root as vLLM computes it (``VLLM_CACHE_ROOT``, else
        ``XDG_CACHE_HOME/vllm``, else ``~/.cache/vllm``) and point ``VLLM_CACHE_ROOT`` at the
        private fallback when it, or the ``XDG_CACHE_HOME`` it lies in, is refused. Call it
        before vLLM reads the variable (the platform plugin's ``register``)."""
        env = os.environ if environ is None else environ
        xdg = env.get("XDG_CACHE_HOME")
        if env.get("VLLM_CACHE_ROOT"):
            wanted = vllm_reads = Path(os.path.expanduser(env["VLLM_CACHE_ROOT"]))
        else:
            base = self.root(xdg, "XDG_CACHE_HOME", env) if xdg else _own_cache(env)
            wanted = base / "vllm"
            vllm_reads = (Path(os.path.expanduser(xdg)) if xdg else _own_cache(env)) / "vllm"
        chosen = self.root(wanted, "VLLM_CACHE_ROOT", env)
        if chosen != Path(os.path.abspath(vllm_reads)):
            env["VLLM_CACHE_ROOT"] = str(chosen)
        return chosen


def _own_cache(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home()) / ".cache"


def private_fallback(what: str, environ: Mapping[str, str] | None = None) -> Path:
    """The private directory used instead of a refused ``what``:
    ``$HOME/.cache/vllm_ascend/private/<what>`` (0700) when ``$HOME/.cache`` passes the root
    rule, else a fresh temporary directory (``mkdtemp``, 0700)."""
    env = os.environ if environ is None else environ
    try:
        make_private_dir(_own_cache(env))
        return make_private_dir(_own_cache(env) / "vllm_ascend" / "private" / what)
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"vllm-ascend-{what}-"))
