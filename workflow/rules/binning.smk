# The MPI binning job: per-bin statistics of the target over the trace's timeline and the top-k most
# variable bins. `shell:` because mpiexec/srun starts the ranks: every option by name, every value quoted, and
# the launcher (resources.mpi, which profiles set to srun) reaches it only as validated words (params.launcher).
# Ranks: binning.ranks (config) sets both the tasks Slurm allocates and the ranks mpiexec/srun starts.
# bin_scaling_trace is the same job once per rank count of the scaling study (scaling.smk).


rule bin_trace:
    input:
        kernels=files.ingest_file(files.KERNELS_TABLE),
        memcpy=files.ingest_file(files.MEMCPY_TABLE),
    output:
        bins=files.bin_file(files.BINS_TABLE),
        rows=files.bin_file(files.TOPK_ROWS),
        sample=files.bin_file(files.SAMPLE_ROWS),
        report=files.bin_file(files.BIN_REPORT),
    log:
        "logs/bin_trace/{dataset}_{target}.log",
    benchmark:
        "benchmarks/bin_trace/{dataset}_{target}.tsv"
    priority: 1
    conda:
        ENV
    threads: CFG.binning.ranks
    resources:
        mpi="mpiexec",
        # the Slurm plugin refuses an MPI job of one task: a 1-rank run asks for 2 and starts 1
        tasks=max(2, CFG.binning.ranks),
        cpus_per_task=1,
        mem_mb_per_cpu=2000,
        runtime=30,
    params:
        ranks=CFG.binning.ranks,
        launcher=mpi_launcher,
        outdir=subpath(output.report, parent=True),
        features=comma_list(CFG.binning.features),
        group=CFG.targets.variability_group,
        link=CFG.targets.memcpy_link,
        bin_width=CFG.binning.bin_width,
        launch_bin_width=CFG.binning.launch_bin_width,
        top_k=CFG.binning.top_k,
        workers_per_rank=CFG.binning.workers_per_rank,
        # the random bins the causal step compares the top-k with: as many, or every bin when it reads all
        sample_bins=sample_bin_count(CFG.binning, CFG.causal),
        sample_seed=CFG.causal.seed,
    shell:
        "{params.launcher:q} -n {params.ranks:q} gpuvar bin {input.kernels:q} --memcpy {input.memcpy:q}"
        " --target {wildcards.target:q} --features {params.features:q} --group {params.group:q}"
        " --link {params.link:q} --bin-width {params.bin_width:q}"
        " --launch-bin-width {params.launch_bin_width:q} --top-k {params.top_k:q}"
        " --workers-per-rank {params.workers_per_rank:q} --sample-bins {params.sample_bins:q}"
        " --sample-seed {params.sample_seed:q} --output {params.outdir:q} > {log:q} 2>&1"


# threads: more than any machine has, which Snakemake scales down to --cores, so locally no other job runs
# beside it and the timings in bin.json are not disturbed. On Slurm cpus_per_task=1 and tasks size the job.
use rule bin_trace as bin_scaling_trace with:
    input:
        kernels=lambda wildcards: plot_paths.scaling_kernels(wildcards.trace),
        memcpy=lambda wildcards: plot_paths.scaling_kernels(
            wildcards.trace, files.MEMCPY_TABLE
        ),
    output:
        bins=f"{files.SCALING_RUN}/{files.BINS_TABLE}",
        rows=f"{files.SCALING_RUN}/{files.TOPK_ROWS}",
        sample=f"{files.SCALING_RUN}/{files.SAMPLE_ROWS}",
        report=f"{files.SCALING_RUN}/{files.BIN_REPORT}",
    log:
        "logs/bin_scaling_trace/{trace}_{target}_ranks{ranks}.log",
    benchmark:
        "benchmarks/bin_scaling_trace/{trace}_{target}_ranks{ranks}.tsv"
    wildcard_constraints:
        trace=plot_paths.SCALING_TRACE,
        ranks=r"\d+",
    threads: 4096
    resources:
        mpi="mpiexec",
        tasks=lambda wildcards: max(2, int(wildcards.ranks)),
        cpus_per_task=1,
        mem_mb_per_cpu=2000,
        runtime=30,
    params:
        ranks=lambda wildcards: int(wildcards.ranks),  # the other params: bin_trace's (params merge)
