# The two commands of the README:
#   make demo   build the environment and run the whole workflow on the embedded demo
#   make test   build the environment and run the test suite (what CI runs, via .ci/run)
# Only python3 (3.11+), pip and Debian packages are needed; everything else is installed here.

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
# pytest-xdist: two workers, tests sent in groups (tests/conftest.py); TEST_WORKERS=0 runs in one process
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
export PATH := $(BIN):$(PATH)

.PHONY: env demo test test-fast lint dag clean mutation

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[mpich,bench,test,ncurep]'
	touch $@

demo: $(STAMP)
	snakemake --profile profiles/local --cores $(CORES)

test: $(STAMP)
	GPUVAR_TEST_WORKERS=$(TEST_WORKERS) bash .ci/test.sh

# the inner loop: unit and real-data tests, without the workflow, paper and Slurm end-to-end runs
test-fast: $(STAMP)
	pytest -q -x $(XDIST) -m "not slow and not slurm" --ignore=tests/test_workflow.py --ignore=tests/test_paper.py \
		--ignore=tests/test_slurm.py --ignore=tests/test_workflow_layer.py --ignore=tests/test_readme_commands.py \
		--ignore=tests/test_shell_injection.py

# break the code on purpose (tools/mutation_check.py): every mutation must apply and be caught (~2.5 min; CI runs it)
mutation: $(STAMP)
	python tools/mutation_check.py

lint: $(STAMP)
	snakemake --lint
	snakefmt --check Snakefile workflow/rules
	ruff check src tests workflow/scripts
	ruff format --check src tests workflow/scripts

dag: $(STAMP)
	snakemake --rulegraph | tee results/rulegraph.dot

clean:
	rm -rf results logs benchmarks resources/demo .snakemake
