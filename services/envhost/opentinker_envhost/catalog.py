"""The games an EnvHost serves: the built-ins plus user games named in the `games` setting
("name=package.module:Class,other=pkg:Other"; "none" for built-ins only)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from opentinker_env import AsyncAbstractGame, GameClass
from opentinker_runtime.games import builtin_games, check_game_name, load_game_class
from opentinker_env.game import check_json_dict
from opentinker_envhost.errors import UnknownEnvironment
from opentinker_envhost.game_results import check_utf8_json, check_utf8_text

NO_USER_GAMES = "none"
BUILTIN_SOURCE = "builtin"
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True, kw_only=True)
class GameSpec:
    """One servable game and what ListEnvironments shows about it."""

    name: str
    cls: GameClass
    source: str
    description: str
    multi_turn: bool
    seats: tuple[str, ...]
    default_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, game_cls: GameClass, source: str) -> GameSpec:
        """Read the class's metadata once (so a bad default_config or description fails at
        startup, not in every ListEnvironments)."""
        config = game_cls.default_config()
        check_json_dict(config, f"{game_cls.__name__}.default_config()")
        check_utf8_json(config, f"{game_cls.__name__}.default_config()")
        description = check_utf8_text(game_cls.describe(), f"{game_cls.__name__}.describe()")
        return cls(name=name, cls=game_cls, source=source, description=description,
                   multi_turn=bool(game_cls.multi_turn), seats=tuple(game_cls.seats),
                   default_config=config)

    @property
    def is_async(self) -> bool:
        return issubclass(self.cls, AsyncAbstractGame)

    def reset_accepts(self, name: str) -> bool:
        """Whether reset() takes keyword `name` (or **kwargs)."""
        return _reset_accepts(self.cls, name)


@functools.cache
def _reset_accepts(game_cls: GameClass, name: str) -> bool:
    parameters = inspect.signature(game_cls.reset).parameters.values()
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


class GameCatalog:
    """Games by name, listed in name order."""

    def __init__(self, specs: Iterable[GameSpec]) -> None:
        self.specs = {spec.name: spec for spec in sorted(specs, key=lambda spec: spec.name)}

    @classmethod
    def from_setting(cls, games: str) -> GameCatalog:
        """Built-ins plus the user games of a `games` setting value (ValueError if invalid)."""
        builtins = [GameSpec.of(name, game_cls, BUILTIN_SOURCE) for name, game_cls in builtin_games().items()]
        users = [_user_spec(name, path) for name, path in parse_game_entries(games)]
        return cls([*builtins, *users])

    def get(self, name: str) -> GameSpec:
        if name not in self.specs:
            raise UnknownEnvironment(f"env_name: no environment named {name!r}; "
                                     f"known: {', '.join(self.specs)}")
        return self.specs[name]

    def page(self, page_size: int, page_token: str) -> tuple[list[GameSpec], str]:
        """Specs after `page_token` (the last name of the previous page); and the next token."""
        size = min(page_size, MAX_PAGE_SIZE) if page_size > 0 else DEFAULT_PAGE_SIZE
        after = [spec for name, spec in self.specs.items() if name > page_token]
        chosen = after[:size]
        return chosen, chosen[-1].name if len(after) > size else ""


def _user_spec(name: str, path: str) -> GameSpec:
    try:
        return GameSpec.of(name, load_game_class(path), path)
    except (ValueError, TypeError) as error:
        raise type(error)(f"{name}={path}: {error}") from error


def parse_game_entries(text: str) -> list[tuple[str, str]]:
    """[(name, import_path)] from "name=pkg.mod:Class,..."; ValueError naming the bad entry."""
    if text.strip().lower() == NO_USER_GAMES:
        return []
    entries = [_parse_entry(part.strip()) for part in text.split(",") if part.strip()]
    names = [name for name, _ in entries]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"game names listed twice: {', '.join(duplicates)}")
    return entries


def _parse_entry(entry: str) -> tuple[str, str]:
    name, sep, path = (part.strip() for part in entry.partition("="))
    if not sep or not path:
        raise ValueError(f"entry {entry!r} must look like name=package.module:Class")
    problem = check_game_name(name)
    if problem:
        raise ValueError(problem)
    if name in builtin_games():
        raise ValueError(f"{name!r} is a built-in game; choose another name")
    return name, path


def check_games_setting(text: str) -> str | None:
    """The settings check: None when every entry parses and imports to a game class."""
    try:
        GameCatalog.from_setting(text)
    except Exception as error:  # noqa: BLE001 - user code (imports, default_config) may raise anything
        known = isinstance(error, (ValueError, TypeError))
        return str(error) if known else f"{type(error).__name__}: {error}"
    return None
