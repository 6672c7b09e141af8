"""Every rule but the MPI job runs this: `gpuvar <params.command>` with the options the rule names in `params:`
(gpuvar.workflow.script.command_line), its output in the rule's log."""

from gpuvar.workflow.script import run_rule

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_rule(snakemake)  # noqa: F821 (snakemake is set by the script directive)
