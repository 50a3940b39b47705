"""Standalone repro scripts (conformance/judge/standalone.py): generated from real records,
run with ``python -I`` from a temporary folder where this checkout is not importable.

Against a correct subject a script exits 0; against a wrong one it exits 1 and prints the
worst element the suite recorded. Most subjects here are cheap (xla, a NumPy user function);
one is the Pallas TPU flash kernel in interpret mode.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from conformance.judge import standalone
from conformance.judge.inputs import build_dout, build_inputs
from conformance.judge.repro import script
from conformance.judge.runner import Runner
from conformance.plan.cases import Case
from conformance.plan.catalogue import classify
from conformance.plan.profiles import get
from conformance.plan.subjects import resolve_subjects
from conformance.suite.check_registry import declaration
from kernels.adapters import pallas_gpu, ragged_paged_attention, splash
from kernels.contract.base import CacheWrite
from kernels.registry import resolve
from kernels.runtime.jax_runtime import default_backend, jax_version
from reference import attention_backward, attention_forward
from run_records.results_file import CaseResult

USER_MODULE = "repro_user_attention"
USER_SOURCE = '''
"""A user's attention in plain NumPy, every feature; the variants below are wrong in one way each."""
import numpy as np

try:  # the suite reads the declaration; a standalone repro runs without the checkout
    from kernels.contract.base import Capabilities
except ImportError:
    Capabilities = None


def attention(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None,
              bias=None, mask=None, q_segment_ids=None, kv_segment_ids=None, q_lengths=None,
              kv_lengths=None, sinks=None, factor=1.0, segments=True):
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), group, 1)
    v = np.repeat(v.astype(np.float64), group, 1)
    s = (q.astype(np.float64) @ k.swapaxes(-1, -2)) * scale * factor
    if bias is not None:
        s = s + bias
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    sq, sk = s.shape[-2:]
    i = np.arange(sq)[:, None] + (sk - sq if alignment == "bottom_right" else 0)
    j = np.arange(sk)[None, :]
    visible = np.ones(s.shape, dtype=bool)
    if causal:
        visible &= j <= i
    if window is not None:
        if window[0] is not None:
            visible &= j >= i - window[0]
        if window[1] is not None:
            visible &= j <= i + window[1]
    if q_segment_ids is not None and segments:
        visible &= q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :]
    if kv_lengths is not None:
        visible &= j[None, None] < kv_lengths[:, None, None, None]
    if q_lengths is not None:
        visible &= np.arange(sq)[None, None, :, None] < q_lengths[:, None, None, None]
    if mask is not None:
        visible &= mask
    s = np.where(visible, s, -np.inf)
    m = s.max(-1, keepdims=True)
    sink = None if sinks is None else sinks.astype(np.float64)[None, :, None, None]
    m = m if sink is None else np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    d = e.sum(-1, keepdims=True) + (0.0 if sink is None else np.exp(sink - m))
    return np.where(d > 0, (e @ v) / np.where(d > 0, d, 1.0), 0.0).astype(q.dtype)


def ignores_sinks(q, k, v, sinks=None, **kw):
    return attention(q, k, v, **kw)


def wrong_scale(q, k, v, **kw):
    return attention(q, k, v, factor=1.25, **kw)


def ignores_segments(q, k, v, **kw):
    return attention(q, k, v, segments=False, **kw)


def nan_row(q, k, v, **kw):
    out = attention(q, k, v, **kw)
    out[0, 0, 1] = np.nan
    return out


def wrong_dtype(q, k, v, **kw):
    return attention(q, k, v, **kw).astype(np.float64)


def raises_error(q, k, v, **kw):
    raise RuntimeError("kernel launch failed")


if Capabilities is not None:
    for fn in (attention, ignores_sinks, wrong_scale, ignores_segments, nan_row, wrong_dtype, raises_error):
        fn.attention_capabilities = Capabilities(
            dtypes=("float32", "bfloat16", "float16"), causal_alignments=("top_left", "bottom_right"),
            window=True, segment_ids=True, lengths=True, bool_mask=True, gqa=True, bias=True,
            bias_broadcast=True, softcap=True, sinks=True, distinct_v_dim=True, fully_masked_rows="zeros")
'''

CHECKOUT_IMPORT = re.compile(r"^\s*(from|import) (conformance|kernels|reference|reports|tests)\b", re.M)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder holding the user's module, importable here (the suite) and given to the script."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / f"{USER_MODULE}.py").write_text(textwrap.dedent(USER_SOURCE))
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop(USER_MODULE, None)


def record(case: Case, check: str, impl: str) -> CaseResult:
    """The record the suite writes for ``check`` on ``case`` (repro included), as a run makes it."""
    (subject,) = resolve_subjects(impl)
    planned = classify(check, case, subject.capabilities)
    assert planned is not None and planned.status in ("run", "raises"), planned
    return Runner((subject,), get("ci"), shrink=False).evaluate(planned)


def run_isolated(text: str, tmp_path: Path, module_dir: Path | None = None) -> subprocess.CompletedProcess:
    """``python -I`` on the script from an empty folder: no checkout, no PYTHONPATH, no user site.
    A user function's folder (and only that) is put on sys.path, as the user's install would."""
    where = tmp_path / "run"
    where.mkdir(exist_ok=True)
    path = where / "repro.py"
    path.write_text(text)
    command = [sys.executable, "-I", str(path)]
    if module_dir is not None:
        code = (
            f"import runpy, sys; sys.path.insert(0, {str(module_dir)!r}); "
            f"runpy.run_path({str(path)!r}, run_name='__main__')"
        )
        command = [sys.executable, "-I", "-c", code]
    return subprocess.run(command, cwd=where, capture_output=True, text=True, timeout=300)


def assert_same_worst(done: subprocess.CompletedProcess, result: CaseResult) -> None:
    assert result.metrics, result.reason
    for metric in result.metrics:
        where = ", ".join(map(str, metric.worst_index))
        assert f"{metric.tensor}[{where}]: got {metric.worst_subject!r}" in done.stdout, done.stdout


def standalone_text(result: CaseResult) -> str:
    assert result.repro.startswith('"""Standalone repro'), result.repro[:300]
    assert not CHECKOUT_IMPORT.search(result.repro)
    return result.repro


# --- built-in subjects ----------------------------------------------------------------------


@pytest.mark.parametrize("check", ["forward", "lse"])
def test_xla_masks_lengths_bias_gqa_in_bfloat16_pass_standalone(tmp_path, check):
    case = Case(
        "xla", "bfloat16", batch=2, q_heads=4, kv_heads=2, q_len=64, kv_len=96, head_dim=32, v_head_dim=32,
        causal=True, bias="1h1k", mask="b1qk", q_lengths=(50, 64), kv_lengths=(90, 7),
    )  # fmt: skip
    result = record(case, check, "xla")
    assert result.verdict == "pass"
    text = standalone.script(case, declaration(check), resolve("xla"), result.metrics, versions="jax")
    assert not CHECKOUT_IMPORT.search(text) and "causal_visible" in text and "segment_visible" not in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_xla_chunked_causal_as_its_boolean_mask_passes_standalone(tmp_path):
    """The script folds the chunk into jax.nn's mask as the adapter does (kernels/runtime/chunked_mask.py)."""
    case = Case("xla", "float32", batch=2, q_heads=2, kv_heads=1, q_len=96, kv_len=96, head_dim=16,
                v_head_dim=16, causal=True, chunk=40, mask="b1qk")  # fmt: skip
    result = record(case, "forward", "xla")
    assert result.verdict == "pass", result.reason
    text = standalone.script(case, declaration("forward"), resolve("xla"), result.metrics)
    assert "def fold_chunk(" in text and "def chunk_visible(" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_xla_backward_with_window_bias_and_gqa_passes_standalone(tmp_path):
    case = Case(
        "xla", "float32", q_heads=4, kv_heads=1, q_len=48, kv_len=64, head_dim=16, v_head_dim=16,
        window=(5, 2), bias="b11k", input_kind="integers",
    )  # fmt: skip
    result = record(case, "backward", "xla")
    assert result.verdict == "pass" and {m.tensor for m in result.metrics} == {"dq", "dk", "dv", "dbias"}
    text = standalone.script(case, declaration("backward"), resolve("xla"), result.metrics)
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_tpu_flash_in_interpret_mode_with_segments_and_bias_passes_standalone(tmp_path):
    case = Case(
        "tpu_flash", "float32", q_heads=2, kv_heads=2, q_len=128, kv_len=128, head_dim=64, v_head_dim=64,
        causal=True, segments=2, bias="1h1k",
    )  # fmt: skip
    result = record(case, "forward", "tpu_flash")
    assert result.verdict == "pass"
    text = standalone.script(case, declaration("forward"), resolve("tpu_flash"), result.metrics)
    assert "load_interpreting_copy" in text and not CHECKOUT_IMPORT.search(text)
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_tpu_flash_in_tpu_interpret_mode_passes_standalone_and_runs_natively_on_a_tpu(tmp_path):
    """tpu_flash[interpreter=tpu]: TPU interpret mode off a TPU; the choice is made when the script
    runs, so the same script runs the shipped kernel natively on a TPU."""
    (subject,) = resolve_subjects("tpu_flash[interpreter=tpu]")
    if not subject.availability.available:
        pytest.skip(subject.availability.reason)
    case = Case("tpu_flash[interpreter=tpu]", "float32", q_len=128, kv_len=128, head_dim=64, v_head_dim=64,
                causal=True)  # fmt: skip
    result = record(case, "forward", "tpu_flash[interpreter=tpu]")
    assert result.verdict == "pass", result.reason
    text = standalone.script(case, declaration("forward"), subject.adapter, result.metrics)
    assert (
        "with (contextlib.nullcontext() if jax.default_backend() == 'tpu' "
        "else pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())):" in text
    )
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_tpu_flash_raises_check_is_observed_standalone(tmp_path):
    case = Case("tpu_flash", "float32", q_len=128, kv_len=100, head_dim=64, v_head_dim=64)
    text = standalone.script(case, declaration("raises"), resolve("tpu_flash"), reason="kv_len 100")
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0 and "the call raised ValueError" in done.stdout, done.stdout + done.stderr


def _paged_or_skip(impl: str):
    (subject,) = resolve_subjects(impl)
    if not subject.availability.available:
        pytest.skip(subject.availability.reason)
    return subject


def test_paged_attentions_float32_finding_reproduces_standalone(tmp_path):
    """The ledger's paged-attention-float32-kv-rounded-to-bfloat16: the recorded repro, run
    without the checkout, lays out the same pages and gets the same worst element."""
    _paged_or_skip("paged_attention")
    case = Case("paged_attention", "float32", batch=2, q_heads=4, kv_heads=2, q_len=1, kv_len=40,
                head_dim=64, v_head_dim=64, kv_lengths=(40, 17))  # fmt: skip
    result = record(case, "forward", "paged_attention")
    assert result.verdict == "fail", result.reason  # record() judges without the ledger
    text = standalone_text(result)
    assert "paged_layout(k, v, kv_lengths, 4, 'float', layout_seed(k.shape))" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_int8_pages_on_two_simulated_cores_pass_standalone(tmp_path):
    """K/V rounded to int8 in the script as the suite rounds them (else the digest stops it with
    exit 2), int8 pages and scales, and megacore_mode on two simulated cores."""
    subject = _paged_or_skip("paged_attention[kv=int8]")
    config = {"pages_per_compute_block": 2, "megacore_mode": "kv_head"}
    case = Case("paged_attention[kv=int8]", "bfloat16", batch=2, q_heads=4, kv_heads=2, q_len=1, kv_len=40,
                head_dim=64, v_head_dim=64, kv_lengths=(40, 17), softcap=20.0, kv_storage="int8",
                config=config)  # fmt: skip
    result = record(case, "forward", "paged_attention[kv=int8]")
    assert result.verdict == "pass", result.reason
    text = standalone.script(case, declaration("forward"), subject.adapter_for(case.config), result.metrics)
    assert "k, v = (represent(x, 'int8') for x in (k, v))" in text
    assert text.count("def int8_quantize(") == 1  # the adapter's copy is the inputs section's
    assert "'megacore_mode': 'kv_head'" in text and "InterpretParams(**{'num_cores" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)
    unrounded = text.replace("k, v = (represent(x, 'int8') for x in (k, v))", "")
    assert run_isolated(unrounded, tmp_path).returncode == standalone.EXIT_INPUTS_DIFFER


def _splash_or_skip(impl: str = "splash", sinks: bool = False):
    (subject,) = resolve_subjects(impl)
    if not subject.availability.available:
        pytest.skip(subject.availability.reason)
    if sinks and not subject.capabilities.sinks:
        pytest.skip(splash.SINKS_REASON)
    return subject


def test_splash_causal_segments_gqa_passes_standalone(tmp_path):
    """The script builds the same CausalMask kernel, pre-scales q, vmaps it over the batch with
    segment ids, and gets the suite's worst element."""
    subject = _splash_or_skip()
    case = Case("splash", "float32", batch=2, q_heads=4, kv_heads=2, q_len=128, kv_len=128, head_dim=128,
                v_head_dim=128, causal=True, segments=2)  # fmt: skip
    result = record(case, "forward", "splash")
    assert result.verdict == "pass", result.reason
    text = standalone.script(case, declaration("forward"), subject.adapter_for(case.config), result.metrics)
    assert not CHECKOUT_IMPORT.search(text) and "layout = mask_layout(True, 'top_left', None, SQ, SK)" in text
    assert "def splash_gradients(" not in text  # a forward repro leaves the gradients out
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_splash_chunked_causal_passes_standalone(tmp_path):
    subject = _splash_or_skip()
    case = Case("splash", "float32", q_heads=2, kv_heads=1, q_len=256, kv_len=256, head_dim=128,
                v_head_dim=128, causal=True, chunk=48)  # fmt: skip
    result = record(case, "forward", "splash")
    assert result.verdict == "pass", result.reason
    text = standalone.script(case, declaration("forward"), subject.adapter_for(case.config), result.metrics)
    assert "layout = mask_layout(True, 'top_left', None, SQ, SK, 48)" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


SPLASH_SINKS = Case("splash", "float32", batch=2, q_heads=4, kv_heads=2, q_len=128, kv_len=128,
                    head_dim=128, v_head_dim=128, causal=True, sinks="extreme", segments=2,
                    orphan_segment=True)  # fmt: skip


def test_splash_sinks_forward_passes_standalone_and_fails_without_the_sinks(tmp_path):
    """Extreme sinks (+30, -1e4) and rows that see only their sink: the script draws the suite's
    sinks and hands them to the kernel; a script that drops them exits 1."""
    subject = _splash_or_skip(sinks=True)
    result = record(SPLASH_SINKS, "forward", "splash")
    assert result.verdict == "pass", result.reason
    text = standalone.script(SPLASH_SINKS, declaration("forward"), subject.adapter, result.metrics)
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)
    arrays = "for x in (q, k, v, q_segment_ids, kv_segment_ids, sinks))"
    assert arrays in text
    dropped = run_isolated(text.replace(arrays, arrays.replace("sinks)", "None)")), tmp_path)
    assert dropped.returncode == 1 and "out: OUT OF TOLERANCE" in dropped.stdout, (
        dropped.stdout + dropped.stderr
    )


def test_splash_sinks_backward_checks_dsinks_standalone(tmp_path):
    """dq, dk, dv and d(sinks) through splash's custom VJP, each judged; a wrong d(sinks) exits 1."""
    subject = _splash_or_skip(sinks=True)
    result = record(SPLASH_SINKS, "backward", "splash")
    assert result.verdict == "pass" and [m.tensor for m in result.metrics] == ["dq", "dk", "dv", "dsinks"]
    text = standalone.script(SPLASH_SINKS, declaration("backward"), subject.adapter, result.metrics)
    assert "ref_dsinks = sink_grad(p_sink, ref_out, dout)" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)
    grads = "dq, dk, dv, dsinks = (None if g is None else np.asarray(g) for g in grads)\n"
    wrong = run_isolated(text.replace(grads, grads + "dsinks = dsinks * 2\n"), tmp_path)
    assert wrong.returncode == 1 and "dsinks: OUT OF TOLERANCE" in wrong.stdout, wrong.stdout + wrong.stderr


def test_splash_in_tpu_interpret_mode_passes_standalone(tmp_path):
    """splash[interpreter=tpu]: the script runs the kernel in TPU interpret mode, as the suite did."""
    subject = _splash_or_skip("splash[interpreter=tpu]")
    case = Case("splash[interpreter=tpu]", "bfloat16", q_heads=2, kv_heads=1, q_len=128, kv_len=256,
                head_dim=128, v_head_dim=128, window=(40, 8), mask="b1qk")  # fmt: skip
    result = record(case, "forward", "splash[interpreter=tpu]")
    assert result.verdict == "pass", result.reason
    text = standalone.script(case, declaration("forward"), subject.adapter, result.metrics)
    assert "pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


# --- the script's call is the suite's call: every value bitwise -------------------------------

# One case per JAX subject whose script is rendered from its call description
# (kernels/runtime/call_description.py), each with the arrays that description routes: bias and
# lengths, segment ids, sinks, a boolean mask, pages, a config's blocks, packed sequences (and the
# cache a call writes back).
SAME_VALUES = {
    "xla": ("backward", dict(q_heads=4, kv_heads=2, q_len=48, kv_len=64, head_dim=16, causal=True,
                             bias="1h1k", mask="b1qk", kv_lengths=(50,))),
    "cudnn": ("forward", dict(dtype="bfloat16", q_heads=2, kv_heads=2, q_len=64, kv_len=64, head_dim=64,
                              causal=True)),
    "pallas_mgpu": ("forward", dict(dtype="bfloat16", q_heads=4, kv_heads=2, q_len=128, kv_len=192,
                                    head_dim=64, causal=True)),
    "tpu_flash": ("forward", dict(q_len=128, kv_len=128, head_dim=64, causal=True, segments=2, bias="1h1k")),
    "splash": ("backward", dict(batch=2, q_heads=4, kv_heads=2, q_len=128, kv_len=128, head_dim=128,
                                causal=True, sinks="normal", mask="b1qk")),
    "pallas_gpu": ("forward", dict(q_len=96, kv_len=96, head_dim=32, causal=True, config={"block_q": 32})),
    "paged_attention[kv=int8]": ("forward", dict(batch=2, q_heads=4, kv_heads=2, q_len=1, kv_len=40,
                                                 head_dim=64, kv_lengths=(40, 17), kv_storage="int8")),
    "tokamax[impl=xla]": ("lse", dict(q_heads=4, kv_heads=2, q_len=32, kv_len=48, head_dim=16, causal=True,
                                      bias="1h1k", q_lengths=(20,), kv_lengths=(40,))),
    "tokamax_splash[impl=base]": ("backward", dict(batch=2, q_heads=4, kv_heads=2, q_len=64, kv_len=64,
                                                   head_dim=32, causal=True, sinks="normal", mask="b1qk")),
    "tokamax[impl=mosaic_tpu]": ("lse", dict(dtype="bfloat16", batch=2, q_heads=2, kv_heads=1, q_len=128,
                                             kv_len=128, head_dim=64, causal=True)),
    "tokamax[impl=triton]": ("forward", dict(q_heads=2, kv_heads=1, q_len=32, kv_len=48, head_dim=16,
                                             causal=True, bias="1h1k", kv_lengths=(40,))),
    "tokamax_splash[impl=mosaic_tpu]": ("backward", dict(dtype="bfloat16", batch=2, q_heads=2, kv_heads=1,
                                                         q_len=128, kv_len=128, head_dim=64, causal=True,
                                                         segments=2)),
    # A decode row, a row with more query tokens than keys (its first 12 rows are not packed) and a
    # prefill row; out, lse and the written-back cache compared.
    "tokamax_batched_rpa[impl=reference]": ("lse", dict(batch=3, q_heads=4, kv_heads=2, q_len=24,
                                                        kv_len=50, head_dim=16, causal=True,
                                                        alignment="bottom_right_valid", window=(20, None),
                                                        softcap=3.0, q_lengths=(1, 24, 7),
                                                        kv_lengths=(37, 12, 50))),
    # Off a TPU no JAX so far runs it (skipped; test_ragged_paged_attention_script_... below checks
    # what can be checked there).
    "ragged_paged_attention": ("forward", dict(batch=3, q_heads=4, kv_heads=2, q_len=24, kv_len=50,
                                               head_dim=128, causal=True, alignment="bottom_right_valid",
                                               q_lengths=(1, 24, 7), kv_lengths=(37, 24, 50))),
}  # fmt: skip


def _suites_and_scripts_values(
    case: Case, check: str, adapter: Any, tmp_path: Path, edit: Callable[[str], str] = str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(what the adapter's own forward or gradients returned on the suite's inputs, what the rendered
    script's call returned, run without the checkout after ``edit`` of its text), by output name."""
    inputs = build_inputs(case)
    if check == "backward":
        dout = build_dout(case, attention_forward(inputs, case.spec).fully_masked)
        result = adapter.gradients(inputs, case.spec, dout)
        names = ("dq", "dk", "dv", "dbias", "dsinks")
    else:
        result = adapter.forward(inputs, case.spec)
        names = ("out", "lse", "kv_cache")
    saved = tmp_path / "returned.npz"
    text = edit(standalone.script(case, declaration(check), adapter))
    values = f"{{n: globals()[n] for n in {names!r} if globals().get(n) is not None}}"
    save = f"np.savez({str(saved)!r}, **{values})  # what the call returned\n"
    verdict = "\n\n# --- the verdict"
    assert text.count(verdict) == 1
    done = run_isolated(text.replace(verdict, "\n" + save + verdict), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]  # no tolerance recorded: inf
    expected = {n: _returned(result, n) for n in names if _returned(result, n) is not None}
    returned = {}
    with np.load(saved, allow_pickle=False) as npz:  # arrays only: never unpickled
        for name in npz.files:
            got = npz[name]
            want = expected.get(name, got)
            if got.dtype.kind == "V" and got.dtype.itemsize == want.dtype.itemsize:
                got = got.view(want.dtype)  # npz keeps ml_dtypes' bfloat16 as raw 2-byte records
            returned[name] = got
    return expected, returned


def _returned(result: Any, name: str) -> np.ndarray | None:
    """What the subject returned as ``name``: an output, or the KV cache it wrote back."""
    value = getattr(result, name, None)
    return value.returned if isinstance(value, CacheWrite) else value


def _same_values_case(impl: str) -> Case:
    """``SAME_VALUES``'s case of ``impl``."""
    _, fields = SAME_VALUES[impl]
    fields = dict(fields)
    fields.setdefault("v_head_dim", fields["head_dim"])
    return Case(impl, fields.pop("dtype", "float32"), **fields)


def _assert_bitwise(expected: dict[str, np.ndarray], returned: dict[str, np.ndarray]) -> None:
    assert set(returned) == set(expected), (list(returned), list(expected))
    for name, want in expected.items():
        got = returned[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), f"{name}: the script's call differs from the suite's"


@pytest.mark.parametrize("impl", SAME_VALUES, ids=list(SAME_VALUES))
def test_the_scripts_call_returns_the_suites_values_bitwise(tmp_path, impl):
    """The rendered script, run without the checkout, saves what its call returned; each array
    equals the adapter's own forward (or gradients) on the suite's inputs, bit for bit."""
    (subject,) = resolve_subjects(impl)
    if not subject.availability.available:
        pytest.skip(subject.availability.reason)
    case = _same_values_case(impl)
    adapter = subject.adapter_for(case.config)
    _assert_bitwise(*_suites_and_scripts_values(case, SAME_VALUES[impl][0], adapter, tmp_path))


# Fields of tokamax_batched_rpa's script written wrong, and the array that then differs: pages in
# another order (and other garbage) leave out and lse alike, since both read through the table, but
# the cache the call returns is another; a dropped softcap changes out.
BATCHED_RPA_MUTANTS = {
    "lays the pages out in another order": (
        "layout_seed(k.shape, SQ))", "layout_seed(k.shape, SQ) + 1)", "kv_cache"
    ),
    "drops the softcap": ("\n    softcap=3.0,\n", "\n    softcap=None,\n", "out"),
}  # fmt: skip


@pytest.mark.parametrize("mutant", BATCHED_RPA_MUTANTS)
def test_a_tokamax_batched_rpa_script_with_a_wrong_field_fails_the_bitwise_check(tmp_path, mutant):
    impl = "tokamax_batched_rpa[impl=reference]"
    subject = _tokamax_or_skip(impl)
    case = _same_values_case(impl)
    check = SAME_VALUES[impl][0]
    written, wrong, tensor = BATCHED_RPA_MUTANTS[mutant]
    assert standalone.script(case, declaration(check), subject.adapter).count(written) == 1
    edit = lambda text: text.replace(written, wrong)  # noqa: E731
    expected, returned = _suites_and_scripts_values(case, check, subject.adapter, tmp_path, edit)
    assert returned[tensor].tobytes() != expected[tensor].tobytes(), f"a script that {mutant} still agrees"
    with pytest.raises(AssertionError, match="differs from the suite's"):
        _assert_bitwise(expected, returned)


def test_the_batched_rpa_kernel_off_a_tpu_falls_back_to_the_checkout_script_and_says_why():
    """Off a TPU the kernel runs traced under an abstract TPU and compiled for the CPU: no script."""
    impl = "tokamax_batched_rpa[impl=mosaic_tpu]"
    (subject,) = resolve_subjects(impl)
    if default_backend() == "tpu":
        pytest.skip("on a TPU the kernel runs natively: it gets a script")
    case = _same_values_case("tokamax_batched_rpa[impl=reference]")
    case = dataclasses.replace(case, subject=impl, head_dim=128, v_head_dim=128)
    with pytest.raises(NotImplementedError, match="compiled for the CPU"):
        subject.adapter.standalone(case.skeleton(), case.spec)
    text = script(case, declaration("forward"), impl, adapter=subject.adapter)
    assert "Not standalone (writing it failed: NotImplementedError" in text


def test_ragged_paged_attention_script_packs_the_suites_arrays_and_fails_as_the_probe_does(tmp_path):
    """Off a TPU no JAX so far runs the kernel (TPU interpret mode cannot follow it: its availability
    probe fails), so its row of the bitwise test is skipped here. Checked instead, without the
    checkout: the script's embedded packing builds the very arrays the suite traces (packed tokens,
    shuffled pages, garbage, token index), bit for bit, and with another layout seed does not; the
    whole script, calling the kernel, fails with the probe's error."""
    impl = "ragged_paged_attention"
    (subject,) = resolve_subjects(impl)
    if subject.availability.available:
        pytest.skip("the kernel runs here: its bitwise row in SAME_VALUES runs")
    case = _same_values_case(impl)
    adapter = subject.adapter_for(case.config)
    text = standalone.script(case, declaration(SAME_VALUES[impl][0]), adapter)
    assert not CHECKOUT_IMPORT.search(text)
    layout = "layout = ragged_layout(q, k, v, q_lengths, kv_lengths, None, layout_seed(k.shape, SQ), None)"
    assert layout in text
    inputs = build_inputs(case)
    seed = ragged_paged_attention.layout_seed(inputs.k.shape, case.q_len)
    suites = ragged_paged_attention.ragged_layout(
        inputs.q, inputs.k, inputs.v, inputs.q_lengths, inputs.kv_lengths, None, seed
    )
    saved = tmp_path / "layout.npz"
    call = text.index("\nwith (contextlib.nullcontext()")
    for offset, same in (("", True), (" + 1", False)):
        prefix = text[:call].replace("layout_seed(k.shape, SQ)", f"layout_seed(k.shape, SQ){offset}")
        done = run_isolated(prefix + f"\nnp.savez({str(saved)!r}, *layout)\n", tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        with np.load(saved, allow_pickle=False) as npz:  # never unpickled: plain arrays
            scripts = [npz[f"arr_{i}"] for i in range(len(npz.files))]
        agree = len(scripts) == len(suites) and all(
            a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            for a, b in zip(scripts, suites, strict=False)
        )
        assert agree == same, f"layout seed{offset or ' as the suite'}: the arrays agree: {agree}"
    if subject.availability.lowerable and "probe call" in subject.availability.reason:
        done = run_isolated(text, tmp_path)
        # the probe's failure line (tpu_interpret.failure_line): the error's last line, then where raised
        failure = subject.availability.reason.split("failed on this JAX: ", 1)[-1]
        cause = failure.split(" (raised in the interpreter's callback", 1)[0]
        assert done.returncode == 1 and cause in done.stderr, done.stdout + done.stderr[-3000:]


# --- a non-default config (kernel tunables): the script calls the kernel with the case's blocks ---


def _configured(impl: str, case: Case):
    (subject,) = resolve_subjects(impl)
    return subject, subject.adapter_for(case.config)


def test_tpu_flash_config_case_passes_standalone_with_its_block_sizes(tmp_path):
    config = {"block_q": 64, "block_k_major": 256, "block_k": 128}  # q != k, minor != major
    case = Case("tpu_flash", "float32", q_len=128, kv_len=256, head_dim=64, v_head_dim=64, causal=True,
                config=config)  # fmt: skip
    result = record(case, "forward", "tpu_flash")
    assert result.verdict == "pass", result.reason
    _, adapter = _configured("tpu_flash", case)
    text = standalone.script(case, declaration("forward"), adapter, result.metrics)
    call = re.search(r"functools\.partial\(\n    flash_forward, module,\n[^)]*    blocks=(\{[^}]*\})", text)
    assert call is not None, text[text.index("# --- the subject") :]
    blocks = eval(call.group(1))  # noqa: S307 - the dict literal we just generated
    assert {k: blocks[k] for k in config} == config and len(blocks) == 11  # every BlockSizes field
    assert "config block_k=128, block_k_major=256, block_q=64" in text  # the case, in words
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


@pytest.mark.parametrize(
    ("impl", "fields", "config"),
    [
        ("tpu_flash", dict(q_len=128, kv_len=128, head_dim=64), {"block_k_major": 256}),
        ("pallas_gpu", dict(q_len=96, kv_len=96, head_dim=32), {"block_q": 64}),
        ("splash", dict(q_len=128, kv_len=128, head_dim=128), {"block_kv": 256}),
    ],
)
def test_the_config_reaches_the_kernel_in_the_script(tmp_path, impl, fields, config):
    """Blocks that do not divide the length make the kernel raise; at the default blocks the
    same shape runs. So the script raising proves the config's blocks reached the call."""
    if impl == "pallas_gpu" and jax_version() < pallas_gpu.RAISES_ON_NON_MULTIPLE_SINCE:
        pytest.skip("before JAX 0.6.2 pallas_gpu does not check that its blocks divide the lengths")
    fields = dict(fields, v_head_dim=fields["head_dim"])
    plain, tuned = Case(impl, "float32", **fields), Case(impl, "float32", config=config, **fields)
    for case, raised in ((tuned, True), (plain, False)):
        _, adapter = _configured(impl, case)
        text = standalone.script(case, declaration("raises"), adapter, reason="blocks")
        done = run_isolated(text, tmp_path)
        assert done.returncode == (0 if raised else 1), done.stdout + done.stderr[-3000:]
        assert ("the call raised ValueError" in done.stdout) == raised, done.stdout


def test_pallas_gpu_backward_config_reproduces_standalone_with_its_block_sizes(tmp_path):
    """From JAX 0.5.1 the case passes and so does its script. Before, mha(block_q=, block_k=)
    sizes the backward too and gives NaN dq when they differ (the ledger's
    pallas-gpu-unequal-blocks-backward-nan-before-block-sizes): the recorded repro exits 1 there."""
    (subject,) = resolve_subjects("pallas_gpu")
    names = subject.capabilities.tunables.names
    config = {"block_q": 32, "block_k": 64}  # block_q != block_k
    buggy = "block_q_dq" not in names
    if not buggy:  # the backward has its own blocks: unlike the forward's
        config |= {"block_q_dkv": 64, "block_kv_dkv": 32, "block_q_dq": 32, "block_kv_dq": 64}
    case = Case("pallas_gpu", "float32", q_len=128, kv_len=128, head_dim=32, v_head_dim=32, causal=True,
                config=config)  # fmt: skip
    result = record(case, "backward", "pallas_gpu")
    assert result.verdict == ("fail" if buggy else "pass"), result.reason
    adapter = subject.adapter_for(case.config)
    text = (
        standalone_text(result)
        if buggy
        else standalone.script(case, declaration("backward"), adapter, result.metrics)
    )
    blocks = re.search(r"block_kwargs = mha_block_kwargs\(BlockSizes, (\{[^}]*\})\)", text)
    assert blocks is not None and eval(blocks.group(1)) == config  # noqa: S307 - the literal we generated
    assert "functools.partial(\n    mha_gradients, mha,\n" in text and "block_kwargs=block_kwargs" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == (1 if buggy else 0), done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_splash_backward_config_passes_standalone_with_its_blocks(tmp_path, fused):
    """block_q != block_kv, compute < kv block, own backward blocks; the fused backward has no dq
    kernel, so its dq blocks are dropped (kernel_blocks, the adapter's own function)."""
    _splash_or_skip()
    config = {"block_q": 64, "block_kv": 256, "block_kv_compute": 128, "block_q_dkv": 64,
              "block_kv_dkv": 128, "use_fused_bwd_kernel": fused}  # fmt: skip
    case = Case("splash", "float32", q_len=128, kv_len=256, head_dim=128, v_head_dim=128, causal=True,
                config=config)  # fmt: skip
    result = record(case, "backward", "splash")
    assert result.verdict == "pass", result.reason
    subject, adapter = _configured("splash", case)
    text = standalone.script(case, declaration("backward"), adapter, result.metrics)
    blocks = re.search(r"blocks=kernel_blocks\((\{[^}]*\})\)", text)
    assert blocks is not None, text[text.index("# --- the subject") :]
    blocks = eval(blocks.group(1))  # noqa: S307 - the dict literal we just generated
    assert {k: blocks[k] for k in config} == config and set(blocks) == set(
        subject.capabilities.tunables.names
    )
    assert "save_residuals=False" in text and "splash_gradients" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_a_failing_config_cases_recorded_repro_is_standalone_at_its_config():
    """The runner writes a failure's repro with the adapter set to the case's config."""
    config = {"block_q": 64, "block_k_major": 256}
    case = Case("tpu_flash", "float32", q_len=128, kv_len=256, head_dim=64, v_head_dim=64, config=config)
    (subject,) = resolve_subjects("tpu_flash")
    planned = classify("forward", case, subject.capabilities)
    text = Runner((subject,), get("ci"), shrink=False)._repro(planned, subject, (), "failed", None)
    assert text.startswith('"""Standalone repro') and "'block_k_major': 256, 'block_k': 128" in text


# --- a user's function: the suite's record, then the script ---------------------------------

FEATURES = {
    "segments_orphan_nan_padding": dict(batch=2, segments=3, orphan_segment=True, input_kind="nan_padding"),
    "softcap_bottom_right_float16": dict(
        dtype="float16", causal=True, alignment="bottom_right", q_len=40, softcap=5.0, scale=0.3
    ),
    "window_lengths_mask_bias_gqa": dict(
        q_heads=4, kv_heads=2, window=(7, None), q_lengths=(30,), kv_lengths=(50,), mask="1hqk", bias="bh1k"
    ),
    # Rows of the orphan segment see no key: only their sink (out 0, lse the sink); -1e4 vanishes.
    "sinks_extreme_gqa_segments_softcap": dict(
        batch=2, q_heads=6, kv_heads=3, segments=2, orphan_segment=True, sinks="extreme", softcap=4.0
    ),
}


def _case(impl: str, **features) -> Case:
    fields = dict(dtype="float32", q_len=48, kv_len=64, head_dim=16, v_head_dim=16) | features
    return Case(impl, **fields)


@pytest.mark.parametrize("features", FEATURES, ids=list(FEATURES))
def test_a_correct_user_function_passes_standalone(tmp_path, user_dir, features):
    impl = f"{USER_MODULE}:attention"
    result = record(_case(impl, **FEATURES[features]), "forward", impl)
    assert result.verdict == "pass", result.reason
    case = _case(impl, **FEATURES[features])
    text = standalone.script(case, declaration("forward"), resolve(impl), result.metrics)
    assert f"from {USER_MODULE} import attention" in text
    done = run_isolated(text, tmp_path, user_dir)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


@pytest.mark.parametrize(
    ("function", "features"),
    [
        ("wrong_scale", "softcap_bottom_right_float16"),
        ("ignores_segments", "segments_orphan_nan_padding"),
        ("ignores_sinks", "sinks_extreme_gqa_segments_softcap"),
    ],
)
def test_a_wrong_user_function_exits_1_with_the_recorded_worst_element(
    tmp_path, user_dir, function, features
):
    impl = f"{USER_MODULE}:{function}"
    result = record(_case(impl, **FEATURES[features]), "forward", impl)
    assert result.verdict == "fail"
    done = run_isolated(standalone_text(result), tmp_path, user_dir)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "OUT OF TOLERANCE" in done.stdout
    assert_same_worst(done, result)


@pytest.mark.parametrize(
    ("check", "function", "verdict", "says"),
    [
        (
            "finite",
            "nan_row",
            "fail",
            "non-finite where the reference is finite; first at [0, 0, 1, 0]: got nan",
        ),
        ("finite", "attention", "pass", "finite wherever the reference is"),
        (
            "shape_dtype",
            "wrong_dtype",
            "fail",
            "out: shape (1, 1, 48, 16), dtype float64; expected (1, 1, 48, 16), float32",
        ),
        ("determinism", "attention", "pass", "bitwise identical"),
    ],
)
def test_verdict_checks_observe_what_the_check_observed(tmp_path, user_dir, check, function, verdict, says):
    impl = f"{USER_MODULE}:{function}"
    case = _case(impl)
    result = record(case, check, impl)
    assert result.verdict == verdict
    text = result.repro if verdict == "fail" else standalone.script(case, declaration(check), resolve(impl))
    done = run_isolated(text, tmp_path, user_dir)
    assert done.returncode == (1 if verdict == "fail" else 0), done.stdout + done.stderr[-3000:]
    assert says in done.stdout


def test_a_subject_that_raises_raises_again_in_the_script(tmp_path, user_dir):
    impl = f"{USER_MODULE}:raises_error"
    result = record(_case(impl), "forward", impl)
    assert result.verdict == "error" and not result.metrics
    done = run_isolated(standalone_text(result), tmp_path, user_dir)
    assert done.returncode == 1 and "RuntimeError: kernel launch failed" in done.stderr


def test_checks_a_script_cannot_observe_fall_back_to_the_checkout_script_and_say_why():
    case = Case("xla", "float32")
    text = script(case, declaration("recompile"), "xla", adapter=resolve("xla"))
    assert "Not standalone (the recompile check observes the suite's own machinery)" in text
    assert "run_check(case, 'recompile'" in text


# --- the pieces, in process -------------------------------------------------------------------

REFERENCE_CASES = [
    Case("x", "float32", batch=2, q_heads=4, kv_heads=2, q_len=24, kv_len=40, head_dim=8, v_head_dim=12,
         causal=True, alignment="bottom_right", bias="1h1k", softcap=3.0),
    Case("x", "bfloat16", batch=2, q_len=33, kv_len=20, head_dim=8, v_head_dim=8, window=(2, 0),
         segments=2, orphan_segment=True, input_kind="nan_padding"),
    Case("x", "float16", batch=2, q_heads=2, q_len=16, kv_len=16, head_dim=8, v_head_dim=8,
         q_lengths=(9, 16), kv_lengths=(16, 3), mask="b1qk", input_kind="large"),
    # One diagonal per row at its valid lengths: a decode row, a prefill row, a row whose kv
    # length is shorter than its q length (its first queries see nothing), with a window.
    Case("x", "float32", batch=3, q_heads=4, kv_heads=2, q_len=12, kv_len=20, head_dim=8, v_head_dim=8,
         causal=True, alignment="bottom_right_valid", window=(3, None), q_lengths=(1, 12, 7),
         kv_lengths=(20, 13, 4), input_kind="nan_padding"),
    Case("x", "float32", batch=2, q_len=6, kv_len=9, head_dim=8, v_head_dim=8, causal=True,
         alignment="bottom_right_valid", kv_lengths=(9, 5)),
    # Sinks after softcap and bias, with GQA; and extreme sinks (+30, -1e4) where an orphan
    # segment's rows see no key, so only the sink is left (out 0, lse the sink).
    Case("x", "float32", batch=2, q_heads=4, kv_heads=2, q_len=20, kv_len=28, head_dim=8, v_head_dim=8,
         causal=True, alignment="bottom_right", bias="1h1k", softcap=3.0, sinks="normal"),
    Case("x", "bfloat16", batch=2, q_heads=3, kv_heads=1, q_len=16, kv_len=24, head_dim=8, v_head_dim=8,
         segments=2, orphan_segment=True, sinks="extreme"),
    # Chunked causal: bottom-right with a chunk that divides neither length; per row at the valid
    # lengths, chunks still counted from key 0.
    Case("x", "float32", batch=2, q_heads=2, kv_heads=1, q_len=24, kv_len=40, head_dim=8, v_head_dim=8,
         causal=True, alignment="bottom_right", chunk=7),
    Case("x", "float32", batch=2, q_len=12, kv_len=20, head_dim=8, v_head_dim=8, causal=True,
         alignment="bottom_right_valid", chunk=5, q_lengths=(1, 12), kv_lengths=(20, 13)),
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _ReturnsDsinks:
    """xla's script under a declaration with d(sinks): the prefix (inputs and float64 answer,
    all that the test below runs) then computes ref_dsinks too, as a sinks subject's does."""

    inner: Any
    name: str = "xla"

    def standalone(self, inputs, spec):
        return self.inner.standalone(inputs, spec)

    def capabilities(self):
        return dataclasses.replace(self.inner.capabilities(), sinks=True, sinks_grad=True)


def _prefix_namespace(case: Case, check: str) -> dict:
    """Run a script up to the subject's call, in this process; returns its variables."""
    text = standalone.script(case, declaration(check), _ReturnsDsinks(resolve("xla")))
    prefix = text[: text.index("# --- the subject")]
    namespace: dict = {"__name__": "repro_prefix"}
    exec(compile(prefix, "repro_prefix", "exec"), namespace)  # noqa: S102 - the text we just generated
    return namespace


@pytest.mark.parametrize("case", REFERENCE_CASES, ids=lambda c: c.semantic_id)
def test_the_scripts_inputs_and_float64_answer_are_the_suites(case):
    ns = _prefix_namespace(case, "backward" if case.input_kind != "nan_padding" else "forward")
    inputs = build_inputs(case)
    for name in ("q", "k", "v", "bias", "q_segment_ids", "kv_segment_ids", "mask", "sinks"):
        want, got = getattr(inputs, name), ns[name]
        assert (want is None and got is None) or (want.tobytes() == got.tobytes() and want.dtype == got.dtype)
    ref = attention_forward(inputs, case.spec)
    assert np.array_equal(np.isfinite(ref.lse), ns["valid"])
    np.testing.assert_allclose(ns["ref_out"], ref.out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ns["ref_lse"][ns["valid"]], ref.lse[ns["valid"]], rtol=1e-12)
    if "ref_dq" in ns:
        dout = build_dout(case, ref.fully_masked)
        assert ns["dout"].tobytes() == dout.tobytes()
        grads = attention_backward(inputs, dout, case.spec, ref)
        for name in ("dq", "dk", "dv", "dbias", "dsinks"):
            assert (getattr(grads, name) is None) == (f"ref_{name}" not in ns), name
            if getattr(grads, name) is not None:
                np.testing.assert_allclose(ns[f"ref_{name}"], getattr(grads, name), rtol=1e-9, atol=1e-9)


def test_redrawn_inputs_that_differ_stop_the_script_with_exit_2(tmp_path):
    case = Case("xla", "float32", q_len=8, kv_len=8, head_dim=8, v_head_dim=8)
    text = standalone.script(case, declaration("forward"), resolve("xla"))
    broken = text.replace("q = draw_values(SEED, 0, 0,", "q = draw_values(SEED + 1, 0, 0,")
    done = run_isolated(broken, tmp_path)
    assert done.returncode == 2 and "differ from the suite's" in done.stdout


# --- a bare environment -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_repro_runs_in_a_fresh_venv_with_only_jax_and_numpy(tmp_path):
    """pip installs jax==<this version> (with what it needs) into a new venv; the script runs there."""
    import importlib.metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    jax = importlib.metadata.version("jax")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"jax=={jax}", "numpy"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    if install.returncode != 0:
        pytest.skip(f"cannot install jax=={jax} here: {install.stderr.strip().splitlines()[-1:]}")
    case = Case("xla", "bfloat16", q_heads=2, kv_heads=1, q_len=32, kv_len=48, head_dim=16, v_head_dim=16,
                causal=True, bias="1h1k")  # fmt: skip
    result = record(case, "forward", "xla")
    text = standalone.script(case, declaration("forward"), resolve("xla"), result.metrics)
    path = tmp_path / "repro.py"
    path.write_text(text)
    done = subprocess.run(
        [str(python), "-I", str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_finite_and_shape_dtype_look_at_the_gradients_when_the_backward_pass_ran(tmp_path):
    case = Case(
        "xla", "float32", q_heads=2, kv_heads=1, q_len=16, kv_len=24, head_dim=8, v_head_dim=8, bias="1h1k"
    )
    for check in ("finite", "shape_dtype"):
        text = standalone.script(case, declaration(check), resolve("xla"), gradients=True)
        assert "jax_nn_gradients" in text
        done = run_isolated(text, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        assert "dbias:" in done.stdout and "dq:" in done.stdout


# --- tokamax (kernels/adapters/tokamax.py): the XLA implementations ---------------------------------


def _tokamax_or_skip(impl: str):
    (subject,) = resolve_subjects(impl)
    if not subject.availability.available:
        pytest.skip(subject.availability.reason)
    return subject


TOKAMAX_PASSING = {
    "xla-forward-lse-bias-lengths-gqa": (
        "tokamax[impl=xla]",
        "lse",
        dict(q_heads=4, kv_heads=2, q_len=32, kv_len=48, head_dim=16, v_head_dim=16, causal=True,
             bias="1h1k", q_lengths=(20,), kv_lengths=(40,)),
    ),
    "xla-backward-window-bias": (
        "tokamax[impl=xla]",
        "backward",
        dict(q_heads=2, kv_heads=1, q_len=32, kv_len=32, head_dim=16, v_head_dim=16, window=(5, 2),
             bias="b11k"),
    ),
    "xla-forward-quantized-q-and-kv": (
        "tokamax[impl=xla]",
        "forward",
        dict(q_heads=2, kv_heads=2, q_len=32, kv_len=32, head_dim=16, v_head_dim=16,
             q_storage="int8_per_head", kv_storage="float8_e5m2_per_channel"),
    ),
    "xla_chunked-forward-chunk-config": (
        "tokamax[impl=xla_chunked]",
        "forward",
        dict(q_heads=2, kv_heads=1, q_len=48, kv_len=48, head_dim=16, v_head_dim=16, causal=True,
             config={"q_chunk_size": 16, "kv_chunk_size": 32}),
    ),
}  # fmt: skip


@pytest.mark.parametrize("impl, check, fields", TOKAMAX_PASSING.values(), ids=list(TOKAMAX_PASSING))
def test_tokamax_xla_cases_pass_standalone(tmp_path, impl, check, fields):
    """The script needs only jax, numpy and tokamax (qwix, its dependency, for QArrays)."""
    subject = _tokamax_or_skip(impl)
    case = Case(impl, "float32", **fields)
    result = record(case, check, impl)
    assert result.verdict == "pass", result.reason
    adapter = subject.adapter_for(case.config)
    text = standalone.script(case, declaration(check), adapter, result.metrics, versions="jax, tokamax")
    assert not CHECKOUT_IMPORT.search(text)
    assert "absl_flags_parsed()" in text and "import_module('tokamax').dot_product_attention" in text
    if "config" in fields:  # the case's chunk sizes reach the op
        assert "op = tokamax_op(op_class, None, None, None, {'chunk_size': (16, 32)})" in text
    if "q_storage" in fields:
        assert "call_arrays(q, k, v, bias, mask, q_lengths, kv_lengths), 'int8_per_head', 'float8" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert_same_worst(done, result)


def test_tokamax_float16_dot_precision_finding_reproduces_standalone(tmp_path):
    """The ledger's tokamax-cpu-float16-dot-precision: float16 raises ValueError on CPU inside
    tokamax's own call. The recorded standalone repro raises it again (exit 1)."""
    _tokamax_or_skip("tokamax[impl=xla]")
    case = Case("tokamax[impl=xla]", "float16", q_heads=2, kv_heads=2, q_len=32, kv_len=32, head_dim=16,
                v_head_dim=16)  # fmt: skip
    result = record(case, "forward", "tokamax[impl=xla]")
    assert result.verdict == "error" and "F16_F16_F32" in result.reason, (result.verdict, result.reason)
    done = run_isolated(standalone_text(result), tmp_path)
    assert done.returncode == 1 and "F16_F16_F32" in done.stderr, done.stdout + done.stderr[-3000:]


# A Config case whose blocks change the kernel's float32 bits (256 keys a block, computed whole;
# the default's 128-key blocks give other bits): a script that drops the Config or writes one of
# its fields wrong returns other values than the suite's.
CONFIG_MUTANTS = {
    "drops the Config": ("forward_config, vjp_config, {}", "None, vjp_config, {}"),
    "writes a field wrong": ("\n    block_kv_compute=256,\n", "\n    block_kv_compute=128,\n"),
}  # fmt: skip


def test_tokamax_mosaic_config_case_reproduces_bitwise_and_a_script_without_its_config_does_not(tmp_path):
    impl = "tokamax[impl=mosaic_tpu]"
    subject = _tokamax_or_skip(impl)
    config = {"block_kv": 256, "block_kv_compute": 256, "q_layout": "SEQ_MINOR"}
    case = Case(impl, "float32", q_heads=2, kv_heads=1, q_len=128, kv_len=256, head_dim=64, v_head_dim=64,
                config=config)  # fmt: skip
    adapter = subject.adapter_for(case.config)
    text = standalone.script(case, declaration("forward"), adapter)
    assert "block_kv=256,\n    block_kv_compute=256,\n    q_layout=QKVLayout.SEQ_MINOR," in text
    expected, returned = _suites_and_scripts_values(case, "forward", adapter, tmp_path)
    _assert_bitwise(expected, returned)
    for mutant, (written, wrong) in CONFIG_MUTANTS.items():
        assert text.count(written) == 1, mutant
        edit = lambda text, written=written, wrong=wrong: text.replace(written, wrong)  # noqa: E731
        _, returned = _suites_and_scripts_values(case, "forward", adapter, tmp_path, edit)
        assert returned["out"].tobytes() != expected["out"].tobytes(), f"a script that {mutant} still agrees"


def test_tokamax_gpu_only_implementations_fall_back_to_the_checkout_script_and_say_why():
    for impl in ("tokamax[impl=mosaic_gpu]", "tokamax[impl=cudnn]"):
        (subject,) = resolve_subjects(impl)
        case = Case(impl, "float16", q_len=32, kv_len=32, head_dim=16, v_head_dim=16)
        with pytest.raises(NotImplementedError, match="runs on an NVIDIA GPU only"):
            subject.adapter.standalone(case.skeleton(), case.spec)
        text = script(case, declaration("forward"), impl, adapter=subject.adapter)
        assert "Not standalone (writing it failed: NotImplementedError" in text


def test_an_adapter_writes_its_script_from_inputs_in_the_cases_dtype():
    """An op's default Config depends on the inputs' dtype (tokamax's ``bind(...).default_config``)."""
    case = Case("xla", "bfloat16", q_len=32, kv_len=32, head_dim=16, v_head_dim=16, bias="1h1k",
                bias_fill="first_block", sinks="normal", mask="b1qk")  # fmt: skip
    typed = standalone.typed_skeleton(case)
    assert {typed.q.dtype, typed.k.dtype, typed.v.dtype, typed.bias.dtype, typed.sinks.dtype} == {
        np.dtype(ml_dtypes.bfloat16)
    }
    assert np.isneginf(typed.bias.flat[0]) and typed.mask.dtype == bool and typed.q.strides == (0, 0, 0, 0)


# --- tokamax_splash (kernels/adapters/tokamax_splash.py): the base op -----------------------------


def test_tokamax_splash_dropped_causal_offset_reproduces_standalone(tmp_path):
    """The ledger's tokamax-splash-causal-mask-offset-dropped: bottom-right causal with Sq < Sk runs
    top-left. The recorded repro needs only jax, numpy and tokamax and fails again (exit 1); with the
    queries as long as the keys (both alignments alike) the same script passes."""
    impl = "tokamax_splash[impl=base]"
    subject = _tokamax_or_skip(impl)
    fields = dict(q_heads=2, kv_heads=2, kv_len=64, head_dim=32, v_head_dim=32, causal=True,
                  alignment="bottom_right")  # fmt: skip
    result = record(Case(impl, "float32", q_len=32, **fields), "forward", impl)
    assert result.verdict in ("fail", "known"), (result.verdict, result.reason)
    text = standalone_text(result)
    assert "import_module('tokamax.ops.experimental').splash_attention" in text
    done = run_isolated(text, tmp_path)
    assert done.returncode == 1 and "out: OUT OF TOLERANCE" in done.stdout, done.stdout + done.stderr[-3000:]
    square = Case(impl, "float32", q_len=64, **fields)
    passed = record(square, "forward", impl)
    assert passed.verdict == "pass", passed.reason
    text = standalone.script(square, declaration("forward"), subject.adapter, passed.metrics)
    done = run_isolated(text, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
