"""The three model shapes of issue 31's benchmarks, in plain torch (torchvision is not a
dependency): a ResNet-50-like bottleneck net (activation-heavy), a small 3D U-Net
(activation-heavy, 3D), and a GPT-2-medium-shaped block stack with AdamW (model-state-heavy).
Each `*_step` gives what trace.trace_step and measure_cpu.cpu_step_peak take."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional


@dataclass
class StepSpec:
    name: str
    input: str
    batch: int
    build_model: Callable[[], nn.Module]
    make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]

    def step_args(self):
        return self.build_model, self.make_batch, self.loss_fn, self.make_optimizer


class Bottleneck(nn.Module):
    """1x1 down, 3x3, 1x1 up (4x), batch norm after each, a projected shortcut when shapes
    change: ResNet-50's block."""

    def __init__(self, channels_in: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
        self.shortcut = (nn.Identity() if stride == 1 and channels_in == out else nn.Sequential(
            nn.Conv2d(channels_in, out, 1, stride, bias=False), nn.BatchNorm2d(out)))

    def forward(self, x):
        return functional.relu(self.body(x) + self.shortcut(x))


def bottleneck_resnet(blocks=(3, 4, 6, 3), classes: int = 1000) -> nn.Module:
    """blocks=(3, 4, 6, 3) is ResNet-50's layout (25.6 M parameters)."""
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    channels = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(count):
            layers.append(Bottleneck(channels, width, 2 if i == 0 and stage > 0 else 1))
            channels = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes)]
    return nn.Sequential(*layers)


class UNet3d(nn.Module):
    """Two convolutions per level, max-pool down, transposed convolution up, skips concatenated."""

    def __init__(self, channels_in: int = 1, classes: int = 2, base: int = 16,
                 depth: int = 3) -> None:
        super().__init__()

        def double(a, b):
            return nn.Sequential(nn.Conv3d(a, b, 3, padding=1), nn.BatchNorm3d(b), nn.ReLU(),
                                 nn.Conv3d(b, b, 3, padding=1), nn.BatchNorm3d(b), nn.ReLU())

        widths = [base * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList([double(channels_in, widths[0])] + [
            double(widths[i], widths[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList([nn.ConvTranspose3d(widths[i + 1], widths[i], 2, 2)
                                 for i in reversed(range(depth))])
        self.merge = nn.ModuleList([double(widths[i] * 2, widths[i])
                                    for i in reversed(range(depth))])
        self.head = nn.Conv3d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, level in enumerate(self.down):
            x = level(x if i == 0 else functional.max_pool3d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1])):
            x = merge(torch.cat([up(x), skip], dim=1))
        return self.head(x)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x):
        batch, tokens, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.mlp(self.norm2(x))


class Gpt(nn.Module):
    """GPT-2-shaped: layers=24, width=1024, heads=16, vocab=50257 is GPT-2 medium (355 M)."""

    def __init__(self, layers=24, width=1024, heads=16, vocab=50257, context=1024) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied, as GPT-2

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.blocks(self.embed(tokens) + self.position(positions))
        return self.head(self.norm(x))


def _token_loss(logits, target):
    return functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def resnet_step(image: int = 224, batch: int = 8, blocks=(3, 4, 6, 3)) -> StepSpec:
    return StepSpec("resnet50-like", f"3x{image}x{image}", batch,
                    lambda: bottleneck_resnet(blocks),
                    lambda: (torch.randn(batch, 3, image, image),
                             torch.randint(0, 1000, (batch,))),
                    functional.cross_entropy,
                    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True))


def unet3d_step(side: int = 64, batch: int = 2, base: int = 16, depth: int = 3) -> StepSpec:
    return StepSpec("unet3d", f"1x{side}x{side}x{side}", batch,
                    lambda: UNet3d(base=base, depth=depth),
                    lambda: (torch.randn(batch, 1, side, side, side),
                             torch.randint(0, 2, (batch, side, side, side))),
                    functional.cross_entropy,
                    lambda params: torch.optim.Adam(params, foreach=True))


def gpt_step(tokens: int = 1024, batch: int = 4, layers: int = 24, width: int = 1024,
             heads: int = 16, vocab: int = 50257) -> StepSpec:
    return StepSpec("gpt2-medium-like", f"{tokens} tokens", batch,
                    lambda: Gpt(layers, width, heads, vocab, context=tokens),
                    lambda: (torch.randint(0, vocab, (batch, tokens)),
                             torch.randint(0, vocab, (batch, tokens))),
                    _token_loss,
                    lambda params: torch.optim.AdamW(params, foreach=True))
