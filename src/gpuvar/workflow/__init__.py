"""What the Snakemake layer needs from the package: the dataset registry (registry.py), each rule's command
arguments made from the typed config (arguments.py) and the runner of workflow/scripts (script.py)."""
