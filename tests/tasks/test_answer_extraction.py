"""Answer extractors on responses written the way real models write them, and the strict format."""

from __future__ import annotations

import pytest

from reinforge.tasks.answer_extraction import answer_value, extract_answer, strict_form
from reinforge.tasks.verifiers import verify
from reinforge.tasks.task import ANSWER_EXTRACTORS, Task

# SmolLM2-135M-Instruct's greedy answers to "4+8=" and "9+3=" (recorded from the real model).
PROSE_WRONG = (
    "The number 4 and 8 are both integers, but they are not equal. In mathematics, when two integers are equal, "
    "it is called a trinomial. In this case, 4 and 8 are both multiples of 4"
)
PROSE_RIGHT = "The number 9 + 3 = 12."
STEPS = "First, 17 + 25 = 42. Then 42 - 10 = 32, and 32 * 2 = 64.\nSo the answer is 64 apples."
GSM8K = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nAltogether she sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
BOXED_NESTED = "We simplify: $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$. Earlier I wrote \\boxed{3} by mistake? No: \\boxed{\\frac{1}{2}}."
TAG_DRAFTS = "Let me try. <answer>5</answer> no, wait, 2+3+2 = 7. <answer> 7 </answer>"


@pytest.mark.parametrize(
    ("response", "extractor", "expected"),
    [
        # last number: the last one in prose, thousands and signs read as written
        (PROSE_RIGHT, "last_number", "12"),
        (PROSE_WRONG, "last_number", "4"),
        (STEPS, "last_number", "64"),
        ("The total is 1,234 dollars.", "last_number", "1234"),
        ("Between 10,20 and 30", "last_number", "30"),
        ("10-7", "last_number", "7"),  # a minus after a digit is subtraction, not a sign
        ("So x = -7.", "last_number", "-7"),
        ("It is 3.5.", "last_number", "3.5"),
        ("Half, 3/4 of it", "last_number", "3/4"),
        ("No numbers here.", "last_number", None),
        # GSM8K: what follows the last ####
        (GSM8K, "gsm8k", "72"),
        ("#### 18 dollars\n", "gsm8k", "18 dollars"),
        ("no mark", "gsm8k", None),
        ("####", "gsm8k", None),
        # boxed: the last complete one, nested braces kept, unclosed ones skipped
        (BOXED_NESTED, "boxed", "\\frac{1}{2}"),
        ("\\boxed{\\sqrt{2}} then cut off \\boxed{3", "boxed", "\\sqrt{2}"),
        ("\\fbox{42}", "boxed", "42"),
        ("\\boxed {7}", "boxed", "7"),
        ("\\boxed{}", "boxed", None),
        # answer tags: the last complete pair; drafts and a stray opening tag do not leak
        (TAG_DRAFTS, "answer_tags", "7"),
        ("<answer>1</answer> and then <answer>2", "answer_tags", "1"),
        ("The answer is 7", "answer_tags", None),
        # response: the old default, tags else the whole response
        (TAG_DRAFTS, "response", "7"),
        ("  46  ", "response", "46"),
        (PROSE_RIGHT, "response", PROSE_RIGHT),
    ],
)
def test_each_extractor_on_realistic_outputs(response: str, extractor: str, expected: str | None) -> None:
    assert extract_answer(response, extractor) == expected


@pytest.mark.parametrize(
    ("response", "numeric", "expected"),
    [
        (TAG_DRAFTS + " \\boxed{9}", True, "7"),  # tags come first
        ("so \\boxed{9}. #### 8", True, "9"),  # then boxed
        (GSM8K, True, "72"),  # then ####
        (STEPS, True, "64"),  # then, for a numeric task, the last number
        ("Paris is the capital.", False, "Paris is the capital."),  # else the whole response
        ("Paris, since 1789.", False, "Paris, since 1789."),  # a non-numeric task never takes a number
        ("   ", False, None),
        ("No digits at all", True, None),
    ],
)
def test_auto_tries_tags_boxed_gsm8k_then_last_number_or_the_response(response: str, numeric: bool, expected: str | None) -> None:
    assert extract_answer(response, "auto", numeric=numeric) == expected


def test_every_extractor_name_is_known_and_a_bad_one_is_named() -> None:
    for name in ANSWER_EXTRACTORS:
        extract_answer("42", name)
    with pytest.raises(ValueError, match="unknown answer extractor 'last'; valid: response, auto"):
        extract_answer("42", "last")
    with pytest.raises(ValueError, match="unknown answer_extractor 'tags'"):
        Task(id="t", prompt="p", answer="1", answer_extractor="tags")


def numeric_task(answer: str, extractor: str) -> Task:
    return Task(id="t", prompt="p", answer=answer, verifier="numeric", answer_extractor=extractor)


@pytest.mark.parametrize(
    ("extractor", "response", "score"),
    [
        ("last_number", "The number 40 + 6 = 46.", 1.0),
        ("last_number", "The numbers 40 and 6 are both integers, but 46 is not 40", 0.0),
        ("auto", "12+34 is 46.", 1.0),
        ("auto", "<answer>The sum is 46</answer>", 1.0),  # words inside the tags: the number they state
        ("gsm8k", "...\n#### $46", 1.0),
        ("boxed", "\\boxed{46}", 1.0),
        ("answer_tags", "The answer is 46.", 0.0),  # no tags: no answer
        ("response", "46", 1.0),
        ("response", "The answer is 46.", 0.0),  # the default stays strict: the whole response is the answer
        ("response", "46x", 0.0),
    ],
)
def test_numeric_verifier_checks_the_extracted_answer(extractor: str, response: str, score: float) -> None:
    assert verify(numeric_task("46", extractor), response) == score


def test_a_boxed_fraction_is_its_value_not_its_denominator() -> None:
    assert answer_value("\\frac{1}{2}", lenient=True) == 0.5
    assert verify(numeric_task("2", "boxed"), "\\boxed{\\frac{1}{2}}") == 0.0
    assert verify(numeric_task("0.5", "boxed"), "\\boxed{\\dfrac{1}{2}}") == 1.0


def test_exact_verifier_and_no_answer() -> None:
    task = Task(id="t", prompt="Capital of France?", answer="Paris", answer_extractor="answer_tags")
    assert verify(task, "Hmm. <answer>paris</answer>") == 1.0
    assert verify(task, "Paris") == 0.0  # the extractor finds no answer in it
    auto = Task(id="t", prompt="Capital of France?", answer="Paris", answer_extractor="auto")
    assert verify(auto, "Paris") == 1.0 and verify(auto, "\\boxed{Paris}") == 1.0


def test_reasoning_gym_scorer_gets_the_extracted_answer() -> None:
    pytest.importorskip("reasoning_gym")
    entry = {"question": "What is 3 + 4?", "answer": "7", "metadata": {}}
    task = Task(id="t", prompt="q", answer="7", verifier="reasoning_gym", metadata={"dataset": "basic_arithmetic", "entry": entry},
                answer_extractor="auto")
    assert verify(task, "3 + 4 = 7. The answer is 7.") == 1.0
    assert verify(task, "Well, I think it is 8") == 0.0
    assert verify(task, "I do not know") == 0.0  # no number: no answer, scored 0 without the scorer


@pytest.mark.parametrize(
    ("response", "extractor", "numeric", "strict"),
    [
        ("Thinking... <answer>7</answer>", "answer_tags", False, True),
        ("<answer>7</answer> I hope that helps!", "answer_tags", False, False),  # not the last thing written
        ("<answer></answer>", "answer_tags", False, False),
        ("So $x = \\boxed{\\frac{1}{2}}$.", "boxed", True, True),
        ("\\boxed{3} is it, I think", "boxed", True, False),
        (GSM8K, "gsm8k", True, True),
        ("#### 72\nHope this helps", "gsm8k", True, False),
        ("So the answer is 64.", "last_number", True, True),
        ("The answer is **64**.", "last_number", True, True),
        (STEPS, "last_number", True, False),  # "64 apples": ends on a word
        ("The answer is 64.", "auto", True, True),
        ("The answer is 64.", "auto", False, False),  # a bare number is a form only for numeric tasks
        ("<answer>Paris</answer>", "auto", False, True),
        ("46", "response", True, True),
        ("46 apples", "response", True, False),
    ],
)
def test_strict_form(response: str, extractor: str, numeric: bool, strict: bool) -> None:
    assert strict_form(response, extractor, numeric=numeric) is strict
