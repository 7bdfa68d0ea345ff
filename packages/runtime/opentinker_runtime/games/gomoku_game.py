"""The built-in `gomoku` game: get `win_length` stones in a row on a small board, against a
seeded scripted opponent (single-agent) or between two seats, "black" and "white".

Rules: an N x N board (`size` 3..26, default 9); black (X) moves first, then the colours
alternate; `win_length` (default 5, at most `size`) or more stones in a row horizontally,
vertically or diagonally win; a full board without a line is a draw.

Move format (see `opentinker_runtime.games.gomoku`): a column letter and a 1-based row number, "e5" or
"E5" (row 1 is the top row, as the board is drawn), or a 1-based "row,col" pair, "5,5" or
"(5, 3)" (= c5). The LAST well-formed move in the reply counts, so the model may reason first.
With `move_format="cell"` (3x3 boards) a move is instead a cell number, 1..9 row by row from the
top left ("5" is the centre), and the board draws each empty cell as its number ("X23/4O6/789",
one line per row): a move is one digit, so a policy can learn to play from a random
initialisation (stop sampling at a digit: `sampling.stop: ["1", ..., "9"]`).
Observations are short (a byte-level tokenizer spends a token per character):

    O: d4
     abcdefghi
    1.........
    ...
    9.........
    X to move

Rewards go to the player who steps: +1 for the move that wins; -1 for the move after which
the scripted opponent wins; 0 for a draw and for ordinary moves. An illegal move (off the board,
on a stone, no move found) earns `invalid_move_penalty` (default -0.5), an observation saying
why, and the same player moves again; an illegal move beyond `max_invalid_moves` (default 3)
forfeits: reward -1 (instead of the penalty), episode over, a loss. The last step's `info` holds
`result` ("win", "loss", "draw" or "forfeit", for the stepping player), `correct` (True on a
win), `winner` ("black", "white" or None) and both seats' `outcomes` and `rewards`; with two
seats only the stepping seat gets its final reward from `step`, the other seat's (-1 after the
winning move) is in `info["rewards"]`. Every step that does not end the game names the seat to
move next in `info["to_move"]` and a rejected move has `info["error"]` (the Coordinator's match
contract, see `opentinker_env.game`).

Single-agent (`opponent="scripted"`): the model plays `model_color` ("black" moves first;
"white" sees the opponent's opening move in reset's observation); `reset(index=i)` seeds the
opponent, so (seed, split, index) replays the same game for the same moves.

    from opentinker_env import play
    from opentinker_runtime.games.gomoku_game import GomokuGame

    episode = play(GomokuGame(size=9, win_length=5, seed=0), ["e5", "e4", "e6"], index=0)

Two seats (`opponent="none"`): `step(action, seat="black"|"white")` must come from the seat to
move, else `WrongSeatError` (a ValueError) names the seat to move; `seat=""` means "the seat to
move", which lets `play` drive both seats in turn:

    game = GomokuGame(size=5, win_length=3, opponent="none")
    episode = play(game, ["a1", "a2", "b1", "b2", "c1"])      # black: a1 b1 c1
    assert episode.results[-1].reward == 1.0
    assert episode.results[-1].info["outcomes"] == {"black": "win", "white": "loss"}
"""

from __future__ import annotations

import random
from typing import Any

from opentinker_env.config_fields import choice as _choice
from opentinker_env.config_fields import finite
from opentinker_env.config_fields import integer as _int
from opentinker_env.game import SPLITS, AbstractGame, GameConfigError, NotYourTurn, StepResult
from opentinker_runtime.games.gomoku import (
    BLACK,
    MAX_SIZE,
    MIN_SIZE,
    MAX_NUMBERED_SIZE,
    MIN_WIN_LENGTH,
    STONE_CHARS,
    WHITE,
    Board,
    Move,
    cell_number,
    move_name,
    other,
    parse_cell,
    parse_move,
    scripted_move,
)

OPPONENTS = ("scripted", "none")
MOVE_FORMATS = ("letter", "cell")
"""How moves are written: "letter" ("b2", or a "2,2" pair) or "cell" (a cell number, 3x3 only)."""
SEAT_STONES = {"black": BLACK, "white": WHITE}
STONE_SEATS = {stone: seat for seat, stone in SEAT_STONES.items()}


class WrongSeatError(NotYourTurn):
    """A seated step from a seat that is not to move (or not this game's); the message says
    which seat is to move. The EnvHost answers FAILED_PRECONDITION and the episode goes on."""


class GomokuGame(AbstractGame):
    """Gomoku: k in a row on an N x N board vs a scripted opponent, or two seats; +1 win, -1 loss."""

    multi_turn = True
    seats = ("black", "white")

    def __init__(self, *, size: int = 9, win_length: int = 5, seed: int = 0, opponent: str = "scripted",
                 model_color: str = "black", invalid_move_penalty: float = -0.5,
                 max_invalid_moves: int = 3, move_format: str = "letter",
                 system_prompt: str | None = None) -> None:
        """`opponent`: "scripted" (the model plays `model_color` against the built-in opponent)
        or "none" (both seats are played by callers; `model_color` is then unused).
        `max_invalid_moves` illegal moves per player are penalised and retried; one more forfeits.
        `move_format`: "letter" ("b2") or "cell" (a cell number 1..9; 3x3 boards only)."""
        self.size = _int("size", size, low=MIN_SIZE, high=MAX_SIZE)
        self.win_length = _int("win_length", win_length, low=MIN_WIN_LENGTH, high=self.size,
                               high_name=f"the size ({self.size})")
        self.seed = _int("seed", seed)
        self.opponent = _choice("opponent", opponent, OPPONENTS)
        self.model_color = _choice("model_color", model_color, tuple(SEAT_STONES))
        self.invalid_move_penalty = finite("invalid_move_penalty", invalid_move_penalty, high=0)
        self.max_invalid_moves = _int("max_invalid_moves", max_invalid_moves, low=0)
        self.move_format = _choice("move_format", move_format, MOVE_FORMATS)
        if self.move_format == "cell" and self.size > MAX_NUMBERED_SIZE:
            raise GameConfigError(f"move_format: 'cell' needs a board of at most {MAX_NUMBERED_SIZE}x"
                                  f"{MAX_NUMBERED_SIZE} (single-digit cell numbers), got size {self.size}")
        if system_prompt is not None and (not isinstance(system_prompt, str) or not system_prompt):
            raise GameConfigError(f"system_prompt: expected a non-empty string, got {system_prompt!r}")
        self.system_prompt = system_prompt or self._default_system_prompt()
        self.next_index = {split: 0 for split in SPLITS}
        self.split, self.index = "train", 0
        self.board = Board(self.size, self.win_length)
        self.to_move = BLACK
        self.invalid_moves = {seat: 0 for seat in self.seats}
        self.rng = random.Random(0)
        self.playing = False
        self.started = False

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"size": 9, "win_length": 5, "seed": 0, "opponent": "scripted", "model_color": "black",
                "invalid_move_penalty": -0.5, "max_invalid_moves": 3, "move_format": "letter"}

    @property
    def model_stone(self) -> int:
        return SEAT_STONES[self.model_color]

    def get_system_prompt(self) -> str:
        return self.system_prompt

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self, *, index: int | None = None, split: str = "train", seed: int | None = None) -> str:
        """Game `index` of `split` ("train" or "eval"; the index seeds the scripted opponent);
        without an index, `seed` is used as the index, else the next index of that split."""
        if split not in SPLITS:
            raise GameConfigError(f"split: expected 'train' or 'eval', got {split!r}")
        if index is not None:
            position = _int("index", index, low=0)
        elif seed is not None:
            position = _int("seed", seed, low=0)
        else:
            position = self.next_index[split]
        self.split, self.index = split, position
        self.next_index[split] = position + 1
        self.rng = random.Random(f"gomoku:{self.seed}:{split}:{position}")
        self.board = Board(self.size, self.win_length)
        self.to_move = BLACK
        self.invalid_moves = {seat: 0 for seat in self.seats}
        self.playing = self.started = True
        last = None
        if self.opponent == "scripted" and self.model_stone == WHITE:
            last = self._opponent_moves()
        return self._position(last)

    def step(self, action: str, seat: str = "") -> StepResult:
        """Play `action` for `seat` ("" = the seat to move; with the scripted opponent, the
        model's colour); WrongSeatError when that seat is not to move."""
        if not self.playing:
            raise RuntimeError("step() before reset()" if not self.started
                               else "step() after the episode is done; call reset() first")
        stone = self._stepping_stone(seat)
        move = parse_cell(action, self.size) if self.move_format == "cell" else parse_move(action)
        problem = "no move found" if move is None else self.board.problem(move)
        if problem is not None:
            return self._illegal(stone, move, problem)
        assert move is not None
        if self.board.place(move, stone):
            return self._finish(stone, winner=stone)
        if self.board.is_full():
            return self._finish(stone, winner=None)
        self.to_move = other(stone)
        last = move
        if self.opponent == "scripted":
            last = self._opponent_moves()
            if self.board.wins_at(last, other(stone)):
                return self._finish(stone, winner=other(stone))
            if self.board.is_full():
                return self._finish(stone, winner=None)
        return StepResult(observation=self._position(last), reward=0.0, done=False,
                          info={"move": move_name(move), "seat": STONE_SEATS[stone],
                                "to_move": STONE_SEATS[self.to_move]})

    # -- internals ----------------------------------------------------------------------------

    def _default_system_prompt(self) -> str:
        example = self._name(Move(self.size // 2, self.size // 2))
        who = (f"You are {STONE_CHARS[self.model_stone]}." if self.opponent == "scripted"
               else "X moves first.")
        what = "a free cell's number" if self.move_format == "cell" else "a move"
        return f"Gomoku: {self.win_length} in a row wins. {who} Reply with {what} like {example}."

    def _name(self, move: Move) -> str:
        """How this game writes a move: "b2", or its cell number "5" (move_format "cell")."""
        on_board = 0 <= move.row < self.size and 0 <= move.col < self.size
        if self.move_format == "cell" and on_board:
            return str(cell_number(move, self.size))
        return move_name(move)

    def _stepping_stone(self, seat: str) -> int:
        if seat and seat not in SEAT_STONES:
            raise WrongSeatError(f"seat: expected one of {', '.join(self.seats)}, got {seat!r}")
        if self.opponent == "scripted":
            if seat and SEAT_STONES[seat] != self.model_stone:
                raise WrongSeatError(f"seat: the model plays {self.model_color}; {seat} is the "
                                     "scripted opponent")
            return self.model_stone
        if seat and SEAT_STONES[seat] != self.to_move:
            raise WrongSeatError(f"seat: {STONE_SEATS[self.to_move]} is to move, not {seat}")
        return self.to_move

    def _opponent_moves(self) -> Move:
        """The scripted opponent plays its colour (the one to move); its move."""
        move = scripted_move(self.board, self.to_move, self.rng)
        self.board.place(move, self.to_move)
        self.to_move = other(self.to_move)
        return move

    def _position(self, last: Move | None) -> str:
        lines = []
        if last is not None:
            lines.append(f"{STONE_CHARS[self.board[last]]}: {self._name(last)}")
        lines += [self._render(), f"{STONE_CHARS[self.to_move]} to move"]
        return "\n".join(lines)

    def _render(self) -> str:
        return self.board.render(numbered=self.move_format == "cell")

    def _illegal(self, stone: int, move: Move | None, problem: str) -> StepResult:
        seat = STONE_SEATS[stone]
        self.invalid_moves[seat] += 1
        if self.invalid_moves[seat] > self.max_invalid_moves:
            return self._finish(stone, winner=other(stone), forfeit=True, error=problem)
        if move is None:
            why = f"no move found; reply like {self._name(Move(self.size // 2, self.size // 2))}"
        else:
            why = f"{self._name(move)} is {problem}"
        return StepResult(observation=f"Illegal: {why}. {STONE_CHARS[stone]} to move",
                          reward=self.invalid_move_penalty, done=False,
                          info={"error": problem, "seat": seat, "to_move": seat,
                                "invalid_moves": self.invalid_moves[seat]})

    def _finish(self, stone: int, *, winner: int | None, forfeit: bool = False, error: str = "") -> StepResult:
        """End the episode; the step's reward and `result` are those of `stone`'s seat."""
        self.playing = False
        if winner is None:
            outcomes = {seat: "draw" for seat in self.seats}
            rewards = {seat: 0.0 for seat in self.seats}
            summary = "Draw"
        else:
            loser = other(winner)
            outcomes = {STONE_SEATS[winner]: "win", STONE_SEATS[loser]: "forfeit" if forfeit else "loss"}
            rewards = {STONE_SEATS[winner]: 1.0, STONE_SEATS[loser]: -1.0}
            summary = (f"{STONE_CHARS[loser]} forfeits" if forfeit else f"{STONE_CHARS[winner]} wins")
        seat = STONE_SEATS[stone]
        info = {"result": outcomes[seat], "correct": outcomes[seat] == "win", "seat": seat,
                "winner": STONE_SEATS[winner] if winner is not None else None,
                "outcomes": {s: outcomes[s] for s in self.seats},
                "rewards": {s: rewards[s] for s in self.seats},
                "moves": self.board.stones, "invalid_moves": dict(self.invalid_moves),
                "split": self.split, "index": self.index}
        if error:
            info["error"] = error  # the forfeiting move was illegal too
        return StepResult(observation=f"{self._render()}\n{summary}", reward=rewards[seat],
                          done=True, info=info)
