// activation_sweep — exhaustive accuracy of the continued-fraction tanh/sigmoid.
//
// Runs every finite float through each term count and each SIMD level this CPU
// supports and compares with double-precision libm (tanh, 1/(1+exp(-x))).
// Prints the tables of docs/ACTIVATIONS.md and the kActivationAccuracy
// initializer of src/activations.cpp (worst over the levels swept; the library
// keeps those values rounded up, over GCC and Clang builds).
//
//   tools/amalgamate
//   g++ -std=c++17 -O3 -I. tools/activation_sweep.cpp deeprnn.cpp -o activation_sweep
//       -lopenblas -lboost_thread -lpthread       (one line)
//   ./activation_sweep                    # all levels, all terms: ~20 CPU-minutes, split over threads
//   ./activation_sweep --stride 4099      # a quick sample
//   ./activation_sweep --levels avx512 --terms 7
//
// Besides the errors it checks the promised shape on every input: |tanh| <= 1
// and 0 <= sigmoid <= 1, tanh odd bit for bit, monotone (largest step down
// between neighbouring floats), ±1 exactly where float tanh rounds to ±1, and
// no NaN from finite input.
#include "deeprnn.hpp"
#include "src/activations.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace deeprnn::detail;

namespace {

struct Stats {
    double max_abs = 0, max_abs_x = 0;   // worst absolute error and where
    // Relative and ulp errors: tanh over all x; sigmoid over x >= 0 (for x < 0
    // sigmoid = ½ + ½·tanh(x/2) is accurate in absolute terms only).
    double max_rel = 0, max_rel_x = 0;
    double max_ulp = 0, max_ulp_x = 0;   // in ulps of the exact result
    double max_descent = 0, max_descent_x = 0;  // largest step against monotonicity (absolute)
    int64_t out_of_range = 0, not_odd = 0, not_saturated = 0, nan_out = 0;

    void merge(const Stats& o) {
        if (o.max_abs > max_abs) max_abs = o.max_abs, max_abs_x = o.max_abs_x;
        if (o.max_rel > max_rel) max_rel = o.max_rel, max_rel_x = o.max_rel_x;
        if (o.max_ulp > max_ulp) max_ulp = o.max_ulp, max_ulp_x = o.max_ulp_x;
        if (o.max_descent > max_descent) max_descent = o.max_descent, max_descent_x = o.max_descent_x;
        out_of_range += o.out_of_range;
        not_odd += o.not_odd;
        not_saturated += o.not_saturated;
        nan_out += o.nan_out;
    }
};

// Spacing of floats at |v| (v is a double holding the exact result).
double ulp_at(double v) {
    const double a = std::fabs(v);
    if (a < 0x1p-126) return 0x1p-149;
    int e;
    std::frexp(a, &e);  // a = m·2^e, m in [0.5, 1)
    return std::ldexp(1.0, e - 24);
}

float from_bits(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// Where float tanh is ±1: tanh(x) > 1 - 2^-25 (rounds up to 1).
const double kTanhSaturates = std::atanh(1.0 - 0x1p-25);

struct Job {
    std::vector<Activations> tables;  // one per (level, terms)
    uint32_t stride = 1;
};

// Per-input factors, shared by every table: 1/|exact| and 1/ulp(exact), zero
// where that error is not reported (sigmoid below 0, exact result 0).
struct Side {
    std::vector<double> ref, inv_rel, inv_ulp;
    std::vector<float> x;  // the inputs, in increasing magnitude
    bool falling = false;  // values fall along the block (x <= 0)
};

// Accumulates one (table, function, side) over a block. The first loop has no
// branches (it vectorizes); where a block holds a new maximum, a second look
// finds its input.
void check_side(bool sigmoid, const Side& in, const std::vector<float>& y, float prev, bool contiguous, Stats& s) {
    const size_t n = y.size();
    double m_abs = 0, m_rel = 0, m_ulp = 0, m_down = 0;
    int64_t bad_range = 0, nan_out = 0, unsat = 0;
    for (size_t i = 0; i < n; ++i) {
        const double v = y[i], err = std::fabs(v - in.ref[i]);
        m_abs = std::max(m_abs, err);
        m_rel = std::max(m_rel, err * in.inv_rel[i]);
        m_ulp = std::max(m_ulp, err * in.inv_ulp[i]);
        const double before = i ? double(y[i - 1]) : double(prev);
        m_down = std::max(m_down, (i || contiguous) ? (in.falling ? v - before : before - v) : 0.0);
        bad_range += sigmoid ? (v < 0) | (v > 1) : std::fabs(v) > 1;
        nan_out += v != v;
        unsat += !sigmoid && std::fabs(in.x[i]) >= kTanhSaturates && std::fabs(v) != 1;
    }
    s.out_of_range += bad_range;
    s.nan_out += nan_out;
    s.not_saturated += unsat;
    auto where = [&](auto value_at, double m) {
        for (size_t i = 0; i < n; ++i)
            if (value_at(i) == m) return double(in.x[i]);
        return 0.0;
    };
    if (m_abs > s.max_abs) s.max_abs = m_abs, s.max_abs_x = where([&](size_t i) { return std::fabs(y[i] - in.ref[i]); }, m_abs);
    if (m_rel > s.max_rel)
        s.max_rel = m_rel, s.max_rel_x = where([&](size_t i) { return std::fabs(y[i] - in.ref[i]) * in.inv_rel[i]; }, m_rel);
    if (m_ulp > s.max_ulp)
        s.max_ulp = m_ulp, s.max_ulp_x = where([&](size_t i) { return std::fabs(y[i] - in.ref[i]) * in.inv_ulp[i]; }, m_ulp);
    if (m_down > s.max_descent) {
        s.max_descent = m_down;
        s.max_descent_x = where(
            [&](size_t i) {
                const double before = i ? double(y[i - 1]) : double(prev);
                return (i || contiguous) ? (in.falling ? y[i] - before : before - y[i]) : 0.0;
            },
            m_down);
    }
}

size_t count_not_odd(const std::vector<float>& y_pos, const std::vector<float>& y_neg) {
    size_t bad = 0;
    for (size_t i = 0; i < y_pos.size(); ++i) {
        uint32_t p, q;
        std::memcpy(&p, &y_pos[i], 4);
        std::memcpy(&q, &y_neg[i], 4);
        bad += q != (p ^ 0x80000000u);  // tanh(-x) == -tanh(x), bit for bit
    }
    return bad;
}

void run(const Job& job, uint32_t first_block, uint32_t end_block, std::vector<Stats>& stats) {
    constexpr uint32_t kBlock = 1u << 16;
    const size_t nt = job.tables.size();
    Side tp, tn, sp, sn;  // tanh and sigmoid, x >= 0 and x <= 0
    tn.falling = sn.falling = true;
    std::vector<float> yp, yn;
    std::vector<float> last(4 * nt, 0.0f);  // previous y per table: tanh+, tanh-, sig+, sig-
    bool contiguous = false;
    for (uint32_t b = first_block; b < end_block; ++b) {
        std::vector<float>& x = tp.x;
        x.clear();
        // Positive finite floats: bit patterns 0 .. 0x7f7fffff, every stride-th.
        const uint64_t begin = (uint64_t(b) * kBlock + job.stride - 1) / job.stride * job.stride;
        for (uint64_t bits = begin; bits < uint64_t(b + 1) * kBlock; bits += job.stride)
            if (bits <= 0x7f7fffffu) x.push_back(from_bits(uint32_t(bits)));
        if (x.empty()) continue;
        const size_t n = x.size();
        for (Side* side : {&tp, &tn, &sp, &sn}) {
            side->ref.resize(n), side->inv_rel.resize(n), side->inv_ulp.resize(n), side->x.resize(n);
        }
        yp.resize(n), yn.resize(n);
        for (size_t i = 0; i < n; ++i) {
            const double xv = x[i];
            tn.x[i] = sn.x[i] = -x[i];
            sp.x[i] = x[i];
            tp.ref[i] = std::tanh(xv);
            tn.ref[i] = -tp.ref[i];
            sp.ref[i] = 1.0 / (1.0 + std::exp(-xv));
            sn.ref[i] = 1.0 / (1.0 + std::exp(xv));
            tp.inv_rel[i] = tn.inv_rel[i] = tp.ref[i] != 0 ? 1 / std::fabs(tp.ref[i]) : 0.0;
            tp.inv_ulp[i] = tn.inv_ulp[i] = 1 / ulp_at(tp.ref[i]);
            sp.inv_rel[i] = 1 / sp.ref[i];
            sp.inv_ulp[i] = 1 / ulp_at(sp.ref[i]);
            sn.inv_rel[i] = sn.inv_ulp[i] = 0;  // sigmoid(x < 0): absolute error only
        }
        for (size_t t = 0; t < nt; ++t) {
            const Activations& a = job.tables[t];
            a.tanh(tp.x.data(), yp.data(), int64_t(n));
            a.tanh(tn.x.data(), yn.data(), int64_t(n));
            check_side(false, tp, yp, last[4 * t], contiguous, stats[2 * t]);
            check_side(false, tn, yn, last[4 * t + 1], contiguous, stats[2 * t]);
            stats[2 * t].not_odd += int64_t(count_not_odd(yp, yn));
            last[4 * t] = yp[n - 1], last[4 * t + 1] = yn[n - 1];
            a.sigmoid(sp.x.data(), yp.data(), int64_t(n));
            a.sigmoid(sn.x.data(), yn.data(), int64_t(n));
            check_side(true, sp, yp, last[4 * t + 2], contiguous, stats[2 * t + 1]);
            check_side(true, sn, yn, last[4 * t + 3], contiguous, stats[2 * t + 1]);
            last[4 * t + 2] = yp[n - 1], last[4 * t + 3] = yn[n - 1];
        }
        contiguous = true;
    }
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t comma = s.find(',', start);
        out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string levels_arg = "avx512,avx2,baseline";
    int terms_lo = 1, terms_hi = kMaxTerms;
    uint32_t stride = 1;
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--levels") levels_arg = v;
        else if (k == "--terms") {
            const size_t dash = v.find('-');
            terms_lo = std::atoi(v.c_str());
            terms_hi = dash == std::string::npos ? terms_lo : std::atoi(v.c_str() + dash + 1);
        } else if (k == "--stride") stride = uint32_t(std::max(1, std::atoi(v.c_str())));
        else if (k == "--threads") threads = unsigned(std::max(1, std::atoi(v.c_str())));
        else {
            std::fprintf(stderr, "usage: %s [--levels a,b] [--terms N|A-B] [--stride K] [--threads T]\n", argv[0]);
            return 2;
        }
    }
    Job job;
    job.stride = stride;
    std::vector<std::string> level_names;
    for (const std::string& name : split(levels_arg)) {
        Activations probe;
        try {
            probe = select_activations_for_isa(name.c_str(), 0);
        } catch (const deeprnn::Error& e) {
            std::fprintf(stderr, "skipping %s: %s\n", name.c_str(), e.what());
            continue;
        }
        level_names.push_back(probe.isa);
        for (int n = terms_lo; n <= terms_hi; ++n) job.tables.push_back(activations_with_terms(probe.level, n));
    }
    const size_t nt = job.tables.size();
    if (!nt) return 1;

    const uint32_t blocks = 0x7f800000u >> 16;  // positive finite patterns, in 2^16 blocks
    std::vector<std::vector<Stats>> per_thread(threads, std::vector<Stats>(2 * nt));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { run(job, blocks * t / threads, blocks * (t + 1) / threads, per_thread[t]); });
    for (std::thread& th : pool) th.join();
    std::vector<Stats> stats(2 * nt);
    for (const auto& ts : per_thread)
        for (size_t i = 0; i < stats.size(); ++i) stats[i].merge(ts[i]);

    if (stride == 1)
        std::printf("inputs: every finite float, x and -x\n\n");
    else
        std::printf("inputs: every %u-th finite float bit pattern, x and -x\n\n", stride);
    std::printf("| level | terms | tanh max abs | tanh max rel | tanh max ulp | sigmoid max abs | sigmoid max rel (x>=0) | sigmoid max ulp (x>=0) | max step down | checks |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t t = 0; t < nt; ++t) {
        const Stats& th = stats[2 * t];
        const Stats& sg = stats[2 * t + 1];
        const int64_t bad = th.out_of_range + sg.out_of_range + th.not_odd + th.nan_out + sg.nan_out;
        const Stats& worse = th.max_descent >= sg.max_descent ? th : sg;
        char descent[64] = "0";
        if (worse.max_descent > 0)
            std::snprintf(descent, sizeof descent, "%.2g (%s x=%.7g)", worse.max_descent, &worse == &th ? "tanh" : "sigmoid",
                          worse.max_descent_x);
        std::printf("| %s | %d | %.3g (x=%.7g) | %.3g (x=%.7g) | %.2f | %.3g (x=%.7g) | %.3g | %.2f | %s | %s%s |\n",
                    job.tables[t].isa, job.tables[t].terms, th.max_abs, th.max_abs_x, th.max_rel, th.max_rel_x,
                    th.max_ulp, sg.max_abs, sg.max_abs_x, sg.max_rel, sg.max_ulp, descent, bad ? "FAILED" : "ok",
                    th.not_saturated ? (" (" + std::to_string(th.not_saturated) + " not saturated)").c_str() : "");
    }
    // Worst over the levels, per term count: the library's bound.
    std::printf("\nconstexpr ActivationAccuracy kActivationAccuracy[kMaxTerms] = {  // worst of:");
    for (const std::string& l : level_names) std::printf(" %s", l.c_str());
    std::printf("\n");
    for (int n = terms_lo; n <= terms_hi; ++n) {
        Stats th, sg;
        for (size_t t = 0; t < nt; ++t)
            if (job.tables[t].terms == n) th.merge(stats[2 * t]), sg.merge(stats[2 * t + 1]);
        std::printf("    {%d, %.3e, %.3e, %.3e},\n", n, th.max_abs, th.max_rel, sg.max_abs);
    }
    std::printf("};\n");
    return 0;
}
