"""docs/job_spec.md is generated from the protos, must be fresh, and must cover every field."""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import descriptor

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import job_spec_from_dict
from tests._scripts import load_script

gen_job_spec_docs = load_script("gen_job_spec_docs")


def spec_paths(message: descriptor.Descriptor, prefix: str = "") -> Iterator[str]:
    """Every field path under `message`, walked here independently of the generator."""
    for field in message.fields:
        path = f"{prefix}{field.name}"
        yield path
        nested = field.message_type
        if nested is None or nested.GetOptions().map_entry or nested.full_name.startswith("google.protobuf."):
            continue
        yield from spec_paths(nested, f"{path}[]." if field.is_repeated else f"{path}.")


def spec_with(path: str, value: object) -> dict:
    """A spec dict that sets only `path` (`agents[].model...` goes into a one-entry list)."""
    head, _, rest = path.partition(".")
    inner = spec_with(rest, value) if rest else value
    return {head[:-2]: [inner]} if head.endswith("[]") else {head: inner}


def test_job_spec_doc_is_fresh() -> None:
    assert gen_job_spec_docs.DOC_PATH.read_text() == gen_job_spec_docs.render(), (
        "docs/job_spec.md is stale: run python scripts/gen_job_spec_docs.py")
    assert gen_job_spec_docs.main(["--check"]) == 0


def test_every_field_of_the_job_spec_has_a_row() -> None:
    text = gen_job_spec_docs.DOC_PATH.read_text()
    paths = list(spec_paths(job_pb2.JobSpec.DESCRIPTOR))
    assert "training.group_size" in paths and "agents[].algorithm.loss.kl_placement" in paths
    missing = [path for path in paths if f"\n| `{path}` | " not in text]
    assert missing == []


def test_rows_carry_the_proto_comments_and_types() -> None:
    text = gen_job_spec_docs.DOC_PATH.read_text()
    assert ("| `training.group_size` | int32 | Episodes per problem (G in GRPO). Required for RL jobs: "
            "1..1024 (the Scheduler refuses 0); SFT jobs ignore it. |") in text
    assert "| `type` | enum `JobType`: `RL`, `SFT`, `INFERENCE`, `SESSION` |" in text
    # a trailing comment (enum values) and a nested enum
    assert "| `RL` | `JOB_TYPE_RL` | rollouts in an environment + policy-gradient updates |" in text
    assert "| `ROUND_ROBIN` | `PAIRING_ROUND_ROBIN` | Every ordered choice" in text
    assert "| `training.max_retries` | int32, *optional* |" in text


def test_every_documented_enum_short_name_is_accepted_by_the_spec_loader() -> None:
    comments = gen_job_spec_docs.comments_by_name(gen_job_spec_docs.compiled_protos())
    enum_rows = [row for row in gen_job_spec_docs.field_rows(comments) if row.enum_values]
    assert len(enum_rows) >= 10
    for row in enum_rows:
        for short_name in row.enum_values:
            job_spec_from_dict(spec_with(row.path, short_name))  # raises SpecError if refused


def test_check_fails_on_a_stale_doc(tmp_path, monkeypatch) -> None:
    stale = tmp_path / "job_spec.md"
    stale.write_text(gen_job_spec_docs.render().replace("Episodes per problem", "Episodes per prompt"))
    monkeypatch.setattr(gen_job_spec_docs, "DOC_PATH", stale)
    assert gen_job_spec_docs.main(["--check"]) == 1
