"""Write the planted two-rank NCCL job (gpuvar.ranks.planted) as rocpd SQLite databases, one per rank.

Why: rocpd (the ROCm 7 default output) has no host collective op and no step marker, so `gpuvar explain a.db b.db`
must find the ranks' steps from the repeating launch pattern and their collectives from the RCCL kernels (RCCL
keeps NCCL's kernel names). The public rocpd files hold one process each and no loop, so the rank analysis is
tested on this planted job, whose answer is known: rank 1's GEMMs take GEMM_NS x U(0.4, 2.0) per step, so it is
last exactly in the steps where that draw makes it arrive after rank 0, and each rank waits inside its all-reduce
kernel for the other.

The layout is the rocprofiler-sdk rocpd schema (schema_version 3) as the real files have it
(../shared/data/real/rocpd-sqlite, outside the repo): tables `rocpd_<what>_<uuid>` with the real columns, and the
unsuffixed views over them that readers query. Only what a kernel trace needs is written: metadata, strings,
node, process, thread, agents (one CPU, one GPU), kernel symbols and dispatches. Grid sizes are in work-items
(HSA), as rocpd stores them. Seeded: the same seed writes the same bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpuvar.output import replacing
from gpuvar.ranks.planted import planted_job

SCHEMA_VERSION = "3"
PID_BASE = 40000
TABLES = {
    "metadata": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "tag" TEXT NOT NULL, "value" TEXT NOT NULL',
    "string": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, "string" TEXT NOT NULL UNIQUE',
    "info_node": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, "hash" BIGINT NOT NULL, '
    '"machine_id" TEXT NOT NULL, "system_name" TEXT, "hostname" TEXT, "release" TEXT, "version" TEXT, '
    '"hardware_name" TEXT, "domain_name" TEXT',
    "info_process": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, "nid" INTEGER NOT NULL, '
    '"ppid" INTEGER, "pid" INTEGER NOT NULL, "init" BIGINT, "fini" BIGINT, "start" BIGINT, "end" BIGINT, '
    '"command" TEXT, "environment" JSONB DEFAULT "{}" NOT NULL, "extdata" JSONB DEFAULT "{}" NOT NULL',
    "info_thread": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, "nid" INTEGER NOT NULL, '
    '"ppid" INTEGER, "pid" INTEGER NOT NULL, "tid" INTEGER NOT NULL, "name" TEXT, "start" BIGINT, "end" BIGINT, '
    '"extdata" JSONB DEFAULT "{}" NOT NULL',
    "info_agent": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "type" TEXT, "absolute_index" INTEGER, "logical_index" INTEGER, '
    '"type_index" INTEGER, "uuid" INTEGER, "name" TEXT, "model_name" TEXT, "vendor_name" TEXT, '
    '"product_name" TEXT, "user_name" TEXT, "extdata" JSONB DEFAULT "{}" NOT NULL',
    "info_kernel_symbol": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, '
    '"nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL, "code_object_id" INTEGER NOT NULL, "kernel_name" TEXT, '
    '"display_name" TEXT, "kernel_object" INTEGER, "kernarg_segment_size" INTEGER, '
    '"kernarg_segment_alignment" INTEGER, "group_segment_size" INTEGER, "private_segment_size" INTEGER, '
    '"sgpr_count" INTEGER, "arch_vgpr_count" INTEGER, "accum_vgpr_count" INTEGER, '
    '"extdata" JSONB DEFAULT "{}" NOT NULL',
    "kernel_dispatch": '"id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "guid" TEXT NOT NULL, '
    '"nid" INTEGER NOT NULL, "pid" INTEGER NOT NULL, "tid" INTEGER, "agent_id" INTEGER NOT NULL, '
    '"kernel_id" INTEGER NOT NULL, "dispatch_id" INTEGER NOT NULL, "queue_id" INTEGER NOT NULL, '
    '"stream_id" INTEGER NOT NULL, "start" BIGINT NOT NULL, "end" BIGINT NOT NULL, '
    '"private_segment_size" INTEGER, "group_segment_size" INTEGER, "workgroup_size_x" INTEGER NOT NULL, '
    '"workgroup_size_y" INTEGER NOT NULL, "workgroup_size_z" INTEGER NOT NULL, "grid_size_x" INTEGER NOT NULL, '
    '"grid_size_y" INTEGER NOT NULL, "grid_size_z" INTEGER NOT NULL, "region_name_id" INTEGER, '
    '"event_id" INTEGER, "extdata" JSONB DEFAULT "{}" NOT NULL',
}
# kernel name -> (mangled symbol, sgpr, arch vgpr): what rocprofv3 records for a GEMM, a ReLU and an RCCL kernel
SYMBOLS = {
    "sgemm": ("_Z5sgemmPKfS0_Pfiii.kd", 48, 128),
    "relu": ("_Z4reluPfi.kd", 16, 8),
}


def _uuid(rank: int, seed: int) -> str:
    return f"{seed:08x}{rank:08x}" + "ab" * 8


def write_rank(path: Path, kernels, rank: int, seed: int) -> int:
    """One rank's kernels (a planted_job frame) as a rocpd database at `path`; returns the dispatches written."""
    uuid = _uuid(rank, seed)
    pid = PID_BASE + rank
    with replacing(path) as tmp:
        con = sqlite3.connect(tmp)
        try:
            con.execute("PRAGMA journal_mode = OFF")
            for name, columns in TABLES.items():
                con.execute(f'CREATE TABLE "rocpd_{name}_{uuid}" ({columns})')
                con.execute(f'CREATE VIEW "rocpd_{name}" AS SELECT * FROM "rocpd_{name}_{uuid}"')
            table = {name: f'"rocpd_{name}_{uuid}"' for name in TABLES}
            con.executemany(
                f"INSERT INTO {table['metadata']} (tag, value) VALUES (?, ?)",
                [("schema_version", SCHEMA_VERSION), ("uuid", f"_{uuid}"), ("guid", uuid), ("upid", uuid)],
            )
            con.execute(
                f"INSERT INTO {table['info_node']} (guid, hash, machine_id, hostname) VALUES (?, ?, ?, ?)",
                (uuid, 1000 + rank, f"planted-node-{rank}", f"node{rank}"),
            )
            con.execute(
                f"INSERT INTO {table['info_process']} (guid, nid, pid, command) VALUES (?, 1, ?, ?)",
                (uuid, pid, "python train.py"),
            )
            con.execute(f"INSERT INTO {table['info_thread']} (guid, nid, pid, tid) VALUES (?, 1, 1, ?)", (uuid, pid))
            agents = [("CPU", 0, "planted CPU"), ("GPU", 1, "AMD Instinct MI250X")]
            con.executemany(
                f"INSERT INTO {table['info_agent']} (guid, nid, pid, type, absolute_index, logical_index, type_index, "
                "name, product_name) VALUES (?, 1, 1, ?, ?, ?, 0, ?, ?)",
                [(uuid, kind, index, index, name, name) for kind, index, name in agents],
            )
            names = list(dict.fromkeys(kernels["kernel_name"]))
            symbol_id = {name: i for i, name in enumerate(names, 1)}
            con.executemany(
                f"INSERT INTO {table['info_kernel_symbol']} (guid, nid, pid, code_object_id, kernel_name, display_name, "
                "group_segment_size, private_segment_size, sgpr_count, arch_vgpr_count, accum_vgpr_count) "
                "VALUES (?, 1, 1, 1, ?, ?, 0, 0, ?, ?, 0)",
                [(uuid, SYMBOLS.get(n, (n + ".kd",))[0], n, *SYMBOLS.get(n, ("", 32, 64))[1:]) for n in names],
            )
            block = kernels["workgroup_size"].astype(int).to_numpy()
            blocks = kernels["grid_size"].astype(int).to_numpy()
            rows = [
                (uuid, symbol_id[name], i, int(start), int(end), int(wg), int(g * wg))
                for i, (name, start, end, wg, g) in enumerate(
                    zip(kernels["kernel_name"], kernels["start"], kernels["end"], block, blocks), 1
                )
            ]
            con.executemany(
                f"INSERT INTO {table['kernel_dispatch']} (guid, nid, pid, tid, agent_id, kernel_id, dispatch_id, queue_id, "
                'stream_id, start, "end", private_segment_size, group_segment_size, workgroup_size_x, workgroup_size_y, '
                "workgroup_size_z, grid_size_x, grid_size_y, grid_size_z) "
                "VALUES (?, 1, 1, 1, 2, ?, ?, 1, 1, ?, ?, 0, 0, ?, 1, 1, ?, 1, 1)",
                rows,
            )
            con.commit()
        finally:
            con.close()
    return len(rows)


def write_rocpd_ranks(folder: str | Path, steps: int = 60, seed: int = 0) -> tuple[list[Path], dict]:
    """rank0.db and rank1.db of the planted NCCL job in `folder`; returns the files and the truth
    (gpuvar.ranks.planted: the last rank per step, each rank's wait in ns)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    job = planted_job(steps=steps, seed=seed, collective="nccl")
    paths = []
    for rank, (kernels, _copies) in job["ranks"].items():
        path = folder / f"rank{rank}.db"
        write_rank(path, kernels, rank, seed)
        paths.append(path)
    return paths, job["truth"]
