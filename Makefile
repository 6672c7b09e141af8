# The commands of the README:
#   make demo                 build the environment and run the whole workflow on the embedded demo
#   make test                 build the environment and run the test suite (what CI runs, via .ci/run)
#   make run CONFIG=my.yaml   run the workflow on your own config, in runs/my/ (never over the demo's results/)
#   make run-slurm CONFIG=my.yaml   the same on a Slurm cluster (profiles/slurm: set its account and partition first)
# Only python3 (3.11+), pip and Debian packages are needed; everything else is installed here.

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
# pytest-xdist workers, tests sent in groups (tests/conftest.py); 0 runs in one process. `make test`: three on two
# cores, because the worker holding the Slurm tests mostly waits on the cluster (pytest 8.5-9 -> 7.9 min);
# `make test-fast` (no Slurm): two
TEST_WORKERS ?= 3
FAST_WORKERS ?= 2
XDIST := --dist loadgroup --no-loadscope-reorder
export PATH := $(BIN):$(PATH)

.PHONY: env demo run run-slurm test test-fast test-pandas3 lint dag clean mutation

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[mpich,bench,test,ncurep]'
	touch $@
	@echo "gpuvar, snakemake and mpiexec are in $(VENV)/bin: 'source $(VENV)/bin/activate' puts them on PATH"

demo: $(STAMP)
	snakemake --profile profiles/local --cores $(CORES)

# a --configfile is the whole config (not layered over the demo's config/config.yaml); --directory keeps the
# run's results/, logs/, benchmarks/ and .snakemake/ in runs/<config name>/
$(if $(filter run run-slurm,$(MAKECMDGOALS)),$(if $(CONFIG),,$(error make $(MAKECMDGOALS): name your config file, e.g. make $(MAKECMDGOALS) CONFIG=my.yaml)))
RUN_DIR = runs/$(basename $(notdir $(CONFIG)))
run: $(STAMP)
	snakemake --profile profiles/local --cores $(CORES) --configfile '$(CONFIG)' --directory '$(RUN_DIR)'

run-slurm: $(STAMP)
	snakemake --profile profiles/slurm --configfile '$(CONFIG)' --directory '$(RUN_DIR)'

test: $(STAMP)
	GPUVAR_TEST_WORKERS=$(TEST_WORKERS) bash .ci/test.sh

# the inner loop: unit and real-data tests, without the workflow, paper and Slurm end-to-end runs
test-fast: $(STAMP)
	pytest -q -x -n $(FAST_WORKERS) $(XDIST) -m "not slow and not slurm and not snakemake and not long" --ignore=tests/test_workflow.py --ignore=tests/test_paper.py \
		--ignore=tests/test_slurm.py --ignore=tests/test_workflow_layer.py --ignore=tests/test_readme_commands.py \
		--ignore=tests/test_shell_injection.py

# the same unit and real-data tests against pandas 3 (CI pins pandas 2.3.3 in constraints.txt; a plain `pip install`
# gets pandas 3): pandas 3 laid over the environment in .pandas3/, nothing of .venv changed
test-pandas3: $(STAMP)
	$(BIN)/pip install --quiet --no-deps --upgrade --target .pandas3 'pandas>=3,<4'
	PYTHONPATH=$(CURDIR)/.pandas3 pytest -q -n $(FAST_WORKERS) $(XDIST) -m "not slow and not slurm" --ignore=tests/test_slurm.py

# break the code on purpose (tools/mutation_check.py): every mutation must apply and be caught (~2.5 min; CI runs it)
mutation: $(STAMP)
	python tools/mutation_check.py

lint: $(STAMP)
	snakemake --lint
	snakefmt --check Snakefile workflow/rules
	ruff check src tests workflow/scripts
	ruff format --check src tests workflow/scripts

# the steps as a Graphviz file; drawing it needs Graphviz's `dot` (apt-get install graphviz), not installed here
dag: $(STAMP)
	@mkdir -p results
	snakemake --rulegraph > results/rulegraph.dot
	@echo "wrote results/rulegraph.dot; draw it with: dot -Tpng results/rulegraph.dot > dag.png (apt-get install graphviz)"

clean:
	rm -rf results logs benchmarks resources/demo .snakemake
