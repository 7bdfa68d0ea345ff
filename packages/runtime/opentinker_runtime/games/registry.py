"""Games known by name: the built-ins, and user games loaded by import path ("pkg.mod:Class")."""

from __future__ import annotations

import importlib
import re

from opentinker_env.game import GameClass, is_game_class
from opentinker_runtime.games.gomoku_game import GomokuGame
from opentinker_runtime.games.guess_number_game import GuessNumberGame
from opentinker_runtime.games.nim_game import NimGame
from opentinker_runtime.games.math_game import MathGame
from opentinker_runtime.games.math_tool_game import MathToolGame

GAME_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
IMPORT_PATH_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class GameLoadError(ValueError):
    """An import path does not name a concrete AbstractGame/AsyncAbstractGame class."""


def builtin_games() -> dict[str, GameClass]:
    """Built-in games by name."""
    return {"math": MathGame, "math_tool": MathToolGame, "guess_number": GuessNumberGame, "nim": NimGame,
            "gomoku": GomokuGame}


def load_game_class(import_path: str) -> GameClass:
    """The class at "package.module:ClassName" (nested names allowed after the colon)."""
    if not IMPORT_PATH_RE.match(import_path):
        raise GameLoadError(f"{import_path!r} is not an import path like 'mypkg.games:MyGame'")
    module_name, _, attribute = import_path.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as error:
        raise GameLoadError(f"cannot import module {module_name!r}: "
                            f"{type(error).__name__}: {error}") from error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise GameLoadError(f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not is_game_class(target):
        raise GameLoadError(f"{import_path} is not a concrete subclass of AbstractGame or "
                            "AsyncAbstractGame (all abstract methods implemented)")
    return target  # type: ignore[return-value]


def check_game_name(name: str) -> str | None:
    """A problem with a game name, or None (lowercase letters, digits, '_', '-', '.')."""
    if GAME_NAME_RE.match(name):
        return None
    return f"game name {name!r} must match {GAME_NAME_RE.pattern}"
