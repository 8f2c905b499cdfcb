# deeprnn — builds without CMake. Targets:
#   make            library, deeprnn-run and samples into build/
#   make test       build and run the test suite (installs missing packages)
#   make demo       build and run the quickstart sample on bundled data
#   make samples    build the samples
#   make bench      build and run the benchmark suite (bench/bench.mk)
#   make install    PREFIX=/usr/local DESTDIR=  headers, library, pkg-config file
#   make amalgamate regenerate deeprnn.cpp from src/
# Options: NATIVE=1 (-march=native), WERROR=1 (-Werror), CUDA=1, SANITIZE=address,undefined
CXX ?= g++
BUILD ?= build
PREFIX ?= /usr/local
OPT ?= -O3
CXXFLAGS_ALL = -std=c++17 $(OPT) -Wall -Wextra -I. $(CXXFLAGS)
ifeq ($(NATIVE),1)
CXXFLAGS_ALL += -march=native
endif
ifeq ($(WERROR),1)
CXXFLAGS_ALL += -Werror
endif
ifneq ($(SANITIZE),)
CXXFLAGS_ALL += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -g
LDFLAGS += -fsanitize=$(SANITIZE)
endif
LDLIBS = -lopenblas -lboost_thread -lpthread
TEST_LIBS = -lboost_unit_test_framework

LIB = $(BUILD)/libdeeprnn.a
TESTS = $(BUILD)/deeprnn_tests
RUNNER = $(BUILD)/deeprnn-run
QUICKSTART = $(BUILD)/quickstart
TEST_SRCS = $(wildcard test/*.cpp)

.PHONY: all test demo samples deps install amalgamate check-amalgamation clean cuda
all: $(LIB) $(RUNNER) samples

deps:
	@tools/install-deps

$(BUILD)/deeprnn.o: deeprnn.cpp deeprnn.hpp
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS_ALL) -c deeprnn.cpp -o $@

$(LIB): $(BUILD)/deeprnn.o
	ar rcs $@ $^

$(RUNNER): tools/deeprnn_run.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

$(QUICKSTART): samples/quickstart/quickstart.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS)

samples: $(QUICKSTART)

$(TESTS): $(TEST_SRCS) test/reference.hpp tools/deeprnn_run.cpp $(LIB)
	$(CXX) $(CXXFLAGS_ALL) -DDEEPRNN_RUN_NO_MAIN -DDEEPRNN_TEST_DATA='"$(CURDIR)/test/data"' \
	    $(TEST_SRCS) tools/deeprnn_run.cpp $(LIB) -o $@ $(LDFLAGS) $(LDLIBS) $(TEST_LIBS)

test: deps
	@$(MAKE) --no-print-directory $(TESTS)
	$(TESTS) --report_level=short

demo: deps
	@$(MAKE) --no-print-directory $(QUICKSTART)
	$(QUICKSTART) samples/quickstart/model samples/quickstart/input.npy

amalgamate:
	tools/amalgamate

check-amalgamation:
	tools/amalgamate --check

install: $(LIB)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 deeprnn.hpp $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e "s|@VERSION@|$$(sed -n 's/^#define DEEPRNN_VERSION_STRING "\(.*\)"/\1/p' deeprnn.hpp)|" \
	    tools/deeprnn.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/deeprnn.pc

cuda:
	@echo "deeprnn: the CUDA backend is not written yet (issue 11); deeprnn_cuda.cu is a stub"
	/usr/local/cuda/bin/nvcc -std=c++17 -c deeprnn_cuda.cu -o $(BUILD)/deeprnn_cuda.o

clean:
	rm -rf $(BUILD)

-include bench/bench.mk
