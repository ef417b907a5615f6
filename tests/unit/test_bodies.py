"""The strict body parser's nesting scan: the same answer as reading the text one character at
a time, on any JSON and on text that is not JSON, at a cost that follows the body's strings and
brackets (a long prompt is one string)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.bodies import parse_json, too_deep
from serving.errors import Rejection

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab[]{}"\\\n\u00e9 '),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=40,
)


def _depth_exceeds(text: str, limit: int) -> bool:
    """The reference: one character at a time, strings and their escapes stepped over."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


@settings(max_examples=300, deadline=None)
@given(value=_json, limit=st.integers(0, 6))
def test_the_scan_agrees_with_reading_one_character_at_a_time(value, limit):
    text = json.dumps(value, ensure_ascii=False)
    assert too_deep(text, limit) == _depth_exceeds(text, limit)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='[]{}"\\a', max_size=60), limit=st.integers(0, 4))
def test_the_scan_agrees_on_text_that_is_not_json(text, limit):
    # strings left open, stray quotes and a trailing backslash: read as the reference reads them
    assert too_deep(text, limit) == _depth_exceeds(text, limit)


@pytest.mark.timeout(60)  # a linear scan takes milliseconds; a quadratic one, hours
def test_a_hostile_body_is_scanned_once():
    # more brackets than the limit, then a string left open and full of escaped quotes: a scan
    # that retried from each quote would read the rest of 800 KB again 200,000 times
    hostile = "{" * 70 + '"\\' * 200_000 + "]" * 10
    assert too_deep(hostile, 64) == _depth_exceeds(hostile, 64) is True
    with pytest.raises(Rejection) as refused:
        parse_json(hostile.encode(), 64)
    assert refused.value.status == 400


def test_brackets_inside_strings_do_not_nest():
    text = json.dumps({"prompt": "[" * 500 + "{" * 500, "messages": [{"content": '\\"[[[['}]})
    assert not too_deep(text, 8)
    assert too_deep(json.dumps({"a": [[[[[[[[[1]]]]]]]]]}), 8)
    assert not too_deep(json.dumps({"a": [[[[[[[1]]]]]]]}), 8)


def test_a_lone_surrogate_escape_is_refused_and_plain_text_is_not_walked():
    with pytest.raises(Rejection) as refused:
        parse_json(b'{"prompt": "a \\ud800 b"}', 64)
    assert refused.value.status == 400 and "lone surrogate" in refused.value.message
    # a whole pair is one character; other escapes and non-ASCII text are fine
    assert parse_json('{"prompt": "\\ud83d\\ude00 \\n caf\u00e9"}'.encode(), 64) == {
        "prompt": "\U0001f600 \n caf\u00e9"
    }


def test_a_deep_body_is_refused_before_the_parser_recurses():
    with pytest.raises(Rejection) as refused:
        parse_json(b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 64)
    assert "nests deeper than 64 levels" in refused.value.message
