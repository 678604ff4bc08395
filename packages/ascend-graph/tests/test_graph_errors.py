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
    ],
)
def test_stream_exhaustion_is_recognised(message, translated) -> None:
    result = translate_capture_error(RuntimeError(message))
    assert (result is not None) == translated
    if translated:
        assert isinstance(result, GraphCaptureError) and "207008" in str(result)
