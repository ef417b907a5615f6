"""Deny by default: every route the pinned vLLM mounts is classified by the gateway.

The app is vLLM's own, built the way `kvscope serve` builds it, for every task set a model can
have (generation, pooling, transcription and realtime, render-only) and with dev mode on and off.
A vLLM upgrade that mounts a new route fails here until the route is classified.
"""

import pytest

from serving import routes
from serving.routes import Access, Shape

TASK_SETS = [("generate",), ("transcription", "realtime"), ("render",)]


def _mounted(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], set[str]]:
    from vllm.entrypoints.launchers.app import build_app
    from vllm.tasks import POOLING_TASKS

    from serving.demo_model import ensure_demo_model
    from serving.server import parse_vllm_args

    args = parse_vllm_args(["--model", str(ensure_demo_model()), "--kv-cache-memory-bytes", str(1 << 30)])
    found: dict[tuple[str, str], set[str]] = {}
    for dev in ("0", "1"):
        monkeypatch.setenv("VLLM_SERVER_DEV_MODE", dev)
        for tasks in [*TASK_SETS, tuple(POOLING_TASKS)]:
            app = build_app(args, tasks, None)
            for route in app.routes:
                methods = getattr(route, "methods", None) or {"WS"}
                for method in methods:
                    found.setdefault((method, route.path), set()).add(f"dev={dev} tasks={'/'.join(tasks)}")
    return found


@pytest.fixture(scope="module")
def mounted() -> dict[tuple[str, str], set[str]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _mounted(monkeypatch)


def test_every_route_vllm_mounts_is_classified(mounted):
    unclassified = sorted(
        f"{method} {path} (mounted with {sorted(where)[0]})"
        for (method, path), where in mounted.items()
        if routes.classify(method, _concrete(path)) is None
    )
    assert not unclassified, "routes the gateway does not classify:\n" + "\n".join(unclassified)
    assert len(mounted) > 40  # the app was really built, for more than one task set


def test_every_router_in_vllms_entrypoints_is_classified():
    """Routers mounted only for some models or flags (pooling, scoring, fault tolerance) too."""
    import importlib
    import pkgutil

    import vllm.entrypoints
    from fastapi import APIRouter

    seen, unclassified = 0, []
    for module in pkgutil.walk_packages(vllm.entrypoints.__path__, "vllm.entrypoints."):
        if not module.name.endswith("api_router"):
            continue
        for router in vars(importlib.import_module(module.name)).values():
            if not isinstance(router, APIRouter):
                continue
            for route in router.routes:
                for method in getattr(route, "methods", None) or {"WS"}:
                    seen += 1
                    if routes.classify(method, _concrete(route.path)) is None:
                        unclassified.append(f"{method} {route.path} ({module.name})")
    assert not unclassified, "routes the gateway does not classify:\n" + "\n".join(sorted(unclassified))
    assert seen > 40


def _concrete(path: str) -> str:
    """A path template with each {parameter} filled in."""
    return path.replace("{", "x").replace("}", "")


def test_the_routes_the_issue_names_are_guarded():
    for method, path in [
        ("POST", "/invocations"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions/batch"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/messages"),
    ]:
        route = routes.classify(method, path)
        assert route is not None and route.access is Access.ADMITTED, path
    for method, path in [("POST", "/tokenize"), ("GET", "/v1/models"), ("GET", "/health"), ("GET", "/version")]:
        assert routes.classify(method, path).access is Access.KEY, path
    for method, path in [
        ("POST", "/reset_prefix_cache"),
        ("POST", "/sleep"),
        ("POST", "/wake_up"),
        ("POST", "/collective_rpc"),
        ("POST", "/scale_elastic_ep"),
        ("POST", "/start_profile"),
        ("POST", "/v1/load_lora_adapter"),
        ("POST", "/v1/unload_lora_adapter"),
    ]:
        assert routes.classify(method, path).access is Access.ADMIN, path
    assert routes.classify("GET", "/metrics").access is Access.OPEN
    assert routes.classify("POST", "/invocations").shape is Shape.INVOCATIONS


def test_unknown_routes_and_methods_are_not_classified():
    assert routes.classify("GET", "/v1/completions") is None
    assert routes.known_path("/v1/completions")
    assert routes.classify("POST", "/v1/completions/") is None
    assert routes.classify("POST", "/v1/responses/a/b/cancel") is None
    assert routes.classify("GET", "/v1/does-not-exist") is None
    assert not routes.known_path("/v1/does-not-exist")
    # a template's literal parts are literal: the dot of /openapi.json matches a dot only
    assert routes.classify("GET", "/openapiXjson") is None and not routes.known_path("/openapiXjson")


def _first_by_regex(method: str, path: str) -> routes.Route | None:
    """What classify answers, the slow way: the first route in ROUTES whose methods and pattern take it."""
    kind = "WS" if method == "WS" else method.upper()
    return next((r for r in routes.ROUTES if kind in r.methods and r.pattern.match(path)), None)


def test_the_lookup_answers_what_a_scan_of_every_route_in_order_does():
    methods = sorted({m for r in routes.ROUTES for m in r.methods} | {"PUT", "DELETE", "post"})
    paths = {r.template for r in routes.ROUTES} | {r.template.replace("{response_id}", "resp_1") for r in routes.ROUTES}
    paths |= {p + "/" for p in paths} | {"/", "", "/v1", "/v1/responses/a/b/cancel", "/metrics/x"}
    for method in methods:
        for path in paths:
            assert routes.classify(method, path) == _first_by_regex(method, path), (method, path)
            assert routes.known_path(path) == any(r.pattern.match(path) for r in routes.ROUTES), path
