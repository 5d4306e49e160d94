#!/usr/bin/env python3
"""Write a Stable Diffusion 1.5 checkpoint filled with seeded random numbers.

No model can be downloaded where easel's tests run, and none belongs in the repository, but a
real image server needs a checkpoint to load. The tensor names and shapes of SD 1.5's original
(LDM) single-file layout follow from its published configuration, which is all this script
takes as input (the constants below): the UNet (`model.diffusion_model.*`), the VAE
(`first_stage_model.*`) and the CLIP ViT-L/14 text encoder (`cond_stage_model.*`).

The numbers are noise, so the images are too, but the server's loader, sampler, VAE and encoder
all run for real. Weights are drawn with a standard deviation of 1/sqrt(fan-in) so activations
keep their scale through the layers (noise in, varied noise out, never NaN); norms start at one,
biases at zero.

Usage: sd-checkpoint.py OUT.safetensors [--seed N]   (needs numpy and safetensors)
"""

import argparse
import os
import sys

import numpy as np
from safetensors.numpy import save_file

# SD 1.5's UNet (v1-inference.yaml: unet_config.params).
UNET_CHANNELS = 320
UNET_MULT = (1, 2, 4, 4)
UNET_RES_BLOCKS = 2
UNET_ATTENTION_LEVELS = (0, 1, 2)  # attention_resolutions 4, 2, 1 = the first three levels
LATENT_CHANNELS = 4
CONTEXT_DIM = 768
TIME_DIM = UNET_CHANNELS * 4
# The VAE (first_stage_config.params.ddconfig).
VAE_CHANNELS = 128
VAE_MULT = (1, 2, 4, 4)
VAE_RES_BLOCKS = 2
VAE_Z = 4
# CLIP ViT-L/14's text model.
CLIP_WIDTH = 768
CLIP_LAYERS = 12
CLIP_VOCAB = 49408
CLIP_POSITIONS = 77


def layout():
    """Every tensor of the checkpoint as (name, shape, kind), kind one of weight/norm/bias/embed."""
    out = []

    def linear(name, n_out, n_in, bias=True):
        out.append((name + ".weight", (n_out, n_in), "weight"))
        if bias:
            out.append((name + ".bias", (n_out,), "bias"))

    def conv(name, n_out, n_in, k):
        out.append((name + ".weight", (n_out, n_in, k, k), "weight"))
        out.append((name + ".bias", (n_out,), "bias"))

    def norm(name, n):
        out.append((name + ".weight", (n,), "norm"))
        out.append((name + ".bias", (n,), "bias"))

    # --- UNet ---
    u = "model.diffusion_model."
    linear(u + "time_embed.0", TIME_DIM, UNET_CHANNELS)
    linear(u + "time_embed.2", TIME_DIM, TIME_DIM)

    def res(name, n_in, n_out):
        norm(name + ".in_layers.0", n_in)
        conv(name + ".in_layers.2", n_out, n_in, 3)
        linear(name + ".emb_layers.1", n_out, TIME_DIM)
        norm(name + ".out_layers.0", n_out)
        conv(name + ".out_layers.3", n_out, n_out, 3)
        if n_in != n_out:
            conv(name + ".skip_connection", n_out, n_in, 1)

    def transformer(name, n):
        norm(name + ".norm", n)
        conv(name + ".proj_in", n, n, 1)
        b = name + ".transformer_blocks.0."
        for attn, kv in (("attn1", n), ("attn2", CONTEXT_DIM)):
            linear(b + attn + ".to_q", n, n, bias=False)
            linear(b + attn + ".to_k", n, kv, bias=False)
            linear(b + attn + ".to_v", n, kv, bias=False)
            linear(b + attn + ".to_out.0", n, n)
        linear(b + "ff.net.0.proj", n * 8, n)  # GEGLU: two halves of 4n
        linear(b + "ff.net.2", n, n * 4)
        for i in (1, 2, 3):
            norm(b + f"norm{i}", n)
        conv(name + ".proj_out", n, n, 1)

    conv(u + "input_blocks.0.0", UNET_CHANNELS, LATENT_CHANNELS, 3)
    skips, ch, block = [UNET_CHANNELS], UNET_CHANNELS, 1
    for level, mult in enumerate(UNET_MULT):
        for _ in range(UNET_RES_BLOCKS):
            n = UNET_CHANNELS * mult
            res(f"{u}input_blocks.{block}.0", ch, n)
            ch = n
            if level in UNET_ATTENTION_LEVELS:
                transformer(f"{u}input_blocks.{block}.1", ch)
            skips.append(ch)
            block += 1
        if level != len(UNET_MULT) - 1:
            conv(f"{u}input_blocks.{block}.0.op", ch, ch, 3)
            skips.append(ch)
            block += 1
    res(u + "middle_block.0", ch, ch)
    transformer(u + "middle_block.1", ch)
    res(u + "middle_block.2", ch, ch)
    block = 0
    for level, mult in reversed(list(enumerate(UNET_MULT))):
        for i in range(UNET_RES_BLOCKS + 1):
            n = UNET_CHANNELS * mult
            res(f"{u}output_blocks.{block}.0", ch + skips.pop(), n)
            ch, part = n, 1
            if level in UNET_ATTENTION_LEVELS:
                transformer(f"{u}output_blocks.{block}.1", ch)
                part = 2
            if level != 0 and i == UNET_RES_BLOCKS:
                conv(f"{u}output_blocks.{block}.{part}.conv", ch, ch, 3)
            block += 1
    norm(u + "out.0", ch)
    conv(u + "out.2", LATENT_CHANNELS, ch, 3)

    # --- VAE ---
    v = "first_stage_model."

    def vae_res(name, n_in, n_out):
        norm(name + ".norm1", n_in)
        conv(name + ".conv1", n_out, n_in, 3)
        norm(name + ".norm2", n_out)
        conv(name + ".conv2", n_out, n_out, 3)
        if n_in != n_out:
            conv(name + ".nin_shortcut", n_out, n_in, 1)

    def vae_mid(name, n):
        vae_res(name + ".block_1", n, n)
        norm(name + ".attn_1.norm", n)
        for part in ("q", "k", "v", "proj_out"):
            conv(f"{name}.attn_1.{part}", n, n, 1)
        vae_res(name + ".block_2", n, n)

    e = v + "encoder."
    conv(e + "conv_in", VAE_CHANNELS, 3, 3)
    ch = VAE_CHANNELS
    for level, mult in enumerate(VAE_MULT):
        n = VAE_CHANNELS * mult
        for i in range(VAE_RES_BLOCKS):
            vae_res(f"{e}down.{level}.block.{i}", ch, n)
            ch = n
        if level != len(VAE_MULT) - 1:
            conv(f"{e}down.{level}.downsample.conv", ch, ch, 3)
    vae_mid(e + "mid", ch)
    norm(e + "norm_out", ch)
    conv(e + "conv_out", 2 * VAE_Z, ch, 3)
    conv(v + "quant_conv", 2 * VAE_Z, 2 * VAE_Z, 1)
    conv(v + "post_quant_conv", VAE_Z, VAE_Z, 1)
    d = v + "decoder."
    ch = VAE_CHANNELS * VAE_MULT[-1]
    conv(d + "conv_in", ch, VAE_Z, 3)
    vae_mid(d + "mid", ch)
    for level, mult in reversed(list(enumerate(VAE_MULT))):
        n = VAE_CHANNELS * mult
        for i in range(VAE_RES_BLOCKS + 1):
            vae_res(f"{d}up.{level}.block.{i}", ch, n)
            ch = n
        if level != 0:
            conv(f"{d}up.{level}.upsample.conv", ch, ch, 3)
    norm(d + "norm_out", ch)
    conv(d + "conv_out", 3, ch, 3)

    # --- CLIP ViT-L/14 text encoder ---
    t = "cond_stage_model.transformer.text_model."
    out.append((t + "embeddings.token_embedding.weight", (CLIP_VOCAB, CLIP_WIDTH), "embed"))
    out.append((t + "embeddings.position_embedding.weight", (CLIP_POSITIONS, CLIP_WIDTH), "embed"))
    for layer in range(CLIP_LAYERS):
        L = f"{t}encoder.layers.{layer}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(L + "self_attn." + proj, CLIP_WIDTH, CLIP_WIDTH)
        norm(L + "layer_norm1", CLIP_WIDTH)
        norm(L + "layer_norm2", CLIP_WIDTH)
        linear(L + "mlp.fc1", CLIP_WIDTH * 4, CLIP_WIDTH)
        linear(L + "mlp.fc2", CLIP_WIDTH, CLIP_WIDTH * 4)
    norm(t + "final_layer_norm", CLIP_WIDTH)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    tensors = {}
    for name, shape, kind in layout():
        if kind == "bias":
            value = np.zeros(shape, np.float16)
        elif kind == "norm":
            value = np.ones(shape, np.float16)
        else:
            fan_in = int(np.prod(shape[1:])) if kind == "weight" else 50
            std = 1.0 / np.sqrt(fan_in)
            value = (rng.standard_normal(shape, np.float32) * std).astype(np.float16)
        tensors[name] = value
    # Written beside and renamed, so a run cut short never leaves a truncated checkpoint behind.
    partial = args.out + ".partial"
    save_file(tensors, partial, metadata={"format": "pt", "easel": "random SD 1.5 layout"})
    os.replace(partial, args.out)
    params = sum(v.size for v in tensors.values())
    print(f"{args.out}: {len(tensors)} tensors, {params / 1e6:.0f}M parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
