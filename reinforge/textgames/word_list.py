"""Wordle's words: the most frequent five-letter English words of the `wordfreq` package.

`wordfreq` (Robyn Speer; PyPI, an optional extra: `pip install 'reinforge[wordle]'`) ships its
frequency lists inside the package, built from Wikipedia, subtitles, news, books, web text and
more; nothing is downloaded at run time. Its data has been frozen since 3.0 (the project is
sunset: "wordfreq will not be updated"), and the extra pins the release, so the list is the same
on every install: `five_letter_words(n)` is the first n words of `top_n_list("en", ...)` made of
exactly five ASCII letters a-z, most frequent first.

Secrets come from the most frequent words (`answers`), accepted guesses from a longer prefix of the
same list (`vocabulary`): a guess that is not a word of it is an illegal move.
"""

from __future__ import annotations

from functools import lru_cache

from reinforge.textgames.game import GameOptionsError

WORDFREQ_VERSION = "3.1.1"  # the release the extra pins; its data is frozen
INSTALL_HINT = "pip install 'reinforge[wordle]'"


def is_five_letter_word(word: str) -> bool:
    return len(word) == 5 and word.isascii() and word.isalpha() and word.islower()


@lru_cache(maxsize=4)
def five_letter_words(n: int) -> tuple[str, ...]:
    """The n most frequent five-letter English words of wordfreq, most frequent first."""
    try:
        import wordfreq
    except ImportError:
        raise GameOptionsError(
            f"wordle's word list comes from the wordfreq package, which is not installed: {INSTALL_HINT} "
            "(or give the game its own list: task.params.options.words)"
        ) from None
    words: list[str] = []
    size = 4 * n
    while True:
        ranked = wordfreq.top_n_list("en", size, wordlist="best")
        words = [w for w in dict.fromkeys(ranked) if is_five_letter_word(w)]
        if len(words) >= n or len(ranked) < size:
            break
        size *= 2
    if len(words) < n:
        raise GameOptionsError(f"wordfreq's English list has only {len(words)} five-letter words, {n} were asked for")
    return tuple(words[:n])
