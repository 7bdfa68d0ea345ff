"""docs/settings.md is generated from the settings classes and must be fresh."""

from __future__ import annotations

from opentinker_runtime.core.settings import describe_settings
from tests._scripts import load_script

gen_settings_docs = load_script("gen_settings_docs")


def test_settings_doc_is_fresh() -> None:
    assert gen_settings_docs.DOC_PATH.read_text() == gen_settings_docs.render(), (
        "docs/settings.md is stale: run python scripts/gen_settings_docs.py")
    assert gen_settings_docs.main(["--check"]) == 0


def test_settings_doc_lists_every_variable_of_every_service() -> None:
    text = gen_settings_docs.render()
    for name, cls in gen_settings_docs.SERVICES:
        assert f"## {name} (`python -m opentinker_{name}`)" in text
        for row in describe_settings(cls):
            assert f"| `{row.env_var}` | {row.type} | `{row.default}` |" in text
    assert "| `OPENTINKER_COORDINATOR_ROLLOUT_ADDRESS` | host:port | `127.0.0.1:50053` |" in text


def test_check_fails_on_a_stale_doc(tmp_path, monkeypatch) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(gen_settings_docs.render().replace("50051", "50000"))
    monkeypatch.setattr(gen_settings_docs, "DOC_PATH", stale)
    assert gen_settings_docs.main(["--check"]) == 1
