"""Admission: the gateway's decision on one parsed request, before the engine sees it.

Pure over its inputs (body, tenant, token counts, clock): checks types, clamps max_tokens
to the tier, refuses what cannot fit max_model_len or the tier's per-request cap, takes the
tokens from the tenant's bucket, and assigns the QoS priority. Each refusal is a Rejection
with the status, the limit and by how much the request is over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from serving import qos
from serving.errors import Rejection
from serving.gateway_config import GatewayConfig, Tier
from serving.quota import TenantQuotas
from serving.tokens import COMPLETIONS

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's and OpenAI's default for /v1/completions


@dataclass(frozen=True)
class Admission:
    body: dict[str, Any]  # rewritten: max_tokens set, priority assigned
    prompt_tokens: tuple[int, ...]
    max_tokens: int
    n: int
    reserved_tokens: int  # taken from the tenant's bucket: prompts + max_tokens x n x prompts
    qos_class: str
    priority: int
    clamped_from: int | None  # the client's max_tokens when the tier clamped it


def _int_field(body: dict[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise Rejection(400, "invalid_request", f"'{key}' must be an integer, got {type(value).__name__}", key)
    if value < minimum:
        raise Rejection(400, "invalid_request", f"'{key}' must be at least {minimum}, got {value}", key)
    return value


class AdmissionPolicy:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        max_model_len: int,
        served_names: Sequence[str],
        qos_enabled: bool,
        quotas: TenantQuotas,
    ) -> None:
        self.config = config
        self.max_model_len = max_model_len
        self.served_names = tuple(served_names)
        self.qos_enabled = qos_enabled
        self.quotas = quotas

    def check_shape(self, body: object) -> dict[str, Any]:
        """The body must be a JSON object naming a served model (or none)."""
        if not isinstance(body, dict):
            raise Rejection(400, "invalid_request", "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise Rejection(400, "invalid_request", "'model' must be a string", "model")
        if model is not None and model not in self.served_names:
            raise Rejection(404, "model_not_found", f"The model `{model}` does not exist.", "model")
        if "stream" in body and not isinstance(body["stream"], bool | None):
            raise Rejection(400, "invalid_request", "'stream' must be a boolean", "stream")
        return body

    def admit(
        self,
        path: str,
        body: dict[str, Any],
        tenant: str,
        tier_name: str,
        prompt_tokens: Sequence[int],
        arrival_ms: int,
    ) -> Admission:
        tier = self.config.tiers[tier_name]
        n = _int_field(body, "n", 1) or 1
        client_priority = body.get("priority", 0)
        if not isinstance(client_priority, int) or isinstance(client_priority, bool):
            raise Rejection(400, "invalid_request", "'priority' must be an integer", "priority")
        key = "max_tokens"
        if path != COMPLETIONS and body.get("max_completion_tokens") is not None:
            key = "max_completion_tokens"
        requested = _int_field(body, key, 1)
        longest = max(prompt_tokens)
        max_tokens, clamped_from = self._max_tokens(path, requested, key, tier, longest)
        reserved = sum(prompt_tokens) + max_tokens * n * len(prompt_tokens)
        self._check_request_cap(tier_name, tier, prompt_tokens, max_tokens, n, reserved)
        self._take_quota(tenant, tier, reserved)
        rewritten = {**body, key: max_tokens}
        if self.qos_enabled:
            assignment = qos.assign(self.config.qos, longest, arrival_ms, tier.priority_delay_ms, client_priority)
            rewritten["priority"] = assignment.priority
            qos_class, priority = assignment.qos_class, assignment.priority
        else:
            qos_class, priority = qos.classify(self.config.qos, longest).name, client_priority
        return Admission(
            rewritten,
            tuple(prompt_tokens),
            max_tokens,
            n,
            reserved,
            qos_class,
            priority,
            clamped_from,
        )

    def _max_tokens(
        self, path: str, requested: int | None, key: str, tier: Tier, longest: int
    ) -> tuple[int, int | None]:
        room = self.max_model_len - longest
        if room <= 0:
            raise Rejection(
                400,
                "context_length_exceeded",
                f"the prompt is {longest} tokens; this model's max_model_len is "
                f"{self.max_model_len}, so it is over by {longest - self.max_model_len + 1} "
                "(at least one token must be left to generate)",
                "prompt",
            )
        clamp = tier.max_tokens or math.inf
        if requested is None:
            default = COMPLETIONS_DEFAULT_MAX_TOKENS if path == COMPLETIONS else room
            return int(min(default, clamp, room)), None
        if requested > clamp:
            requested, clamped_from = int(clamp), requested
        else:
            clamped_from = None
        if longest + requested > self.max_model_len:
            raise Rejection(
                400,
                "context_length_exceeded",
                f"prompt {longest} + {key} {requested} = {longest + requested} tokens exceeds "
                f"this model's max_model_len {self.max_model_len} by "
                f"{longest + requested - self.max_model_len}",
                key,
            )
        return requested, clamped_from

    def _check_request_cap(
        self,
        tier_name: str,
        tier: Tier,
        prompts: Sequence[int],
        max_tokens: int,
        n: int,
        total: int,
    ) -> None:
        cap = tier.max_request_tokens
        if cap is not None and total > cap:
            raise Rejection(
                413,
                "request_too_large",
                f"the request needs {total} tokens (prompt {sum(prompts)} + max_tokens "
                f"{max_tokens} x n {n} x {len(prompts)} prompt(s)); tier '{tier_name}' allows "
                f"{cap} per request: over by {total - cap}",
            )

    def _take_quota(self, tenant: str, tier: Tier, tokens: int) -> None:
        if tier.tokens_per_minute is None:
            return
        bucket = self.quotas.bucket(tenant, tier.tokens_per_minute)
        if tokens > bucket.per_minute:
            raise Rejection(
                413,
                "request_exceeds_quota",
                f"the request needs {tokens} tokens, more than tenant '{tenant}' may use in a "
                f"minute ({bucket.per_minute}): over by {tokens - bucket.per_minute}",
            )
        if not bucket.try_take(tokens):
            wait = bucket.seconds_until(tokens)
            left = bucket.available()
            raise Rejection(
                429,
                "quota_exhausted",
                f"tenant '{tenant}' is over its token budget: the request needs {tokens} tokens, "
                f"{left} of {bucket.per_minute} per minute are left (short by {tokens - left}); "
                f"retry in {math.ceil(wait)} s",
                headers={"retry-after": str(max(1, math.ceil(wait)))},
            )
