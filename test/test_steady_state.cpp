// Steady state: once a Session or Stream has seen its sizes, a run allocates
// nothing (counted by replacing the global operator new in this test binary).
// GCC pairs the replaced operator new below with the free() in the replaced
// operator delete and warns of a mismatch that is not one (both are ours).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

#include "allocations.hpp"
#include "reference.hpp"
#include "src/engine.hpp"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void allocation_count::begin() {
    allocations = 0;
    counting = true;
}

long allocation_count::end() {
    counting = false;
    return allocations.load();
}

// Every allocating form is replaced, so every delete matches its new (ASan checks).
static void* counted_alloc(std::size_t n) {
    if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return std::malloc(n ? n : 1); }    // std::stable_sort's buffer
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return std::malloc(n ? n : 1); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

BOOST_AUTO_TEST_SUITE(steady_state)

BOOST_AUTO_TEST_CASE(runs_allocate_nothing_after_the_first) {
    std::mt19937 rng(7);
    // threads 2: every run on the pool, then every run on the caller alone.
    // int8 and bf16: the dot-product kernels (VNNI, AVX512_BF16) convert X on the stack.
    for (const auto precision : {deeprnn::WeightPrecision::f32, deeprnn::WeightPrecision::bf16, deeprnn::WeightPrecision::int8})
    for (const auto& [threads, serial_rows] : {std::pair<int, long>{1, -1}, {2, 0}, {2, 1L << 30}}) {
        deeprnn::Config c;
        c.weight_precision = precision;
        c.cell = deeprnn::Cell::lstm;
        c.input_size = 24;
        c.hidden_size = 256;  // large enough to split across two workers
        c.num_layers = 2;
        c.direction = deeprnn::Direction::bidirectional;
        c.threads = threads;
        c.serial_rows = serial_rows;
        c.max_batch = 4;
        const ref::Net net = ref::random_net(c, rng, 0.1);
        deeprnn::Model model(c, ref::torch_weights(net));
        deeprnn::Session session(model);
        const int T = 12, B = 3;
        std::vector<float> x(static_cast<size_t>(T) * B * 24, 0.25f), y(static_cast<size_t>(T) * B * model.output_size());
        std::vector<float> hn(static_cast<size_t>(4) * B * 256), cn(hn.size());
        std::vector<int32_t> lengths = {12, 5, 0};
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = T;
        in.batch = B;
        in.lengths = lengths.data();
        deeprnn::RunOutput out;
        out.y = y.data();
        out.h_n = hn.data();
        out.c_n = cn.data();
        session.run(in, out);  // first run sizes the buffers
        in.batch_first = true;
        session.run(in, out);
        allocation_count::begin();
        for (int r = 0; r < 5; ++r) session.run(in, out);
        in.seq_len = 7;  // shorter than seen: still no allocation
        in.lengths = nullptr;
        session.run(in, out);
        const long allocated = allocation_count::end();
        BOOST_TEST(allocated == 0, deeprnn::to_string(precision) << " threads=" << threads << " serial_rows=" << serial_rows << ": " << allocated
                                                       << " allocations in steady-state runs");
    }
}

// Profiling (Session::set_profiling) keeps that: its clocks and the profile's
// workers are sized when it is turned on.
BOOST_AUTO_TEST_CASE(profiled_runs_allocate_nothing_after_the_first) {
    std::mt19937 rng(10);
    deeprnn::Config c;
    c.cell = deeprnn::Cell::gru;
    c.input_size = 16;
    c.hidden_size = 256;
    c.threads = 2;
    const ref::Net net = ref::random_net(c, rng, 0.1);
    for (long serial_rows : {0L, 1L << 30}) {
        c.serial_rows = serial_rows;
        deeprnn::Model model(c, ref::torch_weights(net));
        deeprnn::Session session(model);
        session.set_profiling(true);
        std::vector<float> x(static_cast<size_t>(20) * 16, 0.5f), y(static_cast<size_t>(20) * 256);
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = 20;
        deeprnn::RunOutput out;
        out.y = y.data();
        session.run(in, out);
        allocation_count::begin();
        for (int r = 0; r < 5; ++r) session.run(in, out);
        const long allocated = allocation_count::end();
        BOOST_TEST(allocated == 0, "serial_rows=" << serial_rows);
        BOOST_TEST(session.last_profile().seconds > 0);
    }
}

BOOST_AUTO_TEST_CASE(stream_push_allocates_nothing) {
    std::mt19937 rng(8);
    deeprnn::Config c;
    c.cell = deeprnn::Cell::gru;
    c.input_size = 16;
    c.hidden_size = 300;
    c.num_layers = 2;
    c.threads = 2;
    const ref::Net net = ref::random_net(c, rng, 0.1);
    for (long serial_rows : {0L, 1L << 30})  // steps on the pool, then on the caller alone
        for (bool profiling : {false, true}) {
            c.serial_rows = serial_rows;
            deeprnn::Model model(c, ref::torch_weights(net));
            deeprnn::Stream stream(model);
            stream.set_profiling(profiling);
            std::vector<float> frame(16, 0.5f), y(300);
            stream.push(frame.data(), 1, y.data());
            allocation_count::begin();
            for (int i = 0; i < 50; ++i) stream.push(frame.data(), 1, y.data());
            const long allocated = allocation_count::end();
            BOOST_TEST(allocated == 0, "serial_rows=" << serial_rows << " profiling=" << profiling);
            BOOST_TEST((stream.last_profile().seconds > 0) == profiling);
            // Two live streams taking turns (lengths), one slot reset between.
            deeprnn::Stream two(model, 2);
            std::vector<float> frames(2 * 16, 0.5f), y2(2 * 300);
            const int32_t first[2] = {1, 0}, second[2] = {0, 1};
            two.push(frames.data(), 1, y2.data(), first);
            two.push(frames.data(), 1, y2.data(), second);
            allocation_count::begin();
            for (int i = 0; i < 25; ++i) {
                two.push(frames.data(), 1, y2.data(), (i & 1) ? second : first);
                if (i % 5 == 4) two.reset(1);
            }
            BOOST_TEST(allocation_count::end() == 0, "lengths, serial_rows=" << serial_rows << " profiling=" << profiling);
        }
}

// Critical path first (ExecutionChoice::projection_helpers): the chunk claims
// and marks are sized with the projection buffers, so its runs allocate
// nothing either. An input wide against a small state makes the plan (fixed
// rates, this host's caches) choose it.
BOOST_AUTO_TEST_CASE(critical_path_first_runs_allocate_nothing_after_the_first) {
    namespace d = deeprnn::detail;
    std::mt19937 rng(9);
    deeprnn::Config c;
    c.input_size = 512;
    c.hidden_size = 64;
    c.num_layers = 2;
    c.threads = 2;
    c.max_batch = 1;
    c.serial_rows = 0;  // every run on the pool
    d::sched::MachineModel fixed;
    fixed.caches = d::sched::default_machine().caches;
    const auto m = d::build_model(c, d::import_weights(c, ref::torch_weights(ref::random_net(c, rng, 0.1))), fixed);
    BOOST_TEST_REQUIRE(m->helpers, m->choice.str());
    d::SessionImpl session(m);
    const int T = 40;
    std::vector<float> x(static_cast<size_t>(T) * 512, 0.25f), y(static_cast<size_t>(T) * 64), h(2 * 64), cc(2 * 64);
    session.forward(x.data(), T, 1, nullptr, y.data(), h.data(), cc.data());  // sizes the buffers
    allocation_count::begin();
    for (int r = 0; r < 5; ++r) session.forward(x.data(), T, 1, nullptr, y.data(), h.data(), cc.data());
    session.forward(x.data(), 7, 1, nullptr, y.data(), h.data(), cc.data());  // shorter than seen
    const long allocated = allocation_count::end();
    BOOST_TEST(allocated == 0, allocated << " allocations in steady-state runs");
}

// An LSTM of 12 inputs and 64 units for up to 2 sequences on 2 threads, random weights.
static std::shared_ptr<const deeprnn::detail::ModelImpl> long_run_model(int layers, deeprnn::Direction direction,
                                                                       unsigned seed) {
    namespace d = deeprnn::detail;
    std::mt19937 rng(seed);
    deeprnn::Config c;
    c.input_size = 12;
    c.hidden_size = 64;
    c.num_layers = layers;
    c.direction = direction;
    c.threads = 2;
    c.max_batch = 2;
    return d::build_model(c, d::import_weights(c, ref::torch_weights(ref::random_net(c, rng, 0.1))));
}

// A forward-only model's long run goes in segments (engine.cpp): once a
// segment's buffers exist, a run of any length allocates nothing more.
BOOST_AUTO_TEST_CASE(a_longer_run_than_seen_allocates_nothing_once_a_segment_has_run) {
    deeprnn::detail::SessionImpl session(long_run_model(2, deeprnn::Direction::forward, 9));
    session.segment_steps = 16;
    const int T = 200, B = 2;
    std::vector<float> x(static_cast<size_t>(T) * B * 12, 0.25f), y(static_cast<size_t>(T) * B * 64), h(2 * B * 64), cs(h.size());
    const int32_t lengths[B] = {200, 77};
    session.forward(x.data(), 16, B, lengths, y.data(), h.data(), cs.data());  // sizes a segment's buffers
    session.forward(x.data(), 16, B, nullptr, nullptr, h.data(), cs.data());   // and the output it discards
    allocation_count::begin();
    session.forward(x.data(), T, B, lengths, y.data(), h.data(), cs.data());
    session.forward(x.data(), T, B, nullptr, nullptr, h.data(), cs.data());
    const long allocated = allocation_count::end();
    BOOST_TEST(allocated == 0);
}

// A one-layer bidirectional model's long run goes in windows per direction
// (engine.cpp, forward_windows): once a windowed run has sized them, a longer
// one allocates nothing more. (With more layers the outputs between layers
// are whole, so a longer run grows them once.)
BOOST_AUTO_TEST_CASE(a_longer_bidirectional_run_allocates_nothing_once_a_window_has_run) {
    deeprnn::detail::SessionImpl session(long_run_model(1, deeprnn::Direction::bidirectional, 10));
    session.segment_steps = 16;
    const int T = 200, B = 2;
    std::vector<float> x(static_cast<size_t>(T) * B * 12, 0.25f), y(static_cast<size_t>(T) * B * 128), h(2 * B * 64),
        cs(h.size());
    const int32_t lengths[B] = {200, 77};
    session.forward(x.data(), 40, B, lengths, y.data(), h.data(), cs.data(), true);  // sizes the windows of x and y
    session.forward(x.data(), 40, B, nullptr, nullptr, h.data(), cs.data());         // and of the output it discards
    allocation_count::begin();
    session.forward(x.data(), T, B, lengths, y.data(), h.data(), cs.data());
    session.forward(x.data(), T, B, lengths, y.data(), h.data(), cs.data(), true);
    session.forward(x.data(), T, B, nullptr, nullptr, h.data(), cs.data());
    const long allocated = allocation_count::end();
    BOOST_TEST(allocated == 0);
}

// A model with a second packing for large batches (ModelImpl::batched) runs
// them on a session of its own; a run there sizes this session's buffers for
// the smaller batches too, so that after a run at the largest batch and
// length, a run no longer and no wider allocates nothing.
BOOST_AUTO_TEST_CASE(smaller_batches_after_a_large_one_allocate_nothing) {
    namespace d = deeprnn::detail;
    namespace s = deeprnn::detail::sched;
    std::mt19937 rng(10);
    deeprnn::Config c;
    c.cell = deeprnn::Cell::lstm;
    c.input_size = 16;
    c.hidden_size = 64;
    c.max_batch = 64;
    c.threads = 2;
    const ref::Net net = ref::random_net(c, rng, 0.3);
    s::MachineModel fixed;  // fixed rates give this shape its second packing (schedule tests)
    fixed.caches = s::default_machine().caches;
    const std::shared_ptr<const d::ModelImpl> m = d::build_model(c, d::import_weights(c, ref::torch_weights(net)), fixed);
    BOOST_TEST_REQUIRE(m->batched != nullptr);
    const int from = m->batched_from, T = 40;
    for (bool batch_first : {false, true}) {
        d::SessionImpl session(m);
        std::vector<float> x(static_cast<size_t>(T) * 64 * 16, 0.25f), y(static_cast<size_t>(T) * 64 * 64);
        std::vector<float> h(64 * 64), cs(64 * 64);
        session.forward(x.data(), T, 64, nullptr, y.data(), h.data(), cs.data(), batch_first);
        allocation_count::begin();
        for (int B : {1, from - 1, from, 64})
            for (int steps : {T, 7}) session.forward(x.data(), steps, B, nullptr, y.data(), h.data(), cs.data(), batch_first);
        const long allocated = allocation_count::end();
        BOOST_TEST(allocated == 0, "batch_first=" << batch_first << ", batched from " << from << ": " << allocated
                                                  << " allocations after a run at the largest batch");
    }
}

BOOST_AUTO_TEST_SUITE_END()
