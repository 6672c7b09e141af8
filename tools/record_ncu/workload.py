"""A small PyTorch program with many kernel launches whose launch shapes vary, recorded with Nsight Compute.

Why this shape: gpuvar looks for what makes the same kernel run longer or shorter. Each step launches the
same elementwise, reduction and GEMM kernels over a rotating set of sizes, so one kernel name is seen with
several grid sizes (a planted, real cause of duration variation) and the same launch repeats many times
(run-to-run noise of identical launches). Seeded; the sizes are a fixed cycle.
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    sizes = [1 << 16, 1 << 18, 1 << 20, 1 << 22]
    gemm = [256, 512, 1024]
    vectors = {n: torch.randn(n, device=dev) for n in sizes}
    mats = {m: torch.randn(m, m, device=dev) for m in gemm}
    host = torch.randn(1 << 20).pin_memory()
    for step in range(args.steps):
        n = sizes[step % len(sizes)]
        x = vectors[n]
        y = x * 2.0 + 1.0          # elementwise kernels, grid grows with n
        z = torch.relu(y)          # another elementwise kernel
        s = z.sum()                # reduction
        m = gemm[step % len(gemm)]
        c = mats[m] @ mats[m]      # cuBLAS GEMM, kernel chosen by size
        d = torch.softmax(c, dim=1)
        x_dev = host.to(dev, non_blocking=True)  # host-to-device copy before the next kernel
        t = (x_dev + d.flatten()[: x_dev.numel()].sum()).mean()
        torch.cuda.synchronize()
        if step == 0:
            print(f"step 0: sum={s.item():.3f} mean={t.item():.3f}")
    print(f"done: {args.steps} steps")


if __name__ == "__main__":
    main()
