// short_runs.cpp — is a run after an idle pause faster on the pool or on the caller alone?
//
// Times one model three ways, interleaved run by run: the plan's own choice
// (Config::serial_rows = -1), always the pool (0) and always the caller (a
// limit no run reaches), each run after --idle-ms of sleep (or --idle-us), so
// the pool's workers have gone to sleep and a run on the pool pays their
// wake-up. Prints the plan (with its short-run limits) and p10 / p50 / p90 /
// p99 / max / mean of each way. With --busy K, K threads spin (another
// program's work on the same cores) while it times. With --way, only that
// way: each model has its own pool, so with three interleaved a pool's
// workers idle three pauses between its runs; one way per process (the
// processes interleaved) keeps its workers' idle time the pause.
//   build/bench/short_runs [--cell gru|lstm] [--input E] [--hidden H] [--layers L] [--bidirectional] [--batch B] [--steps T]
//                          [--threads N] [--runs N] [--idle-ms MS | --idle-us US] [--busy K]
//                          [--way plan|pool|caller] [--idle-nap-ms MS] [--fold -1|0|1] [--burst N]
//                          [--prefetch-us US] [--pool-threads N]
// --idle-nap-ms sets Config::idle_nap_ms (default 10; 0 = workers sleep at
// once); the process's CPU seconds are printed, to weigh the naps' CPU.
// --fold sets Config::fold_projection (default -1, the machine model's
// choice), so two processes, one per setting, compare the fold at batch 1;
// with --idle-us 0 the runs go back to back.
// --burst N: after each pause, N runs back to back (default 1); also prints
// the p50 of each of a burst's first runs and of the burst's mean. A burst
// after 10 ms idle is how a server sees a request after a quiet spell: the
// first run refills the weights from DRAM and wakes the workers, the next
// runs find both warm (docs/ENGINE.md, "A burst does not wait for the pool").
// --prefetch-us US: after each pause, Model::prefetch(batch), then US
// microseconds of the caller's own work (a spin) before the burst: the lead
// time a server has between a request's arrival and its run (parsing,
// features). Default: no prefetch. docs/ENGINE.md, "Model::prefetch".
// --pool-threads N: the models share one WorkerPool of N workers (Config::pool)
// and use --threads of them: a shared pool larger than a model's plan
// (docs/ENGINE.md, "Workers a run does not use").
// docs/ENGINE.md, "Short runs at larger batches", quotes it (GRU 64-64, batch 16, 50 steps),
// and "The pool" the busy neighbours (LSTM 256-256, 100 steps, --idle-us 100 --busy 1 and 2).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "../deeprnn.hpp"

namespace {

deeprnn::Tensor random_tensor(std::vector<int64_t> shape, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    deeprnn::Tensor t;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.shape = std::move(shape);
    t.data.resize(static_cast<size_t>(n));
    for (float& v : t.data) v = u(rng);
    return t;
}

double percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * (v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) try {
    std::string cell = "gru";
    int input = 64, hidden = 64, layers = 1, batch = 16, steps = 50, threads = 2, runs = 30, idle_us = 10000, busy = 0;
    std::string way;
    double idle_nap_ms = 10.0;
    int fold = -1, burst = 1, prefetch_us = -1, pool_threads = 0;
    bool bidirectional = false;
    for (int i = 1; i < argc; ++i) {
        auto value = [&] {
            if (i + 1 >= argc) throw deeprnn::Error(std::string(argv[i]) + ": needs a value");
            return std::string(argv[++i]);
        };
        const std::string a = argv[i];
        if (a == "--cell") cell = value();
        else if (a == "--input") input = std::stoi(value());
        else if (a == "--hidden") hidden = std::stoi(value());
        else if (a == "--layers") layers = std::stoi(value());
        else if (a == "--bidirectional") bidirectional = true;
        else if (a == "--batch") batch = std::stoi(value());
        else if (a == "--steps") steps = std::stoi(value());
        else if (a == "--threads") threads = std::stoi(value());
        else if (a == "--runs") runs = std::stoi(value());
        else if (a == "--idle-ms") idle_us = 1000 * std::stoi(value());
        else if (a == "--idle-us") idle_us = std::stoi(value());
        else if (a == "--busy") busy = std::stoi(value());
        else if (a == "--way") way = value();
        else if (a == "--idle-nap-ms") idle_nap_ms = std::stod(value());
        else if (a == "--fold") fold = std::stoi(value());
        else if (a == "--burst") burst = std::stoi(value());
        else if (a == "--prefetch-us") prefetch_us = std::stoi(value());
        else if (a == "--pool-threads") pool_threads = std::stoi(value());
        else throw deeprnn::Error("unknown option " + a + " (see the comment at the top of bench/short_runs.cpp)");
    }
    if (cell != "gru" && cell != "lstm") throw deeprnn::Error("--cell " + cell + ": must be gru or lstm");
    if (layers < 1) throw deeprnn::Error("--layers must be >= 1");
    if (runs < 1 || burst < 1 || idle_us < 0 || busy < 0 || prefetch_us < -1)
        throw deeprnn::Error("--runs and --burst must be >= 1, --idle-ms, --idle-us, --busy and --prefetch-us >= 0");
    const deeprnn::Cell kind = cell == "gru" ? deeprnn::Cell::gru : deeprnn::Cell::lstm;
    const int64_t gh = int64_t(kind == deeprnn::Cell::gru ? 3 : 4) * hidden;
    std::mt19937 rng(1);
    deeprnn::Weights w;
    const int directions = bidirectional ? 2 : 1;
    for (int l = 0; l < layers; ++l)
        for (int d = 0; d < directions; ++d) {  // PyTorch's names: a reverse direction's end in _reverse
            const std::string k = std::to_string(l) + (d ? "_reverse" : "");
            w["weight_ih_l" + k] = random_tensor({gh, l == 0 ? input : directions * hidden}, rng);
            w["weight_hh_l" + k] = random_tensor({gh, hidden}, rng);
            w["bias_ih_l" + k] = random_tensor({gh}, rng);
            w["bias_hh_l" + k] = random_tensor({gh}, rng);
        }

    const char* names[3] = {"plan's choice", "always pool", "always caller"};
    const char* way_names[3] = {"plan", "pool", "caller"};
    const long limits[3] = {-1, 0, 1L << 40};
    std::vector<int> ways;
    for (int k = 0; k < 3; ++k)
        if (way.empty() || way == way_names[k]) ways.push_back(k);
    if (ways.empty()) throw deeprnn::Error("--way must be plan, pool or caller, not " + way);
    deeprnn::WorkerPool pool;
    if (pool_threads > 0) pool = deeprnn::WorkerPool(pool_threads, true, idle_nap_ms);
    std::vector<deeprnn::Model> models;
    std::vector<deeprnn::Session> sessions;
    for (int k : ways) {
        const long limit = limits[k];
        deeprnn::Config c = deeprnn::config_from_weights(kind, deeprnn::Convention::torch, w);
        c.max_batch = batch;
        c.threads = threads;
        c.serial_rows = limit;
        c.idle_nap_ms = idle_nap_ms;
        c.fold_projection = fold;  // Model checks it (-1, 0 or 1)
        c.pool = pool;
        models.emplace_back(c, w);
    }
    for (const deeprnn::Model& m : models) sessions.emplace_back(m);
    std::printf("%s%s %d-%d x %d layers, batch %d, %d steps, %d threads, %d us idle before each burst of %d run(s), %d busy threads, workers nap %g ms",
                bidirectional ? "bidirectional " : "", cell.c_str(), input, hidden, layers, batch, steps, threads, idle_us, burst, busy, idle_nap_ms);
    if (prefetch_us >= 0) std::printf(", prefetch %d us ahead", prefetch_us);
    if (pool) std::printf(", a shared pool of %d", pool.threads());
    std::printf("\nplan: %s\n", models[0].plan().c_str());

    std::vector<float> x(static_cast<size_t>(steps) * batch * input, 0.1f), y(static_cast<size_t>(steps) * batch * directions * hidden);
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = steps;
    in.batch = batch;
    deeprnn::RunOutput out;
    out.y = y.data();
    for (deeprnn::Session& s : sessions) s.run(in, out);  // working memory allocated once, outside the timing
    std::atomic<bool> stop{false};
    std::vector<std::thread> spinners;
    for (int k = 0; k < busy; ++k)
        spinners.emplace_back([&stop] {
            for (volatile double v = 1; !stop.load(std::memory_order_relaxed);) v = v * 1.0000001;
        });
    constexpr int kFirstRuns = 4;  // a burst's runs reported by position
    std::vector<double> us[3], burst_mean_us[3], first_us[3][kFirstRuns];
    for (int r = 0; r < runs; ++r)
        for (size_t k = 0; k < ways.size(); ++k) {
            std::this_thread::sleep_for(std::chrono::microseconds(idle_us));
            if (prefetch_us >= 0) {
                models[k].prefetch(batch);
                const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(prefetch_us);
                while (std::chrono::steady_clock::now() < until) {
                }
            }
            double sum = 0;
            for (int b = 0; b < burst; ++b) {
                const auto t0 = std::chrono::steady_clock::now();
                sessions[k].run(in, out);
                const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
                us[k].push_back(t);
                if (b < kFirstRuns) first_us[k][b].push_back(t);
                sum += t;
            }
            burst_mean_us[k].push_back(sum / burst);
        }
    stop = true;
    for (std::thread& t : spinners) t.join();
    for (size_t k = 0; k < ways.size(); ++k) {
        double sum = 0;
        for (double v : us[k]) sum += v;
        std::printf("%-14s p10 %8.1f us  p50 %8.1f us  p90 %8.1f us  p99 %8.1f us  max %8.1f us  mean %8.1f us\n", names[ways[k]],
                    percentile(us[k], 0.1), percentile(us[k], 0.5), percentile(us[k], 0.9), percentile(us[k], 0.99),
                    percentile(us[k], 1.0), sum / us[k].size());
        if (burst > 1) {
            std::printf("%-14s bursts of %d: mean p50 %.1f us; p50 of run", "", burst, percentile(burst_mean_us[k], 0.5));
            for (int b = 0; b < std::min(burst, kFirstRuns); ++b) std::printf(" %d: %.1f us", b + 1, percentile(first_us[k][b], 0.5));
            std::printf("\n");
        }
    }
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("process CPU %.3f s (user %.3f, system %.3f)\n",
                usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec),
                usage.ru_utime.tv_sec + 1e-6 * usage.ru_utime.tv_usec, usage.ru_stime.tv_sec + 1e-6 * usage.ru_stime.tv_usec);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "short_runs: %s\n", e.what());
    return 1;
}
