# The two commands in the README: `make run` and `make test`. Both set up everything
# they need on a Debian machine with Python 3.11: system packages, the virtualenv, the
# database. Each step is skipped when it is already done.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# Vulkan on Mesa's llvmpipe for kernel replays on CPU (the OpenGL fallback uses EGL);
# bubblewrap, the sandbox Triton and CUDA programs run in (and its escape tests).
RUN_PACKAGES := mesa-vulkan-drivers libvulkan1 libegl1 libgl1-mesa-dri bubblewrap
# Real-browser tests drive Debian's Chromium.
TEST_PACKAGES := $(RUN_PACKAGES) chromium
# The code editor is built from the npm registry (package-lock.json) by Node's npm.
NODE_PACKAGES := nodejs npm
EDITOR := static/vendor/editor.js

.PHONY: run test lint system-packages

system-packages:
	@missing=""; \
	for package in $(PACKAGES); do dpkg -s $$package >/dev/null 2>&1 || missing="$$missing $$package"; done; \
	$(PYTHON) -c "import ensurepip" 2>/dev/null || missing="$$missing python3-venv python3.11-venv"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing $(NODE_PACKAGES)"; \
	if [ -n "$$missing" ]; then \
		echo "Installing Debian packages:$$missing"; \
		sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# CodeMirror and its WGSL and JavaScript modes, bundled by esbuild into static/vendor/
# (not committed): `npm ci` installs exactly what package-lock.json names.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

$(EDITOR): node_modules/.package-lock.json $(wildcard static/src/*.js)
	npm run --silent build

run:
	@$(MAKE) --no-print-directory system-packages PACKAGES="$(RUN_PACKAGES)"
	@$(MAKE) --no-print-directory $(BIN)/.installed $(EDITOR)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_showcase
	$(BIN)/python manage.py load_gpu_showcase
	@# Every showcase version replays in the background (stored runs are kept), so the
	@# first reader sees run badges; the server does not wait for it.
	nice $(BIN)/python manage.py replay_sessions --verbosity 0 &
	ALLOWED_HOSTS="$${ALLOWED_HOSTS:-127.0.0.1,localhost,[::1],$(HOST)}" \
		$(BIN)/python manage.py runserver $(HOST):$(PORT) --noreload

test:
	@$(MAKE) --no-print-directory system-packages PACKAGES="$(TEST_PACKAGES)"
	@$(MAKE) --no-print-directory $(BIN)/.installed $(EDITOR)
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
