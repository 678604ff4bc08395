"""Logging: prefixes, colour rules, the rotating per-process file handler, the fallback."""

from __future__ import annotations

import datetime as dt
import io
import logging
import os
import re

import pytest
from vllm_ascend.base.trusted_roots import TrustedRoots
from vllm_ascend.observability import logging_setup as ls


def _detach_all() -> None:
    ls.remove_file_logging()
    logger = logging.getLogger(ls.LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _clean_loggers():
    _detach_all()
    yield
    _detach_all()


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/x/vllm_ascend/platform.py", True), ("C:\\x\\vllm_ascend\\a.py", True),
     ("/x/vllm/model.py", False), ("", False), (None, False)],
)
def test_is_ascend_path(path, expected) -> None:
    assert ls.is_ascend_path(path) is expected


@pytest.mark.parametrize(
    ("path", "module"),
    [("/vllm_ascend/platform.py", "platform"),
     ("/vllm_ascend/compilation/acl_graph.py", "compilation"),
     ("/vllm/model.py", "core"), ("", "core"), ("/a/vllm_ascend", "core"),
     ("/a/vllm_ascend/config_pipeline/steps.py", "config_pipeline")],
)
def test_infer_module(path, module) -> None:
    assert ls.infer_module(path) == module


def _record(path: str, msg: str = "hello %s", args: tuple = ("world",)) -> logging.LogRecord:
    return logging.LogRecord("x", logging.INFO, path, 7, msg, args, None)


def test_prefix_root_nested_and_pass_through() -> None:
    fmt = ls.AscendFormatter()
    root = fmt.format(_record("/s/vllm_ascend/demo.py"))
    nested = fmt.format(_record("/s/vllm_ascend/config_pipeline/steps.py"))
    other = fmt.format(_record("/s/vllm/config/vllm.py"))
    assert root.endswith("[demo.py:7] [vllm-ascend] - hello world")
    assert nested.endswith("[steps.py:7] [vllm-ascend] [config_pipeline] - hello world")
    assert other.endswith("[vllm.py:7] hello world")
    assert re.match(r"INFO \d\d-\d\d \d\d:\d\d:\d\d ", root)


def test_record_is_restored_for_other_handlers() -> None:
    record = _record("/s/vllm_ascend/plugin_hooks.py")
    ls.AscendFormatter().format(record)
    assert record.msg == "hello %s" and record.args == ("world",)


def test_coloured_formatter_keeps_the_prefix() -> None:
    text = ls.AscendFormatter(colour=True).format(_record("/s/vllm_ascend/plugin_hooks.py"))
    assert text.startswith("\033[32m") and text.endswith("\033[0m")
    assert "[vllm-ascend] - hello world" in text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("env", "stream", "colour"),
    [({"NO_COLOR": ""}, _Tty(), False), ({"VLLM_LOGGING_COLOR": "0"}, _Tty(), False),
     ({"VLLM_LOGGING_COLOR": "1"}, io.StringIO(), True), ({}, _Tty(), True),
     ({}, io.StringIO(), False), ({}, None, False)],
)
def test_colour_rules(env, stream, colour) -> None:
    assert ls.use_colour(env, stream) is colour


def test_console_handler_is_idempotent() -> None:
    stream = io.StringIO()
    logger = ls.configure_console_logging({"VLLM_LOGGING_LEVEL": "DEBUG"}, stream)
    ls.configure_console_logging({}, stream)
    consoles = [h for h in logger.handlers if isinstance(h, ls._ConsoleHandler)]
    assert len(consoles) == 1 and logger.level == logging.DEBUG
    assert logger.propagate is False


def test_rotation_keeps_at_most_max_files(tmp_path) -> None:
    now = dt.datetime(2026, 1, 2, 3, 4, 5)
    handler = ls.RotatingAscendFileHandler(tmp_path, max_bytes=100, max_files=3, now=now, pid=42)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for i in range(12):
        handler.emit(_record("/x.py", "line %s " + "x" * 60, (i,)))
    handler.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    # about 70 bytes a line: one line per file (two would pass 100 bytes), the last three kept
    base = "vllm_ascend_20260102_030405_42.log"
    assert names == [base, f"{base}.1", f"{base}.2"]
    kept = "".join((tmp_path / n).read_text() for n in reversed(names))  # oldest first
    assert [int(m) for m in re.findall(r"line (\d+)", kept)] == [9, 10, 11]
    assert all((tmp_path / n).stat().st_size <= 100 for n in names)


def test_handler_keeps_logging_after_dictconfig_closed_it(tmp_path) -> None:
    # vLLM (re)configures logging with dictConfig, which closes every existing handler while
    # ours stays attached: the next record must still reach the file, with no error.
    import logging.config

    handler = ls.configure_file_logging(tmp_path, environ={})
    assert handler is not None
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    logging.getLogger(ls.LOGGER_NAME).warning("after reconfiguration")
    text = "".join(p.read_text() for p in tmp_path.iterdir())
    assert "after reconfiguration" in text


def test_handler_rejects_bad_limits(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_files=0"):
        ls.RotatingAscendFileHandler(tmp_path, max_files=0)


def test_file_logging_attaches_once_and_moves_with_the_dir(tmp_path) -> None:
    first = ls.configure_file_logging(tmp_path / "a" / "b", environ={})
    again = ls.configure_file_logging(tmp_path / "a" / "b", environ={})
    assert first is again and first is not None
    assert first.current_path.name.startswith("vllm_ascend_") and str(os.getpid()) in (
        first.current_path.name)
    vllm_handlers = [h for h in logging.getLogger("vllm").handlers
                     if isinstance(h, ls.RotatingAscendFileHandler)]
    assert vllm_handlers == [first]
    logging.getLogger("vllm_ascend.x").warning("to the file")
    assert "to the file" in first.current_path.read_text()
    moved = ls.configure_file_logging(tmp_path / "c", environ={})
    assert moved is not first and moved.log_dir == tmp_path / "c"
    assert [h for h in logging.getLogger(ls.LOGGER_NAME).handlers
            if isinstance(h, ls.RotatingAscendFileHandler)] == [moved]


def test_an_unusable_dir_is_replaced_by_the_private_fallback_with_one_warning(
    tmp_path, capsys
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    ls.configure_console_logging({})
    env = {"HOME": str(tmp_path / "home")}
    roots = TrustedRoots()  # the process's, as its owner passes it
    handler = ls.configure_file_logging(blocker / "logs", environ=env, roots=roots)
    assert handler is not None
    assert handler.log_dir == tmp_path / "home/.cache/vllm_ascend/private/ascend_log_path"
    assert ls.configure_file_logging(blocker / "logs", environ=env, roots=roots) is handler
    err = capsys.readouterr().err
    assert err.count("not using ascend_log_path") == 1 and "Not a directory" in err
    assert "[vllm-ascend] [base] - not using ascend_log_path" in err


def test_default_dir_is_under_home() -> None:
    assert ls.default_log_dir({"HOME": "/h"}) == ls.Path("/h/ascend/log/vllm_ascend")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another uid needs root")
def test_a_log_dir_reached_by_dotdot_through_another_users_link_is_replaced(
    tmp_path, capsys
) -> None:
    # <their link>/../logs: the text collapses to <tmp>/logs, the kernel opens the folder
    # above the link's target (theirs).
    theirs = tmp_path / "theirs"
    (theirs / "deep").mkdir(parents=True)
    os.chown(theirs, 12345, 12345)
    link = tmp_path / "link"
    link.symlink_to(theirs / "deep")
    os.lchown(link, 12345, 12345)
    ls.configure_console_logging({})
    env = {"HOME": str(tmp_path / "home")}
    handler = ls.configure_file_logging(f"{link}/../logs", environ=env, roots=TrustedRoots())
    assert handler is not None
    assert handler.log_dir == tmp_path / "home/.cache/vllm_ascend/private/ascend_log_path"
    assert f"{link} is a symlink owned by uid 12345" in capsys.readouterr().err
    assert sorted(p.name for p in theirs.iterdir()) == ["deep"]
