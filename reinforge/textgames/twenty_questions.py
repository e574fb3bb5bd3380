"""Twenty questions: find the object the env thinks of by yes / no questions, then guess it.

The env is the answerer, simulated from a fixed table of objects and their attributes
(`CATALOG`: True, False, or None where the attribute does not clearly apply, answered
"unknown"). The secret is one object of the table; the player reads the list of objects and of
attributes in the rules.

Moves, in one parseable form each (any case, surrounding spaces ignored, a final "?" optional):
`is it <attribute>?` asks a question (answered yes / no / unknown), `guess <object>` ends the
game: won if it names the secret, lost otherwise. A question about an attribute that is not
listed, a guess of an object that is not listed, a question already asked, any other text, and a
question after the last one allowed (`max_questions`, default 20; the guess is still allowed)
are illegal moves.

Options: `objects` (a list of names of the catalog to play with; default all), `catalog` (your
own table instead: {object: {attribute: true / false / null}}, every object with the same
attributes), `max_questions` (20).
"""

from __future__ import annotations

import random

from reinforge.textgames.game import Attempt, GameOptionsError, Puzzle, TextGame

ATTRIBUTES = ("animal", "plant", "food", "metal", "electric", "big", "round", "pet", "wild", "sweet", "winged", "aquatic", "toy", "wheeled")
T, F, U = True, False, None
CATALOG: dict[str, dict[str, bool | None]] = {
    name: dict(zip(ATTRIBUTES, values))
    for name, values in {
        #          animal plant food metal elec big round pet wild sweet wing aqua toy wheel
        "cat":      (T, F, F, F, F, F, F, T, F, F, F, F, F, F),
        "parrot":   (T, F, F, F, F, F, F, T, U, F, T, F, F, F),
        "horse":    (T, F, F, F, F, T, F, U, U, F, F, F, F, F),
        "eagle":    (T, F, F, F, F, F, F, F, T, F, T, F, F, F),
        "shark":    (T, F, F, F, F, T, F, F, T, F, F, T, F, F),
        "goldfish": (T, F, F, F, F, F, F, T, F, F, F, T, F, F),
        "tree":     (F, T, F, F, F, T, F, F, U, F, F, F, F, F),
        "rose":     (F, T, F, F, F, F, F, F, U, F, F, F, F, F),
        "apple":    (F, T, T, F, F, F, T, F, F, T, F, F, F, F),
        "bread":    (F, F, T, F, F, F, U, F, F, F, F, F, F, F),
        "cake":     (F, F, T, F, F, F, U, F, F, T, F, F, F, F),
        "car":      (F, F, F, T, U, T, F, F, F, F, F, F, F, T),
        "phone":    (F, F, F, U, T, F, F, F, F, F, F, F, F, F),
        "spoon":    (F, F, F, T, F, F, F, F, F, F, F, F, F, F),
        "ball":     (F, F, F, F, F, F, T, F, F, F, F, F, T, F),
        "bicycle":  (F, F, F, T, F, F, F, F, F, F, F, F, U, T),
    }.items()
}
ANSWERS = {True: "yes", False: "no", None: "unknown"}


def check_catalog(catalog: object) -> dict[str, dict[str, bool | None]]:
    if not isinstance(catalog, dict) or len(catalog) < 2:
        raise GameOptionsError("option catalog of twenty_questions must map at least two object names to {attribute: true/false/null}")
    attributes = None
    for name, row in catalog.items():
        if not isinstance(name, str) or not name.strip() or " " in name.strip() or not isinstance(row, dict):
            raise GameOptionsError(f"option catalog of twenty_questions: {name!r} must be a one-word name mapped to its attributes")
        if attributes is None:
            attributes = set(row)
        if set(row) != attributes or not all(v in (True, False, None) for v in row.values()):
            raise GameOptionsError(f"option catalog of twenty_questions: {name!r} must give true/false/null for the same attributes as the others")
    return {name.strip().lower(): {a.lower(): v for a, v in row.items()} for name, row in catalog.items()}


class TwentyQuestions(TextGame):
    name = "twenty_questions"
    option_defaults = {"objects": None, "catalog": None, "max_questions": 20}

    def __init__(self, **options):
        super().__init__(**options)
        self.max_questions = self.int_option("max_questions", 1)
        catalog = CATALOG if self.options["catalog"] is None else check_catalog(self.options["catalog"])
        names = self.options["objects"]
        if names is not None:
            unknown = [n for n in names if n not in catalog] if isinstance(names, list) else names
            if not isinstance(names, list) or len(names) < 2 or unknown:
                raise GameOptionsError(f"option objects of twenty_questions must list at least two of {sorted(catalog)}; unknown: {unknown}")
            catalog = {n: catalog[n] for n in names}
        self.catalog = catalog
        self.attributes = tuple(next(iter(catalog.values())))

    @property
    def max_moves(self) -> int:
        return self.max_questions + 1  # the questions, then the guess

    def new_puzzle(self, rng: random.Random) -> "TwentyQuestionsPuzzle":
        return TwentyQuestionsPuzzle(self, rng.choice(sorted(self.catalog)))


def parse_move(text: str) -> tuple[str, str] | None:
    """("ask", attribute) or ("guess", object) from the player's text, None when it has neither form."""
    words = text.strip().lower().rstrip("?").split()
    if len(words) == 3 and words[:2] == ["is", "it"]:
        return "ask", words[2]
    if len(words) == 2 and words[0] == "guess":
        return "guess", words[1]
    return None


class TwentyQuestionsPuzzle(Puzzle):
    def __init__(self, game: TwentyQuestions, secret: str):
        self.game, self.secret = game, secret
        self.asked: dict[str, bool | None] = {}
        self.guessed: str | None = None
        self.moves = 0

    @property
    def answer(self) -> str:
        return self.secret

    @property
    def over(self) -> bool:
        return self.guessed is not None

    @property
    def solved(self) -> bool:
        return self.guessed == self.secret

    def intro(self) -> str:
        return (
            f"Twenty questions. I think of one of: {' '.join(sorted(self.game.catalog))}. Ask 'is it X?' with X one of: "
            f"{' '.join(self.game.attributes)}; I answer yes, no or unknown. Then reply 'guess NAME'. "
            f"{self.game.max_questions} questions."
        )

    def candidates(self) -> list[str]:
        """The objects every answer so far allows (an unknown answer rules nothing out)."""
        return [
            name for name, row in sorted(self.game.catalog.items())
            if all(value is None or row[a] is None or row[a] == value for a, value in self.asked.items())
        ]

    def attempt(self, text: str) -> Attempt:
        move = parse_move(text)
        if move is None:
            return Attempt(False, f"{text.strip()[:16]!r}: ask 'is it X?' or reply 'guess NAME'.")
        kind, word = move
        if kind == "guess":
            if word not in self.game.catalog:
                return Attempt(False, f"{word[:16]!r} is not one of the objects.")
            self.guessed, self.moves = word, self.moves + 1
            return Attempt(True, "Right." if self.solved else f"Wrong, it was {self.secret}.")
        if word not in self.game.attributes:
            return Attempt(False, f"{word[:16]!r} is not one of the attributes.")
        if word in self.asked:
            return Attempt(False, f"Already asked {word}.")
        if len(self.asked) >= self.game.max_questions:
            return Attempt(False, "No questions left; reply 'guess NAME'.")
        before = len(self.candidates())
        self.asked[word] = self.game.catalog[self.secret][word]
        self.moves += 1
        left = self.game.max_questions - len(self.asked)
        ruled_out = (before - len(self.candidates())) / before
        return Attempt(True, f"{ANSWERS[self.asked[word]]}. {left} left.", progress=ruled_out)

    def teacher_move(self, rng: random.Random, noise: float) -> str:
        """Ask the attribute that splits the remaining candidates most evenly (a random unasked one
        with probability `noise`), and guess once one candidate is left or no question helps."""
        candidates = self.candidates()
        open_questions = [a for a in self.game.attributes if a not in self.asked]
        if len(self.asked) < self.game.max_questions and len(candidates) > 1 and open_questions:
            if rng.random() < noise:
                return f"is it {rng.choice(open_questions)}?"
            split = {a: min(sum(self.game.catalog[c][a] is v for c in candidates) for v in (True, False)) for a in open_questions}
            best = max(split.values())
            if best > 0:
                return f"is it {rng.choice([a for a in open_questions if split[a] == best])}?"
        return f"guess {rng.choice(candidates or sorted(self.game.catalog))}"
