"""scripts/device-bench: argument handling, the plan it prints, and the no-accelerator error."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest

from reports import jax_versions

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device-bench"


def run(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _accelerator_here() -> bool:
    patterns = ("/dev/nvidia[0-9]*", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*")
    return any(glob.glob(pattern) for pattern in patterns)


@pytest.mark.skipif(_accelerator_here(), reason="this machine has an accelerator")
@pytest.mark.parametrize("kind", [[], ["--kind", "gpu"], ["--kind", "tpu"]])
def test_no_accelerator_is_one_line_and_exit_2(kind: list[str]) -> None:
    result = run(*kind)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("device-bench: ") and "Traceback" not in result.stderr


@pytest.mark.parametrize(("kind", "extra"), [("gpu", "cuda12"), ("tpu", "tpu")])
def test_dry_run_plans_venv_install_benchmarks_and_conformance(kind: str, extra: str) -> None:
    result = run("--kind", kind, "--dry-run", "--", "-k", "xla")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"device-{kind}-jax-{jax_versions.NEWEST}" in out
    assert f"jax[{extra}]=={jax_versions.NEWEST}" in out
    assert "pytest-benchmark" in out and "absl-py" in out  # the project's test group and the pins table
    assert "--bench-execution native" in out and "benchmarks.json" in out
    assert out.rstrip().endswith(
        "--profile ci --report-dir=" + str(ROOT / "reports" / f"device-{kind}-jax-{jax_versions.NEWEST}")
    ), "the plan must end with the conformance run (dropped only by --no-conformance)"


def test_options_reach_the_plan(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    result = run(
        "--kind",
        "gpu",
        "--dry-run",
        "--jax",
        "0.7.2",
        "--extra",
        "cuda13",
        "--find-links",
        str(wheels),
        "--out-root",
        str(tmp_path),
        "--no-conformance",
    )
    assert result.returncode == 0, result.stderr
    assert "jax[cuda13]==0.7.2" in result.stdout and f"--no-index --find-links {wheels}" in result.stdout
    assert str(tmp_path / "device-gpu-jax-0.7.2") in result.stdout
    assert "conformance" not in result.stdout.split("->", 1)[1].replace("conformance(", "")


def test_installed_uses_this_python_without_a_venv() -> None:
    result = run("--kind", "gpu", "--dry-run", "--installed", "--python", sys.executable)
    assert result.returncode == 0, result.stderr
    import jax

    assert f"device-gpu-jax-{jax.__version__}" in result.stdout
    assert "create the venv" not in result.stdout and "pip install" not in result.stdout


@pytest.mark.parametrize("args", [["--jax", "banana"], ["--jax", "0.4.38", "--installed"], ["--kind", "npu"]])
def test_bad_arguments_exit_2_with_usage(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2 and "error:" in result.stderr and "Traceback" not in result.stderr


def test_backend_check_refuses_a_cpu_only_jax() -> None:
    """The check the script runs inside its interpreter, before any benchmark: here JAX is on CPU."""
    from kernels.runtime.jax_runtime import default_backend

    if default_backend() != "cpu":
        pytest.skip("JAX runs on an accelerator here")
    source = SCRIPT.read_text()
    namespace: dict = {"__name__": "device_bench_under_test", "__file__": str(SCRIPT)}
    exec(compile(source, str(SCRIPT), "exec"), namespace)
    result = subprocess.run(
        [sys.executable, "-c", namespace["_BACKEND_CHECK"], "gpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"device-bench: jax {__import__('jax').__version__} runs on 'cpu', not 'gpu': "
        "install jax with the accelerator extra (e.g. jax[cuda12], jax[tpu])"
    ]


def _script_namespace() -> dict:
    namespace: dict = {"__name__": "device_bench_under_test", "__file__": str(SCRIPT)}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), namespace)
    return namespace


def test_gpu_subjects_plan_runs_only_the_gpu_only_subjects_at_ci(tmp_path: Path) -> None:
    result = run("--gpu-subjects", "--dry-run", "--out-root", str(tmp_path), "--", "-x")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"device-bench: gpu, jax {jax_versions.NEWEST}")  # --gpu-subjects means a GPU
    assert "--bench-execution" not in out and "--impl all" not in out  # no benchmarks, no `all` run
    subjects = ",".join(_script_namespace()["GPU_SUBJECTS"])
    folder = tmp_path / f"device-gpu-jax-{jax_versions.NEWEST}" / "gpu-subjects"
    assert out.rstrip().endswith(f"-m conformance --impl '{subjects}' --profile ci --report-dir={folder} -x")
    assert f"tokamax=={jax_versions.tokamax_for(jax_versions.NEWEST)}" in out  # the venv gets tokamax


def test_gpu_subjects_are_the_variants_no_cpu_runs_natively_and_a_cpu_interprets_or_lacks_them() -> None:
    from kernels.registry import resolve
    from kernels.runtime.jax_runtime import default_backend
    from kernels.subjects import variants

    subjects = _script_namespace()["GPU_SUBJECTS"]
    assert subjects == tuple(v.name for v in variants() if "cuda" in v.platforms and "cpu" not in v.platforms)
    assert {"cudnn", "pallas_mgpu", "tokamax[impl=mosaic_gpu]", "tokamax[impl=cudnn]"} <= set(subjects)
    adapters = {name: resolve(name) for name in subjects}  # a misspelt name raises here
    if default_backend() == "gpu":
        pytest.skip("a GPU is attached")
    interpreted = {v.name for v in variants() if "interpreted" in v.platforms}
    for name, adapter in adapters.items():
        availability = adapter.availability()
        if name in interpreted:  # pallas_gpu, tokamax's Triton: the generic interpreter here
            assert not availability.available or availability.execution == "interpret", name
            continue
        assert not availability.available and "GPU" in availability.reason, (name, availability.reason)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-subjects", "--kind", "tpu"], "drop --kind tpu"),
        (["--gpu-subjects", "--no-conformance"], "drop --no-conformance"),
    ],
)
def test_gpu_subjects_refuses_a_tpu_or_no_conformance(args: list[str], message: str) -> None:
    result = run(*args, "--dry-run")
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
