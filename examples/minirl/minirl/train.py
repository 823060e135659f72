"""The two training loops tests run: supervised fine-tuning and a GRPO-style policy gradient.

Both are deterministic for a given seed and report what a test needs to judge them: the
held-out loss before and after, the loss curve and (for GRPO) the reward curve.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minirl.data import Example, build_windows, prompt_context
from minirl.model import (
    BASE_NAMES,
    EOS,
    LORA_NAMES,
    Params,
    TinyConfig,
    add_lora,
    decode,
    encode,
    logits,
    weighted_nll,
)
from minirl.parallel import DataParallel


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300
    batch: int = 128
    lr: float = 0.01
    backend: str = "megatron"
    world: int = 1
    grad_accum: int = 1
    lora_rank: int = 0
    seed: int = 0
    log_every: int = 50


@dataclass
class TrainResult:
    params: Params
    eval_before: float
    eval_after: float
    losses: list[tuple[int, float]] = field(default_factory=list)
    rewards: list[tuple[int, float]] = field(default_factory=list)


def eval_loss(params: Params, config: TinyConfig, examples: list[Example]) -> float:
    """Mean next-token cross-entropy over the responses of `examples`."""
    w = build_windows(examples, config.context)
    loss, _ = weighted_nll(params, w.contexts, w.targets, np.ones(len(w), np.float32), len(w))
    return loss


def _setup(params: Params, tc: TrainConfig) -> DataParallel:
    if tc.lora_rank:
        params = add_lora(params, tc.lora_rank, seed=tc.seed + 1)
        trainable = list(LORA_NAMES)
    else:
        trainable = list(BASE_NAMES)
    return DataParallel(params, trainable, tc.backend, tc.world, tc.lr)


def sft(
    params: Params, config: TinyConfig, train: list[Example], held: list[Example], tc: TrainConfig
) -> TrainResult:
    """Minibatch cross-entropy on response tokens."""
    windows = build_windows(train, config.context)
    rng = np.random.default_rng(tc.seed)
    dp = _setup(params, tc)
    result = TrainResult(params, eval_loss(params, config, held), float("nan"))

    def grad_fn(p: Params, idx: np.ndarray, denom: float) -> tuple[float, Params]:
        ones = np.ones(len(idx), np.float32)
        return weighted_nll(p, windows.contexts[idx], windows.targets[idx], ones, denom)

    for step in range(1, tc.steps + 1):
        batch = rng.choice(len(windows), size=min(tc.batch, len(windows)), replace=False)
        loss = dp.step(grad_fn, batch, float(len(batch)), tc.grad_accum)
        if step % tc.log_every == 0 or step == 1:
            result.losses.append((step, loss))
    result.params = dp.params
    result.eval_after = eval_loss(result.params, config, held)
    return result


def reward(text: str, reference: str) -> float:
    """1 for the exact answer, else half the fraction of characters in the right place."""
    if text == reference:
        return 1.0
    hits = sum(a == b for a, b in zip(text, reference, strict=False))
    return 0.5 * hits / max(len(text), len(reference), 1)


def rollout(
    params: Params,
    config: TinyConfig,
    prompts: list[str],
    max_new: int,
    rng: np.random.Generator,
    top_k: int = 0,
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Sample one completion per prompt: texts, window contexts, tokens and owning rollout index."""
    ctx = np.array([prompt_context(p, config.context) for p in prompts], np.int64)
    done = np.zeros(len(prompts), bool)
    out: list[list[int]] = [[] for _ in prompts]
    contexts, tokens, owners = [], [], []
    for _ in range(max_new):
        live = np.flatnonzero(~done)
        if not len(live):
            break
        z = logits(params, ctx[live])
        if top_k:
            kth = np.partition(z, -top_k, axis=1)[:, -top_k][:, None]
            z = np.where(z >= kth, z, -np.inf)
        probs = np.exp(z - z.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        picks = (probs.cumsum(axis=1) > rng.random((len(live), 1))).argmax(axis=1)
        for row, tok in zip(live, picks, strict=True):
            contexts.append(ctx[row].copy())
            tokens.append(tok)
            owners.append(row)
            out[row].append(int(tok))
            done[row] = tok == EOS
        ctx[live] = np.concatenate([ctx[live, 1:], picks[:, None]], axis=1)
    texts = [decode(ids) for ids in out]
    return texts, np.array(contexts, np.int64), np.array(tokens, np.int64), np.array(owners, np.int64)


def _policy_grad_fn(contexts: np.ndarray, tokens: np.ndarray, advantages: np.ndarray):
    """Gradient of -sum(advantage * log p(sampled token)) over one rank's slice of the rollouts."""

    def grad_fn(p: Params, idx: np.ndarray, denom: float) -> tuple[float, Params]:
        return weighted_nll(p, contexts[idx], tokens[idx], advantages[idx], denom)

    return grad_fn


def grpo(
    params: Params,
    config: TinyConfig,
    train: list[Example],
    held: list[Example],
    tc: TrainConfig,
    group: int = 8,
    top_k: int = 0,
) -> TrainResult:
    """Group-relative policy gradient: sample `group` answers per prompt, reward, normalize, step."""
    rng = np.random.default_rng(tc.seed)
    dp = _setup(params, tc)
    result = TrainResult(params, eval_loss(params, config, held), float("nan"))
    max_new = max(len(encode(e.response)) for e in train) + 1
    prompts_per_step = max(1, tc.batch // group)
    for step in range(1, tc.steps + 1):
        picked = [train[i] for i in rng.choice(len(train), size=prompts_per_step, replace=False)]
        prompts = [e.prompt for e in picked for _ in range(group)]
        refs = [e.response for e in picked for _ in range(group)]
        texts, contexts, tokens, owners = rollout(dp.params, config, prompts, max_new, rng, top_k)
        rewards = np.array([reward(t, r) for t, r in zip(texts, refs, strict=True)], np.float32)
        grouped = rewards.reshape(prompts_per_step, group)
        adv = (
            (grouped - grouped.mean(axis=1, keepdims=True)) / (grouped.std(axis=1, keepdims=True) + 1e-4)
        ).reshape(-1)
        grad_fn = _policy_grad_fn(contexts, tokens, adv[owners].astype(np.float32))
        loss = dp.step(grad_fn, np.arange(len(tokens)), float(len(prompts)), tc.grad_accum)
        if step % tc.log_every == 0 or step == 1:
            result.losses.append((step, loss))
            result.rewards.append((step, float(rewards.mean())))
    result.params = dp.params
    result.eval_after = eval_loss(result.params, config, held)
    return result


def mean_reward(
    params: Params, config: TinyConfig, examples: list[Example], seed: int, samples: int = 4
) -> float:
    """Average reward of sampled answers on `examples` (a held-out score for RL tests)."""
    rng = np.random.default_rng(seed)
    prompts = [e.prompt for e in examples for _ in range(samples)]
    refs = [e.response for e in examples for _ in range(samples)]
    max_new = max(len(encode(r)) for r in refs) + 1
    texts, *_ = rollout(params, config, prompts, max_new, rng)
    return float(np.mean([reward(t, r) for t, r in zip(texts, refs, strict=True)]))
