"""The success head and rollout pruning in games and the gateway, part by part, hand-checked:
how a game's seats become the head's training samples, ARRoL's rule over units (a game, an agent
episode), and how play_games gives each policy its own hook and ends a pruned game for every seat."""

from __future__ import annotations

import re
from types import SimpleNamespace

import torch

from reinforge.config import SuccessHeadConfig
from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.decode_hook import DecodeCheck, RowGroups
from reinforge.games.env import GameEnv
from reinforge.games.play import play_games
from reinforge.gateway.session_pruning import SessionPruning
from reinforge.learner.success_head_learner import SuccessHeadLearner, trajectory_features
from reinforge.tasks.task import Task
from reinforge.values.rollout_pruning import PruningHook

BUDGET = 4  # rollout.max_new_tokens of a tic-tac-toe move


def game_task(seats, game="tictactoe", seed=1) -> Task:
    meta = {"game": game, "seats": seats, "game_seed": seed, "draw_reward": 0.0, "max_illegal_moves": 2, "family": "test", "demo_seat": 0}
    if seats and any(s not in ("policy", "random", "minimax", "literal") for s in seats):
        meta["policies"] = [s for s in seats if s not in ("random", "minimax", "literal")]
    return Task(id=f"{game}-{seed}", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)


def open_cell(prompt: str) -> str:
    board = re.findall(r"Board (\S+)\.", prompt)[-1]
    return next(c for c in board if c.isdigit())


class HookedMoveEngine:
    """Answers each row with `choose(prompt)` + the stop token (log-probs -0.5, -0.51, ...); given a
    decode hook, runs one check after the first token, as the TorchEngine does at step 1, and
    returns the rows it stops as "pruned" with that one token."""

    supports_decode_hook = True
    policy_version = 0

    def __init__(self, tokenizer, stop_id, choose=open_cell):
        self.tokenizer, self.stop_id, self.choose = tokenizer, stop_id, choose
        self.hooks: list = []  # per call: the hook it was given (None: none)

    def generate(self, prompts, params, seed=None, decode_hook=None):
        self.hooks.append(decode_hook)
        out = []
        for prompt in prompts:
            ids = self.tokenizer(self.choose(self.tokenizer.decode(prompt)), add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.5 - 0.01 * i for i in range(len(ids))], "stop", self.policy_version))
        if decode_hook is not None:
            n = len(prompts)
            check = DecodeCheck(1, torch.arange(n), torch.zeros(n, len(self.tokenizer)), torch.full((n, 1), -0.5),
                                torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool))
            for row in decode_hook(check).nonzero().flatten().tolist():
                out[row] = Generation(out[row].token_ids[:1], out[row].logprobs[:1], "pruned", self.policy_version)
        return out


class ScriptedHead:
    """The head's p(success) for each check, in order (the features are not what is tested here)."""

    def __init__(self, *checks: list[float]):
        self.checks = list(checks)

    def probability(self, features: torch.Tensor) -> torch.Tensor:
        p = self.checks.pop(0)
        assert len(p) == len(features)
        return torch.tensor(p)


def scripted_hook(*checks: list[float], min_group_size: int = 2) -> PruningHook:
    cfg = SuccessHeadConfig(enabled=True, prune=True, min_group_size=min_group_size)
    return PruningHook(SimpleNamespace(cfg=cfg, budget=BUDGET, head=ScriptedHead(*checks)), group_size=0)  # checks every 1 step


def test_each_seat_trains_the_head_on_its_final_turn_with_its_own_outcome(tokenizer, nano_model) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    script = iter(["1", "4", "2", "5", "3"])  # X: 1 2 3 wins the top row; O: 4 5 loses
    engine = HookedMoveEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt: next(script))
    x, o = env.run_groups(engine, [game_task(["policy", "policy"])], 2, SamplingParams(BUDGET, stop_token_ids=env.stop_token_ids), seed=0)
    x.reward, o.reward = x.stats["env_reward"], o.stats["env_reward"]  # what the env_reward component scores: 1, -1
    assert (x.reward, o.reward, x.num_turns, o.num_turns) == (1.0, -1.0, 3, 2)

    features, owners = trajectory_features(nano_model, [x, o], every=1, budget=BUDGET)
    # Only the final turns ("3" + end of turn, "5" + end of turn: 2 tokens each), at s = 1 and s = 2 (whole).
    assert owners.tolist() == [0, 0, 1, 1]
    assert features[:, -2].tolist() == [1 / 4, 2 / 4, 1 / 4, 2 / 4] and features[:, -1].tolist() == [0, 1, 0, 1]
    assert torch.allclose(features[:, -4], torch.tensor([-0.5, -0.505, -0.5, -0.505]))  # mean behaviour log-prob of the prefix
    assert torch.allclose(features[:, -3], torch.tensor([-0.5, -0.51, -0.5, -0.51]))  # its min
    for row, (t, s) in enumerate([(x, 1), (x, 2), (o, 1), (o, 2)]):  # the policy's next-token logits after the prefix
        start = t.turn_spans[-1][0]
        logits = nano_model(input_ids=torch.tensor([t.token_ids])).logits[0, start + s - 1]
        assert torch.allclose(features[row, : logits.shape[-1]], logits.float().log_softmax(-1).clamp(min=-30.0) / 10, atol=1e-5)

    learner = SuccessHeadLearner(SuccessHeadConfig(enabled=True, check_every=1), len(tokenizer), BUDGET, seed=0)
    metrics = learner.update(nano_model, [x, o])
    assert learner.labels.tolist() == [1.0, 1.0, 0.0, 0.0]  # X won: success; O lost: failure
    assert metrics["success_head/positive_frac"] == 0.5 and metrics["success_head/examples"] == 4
    x.finish_reason = o.finish_reason = "pruned"  # a pruned game has no outcome: no examples
    assert learner.update(nano_model, [x, o]) == {"success_head/examples": 4.0}


def test_units_are_pruned_by_arrols_rule_counting_the_groups_other_units() -> None:
    # One group; 3 games in the call at p = 0.1, 0.2, 0.9; rho = 0.5, tau = 0.5: S = 1, F = 2, keep_fail = 1.
    # min_group_size 3: with one more game of the group elsewhere n = 4 -> k = min(2, 1, 4 - 3) = 1: the lowest goes.
    check = DecodeCheck(1, torch.arange(3), torch.zeros(3, 8), torch.full((3, 1), -0.5), torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool))
    hook = scripted_hook([0.1, 0.2, 0.9], [0.1, 0.2, 0.9], min_group_size=3)
    assert hook.for_rows(RowGroups([5, 5, 5], ["a", "b", "c"], {5: 1}))(check).tolist() == [True, False, False]
    assert hook.for_rows(RowGroups([5, 5, 5], ["a", "b", "c"], {}))(check).tolist() == [False, False, False]  # n = 3: none
    # Two rows of one unit (an agent's n = 2 request): its prediction is their mean, and it stops whole.
    hook = scripted_hook([0.1, 0.3, 0.4, 0.9], min_group_size=2)
    four = DecodeCheck(1, torch.arange(4), torch.zeros(4, 8), torch.full((4, 1), -0.5), torch.zeros(4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool))
    # units a (0.1, 0.3: 0.2), b (0.4), c (0.9): S = 1, F = 2, k = min(2, 1, 3 - 2) = 1 -> a, both its rows
    assert hook.for_rows(RowGroups([0, 0, 0, 0], ["a", "a", "b", "c"], {}))(four).tolist() == [True, True, False, False]


def test_a_pruned_game_leaves_for_every_seat_and_the_group_keeps_its_minimum(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    # Round 0: the 3 self-play games' X moves at p = 0.1, 0.2, 0.9 -> game 0 is pruned (as above, min 2).
    # Round 1: games 1 and 2 (O to move), none elsewhere: n = 2 = min_group_size, nothing more.
    hook = scripted_hook([0.1, 0.2, 0.9], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1])
    calls = []
    hook.for_rows = lambda rows, original=hook.for_rows: calls.append(rows) or original(rows)
    engine = HookedMoveEngine(tokenizer, env.chat.end_of_turn_id)
    out = env.run_groups(engine, [game_task(["policy", "policy"])], 6, SamplingParams(BUDGET, stop_token_ids=env.stop_token_ids), seed=0,
                         first_group_id=3, decode_hook=hook)
    assert [t.finish_reason for t in out] == ["pruned", "pruned", "stop", "stop", "stop", "stop"]  # game 0: X and O
    assert out[1].num_turns == 0 and out[0].num_turns == 1  # cut at X's first move: O never moved
    assert calls[0].groups == [3, 3, 3] and calls[0].elsewhere == {}
    assert calls[1].groups == [3, 3] and calls[1].elsewhere == {} and len(set(calls[1].units)) == 2  # the pruned game is gone


def test_each_policy_prunes_its_own_moves_with_its_own_head_and_pool_members_are_not_pruned(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=4)
    describer, guesser = scripted_hook(*[[0.9, 0.9]] * 4), scripted_hook(*[[0.9, 0.9]] * 4)
    engine = HookedMoveEngine(tokenizer, env.chat.end_of_turn_id, choose=lambda prompt: "1")  # colour 1, then thing 1: both legal
    task = game_task(["describer", "guesser"], game="describer_guesser")
    env.run_groups({"describer": engine, "guesser": engine}, [task], 4, SamplingParams(2, stop_token_ids=env.stop_token_ids), seed=0,
                   decode_hook={"describer": describer, "guesser": guesser})
    learners = [h.learner for h in engine.hooks]
    assert learners == [describer.learner, guesser.learner]  # the describer moves first (its head), then the guesser (its own)
    assert all(h.rows.groups == [0, 0] for h in engine.hooks)  # both games of the group, one row each

    pool = GameEnv(tokenizer, max_turns=9)  # a pool member's seat, as GameEnv seats one drawn from its pool
    frozen = HookedMoveEngine(tokenizer, env.chat.end_of_turn_id)
    runs = [pool.new_run(game_task(["policy", "random"]), 0, "s")]
    runs[0].players[1] = "pool@0"
    runs[0].__post_init__()
    hook = scripted_hook(*[[0.9]] * 9)
    policy_engine = HookedMoveEngine(tokenizer, env.chat.end_of_turn_id)
    play_games(policy_engine, pool.chat, pool.decode_response, runs, SamplingParams(BUDGET, stop_token_ids=env.stop_token_ids), 0,
               frozen={"pool@0": frozen}, decode_hook=hook)
    assert frozen.hooks and all(h is None for h in frozen.hooks)  # a frozen member is not trained: no head prunes it
    assert policy_engine.hooks and all(h is not None for h in policy_engine.hooks)


def test_gateway_sessions_are_placed_in_their_groups_and_a_pruned_one_is_finished() -> None:
    finished = []
    hook = scripted_hook([0.1, 0.2, 0.9])
    pruning = SessionPruning(hook, {"e1": 0, "e2": 0, "e3": 0, "e4": 0, "f1": 1}, finished.append)
    call = pruning.hook_for(["e1", "e2", "e3"])
    assert call.rows.groups == [0, 0, 0] and call.rows.elsewhere == {0: 1, 1: 1}  # e4 and f1 are not in this call
    assert pruning.hook_for(["e1", None]) is None  # a plain request in the call: no group holds it, not pruned
    gens = [Generation([1], [-0.5], reason, 0) for reason in ("pruned", "stop", "stop")]
    pruning.observe(["e1", "e2", "e3"], gens)
    assert finished == ["e1"] and pruning.is_pruned("e1") and not pruning.is_pruned("e2")
    assert pruning.hook_for(["e2", "e3"]).rows.elsewhere == {0: 1, 1: 1}  # e1 pruned: out of its group's count
