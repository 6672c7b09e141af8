"""Two ranks sharing one GPU under torch.distributed (gloo), each profiled; VARIABLE_RANK's rows vary per step.

Derived from shared/tools/record-h100/record_ranks.py; also writes truth.json (rows per step of each rank).
Run `python3 ranks.py 0 & python3 ranks.py 1` with OUT and VARIABLE_RANK set."""
import os, sys, json, random
import torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity

rank = int(sys.argv[1]); world = 2
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29555")
dist.init_process_group("gloo", rank=rank, world_size=world)
dev = "cuda"
OUT = os.environ["OUT"]
slow = int(os.environ.get("VARIABLE_RANK", "1"))
folder = os.path.join(OUT, f"ranks_var{slow}"); os.makedirs(folder, exist_ok=True)
d = 2048
W = torch.randn(d, d, device=dev) / d ** 0.5
rng = random.Random(100 + rank + (10 if slow == 0 else 0))
rows = []
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(150):
        n = 256 * rng.randint(4, 16) if rank == slow else 2048
        rows.append(n)
        x = torch.randn(n, d, device=dev)
        for _ in range(4):
            x = torch.relu(x @ W)
        g = x.sum(0)
        gc = g.cpu(); dist.all_reduce(gc); g.copy_(gc.to(dev))
        torch.cuda.synchronize()
p = os.path.join(folder, f"rank{rank}.pt.trace.json")
prof.export_chrome_trace(p)
os.system(f"gzip -9 -n {p}")
json.dump({"rank": rank, "variable_rank": slow, "rows_per_step": rows, "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__}, open(os.path.join(folder, f"truth_rank{rank}.json"), "w"))
dist.destroy_process_group()
