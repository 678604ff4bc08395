"""tools/vllm_peer_report.py: outcomes read from the JUnit XML pytest itself writes, and the
stock-vs-plugin comparison."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import vllm_peer_report as report

SAMPLE = textwrap.dedent("""
    import pytest

    @pytest.fixture
    def broken():
        raise RuntimeError("setup fails")

    @pytest.fixture
    def bad_teardown():
        yield
        raise RuntimeError("teardown fails")

    def test_ok():
        pass

    def test_fails():
        assert 1 == 2

    def test_setup_error(broken):
        pass

    def test_fails_then_teardown_error(bad_teardown):
        assert False

    def test_skipped():
        pytest.skip("no")

    @pytest.mark.xfail(reason="known")
    def test_xfail():
        assert False

    @pytest.mark.parametrize("n", [1, 2])
    def test_param(n):
        assert n == 1

    class TestGroup:
        def test_in_class(self):
            pass
""")


@pytest.fixture(scope="module")
def junit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """A real pytest run over a package with one good and one unimportable test file."""
    root = tmp_path_factory.mktemp("run")
    pkg = root / "tests" / "sub"
    pkg.mkdir(parents=True)
    for folder in (root / "tests", pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "test_sample.py").write_text(SAMPLE)
    (pkg / "test_sample_broken.py").write_text("import no_such_module_here\n")
    files = ["tests/sub/test_sample.py", "tests/sub/test_sample_broken.py"]
    xml = root / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider",
                    "--continue-on-collection-errors", f"--junitxml={xml}"],
                   cwd=root, capture_output=True, check=False, timeout=120)
    return xml.read_text(), files


def test_parse_junit_gives_each_test_pytest_s_outcome(junit_run: tuple[str, list[str]]) -> None:
    xml, files = junit_run
    f = "tests/sub/test_sample.py"
    assert report.parse_junit(xml, files) == {
        f"{f}::test_ok": "passed",
        f"{f}::test_fails": "failed",
        f"{f}::test_setup_error": "error",
        f"{f}::test_fails_then_teardown_error": "error",  # the worst of its two reports
        f"{f}::test_skipped": "skipped",
        f"{f}::test_xfail": "skipped",
        f"{f}::test_param[1]": "passed",
        f"{f}::test_param[2]": "failed",
        f"{f}::TestGroup::test_in_class": "passed",
        "tests/sub/test_sample_broken.py::<collection>": "error",
    }


def test_parse_junit_refuses_a_case_outside_the_run_s_files(
    junit_run: tuple[str, list[str]],
) -> None:
    xml, _ = junit_run
    with pytest.raises(ValueError, match="in none of the run's files"):
        report.parse_junit(xml, ["tests/sub/test_sample.py"])


def test_parse_junit_refuses_text_that_is_not_xml() -> None:
    with pytest.raises(ValueError, match="not a JUnit XML report"):
        report.parse_junit("collected 3 items", ["tests/test_x.py"])


def test_file_of_matches_whole_module_names_only() -> None:
    files = ["tests/test_config.py", "tests/compile/test_config.py", "tests/test_config_x.py"]
    assert report.file_of("tests.test_config", files) == "tests/test_config.py"
    assert report.file_of("tests.test_config.TestA", files) == "tests/test_config.py"
    assert report.file_of("tests.compile.test_config", files) == "tests/compile/test_config.py"
    assert report.file_of("tests.test_config_x", files) == "tests/test_config_x.py"
    assert report.file_of("tests.test_conf", files) is None


def test_module_of_needs_a_python_file() -> None:
    assert report.module_of("tests/v1/core/test_a.py") == "tests.v1.core.test_a"
    with pytest.raises(ValueError, match=r"not a \.py file"):
        report.module_of("tests/v1/core")


def test_compare_counts_only_a_plugin_that_does_worse_than_stock_passing() -> None:
    stock = {"a::ok": "passed", "a::gone": "passed", "a::skip": "passed", "a::fixed": "failed",
             "a::same": "failed", "a::err": "error"}
    plugin = {"a::ok": "passed", "a::skip": "skipped", "a::fixed": "passed", "a::same": "failed",
              "a::err": "failed", "a::new": "failed"}
    diffs = report.compare(stock, plugin)
    assert [(d.test_id, d.stock, d.plugin, d.regression) for d in diffs] == [
        ("a::err", "error", "failed", False),
        ("a::fixed", "failed", "passed", False),
        ("a::gone", "passed", "missing", True),
        ("a::new", "missing", "failed", False),
        ("a::skip", "passed", "skipped", True),
    ]
    assert report.compare(stock, dict(stock)) == []


def test_format_table_counts_each_file_and_the_total() -> None:
    stock = {"t/a.py::x": "passed", "t/a.py::y": "passed", "t/b.py::z": "skipped"}
    plugin = {"t/a.py::x": "passed", "t/a.py::y": "failed", "t/b.py::z": "skipped"}
    lines = report.format_table(["t/a.py", "t/b.py"], stock, plugin).splitlines()
    assert lines[0].split() == ["test", "file", "stock", "p/f/e/s", "plugin", "p/f/e/s", "diff"]
    assert lines[1].split() == ["t/a.py", "2/0/0/0", "1/1/0/0", "1"]
    assert lines[2].split() == ["t/b.py", "0/0/0/1", "0/0/0/1", "0"]
    assert lines[3].split() == ["total", "2/0/0/1", "1/1/0/1", "1"]


def test_read_junit_reads_the_file(tmp_path: Path, junit_run: tuple[str, list[str]]) -> None:
    xml, files = junit_run
    (tmp_path / "r.xml").write_text(xml)
    assert report.read_junit(tmp_path / "r.xml", files) == report.parse_junit(xml, files)
