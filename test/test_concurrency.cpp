// Concurrency: one Model run from several threads at once (each with its own
// Session) gives bit-identical results to serial runs; models and streams
// created and destroyed while others run; pools shared between models.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <dirent.h>
#include <memory>
#include <random>
#include <thread>

#include "expect_error.hpp"
#include "forced_plan.hpp"
#include "reference.hpp"
#include "src/kernels.hpp"
#include "src/schedule.hpp"

#include <unistd.h>

#include <filesystem>

namespace {

struct Fixture {
    deeprnn::Model model;
    std::vector<float> x;
    int T = 8, B = 2;
    Fixture(int threads, int hidden, deeprnn::WorkerPool pool = {}, long serial_rows = 0)
        : model(make_config(threads, hidden, pool, serial_rows), [&] {
              std::mt19937 rng(11);
              return ref::torch_weights(ref::random_net(make_config(threads, hidden), rng, 0.1));
          }()) {
        x.resize(static_cast<size_t>(T) * B * 16);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1.0);
    }
    // serial_rows 0: every run on the pool (short runs would run on the caller alone).
    static deeprnn::Config make_config(int threads, int hidden, deeprnn::WorkerPool pool = {}, long serial_rows = 0) {
        deeprnn::Config c;
        c.serial_rows = serial_rows;
        c.pool = std::move(pool);
        c.cell = deeprnn::Cell::gru;
        c.input_size = 16;
        c.hidden_size = hidden;
        c.num_layers = 2;
        c.direction = deeprnn::Direction::bidirectional;
        c.threads = threads;
        c.max_batch = 4;
        return c;
    }
    std::vector<float> run(deeprnn::Session& s) const {
        std::vector<float> y(static_cast<size_t>(T) * B * model.output_size());
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = T;
        in.batch = B;
        deeprnn::RunOutput out;
        out.y = y.data();
        s.run(in, out);
        return y;
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(concurrency)

// Runs on the pool take turns; runs on the caller alone (serial_rows) do not,
// so six callers run the same model at once through their own sessions.
BOOST_AUTO_TEST_CASE(shared_model_many_threads_bit_identical) {
    for (const auto& [threads, serial_rows] : {std::pair<int, long>{1, 0}, {2, 0}, {2, 1L << 30}}) {
        const Fixture f(threads, 260, {}, serial_rows);  // 260 units: the plan splits them when threads = 2
        deeprnn::Session serial(f.model);
        const std::vector<float> want = f.run(serial);
        std::vector<int> mismatches(6, 0);
        std::vector<std::thread> callers;
        for (int i = 0; i < 6; ++i)
            callers.emplace_back([&, i] {
                deeprnn::Session s(f.model);
                for (int r = 0; r < 20; ++r)
                    if (f.run(s) != want) ++mismatches[i];
            });
        for (auto& t : callers) t.join();
        for (int i = 0; i < 6; ++i)
            BOOST_TEST(mismatches[i] == 0, "threads=" << threads << " serial_rows=" << serial_rows << " caller " << i);
    }
}

// GRU reset-before-matmul in its one-barrier form (each worker reduces the
// others' partial reset products, double-buffered by step parity; the only
// synchronisation is one barrier per step) run by several callers at once:
// bit-identical to one worker. Under TSan (make tsan) this checks the partials'
// double buffer and the cross-worker reads of the input projection.
BOOST_AUTO_TEST_CASE(gru_reset_before_matmul_one_barrier_many_callers) {
    namespace s = deeprnn::detail::sched;
    namespace d = deeprnn::detail;
    deeprnn::Config c = Fixture::make_config(1, 100);
    c.gru_variant = deeprnn::GruVariant::reset_before_matmul;
    std::mt19937 rng(3);
    const deeprnn::Weights w = ref::torch_weights(ref::random_net(c, rng, 0.15));
    const deeprnn::Model serial(c, w);
    deeprnn::Config fc = c;
    fc.threads = 2;
    s::ExecutionChoice choice;
    choice.workers = 2;
    choice.rbm_one_barrier = true;
    forced::force_plan(fc, choice, "rbm_one_barrier.txt");
    const deeprnn::Model m(fc, w);
    BOOST_TEST_REQUIRE(m.plan().find("one barrier per step") != std::string::npos, m.plan());
    const int T = 7, B = 3;
    std::vector<float> x(static_cast<size_t>(T) * B * 16);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.3 * i));
    const std::vector<int32_t> lengths{7, 2, 5};
    auto run = [&](deeprnn::Session& session) {
        std::vector<float> y(static_cast<size_t>(T) * B * m.output_size());
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = T;
        in.batch = B;
        in.lengths = lengths.data();
        deeprnn::RunOutput out;
        out.y = y.data();
        session.run(in, out);
        return y;
    };
    deeprnn::Session one(serial);
    const std::vector<float> want = run(one);
    std::vector<int> mismatches(3, 0);
    std::vector<std::thread> callers;
    for (int i = 0; i < 3; ++i)
        callers.emplace_back([&, i] {
            deeprnn::Session session(m);
            for (int r = 0; r < 4; ++r)
                if (run(session) != want) ++mismatches[i];
        });
    for (auto& t : callers) t.join();
    for (int i = 0; i < 3; ++i) BOOST_TEST(mismatches[i] == 0, "caller " << i);
    s::plan_cache_clear_memory();
    std::filesystem::remove_all(std::filesystem::path(fc.plan_cache_path).parent_path());
}

BOOST_AUTO_TEST_CASE(models_created_and_destroyed_while_others_run) {
    const Fixture f(2, 260);
    deeprnn::Session serial(f.model);
    const std::vector<float> want = f.run(serial);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0}, runs{0};
    std::thread runner([&] {
        deeprnn::Session s(f.model);
        while (!stop) {
            if (f.run(s) != want) ++bad;
            ++runs;
        }
    });
    for (int i = 0; i < 10; ++i) {
        Fixture other(2, 130 + i);  // a whole model and pool built and torn down
        deeprnn::Session s(other.model);
        other.run(s);
    }
    stop = true;
    runner.join();
    BOOST_TEST(bad.load() == 0);
    BOOST_TEST(runs.load() > 0);
}

BOOST_AUTO_TEST_CASE(session_outlives_its_model_object) {
    std::unique_ptr<Fixture> f(new Fixture(2, 260));
    deeprnn::Session s(f->model);
    const std::vector<float> want = f->run(s);
    const std::vector<float> x = f->x;
    deeprnn::Model keep_alive = f->model;  // copies share the data
    f.reset();                              // the original Model object is gone
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = 8;
    in.batch = 2;
    std::vector<float> y(want.size());
    deeprnn::RunOutput out;
    out.y = y.data();
    s.run(in, out);
    BOOST_TEST(y == want);
}

// Streams on several threads at once, each fed in its own chunk sizes, over one
// shared 2-worker model: every stream's outputs equal one serial run's bits.
BOOST_AUTO_TEST_CASE(streams_on_many_threads_bit_identical) {
    deeprnn::Config c;
    c.cell = deeprnn::Cell::lstm;
    c.input_size = 16;
    c.hidden_size = 200;
    c.num_layers = 2;
    c.threads = 2;
    c.max_batch = 1;
    std::mt19937 rng(5);
    const deeprnn::Model model(c, ref::torch_weights(ref::random_net(c, rng, 0.1)));
    const int T = 40, S = model.output_size();
    std::vector<float> x(static_cast<size_t>(T) * 16);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 29 % 97) / 48.0 - 1.0);
    const std::vector<float> want = ref::run_model(model, x, T, 1);
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> callers;
    for (int i = 0; i < 4; ++i)
        callers.emplace_back([&, i] {
            for (int round = 0; round < 5; ++round) {
                deeprnn::Stream s(model);
                std::vector<float> y(want.size());
                const int chunk = 1 + (i + round) % 7;
                for (int t = 0; t < T; t += chunk)
                    s.push(&x[static_cast<size_t>(t) * 16], std::min(chunk, T - t), &y[static_cast<size_t>(t) * S]);
                if (y != want) ++mismatches[i];
            }
        });
    for (auto& t : callers) t.join();
    for (int i = 0; i < 4; ++i) BOOST_TEST(mismatches[i] == 0, "stream thread " << i);
}

// Threads of this process, from /proc (Linux).
static int process_threads() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
        while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
        closedir(d);
    }
    return n;
}

// process_threads() once it reads `expected`, or after about 2 s. A joined
// thread can stay listed in /proc for a moment: join returns when the thread
// clears its id, before the kernel has released its task (a CI run on a busy
// 2-core VM read one thread too many right after a pool's last user ended).
// expected < 0: the count once three reads 10 ms apart agree.
static int settled_threads(int expected = -1) {
    int n = process_threads(), same = 0;
    for (int i = 0; i < 200; ++i) {
        if (expected >= 0 ? n == expected : same == 2) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        const int next = process_threads();
        same = next == n ? same + 1 : 0;
        n = next;
    }
    return n;
}

// Two different models (and a copy) on one WorkerPool, run from four threads at
// once: every run equals the same model built with its own pool, bit for bit;
// the pool's threads are the only ones created, and they end with the last user.
BOOST_AUTO_TEST_CASE(pools_shared_between_models) {
    const Fixture own_a(2, 260), own_b(2, 70);
    std::vector<float> want_a, want_b;
    {
        deeprnn::Session sa(own_a.model), sb(own_b.model);
        want_a = own_a.run(sa);
        want_b = own_b.run(sb);
    }
    const int before = settled_threads();
    std::unique_ptr<Fixture> a, b, one;
    {
        deeprnn::WorkerPool pool(2);
        BOOST_TEST(pool.threads() == 2);
        a.reset(new Fixture(0, 260, pool));  // 0 = all of the pool's workers
        b.reset(new Fixture(2, 70, pool));
        one.reset(new Fixture(1, 260, pool));  // one worker: runs on its caller
        BOOST_TEST(settled_threads(before + 1) - before == 1, "only the pool's worker 1 exists (worker 0 is each run's caller)");
    }  // the handle is gone; the models keep the workers
    std::vector<int> bad(4, 0);
    std::vector<std::thread> callers;
    for (int i = 0; i < 4; ++i)
        callers.emplace_back([&, i] {
            const Fixture& f = i == 3 ? *one : i % 2 ? *b : *a;
            const std::vector<float>& want = i % 2 && i != 3 ? want_b : want_a;
            deeprnn::Session s(f.model);
            for (int r = 0; r < 30; ++r) bad[i] += f.run(s) != want;
        });
    for (auto& t : callers) t.join();
    for (int i = 0; i < 4; ++i) BOOST_TEST(bad[i] == 0, "caller " << i);
    a.reset();
    one.reset();
    BOOST_TEST(settled_threads(before + 1) - before == 1, "model b still holds the workers");
    b.reset();
    BOOST_TEST(settled_threads(before) == before, "the workers end with their last user");
}

// A model using fewer workers than its shared pool has: the idle worker skips
// the runs (and a later model using all three still gets the right answer).
BOOST_AUTO_TEST_CASE(pool_larger_than_its_models) {
    deeprnn::WorkerPool pool(3, false);
    const Fixture own(2, 260), shared(2, 260, pool), all(3, 260, pool), own3(3, 260);
    deeprnn::Session so(own.model), ss(shared.model), sa(all.model), so3(own3.model);
    const std::vector<float> want = own.run(so), want3 = own3.run(so3);
    for (int r = 0; r < 50; ++r) {
        BOOST_TEST((shared.run(ss) == want));
        BOOST_TEST((all.run(sa) == want3));
    }
}

// Model::prefetch is a hint: runs after it give the bits of runs without it
// (and of a one-worker model); a model, with its own pool or a shared one,
// destroyed right after it waits for the workers still reading its weights;
// callers prefetch while others run on the same pool; the batch is checked.
BOOST_AUTO_TEST_CASE(prefetch_changes_no_result_and_a_model_may_go_right_after) {
    const Fixture one(1, 260), f(2, 260);
    deeprnn::Session s1(one.model), s(f.model);
    const std::vector<float> want = one.run(s1);
    BOOST_TEST((f.run(s) == want));
    for (int r = 0; r < 30; ++r) {
        std::this_thread::sleep_for(std::chrono::microseconds(r % 3 == 0 ? 2000 : 150));  // workers napping or asleep
        f.model.prefetch(r % 2 ? 1 : 4);
        if (r % 4) std::this_thread::sleep_for(std::chrono::microseconds(100));
        BOOST_TEST((f.run(s) == want), "round " << r);
    }
    one.model.prefetch();  // one worker: nothing to do
    for (int i = 0; i < 20; ++i) {
        Fixture brief(2, 130 + i);  // model and pool go while the worker may read the weights
        std::this_thread::sleep_for(std::chrono::microseconds(i % 2 ? 300 : 3000));
        brief.model.prefetch();
    }
    deeprnn::WorkerPool pool(2);
    const Fixture shared(2, 260, pool);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0}, runs{0};
    std::thread runner([&] {
        deeprnn::Session ss(shared.model);
        while (!stop) {
            bad += shared.run(ss) != want;
            ++runs;
            std::this_thread::sleep_for(std::chrono::microseconds(runs % 7 * 100));
        }
    });
    for (int i = 0; i < 20; ++i) {
        Fixture brief(2, 70 + i, pool);  // its weights go, the pool stays
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        brief.model.prefetch(2);
        shared.model.prefetch();
    }
    stop = true;
    runner.join();
    BOOST_TEST(bad.load() == 0);
    BOOST_TEST(runs.load() > 0);
    expect_error([&] { f.model.prefetch(0); }, {"Model::prefetch batch = 0", "Config.max_batch = 4"});
    expect_error([&] { f.model.prefetch(5); }, {"Model::prefetch batch = 5"});
    deeprnn::Model moved = f.model;
    const deeprnn::Model taken = std::move(moved);
    expect_error([&] { moved.prefetch(); }, {"Model: used after move"});
}

BOOST_AUTO_TEST_CASE(pool_errors_name_the_field) {
    BOOST_CHECK_EXCEPTION(deeprnn::WorkerPool(-1), deeprnn::Error, [](const deeprnn::Error& e) {
        return std::string(e.what()).find("WorkerPool: threads = -1") != std::string::npos;
    });
    deeprnn::WorkerPool pool(2);
    BOOST_CHECK_EXCEPTION(Fixture(3, 64, pool), deeprnn::Error, [](const deeprnn::Error& e) {
        return std::string(e.what()).find("Config.threads = 3: exceeds the 2 workers of Config.pool") !=
               std::string::npos;
    });
    BOOST_TEST(deeprnn::WorkerPool().threads() == 0);
    BOOST_TEST(!deeprnn::WorkerPool());
}

BOOST_AUTO_TEST_SUITE_END()
