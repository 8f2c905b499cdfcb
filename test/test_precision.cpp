// Reduced-precision recurrent weights (Config.weight_precision): the packed
// kernels against an exact dequantised reference, every cell's output error
// against its own f32 run, and the determinism contracts kept at every precision.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "reference.hpp"
#include "src/kernels.hpp"

namespace {

using deeprnn::WeightPrecision;

std::vector<float> uniform(std::mt19937& rng, size_t n, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& e : v) e = u(rng);
    return v;
}

// Every kernel path this CPU runs, best first: an AVX-512 host tests AVX2's
// kernels too (they differ in blocking: gemm_avx2_split).
std::vector<deeprnn::detail::Isa> kernel_isas() {
    std::vector<deeprnn::detail::Isa> isas;
    using deeprnn::detail::Isa;
    for (Isa isa : {Isa::avx512, Isa::avx2, Isa::baseline})
        if (deeprnn::detail::simd_level_supported(isa)) isas.push_back(isa);
    return isas;
}

// What a stored weight means: bf16 truncated to its top 16 bits after rounding
// to nearest even; int8 q * (max|row| / 127).
double stored(float w, WeightPrecision p, float row_max) {
    if (p == WeightPrecision::f32) return w;
    if (p == WeightPrecision::bf16) {
        uint32_t u;
        std::memcpy(&u, &w, 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    const float s = row_max / 127.0f;
    return s > 0 ? std::nearbyint(w / s) * static_cast<double>(s) : 0.0;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return std::sqrt(num / den);
}

struct Case {
    deeprnn::Cell cell;
    deeprnn::GruVariant variant;
    int hidden, proj;
};

deeprnn::Config config_of(const Case& k, WeightPrecision p, int threads) {
    deeprnn::Config c;
    c.cell = k.cell;
    c.gru_variant = k.variant;
    c.input_size = 48;
    c.hidden_size = k.hidden;
    c.proj_size = k.proj;
    c.num_layers = 2;
    c.threads = threads;
    c.max_batch = 4;
    c.weight_precision = p;
    return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(precision)

// The kernel computes exactly what the stored weights mean, at every batch
// row count (1, a register block, sliced k): relative 1e-5 covers float
// summation of K = 700 terms against a double reference.
BOOST_AUTO_TEST_CASE(packed_kernels_match_dequantised_reference) {
    std::mt19937 rng(5);
    const int rows = 75, K = 700;
    const std::vector<float> W = uniform(rng, static_cast<size_t>(rows) * K, 0.05f);
    const std::vector<float> bias = uniform(rng, rows, 0.5f);
    std::vector<float> row_max(rows, 0.0f);
    for (int i = 0; i < rows; ++i)
        for (int k = 0; k < K; ++k) row_max[i] = std::max(row_max[i], std::fabs(W[static_cast<size_t>(i) * K + k]));
    // This CPU's best path (AVX-512: int8 through VNNI where present) and the portable one.
    for (deeprnn::detail::Isa isa : kernel_isas())
    for (WeightPrecision p : {WeightPrecision::f32, WeightPrecision::bf16, WeightPrecision::int8})
    for (bool dots : {false, true}) {  // bf16: also the AVX512_BF16 dot products, where present
        if (dots && p != WeightPrecision::bf16) continue;
        const deeprnn::detail::PackedMatrix m =
            deeprnn::detail::pack_matrix(isa, rows, K, W.data(), K, [](int i) -> long { return i; }, p, dots);
        if (dots && !m.dot_bf16) continue;
        // Full groups of 4 panels take element_bytes per weight; a tail group is
        // padded to whole 32-bit lanes; int8 adds one float scale per row.
        size_t want_bytes = p == WeightPrecision::int8 ? m.rows * 4u : 0u;
        for (int g0 = 0; g0 < m.rows; g0 += 4 * m.width) {
            const int np = std::min(4, (m.rows - g0) / m.width);
            want_bytes += deeprnn::detail::lanes_per_k(p, np, m.width) * 4 * K;
            if (np == 4) BOOST_TEST(deeprnn::detail::lanes_per_k(p, np, m.width) * 4 == 4u * m.width * deeprnn::detail::element_bytes(p));
        }
        if (m.vnni) want_bytes = static_cast<size_t>(m.rows) * ((K + 3) / 4 * 4 + 8);  // + scale + row sum
        if (m.dot_bf16) want_bytes = static_cast<size_t>(m.rows) * ((K + 1) / 2 * 4);
        BOOST_TEST(m.bytes() == want_bytes);
        for (int n : {1, 2, 3, 4, 6, 9}) {  // the dot kernels: blocks of 4 rows and the rest in one
            std::vector<float> X = uniform(rng, static_cast<size_t>(n) * K, 1.0f);
            // The VNNI path also quantises each row of X to 8 bits (max|x| / 127 steps);
            // the reference multiplies what it effectively uses.
            std::vector<double> Xq(X.begin(), X.end());
            if (m.dot_bf16)  // X is rounded to bf16 as well
                for (size_t i = 0; i < X.size(); ++i) Xq[i] = stored(X[i], WeightPrecision::bf16, 0);
            if (m.vnni)
                for (int r = 0; r < n; ++r) {
                    float top = 0;
                    for (int k = 0; k < K; ++k) top = std::max(top, std::fabs(X[static_cast<size_t>(r) * K + k]));
                    const float sx = top / 127.0f;
                    for (int k = 0; k < K; ++k) {
                        double& v = Xq[static_cast<size_t>(r) * K + k];
                        v = std::nearbyint(X[static_cast<size_t>(r) * K + k] * (127.0f / top)) * static_cast<double>(sx);
                    }
                }
            std::vector<float> Y(static_cast<size_t>(n) * m.rows), padded_bias(bias);
            padded_bias.resize(m.rows, 0.0f);  // the kernel reads whole vectors: W.rows biases
            deeprnn::detail::gemm_packed(m, X.data(), K, n, padded_bias.data(), Y.data(), m.rows);
            double worst = 0;
            for (int r = 0; r < n; ++r)
                for (int i = 0; i < rows; ++i) {
                    double want = bias[i], mag = std::fabs(bias[i]);
                    for (int k = 0; k < K; ++k) {
                        const double t = stored(W[static_cast<size_t>(i) * K + k], p, row_max[i]) * Xq[static_cast<size_t>(r) * K + k];
                        want += t;
                        mag += std::fabs(t);
                    }
                    worst = std::max(worst, std::fabs(Y[static_cast<size_t>(r) * m.rows + i] - want) / mag);
                }
            BOOST_TEST(worst <= 1e-5, deeprnn::detail::isa_name(isa) << (m.vnni ? " vnni " : m.dot_bf16 ? " bf16-dot " : " ") << deeprnn::to_string(p)
                                                                << " rows of X = " << n << ": " << worst);
        }
    }
}

// gemm_packed takes a long X (a whole sequence's input projection) in chunks
// of rows that stay in L2 while every panel group passes over them; a row's
// outputs must not depend on that, nor on its register block: 700 rows at
// K = 512 in chunks of the default 256 KiB (6 chunks of 120 rows at 16
// floats a vector), of 8 KiB (one register block each) and of 1 MiB (the
// engine's for weights that do not stay in L2: set_projection_chunks),
// against each row alone, compared bit for bit at every precision and path
// this CPU has. The dot-product kernels (int8 on VNNI, bf16 on AVX512_BF16)
// take their own blocks of rows instead (128 and 64 rows at this K: kDotBlockBytes).
BOOST_AUTO_TEST_CASE(a_long_x_in_row_chunks_gives_each_row_its_bits_alone) {
    std::mt19937 rng(11);
    const int K = 512, n = 700;
    const std::vector<float> X = uniform(rng, static_cast<size_t>(n) * K, 1.0f);
    // A last group of 1 panel and of 3 (AVX2, where 3 or more rows take a
    // group in passes of 2 panels: gemm_avx2_split), 1 and 2 (AVX-512).
    for (int rows : {200, 216})
    for (deeprnn::detail::Isa isa : kernel_isas())
    for (WeightPrecision p : {WeightPrecision::f32, WeightPrecision::bf16, WeightPrecision::int8})
    for (bool dots : {false, true}) {  // bf16: also the AVX512_BF16 dot products, where present
        if (dots && p != WeightPrecision::bf16) continue;
        const std::vector<float> W = uniform(rng, static_cast<size_t>(rows) * K, 0.05f);
        deeprnn::detail::PackedMatrix m =
            deeprnn::detail::pack_matrix(isa, rows, K, W.data(), K, [](int i) -> long { return i; }, p, dots);
        if (dots && !m.dot_bf16) continue;
        std::vector<float> bias = uniform(rng, m.rows, 0.5f), all(static_cast<size_t>(n) * m.rows), one(m.rows);
        for (size_t chunk_bytes : {size_t(256) << 10, size_t(8) << 10, size_t(1) << 20}) {
            m.x_chunk_bytes = chunk_bytes;
            deeprnn::detail::gemm_packed(m, X.data(), K, n, bias.data(), all.data(), m.rows);
            int differ = 0;
            for (int r = 0; r < n; ++r) {
                deeprnn::detail::gemm_packed(m, X.data() + static_cast<size_t>(r) * K, K, 1, bias.data(), one.data(), m.rows);
                differ += std::memcmp(one.data(), all.data() + static_cast<size_t>(r) * m.rows, one.size() * sizeof(float)) != 0;
            }
            BOOST_TEST(differ == 0, deeprnn::detail::isa_name(isa) << " " << deeprnn::to_string(p) << (dots ? " dots" : "") << ", " << rows << " rows, chunks of "
                                                                   << chunk_bytes << " bytes: " << differ << " rows differ");
        }
    }
}

// Weights over kPrefetchBytes take the prefetching kernel at 1 and 2 rows on
// AVX2 (the split kernel from 3 rows): every row still gets its bits alone,
// since each output stays one FMA chain over k in order.
BOOST_AUTO_TEST_CASE(weights_too_big_for_the_l3_give_each_row_its_bits_alone) {
    namespace d = deeprnn::detail;
    std::mt19937 rng(17);
    const int K = 1024, rows = static_cast<int>(d::kPrefetchBytes / (sizeof(float) * K)) + 256, n = 5;
    const std::vector<float> W = uniform(rng, static_cast<size_t>(rows) * K, 0.05f);
    const std::vector<float> X = uniform(rng, static_cast<size_t>(n) * K, 1.0f);
    for (d::Isa isa : kernel_isas())
    for (WeightPrecision p : {WeightPrecision::f32, WeightPrecision::bf16}) {
        const d::PackedMatrix m = d::pack_matrix(isa, rows, K, W.data(), K, [](int i) -> long { return i; }, p);
        if (p == WeightPrecision::f32) BOOST_TEST(m.bytes() > d::kPrefetchBytes);
        const std::vector<float> bias = uniform(rng, m.rows, 0.5f);
        std::vector<float> all(static_cast<size_t>(n) * m.rows), two(2 * static_cast<size_t>(m.rows)), one(m.rows);
        d::gemm_packed(m, X.data(), K, n, bias.data(), all.data(), m.rows);
        int differ = 0;
        for (int r = 0; r < n; ++r) {
            d::gemm_packed(m, X.data() + static_cast<size_t>(r) * K, K, 1, bias.data(), one.data(), m.rows);
            differ += std::memcmp(one.data(), all.data() + static_cast<size_t>(r) * m.rows, one.size() * sizeof(float)) != 0;
        }
        d::gemm_packed(m, X.data(), K, 2, bias.data(), two.data(), m.rows);
        differ += std::memcmp(two.data(), all.data(), two.size() * sizeof(float)) != 0;
        BOOST_TEST(differ == 0, d::isa_name(isa) << " " << deeprnn::to_string(p) << ": " << differ << " of " << n + 1 << " differ");
    }
}

// The dot-product kernels convert X in blocks on the stack, so inputs too
// wide for 4 rows of a block keep the other kernels (dot_kernel_fits):
// int8 up to K = 16,384 on VNNI, bf16 dots up to 8,192; one past, not. The
// wide ones still give each row the bits it has alone.
BOOST_AUTO_TEST_CASE(inputs_too_wide_for_the_dot_kernels_stack_block_keep_the_other_kernels) {
    namespace d = deeprnn::detail;
    std::mt19937 rng(13);
    const d::Isa isa = d::detect_isa();
    for (const auto& [p, limit] : {std::pair<WeightPrecision, int>{WeightPrecision::int8, 16384}, {WeightPrecision::bf16, 8192}}) {
        BOOST_TEST(d::dot_kernel_fits(p, limit));
        BOOST_TEST(!d::dot_kernel_fits(p, limit + 1));
        for (int K : {limit, limit + 1}) {
            const int rows = 20, n = 9;
            const std::vector<float> W = uniform(rng, static_cast<size_t>(rows) * K, 0.05f);
            const std::vector<float> X = uniform(rng, static_cast<size_t>(n) * K, 1.0f);
            const d::PackedMatrix m = d::pack_matrix(isa, rows, K, W.data(), K, [](int i) -> long { return i; }, p, true);
            const bool dots = isa == d::Isa::avx512 && (p == WeightPrecision::int8 ? d::cpu_has_vnni() : d::cpu_has_bf16_dot());
            BOOST_TEST((m.vnni || m.dot_bf16) == (dots && K == limit), deeprnn::to_string(p) << " K = " << K);
            std::vector<float> all(static_cast<size_t>(n) * m.rows), one(m.rows);
            d::gemm_packed(m, X.data(), K, n, nullptr, all.data(), m.rows);
            for (int r = 0; r < n; ++r) {
                d::gemm_packed(m, X.data() + static_cast<size_t>(r) * K, K, 1, nullptr, one.data(), m.rows);
                BOOST_TEST(std::memcmp(one.data(), all.data() + static_cast<size_t>(r) * m.rows, one.size() * sizeof(float)) == 0,
                           deeprnn::to_string(p) << " K = " << K << " row " << r);
            }
        }
    }
}

// The folded batch-1 kernel against gemm_packed, bit for bit: Yh = Wh·h and
// every projected row of X for each of a chunk's kProjectAhead steps. Row
// counts whose last panel group is partial (16 x 21 rows at AVX-512: five
// groups of 4 and one of 1), so some steps pair panels across groups of
// different strides and others take one alone; Kh < Kx and Kh > Kx, and K
// not a multiple of 4 (int8 pads it; odd K, bf16 pads it). f32, int8 on VNNI
// and bf16 on AVX512_BF16. Exact equality: f32, each output is the same
// chain of fused multiply-adds over k from the same start; bf16, the same
// chain of dot products over pairs of k of the same rounded rows; int8, the
// same exact integer sums and the same last rounding (kernels.hpp).
BOOST_AUTO_TEST_CASE(the_folded_kernel_gives_the_plain_kernels_bits) {
    using namespace deeprnn::detail;
    const Isa isa = detect_isa();
    const int width = isa_width(isa), R = kProjectAhead;
    std::mt19937 rng(23);
    for (WeightPrecision precision : {WeightPrecision::f32, WeightPrecision::int8, WeightPrecision::bf16})
        for (int panels : {1, 3, 5, 8, 13, 21})
            for (auto [Kh, Kx] : {std::pair{40, 24}, std::pair{24, 40}, std::pair{64, 64}, std::pair{37, 22}}) {
                const int rows = panels * width;
                const std::vector<float> wh = uniform(rng, static_cast<size_t>(rows) * Kh, 0.1f),
                                         wx = uniform(rng, static_cast<size_t>(rows) * Kx, 0.1f);
                const auto id = [](int i) -> long { return i; };
                const bool dots = precision == WeightPrecision::bf16;  // bf16's dot-product layout, where the CPU has it
                const PackedMatrix Wh = pack_matrix(isa, rows, Kh, wh.data(), Kh, id, precision, dots),
                                   Wx = pack_matrix(isa, rows, Kx, wx.data(), Kx, id, precision, dots);
                if (!folds_projection(Wh, Wx)) continue;  // f32 on AVX-512, int8 on VNNI, bf16 on AVX512_BF16
                const std::vector<float> h = uniform(rng, Kh, 1.0f), X = uniform(rng, static_cast<size_t>(R) * Kx, 1.0f),
                                         bias = uniform(rng, rows, 0.5f);
                std::vector<float> ahead(ahead_floats(Kx));
                pack_ahead(Wx, X.data(), Kx, ahead.data());
                std::vector<float> want_h(rows), want_x(static_cast<size_t>(R) * rows);
                gemm_packed(Wh, h.data(), Kh, 1, nullptr, want_h.data(), rows);
                gemm_packed(Wx, X.data(), Kx, R, bias.data(), want_x.data(), rows);
                std::vector<float> got_x(want_x.size(), NAN);
                const std::string what = std::string(deeprnn::to_string(precision)) + ", " + std::to_string(panels) + " panels, Kh " +
                                         std::to_string(Kh) + ", Kx " + std::to_string(Kx);
                for (int j = 0; j < R; ++j) {
                    std::vector<float> got_h(rows, NAN);
                    gemv_with_projection(Wh, h.data(), got_h.data(), j & 1, Wx, j * panels / R, (j + 1) * panels / R,
                                         ahead.data(), bias.data(), got_x.data(), rows);
                    BOOST_TEST(std::memcmp(got_h.data(), want_h.data(), rows * sizeof(float)) == 0,
                               what << ", step " << j << ": Wh·h differs");
                }
                BOOST_TEST(std::memcmp(got_x.data(), want_x.data(), want_x.size() * sizeof(float)) == 0,
                           what << ": the projection differs (or a panel was skipped)");
            }
}

// Whole models: the output over all steps and both layers against the same
// model in f32. Weights as PyTorch initialises them, U(-1/sqrt(H), 1/sqrt(H)).
// Bounds are the targets (bf16 5e-3, int8 2e-2); measured values are
// printed with --log_level=message: about 5e-4 (bf16) and 1.3e-3 (int8),
// up to 2e-3 and 4.4e-3, where the weights are widened to f32; where dot
// products round or quantise the operands too, bf16 1.0-3.3e-3 (AVX512_BF16)
// and int8 3.0e-3-1.0e-2 (VNNI).
BOOST_AUTO_TEST_CASE(output_error_vs_f32_every_cell) {
    using C = deeprnn::Cell;
    using V = deeprnn::GruVariant;
    const Case cases[] = {
        {C::lstm, V::linear_before_reset, 64, 0},       {C::lstm, V::linear_before_reset, 256, 0},
        {C::lstm, V::linear_before_reset, 1024, 0},     {C::lstm, V::linear_before_reset, 128, 48},
        {C::gru, V::linear_before_reset, 64, 0},        {C::gru, V::linear_before_reset, 1024, 0},
        {C::gru, V::reset_before_matmul, 256, 0},       {C::rnn_tanh, V::linear_before_reset, 256, 0},
        {C::rnn_relu, V::linear_before_reset, 256, 0},
    };
    const int T = 24, B = 2;
    for (const Case& k : cases) {
        std::mt19937 rng(17 + k.hidden);
        const deeprnn::Config c32 = config_of(k, WeightPrecision::f32, 1);
        const deeprnn::Weights w = ref::torch_weights(ref::random_net(c32, rng, 1.0 / std::sqrt(k.hidden)));
        const std::vector<float> x = uniform(rng, static_cast<size_t>(T) * B * c32.input_size, 1.0f);
        const std::vector<float> want = ref::run_model(deeprnn::Model(c32, w), x, T, B);
        for (auto [p, bound] : {std::pair{WeightPrecision::bf16, 5e-3}, std::pair{WeightPrecision::int8, 2e-2}}) {
            const double err = rel_l2(ref::run_model(deeprnn::Model(config_of(k, p, 1), w), x, T, B), want);
            BOOST_TEST_MESSAGE(deeprnn::to_string(k.cell) << " H=" << k.hidden << " P=" << k.proj << " "
                                                          << deeprnn::to_string(p) << ": relative L2 " << err);
            BOOST_TEST(err <= bound, deeprnn::to_string(k.cell) << " " << deeprnn::to_string(k.variant) << " H="
                                                                << k.hidden << " " << deeprnn::to_string(p) << ": " << err);
        }
    }
}

// Reduced precision keeps the library's determinism: the same bits for 1 and
// 2 threads, for a stream fed in chunks, and the plan says what it stores.
BOOST_AUTO_TEST_CASE(deterministic_across_threads_and_chunks) {
    const Case k{deeprnn::Cell::lstm, deeprnn::GruVariant::linear_before_reset, 200, 0};
    const int T = 12, B = 1;
    for (WeightPrecision p : {WeightPrecision::bf16, WeightPrecision::int8}) {
        std::mt19937 rng(3);
        const deeprnn::Weights w = ref::torch_weights(ref::random_net(config_of(k, p, 1), rng, 0.07));
        const std::vector<float> x = uniform(rng, static_cast<size_t>(T) * B * 48, 1.0f);
        const deeprnn::Model one(config_of(k, p, 1), w), two(config_of(k, p, 2), w);
        BOOST_TEST(one.plan().find(std::string("recurrent weights ") + deeprnn::to_string(p)) != std::string::npos, one.plan());
        const std::vector<float> y1 = ref::run_model(one, x, T, B);
        BOOST_TEST((y1 == ref::run_model(two, x, T, B)), deeprnn::to_string(p) << ": 1 vs 2 threads");
        deeprnn::Stream s(two);
        std::vector<float> y(y1.size());
        const int S = one.output_size();
        for (int t = 0; t < T; t += 5) s.push(&x[static_cast<size_t>(t) * 48], std::min(5, T - t), &y[static_cast<size_t>(t) * S]);
        BOOST_TEST((y == y1), deeprnn::to_string(p) << ": chunks of 5 vs one run");
    }
}

// A non-finite weight poisons its row's outputs at every precision, as in f32;
// it never becomes a large finite number.
BOOST_AUTO_TEST_CASE(non_finite_weights_propagate) {
    const Case k{deeprnn::Cell::rnn_tanh, deeprnn::GruVariant::linear_before_reset, 32, 0};
    for (WeightPrecision p : {WeightPrecision::f32, WeightPrecision::bf16, WeightPrecision::int8}) {
        deeprnn::Config c = config_of(k, p, 1);
        c.num_layers = 1;
        std::mt19937 rng(9);
        deeprnn::Weights w = ref::torch_weights(ref::random_net(c, rng, 0.1));
        w["weight_hh_l0"].data[5] = NAN;  // row 0 (unit 0), column 5
        const std::vector<float> x = uniform(rng, static_cast<size_t>(3) * 48, 1.0f);
        const std::vector<float> y = ref::run_model(deeprnn::Model(c, w), x, 3, 1);
        BOOST_TEST(std::isnan(y[0]), deeprnn::to_string(p) << ": unit 0 must be NaN (even 0 * NaN is NaN)");
        BOOST_TEST(std::isfinite(y[1]), deeprnn::to_string(p) << ": unit 1 is untouched at step 0");
        BOOST_TEST(std::isnan(y[32 + 1]), deeprnn::to_string(p) << ": through h, every unit is NaN at step 1");
    }
}

BOOST_AUTO_TEST_CASE(invalid_precision_is_named) {
    deeprnn::Config c = config_of({deeprnn::Cell::lstm, deeprnn::GruVariant::linear_before_reset, 8, 0},
                                  WeightPrecision::f32, 1);
    c.weight_precision = static_cast<WeightPrecision>(7);
    try {
        deeprnn::validate(c);
        BOOST_FAIL("no error");
    } catch (const deeprnn::Error& e) {
        BOOST_TEST(std::string(e.what()).find("Config.weight_precision") != std::string::npos, e.what());
    }
}

BOOST_AUTO_TEST_SUITE_END()
