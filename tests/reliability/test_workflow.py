"""The CI workflow (.github/workflows/conformance.yml) names only commands that exist: nox
sessions of noxfile.py, options the suite, merge and gate accept, shard specs that parse, and
artifact names its merge step finds. A renamed option or session fails here, not on CI. It gates
jax and tokamax together: each side is a (jax, tokamax) pair the tokamax table accepts."""

from __future__ import annotations

import ast
import fnmatch
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.plan.shards import parse_shard
from reports import jax_versions

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "conformance.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def nox_sessions() -> dict[str, set[str]]:
    """Session name -> its parametrize argument names, read from noxfile.py's decorators."""
    sessions: dict[str, set[str]] = {}
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = [d for d in node.decorator_list if isinstance(d, ast.Call)]
        names = [ast.unparse(d.func) for d in decorators]
        bare = [ast.unparse(d) for d in node.decorator_list if not isinstance(d, ast.Call)]
        if "nox.session" in names or "nox.session" in bare:  # `@nox.session(...)` or `@nox.session`
            sessions[node.name] = {
                name
                for d in decorators
                if ast.unparse(d.func) == "nox.parametrize"
                for name in _argument_names(d.args[0])
                if name != "python"  # nox's own: the interpreter each parameter set needs
            }
    return sessions


def _argument_names(node: ast.expr) -> list[str]:
    """nox.parametrize's names: "jax", "jax, tokamax" or ["jax", "tokamax"]."""
    if isinstance(node, ast.List | ast.Tuple):
        return [e.value for e in node.elts]
    return [n.strip() for n in node.value.split(",")]


def substitute(text: str, values: dict[str, str]) -> str:
    """The workflow's ${{ ... }} and $VAR as CI would fill them for one job."""

    def expression(match: re.Match) -> str:
        inner = match.group(1)
        if inner in values:
            return values[inner]
        fallback = re.fullmatch(r"inputs\.(\w+) \|\| '([^']*)'", inner)
        if fallback:
            return values.get(f"inputs.{fallback.group(1)}", fallback.group(2))
        raise AssertionError(f"the test does not know how CI fills ${{{{ {inner} }}}}")

    text = EXPRESSION.sub(expression, text)
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), text)


def job_values(workflow: dict, **matrix: object) -> dict[str, str]:
    values = {f"matrix.{k}": str(v) for k, v in matrix.items()}
    values["github.run_id"] = "4242"  # what GitHub fills in: the run's number
    values.update({k: substitute(str(v), values) for k, v in workflow["env"].items()})
    return values


def commands(job: dict, values: dict[str, str]) -> list[list[str]]:
    """Every shell command of a job's run steps, filled in and split like a shell would."""
    found = []
    for step in job["steps"]:
        for line in substitute(step.get("run", ""), values).replace("\\\n", " ").splitlines():
            line = line.split(">>")[0].split("||")[0].strip()
            if line:
                found.append(shlex.split(line))
    return found


def matrix_combos(matrix: dict) -> list[dict]:
    """The jobs a strategy matrix makes, as GitHub expands it: every combination of its lists, then
    each ``include`` entry's extra keys added to the combinations whose own keys it matches."""
    keys = [k for k in matrix if k != "include"]
    combos = [{}]
    for key in keys:
        combos = [{**c, key: v} for c in combos for v in matrix[key]]
    for extra in matrix.get("include", []):
        for combo in combos:
            if all(combo[k] == v for k, v in extra.items() if k in keys):
                combo.update({k: v for k, v in extra.items() if k not in keys})
    return combos


def nox_calls(workflow: dict) -> list[tuple[str, list[str], list[str]]]:
    """(job, nox's own args, the session's posargs) for every nox command of every job."""
    calls = []
    for name, job in workflow["jobs"].items():
        combos = matrix_combos(job.get("strategy", {}).get("matrix", {}))
        for combo in combos:
            values = job_values(workflow, **combo)
            values = {**values, **{f"matrix.{k}": substitute(str(v), values) for k, v in combo.items()}}
            for argv in commands(job, values):
                if argv[0] == "nox":
                    split = argv.index("--") if "--" in argv else len(argv)
                    calls.append((name, argv[1:split], argv[split + 1 :]))
    return calls


def help_text(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_workflow_runs_each_version_in_shards_then_merges_and_gates(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    inputs = triggers["workflow_dispatch"]["inputs"]
    assert {"base", "candidate", "base_tokamax", "candidate_tokamax"} <= set(inputs)
    shard_job, final = workflow["jobs"]["conformance"], workflow["jobs"]["merge-and-gate"]
    assert final["needs"] == "conformance" and "cancelled()" in final["if"]
    assert shard_job["strategy"]["fail-fast"] is False
    assert len(shard_job["strategy"]["matrix"]["shard"]) == int(workflow["env"]["SHARDS"])
    for name in ("BASE", "CANDIDATE"):
        version = substitute(workflow["env"][name], {})
        assert jax_versions.parse_version(version) is not None, version
        assert version == inputs[name.lower()]["default"]  # the nightly run is the dispatch default
        tokamax = substitute(workflow["env"][f"{name}_TOKAMAX"], {})
        assert tokamax == inputs[f"{name.lower()}_tokamax"]["default"]
        assert jax_versions.tokamax_problem(tokamax, version) is None, (name, version, tokamax)


def test_every_nox_session_the_workflow_names_exists(workflow):
    sessions = nox_sessions()
    calls = nox_calls(workflow)
    assert {"conformance", "merge", "matrix", "gate"} <= {
        re.match(r"[\w-]+", args[args.index("-s") + 1]).group(0) for _, args, _ in calls
    }
    for job, args, _ in calls:
        session = args[args.index("-s") + 1]
        name, _, params = session.partition("(")
        assert name in sessions, f"{job}: nox -s {session}: no such session in noxfile.py"
        for param in re.findall(r"(\w+)=", params):
            assert param in sessions[name], f"{job}: {session}: {name} is not parametrized by {param}"


def test_every_option_the_workflow_gives_is_one_the_command_accepts(workflow):
    helps = {
        "conformance": help_text("-m", "pytest", "conformance", "-p", "no:cacheprovider"),
        "merge": help_text("-m", "reports", "merge"),
        "gate": help_text("-m", "reports", "gate"),
        "matrix": help_text("-m", "reports", "matrix"),
    }
    for job, args, posargs in nox_calls(workflow):
        name = args[args.index("-s") + 1].partition("(")[0]
        for option in (a.partition("=")[0] for a in posargs if a.startswith("--")):
            assert re.search(rf"(^|\s|,){re.escape(option)}\b", helps[name], re.M), f"{job}: {name} {option}"
        if "--shard" in posargs:
            assert parse_shard(posargs[posargs.index("--shard") + 1]) in {(1, 2), (2, 2)}
            # a dev or thorough profile draws its cases from the seed: every shard needs the same one
            assert "--hypothesis-seed" in posargs, f"{job}: shards without one shared --hypothesis-seed"


def side_pairs(workflow: dict, **inputs: str) -> dict[str, tuple[str, str]]:
    """Each side's (jax, tokamax), as the env block gives them for a run with these inputs."""
    env = dispatch_env(workflow, **inputs)
    return {side: (env[side], env[f"{side}_TOKAMAX"]) for side in ("BASE", "CANDIDATE")}


def dispatch_env(workflow: dict, **inputs: str) -> dict[str, str]:
    """The workflow's env block and inputs as CI fills them for a dispatch with these inputs."""
    values = {"github.run_id": "4242", **{f"inputs.{k}": v for k, v in inputs.items()}}
    return {**values, **{k: substitute(str(v), values) for k, v in workflow["env"].items()}}


def test_each_side_runs_its_jax_and_tokamax_pair_and_the_gate_compares_the_two_pairs(workflow):
    inputs = {"base": "0.9.2", "base_tokamax": "0.0.10", "candidate": "0.10.2", "candidate_tokamax": "0.0.12"}
    pairs = side_pairs(workflow, **inputs)
    assert pairs == {"BASE": ("0.9.2", "0.0.10"), "CANDIDATE": ("0.10.2", "0.0.12")}
    combos = matrix_combos(workflow["jobs"]["conformance"]["strategy"]["matrix"])
    values = {f"inputs.{k}": v for k, v in inputs.items()}
    ran = set()
    for combo in combos:
        filled = {k: substitute(str(v), values) for k, v in combo.items()}
        ran.add((filled["side"], filled["jax"], filled["tokamax"]))
        job_commands = commands(
            workflow["jobs"]["conformance"], {f"matrix.{k}": v for k, v in filled.items()}
        )
        (session,) = [argv[argv.index("-s") + 1] for argv in job_commands if argv[0] == "nox"]
        assert jax_versions.selected_pair(session) == (filled["jax"], filled["tokamax"]), session
    assert ran == {("base", *pairs["BASE"]), ("candidate", *pairs["CANDIDATE"])}
    final = commands(workflow["jobs"]["merge-and-gate"], dispatch_env(workflow, **inputs))
    (gate,) = [argv for argv in final if argv[:3] == ["nox", "-s", "gate"]]
    folders = [a for a in gate[gate.index("--") + 1 :] if not a.startswith("-")][:2]
    assert folders == [jax_versions.report_folder(*pairs[side]) for side in ("BASE", "CANDIDATE")]


def test_the_merge_step_finds_every_shard_artifact_and_the_cache_path_is_noxs(workflow):
    from reports.bisection.installs import env_name

    shard_job = workflow["jobs"]["conformance"]
    uploads = [s for s in shard_job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    artifacts = set()
    for combo in matrix_combos(shard_job["strategy"]["matrix"]):
        values = job_values(workflow, **combo)
        values.update({f"matrix.{k}": substitute(str(v), values) for k, v in combo.items()})
        artifacts.add(substitute(uploads[0]["with"]["name"], values))
        folder = jax_versions.report_folder(values["matrix.jax"], values["matrix.tokamax"])
        assert substitute(uploads[0]["with"]["path"], values).rstrip("/") == folder
    merges = [
        argv for argv in commands(workflow["jobs"]["merge-and-gate"], job_values(workflow)) if "merge" in argv
    ]
    for jax, tokamax in side_pairs(workflow).values():
        folder = jax_versions.report_folder(jax, tokamax)
        merge = next(m for m in merges if m[m.index("--") + 1] == folder)
        pattern = merge[-1].removeprefix("shards/")
        expected = [f"{Path(folder).name}-shard-{k}" for k in (1, 2)]
        assert sorted(fnmatch.filter(artifacts, pattern)) == expected
        venv = f".nox/{env_name(jax, tokamax)}/jax-cache"
        cache = next(s for s in shard_job["steps"] if s.get("uses", "").startswith("actions/cache"))
        assert fnmatch.fnmatch(venv, cache["with"]["path"])
