"""QoS through vLLM's per-request `priority` (lower is served first; no scheduler fork).

Each request gets a virtual deadline: its arrival time in milliseconds plus a delay for its
class (long prompts wait longer), its tier, and the client's own `priority`. vLLM orders the
waiting queue by this number and preempts the largest first, so short prompts and higher
tiers go first, yet a request can be overtaken only by requests that arrive within its delay:
ageing is built in, and nothing starves longer than its class delay.
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.gateway_config import Qos, QosClass


@dataclass(frozen=True)
class Assignment:
    priority: int
    qos_class: str


def classify(qos: Qos, prompt_tokens: int) -> QosClass:
    """The first class whose max_prompt_tokens holds the prompt (the last one catches all)."""
    for qos_class in qos.classes:
        if qos_class.max_prompt_tokens is None or prompt_tokens <= qos_class.max_prompt_tokens:
            return qos_class
    return qos.classes[-1]


def assign(qos: Qos, prompt_tokens: int, arrival_ms: int, tier_delay_ms: int, client_priority: int = 0) -> Assignment:
    """The vLLM priority (virtual deadline in ms since server start) and the class name."""
    qos_class = classify(qos, prompt_tokens)
    delay = qos_class.delay_ms + tier_delay_ms + client_priority * qos.client_priority_step_ms
    return Assignment(priority=arrival_ms + max(delay, 0), qos_class=qos_class.name)
