"""The game catalog and the `games` setting: parsing, validation at start-up, paging."""

from __future__ import annotations

import pytest

from opentinker_runtime.core.errors import SettingsError
from opentinker_runtime.core.settings import load_settings
from opentinker_envhost.catalog import GameCatalog, GameSpec, parse_game_entries
from opentinker_runtime.games.registry import builtin_games
from opentinker_envhost.errors import UnknownEnvironment
from opentinker_envhost.settings import EnvHostSettings
from tests.envhost.games import Echo, catalog_with_test_games


def test_default_catalog_is_the_builtins() -> None:
    catalog = GameCatalog.from_setting(EnvHostSettings(auth="disabled").games)
    assert list(catalog.specs) == sorted(builtin_games()) and "math" in catalog.specs
    assert all(catalog.get(name).source == "builtin" for name in builtin_games())
    with pytest.raises(UnknownEnvironment, match="known: .*math"):
        catalog.get("chess")


def test_user_games_load_by_import_path_from_the_environment() -> None:
    settings = load_settings(EnvHostSettings, {
        "OPENTINKER_AUTH": "disabled", "OPENTINKER_ENVHOST_GAMES": " echo = tests.envhost.games:Echo , seated=tests.envhost.games:Seated"})
    catalog = GameCatalog.from_setting(settings.games)
    assert list(catalog.specs) == sorted({"echo", "seated", *builtin_games()})
    echo = catalog.get("echo")
    assert (echo.source, echo.description, echo.multi_turn) == (
        "tests.envhost.games:Echo", "Repeat the word, `turns` times.", True)
    assert catalog.get("seated").seats == ("black", "white")


@pytest.mark.parametrize(("value", "problem"), [
    ("echo", "entry 'echo' must look like name=package.module:Class"),
    ("Echo=tests.envhost.games:Echo", "game name 'Echo' must match"),
    ("math=tests.envhost.games:Echo", "'math' is a built-in game"),
    ("a=tests.envhost.games:Echo,a=tests.envhost.games:Seated", "game names listed twice: a"),
    ("a=tests.envhost.games", "a=tests.envhost.games: 'tests.envhost.games' is not an import path"),
    ("a=tests.envhost.no_such:Echo", "cannot import module 'tests.envhost.no_such'"),
    ("a=tests.envhost.games:GameSpec", "is not a concrete subclass"),
])
def test_a_bad_games_setting_is_a_settings_error_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(EnvHostSettings, {"OPENTINKER_AUTH": "disabled", "OPENTINKER_ENVHOST_GAMES": value})
    assert "OPENTINKER_ENVHOST_GAMES=" in str(caught.value) and problem in str(caught.value)


def test_none_means_builtins_only() -> None:
    assert parse_game_entries("none") == parse_game_entries(" NONE ") == []


def test_paging_walks_every_game_once() -> None:
    catalog = catalog_with_test_games()
    names, token = [], ""
    while True:
        page, token = catalog.page(3, token)
        names += [spec.name for spec in page]
        if not token:
            break
    assert names == sorted(catalog.specs)
    assert [s.name for s in catalog.page(0, "")[0]] == names  # 0 = the default page size
    assert catalog.page(2, names[-1]) == ([], "")


def test_metadata_utf8_cannot_carry_fails_at_startup_not_in_list_environments() -> None:
    class Surrogate(Echo):
        @classmethod
        def default_config(cls) -> dict:
            return {"word": "bad \udcff"}

    with pytest.raises(ValueError, match=r"Surrogate.default_config\(\) is not valid UTF-8 text"):
        GameSpec.of("surrogate", Surrogate, "tests:Surrogate")
