// plan_search.cpp — measures the schedule search of issue #6 (docs/SCHEDULES.md,
// docs/BENCHMARKS.md "Plan search"):
//   pruning  for 4 Table-1 configurations: the exhaustive search (every
//            executable candidate, all runs) and the default calibrated search
//            (Config::tuning = calibrate, budget 1 s), their runs and wall
//            time; then every candidate re-measured side by side (interleaved
//            rounds, medians) on the configuration's own batch and length, and
//            the calibrated winner against the best of them.
//   fixed    for every Table-1 configuration: each fixed plan (one
//            ExecutionChoice for all configurations) against the searched plan
//            and the analytic (heuristic) one, interleaved, medians.
//   warm     Model creation with a plan-cache hit (file, memory cleared, as a
//            new process sees it) against tuning = heuristic, and the plan
//            step alone; median of many interleaved repeats.
// Everything goes through the public API except two things from
// src/schedule.hpp: the candidate list and the plan cache, through which a
// fixed plan is imposed (a cached plan is what a calibrate-mode model uses).
// Usage: build/bench/plan_search [--part pruning|fixed|warm|all] [--threads N]
//        [--filter SUBSTR] [--rounds N] [--budget S]
#include "../deeprnn.hpp"
#include "../src/schedule.hpp"
#include "workloads.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace s = deeprnn::detail::sched;
using clk = std::chrono::steady_clock;

namespace {

double since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// (max - min) / min of the samples: how noisy one median is.
double spread(const std::vector<double>& v) {
    if (v.empty()) return 0;
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return (*hi - *lo) / *lo;
}

deeprnn::Tensor tensor(std::vector<int64_t> shape, const std::vector<float>& data) {
    deeprnn::Tensor t;
    t.shape = std::move(shape);
    t.data = data;
    return t;
}

deeprnn::Weights torch_weights(const bench::Problem& p) {
    const bench::Workload& w = p.work;
    const int64_t gh = int64_t(bench::gate_count(w.cell)) * w.hidden;
    deeprnn::Weights weights;
    for (int l = 0; l < w.layers; ++l) {
        const std::string k = std::to_string(l);
        const bench::LayerWeights& lw = p.layers[l];
        weights["weight_ih_l" + k] = tensor({gh, w.layer_input(l)}, lw.w_ih);
        weights["weight_hh_l" + k] = tensor({gh, w.hidden}, lw.w_hh);
        weights["bias_ih_l" + k] = tensor({gh}, lw.b_ih);
        weights["bias_hh_l" + k] = tensor({gh}, lw.b_hh);
    }
    return weights;
}

struct Log {
    std::string summary;  // "calibration: timed ..."
    std::vector<std::string> warnings;
};

void capture(deeprnn::LogLevel level, const char* msg, void* user) {
    Log& l = *static_cast<Log*>(user);
    const std::string m = msg;
    if (m.compare(0, 19, "plan: calibration: ") == 0) l.summary = m.substr(6);
    if (level == deeprnn::LogLevel::warning) l.warnings.push_back(m);
}

struct Setup {
    bench::Problem problem;
    deeprnn::Weights weights;
    deeprnn::Config cfg;
    std::string key;
    std::vector<s::ExecutionChoice> choices;  // the executable candidates, best predicted first
};

Setup setup(const bench::Workload& w, int threads) {
    Setup st;
    st.problem = bench::make_problem(w);
    st.weights = torch_weights(st.problem);
    const deeprnn::Cell cell = w.cell == bench::CellKind::lstm ? deeprnn::Cell::lstm : deeprnn::Cell::gru;
    st.cfg = deeprnn::config_from_weights(cell, deeprnn::Convention::torch, st.weights);
    st.cfg.gru_variant = deeprnn::GruVariant::linear_before_reset;
    st.cfg.max_batch = w.batch;
    st.cfg.threads = threads;
    // The engine's own Problem (nominal batch 1, length 100; the key has no SIMD width).
    const s::Problem p = s::problem_for(st.cfg, threads, 16);
    st.key = s::plan_key(p);
    for (const s::Candidate& c : s::rank_candidates(p))
        if (c.executable) st.choices.push_back(c.choice);
    return st;
}

// The choice a model runs, from Model::plan() ("schedule workers=2 side_by_side=0 ...").
s::ExecutionChoice choice_of(const deeprnn::Model& m) {
    const std::string plan = m.plan();
    s::ExecutionChoice c;
    int w = 0, side = 0, fused = 1, piped = 0, one = 0, help = 0;
    const size_t at = plan.find("schedule workers=");
    if (at == std::string::npos ||
        std::sscanf(plan.c_str() + at,
                    "schedule workers=%d side_by_side=%d input_fused=%d pipelined=%d rbm_one_barrier=%d helpers=%d", &w,
                    &side, &fused, &piped, &one, &help) != 6) {
        std::fprintf(stderr, "plan_search: cannot read the plan: %s\n", plan.c_str());
        std::exit(1);
    }
    c.workers = w;
    c.side_by_side = side;
    c.input_fused_across_time = fused;
    c.pipelined = piped;
    c.rbm_one_barrier = one;
    c.projection_helpers = help;
    return c;
}

// A model that runs `choice`: a calibrate-mode model takes a valid cached plan.
deeprnn::Model forced_model(const Setup& st, const s::ExecutionChoice& choice) {
    s::plan_cache_clear_memory();
    std::string msg;
    s::plan_cache_store("", st.key, s::this_machine(), s::PlanEntry{choice, 0, 0}, &msg);
    deeprnn::Config cfg = st.cfg;
    cfg.tuning = deeprnn::Tuning::calibrate;
    deeprnn::Model m(cfg, st.weights);
    s::plan_cache_clear_memory();
    if (!(choice_of(m) == choice)) {
        std::fprintf(stderr, "plan_search: could not impose %s\n", choice.str().c_str());
        std::exit(1);
    }
    return m;
}

struct Search {
    s::ExecutionChoice choice;
    double wall_s = 0;  // Model creation, packing included
    int ran = 0, executable = 0, runs = 0;
    double spent_s = 0, budget_s = 0;
};

// A cold search in this process: the in-memory plan cache is emptied first.
Search search(const Setup& st, deeprnn::Tuning tuning, double budget) {
    s::plan_cache_clear_memory();
    Log log;
    deeprnn::Config cfg = st.cfg;
    cfg.tuning = tuning;
    cfg.tuning_budget_seconds = budget;
    cfg.log = capture;
    cfg.log_user = &log;
    const auto t0 = clk::now();
    deeprnn::Model m(cfg, st.weights);
    Search r;
    r.wall_s = since(t0);
    r.choice = choice_of(m);
    if (tuning != deeprnn::Tuning::heuristic &&
        std::sscanf(log.summary.c_str(), "calibration: timed %d of %d executable candidates (%d runs, %lf s of %lf s budget)",
                    &r.ran, &r.executable, &r.runs, &r.spent_s, &r.budget_s) != 5) {
        std::fprintf(stderr, "plan_search: unexpected calibration log: %s\n", log.summary.c_str());
        std::exit(1);
    }
    s::plan_cache_clear_memory();
    return r;
}

// Every choice of st re-measured on the workload's own batch and length:
// interleaved rounds (each round runs every model once, in rotated order).
std::vector<std::vector<double>> measure_choices(const Setup& st, int rounds_wanted) {
    const bench::Workload& w = st.problem.work;
    std::vector<deeprnn::Model> models;
    for (const auto& c : st.choices) models.push_back(forced_model(st, c));
    std::vector<deeprnn::Session> sessions;
    for (const auto& m : models) sessions.emplace_back(m);
    std::vector<float> y(static_cast<size_t>(w.seq) * w.batch * models[0].output_size());
    auto run = [&](size_t i) {
        deeprnn::RunInput in;
        in.x = st.problem.x.data();
        in.seq_len = w.seq;
        in.batch = w.batch;
        deeprnn::RunOutput out;
        out.y = y.data();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the previous pool stops spinning
        const auto t0 = clk::now();
        sessions[i].run(in, out);
        return since(t0);
    };
    double warm = 0;
    for (size_t i = 0; i < models.size(); ++i) warm = std::max(warm, run(i));  // warm-up, and a size estimate
    int rounds = rounds_wanted;
    if (rounds <= 0) rounds = std::clamp(static_cast<int>(0.6 / (warm * models.size())), 7, 31);
    std::vector<std::vector<double>> t(models.size());
    for (int r = 0; r < rounds; ++r)
        for (size_t k = 0; k < models.size(); ++k) {
            const size_t i = (k + r) % models.size();
            t[i].push_back(run(i));
        }
    return t;
}

size_t index_of(const Setup& st, const s::ExecutionChoice& c) {
    for (size_t i = 0; i < st.choices.size(); ++i)
        if (st.choices[i] == c) return i;
    std::fprintf(stderr, "plan_search: %s is not a candidate\n", c.str().c_str());
    std::exit(1);
}

std::string short_choice(const s::ExecutionChoice& c) {
    return "w=" + std::to_string(c.workers) + (c.side_by_side ? " side" : c.pipelined ? " pipe" : "");
}

std::string us(double sec) {
    char b[32];
    if (sec >= 0.1) std::snprintf(b, sizeof b, "%.1f ms", sec * 1e3);
    else if (sec >= 1e-3) std::snprintf(b, sizeof b, "%.2f ms", sec * 1e3);
    else std::snprintf(b, sizeof b, "%.0f µs", sec * 1e6);
    return b;
}

bool matches(const bench::Workload& w, const std::string& filter) {
    return filter.empty() || w.id().find(filter) != std::string::npos;
}

std::vector<bench::Workload> table1() {
    std::vector<bench::Workload> out;
    for (const auto& w : bench::default_suite())
        if (w.name.compare(0, 3, "t1-") == 0) out.push_back(w);
    return out;
}

bench::Workload find(const std::string& id) {
    for (const auto& w : table1())
        if (w.id() == id) return w;
    std::fprintf(stderr, "plan_search: no workload %s\n", id.c_str());
    std::exit(1);
}

void part_pruning(int threads, double budget, int rounds, const std::string& filter) {
    const char* ids[] = {"lstm/t1-256-256-1-100", "lstm/t1-1024-1024-10-100", "gru/t1-1024-1024-1-100",
                         "gru/t1-256-256-20-100"};
    std::printf("\n## pruning: exhaustive vs calibrated search (threads %d, budget %.2f s)\n\n", threads, budget);
    std::printf("| config | candidates: executable / modeled | exhaustive search: pick, runs, wall | calibrated search: "
                "pick, runs, wall | workload-timed calibrate(): pick, runs | re-measured medians (interleaved) | "
                "calibrated / exhaustive pick | calibrated / best | workload-timed / best | spread |\n");
    std::printf("|---|---|---|---|---|---|---:|---:|---:|---:|\n");
    for (const char* id : ids) {
        const bench::Workload w = find(id);
        if (!matches(w, filter)) continue;
        const Setup st = setup(w, threads);
        const s::Problem problem = s::problem_for(st.cfg, threads, 16);
        const std::vector<s::Candidate> ranked = s::rank_candidates(problem);
        const Search ex = search(st, deeprnn::Tuning::exhaustive, budget);
        const Search cal = search(st, deeprnn::Tuning::calibrate, budget);
        // The same calibrate() with a timer that runs the configuration's own
        // batch and length (the engine's timer runs batch 1, 24 steps).
        s::CalibrationResult wt;
        {
            std::vector<deeprnn::Model> models;
            for (const auto& c : st.choices) models.push_back(forced_model(st, c));
            std::vector<float> y(static_cast<size_t>(w.seq) * w.batch * models[0].output_size());
            auto timer = [&](const s::Candidate& c) {
                deeprnn::Session session(models[index_of(st, c.choice)]);
                deeprnn::RunInput in;
                in.x = st.problem.x.data();
                in.seq_len = w.seq;
                in.batch = w.batch;
                deeprnn::RunOutput out;
                out.y = y.data();
                session.run(in, out);  // warm-up, as the engine's timer does
                const auto t0 = clk::now();
                session.run(in, out);
                return since(t0);
            };
            wt = s::calibrate(ranked, budget, timer);
        }
        const s::ExecutionChoice wt_choice = ranked[wt.best].choice;
        const auto t = measure_choices(st, rounds);
        size_t best = 0;
        std::vector<double> med;
        double worst_spread = 0;
        std::string per;
        for (size_t i = 0; i < t.size(); ++i) {
            med.push_back(median(t[i]));
            worst_spread = std::max(worst_spread, spread(t[i]));
            if (med[i] < med[best]) best = i;
            per += (per.empty() ? "" : ", ") + short_choice(st.choices[i]) + " " + us(med[i]);
        }
        const size_t ci = index_of(st, cal.choice), ei = index_of(st, ex.choice), wi = index_of(st, wt_choice);
        std::printf("| %s | %zu / %zu | %s, %d runs, %.3f s | %s, %d runs, %.3f s | %s, %d runs | %s | %.2f | %.2f | "
                    "%.2f | %.0f%% |\n",
                    id, st.choices.size(), ranked.size(), short_choice(ex.choice).c_str(), ex.runs, ex.wall_s,
                    short_choice(cal.choice).c_str(), cal.runs, cal.wall_s, short_choice(wt_choice).c_str(), wt.runs,
                    per.c_str(), med[ci] / med[ei], med[ci] / med[best], med[wi] / med[best], worst_spread * 100);
        std::fflush(stdout);
        std::fprintf(stderr, "  %s: exhaustive %s; calibrated %s; workload-timed %s\n", id,
                     short_choice(ex.choice).c_str(), short_choice(cal.choice).c_str(), wt.summary.c_str());
    }
}

void part_fixed(int threads, double budget, int rounds, const std::string& filter) {
    struct Row {
        std::string id;
        std::vector<s::ExecutionChoice> choices;
        std::vector<double> med;
        std::vector<double> spreads;
        s::ExecutionChoice searched, heuristic;
        s::ExecutionChoice old_default;  // the engine's rule before the search (below)
    };
    std::vector<Row> rows;
    std::printf("\n## fixed vs searched plans, all Table-1 configurations (threads %d)\n\n", threads);
    for (const auto& w : table1()) {
        if (!matches(w, filter)) continue;
        const Setup st = setup(w, threads);
        Row r;
        r.id = w.id();
        r.choices = st.choices;
        r.searched = search(st, deeprnn::Tuning::calibrate, budget).choice;
        r.heuristic = search(st, deeprnn::Tuning::heuristic, budget).choice;
        // Before the schedule search the engine split a direction over all its
        // threads when its recurrent weights were >= 192 KiB, else used 1 worker.
        const double recurrent_bytes = 4.0 * bench::gate_count(w.cell) * w.hidden * w.hidden;
        r.old_default.workers = recurrent_bytes < 192 * 1024 ? 1 : std::min(threads, static_cast<int>(st.choices.size()));
        const auto t = measure_choices(st, rounds);
        for (const auto& v : t) {
            r.med.push_back(median(v));
            r.spreads.push_back(spread(v));
        }
        std::fprintf(stderr, "  %s done\n", r.id.c_str());
        rows.push_back(r);
    }
    if (rows.empty()) return;
    // Fixed plans: one ExecutionChoice for every configuration (Table 1 is all
    // one-direction, so the choices are workers = 1..threads).
    std::map<std::string, std::vector<double>> fixed;  // per fixed plan, time per row (NaN if not a candidate)
    for (const Row& r : rows)
        for (size_t i = 0; i < r.choices.size(); ++i) fixed[short_choice(r.choices[i])];
    for (auto& [name, v] : fixed)
        for (const Row& r : rows) {
            double t = NAN;
            for (size_t i = 0; i < r.choices.size(); ++i)
                if (short_choice(r.choices[i]) == name) t = r.med[i];
            v.push_back(t);
        }
    auto geomean_ratio = [&](const std::vector<double>& num, const std::vector<double>& den) {
        double sum = 0;
        int n = 0;
        for (size_t i = 0; i < num.size(); ++i)
            if (std::isfinite(num[i]) && std::isfinite(den[i])) sum += std::log(num[i] / den[i]), ++n;
        return n ? std::exp(sum / n) : NAN;
    };
    std::vector<double> searched, heuristic, oracle, old_default;
    for (const Row& r : rows) {
        old_default.push_back(r.med[std::find(r.choices.begin(), r.choices.end(), r.old_default) - r.choices.begin()]);
        searched.push_back(r.med[std::find(r.choices.begin(), r.choices.end(), r.searched) - r.choices.begin()]);
        heuristic.push_back(r.med[std::find(r.choices.begin(), r.choices.end(), r.heuristic) - r.choices.begin()]);
        oracle.push_back(*std::min_element(r.med.begin(), r.med.end()));
    }
    std::string best_fixed;
    double best_g = INFINITY;
    for (const auto& [name, v] : fixed) {
        const double g = geomean_ratio(v, oracle);
        if (g < best_g) best_g = g, best_fixed = name;
    }
    std::printf("| config |");
    for (const auto& [name, v] : fixed) std::printf(" fixed %s |", name.c_str());
    std::printf(" heuristic pick | searched pick | searched / best fixed (%s) | searched / best per config | spread |\n",
                best_fixed.c_str());
    std::printf("|---|");
    for (size_t i = 0; i < fixed.size(); ++i) std::printf("---:|");
    std::printf("---|---|---:|---:|---:|\n");
    for (size_t k = 0; k < rows.size(); ++k) {
        const Row& r = rows[k];
        std::printf("| %s |", r.id.c_str());
        for (const auto& [name, v] : fixed) std::printf(" %s |", std::isfinite(v[k]) ? us(v[k]).c_str() : "–");
        std::printf(" %s | %s | %.3f | %.3f | %.0f%% |\n", short_choice(r.heuristic).c_str(), short_choice(r.searched).c_str(),
                    searched[k] / fixed[best_fixed][k], searched[k] / oracle[k],
                    100 * *std::max_element(r.spreads.begin(), r.spreads.end()));
    }
    std::printf("\ngeomean over %zu configurations: searched / best fixed (%s) = %.3f; searched / best per config = %.3f; "
                "heuristic / best fixed = %.3f;",
                rows.size(), best_fixed.c_str(), geomean_ratio(searched, fixed[best_fixed]), geomean_ratio(searched, oracle),
                geomean_ratio(heuristic, fixed[best_fixed]));
    for (const auto& [name, v] : fixed) std::printf(" fixed %s / best per config = %.3f;", name.c_str(), geomean_ratio(v, oracle));
    std::printf("\nold default rule (1 worker below 192 KiB of recurrent weights, else all): searched / old default = %.3f; "
                "heuristic / old default = %.3f; old default / best per config = %.3f",
                geomean_ratio(searched, old_default), geomean_ratio(heuristic, old_default),
                geomean_ratio(old_default, oracle));
    int wins = 0, losses = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
        const double q = searched[k] / fixed[best_fixed][k];
        wins += q < 0.95;
        losses += q > 1.05;
    }
    std::printf("\nsearched faster than the best fixed plan by > 5%% on %d, slower by > 5%% on %d of %zu\n", wins, losses,
                rows.size());
}

void part_warm(int threads, int reps, const std::string& filter) {
    const char* ids[] = {"lstm/t1-256-256-1-100", "lstm/t1-1024-1024-1-100", "gru/t1-64-64-1-100"};
    const std::string path = "/tmp/deeprnn_plan_search_" + std::to_string(getpid()) + ".txt";
    std::printf("\n## warm start: Model creation, plan-cache hit vs heuristic (threads %d, %d interleaved repeats, medians)\n\n",
                threads, reps);
    std::printf("| config | plan | heuristic | cache hit (file) | cache hit (memory) | hit (file) - heuristic | plan step "
                "alone: heuristic | plan step alone: hit (file) | cold calibrated search |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const char* id : ids) {
        const bench::Workload w = find(id);
        if (!matches(w, filter)) continue;
        const Setup st = setup(w, threads);
        std::remove(path.c_str());
        deeprnn::Config hcfg = st.cfg, ccfg = st.cfg;
        ccfg.tuning = deeprnn::Tuning::calibrate;
        ccfg.plan_cache_path = path;
        Log log;
        ccfg.log = capture;
        ccfg.log_user = &log;
        s::plan_cache_clear_memory();
        auto t0 = clk::now();
        { deeprnn::Model cold(ccfg, st.weights); }  // calibrates and writes the file
        const double cold_s = since(t0);
        const s::Problem p = s::problem_for(st.cfg, threads, 16);
        // The file then holds the heuristic's plan, so both sides pack the same plan.
        const s::ExecutionChoice h = search(st, deeprnn::Tuning::heuristic, 1.0).choice;
        std::string msg;
        s::plan_cache_store(path, st.key, s::this_machine(), s::PlanEntry{h, 1e-3, 2}, &msg);
        std::vector<double> heur, hit_file, hit_mem, step_h, step_f;
        for (int r = 0; r < reps; ++r) {
            t0 = clk::now();
            { deeprnn::Model m(hcfg, st.weights); }
            heur.push_back(since(t0));
            s::plan_cache_clear_memory();  // what a new process sees: only the file
            t0 = clk::now();
            { deeprnn::Model m(ccfg, st.weights); }
            hit_file.push_back(since(t0));
            t0 = clk::now();
            { deeprnn::Model m(ccfg, st.weights); }  // now in memory too
            hit_mem.push_back(since(t0));
            // The plan step alone, as the engine calls it (no packing).
            t0 = clk::now();
            s::choose_plan(p, s::default_machine(), deeprnn::Tuning::heuristic, 1.0, "", nullptr);
            step_h.push_back(since(t0));
            s::plan_cache_clear_memory();
            t0 = clk::now();
            const s::PlanDecision d = s::choose_plan(p, s::default_machine(), deeprnn::Tuning::calibrate, 1.0, path,
                                                     [](const s::Candidate&) { return 1.0; });
            step_f.push_back(since(t0));
            if (!d.from_cache) {
                std::fprintf(stderr, "plan_search: expected a cache hit for %s\n", id);
                std::exit(1);
            }
        }
        for (const auto& msg : log.warnings) std::fprintf(stderr, "  warning: %s\n", msg.c_str());
        std::printf("| %s | %s | %s | %s | %s | %+.2f ms | %.3f ms | %.3f ms | %s |\n", id, short_choice(h).c_str(),
                    us(median(heur)).c_str(),
                    us(median(hit_file)).c_str(), us(median(hit_mem)).c_str(), (median(hit_file) - median(heur)) * 1e3,
                    median(step_h) * 1e3, median(step_f) * 1e3, us(cold_s).c_str());
        std::fflush(stdout);
    }
    std::remove(path.c_str());
    s::plan_cache_clear_memory();
}

}  // namespace

int main(int argc, char** argv) {
    std::string part = "all", filter;
    int threads = 2, rounds = 0, reps = 41;
    double budget = 1.0;
    for (int i = 1; i < argc; ++i) {
        const std::string f = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "plan_search: %s needs a value\n", f.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (f == "--part") part = value();
        else if (f == "--threads") threads = std::atoi(value());
        else if (f == "--filter") filter = value();
        else if (f == "--rounds") rounds = std::atoi(value());
        else if (f == "--reps") reps = std::atoi(value());
        else if (f == "--budget") budget = std::atof(value());
        else {
            std::fprintf(stderr,
                         "usage: plan_search [--part pruning|fixed|warm|all] [--threads N] [--filter SUBSTR]\n"
                         "                   [--rounds N (0 = adaptive, 7..31)] [--reps N (warm start)] [--budget S]\n");
            return f == "--help" ? 0 : 2;
        }
    }
    if (threads < 1 || budget <= 0 || reps < 1 || (part != "all" && part != "pruning" && part != "fixed" && part != "warm")) {
        std::fprintf(stderr, "plan_search: bad arguments\n");
        return 2;
    }
    double load[3] = {0, 0, 0};
    std::FILE* f = std::fopen("/proc/loadavg", "r");
    if (f) {
        if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        std::fclose(f);
    }
    const s::CacheSizes c = s::read_cache_sizes();
    std::printf("plan_search: deeprnn %s; %s; L2 %zu KiB per core, L3 %zu KiB (%s); load average %.2f at start\n",
                deeprnn::version(), s::read_cpu_model().c_str(), c.l2 >> 10, c.l3 >> 10, c.source.c_str(), load[0]);
    if (part == "all" || part == "pruning") part_pruning(threads, budget, rounds, filter);
    if (part == "all" || part == "fixed") part_fixed(threads, budget, rounds, filter);
    if (part == "all" || part == "warm") part_warm(threads, reps, filter);
    f = std::fopen("/proc/loadavg", "r");
    if (f) {
        if (std::fscanf(f, "%lf", &load[0]) != 1) load[0] = -1;
        std::fclose(f);
        std::printf("\nload average at end: %.2f\n", load[0]);
    }
    return 0;
}
