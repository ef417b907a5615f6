"""bench.admission_cpu's streamed stand-in: the events it sends are vLLM's shape, each token
one output event, and a request through the gateway with it is answered (a benchmark: no
figure is asserted)."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench import admission_cpu as bench
from serving.gateway import output_events
from serving.prompts import Counted


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_every_streamed_token_is_one_output_event_and_the_gateway_answers(route):
    path, body = bench._bodies(20)[route]
    events = bench._events(path, 64)
    assert [output_events(e) for e in events] == [1] * 64 + [0]  # [DONE] carries none
    counted = {name: Counted([30], {}) for name in ("completions", "chat", "messages", "responses")}
    gateway = bench._gateway(bench._Precounted(counted), bench._streaming_engine(events))
    streamed = json.dumps({**json.loads(body), "stream": True}).encode()
    assert asyncio.run(bench._one(gateway, path, streamed)) == 200
    (family,) = gateway.metrics.requests.collect()
    assert [(s.labels["tenant"], s.value) for s in family.samples if s.name.endswith("_total")] == [("bench", 1.0)]
