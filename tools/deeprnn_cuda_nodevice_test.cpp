// deeprnn_cuda_nodevice_test — what a program linked with the CUDA backend
// does on a machine without a usable GPU (CI, laptops). Plain C++: built by
// g++ and linked with deeprnn_cuda.o (nvcc), cuBLAS and the CUDA runtime;
// `make cuda-test` builds and runs it twice: linked with the object beside an
// unchanged libdeeprnn.a (the object registers itself), and as
// `make CUDA=1` builds it (deeprnn.cpp compiled with -DDEEPRNN_CUDA pulls the
// object out of libdeeprnn.a).
//
// Checks: the backend is registered and build_info() says so; backend = cuda
// is a deeprnn::Error naming Config.backend and CUDA's own message; an
// unsupported configuration names its field first; backend = auto runs on the
// CPU, Model::plan() says why CUDA was not used, and its outputs are
// bit-identical to backend = cpu (same engine, same plan: tolerance 0).
// Exit status: 0 passed, 1 failed, 77 a usable device is present (this test
// is for machines without one; run deeprnn-cuda-selftest there).
#include "deeprnn.hpp"
#include "src/gpu_plan.hpp"
#include "test/reference.hpp"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const std::string& what, const std::string& detail = "") {
    std::printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    failures += !ok;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The message of the Error that building a Model with cfg throws ("" = none).
std::string model_error(const deeprnn::Config& cfg, const deeprnn::Weights& w) {
    try {
        deeprnn::Model m(cfg, w);
    } catch (const deeprnn::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

int main() {
    namespace gpu = deeprnn::detail::gpu;
    const gpu::CudaBackend* cuda = gpu::cuda_backend();
    check(cuda != nullptr, "the CUDA backend is registered by linking deeprnn_cuda.o");
    if (!cuda) return 1;
    std::string device;
    if (cuda->available(&device)) {
        std::printf("a usable CUDA device is present (%s): run deeprnn-cuda-selftest instead\n", device.c_str());
        return 77;
    }
    std::printf("no usable device, as expected here: %s\n", device.c_str());
    const std::string info = deeprnn::build_info();
    check(has(info, "cuda: built with CUDA") && has(info, device.c_str()), "build_info() names the build and why no device",
          info.substr(info.find("cuda:")));

    const unsigned seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    std::mt19937 rng(seed);
    deeprnn::Config cfg;
    cfg.cell = deeprnn::Cell::gru;
    cfg.input_size = 7;
    cfg.hidden_size = 19;
    cfg.num_layers = 2;
    cfg.direction = deeprnn::Direction::bidirectional;
    cfg.max_batch = 3;
    cfg.threads = 1;
    const deeprnn::Weights w = ref::torch_weights(ref::random_net(cfg, rng, 0.3));

    deeprnn::Config c = cfg;
    c.backend = deeprnn::Backend::cuda;
    std::string e = model_error(c, w);
    check(has(e, "Config.backend = cuda") && has(e, "no usable CUDA device") && has(e, device.c_str()),
          "backend = cuda without a device is an Error naming the field and CUDA's message", e);

    deeprnn::Config lstm = cfg;
    lstm.cell = deeprnn::Cell::lstm;
    lstm.proj_size = 5;
    lstm.backend = deeprnn::Backend::cuda;
    std::mt19937 rng2(seed + 1);
    e = model_error(lstm, ref::torch_weights(ref::random_net(lstm, rng2, 0.3)));
    check(has(e, "Config.proj_size = 5") && has(e, "CUDA backend"), "backend = cuda with LSTM projection names proj_size", e);

    c.backend = deeprnn::Backend::auto_;
    deeprnn::Config cpu_cfg = cfg;
    cpu_cfg.backend = deeprnn::Backend::cpu;
    try {
        const deeprnn::Model auto_model(c, w), cpu_model(cpu_cfg, w);
        const std::string plan = auto_model.plan();
        check(has(plan, "backend cpu") && has(plan, "cuda not used: no usable CUDA device"),
              "backend = auto falls back to the CPU and plan() says why", plan.substr(plan.find("cuda not used")));
        check(!has(cpu_model.plan(), "cuda not used"), "backend = cpu: plan() does not mention CUDA");
        const int T = 6, B = 3;
        std::vector<float> x(static_cast<size_t>(T) * B * cfg.input_size);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : x) v = u(rng);
        const std::vector<float> ya = ref::run_model(auto_model, x, T, B), yc = ref::run_model(cpu_model, x, T, B);
        check(ya == yc, "backend = auto output is bit-identical to backend = cpu (tolerance 0: same engine)");
    } catch (const deeprnn::Error& err) {
        check(false, "backend = auto builds and runs", err.what());
    }
    std::printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
