"""Many launches of a few kernels with random problem sizes, for Nsight Compute (shared/tools/record-h100/ncu_prog.py,
with the iteration count from ITERS). Per iteration: curand fill of n x 1024, sigmoid, multiply, TF32 GEMM."""
import os, random, torch
torch.backends.cuda.matmul.allow_tf32 = True
rng = random.Random(11)
dev = "cuda"
a = torch.randn(4096, 4096, device=dev)
for i in range(int(os.environ.get("ITERS", "400"))):
    n = 256 * rng.randint(1, 16)
    x = torch.randn(n, 1024, device=dev)
    y = torch.sigmoid(x) * 2.0
    z = y @ a[:1024, :1024]
    torch.cuda.synchronize()
print("done")
