"""The built-in games (math, math_tool, guess_number, nim, gomoku) and the registry that finds a
game by name or by import path. Each is an `opentinker_env` game; nothing here imports torch or
grpc, so a laptop can play them locally with `opentinker_env.play`.
"""

from opentinker_runtime.games.math_game import MathGame, math_sft_examples
from opentinker_runtime.games.math_problems import MathProblem
from opentinker_runtime.games.registry import GameLoadError, builtin_games, check_game_name, load_game_class

__all__ = ["GameLoadError", "MathGame", "MathProblem", "builtin_games", "check_game_name", "load_game_class",
           "math_sft_examples"]
