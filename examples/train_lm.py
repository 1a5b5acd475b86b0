"""Train a small SmolLM2-style causal language model with kernelwright.compile_training.

The model is the SmolLM2-style workload of `kernelwright bench --train`
(kernelwright/suite/training/smollm.py: RMSNorm, rotary position embeddings,
grouped-query attention, a SwiGLU feed-forward, embeddings tied to the output head),
trained on characters of a small generated corpus (examples/data/tiny_corpus.txt) on the
default GPU, or on the software Vulkan driver where there is none. It prints a progress
line (loss, tokens/s), saves a checkpoint of the training state (TrainingStep.save), then
generates a few characters greedily through the inference path (kernelwright.compile of
the trained model).

    python examples/train_lm.py                          # tiny: under 2 minutes on lavapipe
    python examples/train_lm.py --dim 256 --layers 6 --heads 8 --kv-heads 2 \\
        --seq 128 --batch 32 --steps 2000 --lr 1e-3      # a real config, for a GPU
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import kernelwright
from kernelwright.suite.training.smollm import SmolLM, loss

CORPUS = Path(__file__).parent / "data" / "tiny_corpus.txt"


def batches(data: torch.Tensor, batch: int, seq: int, seed: int):
    """Random (input, next-character target) windows of the corpus, forever."""
    g = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        window = torch.stack([data[s:s + seq + 1] for s in start.tolist()])
        yield window[:, :-1].contiguous(), window[:, 1:].contiguous()


def generate(model: nn.Module, prompt: list[int], count: int, seq: int) -> list[int]:
    """`count` tokens after `prompt`, greedily, through one compiled forward of `seq`
    tokens: the context is the last `seq` tokens, right-padded while shorter (the
    attention is causal, so the padding never reaches the position read)."""
    compiled = kernelwright.compile(model.eval(), (torch.zeros(1, seq, dtype=torch.long),))
    out = list(prompt)
    for _ in range(count):
        context = out[-seq:]
        tokens = torch.tensor([context + [0] * (seq - len(context))])
        out.append(int(compiled(tokens)[0, len(context) - 1].argmax()))
    return out[len(prompt):]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per update")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--checkpoint", type=Path, default=Path("train_lm.safetensors"))
    p.add_argument("--generate", type=int, default=40, help="characters to generate")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    text = args.corpus.read_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text])
    torch.manual_seed(args.seed)
    model = SmolLM({"vocab": len(chars), "dim": args.dim, "layers": args.layers,
                    "heads": args.heads, "kv_heads": args.kv_heads,
                    "hidden": 4 * args.dim * 2 // 3, "seq": args.seq})
    model.train()
    stream = batches(data, args.batch, args.seq, args.seed)
    t0 = time.perf_counter()
    step = kernelwright.compile_training(
        model, next(stream), loss,
        optimizer=kernelwright.optim.AdamW(lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1),
        max_grad_norm=1.0, accumulate=args.accumulate,
        lr_schedule=lambda i: args.lr * min(1.0, (i + 1) / 20))
    print(f"{len(text)} characters, vocabulary {len(chars)}, "
          f"{sum(q.numel() for q in model.parameters())} parameters; "
          f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    t0, tokens, losses = time.perf_counter(), 0, []
    for i in range(args.steps * args.accumulate):
        losses.append(step(*next(stream)))
        tokens += args.batch * args.seq
        done = i + 1 == args.steps * args.accumulate
        if (i + 1) % (args.log_every * args.accumulate) == 0 or done:
            rate = tokens / (time.perf_counter() - t0)
            recent = losses[-args.log_every * args.accumulate:]
            print(f"step {step.steps:5d}  loss {sum(recent) / len(recent):.4f}  "
                  f"{rate:,.0f} tokens/s", flush=True)
    step.save(args.checkpoint)
    print(f"checkpoint: {args.checkpoint}")
    step.sync_to(model)
    prompt = "The "
    out = generate(model, [index[c] for c in prompt], args.generate, args.seq)
    print(repr(prompt + "".join(chars[t] for t in out)))


if __name__ == "__main__":
    main()
