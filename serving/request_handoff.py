"""vLLM's route given the request the gateway validated: a body parsed and validated once.

The gateway validates each completion and chat body with vLLM's own request model to render and
count it (serving/prompts.py). FastAPI then parsed the forwarded body again (`json.loads`) and
validated it again with the same model, vLLM's wrap validator deep-copying it to log extra
fields: the same work twice, about 140 calls a streamed completion of the event loop's 10,700
(bench.frontend_calls; its CPU is below what bench.frontend_together resolves, docs/benchmarks.md).

`handed` makes, from the gateway's validated request, the one FastAPI would validate from the
forwarded body: the fields the gateway set after counting (the output budget admission clamped,
the priority QoS assigned, the request id, a patched prompt or kv_transfer_params) copied in with
`model_copy`, every other field as validated. Anything else the gateway changed, or a budget that
is not a plain integer, hands nothing over, and FastAPI validates the body as before.
`install` lets Starlette's `Request.json()` answer that request for the forwarded request's scope
only: FastAPI validates a model instance of its own body type as it is (pydantic does not
revalidate instances), and the body still goes on as bytes for anything that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCOPE_KEY = "kvscope.validated_request"
# the routes whose body parameter is the very model the gateway validated with
ROUTES = frozenset({"/v1/completions", "/v1/chat/completions"})
BUDGET = frozenset({"max_tokens", "max_completion_tokens"})
# what the gateway writes into a forwarded body after counting, each a value valid as it is
_SET_BY_GATEWAY = BUDGET | {"priority", "request_id", "prompt", "kv_transfer_params"}

_installed = False


def handed(validated: Any, counted: Mapping[str, Any], forwarded: Mapping[str, Any]) -> Any | None:
    """The request FastAPI would validate from `forwarded`, made from `validated` (the model of
    `counted`, the body the gateway counted), or None where it cannot be said without validating."""
    if validated is None or any(key not in forwarded for key in counted):
        return None
    update = {k: v for k, v in forwarded.items() if k not in counted or counted[k] is not v}
    if not update.keys() <= _SET_BY_GATEWAY:
        return None
    for key in BUDGET & update.keys():
        if type(update[key]) is not int:  # None and the like go through vLLM's own normalisation
            return None
    if type(update.get("priority", 0)) is not int or type(update.get("request_id", "")) is not str:
        return None
    return validated.model_copy(update=update)


def install() -> bool:
    """Let `Request.json()` answer a request handed over in its scope; whether it is in place."""
    global _installed
    if _installed:
        return True
    try:
        from starlette.requests import Request
    except ImportError:
        return False
    parse = Request.json

    async def json(self: Request) -> Any:
        held = self.scope.get(SCOPE_KEY)
        if held is not None:
            return held
        return await parse(self)

    Request.json = json  # type: ignore[method-assign,assignment]
    _installed = True
    return True
