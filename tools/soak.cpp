// soak — long-run checks of issue #10 (docs/RELIABILITY.md): memory growth,
// latency drift and the CPU an idle model burns.
//
//   soak stream N     N single-step pushes through one Stream (default 1,000,000)
//   soak requests N   N short runs (T = 10) through one Session (default 100,000)
//   soak idle S       a 2-thread model idle for S seconds (default 10): CPU time
//                     used meanwhile, and the first run after vs a warm run
//
// Prints RSS at start and end (after a warm-up) and the median latency of the
// first and last tenth of the calls. Exits 1 if RSS grew by more than 1 MiB or
// the idle model used more than 1% of one core; timings are reported, not judged.
#include "deeprnn.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double rss_mib() {
    std::ifstream f("/proc/self/statm");
    long pages = 0, resident = 0;
    f >> pages >> resident;
    return static_cast<double>(resident) * sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

deeprnn::Model make_model(int hidden, int threads) {
    deeprnn::Config c;
    c.cell = deeprnn::Cell::lstm;
    c.input_size = 40;
    c.hidden_size = hidden;
    c.num_layers = 2;
    c.threads = threads;
    c.max_batch = 1;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    auto tensor = [&](std::vector<int64_t> shape) {
        deeprnn::Tensor t;
        t.shape = shape;
        t.data.resize(static_cast<size_t>(t.numel()));
        for (float& v : t.data) v = u(rng);
        return t;
    };
    deeprnn::Weights w;
    for (int l = 0; l < 2; ++l) {
        const std::string k = std::to_string(l);
        w["weight_ih_l" + k] = tensor({4 * hidden, l == 0 ? 40 : hidden});
        w["weight_hh_l" + k] = tensor({4 * hidden, hidden});
        w["bias_ih_l" + k] = tensor({4 * hidden});
        w["bias_hh_l" + k] = tensor({4 * hidden});
    }
    return deeprnn::Model(c, w);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Runs `call` n times; reports RSS growth and the drift between the first and last tenth.
template <typename Call>
int soak(const char* what, long n, Call call) {
    for (int i = 0; i < 1000; ++i) call();  // warm-up: buffers reach their size
    std::vector<double> us(static_cast<size_t>(n), 1.0);  // written now, so its pages count before rss0
    const double rss0 = rss_mib();
    for (long i = 0; i < n; ++i) {
        const auto t0 = Clock::now();
        call();
        us[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    const double rss1 = rss_mib();
    const size_t tenth = us.size() / 10;
    const double first = median({us.begin(), us.begin() + tenth}), last = median({us.end() - tenth, us.end()});
    std::printf("%s: %ld calls; RSS %.2f MiB -> %.2f MiB (%+.3f); median latency first tenth %.2f us, last tenth %.2f us (x%.2f)\n",
                what, n, rss0, rss1, rss1 - rss0, first, last, last / first);
    return rss1 - rss0 > 1.0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string mode = argc > 1 ? argv[1] : "";
    const long n = argc > 2 ? std::atol(argv[2]) : 0;
    if (mode == "stream") {
        const deeprnn::Model m = make_model(64, 1);
        deeprnn::Stream s(m);
        std::vector<float> x(40, 0.25f), y(64);
        long t = 0;
        return soak("stream (LSTM 2x64, one step per push)", n > 0 ? n : 1000000, [&] {
            x[t % 40] = static_cast<float>(t % 7) * 0.1f;
            ++t;
            s.push(x.data(), 1, y.data());
        });
    }
    if (mode == "requests") {
        const deeprnn::Model m = make_model(128, 2);
        deeprnn::Session s(m);
        std::vector<float> x(10 * 40, 0.25f), y(10 * 128);
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = 10;
        in.batch = 1;
        deeprnn::RunOutput out;
        out.y = y.data();
        return soak("requests (LSTM 2x128, 2 threads, T = 10)", n > 0 ? n : 100000, [&] { s.run(in, out); });
    }
    if (mode == "idle") {
        const double seconds = n > 0 ? static_cast<double>(n) : 10.0;
        const deeprnn::Model m = make_model(256, 2);
        deeprnn::Session s(m);
        std::vector<float> x(100 * 40, 0.25f), y(100 * 256);
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = 100;
        in.batch = 1;
        deeprnn::RunOutput out;
        out.y = y.data();
        auto timed_run = [&] {
            const auto t0 = Clock::now();
            s.run(in, out);
            return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        };
        std::vector<double> warm;
        for (int i = 0; i < 51; ++i) warm.push_back(timed_run());
        const double cpu0 = cpu_seconds();
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        const double idle_cpu = cpu_seconds() - cpu0;
        const double after_idle = timed_run();
        std::printf("idle: model with a 2-worker pool idle for %.0f s used %.4f s of CPU (%.3f%% of one core); "
                    "first run after the idle period %.3f ms, warm runs median %.3f ms (LSTM 2x256, T = 100)\n",
                    seconds, idle_cpu, 100 * idle_cpu / seconds, after_idle, median(warm));
        return idle_cpu > 0.01 * seconds ? 1 : 0;
    }
    std::fprintf(stderr, "usage: soak stream [N] | requests [N] | idle [SECONDS]\n");
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "soak: %s\n", e.what());
    return 1;
}
