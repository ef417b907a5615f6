"""The demo model is generated offline, deterministically, as a loadable Llama checkpoint."""

import json
import random
import struct

from tokenizers import Tokenizer

from serving.demo_model import DemoModelSpec, ensure_demo_model, synthetic_text

SMALL = DemoModelSpec(
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=1024,
    max_position_embeddings=2048,
)


def _read_safetensors_header(path):
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + size]), len(raw) - 8 - size


def test_generation_is_deterministic(tmp_path):
    a = ensure_demo_model(tmp_path / "a", SMALL)
    b = ensure_demo_model(tmp_path / "b", SMALL)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_second_call_reuses_the_cached_model(tmp_path):
    first = ensure_demo_model(tmp_path, SMALL)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_demo_model(tmp_path, SMALL) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in (tmp_path / "models").iterdir()] == [first.name]  # no partial dirs


def test_a_different_spec_gets_its_own_folder(tmp_path):
    other = DemoModelSpec(**{**SMALL.__dict__, "num_layers": 3})
    assert ensure_demo_model(tmp_path, SMALL) != ensure_demo_model(tmp_path, other)


def test_weights_match_the_llama_config(tmp_path):
    folder = ensure_demo_model(tmp_path, SMALL)
    config = json.loads((folder / "config.json").read_text())
    header, data_bytes = _read_safetensors_header(folder / "model.safetensors")
    kv = SMALL.num_kv_heads * SMALL.head_dim
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert header["model.embed_tokens.weight"]["shape"] == [SMALL.vocab_size, SMALL.hidden_size]
    assert header["model.layers.1.self_attn.k_proj.weight"]["shape"] == [kv, SMALL.hidden_size]
    assert "model.layers.2.self_attn.q_proj.weight" not in header
    assert {t["dtype"] for k, t in header.items() if k != "__metadata__"} == {"BF16"}
    assert max(t["data_offsets"][1] for k, t in header.items() if k != "__metadata__") == data_bytes


def test_tokenizer_is_trained_to_the_model_vocabulary_and_round_trips(tmp_path):
    folder = ensure_demo_model(tmp_path, SMALL)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == SMALL.vocab_size
    text = "any UTF-8 text works: naïve café 42 — " + synthetic_text(random.Random(0), 20)
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == 1  # <s>
    assert tokenizer.decode(encoding.ids) == text


def test_prompt_length_scales_with_words(tmp_path):
    folder = ensure_demo_model(tmp_path, SMALL)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rng = random.Random(1)
    short = len(tokenizer.encode(synthetic_text(rng, 50)).ids)
    long = len(tokenizer.encode(synthetic_text(rng, 2000)).ids)
    assert 30 < short < 150 and long > 30 * short


def test_kv_bytes_per_token_counts_kv_heads_not_attention_heads():
    spec = DemoModelSpec()
    assert spec.kv_bytes_per_token(2) == 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2
