"""The gateway's section of kvscope.yaml: validation with one-line errors, API-key authentication."""

import hashlib

import pytest

from serving.gateway_config import ANONYMOUS, ConfigError, GatewayConfig, load_gateway_config


def test_no_file_means_no_key_and_one_anonymous_tenant():
    config = load_gateway_config(None)
    assert not config.auth_required
    assert config.authenticate(None) == (ANONYMOUS, "default")


def test_keys_and_hashed_keys_map_to_tenant_and_tier(tmp_path):
    path = tmp_path / "g.yaml"
    digest = hashlib.sha256(b"sk-b").hexdigest()
    path.write_text(
        "gateway:\n"
        "  tiers: {gold: {max_tokens: 100}, free: {}}\n"
        "  tenants: {a: {tier: gold, api_keys: [sk-a]}, "
        f"b: {{tier: free, api_key_sha256: [{digest}]}}}}\n"
    )
    config = load_gateway_config(path)
    assert config.authenticate(b"sk-a") == ("a", "gold")
    assert config.authenticate(b"sk-b") == ("b", "free")
    assert config.authenticate(b"sk-c") is None
    assert config.authenticate("sk-\u00e9".encode()) is None  # non-ASCII bytes: refused, no exception
    assert config.authenticate(None) is None


def test_anonymous_tier_admits_requests_without_a_key():
    config = GatewayConfig.model_validate(
        {
            "tiers": {"t": {}},
            "tenants": {"a": {"tier": "t", "api_keys": ["k"]}},
            "anonymous_tier": "t",
        }
    )
    assert config.authenticate(None) == (ANONYMOUS, "t")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gateway: {tiers: {a: {max_tokens: 0}}}", "gateway: tiers.a.max_tokens"),
        ("gateway: {tenants: {x: {tier: nope, api_keys: [k]}}}", "unknown tier 'nope'"),
        ("gateway: {tiers: {a: {bogus: 1}}}", "tiers.a.bogus: unknown key"),
        ("[1, 2]", "must be a mapping"),
        ("gateway: {tiers: {a: [", "not valid YAML"),
        ("gateway: {qos: {classes: [{name: a, max_prompt_tokens: 10, delay_ms: 0}]}}", "catch-all"),
        ("tiers: {a: {}}", "'tiers' is a gateway setting: put it under 'gateway:'"),
        ("gateway: {inline_render_chars: -1}", "gateway: inline_render_chars"),
        ("gateway: {inline_render_chars: 10000000}", "gateway: inline_render_chars"),
    ],
)
def test_bad_files_get_one_line_errors(tmp_path, text, message):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_gateway_config(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_inline_render_defaults_on_and_zero_turns_it_off(tmp_path):
    assert load_gateway_config(None).inline_render_chars > 0
    path = tmp_path / "g.yaml"
    path.write_text("gateway: {inline_render_chars: 0}")
    assert load_gateway_config(path).inline_render_chars == 0


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_gateway_config(tmp_path / "absent.yaml")


def test_without_keys_the_anonymous_tier_is_the_one_named():
    config = GatewayConfig.model_validate({"tiers": {"free": {}, "paid": {}}, "anonymous_tier": "paid"})
    assert config.authenticate(None) == (ANONYMOUS, "paid")
    assert GatewayConfig.model_validate({"tiers": {"free": {}, "paid": {}}}).authenticate(None) == (ANONYMOUS, "free")


@pytest.mark.parametrize(
    ("gateway", "message"),
    [
        ({"tenants": {"a": {"tier": "default"}}}, "a tenant needs an API key"),
        (
            {"tenants": {"a": {"tier": "default", "api_keys": ["k"]}, "b": {"tier": "default", "api_keys": ["k"]}}},
            "keys must be unique",
        ),
        ({"tenants": {"a": {"tier": "default", "api_keys": ["k", "k"]}}}, "keys must be unique"),
        ({"tenants": {"a": {"tier": "default", "api_keys": ["k\u00e9y"]}}}, "printable ASCII"),
        ({"tenants": {"a": {"tier": "default", "api_key_sha256": ["zz"]}}}, "sha256"),
        ({"tenants": {"a": {"tier": "default", "api_keys": ["k"]}}, "admin_keys": ["k"]}, "also a tenant's API key"),
        ({"tiers": {"t": {"max_n": 0}}}, "max_n"),
    ],
)
def test_keys_that_could_not_work_are_refused_at_load(gateway, message):
    with pytest.raises(ValueError, match=message):
        GatewayConfig.model_validate(gateway)


def test_admin_and_metrics_keys_compare_as_bytes():
    config = GatewayConfig.model_validate(
        {"tenants": {"a": {"tier": "default", "api_keys": ["k"]}}, "admin_keys": ["adm"], "metrics_token": "m"}
    )
    assert config.is_admin(b"adm") and not config.is_admin(b"k") and not config.is_admin(None)
    assert config.metrics_allowed(b"m") and not config.metrics_allowed(b"k") and not config.metrics_allowed(None)
    assert GatewayConfig().metrics_allowed(None)
