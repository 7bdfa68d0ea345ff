"""The committed Python stubs are exactly what scripts/gen_protos.py makes from protos/."""

import filecmp
from pathlib import Path

from tests._scripts import REPO_ROOT, load_script

gen_protos = load_script("gen_protos")


def relative_files(root: Path) -> set[str]:
    """Generated files under root (the package's hand-written modules left out)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.name not in gen_protos.HAND_WRITTEN}


def test_committed_stubs_match_a_fresh_generation(tmp_path):
    fresh = tmp_path / "api"
    gen_protos.generate(fresh)
    committed = gen_protos.DEFAULT_OUT
    assert relative_files(fresh) == relative_files(committed), "run: python scripts/gen_protos.py"
    stale = [f for f in relative_files(fresh) if not filecmp.cmp(fresh / f, committed / f, shallow=False)]
    assert stale == [], f"stale generated files {stale}; run: python scripts/gen_protos.py"


def test_every_proto_has_python_pb2_pyi_and_grpc_modules():
    for proto in (REPO_ROOT / "protos").rglob("*.proto"):
        relative = proto.relative_to(REPO_ROOT / "protos" / "opentinker").with_suffix("")
        base = gen_protos.DEFAULT_OUT / relative
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert Path(f"{base}{suffix}").is_file(), f"missing {base}{suffix}"


def test_generated_imports_point_into_the_api_package():
    from opentinker_api.scheduler.v1 import scheduler_service_pb2

    assert scheduler_service_pb2.DESCRIPTOR.package == "opentinker.scheduler.v1"
    job_file = scheduler_service_pb2.DESCRIPTOR.dependencies
    assert any(d.name == "opentinker/scheduler/v1/job.proto" for d in job_file)
    source = (gen_protos.DEFAULT_OUT / "scheduler" / "v1" / "scheduler_service_pb2.py").read_text()
    assert "from opentinker_api.common.v1 import" in source
    assert "from opentinker.common" not in source
