"""The built-in gomoku game: board rules (wins in every direction, at every edge and corner,
for several win lengths; no wrap-around; illegal moves; draws), move parsing, the scripted
opponent, config errors, determinism, and whole episodes through the local harness, single-agent
and with two seats."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import pytest

from opentinker_env import Episode, GameConfigError, GameHarness, HarnessError, is_game_class, play
from opentinker_runtime.games import load_game_class
from opentinker_runtime.games.gomoku import (
    BLACK,
    DIRECTIONS,
    EMPTY,
    WHITE,
    Board,
    Move,
    move_name,
    other,
    parse_cell,
    parse_move,
    scripted_move,
)
from opentinker_runtime.games.gomoku_game import GomokuGame, WrongSeatError

SMALL_CONFIGS = [(3, 3), (4, 3), (4, 4), (5, 3), (5, 4), (5, 5), (6, 4), (7, 5), (9, 5)]
DRAWN_3X3 = ["a1", "b1", "c1", "b2", "a2", "c2", "b3", "a3", "c3"]
"""X: a1 c1 a2 b3 c3, O: b1 b2 c2 a3 -> XOX / XOO / OXX, no line of three."""


def cell(name: str) -> Move:
    move = parse_move(name)
    assert move is not None, name
    return move


def has_line_brute_force(board: Board, stone: int) -> bool:
    """Every window of win_length cells, with explicit 2-D bounds (the reference answer)."""
    return any(all(board.cells[r][c] == stone for r, c in window)
               for window in windows(board.size, board.win_length))


@functools.cache
def windows(size: int, k: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every on-board run of k cells in the four directions."""
    found = []
    for row in range(size):
        for col in range(size):
            for d_row, d_col in DIRECTIONS:
                window = tuple((row + i * d_row, col + i * d_col) for i in range(k))
                if all(0 <= r < size and 0 <= c < size for r, c in window):
                    found.append(window)
    return tuple(found)


def all_lines(size: int, k: int, direction: tuple[int, int]) -> list[list[Move]]:
    """Every on-board line of exactly k cells along `direction`."""
    d_row, d_col = direction
    lines = []
    for row in range(size):
        for col in range(size):
            line = [Move(row + i * d_row, col + i * d_col) for i in range(k)]
            if all(0 <= m.row < size and 0 <= m.col < size for m in line):
                lines.append(line)
    return lines


# -- move parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("e5", (4, 4)),
    ("E5", (4, 4)),
    ("a1", (0, 0)),
    ("i9", (8, 8)),
    ("c2", (1, 2)),                       # column c, row 2
    ("5,5", (4, 4)),
    ("(5, 5)", (4, 4)),
    ("(2,3)", (1, 2)),                    # row 2, column 3 = c2
    (" 2 , 3 ", (1, 2)),
    ("I play e5.", (4, 4)),
    ("e5? no: d4", (3, 3)),               # the last move counts
    ("(1,1) or rather e5", (4, 4)),
    ("e5, no (1, 1)", (0, 0)),
    ("Move: b3\n", (2, 1)),
    ("j1", (0, 9)),                       # well-formed; off a 9x9 board
    ("a10", (9, 0)),
    ("a0", (-1, 0)),
    ("0,3", (-1, 2)),
    ("12,12", (11, 11)),
    ("no move here", None),
    ("", None),
    ("e5e6", None),                       # glued: not a move
    ("the5", None),
    ("a100", None),
    ("1,024", None),                      # a number, not a pair
    ("3.5,2", None),
])
def test_parse_move(text: str, expected: tuple[int, int] | None) -> None:
    assert parse_move(text) == expected


def test_move_names_round_trip() -> None:
    for row in range(26):
        for col in range(26):
            assert parse_move(move_name(Move(row, col))) == (row, col)
            assert parse_move(f"({row + 1}, {col + 1})") == (row, col)
    assert move_name(Move(-1, 0)) == "(0,1)"


# -- wins -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "k"), SMALL_CONFIGS)
@pytest.mark.parametrize("direction", DIRECTIONS, ids=["horizontal", "vertical", "diagonal", "anti-diagonal"])
def test_every_line_wins_exactly_when_completed(size: int, k: int, direction: tuple[int, int]) -> None:
    """Every line of k cells in this direction (so every edge and corner), completed by each of
    its cells in turn: no win before the last stone, a win with it."""
    lines = all_lines(size, k, direction)
    straight = (size - k + 1) * (size if 0 in direction else size - k + 1)
    assert len(lines) == straight
    for line in lines:
        for last in range(k):
            board = Board(size, k)
            for position, move in enumerate(line):
                if position != last:
                    assert not board.place(move, BLACK), (line, last)
            assert not board.has_line(BLACK)
            assert board.wins_at(line[last], BLACK)
            assert not board.wins_at(line[last], WHITE)
            assert board.place(line[last], BLACK), (line, last)
            assert board.has_line(BLACK) and not board.has_line(WHITE)


@pytest.mark.parametrize("names", [
    "a1 b1 c1 d1 e1",   # top edge, from the top-left corner
    "e1 e2 e3 e4 e5",   # right edge, from the top-right corner
    "a5 b5 c5 d5 e5",   # bottom edge
    "a1 a2 a3 a4 a5",   # left edge
    "a1 b2 c3 d4 e5",   # corner to corner
    "e1 d2 c3 b4 a5",   # the other diagonal, corner to corner
])
def test_edge_and_corner_lines_on_a_board_exactly_that_long(names: str) -> None:
    board = Board(5, 5)
    moves = [cell(name) for name in names.split()]
    assert not any(board.place(move, WHITE) for move in moves[:-1])
    assert board.place(moves[-1], WHITE)


@pytest.mark.parametrize(("size", "k"), [(3, 3), (4, 3), (5, 4), (6, 5)])
def test_k_minus_one_in_a_row_never_wins(size: int, k: int) -> None:
    for direction in DIRECTIONS:
        for line in all_lines(size, k - 1, direction):
            board = Board(size, k)
            assert not any(board.place(move, BLACK) for move in line)


def test_an_opponent_stone_or_a_gap_breaks_the_line() -> None:
    board = Board.from_rows(["XXOXX....", "XX.XX....", *["........."] * 7])
    assert not board.has_line(BLACK)
    assert not board.place(cell("i1"), BLACK)
    assert board.place(cell("c2"), BLACK)  # fills the gap: five in row 2


def test_an_overline_wins() -> None:
    board = Board.from_rows(["XXX.XX", *["......"] * 5], win_length=5)
    assert board.place(cell("d1"), BLACK)  # six in a row
    assert board.longest_line(cell("d1"), BLACK) == 6


@pytest.mark.parametrize("names", [
    "d1 e1 a2",         # end of row 1, start of row 2 (consecutive in row-major order)
    "e1 a2 b2",
    "e3 a4 b4",
    "d1 e2 a4",         # diagonal stepping off the right edge (row-major step 6)
    "b1 a2 e2",         # anti-diagonal stepping off the left edge (row-major step 4)
    "a1 e1 d2",
    "e1 a1 b1",         # the row's two ends are not adjacent
    "a1 a5 a4",
])
def test_no_wins_across_the_edges(names: str) -> None:
    board = Board(5, 3)
    moves = [cell(name) for name in names.split()]
    assert not any(board.place(move, BLACK) for move in moves)
    assert not board.has_line(BLACK) and not has_line_brute_force(board, BLACK)


@pytest.mark.parametrize(("size", "k"), SMALL_CONFIGS + [(9, 4), (11, 5), (15, 5)])
def test_random_games_agree_with_a_brute_force_scan(size: int, k: int) -> None:
    """The around-the-last-move check against a full scan, over many random games."""
    for game in range(40 if size <= 7 else 10):
        rng = random.Random(f"{size}:{k}:{game}")
        board, stone = Board(size, k), BLACK
        moves = list(board.empty_cells())
        rng.shuffle(moves)
        for move in moves:
            won = board.place(move, stone)
            assert won == has_line_brute_force(board, stone), board.render()
            assert not has_line_brute_force(board, other(stone))
            if won:
                break
            stone = other(stone)
        else:
            assert board.is_full()


# -- legality, draws, rendering -------------------------------------------------------------


def test_illegal_moves() -> None:
    board = Board(9, 5)
    board.place(cell("e5"), BLACK)
    assert board.problem(cell("e5")) == "taken"
    assert board.problem(cell("j1")) == "off the board"
    assert board.problem(cell("a10")) == "off the board"
    assert board.problem(cell("0,3")) == "off the board"
    assert board.problem(cell("a0")) == "off the board"
    assert board.problem(cell("i9")) is None
    with pytest.raises(ValueError, match="taken"):
        board.place(cell("e5"), WHITE)
    with pytest.raises(ValueError, match="off the board"):
        board.place(Move(9, 0), WHITE)
    with pytest.raises(ValueError, match="colour"):
        board.place(cell("a1"), EMPTY)
    assert board.stones == 1 and board[cell("e5")] == BLACK


def test_a_full_board_without_a_line_is_a_draw() -> None:
    board, stone = Board(3, 3), BLACK
    for name in DRAWN_3X3:
        assert not board.place(cell(name), stone)
        stone = other(stone)
    assert board.is_full() and list(board.empty_cells()) == []
    assert not board.has_line(BLACK) and not board.has_line(WHITE)
    assert board.render() == " abc\n1XOX\n2XOO\n3OXX"


def test_render_is_compact_and_labelled() -> None:
    board = Board(9, 5)
    board.place(cell("e5"), BLACK)
    board.place(cell("d4"), WHITE)
    text = board.render()
    lines = text.splitlines()
    assert lines[0] == " abcdefghi" and lines[4] == "4...O....." and lines[5] == "5....X...."
    assert len(text) < 110
    big = Board(12, 5).render().splitlines()
    assert big[0] == "  abcdefghijkl" and big[1].startswith(" 1.") and big[12].startswith("12.")


@pytest.mark.parametrize(("size", "k"), [(2, 2), (27, 5), (9, 10), (9, 1), (True, 1)])
def test_board_rejects_bad_sizes(size: int, k: int) -> None:
    with pytest.raises(ValueError):
        Board(size, k)


# -- the scripted opponent ------------------------------------------------------------------


def test_opponent_takes_a_win_before_blocking() -> None:
    board = Board.from_rows(["XX...", ".....", "OO...", ".....", "....."], win_length=3)
    for seed in range(20):
        assert scripted_move(board, WHITE, random.Random(seed)) == cell("c3")
        assert scripted_move(board, BLACK, random.Random(seed)) == cell("c1")


def test_opponent_blocks_an_immediate_threat() -> None:
    board = Board.from_rows([".........", ".XXXX....", *["........."] * 6, "O......O."], win_length=5)
    for seed in range(20):
        assert scripted_move(board, WHITE, random.Random(seed)) in (cell("a2"), cell("f2"))
    diagonal = Board.from_rows(["X....", ".X...", "..X..", ".....", "O...."], win_length=4)
    assert scripted_move(diagonal, WHITE, random.Random(0)) == cell("d4")


def test_opponent_extends_its_longest_line() -> None:
    board = Board.from_rows([".........", "..OO.....", *["........."] * 4, "......O..", ".........",
                             "X......XX"], win_length=5)
    for seed in range(20):
        assert scripted_move(board, WHITE, random.Random(seed)) in (cell("b2"), cell("e2"))


def test_opponent_ignores_a_line_with_no_room_to_win() -> None:
    # row 1 "XOOO.X": e1 would make four O's, but five can never fit between the X's
    board = Board.from_rows(["XOOO.X...", *["........."] * 3, "....O....", *["........."] * 4], win_length=5)
    assert board.longest_line(cell("e1"), WHITE) == 4
    for seed in range(20):
        move = scripted_move(board, WHITE, random.Random(seed))
        assert move != cell("e1") and board.longest_line(move, WHITE) == 2


def test_opponent_opens_near_the_centre_at_random_but_deterministically() -> None:
    board = Board(9, 5)
    moves = [scripted_move(board, BLACK, random.Random(seed)) for seed in range(50)]
    assert all(max(abs(m.row - 4), abs(m.col - 4)) <= 1 for m in moves)
    assert len(set(moves)) > 3
    assert moves == [scripted_move(board, BLACK, random.Random(seed)) for seed in range(50)]
    even = [scripted_move(Board(8, 5), BLACK, random.Random(seed)) for seed in range(50)]
    assert all(2 <= m.row <= 5 and 2 <= m.col <= 5 for m in even)


def test_opponent_against_itself_plays_legal_deterministic_games() -> None:
    for size, k in SMALL_CONFIGS:
        transcripts = []
        for _ in range(2):
            board, stone, rng, moves = Board(size, k), BLACK, random.Random(f"self:{size}"), []
            while not board.is_full():
                move = scripted_move(board, stone, rng)
                moves.append(move)
                if board.place(move, stone):
                    break
                stone = other(stone)
            transcripts.append(moves)
        assert transcripts[0] == transcripts[1]
    with pytest.raises(ValueError, match="full"):
        scripted_move(Board.from_rows(["XOX", "XOO", "OXX"], 3), BLACK, random.Random(0))


# -- the game: metadata, config, prompts ----------------------------------------------------


def test_metadata() -> None:
    assert is_game_class(GomokuGame)
    assert load_game_class("opentinker_runtime.games.gomoku_game:GomokuGame") is GomokuGame
    assert GomokuGame.seats == ("black", "white") and GomokuGame.multi_turn is True
    assert GomokuGame.describe().startswith("Gomoku")
    config = GomokuGame.default_config()
    assert config["size"] == 9 and config["win_length"] == 5 and config["opponent"] == "scripted"
    game = GomokuGame(**config)
    assert game.invalid_move_penalty == -0.5 and game.max_invalid_moves == 3
    assert issubclass(WrongSeatError, ValueError) and not issubclass(WrongSeatError, GameConfigError)


def test_prompts_are_short() -> None:
    game = GomokuGame()
    assert game.get_system_prompt() == "Gomoku: 5 in a row wins. You are X. Reply with a move like e5."
    assert game.get_initial_user_message() == ""
    first = game.reset(index=0)
    assert first == " abcdefghi\n" + "".join(f"{row}.........\n" for row in range(1, 10)) + "X to move"
    reply = game.step("e5").observation
    assert len(reply) <= 125 and reply.startswith("O: ") and reply.endswith("X to move")
    white = GomokuGame(model_color="white")
    assert white.get_system_prompt().endswith("You are O. Reply with a move like e5.")
    assert GomokuGame(opponent="none", size=5, win_length=3).get_system_prompt() == (
        "Gomoku: 3 in a row wins. X moves first. Reply with a move like c3.")
    assert GomokuGame(system_prompt="Play.").get_system_prompt() == "Play."


@pytest.mark.parametrize(("config", "field"), [
    ({"size": 2}, "size"),
    ({"size": 27}, "size"),
    ({"size": "9"}, "size"),
    ({"size": True}, "size"),
    ({"win_length": 6, "size": 5}, "win_length"),
    ({"win_length": 1}, "win_length"),
    ({"win_length": 4.5}, "win_length"),
    ({"seed": "x"}, "seed"),
    ({"opponent": "alphazero"}, "opponent"),
    ({"opponent": None}, "opponent"),
    ({"model_color": "red"}, "model_color"),
    ({"invalid_move_penalty": 0.5}, "invalid_move_penalty"),
    ({"invalid_move_penalty": float("nan")}, "invalid_move_penalty"),
    ({"invalid_move_penalty": "-1"}, "invalid_move_penalty"),
    ({"max_invalid_moves": -1}, "max_invalid_moves"),
    ({"max_invalid_moves": 1.5}, "max_invalid_moves"),
    ({"system_prompt": ""}, "system_prompt"),
])
def test_bad_config_names_the_field(config: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        GomokuGame(**config)


def test_win_length_error_mentions_the_size() -> None:
    with pytest.raises(GameConfigError, match=r"^win_length: expected an integer from 2 to the size \(5\)"):
        GomokuGame(size=5, win_length=6)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"split": "test"}, "split"), ({"index": -1}, "index"), ({"index": "3"}, "index"), ({"seed": -2}, "seed"),
])
def test_bad_reset_kwargs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        GomokuGame().reset(**kwargs)


def test_integral_floats_from_json_are_accepted() -> None:
    game = GomokuGame(size=7.0, win_length=4.0, seed=2.0, max_invalid_moves=1.0, invalid_move_penalty=-1)
    assert (game.size, game.win_length, game.seed, game.max_invalid_moves) == (7, 4, 2, 1)
    assert game.invalid_move_penalty == -1.0
    assert game.reset(index=2.0) == GomokuGame(size=7, win_length=4, seed=2).reset(index=2)


# -- the game: determinism ------------------------------------------------------------------


def transcript(game: GomokuGame, index: int, split: str = "train", moves: int = 6) -> list[str]:
    """The observations of `moves` turns of a fixed model policy (first empty cell from i9 back)."""
    observations = [game.reset(index=index, split=split)]
    for _ in range(moves):
        move = max(game.board.empty_cells())
        result = game.step(move_name(move))
        observations.append(result.observation)
        if result.done:
            break
    return observations


def test_same_seed_and_index_replay_the_same_game() -> None:
    for color in ("black", "white"):
        config = {"seed": 5, "model_color": color}
        first = [transcript(GomokuGame(**config), index) for index in range(12)]
        assert first == [transcript(GomokuGame(**config), index) for index in range(12)]
        game = GomokuGame(**config)
        assert [transcript(game, index) for index in reversed(range(12))] == first[::-1]
        assert len({tuple(t) for t in first}) > 1  # the index seeds the opponent
        other_seed = [transcript(GomokuGame(seed=6, model_color=color), index) for index in range(12)]
        assert other_seed != first
        evals = [transcript(GomokuGame(**config), index, "eval") for index in range(12)]
        assert evals != first


def test_white_sees_a_seeded_opening_move() -> None:
    game = GomokuGame(model_color="white")
    openings = [game.reset(index=index) for index in range(30)]
    assert all(opening.startswith("X: ") and opening.endswith("O to move") for opening in openings)
    assert len(set(openings)) > 3
    assert openings == [GomokuGame(model_color="white").reset(index=index) for index in range(30)]


def test_reset_without_index_walks_the_split_and_seed_picks_the_game() -> None:
    config = {"model_color": "white", "seed": 3}
    in_order = [GomokuGame(**config).reset(index=i) for i in range(4)]
    game = GomokuGame(**config)
    assert [game.reset() for _ in range(4)] == in_order
    assert game.reset(seed=2) == in_order[2]
    assert game.reset(index=1, seed=3) == in_order[1]
    assert game.reset(split="eval") == GomokuGame(**config).reset(index=0, split="eval")


# -- single-agent episodes through the harness ------------------------------------------------


def strong_move(board: Board, stone: int) -> Move:
    """Win, else block, else make two winning threats, else extend the longest line."""
    for candidates in (board.winning_moves(stone), board.winning_moves(other(stone))):
        if candidates:
            return candidates[0]
    empty = list(board.empty_cells())
    for move in empty:
        after = board.copy()
        after.place(move, stone)
        if len(after.winning_moves(stone)) >= 2:
            return move
    centre = (board.size - 1) / 2
    return max(empty, key=lambda m: (board.longest_line(m, stone),
                                     -max(abs(m.row - centre), abs(m.col - centre))))


def weak_move(board: Board, stone: int) -> Move:
    """A cell far from the centre, away from its own stones: never blocks, never builds."""
    centre = (board.size - 1) / 2
    empty = list(board.empty_cells())
    lonely = [m for m in empty if board.longest_line(m, stone) == 1] or empty
    return max(lonely, key=lambda m: max(abs(m.row - centre), abs(m.col - centre)))


def play_policy(game: GomokuGame, policy: Callable[[Board, int], Move], index: int) -> Episode:
    """Play episode `index` with `policy` choosing the model's moves from the live board."""
    harness = GameHarness(game)
    harness.reset(index=index)
    while not harness.step(move_name(policy(game.board, game.model_stone))).done:
        assert harness.episode is not None and len(harness.episode.actions) <= game.size ** 2
    assert harness.episode is not None
    return harness.episode


@pytest.mark.parametrize(("size", "k", "color"), [(9, 5, "black"), (7, 4, "black"), (7, 4, "white"),
                                                  (5, 3, "black"), (9, 5, "white")])
def test_single_agent_wins_and_losses(size: int, k: int, color: str) -> None:
    game = GomokuGame(size=size, win_length=k, model_color=color, seed=1)
    results = []
    for index in range(6):
        for policy in (strong_move, weak_move):
            episode = play_policy(game, policy, index)
            last = episode.results[-1]
            assert episode.done and all(not r.done for r in episode.results[:-1])
            assert all(r.reward == 0.0 for r in episode.results[:-1])
            info = last.info
            expected_reward = {"win": 1.0, "loss": -1.0, "draw": 0.0}[info["result"]]
            assert last.reward == episode.total_reward == expected_reward
            assert info["correct"] is (info["result"] == "win")
            assert info["seat"] == color and info["index"] == index and info["split"] == "train"
            assert info["outcomes"][color] == info["result"]
            assert info["rewards"][color] == last.reward
            assert info["winner"] in (None, "black", "white")
            stones = game.board.stones
            assert info["moves"] == stones
            if info["result"] != "draw":
                winner_stone = BLACK if info["winner"] == "black" else WHITE
                assert game.board.has_line(winner_stone) and not game.board.has_line(other(winner_stone))
            if policy is weak_move:
                assert info["result"] == "loss" and info["winner"] != color
            results.append(info["result"])
    assert "win" in results and "loss" in results


def test_a_single_agent_win_and_a_loss_in_the_transcript() -> None:
    won = play_policy(GomokuGame(seed=1), strong_move, 0)
    assert won.results[-1].info["result"] == "win" and won.total_reward == 1.0
    assert won.results[-1].observation.endswith("X wins")
    messages = won.messages()
    turns = len(won.actions) - 1
    assert [m["role"] for m in messages] == ["system", "user", *["assistant", "user"] * turns, "assistant"]
    lost = play_policy(GomokuGame(seed=1), weak_move, 0)
    assert lost.results[-1].info == {
        "result": "loss", "correct": False, "seat": "black", "winner": "white",
        "outcomes": {"black": "loss", "white": "win"}, "rewards": {"black": -1.0, "white": 1.0},
        "moves": lost.results[-1].info["moves"], "invalid_moves": {"black": 0, "white": 0},
        "split": "train", "index": 0}
    assert lost.results[-1].observation.endswith("O wins") and lost.total_reward == -1.0


def test_single_agent_draw_on_a_full_small_board() -> None:
    game = GomokuGame(size=3, win_length=3, model_color="white")
    draws = [play_policy(game, strong_move, index) for index in range(5)]
    for episode in draws:
        last = episode.results[-1]
        assert last.info["result"] == "draw" and last.info["correct"] is False and last.reward == 0.0
        assert last.info["winner"] is None and last.info["outcomes"] == {"black": "draw", "white": "draw"}
        assert game.board.is_full() and last.info["moves"] == 9
        assert last.observation.endswith("Draw")


def test_illegal_moves_are_penalised_explained_and_retried() -> None:
    game = GomokuGame(seed=0)
    harness = GameHarness(game)
    harness.reset(index=0)
    harness.step("e5")
    reply = parse_move(harness.episode.results[-1].observation.splitlines()[0])
    board_before = game.board.render()
    taken = harness.step("e5")
    assert taken.observation == "Illegal: e5 is taken. X to move"
    assert (taken.reward, taken.done) == (-0.5, False)
    assert taken.info == {"error": "taken", "seat": "black", "to_move": "black", "invalid_moves": 1}
    retaken = harness.step(f"I play {move_name(reply)}")
    assert retaken.observation == f"Illegal: {move_name(reply)} is taken. X to move"
    off = harness.step("j1")
    assert off.observation == "Illegal: j1 is off the board. X to move" and off.reward == -0.5
    assert game.board.render() == board_before  # nothing moved, the opponent did not play
    legal = harness.step(move_name(next(iter(game.board.empty_cells()))))
    assert legal.reward == 0.0 and not legal.done and legal.observation.startswith("O: ")
    forfeit = harness.step("I pass")
    assert forfeit.done and forfeit.reward == -1.0
    assert forfeit.info["result"] == "forfeit" and forfeit.info["correct"] is False
    assert forfeit.info["outcomes"] == {"black": "forfeit", "white": "win"}
    assert forfeit.info["invalid_moves"] == {"black": 4, "white": 0}
    assert forfeit.observation.endswith("X forfeits")
    assert harness.episode.total_reward == 3 * -0.5 - 1.0
    with pytest.raises(HarnessError):
        harness.step("a1")


def test_unparseable_moves_and_the_invalid_move_limit() -> None:
    game = GomokuGame(size=5, win_length=3, max_invalid_moves=1, invalid_move_penalty=-0.25)
    episode = play(game, ["hmm", "pass", "c3"], index=0)
    assert episode.actions == ("hmm", "pass")
    assert episode.results[0].observation == "Illegal: no move found; reply like c3. X to move"
    assert episode.results[0].reward == -0.25 and episode.results[0].info["error"] == "no move found"
    assert episode.results[1].info["result"] == "forfeit" and episode.total_reward == -1.25
    strict = play(GomokuGame(max_invalid_moves=0), ["z9", "e5"], index=0)
    assert strict.done and strict.actions == ("z9",) and strict.total_reward == -1.0


def test_step_out_of_order() -> None:
    game = GomokuGame()
    with pytest.raises(RuntimeError, match="before reset"):
        game.step("e5")
    play(game, ["pass"] * 4, index=0)
    with pytest.raises(RuntimeError, match="after the episode is done"):
        game.step("e5")
    game.reset(index=0)
    assert not game.step("e5").done  # reset starts a new episode


def test_single_agent_seats() -> None:
    game = GomokuGame(model_color="white")
    game.reset(index=0)
    assert not game.step(move_name(weak_move(game.board, WHITE)), seat="white").done
    with pytest.raises(WrongSeatError, match="^seat: the model plays white; black is the scripted opponent"):
        game.step("a1", seat="black")
    with pytest.raises(WrongSeatError, match="^seat: expected one of black, white"):
        game.step("a1", seat="red")
    assert not game.step(move_name(weak_move(game.board, WHITE))).done


# -- two seats --------------------------------------------------------------------------------


def test_two_seats_with_explicit_seats() -> None:
    game = GomokuGame(size=5, win_length=3, opponent="none")
    first = game.reset(index=0)
    assert first == " abcde\n1.....\n2.....\n3.....\n4.....\n5.....\nX to move"
    result = game.step("c3", seat="black")
    assert result.observation.startswith("X: c3\n") and result.observation.endswith("O to move")
    assert (result.reward, result.done) == (0.0, False)
    with pytest.raises(WrongSeatError, match="^seat: white is to move, not black"):
        game.step("a1", seat="black")
    game.step("a1", seat="white")
    with pytest.raises(WrongSeatError, match="^seat: black is to move, not white"):
        game.step("a2", seat="white")
    taken = game.step("a1", seat="black")
    assert taken.reward == -0.5 and taken.observation == "Illegal: a1 is taken. X to move"
    game.step("b3", seat="black")
    game.step("a2", seat="white")
    won = game.step("(3, 4)", seat="black")  # d3: b3 c3 d3
    assert won.done and won.reward == 1.0
    assert won.info["result"] == "win" and won.info["correct"] is True and won.info["winner"] == "black"
    assert won.info["outcomes"] == {"black": "win", "white": "loss"}
    assert won.info["rewards"] == {"black": 1.0, "white": -1.0}
    assert won.info["invalid_moves"] == {"black": 1, "white": 0}


def test_two_seats_through_the_harness() -> None:
    game = GomokuGame(size=5, win_length=3, opponent="none")
    episode = play(game, ["a1", "e5", "b2", "e4", "d4", "e3", "c3", "a5"])
    assert episode.actions == ("a1", "e5", "b2", "e4", "d4", "e3")  # white e5 e4 e3 wins
    last = episode.results[-1]
    assert last.reward == 1.0 and last.info["seat"] == "white" and last.info["winner"] == "white"
    assert last.info["outcomes"] == {"black": "loss", "white": "win"}
    assert [r.observation.splitlines()[0] for r in episode.results[:-1]] == [
        "X: a1", "O: e5", "X: b2", "O: e4", "X: d4"]


def test_two_seat_draw() -> None:
    episode = play(GomokuGame(size=3, win_length=3, opponent="none"), DRAWN_3X3)
    last = episode.results[-1]
    assert episode.actions == tuple(DRAWN_3X3) and last.done and last.reward == 0.0
    assert last.info["result"] == "draw" and last.info["seat"] == "black"
    assert last.info["rewards"] == {"black": 0.0, "white": 0.0}
    assert last.observation == " abc\n1XOX\n2XOO\n3OXX\nDraw"


def test_two_seat_forfeit_and_penalties_go_to_the_stepping_seat() -> None:
    game = GomokuGame(opponent="none", max_invalid_moves=2)
    game.reset()
    game.step("e5", seat="black")
    assert [game.step("e5", seat="white").reward for _ in range(2)] == [-0.5, -0.5]
    forfeit = game.step("nothing", seat="white")
    assert forfeit.done and forfeit.reward == -1.0
    assert forfeit.info["result"] == "forfeit" and forfeit.info["seat"] == "white"
    assert forfeit.info["outcomes"] == {"black": "win", "white": "forfeit"}
    assert forfeit.info["rewards"] == {"black": 1.0, "white": -1.0}
    assert forfeit.info["winner"] == "black" and forfeit.observation.endswith("O forfeits")


def test_docstring_examples() -> None:
    episode = play(GomokuGame(size=9, win_length=5, seed=0), ["e5", "e4", "e6"], index=0)
    assert len(episode.actions) == 3 and not episode.done
    game = GomokuGame(size=5, win_length=3, opponent="none")
    episode = play(game, ["a1", "a2", "b1", "b2", "c1"])
    assert episode.results[-1].reward == 1.0
    assert episode.results[-1].info["outcomes"] == {"black": "win", "white": "loss"}


def test_cell_numbers_parse_row_by_row_and_out_of_range_is_off_the_board() -> None:
    assert parse_cell("5", 3) == Move(1, 1)
    assert parse_cell("ab1 then 9", 3) == Move(2, 2)
    assert parse_cell("3", 3) == Move(0, 2)
    assert parse_cell("no digits", 3) is None
    assert not Board(3, 3).on_board(parse_cell("0", 3))
    assert not Board(3, 3).on_board(parse_cell("10", 3))


def test_a_numbered_board_draws_free_cells_as_their_numbers() -> None:
    board = Board.from_rows(["X..", ".O.", "..."], win_length=3)
    assert board.render(numbered=True) == "X23\n4O6\n789"
    with pytest.raises(ValueError, match="3x3"):
        Board(4, 3).render(numbered=True)


def test_cell_move_format_plays_a_two_seat_game_in_digits() -> None:
    game = GomokuGame(size=3, win_length=3, opponent="none", move_format="cell")
    assert game.get_system_prompt() == ("Gomoku: 3 in a row wins. X moves first. "
                                        "Reply with a free cell's number like 5.")
    assert game.reset(index=0) == "123\n456\n789\nX to move"
    first = game.step("5")
    assert first.observation == "X: 5\n123\n4X6\n789\nO to move" and first.info["move"] == "b2"
    taken = game.step("5")
    assert (taken.reward, taken.observation) == (-0.5, "Illegal: 5 is taken. O to move")
    fresh = GomokuGame(size=3, win_length=3, opponent="none", move_format="cell")
    episode = play(fresh, ["1", "4", "2", "5", "3"])
    assert episode.results[-1].info["outcomes"] == {"black": "win", "white": "loss"}


def test_cell_move_format_needs_a_3x3_board() -> None:
    with pytest.raises(GameConfigError, match="move_format"):
        GomokuGame(size=4, win_length=3, move_format="cell")
    with pytest.raises(GameConfigError, match="move_format"):
        GomokuGame(size=3, win_length=3, move_format="digits")
