"""Gomoku board logic (no game API): the board, move parsing, legality, wins, rendering and a
deterministic scripted opponent. `opentinker_runtime.games.gomoku_game` builds the game on top of it.

Coordinates: a move is `Move(row, col)`, 0-based, row 0 at the top. In text a cell is named by
its column letter and its 1-based row number, "e5" = column e (5th), row 5 (5th from the top),
and `render()` labels the board the same way:

     abcde
    1.....
    2..X..
    3..O..

Move format accepted by `parse_move` (the LAST well-formed move in the text wins, so a model
may think aloud before answering):

* letter + number: "e5", "E5" (column letter, row number);
* a "row,col" pair of 1-based numbers, with or without brackets/spaces: "5,5", "(5, 3)" (= c5).

Cell numbers (`parse_cell`, for a game with `move_format: cell`): the cells numbered row by row
from the top left, 1..size*size; on 3x3 "5" is b2 and `render(numbered=True)` draws each empty
cell as its number:

    X23
    4O6
    789

A well-formed move may still be illegal (off the board, e.g. "j1" on a 9x9 board or "0,3", or
on an occupied cell): see `Board.problem`. Wins are `win_length` or more stones in a row,
horizontally, vertically or on either diagonal (an overline counts).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import NamedTuple

EMPTY, BLACK, WHITE = 0, 1, 2
STONE_CHARS = {EMPTY: ".", BLACK: "X", WHITE: "O"}
"""How `render` draws each cell: black is X (moves first), white is O."""
MIN_SIZE, MAX_SIZE = 3, 26
"""Board sizes; columns are the letters a..z."""
MIN_WIN_LENGTH = 2
DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))
"""Horizontal, vertical, diagonal (down-right) and anti-diagonal (down-left)."""

_LETTER_MOVE = re.compile(r"(?<![A-Za-z0-9])([A-Za-z])(\d{1,2})(?![A-Za-z0-9])")
_CELL_NUMBER = re.compile(r"(?<!\d)(\d{1,3})(?!\d)")
MAX_NUMBERED_SIZE = 3
"""Boards whose cell numbers are single digits (1..9): the largest `render(numbered=True)` draws."""
_PAIR_MOVE = re.compile(r"(?<![\w.])(\d{1,2})\s*,\s*(\d{1,2})(?!\w|\.\d)")


class Move(NamedTuple):
    """A cell, 0-based (row 0 is the top row); may lie off the board after parsing."""

    row: int
    col: int


def other(stone: int) -> int:
    """The opponent's colour."""
    if stone not in (BLACK, WHITE):
        raise ValueError(f"not a stone colour: {stone!r}")
    return WHITE if stone == BLACK else BLACK


def parse_move(text: str) -> Move | None:
    """The last well-formed move in `text` ("e5", "E5", "5,5", "(5, 3)"), or None.

    Letter form: column letter a..z, then the 1-based row. Pair form: 1-based row, then column.
    The result is not checked against any board: "z9" or "0,4" parse (and are off the board)."""
    found: list[tuple[int, int, Move]] = []
    for match in _LETTER_MOVE.finditer(text):
        col = ord(match.group(1).lower()) - ord("a")
        found.append((match.end(), -match.start(), Move(int(match.group(2)) - 1, col)))
    for match in _PAIR_MOVE.finditer(text):
        found.append((match.end(), -match.start(), Move(int(match.group(1)) - 1, int(match.group(2)) - 1)))
    return max(found)[2] if found else None


def parse_cell(text: str, size: int) -> Move | None:
    """The last number in `text` as a cell number (1..size*size, row by row from the top left),
    or None when there is none. Numbers out of that range give a cell off the board ("0" -> row
    -1), so they are well-formed but illegal, like "z9" in letter form."""
    numbers = _CELL_NUMBER.findall(text)
    if not numbers:
        return None
    index = int(numbers[-1]) - 1
    if index < 0:
        return Move(-1, 0)
    return Move(index // size, index % size)


def cell_number(move: Move | tuple[int, int], size: int) -> int:
    """The cell number of an on-board `move` (1 = the top left cell): the inverse of parse_cell."""
    row, col = move
    return row * size + col + 1


def move_name(move: Move | tuple[int, int]) -> str:
    """"e5" for Move(4, 4); cells without a letter name are written as a 1-based "(row,col)"."""
    row, col = move
    if 0 <= col < MAX_SIZE and row >= 0:
        return f"{chr(ord('a') + col)}{row + 1}"
    return f"({row + 1},{col + 1})"


class Board:
    """An N x N gomoku board; `win_length` (<= size) stones in a row win."""

    def __init__(self, size: int = 9, win_length: int = 5) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"size: expected an integer from {MIN_SIZE} to {MAX_SIZE}, got {size!r}")
        if (isinstance(win_length, bool) or not isinstance(win_length, int)
                or not MIN_WIN_LENGTH <= win_length <= size):
            raise ValueError(f"win_length: expected an integer from {MIN_WIN_LENGTH} to the size "
                             f"({size}), got {win_length!r}")
        self.size = size
        self.win_length = win_length
        self.cells = [[EMPTY] * size for _ in range(size)]
        self.history: list[tuple[Move, int]] = []
        """Every placed stone in order: (move, colour)."""

    # -- reading ------------------------------------------------------------------------------

    def __getitem__(self, move: Move | tuple[int, int]) -> int:
        row, col = move
        if not self.on_board(move):
            raise IndexError(f"{move_name(move)} is off the {self.size}x{self.size} board")
        return self.cells[row][col]

    def on_board(self, move: Move | tuple[int, int]) -> bool:
        row, col = move
        return 0 <= row < self.size and 0 <= col < self.size

    @property
    def stones(self) -> int:
        return len(self.history)

    def is_full(self) -> bool:
        return self.stones == self.size * self.size

    def empty_cells(self) -> Iterator[Move]:
        """Empty cells in row-major order (a deterministic order)."""
        for row, line in enumerate(self.cells):
            for col, cell in enumerate(line):
                if cell == EMPTY:
                    yield Move(row, col)

    def problem(self, move: Move | tuple[int, int]) -> str | None:
        """Why `move` is illegal ("off the board", "taken"), or None when it is legal."""
        if not self.on_board(move):
            return "off the board"
        if self[move] != EMPTY:
            return "taken"
        return None

    def run_length(self, move: Move | tuple[int, int], stone: int, direction: tuple[int, int]) -> int:
        """Stones of `stone` in a row through `move` along `direction`, counting `move` itself as
        that stone (whatever it holds). Walks from `move` only, so it never wraps past an edge."""
        row, col = move
        d_row, d_col = direction
        count = 1
        for sign in (1, -1):
            r, c = row + sign * d_row, col + sign * d_col
            while 0 <= r < self.size and 0 <= c < self.size and self.cells[r][c] == stone:
                count += 1
                r, c = r + sign * d_row, c + sign * d_col
        return count

    def longest_line(self, move: Move | tuple[int, int], stone: int) -> int:
        """The longest line of `stone` through `move` (counting it as `stone`), over 4 directions."""
        return max(self.run_length(move, stone, direction) for direction in DIRECTIONS)

    def wins_at(self, move: Move | tuple[int, int], stone: int) -> bool:
        """Whether `stone` at `move` makes (or is part of) `win_length` or more in a row."""
        return self.longest_line(move, stone) >= self.win_length

    def winning_moves(self, stone: int) -> list[Move]:
        """Empty cells where `stone` would win at once, row-major."""
        return [move for move in self.empty_cells() if self.wins_at(move, stone)]

    def has_line(self, stone: int) -> bool:
        """Whether `stone` has `win_length` in a row anywhere (a full scan; `place` reports
        wins by checking only around the last move)."""
        return any(self.cells[row][col] == stone and self.wins_at((row, col), stone)
                   for row in range(self.size) for col in range(self.size))

    # -- writing ------------------------------------------------------------------------------

    def place(self, move: Move | tuple[int, int], stone: int) -> bool:
        """Put `stone` on `move`; True when that makes `win_length` in a row. ValueError when
        the move is illegal (see `problem`)."""
        other(stone)  # validates the colour
        move = Move(*move)
        reason = self.problem(move)
        if reason is not None:
            raise ValueError(f"illegal move {move_name(move)}: {reason}")
        self.cells[move.row][move.col] = stone
        self.history.append((move, stone))
        return self.wins_at(move, stone)

    def copy(self) -> Board:
        board = Board(self.size, self.win_length)
        board.cells = [list(line) for line in self.cells]
        board.history = list(self.history)
        return board

    # -- text ---------------------------------------------------------------------------------

    def render(self, *, numbered: bool = False) -> str:
        """The board as text: a header of column letters, then one line per row prefixed by its
        right-aligned number; "." empty, "X" black, "O" white. 9x9 is 10 lines of 10 chars.
        `numbered` (boards up to 3x3): no labels, each empty cell drawn as its cell number."""
        if numbered:
            return self._render_numbered()
        width = len(str(self.size))
        header = " " * width + "".join(chr(ord("a") + col) for col in range(self.size))
        lines = [header]
        for row, line in enumerate(self.cells):
            lines.append(str(row + 1).rjust(width) + "".join(STONE_CHARS[cell] for cell in line))
        return "\n".join(lines)

    def _render_numbered(self) -> str:
        if self.size > MAX_NUMBERED_SIZE:
            raise ValueError(f"numbered boards go up to {MAX_NUMBERED_SIZE}x{MAX_NUMBERED_SIZE}, "
                             f"not {self.size}x{self.size}")
        def char(row: int, col: int, cell: int) -> str:
            return STONE_CHARS[cell] if cell != EMPTY else str(cell_number((row, col), self.size))

        return "\n".join("".join(char(row, col, cell) for col, cell in enumerate(line))
                         for row, line in enumerate(self.cells))

    @classmethod
    def from_rows(cls, rows: list[str], win_length: int = 5) -> Board:
        """A board from rows of ".", "X" and "O" (for tests and examples); the history lists
        the stones row-major, so it is not a real move order."""
        board = cls(len(rows), win_length)
        chars = {char: stone for stone, char in STONE_CHARS.items()}
        for row, text in enumerate(rows):
            if len(text) != board.size:
                raise ValueError(f"row {row + 1} has {len(text)} cells, expected {board.size}")
            for col, char in enumerate(text):
                if chars.get(char, -1) == -1:
                    raise ValueError(f"row {row + 1}: unknown cell {char!r}")
                if chars[char] != EMPTY:
                    board.cells[row][col] = chars[char]
                    board.history.append((Move(row, col), chars[char]))
        return board


def scripted_move(board: Board, stone: int, rng: random.Random) -> Move:
    """The scripted opponent's move for `stone`, deterministic given `rng`'s state:

    1. win at once if it can;
    2. else block the opponent's immediate win;
    3. else extend its own longest line (the empty cell giving the longest run of its stones,
       counting only directions where `win_length` still fits between the opponent's stones
       and the edges);
    4. else a random empty cell near the centre (at most one ring beyond the nearest).

    Ties are broken by `rng` among the candidates in row-major order. ValueError on a full board.
    """
    empty = list(board.empty_cells())
    if not empty:
        raise ValueError("the board is full")
    for candidates in (board.winning_moves(stone), board.winning_moves(other(stone))):
        if candidates:
            return rng.choice(candidates)
    scores = [(_extension(board, move, stone), move) for move in empty]
    best = max(score for score, _ in scores)
    if best >= 2:
        return rng.choice([move for score, move in scores if score == best])
    centre = (board.size - 1) / 2
    distance = {move: max(abs(move.row - centre), abs(move.col - centre)) for move in empty}
    nearest = min(distance.values())
    return rng.choice([move for move in empty if distance[move] <= nearest + 1])


def _extension(board: Board, move: Move, stone: int) -> int:
    """The longest run of `stone` through `move` over the directions where a winning line
    could still be made (room for `win_length` of own-or-empty cells)."""
    best = 0
    for direction in DIRECTIONS:
        if _room(board, move, stone, direction) >= board.win_length:
            best = max(best, board.run_length(move, stone, direction))
    return best


def _room(board: Board, move: Move, stone: int, direction: tuple[int, int]) -> int:
    """Own-or-empty cells in a row through `move` along `direction` (capped at win_length)."""
    d_row, d_col = direction
    count = 1
    for sign in (1, -1):
        r, c = move.row + sign * d_row, move.col + sign * d_col
        while (count < board.win_length and 0 <= r < board.size and 0 <= c < board.size
               and board.cells[r][c] in (stone, EMPTY)):
            count += 1
            r, c = r + sign * d_row, c + sign * d_col
    return count
