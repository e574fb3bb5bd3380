"""Real verifiers environments (classic API), written with the package's own classes, for the
verifiers adapter tests. Importing this module needs the `verifiers` extra."""

from __future__ import annotations

import re

import verifiers as vf
from datasets import Dataset

PARSER = vf.Parser()


def said_the_answer(completion, answer, **kwargs) -> float:
    return 1.0 if (PARSER.parse_answer(completion) or "").strip() == str(answer) else 0.0


def rows() -> Dataset:
    return Dataset.from_list([{"question": f"Say {n}.", "answer": str(n)} for n in range(1, 5)])


class GuessEnv(vf.MultiTurnEnv):
    """Guess the answer; the env says higher / lower until it is guessed."""

    async def setup_state(self, state):
        state["guessed"] = False
        return state

    async def env_response(self, messages, state, **kwargs):
        text = PARSER.parse_answer(messages) or ""
        match = re.search(r"-?\d+", text)
        if match and match.group() == str(state["answer"]):
            state["guessed"] = True
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]  # ends the rollout now
            return state["final_env_response"]
        hint = "Say a number." if match is None else ("higher" if int(match.group()) < int(state["answer"]) else "lower")
        return [vf.UserMessage(content=hint)]


def guessed(state, **kwargs) -> float:
    return 1.0 if state.get("guessed") else 0.0


def load_environment(kind: str = "single", max_turns: int = 3, **kwargs):
    if kind == "single":
        rubric = vf.Rubric(funcs=[said_the_answer], parser=PARSER)
        return vf.SingleTurnEnv(dataset=rows(), system_prompt="Answer with a number.", parser=PARSER, rubric=rubric)
    if kind == "multi":
        return GuessEnv(dataset=rows(), max_turns=max_turns, parser=PARSER, rubric=vf.Rubric(funcs=[guessed], parser=PARSER))
    if kind == "judge":
        return vf.SingleTurnEnv(dataset=rows(), rubric=vf.JudgeRubric(judge_client=object()))
    if kind == "group":
        def best_of_group(completions, **kwargs) -> list[float]:
            return [1.0 for _ in completions]

        return vf.SingleTurnEnv(dataset=rows(), rubric=vf.Rubric(funcs=[best_of_group]))
    raise ValueError(f"unknown kind {kind!r}")
