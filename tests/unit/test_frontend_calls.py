"""The call-count comparison (bench/frontend_calls.py): cProfile's keys named the same in every
process, the functions that differ ranked first, a streamed token's share beside them."""

from __future__ import annotations

from pathlib import Path

from bench.frontend_calls import Counted, compare, table, where

REPO = Path(__file__).resolve().parents[2]
SITE = "/opt/venv/lib/python3.11/site-packages"


def test_a_function_is_named_from_its_package_down_and_a_builtin_without_its_address():
    assert where((f"{SITE}/vllm/entrypoints/serve/engine/serving.py", 105, "_extract_prompt_text")) == (
        "vllm/entrypoints/serve/engine/serving.py:105:_extract_prompt_text"
    )
    assert where(("/root/.pyenv/versions/3.11.7/lib/python3.11/copy.py", 128, "deepcopy")) == "copy.py:128:deepcopy"
    assert where((str(REPO / "serving/gateway.py"), 571, "send_tracked")) == "serving/gateway.py:571:send_tracked"
    assert where(("~", 0, "<method 'get' of 'dict' objects>")) == "<method 'get' of 'dict' objects>"
    one = where(("~", 0, "<built-in method __new__ of type object at 0x7f43a4a5ea00>"))
    assert one == where(("~", 0, "<built-in method __new__ of type object at 0x7f1b2565ea00>"))
    assert one == "<built-in method __new__ of type object>"


def counted(which: str, requests: int, **per_request: float) -> Counted:
    calls = {name.replace("__", ":"): round(n * requests) for name, n in per_request.items()}
    return Counted(which, requests, 0, calls)


def test_the_functions_that_differ_come_first_per_request_and_the_same_ones_are_left_out():
    base = counted("passthrough", 200, send=64, engine__get_output_async=16, same=300)
    gateway = counted("default", 100, send=64, engine__get_output_async=16, same=300, tracked=64, parse=1)
    assert base.steps == gateway.steps == 16
    assert gateway.total - base.total == 65
    rows = compare([base, gateway], top=10)
    assert [row["function"] for row in rows] == ["tracked", "parse"]  # the same counts are not listed
    assert rows[0] == {"function": "tracked", "passthrough": 0.0, "default": 64.0}
    assert compare([base, gateway], top=1) == rows[:1]
    text = table([base, gateway], rows, max_tokens=64, stream=True)
    assert "| default | 100 | 0 | 16.0 | 445 | +65 |" in text
    assert "| `tracked` | 0.00 | 64.00 | +64.00 | +1.00 |" in text  # once a streamed token
    assert "a streamed token" not in table([base, gateway], rows, max_tokens=64, stream=False)
