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
    assert config.authenticate("sk-a") == ("a", "gold")
    assert config.authenticate("sk-b") == ("b", "free")
    assert config.authenticate("sk-c") is None
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
        ("gateway: {tenants: {x: {tier: nope}}}", "unknown tier 'nope'"),
        ("gateway: {tiers: {a: {bogus: 1}}}", "tiers.a.bogus: unknown key"),
        ("[1, 2]", "must be a mapping"),
        ("gateway: {tiers: {a: [", "not valid YAML"),
        ("gateway: {qos: {classes: [{name: a, max_prompt_tokens: 10, delay_ms: 0}]}}", "catch-all"),
        ("tiers: {a: {}}", "'tiers' is a gateway setting: put it under 'gateway:'"),
    ],
)
def test_bad_files_get_one_line_errors(tmp_path, text, message):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_gateway_config(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_gateway_config(tmp_path / "absent.yaml")
