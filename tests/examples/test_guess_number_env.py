"""The guess_number example's env, in-process: an episode played with the teacher's guesses appends
exactly the tokens of the warm-up example (tokens in, tokens out), replies higher / lower, ends
solved on the secret, and the task source's teachers play the games they claim to."""

from __future__ import annotations

from example_runs import import_example_file
from reinforge.config import TaskConfig


def example(module: str):
    return import_example_file("guess_number", module)


def test_an_episode_replaying_a_demonstration_has_the_warm_up_tokens(tokenizer):
    env = example("guess_env").GuessNumberEnv(tokenizer, max_turns=5)
    games = example("games")
    task = next(t for t in games.load(TaskConfig(train_size=50, params={"binary_search": 0.0}), seed=0).train if t.answer == "14")
    assert [m["content"] for m in task.demonstration] == ["8", "higher", "9", "higher", "10", "higher", "11", "higher",
                                                          "12", "higher", "13", "higher", "14"]

    episode = env.episode()
    ids = episode.reset(task)
    trained = [False] * len(ids)
    replies = []
    for guess in [m["content"] for m in task.demonstration if m["role"] == "assistant"]:
        sampled = env.chat.assistant_ids(guess)  # what the policy samples: the guess, then end of turn
        assert env.decode_response(sampled) == guess
        ids += sampled
        trained += [True] * len(sampled)
        result = episode.step(guess, "stop")
        if result.done:
            assert result.info == {"finish_reason": "stop", "solved": 1} and result.observation_ids == []
            break
        ids += result.observation_ids
        trained += [False] * len(result.observation_ids)
        replies.append(result.observation_text)
    assert replies == ["higher"] * 6
    assert env.sft_example(task) == (ids, trained)


def test_replies_and_counts(tokenizer):
    env = example("guess_env").GuessNumberEnv(tokenizer)
    games = example("games")
    episode = env.episode()
    episode.reset(games.load(TaskConfig(train_size=2), seed=0).eval[4])  # secret 5
    assert episode.step("9", "stop").observation_text == "lower"
    assert episode.step(" 3 ", "stop").info == {"wrong_guesses": 1}
    invalid = episode.step("five", "stop")
    assert not invalid.done and invalid.info == {"invalid_guesses": 1} and invalid.observation_text == "say one number"
    assert episode.step("5", "length").info == {"invalid_guesses": 1}  # a cut turn is not a guess
    assert episode.step("5", "stop").done


def test_the_teachers_play_as_described():
    games = example("games")
    for secret in range(1, 17):
        halving = games.halving_game(secret, 1, 16)
        assert halving[-1] == secret and len(halving) <= 5
        scanning = games.scanning_game(secret, 1, 16)
        assert scanning[0] == 8 and scanning[-1] == secret
        assert all(abs(a - b) == 1 for a, b in zip(scanning, scanning[1:]))
    solved_by_scanning = [s for s in range(1, 17) if len(games.scanning_game(s, 1, 16)) <= 5]
    assert solved_by_scanning == list(range(4, 13))  # 9 of 16: the warm start's greedy accuracy
