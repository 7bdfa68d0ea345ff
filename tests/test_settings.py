"""Settings: parsing by type, defaults, every kind of error, typo detection, describe_settings."""

from __future__ import annotations

import enum
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from opentinker_runtime.auth.api_keys import new_api_key
from opentinker_runtime.core.errors import SettingsError
from opentinker_runtime.core.settings import (
    ServiceSettings,
    address_setting,
    describe_settings,
    load_settings,
    port_setting,
    redis_url_setting,
    setting,
)
from opentinker_coordinator.settings import CoordinatorSettings
from opentinker_envhost.settings import EnvHostSettings
from opentinker_rollout.settings import RolloutSettings
from opentinker_scheduler.settings import SchedulerSettings
from opentinker_trainer.settings import TrainerSettings


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass(frozen=True, kw_only=True)
class DemoSettings(ServiceSettings):
    """A settings class with one field of every supported kind."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_DEMO_"
    IGNORED_ENV_VARS: ClassVar[frozenset[str]] = frozenset({"OPENTINKER_DEMO_CLIENT_ONLY"})

    port: int = port_setting(50999)
    enabled: bool = setting(False, "A switch.")
    mode: Mode = setting(Mode.SAFE, "An enum.")
    ratio: float = setting(0.5, "A fraction.", min=0.0, max=1.0)
    workdir: Path = setting(Path("/tmp/demo"), "A path.")
    peer_address: str = address_setting("127.0.0.1:50051", "A peer.")
    redis_url: str = redis_url_setting("The shared Redis.")
    auth: str = setting("disabled", "Off, so the tests of other fields need no key.",
                        choices=("api_keys", "disabled"), env="OPENTINKER_AUTH")


ALL_SERVICE_SETTINGS = (SchedulerSettings, TrainerSettings, RolloutSettings, EnvHostSettings,
                        CoordinatorSettings)


def load(**environ: str) -> DemoSettings:
    return load_settings(DemoSettings, environ)


def error_of(**environ: str) -> str:
    with pytest.raises(SettingsError) as caught:
        load(**environ)
    return str(caught.value)


def test_defaults_when_nothing_is_set() -> None:
    settings = load()
    assert settings == DemoSettings()
    assert (settings.host, settings.port, settings.log_level, settings.log_format) == (
        "127.0.0.1", 50999, "info", "json")
    assert settings.grace_seconds == 5.0
    assert settings.redis_url == "redis://127.0.0.1:6390/0"


def test_values_are_parsed_by_field_type() -> None:
    settings = load(OPENTINKER_DEMO_PORT="0", OPENTINKER_DEMO_ENABLED="yes",
                    OPENTINKER_DEMO_MODE="FAST", OPENTINKER_DEMO_RATIO="0.25",
                    OPENTINKER_DEMO_WORKDIR="/data/x", OPENTINKER_DEMO_GRACE_SECONDS="2",
                    OPENTINKER_DEMO_LOG_LEVEL="DEBUG", OPENTINKER_DEMO_HOST="0.0.0.0")
    assert settings.port == 0 and settings.enabled is True and settings.mode is Mode.FAST
    assert settings.ratio == 0.25 and settings.workdir == Path("/data/x")
    assert settings.grace_seconds == 2.0 and settings.log_level == "debug"
    assert settings.host == "0.0.0.0"


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), ("1", True), ("yes", True), ("TRUE", True), (" no ", False),
    ("false", False), ("0", False), ("No", False),
])
def test_bool_words(raw: str, expected: bool) -> None:
    assert load(OPENTINKER_DEMO_ENABLED=raw).enabled is expected


def test_shared_redis_url_is_read_without_the_service_prefix() -> None:
    settings = load(OPENTINKER_REDIS_URL="redis://10.0.0.5:6379/2")
    assert settings.redis_url == "redis://10.0.0.5:6379/2"
    error = error_of(OPENTINKER_DEMO_REDIS_URL="redis://10.0.0.5:6379/2")
    assert "OPENTINKER_DEMO_REDIS_URL is not a known setting" in error
    assert "did you mean OPENTINKER_REDIS_URL?" in error


@pytest.mark.parametrize(("var", "raw", "allowed"), [
    ("OPENTINKER_DEMO_PORT", "abc", "expected an integer from 0 to 65535"),
    ("OPENTINKER_DEMO_PORT", "65536", "expected a value from 0 to 65535"),
    ("OPENTINKER_DEMO_PORT", "-1", "expected a value from 0 to 65535"),
    ("OPENTINKER_DEMO_GRACE_SECONDS", "0", "expected a value > 0"),
    ("OPENTINKER_DEMO_GRACE_SECONDS", "soon", "expected a number > 0"),
    ("OPENTINKER_DEMO_GRACE_SECONDS", "nan", "must be a finite number"),
    ("OPENTINKER_DEMO_GRACE_SECONDS", "inf", "must be a finite number"),
    ("OPENTINKER_DEMO_LOG_LEVEL", "verbose", "expected one of: debug, info, warning, error"),
    ("OPENTINKER_DEMO_LOG_FORMAT", "xml", "expected one of: json, console"),
    ("OPENTINKER_DEMO_ENABLED", "maybe", "expected one of: true, 1, yes, false, 0, no"),
    ("OPENTINKER_DEMO_MODE", "turbo", "expected one of: fast, safe"),
    ("OPENTINKER_DEMO_RATIO", "1.5", "expected a value from 0.0 to 1.0"),
    ("OPENTINKER_DEMO_HOST", "", "must not be empty"),
    ("OPENTINKER_DEMO_PEER_ADDRESS", "localhost", "must be host:port"),
    ("OPENTINKER_DEMO_PEER_ADDRESS", "localhost:0", "must be host:port"),
    ("OPENTINKER_REDIS_URL", "http://127.0.0.1:6379", "must start with redis://"),
    ("OPENTINKER_REDIS_URL", "redis://host:99999/0", "must name a host and an optional port"),
])
def test_bad_value_names_variable_value_and_what_is_allowed(var: str, raw: str, allowed: str) -> None:
    error = error_of(**{var: raw})
    assert f"{var}={raw!r} is invalid" in error
    assert allowed in error


def test_good_peer_addresses_and_redis_urls_are_accepted() -> None:
    for address in ("10.1.2.3:50051", "[::1]:50051", "dns:///scheduler:50051", "unix:/tmp/s.sock"):
        assert load(OPENTINKER_DEMO_PEER_ADDRESS=address).peer_address == address
    for url in ("redis://:secret@redis:6379/0", "rediss://r.example:6380", "unix:///tmp/r.sock"):
        assert load(OPENTINKER_REDIS_URL=url).redis_url == url


def test_every_problem_is_reported_at_once() -> None:
    error = error_of(OPENTINKER_DEMO_PORT="x", OPENTINKER_DEMO_LOG_LEVEL="loud",
                     OPENTINKER_DEMO_PROT="1")
    assert error.startswith("invalid DemoSettings (3 problems):")
    assert "OPENTINKER_DEMO_PORT='x'" in error and "OPENTINKER_DEMO_LOG_LEVEL='loud'" in error
    assert "OPENTINKER_DEMO_PROT" in error


def test_unknown_variable_under_the_prefix_suggests_the_closest_setting() -> None:
    error = error_of(OPENTINKER_DEMO_GRACE_SECOND="3")
    assert "OPENTINKER_DEMO_GRACE_SECOND is not a known setting" in error
    assert "did you mean OPENTINKER_DEMO_GRACE_SECONDS?" in error


def test_unknown_variable_far_from_any_setting_lists_the_known_ones() -> None:
    error = error_of(OPENTINKER_DEMO_ZZZZZZZZZZZZZZ="3")
    assert "did you mean" not in error
    assert "known settings: OPENTINKER_DEMO_HOST, OPENTINKER_DEMO_PORT" in error


def test_ignored_and_foreign_variables_are_not_typos() -> None:
    settings = load(OPENTINKER_DEMO_CLIENT_ONLY="x", OPENTINKER_OTHER_PORT="1", PATH="/bin")
    assert settings == DemoSettings()


def test_passwords_in_bad_urls_are_not_echoed() -> None:
    error = error_of(OPENTINKER_REDIS_URL="http://:hunter2@redis:6379/0")
    assert "hunter2" not in error
    assert "http://***@redis:6379/0" in error


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(SettingsError, match=r"OPENTINKER_DEMO_PORT='70000' is invalid"):
        DemoSettings(port=70000)
    with pytest.raises(SettingsError, match="expected a value of type int, got str"):
        DemoSettings(port="50051")  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="expected a value of type int, got bool"):
        DemoSettings(port=True)


def test_settings_are_frozen_and_keyword_only() -> None:
    settings = DemoSettings()
    with pytest.raises(FrozenInstanceError):
        settings.port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        DemoSettings("127.0.0.1")  # type: ignore[misc]


def test_a_class_without_prefix_or_doc_is_a_programming_error() -> None:
    @dataclass(frozen=True, kw_only=True)
    class NoPrefix(ServiceSettings):
        pass

    with pytest.raises(TypeError, match="must set ENV_PREFIX"):
        load_settings(NoPrefix, {})


def test_describe_settings_lists_every_field_with_type_default_and_doc() -> None:
    rows = {row.env_var: row for row in describe_settings(DemoSettings)}
    assert list(rows)[:5] == ["OPENTINKER_DEMO_HOST", "OPENTINKER_DEMO_PORT",
                              "OPENTINKER_DEMO_LOG_LEVEL", "OPENTINKER_DEMO_LOG_FORMAT",
                              "OPENTINKER_DEMO_GRACE_SECONDS"]
    assert rows["OPENTINKER_DEMO_PORT"][1:3] == ("int from 0 to 65535", "50999")
    assert rows["OPENTINKER_DEMO_ENABLED"].default == "false"
    assert rows["OPENTINKER_DEMO_MODE"].type == "one of: fast, safe"
    assert rows["OPENTINKER_DEMO_LOG_LEVEL"].type == "one of: debug, info, warning, error"
    assert rows["OPENTINKER_REDIS_URL"].doc == "The shared Redis."
    assert all(row.doc for row in rows.values())


@pytest.mark.parametrize(("cls", "port"), list(zip(ALL_SERVICE_SETTINGS, range(50051, 50056))))
def test_service_settings_defaults_and_prefixes(cls: type[ServiceSettings], port: int) -> None:
    settings = load_settings(cls, {"OPENTINKER_AUTH": "disabled"})
    assert settings.port == port
    assert settings.host == "127.0.0.1" and settings.grace_seconds == 5.0
    name = cls.__name__.removesuffix("Settings").upper()
    assert cls.ENV_PREFIX == f"OPENTINKER_{name}_"
    assert all(row.doc for row in describe_settings(cls))


def test_peer_addresses_match_the_contract() -> None:
    off = {"OPENTINKER_AUTH": "disabled"}
    coordinator = load_settings(CoordinatorSettings, {**off,
        "OPENTINKER_COORDINATOR_SCHEDULER_ADDRESS": "s:1", "OPENTINKER_COORDINATOR_TRAINER_ADDRESS": "t:2",
        "OPENTINKER_COORDINATOR_ROLLOUT_ADDRESS": "r:3"})
    assert (coordinator.scheduler_address, coordinator.trainer_address,
            coordinator.rollout_address) == ("s:1", "t:2", "r:3")
    rollout = load_settings(RolloutSettings, {**off, "OPENTINKER_ROLLOUT_ENVHOST_ADDRESS": "e:4"})
    assert rollout.envhost_address == "e:4" and rollout.scheduler_address == "127.0.0.1:50051"
    scheduler = load_settings(SchedulerSettings, {**off, "OPENTINKER_REDIS_URL": "redis://r:6379/1"})
    assert scheduler.redis_url == "redis://r:6379/1"
    with pytest.raises(SettingsError, match="OPENTINKER_TRAINER_CPU_SLOTS='0' is invalid"):
        load_settings(TrainerSettings, {**off, "OPENTINKER_TRAINER_CPU_SLOTS": "0"})


@pytest.mark.parametrize("cls", ALL_SERVICE_SETTINGS)
def test_auth_is_on_by_default_and_needs_the_service_key(cls: type[ServiceSettings]) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(cls, {})
    assert "OPENTINKER_API_KEY is required while OPENTINKER_AUTH=api_keys" in str(caught.value)
    key = new_api_key()
    settings = load_settings(cls, {"OPENTINKER_API_KEY": key})
    assert settings.auth_enabled and settings.api_key == key
    assert not load_settings(cls, {"OPENTINKER_AUTH": "disabled"}).auth_enabled


def test_the_api_key_never_shows_in_repr_logs_or_errors() -> None:
    key = new_api_key()
    settings = load(OPENTINKER_API_KEY=key, OPENTINKER_REDIS_URL="redis://:hunter2@10.0.0.5:6379/0")
    assert key not in repr(settings)
    loggable = settings.loggable()
    assert loggable["api_key"] == "***" and key not in str(loggable) and "hunter2" not in str(loggable)
    wrong = key[:-1] + "!"  # not a key: the error says so without echoing it
    error = error_of(OPENTINKER_API_KEY=wrong)
    assert "OPENTINKER_API_KEY='***' is invalid: not an OpenTinker API key" in error
    assert wrong not in error


def test_the_redis_password_comes_from_a_file_and_never_shows(tmp_path: Path) -> None:
    secret = tmp_path / "redis_password"
    secret.write_text("s3cret-from-a-docker-secret\n")
    settings = load(OPENTINKER_REDIS_PASSWORD_FILE=str(secret))
    assert settings.redis_password == "s3cret-from-a-docker-secret"  # the trailing newline dropped
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.loggable())
    assert load().redis_password is None  # unset: no password (the embedded redis of `opentinker up`)
    missing = error_of(OPENTINKER_REDIS_PASSWORD_FILE=str(tmp_path / "absent"))
    assert "OPENTINKER_REDIS_PASSWORD_FILE=" in missing and "cannot read the file" in missing
    secret.write_text("\n")
    assert "the file is empty" in error_of(OPENTINKER_REDIS_PASSWORD_FILE=str(secret))


def test_a_client_with_the_password_file_reaches_a_redis_that_requires_it(tmp_path: Path) -> None:
    import asyncio

    import redis

    from opentinker_runtime.core.embedded_redis import EmbeddedRedis
    from opentinker_runtime.core.redis_store import connect, ping

    secret = tmp_path / "redis_password"
    secret.write_text("correct horse\n")
    settings = load(OPENTINKER_REDIS_PASSWORD_FILE=str(secret))

    async def scenario(url: str) -> None:
        without = connect(url)
        with_file = connect(url, password=settings.redis_password)
        try:
            with pytest.raises(redis.AuthenticationError):
                await without.ping()
            assert await ping(with_file)
        finally:
            await without.aclose()
            await with_file.aclose()

    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        redis.Redis.from_url(server.url).config_set("requirepass", "correct horse")
        asyncio.run(scenario(server.url))
