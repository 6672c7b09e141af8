# Verifications (config `verifications`): per entry, `gpuvar verify` of one dataset's findings on a re-run
# recorded with a finding's cause removed (docs/causal.md#verify). Outputs in results/verify/{verification}/.

VERIFICATIONS = {v.name: v for v in CFG.verifications}
VERIFY_OUTPUTS = [
    f"{files.VERIFY_DIR.format(verification=v)}/{files.VERIFY_RECORD}"
    for v in VERIFICATIONS
]


rule verify_findings:
    input:
        findings=lambda wildcards: files.DATASET_FINDINGS_DIR.format(
            dataset=VERIFICATIONS[wildcards.verification].findings
        ),
        rerun=lambda wildcards: files.ingest_file(files.KERNELS_TABLE).format(
            dataset=VERIFICATIONS[wildcards.verification].rerun
        ),
    output:
        record=f"{files.VERIFY_DIR}/{files.VERIFY_RECORD}",
        page=report(
            f"{files.VERIFY_DIR}/{files.VERIFY_PAGE}",
            caption="../report/verify.rst",
            category="5 Verifications",
            labels={"verification": "{verification}"},
        ),
    log:
        "logs/verify_findings/{verification}.log",
    benchmark:
        "benchmarks/verify_findings/{verification}.tsv"
    wildcard_constraints:
        verification=names_regex(VERIFICATIONS),
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        command="verify",
        positional=lambda wildcards, input: [input.findings, files.folder(input.rerun)],
        output=lambda wildcards, output: files.folder(output.record),
        tolerance=lambda wildcards: VERIFICATIONS[wildcards.verification].tolerance,
        cv_tolerance=lambda wildcards: VERIFICATIONS[
            wildcards.verification
        ].cv_tolerance,
        exit_zero=True,
    script:
        GPUVAR
