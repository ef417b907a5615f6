"""Pooling and scoring bodies counted as the engine runs them: inputs alone, scored pairs as both
sides, reranked documents with their query; what the gateway cannot count is a 400."""

from __future__ import annotations

import asyncio

import pytest

from serving.errors import Rejection
from serving.pooling_prompts import count_pooling
from serving.routes import Shape


def words(text: str) -> int:
    return len(text.split())


async def chat(body: dict) -> int:
    return 3 + sum(words(m["content"]) for m in body["messages"])  # a template of 3 tokens


def count(shape: Shape, body: dict) -> list[int]:
    return asyncio.run(count_pooling(shape, body, words, chat))


@pytest.mark.parametrize(
    ("shape", "body", "counts"),
    [
        (Shape.EMBED, {"input": "a b c"}, [3]),
        (Shape.EMBED, {"input": ["a b", "c"]}, [2, 1]),
        (Shape.EMBED, {"input": [5, 6, 7, 8]}, [4]),
        (Shape.EMBED, {"input": [[5, 6], [7]]}, [2, 1]),
        (Shape.EMBED, {"messages": [{"role": "user", "content": "a b"}]}, [5]),
        (Shape.CLASSIFY, {"input": [{"role": "user", "content": "a"}]}, [4]),
        (Shape.POOL, {"input": "a"}, [1]),
        (Shape.COHERE_EMBED, {"texts": ["a b", "c"]}, [2, 1]),
        (Shape.SCORE, {"text_1": "q q", "text_2": ["d", "d d"]}, [3, 4]),
        (Shape.SCORE, {"text_1": ["a", "b b"], "text_2": ["c", "d"]}, [2, 3]),
        (Shape.SCORE, {"queries": "q", "documents": ["d d d"]}, [4]),
        (Shape.RERANK, {"query": "q q", "documents": ["a", "b b b"]}, [3, 5]),
        (Shape.GENERATIVE_SCORING, {"query": [1, 2, 3], "items": ["a", "b"]}, [4, 4]),
    ],
)
def test_each_engine_prompt_is_counted(shape, body, counts):
    assert count(shape, body) == counts


@pytest.mark.parametrize(
    ("shape", "body", "param"),
    [
        (Shape.EMBED, {}, "input"),
        (Shape.EMBED, {"input": 5}, "input"),
        (Shape.EMBED, {"input": {"content": [{"type": "image_url", "image_url": {"url": "x"}}]}}, "input"),
        (Shape.COHERE_EMBED, {"images": ["data:image/png;base64,AAAA"]}, "images"),
        (Shape.SCORE, {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_1"),
        (Shape.SCORE, {"text_1": "a"}, "text_1"),
        (Shape.RERANK, {"documents": ["a"]}, "query"),
    ],
)
def test_what_cannot_be_counted_is_a_400_naming_the_field(shape, body, param):
    with pytest.raises(Rejection) as refused:
        count(shape, body)
    assert refused.value.status == 400 and refused.value.param == param
