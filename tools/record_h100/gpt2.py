"""GPT-2-style training loop (random init, no download), bf16 autocast, AdamW, sequence length L drawn per step.

Derived from shared/tools/record-h100/record_gpt2.py with three settings from the environment: STEPS, SEED and
SHAPES=1 (torch.profiler record_shapes: every launching op carries its `Input Dims`). Writes
$OUT/<NAME>/<NAME>.pt.trace.json.gz and truth.json (L per step)."""
import json, os, random, subprocess, time
import torch
from torch.profiler import profile, ProfilerActivity
from transformers import GPT2Config, GPT2LMHeadModel

OUT, NAME = os.environ["OUT"], os.environ.get("NAME", "gpt2varlen")
STEPS, SEED, SHAPES = int(os.environ.get("STEPS", "100")), int(os.environ.get("SEED", "3")), os.environ.get("SHAPES") == "1"
folder = os.path.join(OUT, NAME); os.makedirs(folder, exist_ok=True)
torch.manual_seed(0)
cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=32000, n_positions=2048)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rng = random.Random(SEED)
B = 8
Ls = [64 * rng.randint(2, 16) for _ in range(STEPS)]

def step(L):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

for L in (256, 512, 1024): step(L)
t0 = time.time()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=SHAPES) as prof:
    for L in Ls: step(L)
print(NAME, "profiled", round(time.time() - t0, 1), flush=True)
p = os.path.join(folder, f"{NAME}.pt.trace.json")
prof.export_chrome_trace(p)
subprocess.run(["gzip", "-9", "-n", p], check=True)
json.dump({"steps": STEPS, "L": Ls, "B": B, "seed": SEED, "record_shapes": SHAPES, "model": cfg.to_dict(),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}, open(os.path.join(folder, "truth.json"), "w"), default=str)
