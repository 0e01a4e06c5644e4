# Thin wrapper over CMake. `make` builds into build/ (CLI at build/mtc);
# `make test` and `make run` first install missing Debian packages.
BUILD      ?= build
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
ifeq ($(CI),true)
CMAKE_ARGS += -DMTC_WERROR=ON
endif

.PHONY: all build deps test run sanitize test-asan test-tsan fuzz bench clean format check-format check-standalone

all: build

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) > $(BUILD).cmake.log 2>&1 || { cat $(BUILD).cmake.log; exit 1; }
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@sh scripts/deps.sh

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# the demo: quiet until it starts (the build's output goes to $(BUILD).build.log,
# shown when the build fails); only the mtc binary is built, not the tests
run: deps
	@echo "== building mtc (log: $(BUILD).build.log)"
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) > $(BUILD).cmake.log 2>&1 || { cat $(BUILD).cmake.log; exit 1; }
	@cmake --build $(BUILD) -j $(JOBS) --target mtc > $(BUILD).build.log 2>&1 || { tail -n 40 $(BUILD).build.log; echo "make run: the build failed; the whole log is $(BUILD).build.log" >&2; exit 1; }
	@sh scripts/demo.sh $(BUILD)/mtc

# Sanitizer builds: ASan+UBSan over everything but the MPI tests and the
# tests whose work is a real client (label client: node-llama-cpp,
# transformers.js, the npm tokenizers; unsanitized programs, run by the
# Release pass), TSan over the thread-rank (shm) tests. Both at -O1 with
# asserts on (at -O0 the sanitizer pass alone outgrew CI's 25 minutes).
# (-O1 adds gcc range guesses about bounded, deliberately truncating error
# messages: -Wno-format-truncation there.)
SAN_FLAGS = -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1 -Wno-format-truncation" -DMTC_WERROR=ON
test-asan: deps
	@cmake -S . -B build-asan $(SAN_FLAGS) -DMTC_SANITIZE=address $(CMAKE_ARGS) > build-asan.cmake.log
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -LE 'mpi|slow|bench|client'

test-tsan: deps
	@cmake -S . -B build-tsan $(SAN_FLAGS) -DMTC_SANITIZE=thread -DMTC_WITH_MPI=OFF $(CMAKE_ARGS) > build-tsan.cmake.log
	@cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ctest --output-on-failure -j $(JOBS) -L tsan

sanitize: test-asan test-tsan

# libFuzzer targets of tests/fuzz (clang, ASan+UBSan), FUZZ_SECONDS each (60)
FUZZ_SECONDS ?= 60
FUZZ_SEED    ?= 1
FUZZ_JOBS ?= 1
fuzz:
	@sh scripts/deps.sh fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_SEED=$(FUZZ_SEED) sh scripts/fuzz.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz *.cmake.log *.build.log

format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

check-format: deps
	sh scripts/check_format.sh

# the unit and grid tests from a fresh clone with nothing beside it
check-standalone: deps
	sh scripts/check_standalone.sh
