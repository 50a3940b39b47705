"""The plug-in examples run as written: the README's dotted-path function, and the adapter class
of docs/adapters.md ("Plugging in your own")."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kernels.registry import resolve
from reference.spec import AttentionSpec
from tests.kernels.cases import check_forward, make_inputs

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Plugging in your own implementation"
ADAPTERS = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
ADAPTER_SECTION = "## Plugging in your own"


def _python_blocks(path: Path, heading: str) -> list[str]:
    text = path.read_text()
    assert heading + "\n" in text, f"{path.name} lost its section {heading!r}"
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def examples(tmp_path, monkeypatch):
    (function_code,) = _python_blocks(README, SECTION)
    (adapter_code,) = _python_blocks(ADAPTERS, ADAPTER_SECTION)
    package = tmp_path / "readme_examples"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "attn.py").write_text(function_code)
    # The adapter example leaves my_attention to the reader; identity is enough to run it.
    stub = "def my_attention(inputs, spec):\n    return inputs.q\n\n"
    (package / "adapter.py").write_text(stub + adapter_code)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m.startswith("readme_examples")]:
        del sys.modules[name]


def test_function_example_matches_reference(examples):
    adapter = resolve("readme_examples.attn:attention")
    check_forward(adapter, make_inputs(0, 1, 2, 2, 8, 8, 4), AttentionSpec(causal=True), "float32")


def test_adapter_example_resolves_and_runs(examples):
    adapter = resolve("readme_examples.adapter:MyFlash")
    assert adapter.name == "my_flash" and adapter.availability().available
    inputs = make_inputs(0, 1, 1, 1, 4, 4, 4)
    assert adapter.forward(inputs, AttentionSpec()).ran == "my kernel"
