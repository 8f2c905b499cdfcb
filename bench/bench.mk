# bench/bench.mk — benchmark targets; the top-level Makefile includes this file.
# Uses $(CXX) and $(CXXFLAGS) from the includer; builds into $(BUILD)/bench/ (build/bench/).
#   make bench            build and run the default suite (results.md / results.csv)
#   make bench-build      build build/bench/deeprnn_bench and build/bench/roofline
#   make bench-roofline   print this machine's measured ceilings
#   make bench-docs       run the suite, redraw the plots, refresh docs/BENCHMARKS.md
#   make bench-plan       build and run build/bench/plan_search (schedule search, docs/BENCHMARKS.md "Plan search")
#   make bench-short-runs build and run build/bench/short_runs (a run after idle: pool or caller; docs/ENGINE.md)
#   make bench-cache      build build/bench/cache/cache_traffic and run bench/cache_traffic.sh under cachegrind
#                         (weight traffic per step, docs/BENCHMARKS.md; needs valgrind; CACHE_ARGS for the script)
# BENCH_ARGS passes options to deeprnn_bench, e.g. BENCH_ARGS="--filter gru --threads 1".

BENCH_DIR := $(or $(BUILD),build)/bench
BENCH_ARGS ?=

# oneDNN is optional: detected once, on first use, by linking a call to it.
BENCH_HAVE_DNNL = $(eval BENCH_HAVE_DNNL := $(shell printf '\043include <oneapi/dnnl/dnnl.h>\nint main(){return dnnl_version()==0;}\n' \
    | $(CXX) -x c++ - -ldnnl -o /dev/null 2>/dev/null && echo 1 || echo 0))$(BENCH_HAVE_DNNL)
BENCH_CXXFLAGS = -Wall -Wextra $(CXXFLAGS) -std=c++17 -O3 -march=native -pthread -DBENCH_HAVE_DNNL=$(BENCH_HAVE_DNNL) -MMD -MP
BENCH_LIBS = -lopenblas -lboost_thread -pthread $(if $(filter 1,$(BENCH_HAVE_DNNL)),-ldnnl -lgomp)

BENCH_MAIN_OBJS := $(addprefix $(BENCH_DIR)/,deeprnn_bench.o workloads.o impl_deeprnn.o impl_framework.o \
    impl_onednn.o roofline.o deeprnn.o)
BENCH_ROOF_OBJS := $(addprefix $(BENCH_DIR)/,roofline_main.o roofline.o deeprnn.o)

BENCH_PLAN_OBJS := $(addprefix $(BENCH_DIR)/,plan_search.o workloads.o deeprnn.o)
BENCH_SHORT_OBJS := $(addprefix $(BENCH_DIR)/,short_runs.o deeprnn.o)

.PHONY: bench bench-build bench-roofline bench-docs bench-plan bench-short-runs bench-cache

bench-build: $(BENCH_DIR)/deeprnn_bench $(BENCH_DIR)/roofline $(BENCH_DIR)/plan_search $(BENCH_DIR)/short_runs

bench-plan: $(BENCH_DIR)/plan_search
	$(BENCH_DIR)/plan_search $(BENCH_ARGS)

bench-short-runs: $(BENCH_DIR)/short_runs
	$(BENCH_DIR)/short_runs $(BENCH_ARGS)

bench: bench-build
	@test "$(BENCH_HAVE_DNNL)" = 1 || echo "bench: oneDNN not found, its rows are skipped"
	bench/run_suite.sh $(BENCH_DIR) $(BENCH_ARGS)

bench-roofline: bench-build
	$(BENCH_DIR)/roofline

bench-docs: bench-build
	bench/update_docs.sh $(BENCH_DIR) $(BENCH_ARGS)

$(BENCH_DIR)/deeprnn_bench: $(BENCH_MAIN_OBJS)
	$(CXX) $(BENCH_CXXFLAGS) $^ -o $@ $(BENCH_LIBS)

$(BENCH_DIR)/roofline: $(BENCH_ROOF_OBJS)
	$(CXX) $(BENCH_CXXFLAGS) $^ -o $@ -lopenblas -lboost_thread -pthread

$(BENCH_DIR)/plan_search: $(BENCH_PLAN_OBJS)
	$(CXX) $(BENCH_CXXFLAGS) $^ -o $@ $(BENCH_LIBS)

$(BENCH_DIR)/short_runs: $(BENCH_SHORT_OBJS)
	$(CXX) $(BENCH_CXXFLAGS) $^ -o $@ -lopenblas -lboost_thread -pthread

# These include src/schedule.hpp, which includes deeprnn.hpp from the top directory.
$(BENCH_DIR)/plan_search.o $(BENCH_DIR)/roofline.o: $(BENCH_DIR)/%.o: bench/%.cpp | $(BENCH_DIR)
	$(CXX) $(BENCH_CXXFLAGS) -I. -c $< -o $@

$(BENCH_DIR)/deeprnn.o: deeprnn.cpp | $(BENCH_DIR)
	$(CXX) $(BENCH_CXXFLAGS) -c $< -o $@

$(BENCH_DIR)/%.o: bench/%.cpp | $(BENCH_DIR)
	$(CXX) $(BENCH_CXXFLAGS) -c $< -o $@

$(BENCH_DIR):
	mkdir -p $@

# The cachegrind driver is built without -march=native: valgrind 3.19 decodes no
# AVX-512, and under it the CPU looks like an AVX2 one, so deeprnn's run-time
# dispatch takes its AVX2 kernels (as do OpenBLAS and oneDNN). Own object directory.
BENCH_CACHE_DIR := $(BENCH_DIR)/cache
BENCH_CACHE_CXXFLAGS = $(filter-out -march=native,$(BENCH_CXXFLAGS)) -g
BENCH_CACHE_OBJS := $(addprefix $(BENCH_CACHE_DIR)/,cache_traffic.o workloads.o impl_deeprnn.o impl_framework.o \
    impl_onednn.o deeprnn.o)
CACHE_ARGS ?=

bench-cache: $(BENCH_CACHE_DIR)/cache_traffic
	bench/cache_traffic.sh $(BENCH_CACHE_DIR) $(CACHE_ARGS)

$(BENCH_CACHE_DIR)/cache_traffic: $(BENCH_CACHE_OBJS)
	$(CXX) $(BENCH_CACHE_CXXFLAGS) $^ -o $@ $(BENCH_LIBS)

$(BENCH_CACHE_DIR)/deeprnn.o: deeprnn.cpp | $(BENCH_CACHE_DIR)
	$(CXX) $(BENCH_CACHE_CXXFLAGS) -c $< -o $@

$(BENCH_CACHE_DIR)/%.o: bench/%.cpp | $(BENCH_CACHE_DIR)
	$(CXX) $(BENCH_CACHE_CXXFLAGS) -c $< -o $@

$(BENCH_CACHE_DIR):
	mkdir -p $@

-include $(wildcard $(BENCH_DIR)/*.d) $(wildcard $(BENCH_CACHE_DIR)/*.d)
