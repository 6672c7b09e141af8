"""Causal-discovery benchmark: gpuvar's vectorised pwling DirectLiNGAM against lingam's, on one seeded
linear non-Gaussian SEM (the last variable made a sink, as in the pipeline); prints one JSON object."""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def synthetic_sem(p: int, n: int, seed: int) -> np.ndarray:
    """n samples of a random sparse linear SEM over p variables with uniform noise (about 2 parents each)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(p)
    B = np.zeros((p, p))
    for a in range(1, p):
        parents = rng.random(a) < min(1.0, 2.0 / a)
        B[perm[a], perm[:a][parents]] = rng.choice([-1.0, 1.0], parents.sum()) * rng.uniform(0.3, 1.0, parents.sum())
    noise = rng.uniform(-1.0, 1.0, size=(n, p))
    X = np.linalg.solve(np.eye(p) - B, noise.T).T
    return (X - X.mean(axis=0)) / X.std(axis=0)


def configure_causal(p):
    p.add_argument("--p", type=int, default=74, help="variables (default: %(default)s)")
    p.add_argument("--n", type=int, default=1000, help="samples (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="fast engine threads (default: usable cores)")
    p.add_argument("--no-sink", action="store_true", help="no prior knowledge (plain DirectLiNGAM)")


def run_causal(args) -> int:
    from threadpoolctl import threadpool_limits

    from gpuvar.causal import pwling
    from gpuvar.causal.discover import sink_prior_knowledge
    from gpuvar.ingest.footprint import usable_cores

    X = synthetic_sem(args.p, args.n, args.seed)
    pk = None if args.no_sink else sink_prior_knowledge(args.p, args.p - 1)
    t0 = time.perf_counter()
    import lingam

    import_s = time.perf_counter() - t0
    with threadpool_limits(1):  # same BLAS setting for both engines: one thread is fastest for these sizes
        t0 = time.perf_counter()
        order, B = pwling.fit(X, pk, threads=args.threads)
        gpuvar_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = lingam.DirectLiNGAM(prior_knowledge=pk, measure="pwling").fit(X)
        lingam_s = time.perf_counter() - t0
    result = {
        "bench": "causal",
        "p": args.p,
        "n": args.n,
        "seed": args.seed,
        "sink_prior_knowledge": pk is not None,
        "threads": args.threads if args.threads else usable_cores(),
        "lingam_s": round(lingam_s, 3),
        "lingam_import_s": round(import_s, 3),
        "gpuvar_s": round(gpuvar_s, 3),
        "speedup": round(lingam_s / gpuvar_s, 2),
        "same_order": list(map(int, model.causal_order_)) == order,
        "max_abs_adjacency_diff": float(np.abs(np.asarray(model.adjacency_matrix_) - B).max()),
    }
    print(json.dumps(result, sort_keys=True))
    return 0


def main(argv=None) -> int:
    """`python -m gpuvar.bench.causal --p 74 --n 1000` while the bench dispatcher is not wired."""
    import argparse

    parser = argparse.ArgumentParser(prog="gpuvar bench causal", description=__doc__.splitlines()[0])
    configure_causal(parser)
    return run_causal(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
