"""Scripted players for `env.seats` (envs/seats.py): opponents that know a game's rules.

    env.seats=[policy,forge_async.envs.players:tictactoe]

Each is `player(observations, seat) -> move`, given what its seat has seen so far (oldest first)
in the game's own words, as TextArena ships it.
"""

import re

_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
_PREFERENCE = (4, 0, 2, 6, 8, 1, 3, 5, 7)  # the centre, the corners, the sides
_MARK = re.compile(r"you will be '([XO])'")
_BOARD = re.compile(r"Current Board:\s*\n(.*?)\n\s*\nAvailable Moves", re.DOTALL)


def tictactoe(observations: list[str], seat: int) -> str:
    """TextArena's TicTacToe-v0: complete a line of its own if it can, else block one of the
    opponent's, else the centre, a corner, a side."""
    text = "\n".join(observations)
    mark = _MARK.findall(text)[0]
    cells = _cells(_BOARD.findall(text)[-1])
    other = "X" if mark == "O" else "O"
    free = [i for i, cell in enumerate(cells) if cell not in "XO"]
    for player in (mark, other):
        for line in _LINES:
            marks = [cells[i] for i in line]
            if marks.count(player) == 2 and any(i in free for i in line):
                return f"[{next(i for i in line if i in free)}]"
    return f"[{next(i for i in _PREFERENCE if i in free)}]"


def _cells(board: str) -> list[str]:
    """The nine cells of a rendered board, row by row: 'X', 'O', or the cell's number."""
    rows = [line for line in board.splitlines() if "|" in line]
    return [cell.strip() for row in rows for cell in row.split("|")]
