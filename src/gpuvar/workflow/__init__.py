"""What the Snakemake layer needs from the package: the dataset registry (registry.py), the runner that turns
a rule's named params into its `gpuvar` command (script.py), the MPI launcher check (launcher.py), the figure
and comparison paths the rules expand (figures.py, compare.py) and the rules' environment (env.py)."""
