"""The Dockerfile's shape: multi-stage, non-root, runtime dependencies only, the ports and
entrypoint the manifests rely on. Building the image is a command (docs/operations.md,
"Deploy"), not a test: it needs a Docker daemon and the base image's registry."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.manifests import BASE, KUSTOMIZE, REPO, build, container, find

OVERLAY_WITH_GATEWAY = KUSTOMIZE / "overlays" / "standalone"

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
# Packages that would mean a toolchain in the final image (the builder stage has gcc).
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|cmake)\b")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    stage: int  # 0 = before the first FROM; 1 = first stage, ...


def parse(text: str) -> list[Instruction]:
    """Dockerfile instructions with line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    stage = 0
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        instructions.append(Instruction(keyword.upper(), arguments.strip(), stage))
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            env.update(part.split("=", 1) for part in shlex.split(instruction.arguments))
    return env


def test_parse_joins_continuations_and_counts_stages() -> None:
    parsed = parse("FROM a AS b\n# note\nRUN x \\\n    && y\nFROM c\nUSER 1\n")
    assert [(i.keyword, i.arguments, i.stage) for i in parsed] == [
        ("FROM", "a AS b", 1),
        ("RUN", "x && y", 1),
        ("FROM", "c", 2),
        ("USER", "1", 2),
    ]


def test_multi_stage_with_the_venv_copied_from_the_builder(
    instructions: list[Instruction],
) -> None:
    froms = [i for i in instructions if i.keyword == "FROM"]
    assert len(froms) >= 2
    assert froms[0].arguments.endswith(" AS builder")
    copies = [i.arguments for i in final_stage(instructions) if i.keyword == "COPY"]
    assert copies == ["--from=builder /opt/kinference /opt/kinference"]


def test_final_stage_runs_as_a_numeric_non_root_user(instructions: list[Instruction]) -> None:
    users = [i.arguments for i in final_stage(instructions) if i.keyword == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit() and int(uid) > 0
    assert gid.isdigit() and int(gid) > 0


def test_the_deployment_runs_as_the_image_user(instructions: list[Instruction]) -> None:
    user = next(i.arguments for i in final_stage(instructions) if i.keyword == "USER")
    pod = find(build(BASE), "Deployment", "kinference")["spec"]["template"]["spec"]
    assert user == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"


def test_entrypoint_ports_and_environment(instructions: list[Instruction]) -> None:
    stage = final_stage(instructions)
    entrypoints = [i.arguments for i in stage if i.keyword == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoints] == [["kinference"]]
    commands = [json.loads(i.arguments) for i in stage if i.keyword == "CMD"]
    assert commands == [["serve"]]  # the picker unless told otherwise
    exposed = {int(port) for i in stage if i.keyword == "EXPOSE" for port in i.arguments.split()}
    assert exposed == {9002, 9090, 8080}
    manifests = build(OVERLAY_WITH_GATEWAY)
    picker = container(find(manifests, "Deployment", "kinference"))
    gateway = container(find(manifests, "Deployment", "kinference-gateway"))
    assert "args" not in picker and gateway["args"] == ["gateway"]
    ports = {p["containerPort"] for c in (picker, gateway) for p in c["ports"]}
    assert ports == exposed
    env = env_of(stage)
    assert env["KINFERENCE_LISTEN"] == "0.0.0.0:9002"
    assert env["KINFERENCE_METRICS_LISTEN"] == "0.0.0.0:9090"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].startswith("/opt/kinference/bin:")


def test_only_runtime_dependencies_and_a_compiler_in_the_builder_only(
    instructions: list[Instruction],
) -> None:
    """The builder compiles the wheel's optional C extensions (kinference/native) with gcc
    and libc's headers and checks they import; the final stage has no toolchain."""
    runs = [i.arguments for i in instructions if i.keyword == "RUN"]
    parts = [part.strip() for run in runs for part in run.split("&&")]
    installs = [part for part in parts if " install " in part and "pip" in part]
    assert len(installs) == 2, "dependencies, then the wheel"
    assert installs[0].endswith("--requirement /tmp/requirements.txt")
    assert installs[1].endswith("--no-deps /wheels/kinference-*.whl")
    native = (
        "kinference.native._chain, kinference.native._prefix, kinference.native._ttft, "
        "kinference.native._scan"
    )
    assert f'/opt/kinference/bin/python -c "import {native}"' in parts
    builder = [i.arguments for i in instructions if i.stage == 1 and i.keyword == "RUN"]
    apt = [run for run in builder if "apt-get install" in run]
    assert len(apt) == 1
    install = next(p for p in apt[0].split("&&") if "apt-get install" in p).split()
    assert "--no-install-recommends" in install
    assert {word for word in install if not word.startswith("-")} - {"apt-get", "install"} == {
        "gcc",
        "libc6-dev",
    }
    assert "rm -rf /var/lib/apt/lists/*" in apt[0]
    final_runs = [i.arguments for i in final_stage(instructions) if i.keyword == "RUN"]
    for run in final_runs:
        assert not COMPILERS.search(run), run
    assert all("pip" not in run and "apt" not in run for run in final_runs)


def test_requirements_are_the_runtime_ones_plus_the_chosen_extras(
    instructions: list[Instruction], tmp_path: Path
) -> None:
    """Runs the builder's requirements one-liner on this repository's pyproject.toml."""
    extras = next(
        i.arguments for i in instructions if i.keyword == "ARG" and "EXTRAS" in i.arguments
    )
    chosen = shlex.split(extras.partition("=")[2])[0].split()
    assert chosen == ["k8s", "gateway", "kv-events"]
    run = next(i.arguments for i in instructions if i.keyword == "RUN" and "tomllib" in i.arguments)
    words = shlex.split(run.split("&&")[1].partition(">")[0])
    assert words[:2] == ["python3", "-c"] and words[3:] == ["${EXTRAS}"]
    (tmp_path / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    printed = subprocess.run(
        [sys.executable, "-c", words[2], *chosen],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    wanted = [*project["dependencies"], *optional["k8s"], *optional["gateway"]]
    wanted += optional["kv-events"]
    assert printed == [d for d in wanted if not d.startswith("kinference")]
    assert not set(printed) & set(optional["dev"])


def test_oci_labels(instructions: list[Instruction]) -> None:
    labels = " ".join(i.arguments for i in final_stage(instructions) if i.keyword == "LABEL")
    for key in ("title", "description", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_dockerignore_keeps_only_what_the_wheel_needs(instructions: list[Instruction]) -> None:
    rules = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*"
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    sources = [
        part
        for i in instructions
        if i.keyword == "COPY" and not i.arguments.startswith("--from")
        for part in i.arguments.split()[:-1]
    ]
    assert sources and set(sources) <= allowed
    # pyproject's readme must be in the context, or the wheel build fails.
    assert "README.md" in allowed and (REPO / "README.md").exists()
    assert Path(REPO / "kinference").is_dir()
