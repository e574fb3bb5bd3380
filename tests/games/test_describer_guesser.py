"""describer_guesser: its rules, its cooperative results, the literal player, and the secret that
never reaches the guesser's tokens."""

from __future__ import annotations

import random

import pytest

from reinforge.engines.base import Generation, SamplingParams
from reinforge.games.describer_guesser import COLOUR_OF, COLOURS, THINGS, DescriberGuesser, wrong_code_move
from reinforge.games.env import GameEnv
from reinforge.games.match import Match, MatchRules
from reinforge.games.opponents import check_opponent, literal
from reinforge.games.play import GameRun, play_games
from reinforge.games.registry import get_game
from reinforge.tasks.task import Task


class ScriptEngine:
    """Answers every row with `script[role]` (the role read from the prompt), closed by the stop token."""

    policy_version = 0

    def __init__(self, tokenizer, stop_id, script):
        self.tokenizer, self.stop_id, self.script, self.prompts = tokenizer, stop_id, script, []

    def generate(self, prompts, params, seed=None):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            self.prompts.append(text)
            move = self.script["describer" if "You are the describer" in text else "guesser"]
            ids = self.tokenizer(move, add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.1] * len(ids), "stop", self.policy_version))
        return out


def test_the_describer_clues_then_the_guesser_guesses_and_both_share_the_result() -> None:
    game = get_game("describer_guesser")
    assert isinstance(game, DescriberGuesser) and game.cooperative and not game.perfect_information and game.deal_per_task
    assert THINGS == ("cherry", "banana", "lime", "sky") and COLOURS == ("blue", "red", "yellow", "green")
    state = ("lime", "", "")
    assert game.to_move(state) == 0 and game.legal_moves(state) == ["1", "2", "3", "4"]
    assert game.view(state, 1).endswith("Your guess for no clue:")  # what a guesser whose describer forfeited is shown last
    assert game.view(state, 0) == "Colours 1 blue 2 red 3 yellow 4 green. Your clue for lime:"
    state = game.play(state, "4")  # green
    assert game.to_move(state) == 1 and game.legal_moves(state) == ["1", "2", "3", "4"] and not game.is_over(state)
    assert game.view(state, 1) == "Things 1 cherry 2 banana 3 lime 4 sky. Your guess for green:"
    with pytest.raises(ValueError, match="not a legal move"):
        game.play(state, "5")
    right, wrong = game.play(state, "3"), game.play(state, "4")  # lime, sky
    assert game.is_over(right) and game.legal_moves(right) == []
    assert game.payoffs(right) == (1.0, 1.0) and game.payoffs(wrong) == (0.0, 0.0)
    lost = Match(game, MatchRules(draw_reward=0.5, max_turns=4), wrong)
    lost.finish_reason = "stop"
    assert lost.rewards() == [0.0, 0.0] and lost.outcome(0) == lost.outcome(1) == "loss"  # a wrong guess is no draw
    assert len(set(COLOUR_OF.values())) == len(THINGS)  # a one-to-one code exists: the game can always be won


def test_a_forfeit_in_a_cooperative_game_is_a_loss_for_the_whole_team() -> None:
    match = Match(DescriberGuesser(), MatchRules(max_illegal_moves=2, max_turns=4), ("banana", "", ""))
    assert match.submit(0, "3")
    assert not match.submit(1, "banana") and match.inbox[1] == ["The describer gave its clue.", "Illegal move, try again."]
    match.submit(1, "pear")
    assert match.finish_reason == "illegal_moves"
    assert match.rewards() == [-1.0, -1.0] and match.outcome(0) == match.outcome(1) == "loss"
    won = Match(DescriberGuesser(), MatchRules(max_turns=4), ("banana", "", ""))
    won.submit(0, "3"), won.submit(1, "2")
    assert won.rewards() == [1.0, 1.0] and won.outcome(0) == won.outcome(1) == "win"


def test_the_literal_player_uses_the_true_colours_in_either_seat() -> None:
    game, rng = DescriberGuesser(), random.Random(0)
    for thing, colour in COLOUR_OF.items():
        clue = literal(game, (thing, "", ""), 0, rng)
        assert COLOURS[int(clue) - 1] == colour
        assert THINGS[int(literal(game, ("sky", clue, ""), 1, rng)) - 1] == thing  # it reads the clue, not the secret
    assert [literal(game, (t, "", ""), 0, rng) for t in THINGS] == ["2", "3", "4", "1"]  # not "the same number"
    check_opponent("literal", game)
    with pytest.raises(ValueError, match="literal plays describer_guesser only"):
        check_opponent("literal", get_game("tictactoe"))


def test_the_secret_never_enters_the_guessers_tokens(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=4)
    meta = {"game": "describer_guesser", "seats": ["describer", "guesser"], "policies": ["describer", "guesser"],
            "game_seed": 1, "draw_reward": 0.0, "max_illegal_moves": 2, "family": "joint", "demo_seat": 0}
    task = Task(id="dg", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)

    def play(secret):
        engines = {name: ScriptEngine(tokenizer, env.chat.end_of_turn_id, {"describer": "2", "guesser": "1"})
                   for name in ("describer", "guesser")}
        run = GameRun(task, 0, ["describer", "guesser"], Match(DescriberGuesser(), MatchRules(max_turns=4), (secret, "", "")),
                      random.Random(0), policies=("describer", "guesser"))
        play_games(engines, env.chat, env.decode_response, [run], SamplingParams(4, stop_token_ids=env.stop_token_ids), 0)
        describer, guesser = run.trajectories(env.chat, 0)
        assert engines["guesser"].prompts and all("You are the guesser" in p for p in engines["guesser"].prompts)
        return describer, guesser

    describer_a, guesser_a = play("cherry")
    describer_b, guesser_b = play("banana")
    assert guesser_a.token_ids == guesser_b.token_ids  # the guesser cannot tell the two secrets apart
    assert "Your guess for red:" in tokenizer.decode(guesser_a.token_ids)  # clue 2: red
    shown = tokenizer.decode([t for t, sampled in zip(guesser_b.token_ids, guesser_b.loss_mask) if not sampled])
    for thing in THINGS:  # what the guesser is told names each thing once, in the list of all things
        assert shown.count(thing) == 1, thing
    assert describer_a.token_ids != describer_b.token_ids and "Your clue for banana:" in tokenizer.decode(describer_b.token_ids)
    assert (describer_a.stats["env_reward"], guesser_a.stats["env_reward"]) == (1.0, 1.0)
    assert (describer_b.stats["env_reward"], guesser_b.stats["env_reward"]) == (0.0, 0.0)
    assert (describer_b.stats["loss"], guesser_b.stats["loss"]) == (1.0, 1.0)


def test_every_game_of_a_task_has_the_same_secret(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=4)
    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, {"describer": "2", "guesser": "1"})
    params = SamplingParams(4, stop_token_ids=env.stop_token_ids)

    def secrets(game_seed):
        meta = {"game": "describer_guesser", "seats": ["describer", "literal"], "policies": ["describer", "guesser"],
                "game_seed": game_seed, "draw_reward": 0.0, "max_illegal_moves": 2, "family": "vs-literal", "demo_seat": 0}
        task = Task(id=f"dg-{game_seed}", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)
        runs, _ = env.play(engine, [task], [6], params, 0, 0, None, "train")
        return {run.match.state[0] for run in runs}

    dealt = [secrets(seed) for seed in range(12)]
    assert all(len(s) == 1 for s in dealt)  # a group answers one question
    assert len(set().union(*dealt)) > 1  # tasks differ


def test_the_warm_up_code_is_one_to_one_and_wins_no_game_with_the_literal_player_or_itself() -> None:
    """The demonstrations' wrong codes (by hand: cherry -> 3 yellow, the banana's colour; the clue
    blue (sky's) -> 2 banana, two things after sky): each role's code is a permutation, and with
    the literal partner, or with each other, they never find the secret."""
    game = DescriberGuesser()
    clues = {thing: wrong_code_move((thing, "", ""), 0) for thing in THINGS}
    assert clues == {"cherry": "3", "banana": "4", "lime": "1", "sky": "2"}
    guesses = {clue: wrong_code_move(("sky", clue, ""), 1) for clue in "1234"}
    assert guesses == {"1": "2", "2": "3", "3": "4", "4": "1"}  # blue -> banana, red -> lime, ...
    assert sorted(clues.values()) == sorted(guesses.values()) == ["1", "2", "3", "4"]
    rng = random.Random(0)
    for thing in THINGS:
        with_literal_guesser = literal(game, (thing, clues[thing], ""), 1, rng)
        with_literal_describer = guesses[literal(game, (thing, "", ""), 0, rng)]
        together = guesses[clues[thing]]
        for guess in (with_literal_guesser, with_literal_describer, together):
            assert game.payoffs((thing, clues[thing], guess)) == (0.0, 0.0)


def test_half_the_demonstration_moves_follow_the_code_and_all_are_legal() -> None:
    game, rng = DescriberGuesser(), random.Random(0)
    coded = 0
    for _ in range(2000):
        thing = rng.choice(THINGS)
        move = game.demonstration_move((thing, "", ""), 0, rng)
        assert move in game.legal_moves((thing, "", ""))
        coded += move == wrong_code_move((thing, "", ""), 0)
    assert 0.55 < coded / 2000 < 0.70  # 1/2 coded + 1/2 * 1/4 random hits: 0.625
