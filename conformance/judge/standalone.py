"""Self-contained repro scripts: a failing (check, case) as ~100 lines that need only NumPy,
JAX and the subject's own module, never this checkout.

The script is assembled from the code the suite ran, so the two cannot drift apart:

* inputs: the pure draws of ``conformance/plan/draws.py`` (source embedded), called as the
  suite's own recipes call them (``conformance.judge.inputs.RECIPES``, rendered by
  ``script_draws``); a SHA-256 of the float inputs (``inputs.FLOAT_INPUTS``) proves they are
  bit-identical;
* the subject's call: ``adapter.standalone(inputs, spec)`` (``kernels/runtime/standalone.py``), the
  adapter's own translation functions, interpret shim included;
* the float64 answer: ``reference/dense.py``, only the features the case uses, in the
  statements ``reference/script.py`` writes (each feature's gradient where the subject
  returns it, ``kernels/contract/features.py``);
* the verdict: the tolerance the suite judged with (``TensorMetrics.tolerance`` and
  ``mean_tolerance``), as numbers.

Exit status: 1 while the bug is present, 0 once it is gone, 2 when the redrawn inputs
differ from the suite's. What the script does is the check's declared recipe
(``CheckDeclaration.repro``): ``out_tensor``, ``lse_tensor`` and ``gradient_tensors`` get a
numeric script; ``call_raises``, ``nonfinite``, ``output_shapes`` and ``rerun_bitwise`` one
that observes what the check observed; ``suite_only`` (and subjects without ``standalone``)
get none here (``conformance.judge.repro`` falls back to a script that runs from the checkout).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from conformance.judge import dtypes, inputs, metrics
from conformance.judge.metrics import abs_error
from conformance.plan import draws, recipes
from conformance.plan.cases import Case
from conformance.suite.check_registry import CheckDeclaration
from kernels.contract import features
from kernels.contract.optional_members import optional_member
from kernels.runtime import kv_storage
from kernels.runtime.standalone import StandaloneCall
from reference import script as answer_script
from reference.spec import AttentionInputs
from run_records.results_file import TensorMetrics

# The judged tensors of each numeric recipe (``gradient_tensors``: those the suite recorded).
NUMERIC_TENSORS = {"out_tensor": ("out",), "lse_tensor": ("lse",), "gradient_tensors": ("dq", "dk", "dv")}
# Recipes that observe the gradients too where the case's backward pass ran, as their checks do.
SEES_GRADIENTS = ("nonfinite", "output_shapes")
EXIT_INPUTS_DIFFER = 2


def supports(check: CheckDeclaration, adapter: Any) -> bool:
    """Whether ``script`` can write a standalone repro for this check and subject."""
    return callable(optional_member(adapter, "standalone")) and check.repro != "suite_only"


# --- embedded verbatim in every script ------------------------------------------------


def inputs_digest(*arrays):
    """SHA-256 of the arrays' dtypes, shapes and bytes (None skipped): equal iff bit-identical."""
    digest = hashlib.sha256()
    for array in arrays:
        if array is not None:
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype.name}{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def check_tensor(name, got, want, valid, tolerance, mean_tolerance):
    """Print how ``got`` compares with the float64 ``want`` over ``valid`` (bool, broadcastable;
    None = every element) under the suite's two rules; True when out of tolerance."""
    got = np.asarray(got)
    if got.shape != want.shape:
        print(f"{name}: has shape {got.shape}, expected {want.shape}")
        return True
    err = abs_error(got, want)
    keep = np.ones(err.shape, dtype=bool) if valid is None else np.broadcast_to(valid, err.shape)
    index = np.unravel_index(int(np.argmax(np.where(keep, err, -1.0))), err.shape)
    worst = float(err[index])
    mean = float(err[keep].mean()) if keep.any() else 0.0
    failed = worst > tolerance or mean > mean_tolerance
    where = ", ".join(str(int(i)) for i in index)
    print(f"{name}: {'OUT OF TOLERANCE' if failed else 'within tolerance'}")
    print(
        f"  worst element {name}[{where}]: got {float(got.astype(np.float64)[index])!r}, "
        f"expected {float(want[index])!r}; |error| {worst:.6g}, tolerance {tolerance:.6g}"
    )
    print(f"  mean |error| {mean:.6g}, tolerance {mean_tolerance:.6g}")
    return failed


def report_nonfinite(name, got, want, keep):
    """Print where ``got`` is NaN/Inf although the float64 ``want`` is finite (over ``keep``,
    bool broadcastable, None = everywhere); True when anywhere."""
    if got is None or np.shape(got) != np.shape(want):
        return False  # the shape_dtype check reports these
    got = np.asarray(got).astype(np.float64)
    expected = np.isfinite(want) if keep is None else np.isfinite(want) & np.broadcast_to(keep, want.shape)
    bad = expected & ~np.isfinite(got)
    if not bad.any():
        print(f"{name}: finite wherever the reference is")
        return False
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    print(
        f"{name}: {int(bad.sum())} of {int(expected.sum())} elements are non-finite where the reference "
        f"is finite; first at {list(where)}: got {float(got[where])!r}, expected {float(want[where])!r}"
    )
    return True


def report_shape_dtype(name, got, shape, dtypes):
    """Print ``got``'s shape and dtype against the expected ones; True when either differs."""
    if not isinstance(got, np.ndarray):
        print(f"{name}: is a {type(got).__name__}, expected an array of shape {shape}")
        return True
    wrong = got.shape != tuple(shape) or got.dtype not in dtypes
    expected = " or ".join(str(d) for d in dtypes)
    print(f"{name}: shape {got.shape}, dtype {got.dtype}; expected {tuple(shape)}, {expected}")
    return wrong


def _verdict_helpers(check: CheckDeclaration) -> tuple[Callable[..., Any], ...]:
    return {"nonfinite": (report_nonfinite,), "output_shapes": (report_shape_dtype,)}.get(check.repro, ())


# --- assembly ---------------------------------------------------------------------------


def _source(*functions: Callable[..., Any]) -> str:
    return "\n\n\n".join(textwrap.dedent(inspect.getsource(f)).rstrip() for f in functions) + "\n"


def _defined_name(definition: str) -> str:
    """The name a definition binds: ``def name(``, ``class name``, or ``NAME = ...``, under any
    decorator lines (``@functools.cache``)."""
    undecorated = re.sub(r"^(@.*\n)+", "", definition.lstrip())
    first = undecorated.split("(", 1)[0].split(":", 1)[0].split("=", 1)[0]
    return first.replace("def ", "").replace("class ", "").strip()


def _used_definitions(definitions: Iterable[str], code: str) -> list[str]:
    """The definitions that ``code`` needs, directly or through another needed definition
    (a forward repro leaves the adapter's gradient function out)."""
    definitions = list(definitions)
    used: set[int] = set()
    text = code
    while True:
        new = {
            i
            for i, d in enumerate(definitions)
            if i not in used and re.search(rf"\b{re.escape(_defined_name(d))}\b", text)
        }
        if not new:
            return [d for i, d in enumerate(definitions) if i in used]
        used |= new
        text += "".join(definitions[i] for i in new)


def _section(title: str) -> str:
    return f"\n\n# --- {title} " + "-" * max(3, 86 - len(title)) + "\n\n"


def _dtype_expression(name: str) -> str:
    if name in dtypes.ML_DTYPES:
        return f"np.dtype(ml_dtypes.{name})"
    return f"np.dtype({name!r})"


def _dtype_line(name: str) -> str:
    return f"DTYPE = {_dtype_expression(name)}"


def _case_block(case: Case) -> str:
    lines = [
        f"# {case.summary()}",
        _dtype_line(case.dtype),
        f"B, HQ, HKV, SQ, SK, D, DV = {case.batch}, {case.q_heads}, {case.kv_heads}, "
        f"{case.q_len}, {case.kv_len}, {case.head_dim}, {case.v_head_dim}",
        f"SEED = {case.seed}  # crc32 of the case id without the subject: every subject saw these inputs",
        f"SCALE = {case.spec.resolved_scale(case.head_dim)!r}",
    ]
    lines += answer_script.constants(case)
    return "\n".join(lines) + "\n"


def _observed_gradients(case: Case, caps: Any) -> tuple[features.Gradient, ...]:
    """The feature gradients judged for this case: its input is there and the subject returns
    it (``kernels/contract/features.py``; a bias's is the reference's and is compared where declared)."""
    present = {name for name, value in case.skeleton().__dict__.items() if value is not None}
    return tuple(g for g in features.gradients() if g.input in present and getattr(caps, g.declared_by))


def _padding_lines(case: Case) -> str:
    if case.input_kind != "nan_padding":
        return ""
    return (
        "# NaN where no valid output may look: query rows that see no key, keys no query sees;\n"
        "# v gets a huge finite value there (0 * NaN is NaN in any matmul; the sentinel shows a leak).\n"
        "dead_rows, dead_keys = dead_positions(visible, HKV)\n"
        "q[dead_rows] = np.nan\n"
        "k[dead_keys] = np.nan\n"
        f"v[dead_keys] = {inputs.padding_sentinel(case)!r}\n"
    )


def _storage_lines(case: Case) -> str:
    """q and K/V rounded to their storages, as ``build_inputs`` does (``kernels/runtime/kv_storage.py``)."""
    if case.kv_storage is None and case.q_storage is None:
        return ""
    constants = "".join(
        f"{name} = {getattr(kv_storage, name)!r}\n"
        for name in ("ELEMENT_LIMITS", "GROUP_AXES", "KV_STORAGES")
    )
    functions = _source(kv_storage.storage_parts, kv_storage.quantize, kv_storage.represent)
    return (
        f"\n{constants}\n\n{functions}\n\n"
        + (f"q = represent(q, {case.q_storage!r})  # as the call passes q\n" if case.q_storage else "")
        + (
            f"k, v = (represent(x, {case.kv_storage!r}) for x in (k, v))  # as the subject holds them\n"
            if case.kv_storage
            else ""
        )
    )


def _digest(case: Case) -> str:
    built = inputs.build_inputs(case)
    return inputs_digest(*(getattr(built, name) for name in inputs.FLOAT_INPUTS))


def _numeric_judgement(check: CheckDeclaration, recorded: Iterable[TensorMetrics]) -> str:
    recorded = {m.tensor: m for m in recorded}
    names = NUMERIC_TENSORS[check.repro]
    if check.repro == "gradient_tensors":
        every = ("dq", "dk", "dv", *(g.tensor for g in features.gradients()))
        names = tuple(n for n in every if n in recorded) or names
    valid = {"out": "valid[..., None]", "lse": "valid"}
    lines = []
    if not recorded:
        lines.append("# The suite recorded no tolerance: the call raised there. Reaching this line means it")
        lines.append("# returned, so the bug is gone; the errors are printed for the record.")
    lines.append("failed = False")
    for name in names:
        metric = recorded.get(name)
        tol = f"{metric.tolerance!r}, {metric.mean_tolerance!r}" if metric else "float('inf'), float('inf')"
        got = "lse" if name == "lse" else name
        if metric is not None:
            lines.append(
                f"# {name}: {metric.k:g} x the baseline's max-abs error {metric.baseline_max_abs:.6g} "
                f"+ floor {metric.floor:.3g}; mean-abs: {metric.k_mean} x {metric.baseline_mean_abs:.6g} "
                f"+ {metric.floor_mean:.3g} (baseline: plain attention in the dtype; see docs/tolerances.md)"
            )
        lines.append(f"failed |= check_tensor({name!r}, {got}, ref_{name}, {valid.get(name, 'None')}, {tol})")
    lines.append("sys.exit(1 if failed else 0)")
    return "\n".join(lines) + "\n"


def _verdict_judgement(
    case: Case,
    check: CheckDeclaration,
    call: StandaloneCall,
    reason: str,
    gradients: bool,
    observed: tuple[features.Gradient, ...],
    out_dtype_name: str,
) -> str:
    """Statements after the forward call that observe what the check did (with ``gradients``: in
    the gradients too, as the check did for a case whose backward pass ran; ``observed``: the
    feature gradients the subject declares and the case has; ``out_dtype_name``: the dtype out
    is declared in, ``Capabilities.output_dtype``)."""
    said = "# The suite saw: " + " ".join(reason.split())[:300] + "\n"
    grads = ("dq", "dk", "dv") + tuple(g.tensor for g in observed)
    if check.repro == "nonfinite":
        lines = [
            "failed = report_nonfinite('out', out, ref_out, valid[..., None])",
            "if lse is not None:",
            "    failed |= report_nonfinite('lse', lse, ref_lse, valid)",
        ]
        if gradients:
            lines.append(call.gradients.rstrip())
            lines += [f"failed |= report_nonfinite({g!r}, {g}, ref_{g}, None)" for g in grads]
        return said + "\n".join(lines) + "\nsys.exit(1 if failed else 0)\n"
    if check.repro == "output_shapes":
        out_dtype = "DTYPE" if out_dtype_name == case.dtype else _dtype_expression(out_dtype_name)
        expected = {"out": ("(B, HQ, SQ, DV)", f"({out_dtype},)")}
        expected["lse"] = ("(B, HQ, SQ)", f"(DTYPE, {out_dtype}, np.dtype('float32'), np.dtype('float64'))")
        lines = []
        if gradients:
            lines.append(call.gradients.rstrip())
            shapes = {"dq": "q.shape", "dk": "k.shape", "dv": "v.shape"}
            shapes |= {g.tensor: f"{g.input}.shape" for g in observed}
            expected |= {g: (shapes[g], "(DTYPE,)") for g in grads}
        lines.append("failed = False")
        for name, (shape, dtypes_) in expected.items():
            guard = "if lse is not None:\n    " if name == "lse" else ""
            lines.append(f"{guard}failed |= report_shape_dtype({name!r}, {name}, {shape}, {dtypes_})")
        return said + "\n".join(lines) + "\nsys.exit(1 if failed else 0)\n"
    if check.repro == "rerun_bitwise":
        return said + (
            "first = out.copy()\n"
            + call.forward
            + "same = first.shape == out.shape and first.tobytes() == out.tobytes()\n"
            "print('a rerun on the same inputs is ' + ('bitwise identical' if same else 'DIFFERENT'))\n"
            "sys.exit(0 if same else 1)\n"
        )
    raise ValueError(f"no standalone observation for the {check.name} check (recipe {check.repro})")


def typed_skeleton(case: Case) -> AttentionInputs:
    """``case.skeleton()`` with its float inputs in the case's dtype, as the suite's are: what an
    adapter's ``standalone`` receives (an op's default Config depends on the dtype, e.g. tokamax's
    ``bind(...).default_config``). Values zero, broadcast: no cost."""
    skeleton = case.skeleton()
    dtype = dtypes.numpy_dtype(case.dtype)
    typed = {
        name: np.broadcast_to(np.asarray(array.flat[0], dtype), array.shape)
        for name in inputs.FLOAT_INPUTS
        if (array := getattr(skeleton, name)) is not None
    }
    return dataclasses.replace(skeleton, **typed)


def script(
    case: Case,
    check: CheckDeclaration,
    adapter: Any,
    recorded: Iterable[TensorMetrics] = (),
    reason: str = "",
    versions: str = "",
    gradients: bool = False,
) -> str:
    """The standalone repro for ``check`` on ``case`` (see the module docstring); ``recorded``:
    the tensors' metrics as judged (their tolerances are embedded); ``reason``: the check's
    reason, quoted for verdict checks; ``versions``: e.g. ``"jax 0.10.2"``, for the header;
    ``gradients``: the case's backward pass ran, so a verdict check looked at it too."""
    if not supports(check, adapter):
        raise ValueError(f"no standalone repro for the {check.name} check of {adapter.name}")
    call: StandaloneCall = adapter.standalone(typed_skeleton(case), case.spec)
    gradients = gradients and check.repro in SEES_GRADIENTS and call.gradients is not None
    backward = check.repro == "gradient_tensors" or gradients
    if backward and call.gradients is None:
        raise ValueError(f"{adapter.name} has a backward check but no standalone gradients call")
    draw_functions, draw_statements = inputs.script_draws(case, backward)
    mask_functions, visibility = answer_script.visibility(case)
    padding = _padding_lines(case)
    if padding:
        draw_functions.append(draws.dead_positions)
    observed = _observed_gradients(case, adapter.capabilities())
    dout = f"dout = {recipes.call_text(inputs.DOUT.call, case)}.astype(DTYPE)  # zero on rows that see no key"
    ref_functions, reference, reference_grads = answer_script.answer(
        case, backward, tuple(g.tensor for g in observed), dout
    )
    storage = _storage_lines(case)
    optional_floats = [name for name in inputs.FLOAT_INPUTS if name not in ("q", "k", "v")]
    out_dtype = adapter.capabilities().output_dtype(case.dtype)
    needs_ml_dtypes = bool({case.dtype, out_dtype} & set(dtypes.ML_DTYPES))
    header = (
        f'"""Standalone repro: the {check.name} check of {case.case_id}.\n\n'
        f"Subject: {call.note}.\n"
        f"Recorded with {versions or 'the versions in the report'}. Needs only NumPy"
        f"{', ml_dtypes' if needs_ml_dtypes else ''} and the subject's own module: python this_file.py\n"
        "Exit status: 1 while the bug is present, 0 once it is gone, 2 if the inputs redrawn here\n"
        "differ from the suite's (they are checked by SHA-256).\n"
        "Generated by attention-conformance from the case and the adapter's own code.\n"
        '"""\n'
    )
    imports = ["from __future__ import annotations", "", "import hashlib", "import sys", ""]
    imports += ["import numpy as np"] + (["import ml_dtypes"] if needs_ml_dtypes else [])
    imports += [line for line in call.imports if line not in imports]
    parts = [
        header,
        "\n".join(imports) + "\n",
        _section("helpers: the error, the inputs' digest, the verdict"),
        _source(metrics.abs_error, inputs_digest, check_tensor, *_verdict_helpers(check)),
        _section("the case"),
        _case_block(case),
        _section("inputs: drawn from SEED exactly as the suite drew them"),
        _source(*draw_functions, *mask_functions),
        "\n\n",
        draw_statements,
        visibility,
        padding,
        "q, k, v = (x.astype(DTYPE) for x in (q, k, v))  # the subject's dtype; the reference sees these\n",
        *(f"{name} = None if {name} is None else {name}.astype(DTYPE)\n" for name in optional_floats),
        storage,
        f"if inputs_digest({', '.join(inputs.FLOAT_INPUTS)}) != {_digest(case)!r}:\n"
        '    print("the inputs redrawn here differ from the suite\'s (another NumPy?): cannot reproduce")\n'
        f"    sys.exit({EXIT_INPUTS_DIFFER})\n",
        _section("the float64 answer (reference/dense.py: only what this case uses)"),
        _source(*ref_functions),
        "\n\n",
        reference,
        reference_grads,
    ]
    if check.repro == "call_raises":
        calls = (
            f"# The suite saw: {' '.join(reason.split())[:300]}\n"
            "try:\n" + textwrap.indent(call.forward, "    ") + "except Exception as error:\n"
            "    print(f'the call raised {type(error).__name__}: {error}')\n"
            "    sys.exit(0)\n"
        )
        verdict = (
            "print('the call returned normally, but the adapter declares that this case raises')\n"
            "sys.exit(1)\n"
        )
    elif check.repro in ("out_tensor", "lse_tensor"):
        calls, verdict = call.forward, _numeric_judgement(check, recorded)
    elif check.repro == "gradient_tensors":
        calls, verdict = call.gradients, _numeric_judgement(check, recorded)
    else:
        calls, verdict = (
            call.forward,
            _verdict_judgement(case, check, call, reason, gradients, observed, out_dtype),
        )
    # The inputs section may already define one of the adapter's helpers (K/V storage rounding).
    defined = {_defined_name(d) for d in re.findall(r"^(?:def \w+|[A-Z0-9_]+ =)", storage, re.M)}
    definitions = [d for d in call.definitions if _defined_name(d) not in defined]
    definitions = _used_definitions(definitions, call.setup + calls + verdict)
    parts += [
        _section("the subject, called exactly as its adapter calls it"),
        "\n\n".join(d.rstrip() for d in definitions) + ("\n\n\n" if definitions else ""),
        call.setup,
        calls,
        _section("the verdict, under the tolerance the suite judged with"),
        verdict,
    ]
    return "".join(parts)
