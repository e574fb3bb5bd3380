"""A search tool: BM25 over a local document collection (no network), via the `bm25s` library.

Documents are dicts with a `text` and an `id` and/or a `title`, given as a list or as a JSONL
file of them. The index is built once, when the tool is made; each call tokenizes the query with
the index's own vocabulary and returns the best `top_k` documents as title + snippet, where the
snippet is cut around the first query word found in the text.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s

from reinforge.envs.tools.registry import Tool, tool_from_function

_WORD = re.compile(r"(?u)\b\w\w+\b")  # bm25s's default token pattern: snippets find the same words


class SearchError(RuntimeError):
    """A query the tool cannot answer (e.g. an empty one)."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


def _document(raw: Any, where: str) -> Document:
    if not isinstance(raw, dict):
        raise ValueError(f"search tool: {where} must be an object with 'text' and 'id' or 'title', got {raw!r:.80}")
    text = raw.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"search tool: {where} needs a non-empty string 'text'")
    title, doc_id = raw.get("title"), raw.get("id")
    if title is None and doc_id is None:
        raise ValueError(f"search tool: {where} needs an 'id' or a 'title'")
    if title is not None and not isinstance(title, str):
        raise ValueError(f"search tool: {where}: 'title' must be a string, got {title!r}")
    if doc_id is not None and (isinstance(doc_id, bool) or not isinstance(doc_id, (str, int))):
        raise ValueError(f"search tool: {where}: 'id' must be a string or an integer, got {doc_id!r}")
    return Document(id="" if doc_id is None else str(doc_id), title=title or "", text=text)


def load_documents(documents: list[dict] | str | Path) -> list[Document]:
    """Validated documents from a list of dicts or a JSONL file; errors name the item or line."""
    if isinstance(documents, (str, Path)):
        path = Path(documents).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"search tool: documents file {str(documents)!r} does not exist")
        loaded = []
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"search tool: {path}:{number} is not valid JSON: {e}") from None
                loaded.append(_document(raw, f"{path}:{number}"))
    elif isinstance(documents, (list, tuple)):
        loaded = [_document(raw, f"document {i}") for i, raw in enumerate(documents)]
    else:
        raise ValueError("search tool: documents must be a list of {'id'/'title', 'text'} dicts or a JSONL path, "
                         f"got {type(documents).__name__}")
    if not loaded:
        raise ValueError("search tool: the document collection is empty")
    return loaded


def _snippet(text: str, query: str, max_chars: int) -> str:
    words = {w.lower() for w in _WORD.findall(query)}
    first = next((m.start() for m in _WORD.finditer(text) if m.group().lower() in words), 0)
    start = max(0, min(first - max_chars // 4, len(text) - max_chars))
    end = start + max_chars
    window = text[start:end]
    # Cut at spaces, not inside words (unless a single word fills the whole window).
    if start > 0 and not text[start - 1].isspace() and " " in window:
        window = window[window.index(" ") + 1:]
    if end < len(text) and not text[end].isspace() and " " in window:
        window = window[:window.rindex(" ")]
    return ("..." if start > 0 else "") + " ".join(window.split()) + ("..." if end < len(text) else "")


class _Index:
    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
        corpus = [f"{d.title}\n{d.text}" for d in documents]  # a title word counts as much as a text word
        self.retriever = bm25s.BM25()
        self.retriever.index(self.tokenizer.tokenize(corpus, show_progress=False), show_progress=False)
        self.lock = threading.Lock()  # calls may come from several tool threads at once

    def search(self, query: str, k: int) -> list[tuple[Document, float]]:
        with self.lock:
            tokens = self.tokenizer.tokenize([query], update_vocab=False, show_progress=False)
            ids, scores = self.retriever.retrieve(tokens, k=min(k, len(self.documents)), show_progress=False)
        return [(self.documents[int(i)], float(s)) for i, s in zip(ids[0], scores[0]) if s > 0]


def search_tool(documents: list[dict] | str | Path, *, top_k: int = 3, snippet_chars: int = 300,
                timeout_s: float = 5.0) -> Tool:
    """The `search` tool over `documents` (a list of dicts or a JSONL path); indexes them now."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"search tool: top_k must be a positive integer, got {top_k!r}")
    if isinstance(snippet_chars, bool) or not isinstance(snippet_chars, int) or snippet_chars < 20:
        raise ValueError(f"search tool: snippet_chars must be an integer >= 20, got {snippet_chars!r}")
    index = _Index(load_documents(documents))

    def search(query: str) -> str:
        """Search the document collection and return the best matching documents, each with a snippet.

        Args:
            query: keywords to look for.
        """
        if not query.strip():
            raise SearchError("the query is empty; give some keywords")
        hits = index.search(query, top_k)
        if not hits:
            return f"no documents matched {query.strip()!r}; try other keywords"
        entries = []
        for rank, (doc, _score) in enumerate(hits, start=1):
            heading = doc.title or doc.id
            if doc.title and doc.id:
                heading += f" (id: {doc.id})"
            entries.append(f"[{rank}] {heading}\n{_snippet(doc.text, query, snippet_chars)}")
        return "\n\n".join(entries)

    return tool_from_function(search, timeout_s=timeout_s)
