"""The roots a process is given, the home they lie in, and the fallback for a refused one."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from vllm_ascend.base.trusted_paths import UntrustedPathError, absolute, make_private_dir

logger = logging.getLogger(__name__)

# The bytecode folder in the own cache (``PYTHONPYCACHEPREFIX`` of the processes the plugin
# sets up, unless the user gave one).
PYCACHE_DIR = "vllm-ascend-pycache"


def home_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """This user's home (``HOME``, else passwd); None when there is neither."""
    env = os.environ if environ is None else environ
    if env.get("HOME"):
        return env["HOME"]
    try:
        return pwd.getpwuid(os.getuid()).pw_dir or None
    except KeyError:
        return None


def no_home_dir() -> Path:
    """The stand-in home when there is none: ``<tmp>/vllm-ascend-<uid>/home``."""
    return Path(tempfile.gettempdir()) / f"vllm-ascend-{os.geteuid()}" / "home"


def own_home(environ: Mapping[str, str] | None = None) -> Path:
    """:func:`home_dir`, else the stand-in :func:`no_home_dir` (not checked here)."""
    home = home_dir(environ)
    return Path(home) if home else no_home_dir()


def own_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This user's own cache: ``.cache`` in :func:`own_home`."""
    return own_home(environ) / ".cache"


def expand_home(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path:
    """``path`` with a leading ``~`` replaced by :func:`own_home` (``~user`` as expanduser does)."""
    text = os.fspath(path)
    if text == "~" or text.startswith("~/"):
        return Path(str(own_home(environ)) + text[1:])
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        raise UntrustedPathError(f"{text} names a home directory that does not exist")
    return Path(expanded)


def _names_home(path: str | os.PathLike[str]) -> bool:
    text = os.fspath(path)
    return text == "~" or text.startswith("~/")


class TrustedRoots:
    """The roots this process was given, checked on every ask; a refused one gets a fallback."""

    def __init__(self) -> None:
        self._fallbacks: dict[tuple[str, str], Path] = {}
        self._warned_no_home = False
        self._warned_bytecode: set[str] = set()

    def root(self, wanted: str | os.PathLike[str], what: str,
             environ: Mapping[str, str] | None = None) -> Path:
        """``wanted`` (created 0700) when it passes the root rule now, else the private fallback for
        ``what``."""
        key = (os.fspath(wanted), what)
        if _names_home(wanted):
            self.note_no_home(environ)
        try:
            return make_private_dir(expand_home(wanted, environ))
        except OSError as exc:
            refused = exc
        chosen = self._fallbacks.get(key)
        if chosen is not None:
            with contextlib.suppress(OSError):
                return make_private_dir(chosen)
        chosen = self._fallbacks[key] = private_fallback(what, own_cache=self.own_cache(environ))
        shown = key[0] if key[0].startswith("~") else absolute(key[0])
        logger.warning("not using %s %s (%s); using the private directory %s instead",
                       what, shown, refused, chosen)
        return chosen

    def own_cache(self, environ: Mapping[str, str] | None = None) -> Path:
        """:func:`own_cache_dir` (see :meth:`note_no_home`)."""
        self.note_no_home(environ)
        return own_cache_dir(environ)

    def note_no_home(self, environ: Mapping[str, str] | None = None) -> None:
        """One warning per process the first time the stand-in home is needed."""
        if home_dir(environ) is None and not self._warned_no_home:
            self._warned_no_home = True
            logger.warning("no home directory (HOME is unset and uid %d has no passwd entry): "
                           "using %s instead (caches and logs go there)", os.getuid(),
                           no_home_dir())

    def bytecode_prefix(self, environ: Mapping[str, str] | None = None) -> Path | None:
        """The trusted folder for Python's bytecode, its private fallback, or None (no prefix)."""
        # Python runs a .pyc found there in place of its source: it must pass the root rule.
        env = os.environ if environ is None else environ
        wanted = env.get("PYTHONPYCACHEPREFIX") or self.own_cache(env) / PYCACHE_DIR
        try:
            return make_private_dir(wanted)
        except OSError as exc:
            refused = exc
        chosen: Path | None
        try:
            make_private_dir(self.own_cache(env))
            chosen = make_private_dir(self.own_cache(env) / "vllm_ascend" / "private"
                                      / "PYTHONPYCACHEPREFIX")
        except OSError:
            chosen = None
        if os.fspath(wanted) not in self._warned_bytecode:
            self._warned_bytecode.add(os.fspath(wanted))
            instead = (f"the private directory {chosen}" if chosen is not None
                       else "no prefix (bytecode beside the sources)")
            logger.warning("not using the bytecode folder %s (%s); using %s instead",
                           absolute(wanted), refused, instead)
        return chosen

    def secure_vllm_cache_root(self, environ: MutableMapping[str, str] | None = None) -> Path:
        """Point ``VLLM_CACHE_ROOT`` at the private fallback when vLLM's cache root is refused."""
        env = os.environ if environ is None else environ
        xdg = env.get("XDG_CACHE_HOME")
        vllm_reads: Path | None  # what vLLM opens, ``..`` left to the kernel as vLLM leaves it
        if env.get("VLLM_CACHE_ROOT"):
            wanted: str | Path = env["VLLM_CACHE_ROOT"]
            vllm_reads = absolute(os.path.expanduser(env["VLLM_CACHE_ROOT"]))
        else:
            base = self.root(xdg, "XDG_CACHE_HOME", env) if xdg else self.own_cache(env)
            wanted = base / "vllm"
            home = home_dir(env)
            vllm_reads = (Path(os.path.expanduser(xdg)) / "vllm" if xdg
                          else Path(home) / ".cache" / "vllm" if home else None)
        chosen = self.root(wanted, "VLLM_CACHE_ROOT", env)
        # A root holding ``..`` comes back as the folder the check reached: exported, so
        # vLLM opens that folder however it treats ``..``.
        if vllm_reads is None or chosen != absolute(vllm_reads):
            env["VLLM_CACHE_ROOT"] = str(chosen)
        return chosen


def private_fallback(what: str, environ: Mapping[str, str] | None = None, *,
                     own_cache: Path | None = None) -> Path:
    """``<own cache>/vllm_ascend/private/<what>``, else ``mkdtemp``; else UntrustedPathError."""
    base = own_cache_dir(environ) if own_cache is None else own_cache
    try:
        make_private_dir(base)
        return make_private_dir(base / "vllm_ascend" / "private" / what)
    except OSError:
        return make_private_dir(tempfile.mkdtemp(prefix=f"vllm-ascend-{what}-"))
