# kv_train.py - trains a small llama-architecture model with real-size attention heads (64 or 128
# elements) for the KV-cache quality benchmark (bench/kv.sh --trained), and writes it as a Hugging Face
# directory kiln loads directly (config.json, model.safetensors, and the tokenizer files of the
# directory given with --tokenizer-dir).
#
# Why: the quantized KV types (q4_0, tq4, tq3) act on one head vector at a time; their quality on a
# model with 8-element heads (stories260K) says little, and a random-weight model predicts nothing, so
# perplexity cannot separate the types. A model trained for minutes on two CPU cores is enough to have
# attention that matters. The text is read as token ids (one JSON array per line: kiln's /tokenize
# output), so this script needs no tokenizer of its own.
#
#   python3 kv_train.py --tokens ids.jsonl --tokenizer-dir HFDIR --out OUTDIR [--dim 256 --layers 4
#       --heads 4 --kv-heads 2 --head-dim 64 --ffn 768 --ctx 256 --steps 600 --batch 32 --threads 2]
#
# Needs Debian's python3-torch and python3-numpy (bench/kv.sh installs them when missing). The
# conventions are Hugging Face llama's: RMSNorm, rotate-half RoPE (theta 10000), SwiGLU, untied head.
import argparse, json, math, os, shutil, struct, time

import numpy as np
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--tokens", required=True)
p.add_argument("--tokenizer-dir", required=True)
p.add_argument("--out", required=True)
p.add_argument("--dim", type=int, default=256)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--kv-heads", type=int, default=2)
p.add_argument("--head-dim", type=int, default=64)
p.add_argument("--ffn", type=int, default=768)
p.add_argument("--ctx", type=int, default=256)
p.add_argument("--steps", type=int, default=600)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--eval-ids", help="a JSON array of a text's token ids (no BOS): its perplexity by llama.cpp's method at the end")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
rng = np.random.default_rng(a.seed)

# ---- data: every line a JSON array of token ids; BOS (1) before each line; 2% held out --------------
ids = []
with open(a.tokens) as f:
    for line in f:
        line = line.strip()
        if line:
            ids.append(1)
            ids.extend(json.loads(line))
data = np.array(ids, dtype=np.int64)
vocab = 512
assert data.max() < vocab, "token id beyond the vocabulary"
n_val = len(data) // 50
train, val = data[:-n_val], data[-n_val:]
print(f"tokens: {len(train)} train, {len(val)} held out", flush=True)


def batch_of(src, n):
    """n windows of ctx + 1 tokens at random offsets of src: (inputs [n, ctx], targets [n, ctx])."""
    off = rng.integers(0, len(src) - a.ctx - 1, n)
    w = np.stack([src[o:o + a.ctx + 1] for o in off])
    return torch.from_numpy(w[:, :-1]), torch.from_numpy(w[:, 1:])


# ---- model --------------------------------------------------------------------------------------------
D, H, KV, HD, L = a.dim, a.heads, a.kv_heads, a.head_dim, a.layers


def lin(o, i):
    return torch.nn.Parameter(torch.randn(o, i) * (1.0 / math.sqrt(i)))


P = {"model.embed_tokens.weight": torch.nn.Parameter(torch.randn(vocab, D) * 0.02),
     "model.norm.weight": torch.nn.Parameter(torch.ones(D)),
     "lm_head.weight": lin(vocab, D)}
for l in range(L):
    b = f"model.layers.{l}."
    P[b + "input_layernorm.weight"] = torch.nn.Parameter(torch.ones(D))
    P[b + "post_attention_layernorm.weight"] = torch.nn.Parameter(torch.ones(D))
    P[b + "self_attn.q_proj.weight"] = lin(H * HD, D)
    P[b + "self_attn.k_proj.weight"] = lin(KV * HD, D)
    P[b + "self_attn.v_proj.weight"] = lin(KV * HD, D)
    P[b + "self_attn.o_proj.weight"] = torch.nn.Parameter(lin(D, H * HD).data / math.sqrt(2 * L))
    P[b + "mlp.gate_proj.weight"] = lin(a.ffn, D)
    P[b + "mlp.up_proj.weight"] = lin(a.ffn, D)
    P[b + "mlp.down_proj.weight"] = torch.nn.Parameter(lin(D, a.ffn).data / math.sqrt(2 * L))

inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
ang = torch.arange(a.ctx).float()[:, None] * inv[None, :]  # [ctx, HD/2]
cos = torch.cat([ang.cos(), ang.cos()], -1)  # [ctx, HD]
sin = torch.cat([ang.sin(), ang.sin()], -1)
mask = torch.full((a.ctx, a.ctx), float("-inf")).triu(1)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def rope(x):  # x [B, heads, T, HD], rotate-half
    T = x.shape[2]
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos[:T] + torch.cat([-x2, x1], -1) * sin[:T]


def forward(tok):  # tok [B, T] -> logits [B, T, vocab]
    B, T = tok.shape
    x = P["model.embed_tokens.weight"][tok]
    for l in range(L):
        b = f"model.layers.{l}."
        h = rms(x, P[b + "input_layernorm.weight"])
        q = (h @ P[b + "self_attn.q_proj.weight"].t()).view(B, T, H, HD).transpose(1, 2)
        k = (h @ P[b + "self_attn.k_proj.weight"].t()).view(B, T, KV, HD).transpose(1, 2)
        v = (h @ P[b + "self_attn.v_proj.weight"].t()).view(B, T, KV, HD).transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // KV, 1)
        v = v.repeat_interleave(H // KV, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HD) + mask[:T, :T]
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * HD)
        x = x + o @ P[b + "self_attn.o_proj.weight"].t()
        h = rms(x, P[b + "post_attention_layernorm.weight"])
        g = F.silu(h @ P[b + "mlp.gate_proj.weight"].t()) * (h @ P[b + "mlp.up_proj.weight"].t())
        x = x + g @ P[b + "mlp.down_proj.weight"].t()
    return rms(x, P["model.norm.weight"]) @ P["lm_head.weight"].t()


def loss_of(tok, tgt):
    return F.cross_entropy(forward(tok).reshape(-1, vocab), tgt.reshape(-1))


# ---- train: AdamW, linear warm-up then cosine decay, gradient clipping --------------------------------
decay = [v for k, v in P.items() if v.dim() == 2]
keep = [v for k, v in P.items() if v.dim() == 1]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
                        lr=a.lr, betas=(0.9, 0.95))
warm = max(1, a.steps // 20)
t0 = time.time()
for step in range(a.steps):
    lr = a.lr * (step + 1) / warm if step < warm else \
        a.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / (a.steps - warm))))
    for g in opt.param_groups:
        g["lr"] = lr
    loss = loss_of(*batch_of(train, a.batch))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
    opt.step()
    if step % 50 == 0 or step == a.steps - 1:
        with torch.no_grad():
            vl = loss_of(*batch_of(val, 16)).item()
        print(f"step {step} loss {loss.item():.4f} held-out {vl:.4f} (ppl {math.exp(vl):.3f}) "
              f"lr {lr:.2e} {time.time() - t0:.0f} s", flush=True)

# ---- the perplexity of a text by llama.cpp's method (chunks of ctx, each starting with BOS in place of its
# first token, the second half scored): the figure `kiln perplexity -c CTX` must reproduce on the written
# directory, which checks the conventions (RoPE order, norms, names) end to end --------------------------
if a.eval_ids:
    with open(a.eval_ids) as f:
        ev = [1] + json.load(f)
    nll, cnt = 0.0, 0
    with torch.no_grad():
        for c in range(len(ev) // a.ctx):
            chunk = torch.tensor([1] + ev[c * a.ctx + 1:(c + 1) * a.ctx])[None, :]
            lp = forward(chunk)[0].log_softmax(-1)
            for j in range(a.ctx // 2, a.ctx - 1):
                nll -= lp[j, ev[c * a.ctx + j + 1]].item()
                cnt += 1
    print(f"eval perplexity (llama.cpp method, -c {a.ctx}): {math.exp(nll / cnt):.4f} over {cnt} tokens", flush=True)

# ---- write the Hugging Face directory -----------------------------------------------------------------
os.makedirs(a.out, exist_ok=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(a.tokenizer_dir, f), os.path.join(a.out, f))
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
       "intermediate_size": a.ffn, "num_hidden_layers": L, "num_attention_heads": H,
       "num_key_value_heads": KV, "head_dim": HD, "max_position_embeddings": a.ctx * 4,
       "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": vocab, "tie_word_embeddings": False,
       "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
with open(os.path.join(a.out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)
hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
for k in sorted(P):
    b = P[k].detach().numpy().astype("<f4").tobytes()
    hdr[k] = {"dtype": "F32", "shape": list(P[k].shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs:
        f.write(b)
print("wrote", a.out, flush=True)
