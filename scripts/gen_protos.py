"""Generate the Python API package from protos/ (the only way stubs are made).

    python scripts/gen_protos.py            # regenerate packages/api/opentinker_api
    python scripts/gen_protos.py --out DIR  # generate elsewhere (the freshness test)

Proto package `opentinker.<area>.v1` becomes Python package
`opentinker_api.<area>.v1` holding `<file>_pb2.py`, `<file>_pb2.pyi` and
`<file>_pb2_grpc.py`. protoc writes imports as `from opentinker.<area>.v1 ...`;
they are rewritten to `opentinker_api.<area>.v1`. Hand-written modules of the
package (`conventions.py`: what the wire needs beyond the protos) are kept.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
DEFAULT_OUT = ROOT / "packages" / "api" / "opentinker_api"
HAND_WRITTEN = ("conventions.py",)
API_INIT_DOC = ('"""OpenTinker\'s gRPC API: stubs generated from protos/ (do not edit; run scripts/gen_protos.py),\n'
                'and `conventions`, what the wire needs beyond the protos (hand-written)."""\n')
IMPORT_PATTERN = re.compile(r"^(from|import) opentinker\.", re.MULTILINE)


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def run_protoc(out_dir: Path) -> None:
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the errors above")


def rewrite_imports(package_dir: Path) -> None:
    for path in package_dir.rglob("*.py*"):
        text = path.read_text()
        path.write_text(IMPORT_PATTERN.sub(r"\1 opentinker_api.", text))


def add_init_files(package_dir: Path) -> None:
    (package_dir / "__init__.py").write_text(API_INIT_DOC)
    for directory in package_dir.rglob("*"):
        if directory.is_dir():
            (directory / "__init__.py").touch()


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        run_protoc(tmp_dir)
        generated = tmp_dir / "opentinker"
        rewrite_imports(generated)
        add_init_files(generated)
        kept = {name: (out / name).read_text() for name in HAND_WRITTEN if (out / name).is_file()}
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(generated, out)
        for name, text in kept.items():
            (out / name).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="package directory to (re)create")
    args = parser.parse_args(argv)
    generate(args.out)
    print(f"generated {len(proto_files())} protos into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
