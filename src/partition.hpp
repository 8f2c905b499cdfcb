// partition.hpp — output-based tiling: which worker owns which hidden units.
//
// Following GRNN's output-based tiling on the CPU, the recurrent weights are
// split along the hidden units, each part holding ALL gates of its units, so
// a worker can finish the whole cell update of its units without waiting for
// anyone: one barrier per step. Slices are multiples of the SIMD width so
// every gate of every slice starts on a vector boundary.
#pragma once
#include "common.hpp"

#include <algorithm>
#include <vector>

namespace deeprnn {
namespace detail {

struct Slice {
    int begin = 0;  // first unit
    int size = 0;   // units owned
    int padded = 0; // size rounded up to the SIMD width (the packed stride)
};

// Splits `units` into at most `parts` slices of whole vectors of `width`
// (fewer when there are not enough vectors to go round).
std::vector<Slice> split_units(int units, int parts, int width);

// GRU reset-before-matmul sums its reset product U_r·h in fixed chunks of the
// state units, whatever the worker count: chunk c is units [c*C, (c+1)*C),
// the last one possibly short, with C = width * max(4, ceil(vectors / 8)), so
// there are at most 8 chunks, and none narrower than 4 vectors (64 units with
// AVX-512): a kernel call per chunk costs the one-worker form ~20% per step
// at hidden 128 with chunks of one vector (docs/ENGINE.md). P_c, the partial sum of chunk c, is summed in
// increasing k; U_r·h adds the P_c along a fixed pairwise tree: node [lo, hi)
// of chunks = node [lo, mid) + node [mid, hi), mid = rbm_tree_mid(lo, hi), the
// root [0, n). Every execution of the cell (one worker, two barriers, one
// barrier) adds in this order: its results do not depend on which form or how
// many workers run it (engine.cpp). A tree rather than a left fold lets a
// worker of the one-barrier form add up the nodes inside its own chunks before
// publishing them (one node for 2 workers and 8 chunks, not 4 partial sums).
constexpr int kMaxRbmChunks = 8;
inline int rbm_chunk_units(int units, int width) {
    const int vectors = (units + width - 1) / width;
    return width * std::max(4, (vectors + 7) / 8);
}
inline int rbm_chunk_count(int units, int width) {
    const int c = rbm_chunk_units(units, width);
    return (units + c - 1) / c;
}

// The split of tree node [lo, hi): lo + the largest power of two below hi - lo.
inline int rbm_tree_mid(int lo, int hi) {
    int w = 1;
    while (2 * w < hi - lo) w *= 2;
    return lo + w;
}
// Maximal tree nodes inside chunks [a, b) of the tree node [lo, hi): what a
// worker owning those chunks publishes in the one-barrier form.
inline int rbm_tree_nodes(int lo, int hi, int a, int b) {
    if (hi <= a || lo >= b) return 0;
    if (a <= lo && hi <= b) return 1;
    const int mid = rbm_tree_mid(lo, hi);
    return rbm_tree_nodes(lo, mid, a, b) + rbm_tree_nodes(mid, hi, a, b);
}

// Like split_units, in whole chunks of `chunk` units (a multiple of width);
// padded is still the size rounded up to `width`.
std::vector<Slice> split_chunks(int units, int parts, int chunk, int width);

// Which workers run one direction of one layer.
struct PartitionPlan {
    int first_worker = 0;           // group = workers [first_worker, first_worker + slices.size())
    std::vector<Slice> slices;      // hidden units per worker of the group
    std::vector<Slice> proj_slices; // LSTM projection outputs per worker (empty if none)
    int workers() const { return static_cast<int>(slices.size()); }
};

// The plans, indexed layer*directions + direction, for a model whose
// schedule (schedule.hpp) chose `workers` per direction, the directions side
// by side on disjoint groups or in turn; or, `pipelined` (one direction), one
// worker per stage of consecutive layers: stage w runs layers
// [w*layers/workers, (w+1)*layers/workers) whole, a step behind the stage before.
// chunk > 0 (GRU reset-before-matmul with one barrier): slices of whole chunks.
std::vector<PartitionPlan> plan_partitions(int layers, int directions, int hidden, int proj, int width, int workers,
                                           bool side_by_side, bool pipelined, int chunk = 0);

// The pipeline stage (= worker) of `layer` among `layers` split over `stages`.
inline int pipeline_stage(int layer, int layers, int stages) { return static_cast<int>((static_cast<long>(layer) * stages) / layers); }

}  // namespace detail
}  // namespace deeprnn
