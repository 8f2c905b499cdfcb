# deeprnn — builds without CMake. Targets:
#   make            library, deeprnn-run and samples into build/
#   make test       build and run the test suite and the C API test (installs missing packages)
#   make test-c     build and run the C API test alone (test/test_capi.c, compiled as C11)
#   make shared     build/libdeeprnn.so, for FFI (samples/python/)
#   make demo       the README's main job: build the speech sample, transcribe its bundled recording,
#                   check the words, print the real-time factor (same as make speech-demo)
#   make quickstart build and run the quickstart sample on bundled data, print its latency
#   make speech-check build the speech sample, transcribe the recording from a file and from stdin, check
#                     threads 1 and 2 agree bit for bit and a malformed WAV is refused
#   make chat-demo  build the chatbot sample, check it against PyTorch, answer its demo requests
#   make samples    build the samples
#   make bench      build and run the benchmark suite (bench/bench.mk)
#   make install    PREFIX=/usr/local DESTDIR=  headers, static library, pkg-config file
#   make amalgamate regenerate deeprnn.cpp from src/
# Options: NATIVE=1 (-march=native), WERROR=1 (-Werror), CUDA=1 (also build the CUDA
#          backend and its self-test with nvcc: make cuda), SANITIZE=address,undefined
CXX ?= g++
BUILD ?= build
PREFIX ?= /usr/local
OPT ?= -O3
# Flags shared by C++ and C (the C API test).
FLAGS = $(OPT) -Wall -Wextra -I.
ifeq ($(NATIVE),1)
FLAGS += -march=native
endif
ifeq ($(WERROR),1)
FLAGS += -Werror
endif
ifneq ($(SANITIZE),)
# -g1: line tables, all a sanitizer's stack trace needs. Full -g's variable tracking
# doubled the ASan compile of deeprnn.cpp (Zen 5 VM: 7m08 against 4m03).
FLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -g1
LDFLAGS += -fsanitize=$(SANITIZE)
endif
CXXFLAGS_ALL = -std=c++17 $(FLAGS) $(CXXFLAGS)
CFLAGS_ALL = -std=c11 -pedantic $(FLAGS) $(CFLAGS)
LDLIBS = -lopenblas -lboost_thread -lpthread
TEST_LIBS = -lboost_unit_test_framework
# CUDA=1: deeprnn.cpp is compiled with -DDEEPRNN_CUDA (it then references the
# backend, so forgetting the object is a link error), libdeeprnn.a and
# libdeeprnn.so contain deeprnn_cuda.o, and every link adds cuBLAS and cudart.
ifeq ($(CUDA),1)
FLAGS += -DDEEPRNN_CUDA
LDLIBS += $(CUDA_LINK)
endif

LIB = $(BUILD)/libdeeprnn.a
TESTS = $(BUILD)/deeprnn_tests
CAPI_TEST = $(BUILD)/test_capi
SHARED = $(BUILD)/libdeeprnn.so
RUNNER = $(BUILD)/deeprnn-run
PLANNER = $(BUILD)/deeprnn-plan
QUICKSTART = $(BUILD)/quickstart
TEST_SRCS = $(wildcard test/*.cpp)

.PHONY: all test test-c shared demo quickstart samples deps install amalgamate check-amalgamation clean cuda
all: $(LIB) $(RUNNER) $(PLANNER) samples
ifeq ($(CUDA),1)
all: cuda
endif

deps:
	@tools/install-deps

$(BUILD)/deeprnn.o: deeprnn.cpp deeprnn.hpp deeprnn_c.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS_ALL) -c deeprnn.cpp -o $@

$(LIB): $(BUILD)/deeprnn.o
	ar rcs $@ $^

$(RUNNER): tools/deeprnn_run.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

# Prints the schedule candidates and the plan for a configuration (docs/SCHEDULES.md).
$(PLANNER): tools/deeprnn_plan.cpp src/schedule.hpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

$(QUICKSTART): samples/quickstart/quickstart.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

samples: $(QUICKSTART)

# Chatbot sample (samples/chatbot/): chat-demo checks its logits against PyTorch's and answers demo.txt.
CHAT = $(BUILD)/deeprnn-chat
.PHONY: chat-demo

$(CHAT): samples/chatbot/chat.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

samples: $(CHAT)

chat-demo: deps
	@$(MAKE) --no-print-directory $(CHAT)
	$(CHAT) --check
	$(CHAT) --batch < samples/chatbot/demo.txt

# Speech sample (samples/speech/): also needs KissFFT (tools/install-deps speech).
SPEECH = $(BUILD)/deeprnn-speech
.PHONY: speech speech-demo speech-check
KISSFFT = $$(pkg-config --cflags --libs kissfft-float)

$(SPEECH): samples/speech/speech.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(KISSFFT) $(LDLIBS)

speech: $(SPEECH)

speech-demo:
	@tools/install-deps speech
	@$(MAKE) --no-print-directory $(SPEECH)
	$(SPEECH) --expect samples/speech/demo.txt samples/speech/demo.wav

# What the words alone cannot show: stdin streaming, thread-count independence, a refused WAV.
speech-check:
	@tools/install-deps speech
	@$(MAKE) --no-print-directory $(SPEECH)
	$(SPEECH) samples/speech/demo.wav | tee $(BUILD)/speech-file.txt
	$(SPEECH) - < samples/speech/demo.wav > $(BUILD)/speech-stdin.txt
	test "$$(grep '^words:' $(BUILD)/speech-file.txt)" = "$$(grep '^words:' $(BUILD)/speech-stdin.txt)"
	$(SPEECH) --threads 1 --outputs $(BUILD)/speech-1.npy samples/speech/demo.wav > /dev/null
	$(SPEECH) --threads 2 --outputs $(BUILD)/speech-2.npy samples/speech/demo.wav > /dev/null
	cmp $(BUILD)/speech-1.npy $(BUILD)/speech-2.npy
	head -c 100 samples/speech/demo.wav > $(BUILD)/speech-cut.wav
	! $(SPEECH) $(BUILD)/speech-cut.wav 2> $(BUILD)/speech-cut.txt
	cat $(BUILD)/speech-cut.txt

# The test suite, one object per source so that make -j compiles them side by
# side (a single g++ over every file kept one core busy for ~3 minutes per build
# in CI); -MMD -MP track the headers each includes (deeprnn.hpp, src/*.hpp).
TEST_DEFS = -DDEEPRNN_RUN_NO_MAIN -DDEEPRNN_TEST_DATA='"$(CURDIR)/test/data"'
TEST_OBJS = $(patsubst test/%.cpp,$(BUILD)/test/%.o,$(TEST_SRCS)) $(BUILD)/test/deeprnn_run.o

TEST_COMPILE = $(CXX) $(CXXFLAGS_ALL) $(TEST_DEFS) -MMD -MP -c $< -o $@

$(BUILD)/test/%.o: test/%.cpp | $(BUILD)/test
	$(TEST_COMPILE)

$(BUILD)/test/deeprnn_run.o: tools/deeprnn_run.cpp | $(BUILD)/test  # the suite links the tool's functions
	$(TEST_COMPILE)

$(BUILD)/test:
	mkdir -p $@

$(TESTS): $(LIB) $(TEST_OBJS)  # the library first: deeprnn.cpp is the longest single compile
	$(CXX) $(TEST_OBJS) $(LIB) -o $@ $(LDFLAGS) $(LDLIBS) $(TEST_LIBS)

-include $(TEST_OBJS:.o=.d)

# The C API test is C: compiled by $(CC), linked by $(CXX) for the C++ runtime.
$(CAPI_TEST): test/test_capi.c deeprnn_c.h $(LIB)
	$(CC) $(CFLAGS_ALL) -c test/test_capi.c -o $(BUILD)/test_capi.o
	$(CXX) $(BUILD)/test_capi.o $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

# Without -j (the README's command) the suite's files still compile one per core.
JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 1))

test: deps
	@$(MAKE) --no-print-directory $(JOBS) $(TESTS) $(CAPI_TEST)
	$(TESTS) --report_level=short
	$(CAPI_TEST) test/data

test-c: deps
	@$(MAKE) --no-print-directory $(CAPI_TEST)
	$(CAPI_TEST) test/data

$(SHARED): deeprnn.cpp deeprnn.hpp deeprnn_c.h $(if $(filter 1,$(CUDA)),$(CUDA_OBJ))
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS_ALL) -shared -fPIC deeprnn.cpp $(if $(filter 1,$(CUDA)),$(CUDA_OBJ)) -o $@ $(LDFLAGS) $(LDLIBS)

shared: $(SHARED)

demo: speech-demo

quickstart: deps
	@$(MAKE) --no-print-directory $(QUICKSTART)
	$(QUICKSTART) samples/quickstart/model samples/quickstart/input.npy

amalgamate:
	tools/amalgamate

check-amalgamation:
	tools/amalgamate --check

install: $(LIB)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 deeprnn.hpp deeprnn_c.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|lib|' -e 's|@INCLUDEDIR@|include|' -e "s|@VERSION@|$$(sed -n 's/^#define DEEPRNN_VERSION_STRING "\(.*\)"/\1/p' deeprnn.hpp)|" \
	    tools/deeprnn.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/deeprnn.pc

# CUDA backend (docs/CUDA.md): nvcc for sm_80 and sm_90, warnings as errors.
# ptxas's report (registers, shared memory, spills per kernel) is printed and
# kept in $(BUILD)/deeprnn_cuda.ptxas.log; a kernel that spills fails the
# build. Also builds the GPU self-test (run it on a machine with a GPU).
# make cuda-test: the no-device behaviour test (tools/deeprnn_cuda_nodevice_test.cpp),
# linked with the object beside libdeeprnn.a; CI runs it with and without CUDA=1.
NVCC ?= /usr/local/cuda/bin/nvcc
CUDA_ARCHS ?= 80 90
CUDA_LIBDIR ?= $(dir $(NVCC))../lib64
NVCCFLAGS = -std=c++17 -O3 -I. -Werror all-warnings -Xcompiler -fPIC,-Wall,-Wextra,-Werror \
            $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
            -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
CUDA_LIBS = -L$(CUDA_LIBDIR) -Xlinker -rpath,$(CUDA_LIBDIR) -lcublas
CUDA_LINK = -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcudart
CUDA_OBJ = $(BUILD)/deeprnn_cuda.o
CUDA_SELFTEST = $(BUILD)/deeprnn-cuda-selftest
CUDA_NODEVICE = $(BUILD)/deeprnn-cuda-nodevice-test
.PHONY: cuda-test

cuda: $(CUDA_OBJ) $(CUDA_SELFTEST)

ifeq ($(CUDA),1)
$(LIB): $(CUDA_OBJ)
endif

$(CUDA_OBJ): deeprnn_cuda.cu src/gpu_plan.hpp deeprnn.hpp
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -c deeprnn_cuda.cu -o $@ 2> $(BUILD)/deeprnn_cuda.ptxas.log; \
	    rc=$$?; cat $(BUILD)/deeprnn_cuda.ptxas.log; [ $$rc -eq 0 ] || { rm -f $@; exit $$rc; }
	@if grep -Eq '[1-9][0-9]* bytes (stack frame|spill stores|spill loads)' $(BUILD)/deeprnn_cuda.ptxas.log; then \
	    rm -f $@; echo "deeprnn: a CUDA kernel uses local memory (spills); see the report above" >&2; exit 1; fi
	@echo "deeprnn: ptxas report in $(BUILD)/deeprnn_cuda.ptxas.log; no kernel spills"

$(CUDA_SELFTEST): tools/deeprnn_cuda_selftest.cu test/reference.hpp src/gpu_plan.hpp $(CUDA_OBJ) $(LIB)
	$(NVCC) $(NVCCFLAGS) tools/deeprnn_cuda_selftest.cu $(CUDA_OBJ) $(LIB) -o $@ $(CUDA_LIBS) $(LDLIBS)

$(CUDA_NODEVICE): tools/deeprnn_cuda_nodevice_test.cpp test/reference.hpp src/gpu_plan.hpp $(CUDA_OBJ) $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(if $(filter 1,$(CUDA)),,$(CUDA_OBJ)) $(LIB) -o $@ $(LDFLAGS) $(LDLIBS) \
	    $(if $(filter 1,$(CUDA)),,$(CUDA_LINK))

cuda-test: $(CUDA_NODEVICE)
	$(CUDA_NODEVICE)

clean:
	rm -rf $(BUILD)

-include bench/bench.mk

# ---- reliability (issue #10; docs/RELIABILITY.md) -----------------------------------
#   make fuzz      libFuzzer targets (clang, ASan+UBSan) into build-fuzz/; FUZZ_SECONDS=30 each
#   make tsan      the concurrency tests under ThreadSanitizer (OpenBLAS single-threaded)
#   make asan      the whole suite (make test) under GCC's ASan + UBSan, in $(BUILD)-asan/
#   make clang-asan the kernel-heavy suites under clang's ASan + UBSan
#   make valgrind  memcheck over a small subset of the suite
FUZZ_TARGETS = npy safetensors npz torch onnx plan_cache config
FUZZ_BUILD = build-fuzz
FUZZ_FLAGS = -std=c++17 -O1 -g1 -I. -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_SECONDS ?= 30
.PHONY: fuzz fuzz-build asan tsan clang-asan valgrind

$(FUZZ_BUILD)/targets.o: test/fuzz/targets.cpp deeprnn.cpp deeprnn.hpp
	@mkdir -p $(FUZZ_BUILD)
	clang++ $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: test/fuzz/fuzz_%.cpp $(FUZZ_BUILD)/targets.o
	clang++ $(FUZZ_FLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

fuzz-build: $(addprefix $(FUZZ_BUILD)/fuzz_,$(FUZZ_TARGETS))

fuzz: fuzz-build
	test/fuzz/run $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Each sanitizer target compiles only the test files holding the suites it runs
# (with main and the fixtures): the rest took half of the test files' compile time.
# A suite moved to another file fails the run ("no test cases matching filter").
# test_steady_state.cpp holds allocation_count, which random_models uses.
TSAN_TEST_SRCS = $(addprefix test/,main.cpp test_fixtures.cpp test_concurrency.cpp test_random_models.cpp test_schedule.cpp \
                   test_steady_state.cpp)
CLANG_ASAN_TEST_SRCS = $(addprefix test/,main.cpp test_fixtures.cpp test_cells.cpp test_errors.cpp test_forward.cpp \
                         test_precision.cpp test_reliability.cpp test_schedule.cpp)
CLANG_ASAN_SUITES = reliability:precision:cells:forward_vs_float64_reference:partitioned_across_workers:stream:schedule
SANITIZER_RUN = OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

asan:
	$(SANITIZER_RUN) $(MAKE) test BUILD=$(BUILD)-asan OPT=-O1 SANITIZE=address,undefined

tsan:
	OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 \
	    $(MAKE) $(BUILD)-tsan/deeprnn_tests BUILD=$(BUILD)-tsan OPT=-O1 SANITIZE=thread TEST_SRCS="$(TSAN_TEST_SRCS)"
	OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 DEEPRNN_RANDOM_MODELS=100 $(BUILD)-tsan/deeprnn_tests --run_test=concurrency:random_models:schedule/pipelined_layers_match_one_worker_bit_for_bit:schedule/pipelined_stages_fold_their_projection_bit_for_bit:schedule/a_stage_runs_its_layers_step_by_step_bit_for_bit:schedule/critical_path_first_matches_one_worker_bit_for_bit:schedule/short_runs_on_the_caller_match_the_pool_bit_for_bit:schedule/long_runs_cut_into_segments_match_one_pass_bit_for_bit:schedule/back_to_back_short_runs_match_one_thread_bit_for_bit:schedule/a_pool_woken_without_work_wakes_and_runs_as_before:schedule/a_pool_woken_with_a_warm_job_runs_it_once_per_worker:schedule/pool_workers_a_run_does_not_use_sleep_through_it:schedule/a_run_handed_over_to_waking_workers_matches_the_pool_bit_for_bit:schedule/a_run_its_caller_ends_alone_does_not_wait_for_sleeping_workers:schedule/idle_workers_nap_only_for_the_window_they_are_given:schedule/a_caller_on_the_workers_core_moves_off_or_moves_the_worker:schedule/a_pool_built_on_a_pinned_thread_puts_its_workers_on_other_cores:schedule/a_second_pool_takes_the_cores_the_first_left_free:schedule/the_step_exchange_measurement_stops_at_its_cap:schedule/a_profiled_run_says_where_each_worker_spent_it

# Clang ASan + UBSan over the kernel-heavy suites: clang places SIMD stack arrays
# differently from GCC (whose build, make test SANITIZE=..., runs the whole suite).
clang-asan:
	$(MAKE) $(BUILD)-clang-asan/deeprnn_tests BUILD=$(BUILD)-clang-asan CXX=clang++ CC=clang OPT=-O1 \
	    SANITIZE=address,undefined TEST_SRCS="$(CLANG_ASAN_TEST_SRCS)"
	$(SANITIZER_RUN) $(BUILD)-clang-asan/deeprnn_tests --run_test=$(CLANG_ASAN_SUITES)

valgrind: $(TESTS)
	OPENBLAS_NUM_THREADS=1 valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
	    $(TESTS) --run_test=errors

# Long runs (tools/soak.cpp): memory growth, latency drift, an idle pool's CPU.
SOAK = $(BUILD)/soak
$(SOAK): tools/soak.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDLIBS)
soak: $(SOAK)
	$(SOAK) stream 1000000
	$(SOAK) requests 100000
	$(SOAK) idle 10
.PHONY: soak
# ---- end reliability -----------------------------------------------------------------
