"""``probe_failure`` and ``failure_line``: observing, in one line, whether an interpreter runs a call."""

from __future__ import annotations

import logging

from kernels.runtime.tpu_interpret import FAILURE_LINE_CHARS, failure_line, probe_failure

# What JAX's io_callback raises when the TPU interpreter fails inside it (shortened, 0.12.0.1).
CALLBACK_ERROR = (
    "INTERNAL: CpuCallback error calling callback: Traceback (most recent call last):\n"
    '  File ".../jax/_src/callback.py", line 829, in _wrapped_callback\n'
    '  File ".../interpret_pallas_call.py", line 1050, in to_range\n'
    "AttributeError: 'ReshapeTransform' object has no attribute 'indices'\n"
)


def test_a_callback_failure_is_named_by_its_tracebacks_last_line():
    line = failure_line(RuntimeError(CALLBACK_ERROR))
    assert line.startswith("AttributeError: 'ReshapeTransform' object has no attribute 'indices'")
    assert "RuntimeError" in line and "\n" not in line


def test_any_other_error_is_its_type_and_first_line_cut_to_one_readable_line():
    assert failure_line(ValueError("bad block\nmore")) == "ValueError: bad block"
    assert failure_line(KeyError()) == "KeyError"
    long = failure_line(ValueError("x" * 1000))
    assert len(long) == FAILURE_LINE_CHARS and long.endswith("…")


def test_a_call_that_runs_is_none_and_one_that_raises_is_its_line_with_the_callback_log_held_back(caplog):
    assert probe_failure(lambda: 1) is None

    def failing() -> None:
        logging.getLogger("jax._src.callback").error("jax.io_callback failed")
        raise RuntimeError(CALLBACK_ERROR)

    with caplog.at_level(logging.ERROR):
        assert probe_failure(failing).startswith("AttributeError: 'ReshapeTransform'")
        logging.getLogger("jax._src.callback").error("after the probe")
    assert [r.getMessage() for r in caplog.records] == ["after the probe"]  # held back only during it
