# The two newcomer commands (README): `make run` and `make test`.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
TESSERA := $(BUILD_DIR)/src/cli/tessera
DATA_DIR ?= data

.PHONY: deps build test run format clean

deps:
	scripts/install-deps.sh

build: deps
	cmake --preset $(PRESET) >/dev/null
	cmake --build --preset $(PRESET)

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
