#!/usr/bin/env bash
# Fetch, on a machine with a package index, the wheels scripts/gpu_check.sh installs on a GPU machine
# without one: the dependencies reinforge's import of its config, engine, learner and run code needs
# that a stock CUDA + PyTorch image (torch, transformers, numpy, pyyaml, rich, safetensors, ...) lacks.
# Into .gpu_wheels/ (git-ignored), for CPython 3.12 on x86-64 Linux, binary wheels only, no
# dependencies resolved (each is named). Test modules that need more (openai, datasets, reasoning-gym,
# wandb) fail to import there and gpu_check.sh reports them without failing.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(
    pydantic pydantic-core annotated-types typing-inspection   # reinforge.config
    jsonschema jsonschema-specifications referencing rpds-py    # tool and response schemas
    fastapi starlette uvicorn sniffio                           # the gateway the run pipeline imports
    bm25s                                                       # the search tool's index
)
# The versions this environment runs (pydantic pins its pydantic-core exactly): name==version where installed.
mapfile -t PINNED < <("${PYTHON:-python3}" -c '
import sys
from importlib.metadata import PackageNotFoundError, version
for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        print(name)
' "${PACKAGES[@]}")
"${PYTHON:-python3}" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu_wheels "${PINNED[@]}"
du -sh .gpu_wheels
