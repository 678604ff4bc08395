"""translate_capture_error: which capture failures become a GraphCaptureError naming the cause."""

from __future__ import annotations

import pytest
from ascend_graph import (
    GraphCaptureError,
    translate_capture_error,
)


@pytest.mark.parametrize(
    ("message", "translated"),
    [
        ("The stream resources are insufficient", True),
        ("error 207008 while creating a stream", True),
        ("error 207008", False),  # the code alone, without streams: something else
        ("stream destroyed", False),
        ("error code 207005: no space left on device", True),  # the misleading text
        ("error code 207005", False),
    ],
)
def test_stream_exhaustion_is_recognised(message, translated) -> None:
    result = translate_capture_error(RuntimeError(message))
    assert (result is not None) == translated
    if translated:
        assert isinstance(result, GraphCaptureError) and "207008" in str(result)


def test_an_operation_not_allowed_in_capture_names_the_host_read() -> None:
    result = translate_capture_error(RuntimeError(
        "aten._local_scalar_dense.default reads npu memory on the host during NPU graph "
        "capture: operation not allowed in capture"))
    assert isinstance(result, GraphCaptureError)
    assert ".item()" in str(result) and "enforce_eager=True" in str(result)
    assert translate_capture_error(RuntimeError("allowed in capture")) is None
