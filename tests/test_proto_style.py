"""The API follows the Buf style rules on every .proto (checked on compiled descriptors)."""

import textwrap
from pathlib import Path

import pytest

from tests._scripts import REPO_ROOT, load_script

lint_protos = load_script("lint_protos")


def test_every_proto_follows_the_style_rules():
    assert lint_protos.lint(REPO_ROOT / "protos") == []


def test_all_six_areas_have_a_versioned_package():
    areas = {p.parent.parent.name for p in (REPO_ROOT / "protos").rglob("*.proto")}
    assert areas == {"common", "scheduler", "trainer", "rollout", "envhost", "coordinator"}


def write_proto(root: Path, relative: str, body: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))


BAD_SERVICE = """
    syntax = "proto3";
    package opentinker.demo.v1;
    service Demo {
      rpc GetThing(GetThingRequest) returns (Thing);
      rpc OtherThing(GetThingRequest) returns (OtherThingResponse);
      rpc ListThings(ListThingsRequest) returns (ListThingsResponse);
      rpc CreateThing(CreateThingRequest) returns (CreateThingResponse);
    }
    enum Color { RED = 0; COLOR_BLUE = 1; }
    message Thing { string BadField = 1; }
    message GetThingRequest {}
    message OtherThingResponse {}
    message ListThingsRequest { int32 page_size = 1; }
    message ListThingsResponse {}
    message CreateThingRequest {}
    message CreateThingResponse {}
"""


@pytest.mark.parametrize(
    "expected",
    [
        "name must be PascalCase and end in 'Service'",
        "response type must be opentinker.demo.v1.GetThingResponse",
        "opentinker.demo.v1.GetThingRequest is already used by Demo.GetThing",
        "enum Color must start with COLOR_UNSPECIFIED = 0",
        "enum value Color.RED must be UPPER_SNAKE with prefix COLOR_",
        "field Thing.BadField must be lower_snake_case",
        "List requests need page_token",
        "List responses need next_page_token",
        "CreateThing must take a request_id",
        "must live in demo_service.proto",
    ],
)
def test_lint_reports_each_kind_of_violation(tmp_path, expected):
    write_proto(tmp_path, "opentinker/demo/v1/things.proto", BAD_SERVICE)
    violations = lint_protos.lint(tmp_path)
    assert any(expected in v for v in violations), violations


def test_lint_reports_a_package_that_does_not_mirror_its_folder(tmp_path):
    write_proto(tmp_path, "opentinker/demo/v1/x.proto", 'syntax = "proto3";\npackage opentinker.other.v1;\n')
    write_proto(tmp_path, "opentinker/demo/v1/y.proto", 'syntax = "proto3";\npackage opentinker.demo;\n')
    violations = lint_protos.lint(tmp_path)
    assert any("folder must mirror package 'opentinker.other.v1'" in v for v in violations)
    assert any("package 'opentinker.demo' must look like opentinker.<area>.v1" in v for v in violations)
