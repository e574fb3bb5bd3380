"""Supervised warm-up helpers (LR schedule, batch masks) and the epoch-wise task sampler."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.tasks.task import Task
from reinforge.trainer.sft import sft_batch, warmup_cosine
from reinforge.tasks.task_sampler import TaskSampler


@pytest.mark.parametrize(
    "step, expected",
    [
        # warm-up = 10, total = 110: (step + 1) / 10 during warm-up
        (0, 0.1),
        (4, 0.5),
        (9, 1.0),
        # then 0.1 + 0.9 * 0.5 * (1 + cos(pi * (step - 10) / 100))
        (10, 1.0),  # progress 0: cos 0 = 1
        (35, 0.1 + 0.45 * (1 + math.sqrt(0.5))),  # progress 1/4: 0.8681981
        (60, 0.55),  # progress 1/2: cos = 0
        (110, 0.1),  # progress 1: cos = -1
        (500, 0.1),  # past the end: stays at the 10% floor
    ],
)
def test_warmup_cosine(step: int, expected: float) -> None:
    assert warmup_cosine(step, warmup=10, total=110) == pytest.approx(expected)


def test_warmup_cosine_without_warmup_and_monotone_decay() -> None:
    assert warmup_cosine(0, warmup=0, total=100) == pytest.approx(1.0)
    assert warmup_cosine(35, 10, 110) == pytest.approx(0.8681981, abs=1e-7)
    values = [warmup_cosine(s, 10, 110) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    # degenerate total == warmup does not divide by zero
    assert warmup_cosine(5, 5, 5) == pytest.approx(1.0)


def test_sft_batch_masks_by_hand() -> None:
    F, T = False, True
    examples = [([5, 6, 7, 8, 9], [F, F, T, T, T]), ([1, 2, 3], [F, T, T]), ([4, 4], [F, F])]  # the last trains nothing
    input_ids, attention, target = sft_batch(examples, pad_token_id=0)
    assert input_ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 0, 0], [4, 4, 0, 0, 0]]
    assert attention.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert target.dtype == torch.bool
    assert target.tolist() == [
        [False, False, True, True, True],
        [False, True, True, False, False],
        [False, False, False, False, False],
    ]


def test_sft_target_mask_covers_exactly_the_completion(tokenizer) -> None:
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = [
        Task(id="a", prompt="12+30=", answer="42"),
        Task(id="b", prompt="1+2=", answer="3", demonstration="<answer>3</answer>"),
    ]
    examples = [env.sft_example(t) for t in tasks]
    input_ids, attention, target = sft_batch(examples, tokenizer.pad_token_id)
    for row, task in enumerate(tasks):
        ids = input_ids[row][target[row]].tolist()
        # the trained tokens are the completion and <eos>, nothing of the prompt, no padding
        assert ids == tokenizer(task.sft_target, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        assert tokenizer.decode(ids, skip_special_tokens=True) == task.sft_target
        prompt_len = examples[row][1].index(True)
        assert input_ids[row][:prompt_len].tolist() == tokenizer(task.prompt).input_ids
        assert not target[row][:prompt_len].any()
        assert int(attention[row].sum()) == len(examples[row][0])
    assert not (target & (attention == 0)).any()


def make_tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", prompt=f"q{i}", answer=str(i)) for i in range(n)]


def test_sampler_draws_each_task_once_per_epoch() -> None:
    tasks = make_tasks(7)
    sampler = TaskSampler(tasks, seed=3)
    draws = [t.id for _ in range(7) for t in sampler.next_batch(3)]  # 21 draws = 3 epochs
    for epoch in range(3):
        assert sorted(draws[7 * epoch : 7 * epoch + 7]) == sorted(t.id for t in tasks)
    assert Counter(draws) == {t.id: 3 for t in tasks}
    # shuffled, not file order every epoch
    assert [draws[0:7], draws[7:14], draws[14:21]] != [[t.id for t in tasks]] * 3


def test_sampler_batch_larger_than_the_task_list() -> None:
    batch = TaskSampler(make_tasks(3), seed=0).next_batch(7)
    ids = [t.id for t in batch]
    assert len(ids) == 7
    assert sorted(ids[:3]) == sorted(ids[3:6]) == ["t0", "t1", "t2"]


def test_sampler_is_reproducible_by_seed() -> None:
    tasks = make_tasks(20)

    def run(seed: int) -> list[str]:
        sampler = TaskSampler(tasks, seed)
        return [t.id for size in (4, 9, 13, 1) for t in sampler.next_batch(size)]

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_sampler_needs_tasks() -> None:
    with pytest.raises(ValueError, match="no training tasks"):
        TaskSampler([], seed=0)
