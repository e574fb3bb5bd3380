"""The text-game env: the referee (illegal moves, limits, rewards), tokens in the rollout loop,
the warm-up laid out as a rollout lays out the same game, and the evaluation's metrics."""

from __future__ import annotations

import math

from reinforge.config import TaskConfig
from reinforge.engines.base import Generation, SamplingParams
from reinforge.rollout.episodes import rollout_groups
from reinforge.textgames import tasks as text_game_tasks
from reinforge.textgames.env import TextGameEnv
from reinforge.textgames.wordle import feedback

WORDS = ["crane", "abbey", "kebab", "those", "geese", "abide", "speed"]


class ScriptEngine:
    """Answers every row with the next text of `script(prompt_text, row)`, closed by the stop token."""

    def __init__(self, tokenizer, stop_id, script):
        self.tokenizer, self.stop_id, self.script, self.calls = tokenizer, stop_id, script, 0

    def generate(self, prompts, params, seed=None):
        self.calls += 1
        out = []
        for row, prompt in enumerate(prompts):
            ids = self.tokenizer(self.script(self.tokenizer.decode(prompt), row), add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.25] * len(ids), "stop", 3))
        return out


def load(game, options, train_size=2, eval_size=1, **params):
    cfg = TaskConfig(source="text_game", params={"game": game, "options": options, **params}, train_size=train_size, eval_size=eval_size)
    return text_game_tasks.load(cfg, seed=0)


def sampling(env) -> SamplingParams:
    return SamplingParams(8, stop_token_ids=env.stop_token_ids)


def test_a_game_in_the_rollout_loop_is_token_exact(tokenizer) -> None:
    task = load("wordle", {"words": WORDS}).train[0]
    secret = task.answer
    env = TextGameEnv(tokenizer, max_turns=8)
    guesses = iter(["zzzzz", "crane" if secret != "crane" else "abbey", secret])
    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, row: next(guesses))
    [t] = rollout_groups(engine, env, [task], 1, sampling(env), seed=1)
    assert t.finish_reason == "stop" and t.stats == {"env_reward": 1.0, "illegal_moves": 1, "game_moves": 2, "solved": 1}
    assert t.turn_rewards is None  # no per-turn reward asked for

    def turn(text):
        return tokenizer(text, add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]

    def reply(text):
        return env.chat.observation_ids([{"role": "user", "content": text}])

    second = "crane" if secret != "crane" else "abbey"
    expected = [
        (env.prompt_ids(task), False), (turn("zzzzz"), True), (reply("Illegal move: 'zzzzz' is not in the word list. Try again."), False),
        (turn(second), True), (reply(f"{second} {feedback(secret, second)} 5 left."), False), (turn(secret), True),
    ]
    assert t.token_ids == [i for ids, _ in expected for i in ids]
    assert t.loss_mask == [m for ids, m in expected for _ in ids]
    assert [lp for lp, m in zip(t.behaviour_logprobs, t.loss_mask) if m] == [-0.25] * sum(len(i) for i, m in expected if m)


def test_the_illegal_move_limit_ends_the_game_lost(tokenizer) -> None:
    task = load("maze", {"size": 2}, max_illegal_moves=2, failed_reward=-1.0).train[0]
    env = TextGameEnv(tokenizer, max_turns=10)
    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, row: "up")
    [t] = rollout_groups(engine, env, [task], 1, sampling(env), seed=1)
    assert t.finish_reason == "illegal_moves" and t.num_turns == 2
    assert t.stats["illegal_moves"] == 2 and t.stats["env_reward"] == -1.0 and t.stats["solved"] == 0
    assert t.transcript[1]["text"] == "Illegal move: 'up' is not N, S, E or W. Try again."


def test_max_turns_cuts_the_game_with_its_own_finish_reason_and_a_result(tokenizer) -> None:
    task = load("twenty_questions", {}, max_illegal_moves=5).train[0]
    env = TextGameEnv(tokenizer, max_turns=3)
    questions = iter(["is it animal?", "is it big?", "is it pet?"])
    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, row: next(questions))
    [t] = rollout_groups(engine, env, [task], 1, sampling(env), seed=1)
    assert t.finish_reason == "max_turns" and t.num_turns == 3
    assert t.stats["env_reward"] == 0.0 and t.stats["game_moves"] == 3 and t.stats["solved"] == 0  # failed_reward, not missing


def test_per_turn_rewards(tokenizer) -> None:
    task = load("maze", {"size": 2}, turn_reward=-0.1, illegal_move_reward=-0.5, progress_reward=0.2).train[0]
    env = TextGameEnv(tokenizer, max_turns=12)
    path = iter(["x", *task.answer])  # one illegal move, then a shortest walk
    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, row: next(path))
    [t] = rollout_groups(engine, env, [task], 1, sampling(env), seed=1)
    assert t.stats["solved"] == 1 and t.finish_reason == "stop"
    # each step of a shortest walk comes one room closer (progress 1), the last reaches the goal (1)
    expected = [-0.1 - 0.5] + [-0.1 + 0.2] * len(task.answer)
    assert len(t.turn_rewards) == len(expected) and all(math.isclose(a, b) for a, b in zip(t.turn_rewards, expected))


def test_every_episode_of_a_group_plays_the_tasks_puzzle(tokenizer) -> None:
    tasks = load("wordle", {"words": WORDS}, train_size=3).train
    env = TextGameEnv(tokenizer, max_turns=6)
    secrets = [env.puzzle(task)[1].answer for task in tasks for _ in range(2)]
    assert secrets == [task.answer for task in tasks for _ in range(2)]


def test_the_warm_up_lays_out_a_game_as_the_rollout_does(tokenizer) -> None:
    task = load("twenty_questions", {}, teacher_noise=0.5).train[1]
    env = TextGameEnv(tokenizer, max_turns=22)
    moves = iter(m["content"] for m in task.demonstration if m["role"] == "assistant")
    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, row: next(moves))
    [t] = rollout_groups(engine, env, [task], 1, sampling(env), seed=1)
    ids, trained = env.sft_example(task)
    assert t.token_ids == ids and t.loss_mask == trained and t.stats["solved"] == 1


def test_evaluation_reports_success_turns_and_illegal_moves(tokenizer) -> None:
    tasks = load("maze", {"size": 3}, train_size=1, eval_size=3, max_illegal_moves=3).eval
    intros = [task.prompt[0]["content"] for task in tasks]
    assert len(set(intros)) == 3
    env = TextGameEnv(tokenizer, max_turns=10)
    path = list(tasks[0].answer)

    def script(prompt, row):  # the first puzzle walked to the goal, the others answered with nonsense
        if intros[0] in prompt:
            return path[prompt.count("Open") - 1]
        return "Q"

    engine = ScriptEngine(tokenizer, env.chat.end_of_turn_id, script)
    metrics, records = env.evaluate_games(engine, tasks, 8, samples=2, temperature=1.0, seed=0)
    assert metrics["accuracy"] == metrics["textgame/success"] == 1 / 3 and metrics["mean@2"] == 1 / 3
    assert metrics["finish/stop"] == 1 / 3 and metrics["finish/illegal_moves"] == 2 / 3
    turns = len(path) + 3 + 3
    assert metrics["textgame/turns"] == turns / 3 and metrics["textgame/turns_solved"] == len(path)
    assert metrics["illegal_move_rate"] == 6 / turns and metrics["textgame/moves"] == len(path) / 3
    assert [r["correct"] for r in records] == [True, False, False] and records[0]["answer"] == "".join(path)
    assert [m["text"] for m in records[0]["turns"] if m["role"] == "policy"] == path
