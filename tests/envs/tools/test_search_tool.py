"""The search tool: BM25 (bm25s) over local documents, from a list or a JSONL file."""

from __future__ import annotations

import json

import pytest

from reinforge.envs.tools.calls import ToolCall
from reinforge.envs.tools.execution import call_tool
from reinforge.envs.tools.registry import ToolRegistry
from reinforge.envs.tools.search import load_documents, search_tool

DOCUMENTS = [
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and most populous city of France, on the Seine."},
    {"id": "berlin", "title": "Berlin", "text": "Berlin is the capital of Germany and its largest city."},
    {"id": "python", "title": "Python (programming language)",
     "text": "Python is a high-level programming language. " * 20 + "Its design emphasizes code readability."},
    {"id": "seine", "text": "The Seine is a river in northern France; it flows through Paris into the Channel."},
    {"title": "Photosynthesis", "text": "Plants turn light, water and carbon dioxide into sugar and oxygen."},
]


def search(registry: ToolRegistry, query: str):
    return call_tool(registry, ToolCall("search", {"query": query}))


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    return ToolRegistry([search_tool(DOCUMENTS, top_k=2, snippet_chars=60)])


def test_best_document_ranks_first(registry) -> None:
    result = search(registry, "capital of Germany")
    assert result.ok and result.content.startswith("[1] Berlin (id: berlin)\nBerlin is the capital of Germany")
    assert result.content.count("\n[") == 1  # top_k = 2
    assert search(registry, "how do plants make oxygen").content.startswith("[1] Photosynthesis\n")
    assert search(registry, "river flowing through France").content.startswith("[1] seine\n")


def test_snippet_is_cut_around_the_match(registry) -> None:
    content = search(registry, "readability").content
    assert content.startswith("[1] Python (programming language) (id: python)\n...")
    assert "code readability." in content and len(content.splitlines()[1]) <= 60 + 6


def test_no_hits_and_empty_query(registry) -> None:
    assert search(registry, "zebra xylophone").content == "no documents matched 'zebra xylophone'; try other keywords"
    assert search(registry, "the of and").ok  # stop words only: no hits, not an error
    empty = search(registry, "   ")
    assert not empty.ok and empty.error == "SearchError: the query is empty; give some keywords"


def test_documents_from_jsonl(tmp_path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in DOCUMENTS) + "\n\n")
    registry = ToolRegistry([search_tool(path, top_k=1)])
    assert search(registry, "Seine river").content.startswith("[1] seine\n")


def test_bad_collections_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="collection is empty"):
        load_documents([])
    with pytest.raises(ValueError, match="document 1 needs a non-empty string 'text'"):
        load_documents([{"id": 1, "text": "ok"}, {"id": 2}])
    with pytest.raises(ValueError, match="document 0 needs an 'id' or a 'title'"):
        load_documents([{"text": "anonymous"}])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "fine"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is not valid JSON"):
        load_documents(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_documents(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        search_tool(DOCUMENTS, top_k=0)
