"""TinyLM: a character-level next-token MLP, small enough to train on CPU in seconds.

The model reads the previous `context` tokens, embeds and concatenates them, applies one tanh
hidden layer and predicts the next token. Forward and backward passes are written by hand with
numpy so the framework needs nothing else. Optional LoRA adapters on both dense layers let
tests train a low-rank update while the base weights stay frozen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

PAD, BOS, EOS = 0, 1, 2
CHARS = "0123456789+-*=?.,!' abcdefghijklmnopqrstuvwxyz"
ITOS = ["<pad>", "<bos>", "<eos>", *CHARS]
STOI = {ch: i for i, ch in enumerate(ITOS) if len(ch) == 1}

Params = dict[str, np.ndarray]
BASE_NAMES = ("embed", "w1", "b1", "w2", "b2")
LORA_NAMES = ("w1_lora_a", "w1_lora_b", "w2_lora_a", "w2_lora_b")


@dataclass(frozen=True)
class TinyConfig:
    """Shape of a TinyLM; stored as the checkpoint's config.json."""

    model_type: str = "tiny"
    vocab_size: int = len(ITOS)
    context: int = 6
    embed_dim: int = 12
    hidden: int = 48

    def to_json(self) -> dict:
        return {"architectures": ["TinyLM"], **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> TinyConfig:
        fields = {k: data[k] for k in ("model_type", "vocab_size", "context", "embed_dim", "hidden")}
        return cls(**fields)


def encode(text: str) -> list[int]:
    """Character ids of `text`; unknown characters raise so bad data is noticed early."""
    try:
        return [STOI[ch] for ch in text.lower()]
    except KeyError as err:
        raise ValueError(f"character {err.args[0]!r} is not in the TinyLM vocabulary {CHARS!r}") from None


def decode(ids: list[int]) -> str:
    return "".join(ITOS[i] for i in ids if i > EOS)


def init_params(config: TinyConfig, seed: int) -> Params:
    """Random initial weights (scaled so the first loss is close to log(vocab_size))."""
    rng = np.random.default_rng(seed)
    fan_in = config.context * config.embed_dim
    return {
        "embed": rng.normal(0, 0.5, (config.vocab_size, config.embed_dim)).astype(np.float32),
        "w1": rng.normal(0, fan_in**-0.5, (fan_in, config.hidden)).astype(np.float32),
        "b1": np.zeros(config.hidden, np.float32),
        "w2": rng.normal(0, 0.1 * config.hidden**-0.5, (config.hidden, config.vocab_size)).astype(np.float32),
        "b2": np.zeros(config.vocab_size, np.float32),
    }


def add_lora(params: Params, rank: int, seed: int) -> Params:
    """Params plus zero-effect LoRA adapters (B starts at zero, as usual)."""
    rng = np.random.default_rng(seed)
    out = dict(params)
    for name in ("w1", "w2"):
        fan_in, fan_out = params[name].shape
        out[f"{name}_lora_a"] = rng.normal(0, fan_in**-0.5, (fan_in, rank)).astype(np.float32)
        out[f"{name}_lora_b"] = np.zeros((rank, fan_out), np.float32)
    return out


def merge_lora(params: Params) -> Params:
    """Fold adapters into the dense weights, as a framework does before export."""
    out = {k: v for k, v in params.items() if k in BASE_NAMES}
    for name in ("w1", "w2"):
        if f"{name}_lora_a" in params:
            out[name] = params[name] + params[f"{name}_lora_a"] @ params[f"{name}_lora_b"]
    return out


def _dense(params: Params, name: str) -> np.ndarray:
    if f"{name}_lora_a" in params:
        return params[name] + params[f"{name}_lora_a"] @ params[f"{name}_lora_b"]
    return params[name]


def logits(params: Params, contexts: np.ndarray) -> np.ndarray:
    """Next-token logits for a [batch, context] array of token ids."""
    x = params["embed"][contexts].reshape(len(contexts), -1)
    h = np.tanh(x @ _dense(params, "w1") + params["b1"])
    return h @ _dense(params, "w2") + params["b2"]


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def weighted_nll(
    params: Params, contexts: np.ndarray, targets: np.ndarray, weights: np.ndarray, denom: float
) -> tuple[float, Params]:
    """sum(weights * -log p(target)) / denom and its gradients.

    Weights of one give cross-entropy (supervised fine-tuning); signed advantages give the
    policy-gradient loss. Only trainable tensors get gradients: with LoRA adapters present the
    base weights are frozen.
    """
    n = len(contexts)
    w1, w2 = _dense(params, "w1"), _dense(params, "w2")
    x = params["embed"][contexts].reshape(n, -1)
    h = np.tanh(x @ w1 + params["b1"])
    logp = log_softmax(h @ w2 + params["b2"])
    rows = np.arange(n)
    loss = float(-(weights * logp[rows, targets]).sum() / denom)

    dz2 = np.exp(logp)
    dz2[rows, targets] -= 1.0
    dz2 *= (weights / denom)[:, None]
    dw2 = h.T @ dz2
    dz1 = (dz2 @ w2.T) * (1.0 - h * h)
    dw1 = x.T @ dz1
    if "w1_lora_a" in params:
        grads: Params = {}
        for name, dw in (("w1", dw1), ("w2", dw2)):
            grads[f"{name}_lora_a"] = dw @ params[f"{name}_lora_b"].T
            grads[f"{name}_lora_b"] = params[f"{name}_lora_a"].T @ dw
        return loss, grads
    dx = (dz1 @ w1.T).reshape(n, contexts.shape[1], -1)
    dembed = np.zeros_like(params["embed"])
    np.add.at(dembed, contexts, dx)
    return loss, {"embed": dembed, "w1": dw1, "b1": dz1.sum(axis=0), "w2": dw2, "b2": dz2.sum(axis=0)}
