// schedule.cpp — MM-DAG, phased schedules, PCP, ranking, calibration, plan cache.
#include "schedule.hpp"
#include "kernels.hpp"
#include "partition.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>

namespace deeprnn {
namespace detail {
namespace sched {

namespace {  // inside sched: the amalgamation puts every module in one file

constexpr double kFloat = sizeof(float);
constexpr double kActivationFlops = 40;  // one sigmoid and a product, per element (cells.cpp)

std::string first_line(const std::string& path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
}

// Number of CPUs in a sysfs list such as "0-3,8-11"; 0 if malformed.
int count_cpus(const std::string& list) {
    int n = 0;
    std::stringstream ss(list);
    std::string part;
    while (std::getline(ss, part, ',')) {
        int a = 0, b = 0;
        char dash = 0;
        std::stringstream ps(part);
        if (!(ps >> a)) return 0;
        if (ps >> dash) {
            if (dash != '-' || !(ps >> b) || b < a) return 0;
        } else {
            b = a;
        }
        n += b - a + 1;
    }
    return n;
}

}  // namespace

// ---------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------

size_t parse_cache_size(const std::string& text) {
    size_t i = 0, v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i < 12) v = v * 10 + (text[i++] - '0');
    if (i == 0) return 0;
    const std::string unit = text.substr(i);
    if (unit.empty()) return v;
    if (unit == "K" || unit == "KB" || unit == "KiB") return v << 10;
    if (unit == "M" || unit == "MB" || unit == "MiB") return v << 20;
    if (unit == "G" || unit == "GB" || unit == "GiB") return v << 30;
    return 0;
}

CacheSizes read_cache_sizes(const std::string& cpu_dir) {
    CacheSizes c;
    // sysfs lists the logical CPUs sharing a cache; the pool runs one worker
    // per physical core, so a shared L2 is divided among physical cores.
    const int smt = std::max(1, count_cpus(first_line(cpu_dir + "/topology/thread_siblings_list")));
    for (int i = 0; i < 16; ++i) {
        const std::string d = cpu_dir + "/cache/index" + std::to_string(i);
        const std::string level = first_line(d + "/level");
        if (level.empty() || first_line(d + "/type") == "Instruction") continue;
        const size_t size = parse_cache_size(first_line(d + "/size"));
        if (level == "1") c.l1d = size;
        if (level == "2") c.l2 = size / std::max(1, count_cpus(first_line(d + "/shared_cpu_list")) / smt);
        if (level == "3") c.l3 = size;
    }
    c.source = "sysfs";
    auto fill = [&c](size_t& v, int name, size_t fallback) {
        if (v) return;
        long s = name >= 0 ? sysconf(name) : -1;
        v = s > 0 ? static_cast<size_t>(s) : fallback;
        if (&v == &c.l2) c.source = s > 0 ? "sysconf" : "default";
    };
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
    fill(c.l2, _SC_LEVEL2_CACHE_SIZE, 256 << 10);
    fill(c.l1d, _SC_LEVEL1_DCACHE_SIZE, 32 << 10);
    fill(c.l3, _SC_LEVEL3_CACHE_SIZE, 8 << 20);
#else
    fill(c.l2, -1, 256 << 10);
    fill(c.l1d, -1, 32 << 10);
    fill(c.l3, -1, 8 << 20);
#endif
    return c;
}

std::string read_cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line, part;
    while (std::getline(f, line)) {
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = line.substr(0, colon);
        key.erase(key.find_last_not_of(" \t") + 1);
        std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
        if (key == "model name" && !value.empty()) return value;
        if (key == "CPU part" && part.empty()) part = "cpu part " + value;  // Arm has no model name
    }
    return part.empty() ? "unknown" : part;
}

MachineModel default_machine() {
    static const MachineModel measured = [] {
        MachineModel m;
        m.caches = read_cache_sizes();
        const KernelRates r = measure_kernel_rates(detect_isa(), m.caches.l2, m.caches.l3, m.l2_usable);
        m.l2_bytes_per_s = r.l2_bytes_per_s;
        m.flops_per_s = r.flops_per_s;
        if (r.l3_bytes_per_s > 0) m.l3_bytes_per_s = r.l3_bytes_per_s;
        m.l3_usable_bytes = r.l3_capacity_bytes > 0 ? std::min(m.caches.l3, r.l3_capacity_bytes) : m.caches.l3;
        if (r.fold_gain_l2 > 0) m.fold_gain_l2 = r.fold_gain_l2;
        if (r.fold_gain_l2_int8 > 0) m.fold_gain_l2_int8 = r.fold_gain_l2_int8;
        if (r.fold_gain_l2_bf16 > 0) m.fold_gain_l2_bf16 = r.fold_gain_l2_bf16;
        m.rates = "measured";
        return m;
    }();
    return measured;
}

// ---------------------------------------------------------------------------
// MM-DAG
// ---------------------------------------------------------------------------

const char* operand_name(Operand op) {
    switch (op) {
        case Operand::x: return "x";
        case Operand::h: return "h";
        case Operand::rh: return "rh";
        default: return "m";
    }
}

std::string MatMul::name() const { return weight + (gate.empty() ? "" : "_" + gate) + "." + operand_name(input); }

MMDag build_mm_dag(Cell cell, GruVariant variant, bool projection) {
    MMDag d;
    auto add = [&d](const char* w, const char* g, Operand in) {
        MatMul mm;
        mm.weight = w;
        mm.gate = g;
        mm.input = in;
        mm.reads_h = in == Operand::h || in == Operand::rh;
        mm.writes_h = true;  // every gate feeds h_t through element-wise ops only...
        d.nodes.push_back(mm);
        return static_cast<int>(d.nodes.size()) - 1;
    };
    if (cell == Cell::lstm) {
        d.cell = projection ? "lstm+proj" : "lstm";
        for (const char* g : {"i", "f", "g", "o"}) add("W", g, Operand::x);
        for (const char* g : {"i", "f", "g", "o"}) add("U", g, Operand::h);
        if (projection) {  // ...except under a projection: h_t = W_hr·m_t
            for (auto& n : d.nodes) n.writes_h = false;
            const int p = add("W_hr", "", Operand::m);
            d.nodes[p].projection = true;
            for (int i = 0; i < 8; ++i) d.nodes[p].after.push_back(i);
        }
    } else if (cell == Cell::gru) {
        const bool rbm = variant == GruVariant::reset_before_matmul;
        d.cell = rbm ? "gru-rbm" : "gru-lbr";
        for (const char* g : {"r", "z", "n"}) add("W", g, Operand::x);
        add("U", "r", Operand::h);
        add("U", "z", Operand::h);
        // reset-before-matmul multiplies U_n by r*h: it waits for r = σ(W_r·x + U_r·h).
        const int n = add("U", "n", rbm ? Operand::rh : Operand::h);
        if (rbm) d.nodes[n].after = {0, 3};
    } else {
        d.cell = "rnn";
        add("W", "", Operand::x);
        add("U", "", Operand::h);
    }
    return d;
}

std::vector<FusedMM> fuse(const MMDag& dag, const Phase& phase) {
    // Products that share an input matrix become one product with their weights
    // concatenated (section 5.2.1): the input is read once for all of them.
    std::vector<FusedMM> out;
    for (int id : phase.nodes) {
        const Operand in = dag.nodes[id].input;
        auto it = std::find_if(out.begin(), out.end(), [in](const FusedMM& f) { return f.input == in; });
        if (it == out.end()) out.push_back(FusedMM{in, {id}});
        else it->nodes.push_back(id);
    }
    std::sort(out.begin(), out.end(), [](const FusedMM& a, const FusedMM& b) { return a.input < b.input; });
    return out;
}

// ---------------------------------------------------------------------------
// Phased schedules
// ---------------------------------------------------------------------------

namespace {

// "W{i,f,g,o}.X" for the TI phase (X: x of every step), "U{r,z}.h" per step.
std::string phase_text(const MMDag& dag, const Phase& ph, bool shapes_only) {
    std::string s = ph.time_independent ? "TI[" : "TD[";
    bool first = true;
    for (const FusedMM& f : fuse(dag, ph)) {
        if (!first) s += ' ';
        first = false;
        const std::string op = ph.time_independent ? "X" : operand_name(f.input);
        if (shapes_only) {  // the product's shape: its input and how many outputs of each size
            int gates = 0, proj = 0;
            for (int id : f.nodes) (dag.nodes[id].projection ? proj : gates)++;
            s += op + ":" + std::to_string(gates) + "g" + (proj ? "+p" : "");
            continue;
        }
        const MatMul& n0 = dag.nodes[f.nodes[0]];
        std::string gates;
        for (int id : f.nodes) gates += (gates.empty() ? "" : ",") + dag.nodes[id].gate;
        s += n0.weight + (gates.empty() ? "" : "{" + gates + "}") + "." + op;
    }
    return s + "]";
}

// Longest chain of same-step dependencies among `nodes`, in nodes. Rule ii
// makes every phase depend on the one before, so a step has at most this
// many time-dependent phases.
int longest_chain(const MMDag& dag, const std::vector<bool>& in) {
    std::vector<int> len(dag.nodes.size(), 0);
    int best = 0;
    for (size_t i = 0; i < dag.nodes.size(); ++i) {  // nodes are built in dependency order
        if (!in[i]) continue;
        len[i] = 1;
        for (int a : dag.nodes[i].after)
            if (in[a]) len[i] = std::max(len[i], len[a] + 1);
        best = std::max(best, len[i]);
    }
    return best;
}

// Fubini number: ordered partitions of n items into non-empty phases.
long ordered_partitions(int n) {
    std::vector<long> f(n + 1, 0);
    f[0] = 1;
    for (int m = 1; m <= n; ++m) {
        long c = 1;  // binomial(m, k)
        for (int k = 1; k <= m; ++k) {
            c = c * (m - k + 1) / k;
            f[m] += c * f[m - k];
        }
    }
    return f[n];
}

// Same-step dependencies respected, and rule ii: each phase depends on the one
// before it, the first on the last phase of the previous step.
bool valid_template(const MMDag& dag, const std::vector<int>& phase, int m) {
    const int n = static_cast<int>(dag.nodes.size());
    std::vector<int> count(m, 0);
    std::vector<bool> linked(m, false);  // linked[p]: phase p depends on the phase before it
    for (int b = 0; b < n; ++b) {
        if (phase[b] < 0) continue;
        ++count[phase[b]];
        for (int a : dag.nodes[b].after) {
            if (phase[a] >= phase[b]) return false;  // a hoisted a (phase -1) is always earlier
            if (phase[a] == phase[b] - 1) linked[phase[b]] = true;
        }
        if (phase[b] == 0 && dag.nodes[b].reads_h)
            for (int a = 0; a < n; ++a)
                if (phase[a] == m - 1 && dag.nodes[a].writes_h) linked[0] = true;
    }
    for (int p = 0; p < m; ++p)
        if (!count[p] || !linked[p]) return false;
    return true;
}

}  // namespace

Enumeration enumerate_schedules(const MMDag& dag) {
    Enumeration en;
    const int n = static_cast<int>(dag.nodes.size());
    std::vector<int> xs;  // input products: the only time-independent ones
    for (int i = 0; i < n; ++i)
        if (dag.nodes[i].input == Operand::x) xs.push_back(i);
    std::map<std::string, size_t> seen;
    // Rule iii: time-independent phases come first. Rule i: a product is
    // hoisted for every step or for none, and every step uses one template.
    // Input products never depend on each other, so by rule ii the hoisted
    // ones form ONE time-independent phase (fused across time and gates).
    for (unsigned mask = 0; mask < (1u << xs.size()); ++mask) {
        std::vector<bool> td(n, true);
        for (size_t b = 0; b < xs.size(); ++b)
            if (mask >> b & 1) td[xs[b]] = false;
        int left = 0;
        for (int i = 0; i < n; ++i) left += td[i];
        en.considered += ordered_partitions(left);
        const int max_phases = longest_chain(dag, td);
        for (int m = 1; m <= max_phases; ++m) {
            long combos = 1;
            for (int i = 0; i < left; ++i) combos *= m;
            std::vector<int> phase(n, -1);
            for (long c = 0; c < combos; ++c) {
                long v = c;
                for (int i = 0; i < n; ++i)
                    if (td[i]) phase[i] = static_cast<int>(v % m), v /= m;
                if (!valid_template(dag, phase, m)) continue;
                PhasedSchedule s;
                if (mask) {
                    Phase ti;
                    ti.time_independent = true;
                    for (int i = 0; i < n; ++i)
                        if (!td[i]) ti.nodes.push_back(i);
                    s.hoisted = static_cast<int>(ti.nodes.size());
                    s.phases.push_back(ti);
                }
                for (int p = 0; p < m; ++p) {
                    Phase ph;
                    for (int i = 0; i < n; ++i)
                        if (phase[i] == p) ph.nodes.push_back(i);
                    s.phases.push_back(ph);
                }
                for (const Phase& ph : s.phases) {
                    // Appended piecewise: GCC 12 warns (-Wrestrict, falsely) on "literal" + std::string&&.
                    if (!s.text.empty()) {
                        s.text += ' ';
                        s.signature += ' ';
                    }
                    s.text += phase_text(dag, ph, false);
                    s.signature += phase_text(dag, ph, true);
                }
                en.all.push_back(s);
                // One schedule per shape signature; the engine's own represents its class.
                auto it = seen.find(s.signature);
                if (it == seen.end()) {
                    seen[s.signature] = en.distinct.size();
                    en.distinct.push_back(s);
                } else if (engine_runs(dag, s)) {
                    en.distinct[it->second] = s;
                }
            }
        }
    }
    // The engine's schedule first, then by fewer hoisted products last: a stable, readable order.
    std::stable_sort(en.distinct.begin(), en.distinct.end(), [&dag](const PhasedSchedule& a, const PhasedSchedule& b) {
        const bool ea = engine_runs(dag, a), eb = engine_runs(dag, b);
        return ea != eb ? ea : a.hoisted > b.hoisted;
    });
    return en;
}

bool engine_runs(const MMDag& dag, const PhasedSchedule& s) {
    std::vector<int> rest, of_h;
    int inputs = 0;
    for (size_t i = 0; i < dag.nodes.size(); ++i) {
        const Operand in = dag.nodes[i].input;
        if (in == Operand::x) ++inputs;
        else (in == Operand::h ? of_h : rest).push_back(static_cast<int>(i));
    }
    if (s.hoisted != inputs || s.phases.empty() || !s.phases[0].time_independent) return false;
    if (s.phases.size() != (rest.empty() ? 2u : 3u) || s.phases[1].nodes != of_h) return false;
    return rest.empty() || s.phases[2].nodes == rest;
}

// ---------------------------------------------------------------------------
// PCP
// ---------------------------------------------------------------------------

Tiling tiling_bytes(const Gemm& g, int xi, int xj, int xk, double steps, double l2_bytes) {
    const double A = g.i * g.k * kFloat, B = g.k * g.j * g.weight_bytes, C = g.i * g.j * kFloat;
    Tiling t;
    t.xi = xi;
    t.xj = xj;
    t.xk = xk;
    // Weight-centric streamlining: a block that fits a core's L2 is read from
    // L3 once (by the xi cores sharing it), not once per step.
    t.resident = steps > 1 && B / (xj * xk) <= l2_bytes;
    t.bytes = t.resident ? steps * (xj * A + 2 * xk * C) + xi * B : steps * (xj * A + xi * B + 2 * xk * C);
    return t;
}

Tiling pcp(const Gemm& g, int parts, double steps, double l2_bytes) {
    Tiling best;
    bool found = false;
    for (int xi = 1; xi <= parts; ++xi) {
        if (parts % xi || xi > g.i) continue;
        for (int xj = 1; xj <= parts / xi; ++xj) {
            const int xk = parts / xi / xj;
            if ((parts / xi) % xj || xj > g.j || xk > g.k) continue;
            const Tiling t = tiling_bytes(g, xi, xj, xk, steps, l2_bytes);
            const bool less = t.bytes < best.bytes * (1 - 1e-12);
            const bool tie = !less && t.bytes <= best.bytes * (1 + 1e-12);
            if (!found || less || (tie && (t.xk < best.xk || (t.xk == best.xk && t.xi < best.xi)))) best = t;
            found = true;
        }
    }
    return found ? best : tiling_bytes(g, 1, parts, 1, steps, l2_bytes);
}

// ---------------------------------------------------------------------------
// Ranking
// ---------------------------------------------------------------------------

Problem problem_for(const Config& cfg, int threads, int simd_width, int batch, int seq_len) {
    Problem p;
    p.cell = cfg.cell;
    p.gru_variant = cfg.gru_variant;
    p.input = cfg.input_size;
    p.hidden = cfg.hidden_size;
    p.proj = cfg.proj_size;
    p.layers = cfg.num_layers;
    p.directions = num_directions(cfg);
    p.reverse = cfg.direction == Direction::reverse;
    p.batch = std::max(1, std::min(batch, cfg.max_batch));
    p.seq_len = std::max(1, seq_len > 0 ? seq_len : cfg.tuning_seq_len);
    p.threads = std::max(1, threads > 0 ? threads : cfg.threads);
    p.simd_width = std::max(1, simd_width);
    p.precision = cfg.weight_precision;
    return p;
}

std::string ExecutionChoice::str() const {
    return cat("workers=", workers, " side_by_side=", side_by_side ? 1 : 0, " input_fused=", input_fused_across_time ? 1 : 0,
               " pipelined=", pipelined ? 1 : 0, " rbm_one_barrier=", rbm_one_barrier ? 1 : 0,
               " helpers=", projection_helpers ? 1 : 0);
}

namespace {

struct Cost {
    double bytes = 0, seconds = 0;
    double ti_seconds = 0;  // of seconds: the time-independent phases (the input projection)
    std::string tiling;
};

double barrier_cost(const MachineModel& m, int parties) {
    return parties < 2 ? 0 : m.barrier_s * std::max(1.0, std::log2(static_cast<double>(parties)));
}

// Shares `p` workers among products in proportion to their flops, at least
// one each (Parallel-GEMMs-in-Parallel); largest remainders get the rest.
std::vector<int> split_workers(int p, const std::vector<double>& work) {
    const size_t n = work.size();
    double total = 0;
    for (double w : work) total += w;
    std::vector<int> share(n, 1);
    int left = p - static_cast<int>(n);
    std::vector<std::pair<double, size_t>> rem;
    for (size_t i = 0; i < n; ++i) {
        const double want = left * work[i] / total;
        share[i] += static_cast<int>(want);
        rem.push_back({want - std::floor(want), i});
    }
    for (int s : share) left -= s - 1;
    std::sort(rem.rbegin(), rem.rend());
    for (size_t i = 0; left > 0; ++i, --left) ++share[rem[i % n].second];
    return share;
}

// A core's rate when `active` cores are busy at once: its own, or its share of the aggregate ceiling.
double rate(double per_core, double total, int active) { return total > 0 ? std::min(per_core, total / active) : per_core; }

// One direction of one layer, for one sequence, on p workers; `groups`
// directions run at once (side by side), sharing the aggregate ceilings.
// l2_share: the part of the L2 this layer's time-dependent weights may use
// (a pipeline stage's layers run step by step, so they share it).
Cost layer_cost(const Problem& pb, const MachineModel& mach, const MMDag& dag, const PhasedSchedule& s, int layer,
                int p, int groups_at_once, bool use_pcp, bool rbm_one_barrier = false, double l2_share = 1) {
    const int active = p * groups_at_once;
    const double flops_rate = rate(mach.flops_per_s, mach.flops_total_per_s, active);
    const double l2_rate = rate(mach.l2_bytes_per_s, mach.l2_total_bytes_per_s, active);
    const double l3_rate = rate(mach.l3_bytes_per_s, mach.l3_total_bytes_per_s, active);
    const int H = pb.hidden, S = pb.proj > 0 ? pb.proj : pb.hidden;
    const double in = layer == 0 ? pb.input : static_cast<double>(pb.directions) * S;
    const double T = pb.seq_len, B = pb.batch;
    auto k_of = [&](Operand op) { return op == Operand::x ? in : op == Operand::h ? S : H; };
    auto j_of = [&](const FusedMM& f) {
        double j = 0;
        for (int id : f.nodes) j += dag.nodes[id].projection ? pb.proj : H;
        return j;
    };
    // The engine slices units in whole SIMD vectors: more workers than vectors idle.
    auto vectors = [&](const FusedMM& f) {
        const int units = dag.nodes[f.nodes[0]].projection ? pb.proj : H;
        return (units + pb.simd_width - 1) / pb.simd_width;
    };
    // Every time-dependent weight block a worker owns stays in its L2 for the
    // whole sequence only if they fit together: each product gets a share of
    // the usable L2 in proportion to its weights.
    const double td_bytes = static_cast<double>(element_bytes(pb.precision));
    double td_weights = 0;
    for (const Phase& ph : s.phases)
        if (!ph.time_independent)
            for (const FusedMM& f : fuse(dag, ph)) td_weights += k_of(f.input) * j_of(f) * td_bytes;
    const double l2 = static_cast<double>(mach.caches.l2) * mach.l2_usable * l2_share;

    Cost c;
    for (const Phase& ph : s.phases) {
        const bool ti = ph.time_independent;
        const std::vector<FusedMM> groups = fuse(dag, ph);
        std::vector<double> flops;
        for (const FusedMM& f : groups) flops.push_back(2 * (ti ? T * B : B) * j_of(f) * k_of(f.input));
        // Parallel-GEMMs-in-Parallel for phases of several products (the
        // engine instead runs each product on all workers in turn).
        const bool parallel = use_pcp && !ti && groups.size() > 1 && p >= static_cast<int>(groups.size());
        const std::vector<int> share = parallel ? split_workers(p, flops) : std::vector<int>(groups.size(), p);
        double phase_s = 0;
        bool exchange = false;  // TI outputs another worker must read: a barrier before the steps
        std::string text;
        for (size_t gi = 0; gi < groups.size(); ++gi) {
            const FusedMM& f = groups[gi];
            const Gemm g{ti ? T * B : B, j_of(f), k_of(f.input), ti ? kFloat : td_bytes};
            const int q = std::max(1, std::min(share[gi], vectors(f)));
            const double steps = ti ? 1 : T;
            const double budget = ti ? 0 : l2 * (g.k * g.j * g.weight_bytes) / td_weights;
            const Tiling t = use_pcp ? pcp(g, q, steps, budget) : tiling_bytes(g, 1, q, 1, steps, budget);
            const double w = g.k * g.j * g.weight_bytes;
            const double once = t.resident ? t.xi * w : 0;  // first step's weight load
            const double l3_per_step = (t.bytes - once) / steps / q;
            const double l2_per_step = t.resident ? w / (t.xj * t.xk) : 0;
            double sec = std::max(flops[gi] / q / flops_rate, l2_per_step / l2_rate + l3_per_step / l3_rate);
            if (t.xk > 1) sec += barrier_cost(mach, q);  // partial sums meet before the cell update
            exchange = exchange || t.xi > 1 || t.xk > 1;
            phase_s = parallel ? std::max(phase_s, sec) : phase_s + sec;
            c.bytes += t.bytes;
            c.seconds += once / q / l3_rate;
            text += cat(text.empty() ? "" : parallel ? " || " : " ", ti ? "X" : operand_name(f.input), ":", t.xi, "x",
                        t.xj, "x", t.xk, t.resident ? " L2" : "");
        }
        c.seconds += ti ? phase_s + (exchange ? barrier_cost(mach, p) : 0) : T * (phase_s + barrier_cost(mach, p));
        if (ti) c.ti_seconds += phase_s;
        c.tiling += (c.tiling.empty() ? "" : " | ") + text;
    }
    if (dag.cell == "gru-rbm" && !use_pcp) {
        // The engine sums U_r·h in fixed chunks of units (partition.hpp) and
        // adds the chunks' partial sums along a fixed tree: two barriers, each
        // worker its own rows from its own cache. One barrier: each worker
        // adds up the tree nodes inside its chunks for all H units; every
        // worker then reads every worker's nodes (the others' written by
        // other cores), reads the others' input-side r and computes r of
        // every unit; it saves the second barrier of the step.
        const int chunks = rbm_chunk_count(H, pb.simd_width);
        const int q = std::max(1, std::min(p, rbm_one_barrier ? chunks : (H + pb.simd_width - 1) / pb.simd_width));
        double step = 0;
        if (rbm_one_barrier && q > 1) {
            const std::vector<Slice> own = split_units(chunks, q, 1);  // chunks per worker
            int nodes = 0, fewest = chunks;
            for (const Slice& o : own) {
                const int n = rbm_tree_nodes(0, chunks, o.begin, o.begin + o.size);
                nodes += n;
                fewest = std::min(fewest, n);
            }
            const double remote = static_cast<double>(nodes - fewest) * H * B + H * B * (q - 1.0) / q;  // nodes, W_r·x
            step += (static_cast<double>(chunks) / q + fewest) * H * B * kFloat / l2_rate +
                    remote * kFloat / mach.cross_core_bytes_per_s;
            step += H * B * (q - 1.0) / q * kActivationFlops / flops_rate;  // r of the other workers' units
            step -= barrier_cost(mach, q);
        } else {
            step += static_cast<double>(chunks) * H / q * B * kFloat / l2_rate;
        }
        c.seconds += T * step;
    }
    return c;
}

// Critical path first (ExecutionChoice::projection_helpers): one layer's
// recurrence on one worker while all `workers` project chunks of
// kHelperChunkRows rows, each chunk a pass over the whole W_ih (from L2
// where it fits beside the recurrent weights, else from L3). The layer takes
// the longer of the recurrence after the first chunk and the whole work
// shared by the workers, plus the recurrent worker's reads of the rows the
// others wrote (handed across cores, streamed like L3 reads).
Cost helped_layer_cost(const Problem& pb, const MachineModel& mach, const MMDag& dag, const PhasedSchedule& s, int layer,
                       int workers, bool use_pcp) {
    Cost c = layer_cost(pb, mach, dag, s, layer, 1, workers, use_pcp);
    const double td = c.seconds - c.ti_seconds;
    const int S = pb.proj > 0 ? pb.proj : pb.hidden;
    const double in = layer == 0 ? pb.input : static_cast<double>(pb.directions) * S;
    int x_gates = 0, h_gates = 0;
    for (const MatMul& n : dag.nodes) {
        x_gates += n.input == Operand::x;
        h_gates += n.input != Operand::x;
    }
    const double rows = static_cast<double>(pb.seq_len) * pb.batch;
    const double chunk_rows = static_cast<double>(std::max(1, kHelperChunkRows / pb.batch)) * pb.batch;
    const double chunks = std::ceil(rows / chunk_rows);
    const double w_ih = x_gates * static_cast<double>(pb.hidden) * in * kFloat;
    const double w_hh = h_gates * static_cast<double>(pb.hidden) * S * static_cast<double>(element_bytes(pb.precision));
    const bool fits = w_ih + w_hh <= mach.l2_usable * static_cast<double>(mach.caches.l2);
    const double read = w_ih / rate(fits ? mach.l2_bytes_per_s : mach.l3_bytes_per_s,
                                    fits ? mach.l2_total_bytes_per_s : mach.l3_total_bytes_per_s, workers);
    const double ti = std::max(c.ti_seconds, chunks * read);
    const double handed = rows * x_gates * pb.hidden * kFloat * (workers - 1.0) / workers /
                          rate(mach.l3_bytes_per_s, mach.l3_total_bytes_per_s, workers);
    c.seconds = std::max(td + ti / chunks, (ti + td + handed) / workers);
    return c;
}

Cost model_cost(const Problem& pb, const MachineModel& mach, const MMDag& dag, const PhasedSchedule& s,
                const ExecutionChoice& ch, bool use_pcp) {
    Cost total;
    const int D = pb.directions;
    if (ch.projection_helpers) {
        total.seconds = mach.dispatch_s + (pb.layers - 1) * barrier_cost(mach, ch.workers);
        for (int l = 0; l < pb.layers; ++l) {
            const Cost c = helped_layer_cost(pb, mach, dag, s, l, ch.workers, use_pcp);
            total.bytes += c.bytes;
            total.seconds += c.seconds;
            if (l == 0) total.tiling = c.tiling;
        }
        return total;
    }
    if (ch.pipelined) {  // stages of consecutive layers, one worker each, no barrier
        // A stage runs its layers step by step, each pipeline_lag steps
        // behind the one before (engine.cpp, run_stage): its layers' weights
        // share its L2, and the stage after starts once the stage's last
        // layer has made a step.
        const double T = pb.seq_len, l2_rate = rate(mach.l2_bytes_per_s, mach.l2_total_bytes_per_s, ch.workers);
        const double lag = std::min<double>(pipeline_lag(pb.batch, pb.batch == 1), T);
        int x_gates = 0;
        for (const MatMul& n : dag.nodes) x_gates += n.input == Operand::x;
        const double w_ih = static_cast<double>(pb.proj > 0 ? pb.proj : pb.hidden) * x_gates * pb.hidden * kFloat;
        double finish = 0, start = 0;
        for (int l0 = 0; l0 < pb.layers;) {
            const int at = pipeline_stage(l0, pb.layers, ch.workers);
            int n = 0;
            while (l0 + n < pb.layers && pipeline_stage(l0 + n, pb.layers, ch.workers) == at) ++n;
            double busy = 0;
            for (int l = l0; l < l0 + n; ++l) {
                const Cost c = layer_cost(pb, mach, dag, s, l, 1, ch.workers, use_pcp, false, 1.0 / n);
                double sec = c.seconds;
                if (l == l0 && l > 0) {
                    // Fed by the stage before, it projects, in one product, the
                    // steps that stage has finished (engine.cpp, project_until).
                    // Fed more slowly than it could run, it waits for every step
                    // (a handoff of two cache lines, like a two-party barrier)
                    // and projects each alone: its input weights leave L2 every
                    // step. Fed faster, it falls behind and then projects what
                    // has piled up: piles that grow about geometrically, so a
                    // few passes over W_ih, and one handoff a step for the rows
                    // another core wrote. (LSTM 128-128, 2 layers on the Zen 5
                    // VM: pipelined 0.33-0.38 ms, split 0.40-0.46, one worker
                    // 0.49-0.51; the charge of every step cost as much as a
                    // second layer, and the split was chosen.)
                    const double one_by_one = w_ih / l2_rate + 2 * barrier_cost(mach, 2);
                    if (finish / T < sec / T + one_by_one)
                        sec += std::ceil(std::log2(T + 1)) * w_ih / l2_rate + T * barrier_cost(mach, 2);
                    else
                        sec += T * one_by_one;
                } else if (l > l0) {  // fed by the layer before on this stage: a product every lag steps
                    sec += (std::ceil(T / lag) - 1) * w_ih / l2_rate;
                }
                total.bytes += c.bytes;
                busy += sec;
                if (l == 0) total.tiling = c.tiling;
            }
            // Its last layer starts lag * (n - 1) steps in, after lag * n(n-1)/2
            // layer-steps of the stage; the stage ends as long after its feed.
            const double layer_step = busy / (n * T), fill = layer_step * (lag * n * (n - 1) / 2 + 1);
            finish = std::max(start + busy, finish + fill);
            start += fill;
            l0 += n;
        }
        total.seconds = finish + mach.dispatch_s;
        return total;
    }
    if (ch.total_workers(D) > 1) total.seconds += mach.dispatch_s;
    for (int l = 0; l < pb.layers; ++l) {
        const Cost c = layer_cost(pb, mach, dag, s, l, ch.workers, ch.side_by_side ? D : 1, use_pcp, ch.rbm_one_barrier);
        total.bytes += D * c.bytes;
        // Directions side by side overlap; otherwise they take turns on the same workers.
        total.seconds += D == 2 && !ch.side_by_side ? 2 * c.seconds : c.seconds;
        if (l + 1 < pb.layers) total.seconds += barrier_cost(mach, ch.total_workers(D));  // next layer reads all
        if (l == 0) total.tiling = c.tiling;
    }
    return total;
}

}  // namespace

std::vector<Candidate> rank_candidates(const Problem& p, const MachineModel& machine) {
    if (p.hidden < 1 || p.input < 1 || p.layers < 1 || p.batch < 1 || p.seq_len < 1 || p.threads < 1 ||
        p.simd_width < 1 || (p.directions != 1 && p.directions != 2) || p.proj < 0 ||
        (p.proj > 0 && (p.proj >= p.hidden || p.cell != Cell::lstm)))
        fail("internal: schedule problem out of range (hidden ", p.hidden, ", threads ", p.threads, ")");
    const MMDag dag = build_mm_dag(p.cell, p.gru_variant, p.proj > 0);
    const Enumeration en = enumerate_schedules(dag);
    int inputs = 0;
    for (const MatMul& n : dag.nodes) inputs += n.input == Operand::x;
    // Parallelism generator: degrees 1..threads per direction, and for two
    // directions also side by side on disjoint halves.
    const int vectors = (p.hidden + p.simd_width - 1) / p.simd_width;
    std::vector<ExecutionChoice> degrees;
    for (int w = 1; w <= std::min(p.threads, vectors); ++w) degrees.push_back({w, false, true});
    if (p.directions == 2)
        for (int w = 1; w <= std::min(p.threads / 2, vectors); ++w) degrees.push_back({w, true, true});
    // Stacked layers as a wavefront of 2..L pipeline stages (one direction).
    if (p.directions == 1)
        for (int w = 2; w <= std::min(p.threads, p.layers); ++w) degrees.push_back({w, false, true, true});
    // Critical path first: the recurrence on one worker, the projection on 2..threads (forward in time).
    if (p.directions == 1 && !p.reverse)
        for (int w = 2; w <= p.threads; ++w) degrees.push_back({w, false, true, false, false, true});
    // GRU reset-before-matmul: each split also with one barrier per step, on
    // at most as many workers as the reset product has chunks.
    if (p.cell == Cell::gru && p.gru_variant == GruVariant::reset_before_matmul) {
        const int chunks = rbm_chunk_count(p.hidden, p.simd_width);
        for (size_t i = 0, n = degrees.size(); i < n; ++i)
            if (!degrees[i].pipelined && degrees[i].workers >= 2 && degrees[i].workers <= chunks) {
                ExecutionChoice one = degrees[i];
                one.rbm_one_barrier = true;
                degrees.push_back(one);
            }
    }

    std::vector<Candidate> out;
    for (size_t si = 0; si < en.distinct.size(); ++si) {
        const PhasedSchedule& s = en.distinct[si];
        const bool engine_schedule = engine_runs(dag, s);
        for (ExecutionChoice ch : degrees) {
            ch.input_fused_across_time = s.hoisted == inputs;
            std::string engine_tiling;
            for (bool use_pcp : {false, true}) {
                if ((ch.rbm_one_barrier || ch.projection_helpers) && (use_pcp || !engine_schedule))
                    continue;  // an engine-only variant
                const Cost cost = model_cost(p, machine, dag, s, ch, use_pcp);
                if (use_pcp && cost.tiling == engine_tiling) continue;  // PCP agrees with output tiling
                engine_tiling = cost.tiling;
                Candidate c;
                c.choice = ch;
                c.executable = engine_schedule && !use_pcp;
                c.schedule = static_cast<int>(si);
                c.schedule_text = s.text;
                c.tiling = cost.tiling;
                c.bytes = cost.bytes;
                c.seconds = cost.seconds;
                out.push_back(c);
            }
        }
    }
    std::stable_sort(out.begin(), out.end(), [&p](const Candidate& a, const Candidate& b) {
        if (a.seconds != b.seconds) return a.seconds < b.seconds;
        const int wa = a.choice.total_workers(p.directions), wb = b.choice.total_workers(p.directions);
        if (wa != wb) return wa < wb;
        return a.executable && !b.executable;
    });
    return out;
}

std::vector<Candidate> rank_candidates(const Problem& p) { return rank_candidates(p, default_machine()); }

bool fold_pays(const MachineModel& machine, double wh_bytes, double wx_bytes, WeightPrecision precision) {
    const double l2 = machine.l2_usable * static_cast<double>(machine.caches.l2);
    // Measured on the kernels alone; in a step the fold also copies its chunk's inputs and a tie
    // there lost 2-7% (LSTM 64-256 and 256-256 on the Xeon VM, kernel gain 0.90-1.05): a margin.
    if (wh_bytes + wx_bytes <= l2)
        return (precision == WeightPrecision::int8   ? machine.fold_gain_l2_int8
                : precision == WeightPrecision::bf16 ? machine.fold_gain_l2_bf16
                                                     : machine.fold_gain_l2) > 1.1;
    const double per_l2 = 1 / machine.l2_bytes_per_s, per_l3 = 1 / machine.l3_bytes_per_s;
    const double share = wx_bytes / kProjectAhead;  // W_ih read per step, each line once per kProjectAhead steps
    double extra = share * per_l3;
    if (wh_bytes <= l2 && wh_bytes + share > l2) extra += wh_bytes * (per_l3 - per_l2);  // W_hh pushed out of L2
    // int8 and bf16 have 4x and 2x the multiply-adds per byte of f32, and
    // their dot products do 4x and 2x an FMA's: priced per byte, all alike.
    const double up_front = 2 * (wx_bytes / sizeof(float)) / machine.flops_per_s;
    return extra < up_front;
}

// The schedule the engine runs for p's cell (serial_rows, serial_seconds), or nullptr.
static const PhasedSchedule* engine_schedule(const MMDag& dag, const Enumeration& en) {
    const auto engine = std::find_if(en.distinct.begin(), en.distinct.end(),
                                     [&](const PhasedSchedule& s) { return engine_runs(dag, s); });
    return engine == en.distinct.end() ? nullptr : &*engine;
}

// A choice's run on the caller alone: one worker, the same input projection.
static ExecutionChoice on_one_worker(const ExecutionChoice& choice) {
    ExecutionChoice one;
    one.input_fused_across_time = choice.input_fused_across_time;
    return one;
}

double serial_seconds(const Problem& p, const MachineModel& machine, const ExecutionChoice& choice) {
    const MMDag dag = build_mm_dag(p.cell, p.gru_variant, p.proj > 0);
    const Enumeration en = enumerate_schedules(dag);
    const PhasedSchedule* engine = engine_schedule(dag, en);
    return engine ? model_cost(p, machine, dag, *engine, on_one_worker(choice), false).seconds : 0;
}

int serial_rows(const Problem& p, const MachineModel& machine, const ExecutionChoice& choice, bool hands_over) {
    if (choice.total_workers(p.directions) < 2) return 0;
    const MMDag dag = build_mm_dag(p.cell, p.gru_variant, p.proj > 0);
    const Enumeration en = enumerate_schedules(dag);
    const PhasedSchedule* engine = engine_schedule(dag, en);
    if (!engine) return 0;
    const ExecutionChoice one = on_one_worker(choice);
    // Serial wins at `rows` if one worker's time is no more than the pool's,
    // waking included. Handed over, the pool's run is the caller's until the
    // wake-up ends (or all of it, and the wait), then the pool's for the rest.
    auto serial_wins = [&](int rows) {
        Problem at = p;
        at.seq_len = std::max(1, rows / std::max(1, p.batch));
        const double alone = model_cost(at, machine, dag, *engine, one, false).seconds;
        double pool = model_cost(at, machine, dag, *engine, choice, false).seconds;
        if (hands_over) {
            const double wake = machine.dispatch_s, per_caller_second = (pool - wake) / alone;
            pool = wake + std::max(0.0, alone - wake) * per_caller_second;
        }
        return alone <= pool;
    };
    if (!serial_wins(p.batch)) return 0;
    int lo = p.batch, hi = 2 * p.batch;  // serial wins at lo; find where it stops
    for (; hi < (1 << 20) && serial_wins(hi); hi *= 2) lo = hi;
    while (hi - lo > p.batch) {
        const int mid = lo + (hi - lo) / 2;
        (serial_wins(mid) ? lo : hi) = mid;
    }
    return lo;
}

int best_executable(const std::vector<Candidate>& ranked) {
    for (size_t i = 0; i < ranked.size(); ++i)
        if (ranked[i].executable) return static_cast<int>(i);
    return -1;
}

// ---------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------

CalibrationResult calibrate(const std::vector<Candidate>& ranked, double budget_s,
                            const std::function<double(const Candidate&)>& time_one, int max_candidates,
                            int runs_per_candidate, bool prune) {
    CalibrationResult r;
    r.measured.assign(ranked.size(), -1.0);
    r.best = best_executable(ranked);
    int executable = 0;
    for (const Candidate& c : ranked) executable += c.executable;
    if (!time_one || r.best < 0) {
        r.summary = "calibration: nothing timed; analytic choice";
        return r;
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    double measured_sum = 0;
    // Setup (packing a plan) shows in the wall clock, run times in the sum; a
    // fake timer in tests advances only the sum.
    auto spent = [&] {
        const double wall = std::chrono::duration<double>(clock::now() - start).count();
        return std::max(wall, measured_sum);
    };
    // What one call of time_one costs (packing, warm-up and the timed run) per
    // predicted second, learnt from the first call; until then, the prediction.
    double scale = 0;
    int best = -1;
    for (size_t i = 0; i < ranked.size() && r.ran < max_candidates; ++i) {
        const Candidate& c = ranked[i];
        if (!c.executable) continue;
        const double expect = c.seconds * (scale > 0 ? scale : 1);
        if (prune && spent() + expect > budget_s) continue;  // a cheaper one further down may still fit
        double fastest = std::numeric_limits<double>::infinity();
        double call_cost = expect;
        for (int run = 0; run < runs_per_candidate; ++run) {
            if (run > 0 && prune && spent() + call_cost > budget_s) break;
            const auto t0 = clock::now();
            const double t = time_one(c);
            ++r.runs;
            if (!(t >= 0) || !std::isfinite(t)) break;  // a failed timing never wins
            call_cost = std::max(t, std::chrono::duration<double>(clock::now() - t0).count());
            if (scale == 0 && c.seconds > 0) scale = call_cost / c.seconds;
            measured_sum += t;
            fastest = std::min(fastest, t);
            if (prune && best >= 0 && fastest > 2 * r.measured[best]) break;  // hopeless: stop repeating
        }
        if (!std::isfinite(fastest)) continue;
        r.measured[i] = fastest;
        ++r.ran;
        if (best < 0 || fastest < r.measured[best]) best = static_cast<int>(i);
    }
    r.spent_s = spent();
    if (best >= 0) {
        r.best = best;
        r.best_seconds = r.measured[best];
    }
    r.summary = cat("calibration: timed ", r.ran, " of ", executable, " executable candidates (", r.runs, " runs, ",
                    r.spent_s, " s of ", budget_s, " s budget); ",
                    best >= 0 ? cat("fastest ", ranked[r.best].choice.str(), " at ", r.best_seconds, " s (predicted ",
                                    ranked[r.best].seconds, " s)")
                              : std::string("none fit the budget; analytic choice"));
    return r;
}

// ---------------------------------------------------------------------------
// Plan cache
// ---------------------------------------------------------------------------

namespace {

constexpr const char* kMagic = "deeprnn-plan-cache 5";
constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxEntries = 4096;

uint64_t fnv1a64(const char* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
    return h;
}

std::string hex16(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
}

const char* cell_key(Cell cell, GruVariant v) {
    switch (cell) {
        case Cell::lstm: return "lstm";
        case Cell::gru: return v == GruVariant::reset_before_matmul ? "gru-rbm" : "gru-lbr";
        case Cell::rnn_tanh: return "rnn_tanh";
        default: return "rnn_relu";
    }
}

std::vector<std::string> split_spaces(const std::string& s) {
    std::vector<std::string> out;
    size_t b = 0;
    for (size_t i = 0; i <= s.size(); ++i)
        if (i == s.size() || s[i] == ' ') {
            out.push_back(s.substr(b, i - b));  // empty tokens kept: double spaces fail the field checks
            b = i + 1;
        }
    return out;
}

// "name=123" with value in [lo, hi]: digits only, no sign, no leading zero.
bool field(const std::string& tok, const char* name, uint64_t lo, uint64_t hi, uint64_t* v) {
    const size_t n = std::strlen(name);
    if (tok.size() < n + 2 || tok.compare(0, n, name) || tok[n] != '=') return false;
    const std::string d = tok.substr(n + 1);
    if (d.size() > 18 || (d.size() > 1 && d[0] == '0')) return false;
    uint64_t x = 0;
    for (char ch : d) {
        if (ch < '0' || ch > '9') return false;
        x = x * 10 + (ch - '0');
    }
    *v = x;
    return x >= lo && x <= hi;
}

// One "plan <key> : <value>" line; the key must be exactly as plan_key writes it.
bool parse_plan_line(const std::string& line, std::string* key, PlanEntry* e) {
    const std::vector<std::string> t = split_spaces(line);
    if (t.size() != 21 || t[0] != "plan" || t[12] != ":") return false;
    if (t[11] != "weights=f32" && t[11] != "weights=bf16" && t[11] != "weights=int8") return false;
    static const char* kCells[] = {"lstm", "gru-lbr", "gru-rbm", "rnn_tanh", "rnn_relu"};
    if (t[1].compare(0, 5, "cell=") ||
        std::find(std::begin(kCells), std::end(kCells), t[1].substr(5)) == std::end(kCells))
        return false;
    const uint64_t kBig = 999999999;
    uint64_t in = 0, hid = 0, proj = 0, layers = 0, dirs = 0, rev = 0, batch = 0, seq = 0, threads = 0, workers = 0,
             side = 0, fused = 0, piped = 0, one = 0, help = 0, ns = 0, ran = 0;
    if (!field(t[2], "input", 1, kBig, &in) || !field(t[3], "hidden", 1, kBig, &hid) ||
        !field(t[4], "proj", 0, hid - 1, &proj) || !field(t[5], "layers", 1, kBig, &layers) ||
        !field(t[6], "directions", 1, 2, &dirs) || !field(t[7], "reverse", 0, 1, &rev) ||
        !field(t[8], "batch", 1, kBig, &batch) || !field(t[9], "seq", 1, kBig, &seq) ||
        !field(t[10], "threads", 1, 65536, &threads) || !field(t[13], "workers", 1, threads, &workers) ||
        !field(t[14], "side_by_side", 0, 1, &side) || !field(t[15], "input_fused", 0, 1, &fused) ||
        !field(t[16], "pipelined", 0, 1, &piped) || !field(t[17], "rbm_one_barrier", 0, 1, &one) ||
        !field(t[18], "helpers", 0, 1, &help) || !field(t[19], "ns", 0, 999999999999999999ull, &ns) ||
        !field(t[20], "ran", 0, kBig, &ran))
        return false;
    if ((batch & (batch - 1)) || (rev && dirs != 1) || (side && (dirs != 2 || 2 * workers > threads)) ||
        (proj && t[1] != "cell=lstm") || (piped && (dirs != 1 || side || workers < 2 || workers > layers)) ||
        (one && (t[1] != "cell=gru-rbm" || piped || workers < 2)) ||
        (help && (dirs != 1 || rev || side || piped || one || workers < 2)))
        return false;
    *key = line.substr(5, line.find(" : ") - 5);
    e->choice = ExecutionChoice{static_cast<int>(workers), side == 1, fused == 1, piped == 1, one == 1, help == 1};
    e->seconds = static_cast<double>(ns) * 1e-9;
    e->ran = static_cast<int>(ran);
    return true;
}

// The process's plans: memory always, one lock for memory and files.
std::mutex g_cache_mutex;
std::map<std::string, PlanEntry> g_memory;  // by machine line + '|' + key

}  // namespace

MachineId machine_id(const std::string& cpu_model, const CacheSizes& caches) {
    MachineId m;
    m.cpu = cpu_model.empty() ? "unknown" : cpu_model;
    for (char& ch : m.cpu)
        if (ch < '!' || ch > '~' || ch == '"') ch = '_';
    m.l1d = caches.l1d;
    m.l2 = caches.l2;
    m.l3 = caches.l3;
    return m;
}

MachineId this_machine() { return machine_id(read_cpu_model(), read_cache_sizes()); }

std::string MachineId::line() const { return cat("cpu=", cpu, " l1d=", l1d, " l2=", l2, " l3=", l3); }

std::string plan_key(const Problem& p) {
    int bucket = 1;  // runs of similar batch share a plan
    while (bucket < p.batch) bucket *= 2;
    return cat("cell=", cell_key(p.cell, p.gru_variant), " input=", p.input, " hidden=", p.hidden, " proj=", p.proj,
               " layers=", p.layers, " directions=", p.directions, " reverse=", p.reverse ? 1 : 0, " batch=", bucket, " seq=", p.seq_len,
               " threads=", p.threads, " weights=", to_string(p.precision));
}

std::string serialize_plan_cache(const std::map<std::string, PlanEntry>& entries, const std::string& version,
                                 const MachineId& machine) {
    std::string s = cat(kMagic, "\nversion ", version, "\nmachine ", machine.line(), "\n");
    for (const auto& [key, e] : entries)
        s += cat("plan ", key, " : workers=", e.choice.workers, " side_by_side=", e.choice.side_by_side ? 1 : 0,
                 " input_fused=", e.choice.input_fused_across_time ? 1 : 0, " pipelined=", e.choice.pipelined ? 1 : 0,
                 " rbm_one_barrier=", e.choice.rbm_one_barrier ? 1 : 0, " helpers=", e.choice.projection_helpers ? 1 : 0, " ns=", static_cast<unsigned long long>(std::llround(std::max(0.0, e.seconds) * 1e9)), " ran=", e.ran, "\n");
    return s + cat("end entries=", entries.size(), " fnv1a64=", hex16(fnv1a64(s.data(), s.size())), "\n");
}

PlanFile parse_plan_cache(const char* data, size_t size, const std::string& version, const MachineId& machine) {
    PlanFile f;
    auto reject = [&f](const std::string& why) {
        f.ok = false;
        f.error = why;
        f.entries.clear();
        return f;
    };
    if (!data && size) return reject("no data");
    if (size > kMaxFileBytes) return reject(cat("too large (", size, " bytes)"));
    std::vector<std::string> lines;
    std::vector<size_t> starts;
    size_t b = 0;
    for (size_t i = 0; i < size; ++i) {
        const unsigned char ch = data[i];
        if (ch == '\n') {
            starts.push_back(b);
            lines.emplace_back(data + b, i - b);
            b = i + 1;
        } else if (ch < 0x20 || ch > 0x7e) {
            return reject(cat("not text (byte ", static_cast<int>(ch), " at offset ", i, ")"));
        }
    }
    if (!lines.empty() && lines[0] != kMagic)
        return reject("not a deeprnn plan cache (first line is not \"" + std::string(kMagic) + "\")");
    if (lines.empty() || b != size) return reject("truncated (last line unfinished)");
    uint64_t count = 0;
    const std::vector<std::string> end = split_spaces(lines.back());
    if (end.size() != 3 || end[0] != "end" || !field(end[1], "entries", 0, kMaxEntries, &count) ||
        end[2].size() != 8 + 16 || end[2].compare(0, 8, "fnv1a64="))
        return reject("truncated (no end line)");
    const size_t body = starts.back();
    if (end[2].substr(8) != hex16(fnv1a64(data, body))) return reject("checksum mismatch (corrupt or edited)");
    if (lines.size() < 4 || lines[1].compare(0, 8, "version ")) return reject("no version line");
    if (lines[1] != "version " + version)
        return reject(cat("written by deeprnn ", lines[1].substr(8), ", this is ", version, " (stale)"));
    if (lines[2] != "machine " + machine.line())
        return reject(cat("written on another machine (", lines[2].substr(std::min<size_t>(8, lines[2].size())),
                          "), this is ", machine.line()));
    if (lines.size() - 4 != count) return reject(cat("end line says ", count, " entries, file has ", lines.size() - 4));
    for (size_t i = 3; i + 1 < lines.size(); ++i) {
        std::string key;
        PlanEntry e;
        if (!parse_plan_line(lines[i], &key, &e)) return reject(cat("malformed plan on line ", i + 1));
        if (!f.entries.emplace(key, e).second) return reject(cat("duplicate plan on line ", i + 1));
    }
    f.ok = true;
    return f;
}

namespace {

// Reads the whole file; false with a message if it exists but cannot be read.
bool read_file(const std::string& path, std::string* text, bool* exists, std::string* message) {
    std::ifstream in(path, std::ios::binary);
    *exists = static_cast<bool>(in);
    if (!in) return true;
    std::ostringstream s;
    s << in.rdbuf();
    if (in.bad()) {
        *message = "plan cache " + path + ": read error; ignored";
        return false;
    }
    *text = s.str();
    return true;
}

}  // namespace

bool plan_cache_lookup(const std::string& path, const std::string& key, const MachineId& machine, PlanEntry* out,
                       std::string* message) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    const auto mem = g_memory.find(machine.line() + "|" + key);
    if (mem != g_memory.end()) {
        *out = mem->second;
        return true;
    }
    if (path.empty()) return false;
    std::string text, msg;
    bool exists = false;
    if (!read_file(path, &text, &exists, &msg) || !exists) {
        if (message) *message = msg;
        return false;
    }
    const PlanFile f = parse_plan_cache(text.data(), text.size(), DEEPRNN_VERSION_STRING, machine);
    if (!f.ok) {
        if (message) *message = "plan cache " + path + ": " + f.error + "; ignored";
        return false;
    }
    const auto it = f.entries.find(key);
    if (it == f.entries.end()) return false;
    g_memory[machine.line() + "|" + key] = it->second;
    *out = it->second;
    return true;
}

bool plan_cache_store(const std::string& path, const std::string& key, const MachineId& machine,
                      const PlanEntry& entry, std::string* message) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_memory[machine.line() + "|" + key] = entry;
    if (path.empty()) return true;
    // Keep the file's other valid plans; a stale or corrupt file is replaced.
    std::string text, msg;
    bool exists = false;
    std::map<std::string, PlanEntry> entries;
    if (read_file(path, &text, &exists, &msg) && exists) {
        PlanFile f = parse_plan_cache(text.data(), text.size(), DEEPRNN_VERSION_STRING, machine);
        if (f.ok) entries = std::move(f.entries);
    }
    entries[key] = entry;
    while (entries.size() > kMaxEntries) entries.erase(entries.begin());
    const std::string out = serialize_plan_cache(entries, DEEPRNN_VERSION_STRING, machine);
    // Write a temporary file and rename it: readers see the old or the new file, never half of one.
    const std::string tmp = cat(path, ".tmp.", getpid());
    std::FILE* fp = std::fopen(tmp.c_str(), "wb");
    bool ok = fp && std::fwrite(out.data(), 1, out.size(), fp) == out.size();
    if (fp) ok = std::fclose(fp) == 0 && ok;
    if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
        const int err = errno;
        std::remove(tmp.c_str());
        if (message) *message = "plan cache " + path + ": cannot write (" + std::strerror(err) + "); plan kept in memory";
    }
    return ok;
}

void plan_cache_clear_memory() {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_memory.clear();
}

// ---------------------------------------------------------------------------
// The engine's one call
// ---------------------------------------------------------------------------

PlanDecision choose_plan(const Problem& p, const MachineModel& machine, Tuning tuning, double budget_s,
                         const std::string& cache_path, const std::function<double(const Candidate&)>& time_one) {
    PlanDecision d;
    d.candidates = rank_candidates(p, machine);
    const int h = best_executable(d.candidates);
    if (h < 0) fail("internal: no executable plan candidate");
    d.chosen = d.candidates[h];
    d.calibration.best = h;
    d.calibration.measured.assign(d.candidates.size(), -1.0);
    if (tuning != Tuning::heuristic && !time_one)
        d.log.push_back({LogLevel::warning, "plan: no timer for calibration; analytic choice"});
    if (tuning == Tuning::heuristic || !time_one) {
        d.how = "analytic";
        d.log.push_back({LogLevel::info, cat("plan: analytic: ", d.chosen.choice.str(), " (predicted ",
                                             d.chosen.seconds, " s per sequence)")});
        d.log.push_back({LogLevel::debug, describe_candidates(d)});
        return d;
    }
    const MachineId mid = machine_id(read_cpu_model(), machine.caches);
    const std::string key = plan_key(p);
    if (tuning == Tuning::calibrate) {
        PlanEntry e;
        std::string msg;
        const bool hit = plan_cache_lookup(cache_path, key, mid, &e, &msg);
        if (!msg.empty()) d.log.push_back({LogLevel::warning, msg});
        if (hit) {
            for (size_t i = 0; i < d.candidates.size(); ++i)
                if (d.candidates[i].executable && d.candidates[i].choice == e.choice) {
                    d.chosen = d.candidates[i];
                    d.calibration.best = static_cast<int>(i);
                    d.calibration.best_seconds = e.seconds;
                    d.from_cache = true;
                    d.how = "from the plan cache";
                    d.log.push_back({LogLevel::info, cat("plan: from cache: ", e.choice.str(), " (measured ", e.seconds,
                                                         " s; ", e.ran, " candidates timed then)")});
                    d.log.push_back({LogLevel::debug, describe_candidates(d)});
                    return d;
                }
            d.log.push_back({LogLevel::warning, "plan: cached plan " + e.choice.str() + " is not a candidate; ignored"});
        }
    }
    const bool all = tuning == Tuning::exhaustive;
    d.calibration = calibrate(d.candidates, all ? std::numeric_limits<double>::infinity() : budget_s, time_one,
                              all ? std::numeric_limits<int>::max() : 8, 3, !all);
    d.chosen = d.candidates[d.calibration.best];
    d.how = d.calibration.ran == 0 ? "analytic (nothing fit the budget)" : all ? "exhaustive" : "calibrated";
    d.log.push_back({LogLevel::info, "plan: " + d.calibration.summary});
    if (d.calibration.ran > 0) {
        std::string msg;
        const PlanEntry e{d.chosen.choice, d.calibration.best_seconds, d.calibration.ran};
        if (!plan_cache_store(cache_path, key, mid, e, &msg)) d.log.push_back({LogLevel::warning, msg});
    }
    d.log.push_back({LogLevel::debug, describe_candidates(d)});
    return d;
}

namespace {

const char* mode_name(const ExecutionChoice& c) {
    if (c.rbm_one_barrier) return c.side_by_side ? "s+1b" : "1bar";
    return c.side_by_side ? "side" : c.pipelined ? "pipe" : c.projection_helpers ? "help" : "-";
}

}  // namespace

std::string describe_candidates(const PlanDecision& d, int top) {
    const std::vector<Candidate>& c = d.candidates;
    const bool timed = std::any_of(d.calibration.measured.begin(), d.calibration.measured.end(),
                                   [](double t) { return t >= 0; });
    std::string s = cat("plan candidates: ", c.size(), ", fastest predicted first (tiling: per product xi x xj x xk, ",
                        "L2 = weights stay in L2; || = products side by side; mode: side = directions side by side, "
                        "pipe = layers pipelined, 1bar = GRU reset product reduced with one barrier per step, "
                        "help = recurrence on one worker, input projection on all of them)\n");
    char line[512];
    std::snprintf(line, sizeof line, "%5s %-4s %7s %4s %5s %4s %12s %12s %12s  %s\n", "rank", "sch", "workers", "mode",
                  "fused", "exec", "MB/sequence", "predicted_us", "measured_us", "tiling (layer 0)");
    s += line;
    for (size_t i = 0; i < c.size() && (top <= 0 || static_cast<int>(i) < top); ++i) {
        const double m = i < d.calibration.measured.size() ? d.calibration.measured[i] : -1;
        char measured[32] = "-";
        if (m >= 0) std::snprintf(measured, sizeof measured, "%.1f", m * 1e6);
        std::snprintf(line, sizeof line, "%5zu S%-3d %7d %4s %5d %4s %12.3f %12.1f %12s  %s%s\n", i + 1, c[i].schedule,
                      c[i].choice.workers, mode_name(c[i].choice),
                      c[i].choice.input_fused_across_time ? 1 : 0, c[i].executable ? "yes" : "-", c[i].bytes / 1e6,
                      c[i].seconds * 1e6, measured, c[i].tiling.c_str(),
                      static_cast<int>(i) == d.calibration.best ? "  <- winner" : "");
        s += line;
    }
    std::snprintf(line, sizeof line, "), predicted %.1f us per sequence, %.3f MB L3<->L2", d.chosen.seconds * 1e6,
                  d.chosen.bytes / 1e6);
    s += cat("winner: S", d.chosen.schedule, " ", d.chosen.choice.str(), " (", d.how.empty() ? "analytic" : d.how, line);
    if (d.calibration.best_seconds > 0) {
        std::snprintf(line, sizeof line, ", measured %.1f us%s", d.calibration.best_seconds * 1e6,
                      d.from_cache ? " (when it was cached)" : "");
        s += line;
    }
    if (timed) s += cat("\n", d.calibration.summary);
    const int w = best_executable(c);
    if (w > 0) {
        std::snprintf(line, sizeof line, ", predicted %.1f us", c[0].seconds * 1e6);
        s += cat("\nbest modeled (not executable yet): S", c[0].schedule, " ", c[0].choice.str(), " tiling ",
                 c[0].tiling, line);
    }
    return s;
}

}  // namespace sched
}  // namespace detail
}  // namespace deeprnn
