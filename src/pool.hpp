// pool.hpp — the weight-centric thread pool and its step barrier.
//
// DeepCPU's weight-centric streamlining: worker p executes partition p of
// every product at every step of every request, so partition p's weights stay
// in core p's private L2. The pool's threads are created once, pinned one per
// physical core, and kept while any model or WorkerPool holds them (the
// thread that calls run() is worker 0); a run is ONE dispatch in
// which every worker loops over all layers and steps itself, meeting the
// others at a barrier per step (ParallelOuterRNN), instead of one fork/join
// per product.
#pragma once
#include "common.hpp"

#include <pthread.h>
#include <sched.h>

#include <boost/thread/condition_variable.hpp>
#include <boost/thread/mutex.hpp>
#include <boost/thread/thread.hpp>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace deeprnn {
namespace detail {

// The logical CPUs this process may run on (the affinity masks of this
// thread and of the main thread), in the order a pool's workers take them:
// one per physical core (sysfs topology), fastest first (the kernel's
// cpu_capacity where it states one; an Intel hybrid part's E-cores count a
// quarter), the CPU this thread runs on leading its equals, then the cores'
// SMT siblings. *cores receives how many lead.
// Both can return each CPU's capacity (1024 where none is stated); the
// second takes the mask, the sysfs cpu directory and the CPU to lead (for
// tests). Never empty.
std::vector<int> usable_cpus(int* cores, std::vector<int>* capacity = nullptr);
std::vector<int> usable_cpus(const cpu_set_t& mask, const std::string& sysfs_cpu, int first, int* cores,
                             std::vector<int>* capacity);
// How many logical CPUs usable_cpus() lists: threads beyond it take turns.
int logical_cpus();
// How many of these cores (their capacities) to split a recurrence over:
// the k fastest that maximize k times the k-th fastest capacity, since equal
// slices wait for the slowest at every step; all of them when they are alike.
int fastest_core_count(std::vector<int> capacity);
// "2", or where the cores differ "8 (4 at capacity 1024, 4 at 414: threads =
// 0 takes the 4 fastest)": the cores' capacities, fastest first, for build_info.
std::string describe_cores(const std::vector<int>& capacity);
// The leading part of usable_cpus: one logical CPU per physical core.
std::vector<int> physical_cores();
// Workers of all live pools per logical CPU, so that a pool made while
// another lives (a second model with threads of its own) takes the cores the
// first left free before sharing one with it: every pool would otherwise
// start from the core after its builder's, and two models run at once on a
// machine with cores to spare would take turns on the same ones.
struct PinnedWorkers {
    boost::mutex mutex;
    std::map<int, int> on_cpu;  // logical CPU -> workers pinned there
};
PinnedWorkers& pinned_workers();
// The CPU of each of workers 1..threads-1 (entry 0 is -1: the caller), given
// `cpus` in usable_cpus order (entry 0, the builder's or a faster core, left
// to the callers)
// and the workers other pools have on each: distinct CPUs from entry 1 on,
// the least loaded first, ties in order; past the last, around again from
// entry 0.
std::vector<int> worker_cpus(const std::vector<int>& cpus, int threads, const std::map<int, int>& load);
// The CPU time per period the process's Linux cgroup grants it, in cores:
// cgroup v2's cpu.max ("quota period", or "max": none) or v1's
// cpu.cfs_quota_us / cpu.cfs_period_us (-1: none), the smallest along the
// process's cgroup path and its parents; 0 when nothing limits it (a
// container started with --cpus=1.5 reads 1.5). The second form reads the
// hierarchies mounted at `root`, with `self` the text of /proc/self/cgroup.
double cgroup_cpu_limit();
double cgroup_cpu_limit(const std::string& root, const std::string& self);
// That quota as a thread count, rounded up as Java's runtime does (1.5
// cores: 2 threads; 1 core: 1); 0 when nothing limits the process.
int cgroup_thread_limit(double quota = cgroup_cpu_limit());
// What threads = 0 means: one per physical core (the fastest_core_count of
// them on a chip with big and little cores), at most the cgroup's quota
// rounded up (1.5 cores: 2 threads; 1 core: 1).
int default_threads();

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// One round of a wait of microseconds: pause for the first kSpinsBeforeYield
// rounds (~250 us at the Zen 4 VM's 25 ns pause), then yield, so an
// oversubscribed machine still makes progress. Not sooner: with another
// program's busy thread on every core, a worker that yields gives its core
// away just before the partner it waits for comes back, and the two then
// meet at each barrier only by chance (LSTM 256-256, 100 steps, 2 workers,
// two busy threads, always on the pool: 3.3-39 ms a run on average, up to
// 0.4 s, when waits yielded after 4,000 pauses; 1.9-2.9 ms after 10,000
// (1.8-4.2 after 40,000, which cost oversubscribed tests more); the caller
// alone 1.5-1.9 ms; docs/ENGINE.md, "The pool").
constexpr int kSpinsBeforeYield = 10000;
inline void spin_pause(int spins) {
    if (spins < kSpinsBeforeYield) cpu_relax();
    else boost::this_thread::yield();
}

// A reusable barrier for a fixed number of threads, each calling wait(me)
// with its own index 0..parties-1. A dissemination barrier: in round r,
// thread i raises a flag of thread (i + 2^r) mod n and waits for its own, so
// n threads meet in ceil(log2 n) rounds of one cache-line transfer each, in
// parallel, with no shared counter (a counter serialises n read-modify-writes
// of one line: 0.47-0.52 us for 2 threads on this project's VMs, against
// 0.31-0.35 us here). Waits spin with a pause instruction (a step is
// microseconds), then yield so an oversubscribed machine still makes progress.
// Allocates only in the constructor and reset().
class SpinBarrier {
public:
    explicit SpinBarrier(int parties = 1) { reset(parties); }
    void reset(int parties);
    void wait(int me);

private:
    struct alignas(64) Line {  // one flag per cache line: no false sharing
        std::atomic<uint32_t> v{0};
    };
    int parties_ = 1, rounds_ = 0;
    std::unique_ptr<Line[]> flags_;   // [thread][round]: the epoch thread's partner of that round reached
    std::unique_ptr<Line[]> epochs_;  // [thread]: barriers it has passed (written by that thread only)
};

// Seconds a step costs two workers beyond their products, measured once per
// process (about 1 ms, on the first call): two threads on two cores each write
// two cache lines (an H = 64 worker's share of h), meet at a SpinBarrier and
// read the other's lines, 200 times a sample; the best of 7 samples (the OS can
// make a sample slow, never fast). It stops after 20 ms with the samples it
// has (a second core busy with another program's threads turns each step into
// a wait for a time slice). 0 when the process may use only one core, the
// second thread could not be made, or no sample finished in those 20 ms. The plan's cost model prices every
// step of a multi-worker plan with it (sched::MachineModel::barrier_s): 0.22
// us between two cores of the Zen 4 VM, where 0.7, the Zen 5 VM's, made the
// model keep H = 64 on one worker that two run 1.3x faster.
double measure_step_exchange();
// One such measurement, stopped after cap_s (measure_step_exchange: 20 ms).
double time_step_exchange(double cap_s);

// Config::idle_nap_ms or a WorkerPool's, checked (Error naming `field`) and
// in microseconds.
int nap_window_us(double idle_nap_ms, const char* field);

class WeightCentricPool {
public:
    // `threads` >= 1 workers: worker 0 is the thread that calls run() (as
    // OpenMP's master thread is), workers 1.. are threads created here; with
    // `pin`, each is pinned to a physical core (physical_cores()) other than
    // the one the constructing thread runs on, which is left to the caller,
    // while there are enough of them. A pool of one
    // creates no thread at all. Idle workers nap for `nap_window_us` after
    // a run (kNapMicros), 0 = they sleep at once.
    WeightCentricPool(int threads, bool pin, int nap_window_us = kNapWindowMicros);
    ~WeightCentricPool();
    WeightCentricPool(const WeightCentricPool&) = delete;
    WeightCentricPool& operator=(const WeightCentricPool&) = delete;

    using Job = void (*)(void*, int);  // job(ctx, worker)
    int size() const { return size_; }
    // How the workers wait for the next run (see kNapMicros): awake (they
    // spin: a run needs no wake-up), napping (a run reaches them within
    // about a nap and costs its caller nothing) or asleep (a run must
    // notify them). idle(active) is the deepest of workers 1..active-1, the
    // ones a run on `active` waits for; a single-threaded pool is always
    // asleep.
    enum class Idle { awake, napping, asleep };
    Idle idle_of(int w) const { return static_cast<Idle>(idle_[w].v.load(std::memory_order_relaxed)); }
    Idle idle(int active) const;
    Idle idle() const { return idle(size_); }
    bool awake() const { return idle() == Idle::awake; }

    // Between runs a worker spins ~50 us, then naps (timed sleeps of
    // kNapMicros, which it ends itself) until kNapWindowMicros after the
    // last run, then sleeps on a condition variable. A run that finds it
    // napping costs its caller nothing and reaches it within about a nap;
    // one that finds it asleep must notify it, a system call that takes
    // the caller 30-40 us on the Zen 5 VM (a cross-CPU wake-up) before the
    // worker's own 60-120 us wake-up. Napping costs its core ~30% there (a
    // timer's round trip through the hypervisor), for at most the window,
    // which the application sets (Config::idle_nap_ms; 0 on battery).
    static constexpr int kNapMicros = 20;
    static constexpr int kNapWindowMicros = 10000;  // the default window
    static constexpr int kMaxNapWindowMicros = 10000000;
    // Sets the window; workers napping now use the new one after their nap.
    void set_nap_window(int us) { nap_window_us_.store(us, std::memory_order_relaxed); }
    int nap_window() const { return nap_window_us_.load(std::memory_order_relaxed); }
    // Naps the workers have taken since the pool was made (for tests).
    long naps() const { return naps_.load(std::memory_order_relaxed); }
    // "1 worker pinned to cores 1, worker 0 the calling thread" or why not;
    // where the workers are now (free_caller_core may have moved one).
    std::string pinning() const;
    // Worker 0, the caller, is the application's thread and floats: the OS may
    // put it on the core a worker of 1..active-1 is pinned to, where the two
    // would take turns at every barrier (GRU 256-256, 100 steps: 11.5 ms
    // instead of 0.57 ms). This moves the calling thread off those cores if it
    // is on one (its affinity mask is left as it was: only the thread moves);
    // if its mask allows it only such cores, it moves the worker on its core
    // to one no worker holds instead. Says whether the caller is now clear
    // of the workers; false when there is no free core either, and a run
    // should then stay on the caller alone.
    bool free_caller_core(int active);
    // The core worker w is pinned to, -1 if it floats (worker 0 always).
    int core_of(int w) const { return cores_[w].load(std::memory_order_relaxed); }
    // Workers free_caller_core has moved to another core (for tests).
    long worker_moves() const { return worker_moves_.load(std::memory_order_relaxed); }

    // Wakes the idle workers of 1..active-1 without giving them work and
    // returns at once; they then spin up to 1 ms, so a run started meanwhile
    // pays no wake-up: a burst of short runs goes on on the caller instead
    // of waiting for them (SessionImpl::dispatch). Does nothing while a run
    // holds the pool, when none of them is idle, or while an earlier wake()
    // of as many workers or more is in flight.
    void wake(int active) { wake(nullptr, nullptr, active); }
    void wake() { wake(size_); }
    // wake(active), and each worker w in 1..active-1 first runs warm(ctx, w) (a
    // model's Model::prefetch: it reads its own weight blocks back into its
    // core's cache after idle). Returns at once; what it skips wake() skips,
    // and so it does while an earlier warm job is in flight. ctx must stay
    // valid until wait_warm() returns.
    void wake(Job warm, void* ctx, int active);
    // Returns when no worker runs or owes a warm job (before a model that
    // posted one frees its weights).
    void wait_warm() const;
    // A wake() is in flight: no worker has woken since it.
    bool waking() const { return nudged_.load(std::memory_order_relaxed) > 0; }

    // Runs f(worker) on workers 0..active-1 (a model may use fewer workers
    // than a shared pool has), f(0) on the calling thread, and returns when
    // they have finished; an
    // exception thrown by any worker is rethrown here (the first by worker id).
    // Calls from several threads, of one model or of several models sharing
    // the pool, are serialized. Allocates nothing.
    // With `ended_alone`, f(0) may finish the run alone (a hand-over's
    // caller, SessionImpl::run_on_caller) and then set *ended_alone: a worker
    // that has not yet started f skips the run, and run() waits only for
    // those that have, so a run the caller ends before the wake-up does not
    // wait for it.
    template <typename F>
    void run(F& f, int active, const bool* ended_alone = nullptr) {
        run_job([](void* ctx, int w) { (*static_cast<F*>(ctx))(w); }, &f, active, ended_alone);
    }
    template <typename F>
    void run(F& f) {
        run(f, size_);
    }

private:
    void run_job(Job job, void* ctx, int active, const bool* ended_alone);
    void notify_sleepers(int active);  // after a word for workers 1..active-1
    // A run's announcement in one word, so a worker reads its number, whether
    // its caller may end it alone or it is a wake() with no work, and its
    // worker count together:
    // (serial << kSerialShift) | kWakeOnly? | kMayEndAlone? | active.
    // Workers from `active` on take no part: they neither restart their nap
    // window nor, asleep, wake for it.
    static constexpr int kActiveBits = 16;
    static constexpr uint64_t kMayEndAlone = uint64_t{1} << kActiveBits;
    static constexpr uint64_t kWakeOnly = uint64_t{1} << (kActiveBits + 1);
    static constexpr int kSerialShift = kActiveBits + 2;
    static int active_of(uint64_t word) { return static_cast<int>(word & ((uint64_t{1} << kActiveBits) - 1)); }
    // Whether worker `id`, having seen words up to `seen`, owes the warm job
    // posted by a word up to `e`.
    bool owes_warm(int id, uint64_t seen, uint64_t e) const;
    void worker_loop(int id);
    static bool pin_to(pthread_t thread, int core);
    bool move_worker_off(int core);
    // A worker takes a run its caller may end alone (enter) unless the caller
    // has closed it: entry_ = (serial << kSerialShift) | kClosed? | workers entered.
    // Other runs never touch entry_.
    static constexpr uint64_t kClosed = kMayEndAlone;
    bool enter(uint64_t serial);
    int close_entry();  // closes the current run; returns the workers that entered it

    std::vector<boost::thread> workers_;
    std::unique_ptr<std::atomic<int>[]> cores_;  // [worker] the core it is pinned to; -1: it floats (worker 0, or pinning off)
    std::vector<int> usable_cores_;              // usable_cpus() when the pool was made
    std::atomic<long> worker_moves_{0};
    std::vector<std::exception_ptr> errors_;  // per worker, for the current run
    bool pin_ = false;
    int refused_core_ = -1;  // the core the OS refused a worker; -1: none
    int physical_ = 1;       // whole cores among usable_cores_
    boost::mutex run_mutex_;  // one run at a time
    boost::mutex sleep_mutex_;
    boost::condition_variable wake_;      // workers sleep here between runs
    boost::condition_variable finished_;  // the caller sleeps here if a worker is late
    int size_ = 1;
    Job job_ = nullptr;
    void* ctx_ = nullptr;
    uint64_t serial_ = 0;  // runs so far; under run_mutex_
    alignas(64) std::atomic<uint64_t> epoch_{0};
    alignas(64) std::atomic<int> done_{0};
    alignas(64) std::atomic<uint64_t> entry_{0};
    std::atomic<int> nap_window_us_{kNapWindowMicros};
    std::atomic<long> naps_{0};
    struct alignas(64) IdleState {  // one per cache line: a worker writes only its own
        std::atomic<int> v{0};        // an Idle; asleep: a run on it must notify
    };
    std::unique_ptr<IdleState[]> idle_;  // [worker]
    // The workers of the last wake() (1..n-1) if none has woken since: a
    // second wake() for no more of them notifies nobody again.
    std::atomic<int> nudged_{0};
    // The last warm job: warm_word_ = (serial << kActiveBits) | workers, in
    // one word so a worker reads both together. A worker that reads a later
    // word first still owes it and counts it off in warming_, so wait_warm()
    // never waits for a word nobody will read.
    Job warm_job_ = nullptr;
    void* warm_ctx_ = nullptr;
    std::atomic<uint64_t> warm_word_{0};
    std::atomic<int> warming_{0};  // workers that have not yet finished or skipped the last warm job
    std::atomic<bool> caller_waiting_{false};
    std::atomic<bool> stop_{false};
};

// What a run on 2 awake workers (spinning since the last run) costs beyond
// its work: announcing it, the worker finding it and the caller finding the
// worker done, in seconds. Measured once per process (about 2 ms, on the
// first call) on a pool of 2 made for it: the best of 7 samples of 200 empty
// runs back to back (of those done within 20 ms, after one). 0 where the process may use only one core or the pool
// could not start its thread. The plan prices it as an awake pool's dispatch
// (sched::awake): on the Zen 5 VM 1.2 us, about four step exchanges, where a
// price of 0 sent back-to-back one-step runs of LSTM 64-64 to the pool at
// 2.4-3.0 us against 0.7 on the caller alone.
double measure_awake_dispatch();


}  // namespace detail
}  // namespace deeprnn
