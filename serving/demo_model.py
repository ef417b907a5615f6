"""The demo model: a tiny Llama-style model and a byte-level BPE tokenizer, generated offline.

Deterministic (same spec, same bytes), no hub access. Random weights: the text it writes is
noise, but vLLM runs it exactly like a real Llama, so its scheduler, KV cache, prefill and
decode behave as they do in production, only smaller. Sized so that on 2 CPU cores a long
prompt's prefill costs far more than a short one's (head-of-line blocking is reproducible) and
the engine starts in well under a minute.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SERVED_NAME = "kvscope-demo"
_FORMAT_VERSION = 3  # bump when the files written change for the same spec
_MARKER = "kvscope-demo.json"

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class DemoModelSpec:
    """Shape of the generated model (Llama architecture, grouped-query attention)."""

    hidden_size: int = 256
    intermediate_size: int = 768
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 2
    vocab_size: int = 4096
    max_position_embeddings: int = 16384
    seed: int = 20260401

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x dtype."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    def digest(self) -> str:
        blob = json.dumps({**asdict(self), "format": _FORMAT_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """`$KVSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/kvscope`, else `~/.cache/kvscope`."""
    if env := os.environ.get("KVSCOPE_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvscope"


def ensure_demo_model(cache_dir: Path | None = None, spec: DemoModelSpec | None = None) -> Path:
    """Return the folder of the demo model, generating it first if it is not there yet."""
    spec = spec or DemoModelSpec()
    root = (cache_dir or default_cache_dir()) / "models"
    target = root / f"{SERVED_NAME}-{spec.digest()}"
    if (target / _MARKER).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    # Build in a scratch folder and rename: a killed run never leaves a half-written model.
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=root))
    scratch.chmod(0o755)
    try:
        write_demo_model(scratch, spec)
        try:
            scratch.rename(target)
        except OSError:
            if not (target / _MARKER).is_file():  # lost a race to another process: fine
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def write_demo_model(folder: Path, spec: DemoModelSpec) -> None:
    """Write config, weights (safetensors), tokenizer and chat template into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / "config.json", _hf_config(spec))
    _write_json(folder / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    _write_weights(folder / "model.safetensors", spec)
    _write_tokenizer(folder, spec)
    _write_json(folder / _MARKER, {"spec": asdict(spec), "format": _FORMAT_VERSION})


def synthetic_words(seed: int, count: int = 3000) -> list[str]:
    """A fixed pseudo-vocabulary of pronounceable words (the tokenizer's training language)."""
    rng = random.Random(seed)
    return [
        "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 4))) for _ in range(count)
    ]


def synthetic_text(rng: random.Random, num_words: int, words: list[str] | None = None) -> str:
    """Sentences of `num_words` words in the demo language (prompts for load and drills)."""
    vocab = words or synthetic_words(DemoModelSpec().seed)
    out: list[str] = []
    while len(out) < num_words:
        sentence = [rng.choice(vocab) for _ in range(rng.randint(5, 16))]
        sentence[-1] += "."
        out.extend(sentence)
    return " ".join(out[:num_words])


def _corpus(spec: DemoModelSpec, sentences: int = 20000) -> Iterator[str]:
    rng = random.Random(spec.seed)
    words = synthetic_words(spec.seed)
    for _ in range(sentences):
        yield synthetic_text(rng, rng.randint(5, 20), words)
    yield "0 1 2 3 4 5 6 7 8 9 , ; : ! ? ' \" ( ) - + = / * # @ user system assistant"


def _hf_config(spec: DemoModelSpec) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _write_weights(path: Path, spec: DemoModelSpec) -> None:
    rng = np.random.default_rng(spec.seed)
    h, inter, kv = spec.hidden_size, spec.intermediate_size, spec.num_kv_heads * spec.head_dim

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(spec.vocab_size, h)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": normal(h, h),
            p + "self_attn.k_proj.weight": normal(kv, h),
            p + "self_attn.v_proj.weight": normal(kv, h),
            p + "self_attn.o_proj.weight": normal(h, h),
            p + "mlp.gate_proj.weight": normal(inter, h),
            p + "mlp.up_proj.weight": normal(inter, h),
            p + "mlp.down_proj.weight": normal(h, inter),
            p + "input_layernorm.weight": np.ones(h, dtype=np.float32),
            p + "post_attention_layernorm.weight": np.ones(h, dtype=np.float32),
        }
    tensors["model.norm.weight"] = np.ones(h, dtype=np.float32)
    lm_head = normal(spec.vocab_size, h)
    lm_head[2] = 0.0  # the EOS row: random weights would end generations at random lengths
    tensors["lm_head.weight"] = lm_head
    _save_bf16_safetensors(tensors, path)


def _save_bf16_safetensors(tensors: dict[str, np.ndarray], path: Path) -> None:
    """Write tensors as bfloat16 safetensors (numpy has no bfloat16; the format is simple:
    an 8-byte header length, a JSON header of dtype/shape/offsets, then the raw data)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        bits = np.ascontiguousarray(tensors[name], dtype=np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        blob = rounded.astype("<u2").tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with path.open("wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for blob in blobs:
            f.write(blob)


# Like the templates of real chat models, it renders the tool schemas and the tool calls into
# the prompt: what a gateway must count (issue 11).
_CHAT_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|system|>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] if m['content'] is not none else '' }}"
    "{% if m['tool_calls'] is defined and m['tool_calls'] %}{% for c in m['tool_calls'] %}{{ c | tojson }}"
    "{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _write_tokenizer(folder: Path, spec: DemoModelSpec) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(spec), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    _write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "</s>",
            "model_max_length": spec.max_position_embeddings,
            "chat_template": _CHAT_TEMPLATE,
        },
    )


def _write_json(path: Path, data: dict[str, object]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
