# The two newcomer commands (README): `make run` and `make test`.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
TESSERA := $(BUILD_DIR)/src/cli/tessera
DATA_DIR ?= data

.PHONY: deps build test run format clean web

deps:
	scripts/install-deps.sh

build: deps web
	cmake --preset $(PRESET) >/dev/null
	cmake --build --preset $(PRESET)

# The web dashboard (web/ -> web/dist, served by the server under /ui/). npm ci only when
# the lock file changed; skipped with a notice where npm is missing.
web:
	@if ! command -v npm >/dev/null; then \
	  echo "make web: npm not found; dashboard not built (the server answers /ui/ with a notice)"; \
	else \
	  cd web && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } \
	    && npm run build; \
	fi

# Every test: unit, scenario, integration (real SQLite, Slurm, Prometheus, Chromium where installed).
test: build
	scripts/test.sh $(PRESET)

# The main job on its embedded default: SQLite in $(DATA_DIR), an in-process local agent.
run: build
	$(TESSERA) server --data-dir $(DATA_DIR) --local-agent

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build
