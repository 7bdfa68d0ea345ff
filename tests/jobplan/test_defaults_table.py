"""Each default of `defaults.DEFAULTS` is what resolving a spec gives, and docs/job_spec.md shows
every row of that table (it is generated from it)."""

from __future__ import annotations

import re

import pytest

from opentinker_runtime.jobplan import defaults, resolve_job_plan
from tests._scripts import load_script
from tests.jobplan.specs import least_spec

gen_job_spec_docs = load_script("gen_job_spec_docs")
CASES = [(row, job) for row in defaults.DEFAULTS for job in row.jobs]


def attribute(value: object, path: str) -> object:
    """`policies[0].loss.clip_low` of `value`."""
    for part in path.split("."):
        name, index = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part).groups()
        value = getattr(value, name)
        if index is not None:
            value = value[int(index)]
    return value


@pytest.mark.parametrize(("row", "job"), CASES, ids=[f"{job}:{row.field}:{row.when}" for row, job in CASES])
def test_the_plan_applies_each_default_of_the_table(row: defaults.Default, job: str) -> None:
    plan = resolve_job_plan(least_spec(job, **row.example), job_id=defaults.EXAMPLE_JOB_ID)
    assert attribute(plan, row.plan) == row.value


def test_every_field_the_table_names_is_a_field_of_the_job_spec() -> None:
    text = gen_job_spec_docs.DOC_PATH.read_text()
    for row in defaults.DEFAULTS:
        assert f"\n| `{row.field}` | " in text, row.field


def test_docs_job_spec_shows_the_table_row_by_row() -> None:
    text = gen_job_spec_docs.DOC_PATH.read_text()
    section = text[text.index("## Defaults"):]
    for row in defaults.DEFAULTS:
        assert gen_job_spec_docs.default_row(row) in section, row
