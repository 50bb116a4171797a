"""The GitHub Actions workflows in ci/: what their jobs would do, read from the YAML itself.

The workflows' matrix job runs here for real (its `run:` steps with `lmsforge render` and the
repository's ci/build_matrix.py, no fetch), every other job is expanded over the matrix it names,
and each step's command is resolved from its expressions and `env:`. That is enough to check, per
job instance, what a runner would be asked to do: which runner labels, which lmsforge command
lines, which CUDA variant. The schema and shellcheck check needs the linters (see below).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from workflows import CI, EXPRESSION, WORKFLOWS, load

REPO = Path(__file__).resolve().parents[2]
BUILD_PUBLISH = CI / "build-publish.yml"
DEFAULT_TAGS = {"pytorch": "v2.6.0", "tensorflow": "v2.14.1"}
GPU_LABEL = re.compile(r"gpu|cuda", re.IGNORECASE)


# --- a small reading of GitHub Actions: expressions, the matrix job, matrix expansion ---------

class _Context(dict):
    """`inputs.x`, `matrix.x`, `steps.s.outputs.x`: attribute access, '' when missing."""

    def __getattr__(self, name: str):
        value = self.get(name, "")
        return _Context(value) if isinstance(value, dict) else value


def evaluate(expression: str, contexts: dict):
    """The value of one `${{ }}` expression with the operators these workflows use."""
    python = expression.replace("&&", " and ").replace("||", " or ")
    python = re.sub(r"!(?!=)", " not ", python)
    namespace = {name: _Context(value) for name, value in contexts.items()}
    namespace.update(fromJSON=json.loads, toJSON=lambda v: json.dumps(dict(v)),
                     true=True, false=False, null=None)
    return eval(python, {"__builtins__": {}}, namespace)  # our own YAML's expressions only


def substitute(text: str, contexts: dict) -> str:
    def value(match: re.Match) -> str:
        result = evaluate(match.group(1), contexts)
        return result if isinstance(result, str) else json.dumps(result)
    return EXPRESSION.sub(value, str(text))


def _shims(bin_dir: Path) -> dict[str, str]:
    """`python` and `lmsforge` on PATH, both this interpreter with this checkout."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, line in (("python", f'exec "{sys.executable}" "$@"'),
                       ("python3", f'exec "{sys.executable}" "$@"'),
                       ("lmsforge", f'exec "{sys.executable}" -m lmsforge "$@"')):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{line}\n")
        shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def run_matrix_job(workflow: dict, inputs: dict, work: Path) -> dict[str, str]:
    """Run the `matrix` job's own `run:` steps (not the install) and return its outputs."""
    job = workflow["jobs"]["matrix"]
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "ci").exists():
        (work / "ci").symlink_to(CI)
    env = _shims(work / "bin")
    contexts = {"inputs": inputs, "steps": {}}
    for step in job["steps"]:
        if "run" not in step or "pip install" in step["run"]:
            continue
        step_env = {**(workflow.get("env") or {}), **(job.get("env") or {}),
                    **(step.get("env") or {})}
        env.update({k: substitute(v, contexts) for k, v in step_env.items()})
        output = work / "github_output"
        output.write_text("")
        env["GITHUB_OUTPUT"] = str(output)
        script = substitute(step["run"], contexts)
        proc = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if line)
        if "id" in step:
            contexts["steps"][step["id"]] = {"outputs": outputs}
    return {k: substitute(v, contexts) for k, v in (job.get("outputs") or {}).items()}


@dataclass
class Step:
    run: str  # the script with expressions and env variables resolved
    env: dict[str, str]

    def commands(self, program: str = "lmsforge") -> list[list[str]]:
        """Every PROGRAM command line of the script, as argv (after env expansion)."""
        joined = self.run.replace("\\\n", " ")
        found = []
        for line in joined.splitlines():
            line = line.strip()
            if line.startswith(program + " "):
                expanded = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                                  lambda m: self.env.get(m.group(1), m.group(0)), line)
                found.append(shlex.split(expanded, comments=True))
        return found


@dataclass
class Instance:
    """One job of the run: a job with one of its matrix entries."""
    job: str
    matrix: dict
    labels: list[str]
    steps: list[Step] = field(default_factory=list)

    def commands(self, subcommand: str) -> list[list[str]]:
        return [argv for step in self.steps for argv in step.commands()
                if len(argv) > 1 and argv[1] == subcommand]


def expand(workflow: dict, inputs: dict, outputs: dict[str, str]) -> list[Instance]:
    """Every job instance a dispatch with INPUTS runs, with the steps whose `if:` holds."""
    instances = []
    secrets = {"LMS_CHANNEL_URL": "quetz://conda.example.org/lms",
               "LMS_CHANNEL_TOKEN": "token"}
    for name, job in workflow["jobs"].items():
        if name == "matrix":
            continue
        matrix = (job.get("strategy") or {}).get("matrix") or {}
        include = matrix.get("include", [{}])
        entries = (evaluate(EXPRESSION.fullmatch(include.strip()).group(1),
                            {"needs": {"matrix": {"outputs": outputs}}})
                   if isinstance(include, str) else include)
        for entry in entries:
            contexts = {"inputs": inputs, "matrix": entry, "secrets": secrets}
            runs_on = job["runs-on"]
            labels = [substitute(x, contexts)
                      for x in (runs_on if isinstance(runs_on, list) else [runs_on])]
            base_env = {k: substitute(v, contexts)
                        for k, v in {**(workflow.get("env") or {}),
                                     **(job.get("env") or {})}.items()}
            instance = Instance(name, entry, labels)
            for step in job["steps"]:
                if "run" not in step:
                    continue
                if "if" in step and not evaluate(
                        EXPRESSION.sub(r"\1", str(step["if"])), contexts):
                    continue
                env = {**base_env, **{k: substitute(v, contexts)
                                      for k, v in (step.get("env") or {}).items()}}
                instance.steps.append(Step(substitute(step["run"], contexts), env))
            instances.append(instance)
    return instances


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Instance]]:
    """ci/build-publish.yml dispatched for each framework at its default tag."""
    workflow = load(BUILD_PUBLISH)
    work = tmp_path_factory.mktemp("build-publish")
    cache = work / "cache"
    result = {}
    old_cache = os.environ.get("LMSFORGE_CACHE_DIR")
    os.environ["LMSFORGE_CACHE_DIR"] = str(cache)
    try:
        for framework, tag in DEFAULT_TAGS.items():
            inputs = {"framework": framework, "tag": tag}
            outputs = run_matrix_job(workflow, inputs, work / framework)
            result[framework] = expand(workflow, inputs, outputs)
    finally:
        if old_cache is None:
            os.environ.pop("LMSFORGE_CACHE_DIR", None)
        else:
            os.environ["LMSFORGE_CACHE_DIR"] = old_cache
    return result


def _cuda(instance: Instance) -> str:
    assert "cuda" in instance.matrix, (
        f"job {instance.job} builds, tests or publishes without a `cuda` key in its matrix "
        f"entry {instance.matrix}; these checks need it")
    return instance.matrix["cuda"]


def _works(instance: Instance) -> bool:
    return any(instance.commands(c) for c in ("build", "test", "publish", "verify"))


# --- the properties issue 27 item 6 asks for ----------------------------------------------------

@pytest.mark.parametrize("framework", DEFAULT_TAGS)
def test_each_platform_and_cuda_publishes_once(runs, framework):
    """libtorch is Python-independent: one publish per (platform, CUDA), not one per Python."""
    publishers: dict[tuple[str, str], list[dict]] = {}
    built = set()
    for instance in runs[framework]:
        if instance.commands("build"):
            built.add((instance.matrix.get("platform"), _cuda(instance)))
        if instance.commands("publish"):
            key = (instance.matrix.get("platform"), _cuda(instance))
            publishers.setdefault(key, []).append(instance.matrix)
    assert built, "no job builds anything"
    assert set(publishers) == built
    repeated = {k: len(v) for k, v in publishers.items() if len(v) != 1}
    assert not repeated, f"(platform, CUDA) published by more than one job: {repeated}"


@pytest.mark.parametrize("framework", DEFAULT_TAGS)
def test_no_cpu_variant_is_tested_on_a_gpu_runner(runs, framework):
    for instance in runs[framework]:
        for argv in instance.commands("test"):
            if _cuda(instance) == "None":
                gpu = [label for label in instance.labels if GPU_LABEL.search(label)]
                assert not gpu, f"CPU package tested on GPU runner {gpu}: {shlex.join(argv)}"
                assert "--cpu" in argv, shlex.join(argv)
            else:
                assert "--gpu" in argv, shlex.join(argv)


@pytest.mark.parametrize("framework", DEFAULT_TAGS)
def test_each_cuda_version_has_its_own_runner_label(runs, framework):
    users: dict[str, set[str]] = {}
    for instance in filter(_works, runs[framework]):
        cuda = _cuda(instance)
        labels = [label for label in instance.labels if label != "self-hosted"]
        if cuda != "None":
            assert any(cuda.replace(".", "") in label.replace(".", "") for label in labels), (
                f"job {instance.job} for CUDA {cuda} runs on {labels}: no label names {cuda}")
        for label in labels:
            users.setdefault(label, set()).add(cuda)
    shared = {label: sorted(c) for label, c in users.items()
              if len(c) > 1 and label.startswith("lms-")}
    assert not shared, f"runner labels shared by several CUDA variants: {shared}"


def _unrunnable_levels(framework: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Levels the framework's level runner skips even on a host with a GPU."""
    import importlib

    from lmsforge.verify.levels import SKIPPED

    module = importlib.import_module(f"lmsforge.frameworks.{framework}")
    monkeypatch.setattr(module, "have_cuda_device", lambda: (True, "a GPU"), raising=False)
    never = set()
    for level in ("core-sim", "core-gpu", "full"):
        try:  # the level's own runner, without its inputs (dispatch would fetch them)
            result = module._RUNNERS[level](None)
        except (AttributeError, TypeError):  # it reads the context: it runs somewhere
            continue
        if result.status == SKIPPED:
            never.add(level)
    return never


@pytest.mark.parametrize("framework", DEFAULT_TAGS)
def test_required_verify_levels_can_run_where_they_run(runs, framework, monkeypatch):
    never = _unrunnable_levels(framework, monkeypatch)
    if framework == "tensorflow":
        assert "core-gpu" in never  # TensorFlow has no GPU harness (frameworks/tensorflow.py)
    checked = 0
    for instance in runs[framework]:
        for argv in instance.commands("verify"):
            if "--require" not in argv:
                continue
            level = argv[argv.index("--level") + 1] if "--level" in argv else "apply"
            assert level not in never, (
                f"{framework} always skips {level}; `verify --require` fails: {shlex.join(argv)}")
            if level == "core-gpu":
                assert any(GPU_LABEL.search(label) for label in instance.labels), (
                    f"{level} required on a runner without a GPU label: {instance.labels}")
            checked += 1
    assert checked, "no verify --require step"


@pytest.mark.parametrize("framework", DEFAULT_TAGS)
def test_no_leg_needs_rattler_build_on_ppc64le(runs, framework):
    """py-rattler-build has no ppc64le wheel and lmsforge has no rattler-build binary backend, so
    no job builds on a ppc64le runner; docs/building.md says how ppc64le is built instead."""
    for instance in runs[framework]:
        if instance.commands("build"):
            assert not any("ppc64le" in label for label in instance.labels), instance.labels
            assert instance.matrix.get("platform") != "linux-ppc64le", instance.matrix
    text = (REPO / "docs" / "building.md").read_text()
    assert "py-rattler-build" in text and "ci/build-publish.yml" in text


def test_scripts_take_inputs_and_secrets_from_env():
    """No `${{ }}` inside a script: dispatch inputs and secrets reach it through `env:` only."""
    for path in WORKFLOWS:
        for name, job in load(path)["jobs"].items():
            for step in job["steps"]:
                assert not EXPRESSION.search(step.get("run", "")), (path.name, name, step["run"])


@pytest.mark.parametrize("framework", DEFAULT_TAGS)
def test_every_lmsforge_command_is_real(runs, framework, tmp_path, monkeypatch):
    """Each lmsforge command line parses with lmsforge's own CLI (names, options, choices)."""
    from lmsforge.cli import main

    monkeypatch.chdir(tmp_path)
    lines = [argv for instance in runs[framework] for step in instance.steps
             for argv in step.commands()]
    lines += [argv for path in WORKFLOWS if path != BUILD_PUBLISH
              for job in load(path)["jobs"].values() for step in job["steps"]
              for argv in Step(step.get("run", ""), {}).commands()]
    assert lines
    for argv in lines:
        args = []
        for arg in argv[1:]:
            if "*" in arg:  # a glob in the script: stands for files the job made
                arg = arg.replace("*", "x")
                Path(arg).parent.mkdir(parents=True, exist_ok=True)
                Path(arg).touch()
            args.append(arg)
        assert not any("$" in a for a in args), f"unresolved variable in {shlex.join(argv)}"
        with main.make_context("lmsforge", list(args), resilient_parsing=False) as ctx:
            protected = (ctx._protected_args if hasattr(ctx, "_protected_args")
                         else ctx.protected_args)  # click < 8.2
            name, *rest = [*protected, *ctx.args]
            command = main.get_command(ctx, name)
            assert command is not None, f"no such command: {shlex.join(argv)}"
            try:
                command.make_context(name, rest, parent=ctx)
            except click.ClickException as exc:
                pytest.fail(f"{shlex.join(argv)}: {exc.format_message()}")


def test_build_artifacts_are_the_whole_local_channel():
    """The artifact keeps the channel's <subdir>/ folders, which the publish job's collect reads
    (a `out/*/*.conda` upload would drop them: its root is the files' common folder)."""
    jobs = load(BUILD_PUBLISH)["jobs"]
    checked = 0
    for name, job in jobs.items():
        channels = [argv[argv.index("--channel") + 1]
                    for step in job["steps"] for argv in Step(step.get("run", ""), {}).commands()
                    if argv[1] == "build" and "--profile" in argv
                    and argv[argv.index("--profile") + 1] == "full"]
        uploads = [step["with"]["path"] for step in job["steps"]
                   if str(step.get("uses", "")).startswith("actions/upload-artifact")]
        if channels:
            assert uploads and all(u.rstrip("/") in channels for u in uploads), (name, uploads)
            checked += 1
    assert checked == 1


# --- ci/build_matrix.py: the files the one publish per (platform, CUDA) takes ------------------

def test_collect_publishes_every_package_once_and_libtorch_from_one_build(tmp_path):
    """Every build's packages, as the artifacts would hold them, go out once in all."""
    sys.path.insert(0, str(CI))
    try:
        import build_matrix
    finally:
        sys.path.remove(str(CI))
    env = _shims(tmp_path / "bin")
    render = subprocess.run(
        ["lmsforge", "--cache-dir", str(tmp_path / "cache"), "render", "-f", "pytorch",
         "-t", "v2.6.0", "--profile", "full", "--platform", "linux-64", "--json"],
        env=env, capture_output=True, text=True, check=True)
    rendered = json.loads(render.stdout)
    builds, groups = build_matrix.matrices(rendered, "pytorch")
    stems = {}
    for r in rendered:
        for combination, outputs in zip(r["matrix"], r["outputs"]):
            name = (f"full-{r['platform']}-{build_matrix.flavour(combination['cuda_version'])}"
                    f"-py{combination['python']}")
            for stem in outputs:
                package = tmp_path / "artifacts" / name / r["platform"] / f"{stem}.conda"
                package.parent.mkdir(parents=True, exist_ok=True)
                package.write_text(name)  # other bytes in every build, as rattler-build makes
                stems.setdefault(stem, set()).add(name)
    assert {b["artifact"] for b in builds} == {p.name for p in (tmp_path / "artifacts").iterdir()}
    published: dict[str, list[str]] = {}
    for group in groups:
        downloaded = tmp_path / "dl" / group["flavour"]
        for name in group["builds"]:  # what download-artifact's pattern fetches
            shutil.copytree(tmp_path / "artifacts" / name, downloaded / name)
        for path in build_matrix.collect(group, downloaded, tmp_path / "out" / group["flavour"]):
            published.setdefault(path.name, []).append(path.read_text())
    assert set(published) == {f"{s}.conda" for s in stems}
    assert all(len(v) == 1 for v in published.values()), published
    libtorch = {k: v for k, v in published.items() if k.startswith("libtorch-")}
    assert len(libtorch) == 3  # CPU, CUDA 12.4, CUDA 12.6 for linux-64
    for name, (source,) in libtorch.items():
        assert source.endswith("-py3.9"), (name, source)  # the group's first build
    assert all(len(stems[f"{g['shared'][0]}"]) == 5 for g in groups)
