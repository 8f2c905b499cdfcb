// pool.cpp — pinned workers, dispatch, and the step barrier.
#include "pool.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace deeprnn {
namespace detail {

static int read_int(const std::string& path, int fallback) {
    std::ifstream f(path);
    int v;
    return (f >> v) ? v : fallback;
}

// "0-3,8,10-11" (a sysfs CPU list) -> its smallest CPU, or -1.
static int first_in_cpu_list(const std::string& path) {
    std::ifstream f(path);
    int cpu = -1;
    return (f >> cpu) && cpu >= 0 ? cpu : -1;
}

// "0-3,8,10-11" (a sysfs CPU list) -> its CPUs; empty if the file is missing.
static std::set<int> cpus_in_list(const std::string& path) {
    std::ifstream f(path);
    std::set<int> cpus;
    std::string range;
    while (std::getline(f >> std::ws, range, ',')) {
        int lo = -1, hi = -1;
        const int n = std::sscanf(range.c_str(), "%d-%d", &lo, &hi);
        if (n < 1 || lo < 0) break;
        for (int cpu = lo; cpu <= (n == 2 ? hi : lo) && cpu < CPU_SETSIZE; ++cpu) cpus.insert(cpu);
    }
    return cpus;
}

std::vector<int> usable_cpus(const cpu_set_t& mask, const std::string& sysfs_cpu, int first, int* cores,
                             std::vector<int>* capacity) {
    std::vector<int> order;
    if (first >= 0 && first < CPU_SETSIZE && CPU_ISSET(first, &mask)) order.push_back(first);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (cpu != first && CPU_ISSET(cpu, &mask)) order.push_back(cpu);
    if (order.empty()) order.push_back(0);
    // A core is named by the first CPU of its hardware threads, as the kernel
    // lists them: (package, core_id) is not unique on arm64, whose core ids
    // restart in each cluster (a big.LITTLE SoC's big cores read as SMT
    // siblings of its little ones). The kernel's cpu_capacity (arm64,
    // RISC-V; 1024 = its fastest core) ranks big cores first.
    //
    // Intel's hybrid parts (Alder Lake and later) state no capacity, or
    // (Linux 6.12+) one from clock rates alone; the kernel lists their
    // P-cores in the hybrid PMU's cpu_core/cpus (as hwloc reads them), and
    // the rest are E-cores (cpu_atom; low-power ones may have a PMU of their
    // own). An E-core counts a quarter of its stated capacity: half the P-core's FMA
    // width (Gracemont, Crestmont: 128-bit units), a lower clock, and an L2
    // shared by its cluster of four, which a batch-1 step streams. So
    // threads = 0 takes the P-cores alone on 4-8 P-core parts (OpenVINO's
    // latency default does the same) and every core on the 2 P + 8 E
    // ultrabooks; not measured on such a chip.
    const std::string devices = sysfs_cpu + "/../../";
    const std::set<int> performance = cpus_in_list(devices + "cpu_core/cpus");
    struct Cpu {
        int id, capacity;
    };
    std::vector<Cpu> leads, siblings;
    std::set<int> seen;
    for (int cpu : order) {
        const std::string dir = sysfs_cpu + "/cpu" + std::to_string(cpu) + "/";
        int core = first_in_cpu_list(dir + "topology/thread_siblings_list");
        if (core < 0) core = first_in_cpu_list(dir + "topology/core_cpus_list");
        const int stated = std::clamp(read_int(dir + "cpu_capacity", 1024), 1, 1024);
        const bool efficient = !performance.empty() && !performance.count(cpu);
        const Cpu c{cpu, efficient ? std::max(1, stated / 4) : stated};
        (seen.insert(core < 0 ? cpu : core).second ? leads : siblings).push_back(c);
    }
    // The first lead is left to the callers: the builder's core, unless a
    // faster one is allowed (a builder on a little core would otherwise keep
    // a big one from the workers, and its caller, floating, can move up).
    const auto faster = [](const Cpu& a, const Cpu& b) { return a.capacity > b.capacity; };
    std::stable_sort(leads.begin(), leads.end(), faster);
    std::stable_sort(siblings.begin(), siblings.end(), faster);
    if (cores) *cores = static_cast<int>(leads.size());
    leads.insert(leads.end(), siblings.begin(), siblings.end());
    std::vector<int> cpus;
    if (capacity) capacity->clear();
    for (const Cpu& c : leads) {
        cpus.push_back(c.id);
        if (capacity) capacity->push_back(c.capacity);
    }
    return cpus;
}

int fastest_core_count(std::vector<int> capacity) {
    std::sort(capacity.begin(), capacity.end(), std::greater<int>());
    size_t best = 1;
    for (size_t k = 1; k <= capacity.size(); ++k)
        if (static_cast<long>(k) * capacity[k - 1] >= static_cast<long>(best) * capacity[best - 1]) best = k;
    return static_cast<int>(best);
}

std::string describe_cores(const std::vector<int>& capacity) {
    std::map<int, int, std::greater<int>> count;
    for (int c : capacity) ++count[c];
    std::string text = std::to_string(capacity.size());
    if (count.size() < 2) return text;
    bool first = true;
    for (const auto& [c, n] : count) {
        text += cat(first ? " (" : ", ", n, first ? " at capacity " : " at ", c);
        first = false;
    }
    const int k = fastest_core_count(capacity);
    return text + (k == static_cast<int>(capacity.size()) ? ": threads = 0 takes them all)"
                                                          : cat(": threads = 0 takes the ", k, " fastest)"));
}

// This thread's mask and the main thread's: an application that pinned
// the thread building a model to one core (an audio thread, say) still lets
// the process use the others, and its workers belong there; a mask set for
// the whole process (taskset, a container's cpuset) bounds both. False if
// the OS does not say.
static bool process_mask(cpu_set_t* mask) {
    cpu_set_t process;
    CPU_ZERO(mask);
    if (sched_getaffinity(0, sizeof(*mask), mask) != 0) return false;
    if (sched_getaffinity(getpid(), sizeof(process), &process) == 0) CPU_OR(mask, mask, &process);
    return true;
}

std::vector<int> usable_cpus(int* cores, std::vector<int>* capacity) {
    cpu_set_t mask;
    if (!process_mask(&mask)) {
        if (cores) *cores = 1;
        if (capacity) capacity->assign(1, 1024);
        return {0};
    }
    return usable_cpus(mask, "/sys/devices/system/cpu", sched_getcpu(), cores, capacity);
}

int logical_cpus() {
    cpu_set_t mask;
    if (!process_mask(&mask)) return kMaxThreads;  // unknown: no limit
    int cores = 1;
    return static_cast<int>(usable_cpus(mask, "/sys/devices/system/cpu", sched_getcpu(), &cores, nullptr).size());
}

std::vector<int> physical_cores() {
    int cores = 1;
    std::vector<int> cpus = usable_cpus(&cores);
    cpus.resize(static_cast<size_t>(cores));
    return cpus;
}

double cgroup_cpu_limit(const std::string& root, const std::string& self) {
    const auto read_all = [](const std::string& path) {
        std::ifstream f(path);
        std::string text, word;
        while (f >> word) text += (text.empty() ? "" : " ") + word;
        return text;
    };
    // The quota of one cgroup directory, in cores; 0 = none stated there.
    const auto quota_in = [&](const std::string& dir, bool v2) -> double {
        double quota = -1, period = 0;
        if (v2) {
            std::istringstream in(read_all(dir + "/cpu.max"));
            std::string q;
            if (!(in >> q >> period) || q == "max") return 0;
            quota = std::strtod(q.c_str(), nullptr);
        } else {
            std::istringstream q(read_all(dir + "/cpu.cfs_quota_us")), p(read_all(dir + "/cpu.cfs_period_us"));
            if (!(q >> quota) || !(p >> period)) return 0;
        }
        return quota > 0 && period > 0 ? quota / period : 0;
    };
    double limit = 0;
    std::istringstream lines(self);
    for (std::string line; std::getline(lines, line);) {
        // "hierarchy-id:controllers:path"; v2's single hierarchy is "0::path".
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1);
        std::string path = line.substr(b + 1);
        const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
        bool cpu = v2;
        for (size_t at = 0; !cpu && at <= controllers.size();) {
            const size_t comma = std::min(controllers.find(',', at), controllers.size());
            cpu = controllers.compare(at, comma - at, "cpu") == 0;
            at = comma + 1;
        }
        if (!cpu) continue;
        // v1 mounts a hierarchy at root/<its controllers> (or a link named for
        // one of them); in a container the path may name the host's cgroup
        // while the container's own is mounted at the top, so the walk up to
        // "/" reads that too.
        const std::string base = v2 ? root : root + "/" + (std::ifstream(root + "/" + controllers + "/cpu.cfs_period_us") ? controllers : "cpu");
        while (true) {
            const double q = quota_in(base + (path == "/" ? "" : path), v2);
            if (q > 0 && (limit == 0 || q < limit)) limit = q;
            if (path.empty() || path == "/") break;
            const size_t slash = path.find_last_of('/');
            path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
        }
    }
    return limit;
}

double cgroup_cpu_limit() {
    std::ifstream f("/proc/self/cgroup");
    std::stringstream self;
    self << f.rdbuf();
    return cgroup_cpu_limit("/sys/fs/cgroup", self.str());
}

int default_threads() {
    int all = 1;
    std::vector<int> capacity;
    usable_cpus(&all, &capacity);
    capacity.resize(static_cast<size_t>(all));
    // Equal slices meet at every step's barrier, so the slowest core sets the
    // pace: on a big.LITTLE chip the big cores alone beat them all when
    // their count times their capacity is larger (4 + 4 cores of 1024 and
    // ~400: 4096 against 3200).
    const int cores = fastest_core_count(capacity);
    const int limit = cgroup_thread_limit();
    return limit > 0 ? std::min(cores, limit) : cores;
}

int cgroup_thread_limit(double quota) {
    // Rounded up: runs back to back in a 1-core quota on 2 workers used up
    // each 100 ms period early and stalled for the rest of it (LSTM 256-256:
    // p99 49 ms, mean no better than one worker's), while in a 1.25- or
    // 1.5-core quota the second core still paid (mean 0.83-1.05 against
    // 1.19-1.51 ms alone; docs/ENGINE.md). The epsilon keeps 1.0000001 at 1.
    return quota > 0 ? std::max(1, static_cast<int>(std::ceil(quota - 1e-6))) : 0;
}

void SpinBarrier::reset(int parties) {
    parties_ = std::max(parties, 1);
    rounds_ = 0;
    while ((1 << rounds_) < parties_) ++rounds_;
    flags_.reset(new Line[static_cast<size_t>(parties_) * std::max(rounds_, 1)]);
    epochs_.reset(new Line[parties_]);
}

void SpinBarrier::wait(int me) {
    if (parties_ <= 1) return;
    const uint32_t epoch = epochs_[me].v.load(std::memory_order_relaxed) + 1;
    epochs_[me].v.store(epoch, std::memory_order_relaxed);
    for (int r = 0; r < rounds_; ++r) {
        const int partner = (me + (1 << r)) % parties_;
        flags_[static_cast<size_t>(partner) * rounds_ + r].v.store(epoch, std::memory_order_release);
        // >= in modular arithmetic: a fast partner may already have raised the next epoch.
        const std::atomic<uint32_t>& mine = flags_[static_cast<size_t>(me) * rounds_ + r].v;
        for (int spins = 0; static_cast<int32_t>(mine.load(std::memory_order_acquire) - epoch) < 0; ++spins)
            spin_pause(spins);
    }
}

double measure_step_exchange() {
    static const double measured = time_step_exchange(0.02);
    return measured;
}

double time_step_exchange(double cap_s) {
    const std::vector<int> cores = physical_cores();
    const int here = sched_getcpu();
    const auto other = std::find_if(cores.begin(), cores.end(), [here](int c) { return c != here; });
    if (cores.size() < 2 || other == cores.end()) return 0.0;
    constexpr int kSamples = 7, kSteps = 200, kFloats = 32;  // two cache lines each
    SpinBarrier barrier(2);
    struct alignas(64) Share {
        float h[kFloats];
    };
    Share share[2][2] = {};  // [step parity][thread]: double-buffered, as the engine's h
    struct alignas(64) Sink {
        std::atomic<float> v{0};
    };
    Sink sinks[2];  // the sums, so the reads are not optimised away
    auto step = [&](int me, int s) {
        for (float& v : share[s & 1][me].h) v = static_cast<float>(s);
        barrier.wait(me);
        float sum = 0;
        for (float v : share[s & 1][1 - me].h) sum += v;
        sinks[me].v.store(sum, std::memory_order_relaxed);
    };
    // A second core busy with another program's threads hands the partner
    // time slices, not a spin, and each step can wait for one: stop after
    // cap_s with the best whole sample so far (none: 0, not measured).
    // `last` is the partner's last step, set before that step's barrier:
    // the partner sees it after that barrier, never before its own check.
    std::atomic<int> last{(kSamples + 1) * kSteps - 1};
    try {
        boost::thread partner([&] {
            for (int s = 0; s <= last.load(std::memory_order_acquire); ++s) step(1, s);
        });
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(*other, &set);
        pthread_setaffinity_np(partner.native_handle(), sizeof(set), &set);  // unpinned, it still runs
        const auto start = std::chrono::steady_clock::now();
        double best = 0;
        for (int sample = 0, s = 0; sample <= kSamples; ++sample) {  // sample 0 warms up
            const auto t0 = std::chrono::steady_clock::now();
            bool late = false;
            for (int i = 0; i < kSteps && !late; ++i) {
                step(0, s++);
                late = i % 8 == 7 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > cap_s;
            }
            if (late) {  // the partner may be in step s already: end with it
                if (s < (kSamples + 1) * kSteps) {
                    last.store(s, std::memory_order_release);
                    step(0, s);
                }
                break;
            }
            const double per_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kSteps;
            if (sample > 0) best = best > 0 ? std::min(best, per_step) : per_step;
        }
        partner.join();
        return best;
    } catch (const boost::thread_resource_error&) {
        return 0.0;
    }
}

int nap_window_us(double idle_nap_ms, const char* field) {
    require(std::isfinite(idle_nap_ms) && idle_nap_ms >= 0 && idle_nap_ms * 1000 <= WeightCentricPool::kMaxNapWindowMicros,
            field, idle_nap_ms, "must be in [0, ", WeightCentricPool::kMaxNapWindowMicros / 1000,
            "] ms (0 = idle workers sleep at once)");
    return static_cast<int>(std::lround(idle_nap_ms * 1000));
}

PinnedWorkers& pinned_workers() {
    static PinnedWorkers* registry = new PinnedWorkers;  // never destroyed: pools may outlive static destruction
    return *registry;
}

std::vector<int> worker_cpus(const std::vector<int>& cpus, int threads, const std::map<int, int>& load) {
    const int n = static_cast<int>(cpus.size());
    std::vector<int> plan(static_cast<size_t>(std::max(threads, 1)), -1);
    std::vector<bool> taken(static_cast<size_t>(n), false);
    for (int id = 1; id < threads; ++id) {
        if (id >= n) {  // more workers than CPUs: wrap around, as one per CPU
            plan[id] = cpus[id % n];
            continue;
        }
        int best = -1, best_load = 0;
        for (int i = 1; i < n; ++i) {
            if (taken[i]) continue;
            const auto it = load.find(cpus[i]);
            const int l = it == load.end() ? 0 : it->second;
            if (best < 0 || l < best_load) best = i, best_load = l;
        }
        taken[best] = true;
        plan[id] = cpus[best];
    }
    return plan;
}

WeightCentricPool::WeightCentricPool(int threads, bool pin, int nap_window_us)
    : cores_(new std::atomic<int>[static_cast<size_t>(std::max(threads, 1))]),
      pin_(pin),
      size_(threads),
      nap_window_us_(nap_window_us),
      idle_(new IdleState[static_cast<size_t>(std::max(threads, 1))]) {
    if (threads < 1) fail("internal: pool of ", threads, " threads");
    if (nap_window_us < 0 || nap_window_us > kMaxNapWindowMicros) fail("internal: nap window of ", nap_window_us, " us");
    errors_.resize(threads);
    for (int w = 0; w < threads; ++w) cores_[w].store(-1, std::memory_order_relaxed);
    if (threads == 1) return;
    // Worker 0 is whichever thread calls run(); it is not pinned (it is the
    // application's), so the pool leaves it a core: the one this thread runs on
    // now (which a caller the application pinned never leaves), unless a
    // faster core is free. Whole cores first, fastest first, then their SMT
    // siblings, and only past those do two workers share a logical CPU (and
    // take turns at every barrier).
    usable_cores_ = usable_cpus(&physical_);
    PinnedWorkers& registry = pinned_workers();
    boost::lock_guard<boost::mutex> lock(registry.mutex);
    const std::vector<int> plan = worker_cpus(usable_cores_, threads, registry.on_cpu);
    for (int id = 1; id < threads; ++id) {
        workers_.emplace_back([this, id] { worker_loop(id); });
        if (!pin) continue;
        const int core = plan[id];
        if (pin_to(workers_.back().native_handle(), core)) {
            cores_[id].store(core, std::memory_order_relaxed);
            ++registry.on_cpu[core];
        } else
            refused_core_ = core;
    }
}

std::string WeightCentricPool::pinning() const {
    if (size_ == 1) return "single-threaded: runs on the calling thread";
    if (refused_core_ >= 0) return cat("pinning refused by the OS for core ", refused_core_, "; workers float");
    std::string text;
    if (pin_) {
        std::string pinned;
        for (int w = 1; w < size_; ++w) pinned += cat(w == 1 ? "" : ",", cores_[w].load(std::memory_order_relaxed));
        text = cat(size_ - 1, size_ == 2 ? " worker" : " workers", " pinned to cores ", pinned, ", worker 0 the calling thread");
        if (const long moves = worker_moves()) text += cat(" (moved ", moves, moves == 1 ? " time" : " times", " off a caller's core)");
    } else
        text = cat(size_ - 1, " workers and the calling thread, pinning off");
    const int cpus = static_cast<int>(usable_cores_.size());
    if (cpus < size_)
        text += cat(" (", size_, " threads on ", cpus, cpus == 1 ? " logical CPU" : " logical CPUs",
                    ", all the affinity masks allow: they take turns)");
    else if (physical_ < size_)
        text += cat(" (", size_, " threads on ", physical_, physical_ == 1 ? " core" : " cores", ": ", size_ - physical_,
                    " on SMT siblings)");
    return text;
}

bool WeightCentricPool::pin_to(pthread_t thread, int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    return pthread_setaffinity_np(thread, sizeof(set), &set) == 0;
}

WeightCentricPool::~WeightCentricPool() {
    {
        PinnedWorkers& registry = pinned_workers();
        boost::lock_guard<boost::mutex> lock(registry.mutex);
        for (int w = 1; w < size_; ++w)
            if (const int core = cores_[w].load(std::memory_order_relaxed); core >= 0 && --registry.on_cpu[core] == 0)
                registry.on_cpu.erase(core);
    }
    {
        boost::lock_guard<boost::mutex> lock(sleep_mutex_);
        stop_.store(true);
        epoch_.store(++serial_ << kSerialShift);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

bool WeightCentricPool::free_caller_core(int active) {
    const int here = sched_getcpu();
    const auto worker_on = [&](int core) {
        for (int w = 1; w < active; ++w)
            if (cores_[w].load(std::memory_order_relaxed) == core) return w;
        return 0;
    };
    if (here < 0 || worker_on(here) == 0) return true;
    // Narrow the caller's mask to its cores that no active worker holds (the
    // kernel migrates it at once), then give it back its own mask (no move:
    // it is already on a core that mask allows). Two system calls, paid only
    // when the OS has put the caller on a worker's core.
    const pthread_t self = pthread_self();
    cpu_set_t own, away;
    if (pthread_getaffinity_np(self, sizeof(own), &own) != 0) return false;
    away = own;
    for (int w = 1; w < active; ++w) {
        const int core = cores_[w].load(std::memory_order_relaxed);
        if (core >= 0) CPU_CLR(core, &away);
    }
    if (CPU_COUNT(&away) > 0 && pthread_setaffinity_np(self, sizeof(away), &away) == 0) {
        pthread_setaffinity_np(self, sizeof(own), &own);
        return true;
    }
    return move_worker_off(here);
}

bool WeightCentricPool::move_worker_off(int core) {
    // The caller may run only where a worker is pinned (an application's
    // audio thread pinned to the core this pool gave a worker): move the
    // worker instead, to a core no worker holds, once; its weights refill
    // that core's L2 at its next run. One mover at a time, and never during
    // a run, whose barriers the move would stall.
    boost::lock_guard<boost::mutex> serial(run_mutex_);
    int w = 1;
    while (w < size_ && cores_[w].load(std::memory_order_relaxed) != core) ++w;
    if (w == size_) return true;  // another caller moved it meanwhile
    PinnedWorkers& registry = pinned_workers();
    boost::lock_guard<boost::mutex> lock(registry.mutex);
    // The free CPU with the fewest other pools' workers, in usable_cpus order.
    int best = -1, best_load = 0;
    for (int free : usable_cores_) {
        bool held = free == core;
        for (int v = 1; v < size_ && !held; ++v) held = cores_[v].load(std::memory_order_relaxed) == free;
        const auto it = registry.on_cpu.find(free);
        const int load = it == registry.on_cpu.end() ? 0 : it->second;
        if (!held && (best < 0 || load < best_load)) best = free, best_load = load;
    }
    if (best < 0 || !pin_to(workers_[w - 1].native_handle(), best)) return false;
    if (--registry.on_cpu[core] == 0) registry.on_cpu.erase(core);
    ++registry.on_cpu[best];
    cores_[w].store(best, std::memory_order_relaxed);
    worker_moves_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool WeightCentricPool::enter(uint64_t serial) {
    uint64_t v = entry_.load(std::memory_order_acquire);
    do {
        if (v >> kSerialShift != serial || (v & kClosed)) return false;
    } while (!entry_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire));
    return true;
}

int WeightCentricPool::close_entry() {
    const uint64_t v = entry_.fetch_or(kClosed, std::memory_order_acq_rel);
    return static_cast<int>(v & (kClosed - 1));
}

void WeightCentricPool::run_job(Job job, void* ctx, int active, const bool* ended_alone) {
    boost::lock_guard<boost::mutex> serial(run_mutex_);
    if (active < 1 || active > size_) fail("internal: run on ", active, " of ", size_, " workers");
    if (active == 1) {
        job(ctx, 0);
        return;
    }
    job_ = job;
    ctx_ = ctx;
    done_.store(0, std::memory_order_relaxed);
    if (ended_alone) entry_.store((serial_ + 1) << kSerialShift, std::memory_order_relaxed);  // published with the epoch
    epoch_.store((++serial_ << kSerialShift) | (ended_alone ? kMayEndAlone : 0) | static_cast<uint64_t>(active),
                 std::memory_order_seq_cst);
    notify_sleepers(active);
    // The caller is worker 0: it starts its share at once, while sleeping
    // workers wake, and never sleeps itself, so a run costs no wake-up of the
    // caller and never has more runnable threads than workers.
    try {
        job(ctx, 0);
    } catch (...) {
        errors_[0] = std::current_exception();
    }
    // The others end at the same last barrier: spin, then sleep if one was
    // preempted. A run the caller ended alone waits only for those that took it.
    const int others = ended_alone && *ended_alone ? close_entry() : active - 1;
    for (int spins = 0; spins < 4000 && done_.load(std::memory_order_acquire) < others; ++spins) cpu_relax();
    if (done_.load(std::memory_order_acquire) < others) {
        boost::unique_lock<boost::mutex> lock(sleep_mutex_);
        caller_waiting_.store(true, std::memory_order_seq_cst);
        while (done_.load(std::memory_order_seq_cst) < others) finished_.wait(lock);
        caller_waiting_.store(false, std::memory_order_relaxed);
    }
    for (auto& e : errors_)
        if (e) {
            std::exception_ptr first = e;
            for (auto& clear : errors_) clear = nullptr;
            std::rethrow_exception(first);
        }
}

WeightCentricPool::Idle WeightCentricPool::idle(int active) const {
    if (active <= 1) return Idle::asleep;
    Idle deepest = Idle::awake;
    for (int w = 1; w < std::min(active, size_); ++w) deepest = std::max(deepest, idle_of(w));
    return deepest;
}

void WeightCentricPool::notify_sleepers(int active) {
    // Dekker pairing with worker_loop: after the epoch's store, a worker
    // either sees the new epoch or is seen asleep here. Only the workers the
    // word concerns are looked at: the others sleep on.
    bool any = false;
    for (int w = 1; w < active && !any; ++w)
        any = idle_[w].v.load(std::memory_order_seq_cst) == static_cast<int>(Idle::asleep);
    if (!any) return;
    { boost::lock_guard<boost::mutex> lock(sleep_mutex_); }
    wake_.notify_all();  // workers the word does not concern go back to sleep
}

bool WeightCentricPool::owes_warm(int id, uint64_t seen, uint64_t e) const {
    const uint64_t warm_word = warm_word_.load(std::memory_order_acquire), warm = warm_word >> kActiveBits;
    return warm > seen >> kSerialShift && warm <= e >> kSerialShift && id < active_of(warm_word);
}

void WeightCentricPool::wake(Job warm, void* ctx, int active) {
    active = std::min(active, size_);
    if (active <= 1 || idle(active) == Idle::awake || nudged_.load(std::memory_order_relaxed) >= active) return;
    boost::unique_lock<boost::mutex> serial(run_mutex_, boost::try_to_lock);
    if (!serial.owns_lock()) return;  // a run holds the pool: its workers are up
    if (warm && warming_.load(std::memory_order_acquire) > 0) return;  // the last one's fields are still read
    nudged_.store(active, std::memory_order_relaxed);
    if (warm) {
        warm_job_ = warm;
        warm_ctx_ = ctx;
        warming_.store(std::max(0, active - 1), std::memory_order_relaxed);
        warm_word_.store((serial_ + 1) << kActiveBits | static_cast<uint64_t>(active),
                         std::memory_order_relaxed);  // published with the epoch
    }
    // A word of no work: workers 1..active-1 read it and spin (napping ones
    // see it by themselves); the others ignore it.
    epoch_.store((++serial_ << kSerialShift) | kWakeOnly | static_cast<uint64_t>(active), std::memory_order_seq_cst);
    notify_sleepers(active);
}

void WeightCentricPool::wait_warm() const {
    for (int spins = 0; warming_.load(std::memory_order_acquire) > 0; ++spins) spin_pause(spins);
}

// One nap of a worker between runs: a timed sleep the kernel ends, so a run
// starting meanwhile costs its caller no system call.
static void nap() {
    timespec t{0, WeightCentricPool::kNapMicros * 1000L};
    nanosleep(&t, nullptr);
}

void WeightCentricPool::worker_loop(int id) {
    // A nap is a timer: the default 50 us of slack would double it.
    prctl(PR_SET_TIMERSLACK, 1000UL);
    uint64_t seen = 0;
    bool nudged = false;   // the last word was wake()'s, not a run
    bool skipped = false;  // the last word was not this worker's: a run on fewer, or one its caller ended alone
    std::atomic<int>& state = idle_[id].v;
    const auto set_state = [&](Idle s, std::memory_order order) { state.store(static_cast<int>(s), order); };
    // A word this worker must act on: a run or wake() on it, a warm job it
    // owes, or the pool's end.
    const auto concerns = [&](uint64_t e) { return id < active_of(e) || owes_warm(id, seen, e) || stop_.load(); };
    std::chrono::steady_clock::time_point idle_from;
    for (;;) {
        // Spin ~50 us for the next run (back-to-back requests), then nap
        // until the nap window after the last run, then sleep so an idle
        // pool burns no CPU. Woken by wake(), spin up to 1 ms: the caller
        // meanwhile runs a short run of its burst alone, and the next should
        // find this worker spinning. A word that was not this worker's does
        // not restart the window: else a stream of runs it takes no part in
        // (a model on fewer workers of a shared pool, one-step runs its
        // callers end alone) would keep it napping for nothing, and asleep
        // it wakes only for words it must act on.
        uint64_t e = epoch_.load(std::memory_order_acquire);
        if (!skipped) idle_from = std::chrono::steady_clock::now();
        const auto spin_until = skipped ? idle_from : idle_from + std::chrono::microseconds(nudged ? 1000 : 50);
        // The word is read after every pause, the clock after every 64: a
        // pause takes 25 ns on a Zen 4 core (about 40 on Intel's), and with
        // the word read only every 64 pauses each run started up to 1.6 us
        // late (an empty pool run took 1.6-1.7 us back to back; 0.08-0.18
        // now).
        for (int i = 0; e == seen; ++i) {
            if (i % 64 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
            cpu_relax();
            e = epoch_.load(std::memory_order_acquire);
        }
        if (e == seen) {
            set_state(Idle::napping, std::memory_order_relaxed);
            // The window is read at every nap: an application may shorten it
            // (on battery) while this worker naps.
            while (e == seen && std::chrono::steady_clock::now() < idle_from + std::chrono::microseconds(nap_window())) {
                nap();
                naps_.fetch_add(1, std::memory_order_relaxed);
                e = epoch_.load(std::memory_order_acquire);
            }
            if (e == seen) {
                boost::unique_lock<boost::mutex> lock(sleep_mutex_);
                set_state(Idle::asleep, std::memory_order_seq_cst);
                while ((e = epoch_.load(std::memory_order_seq_cst)) == seen || !concerns(e)) wake_.wait(lock);
            }
            set_state(Idle::awake, std::memory_order_relaxed);
            nudged_.store(0, std::memory_order_relaxed);
        }
        // The last warm job, if this worker owes it: run it if this word is
        // it, else (a later word came first) only count it off.
        if (owes_warm(id, seen, e)) {
            if (warm_word_.load(std::memory_order_relaxed) >> kActiveBits == e >> kSerialShift && !stop_.load()) {
                try {
                    warm_job_(warm_ctx_, id);
                } catch (...) {  // a warm-up is a hint: nothing to report
                }
            }
            warming_.fetch_sub(1, std::memory_order_release);
        }
        if (stop_.load()) return;
        seen = e;
        // A worker may see a later run's word directly where the run does
        // not use it or its caller ended it alone; one the run waits for cannot.
        const int active = active_of(e);
        nudged = (e & kWakeOnly) && id < active;
        skipped = id >= active || ((e & kMayEndAlone) && !enter(e >> kSerialShift));  // not its run, or ended alone
        if (skipped || (e & kWakeOnly)) continue;
        try {
            job_(ctx_, id);
        } catch (...) {
            errors_[id] = std::current_exception();
        }
        // The caller may wait for fewer than active - 1 (a run it ended alone): each tells it.
        done_.fetch_add(1, std::memory_order_seq_cst);
        if (caller_waiting_.load(std::memory_order_seq_cst)) {
            { boost::lock_guard<boost::mutex> lock(sleep_mutex_); }
            finished_.notify_one();
        }
    }
}

double measure_awake_dispatch() {
    static const double measured = [] {
        if (physical_cores().size() < 2) return 0.0;
        try {
            WeightCentricPool pool(2, true, 0);
            auto nothing = [](int) {};
            constexpr int kSamples = 7, kRuns = 200;
            // A second core busy with another program's threads hands the worker
            // time slices, not a spin: stop after 20 ms with the best sample so far.
            const auto start = std::chrono::steady_clock::now();
            double best = 1e30;
            for (int sample = 0; sample <= kSamples; ++sample) {  // sample 0 wakes the worker
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < kRuns; ++i) pool.run(nothing, 2);
                const auto t1 = std::chrono::steady_clock::now();
                if (sample > 0) best = std::min(best, std::chrono::duration<double>(t1 - t0).count() / kRuns);
                if (sample > 0 && t1 - start > std::chrono::milliseconds(20)) break;
            }
            return best;
        } catch (const boost::thread_resource_error&) {
            return 0.0;
        }
    }();
    return measured;
}

}  // namespace detail
}  // namespace deeprnn
