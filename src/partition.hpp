// partition.hpp — output-based tiling: which worker owns which hidden units.
//
// Following GRNN's output-based tiling on the CPU, the recurrent weights are
// split along the hidden units, each part holding ALL gates of its units, so
// a worker can finish the whole cell update of its units without waiting for
// anyone: one barrier per step. Slices are multiples of the SIMD width so
// every gate of every slice starts on a vector boundary.
#pragma once
#include "common.hpp"

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
std::vector<PartitionPlan> plan_partitions(int layers, int directions, int hidden, int proj, int width, int workers,
                                           bool side_by_side, bool pipelined);

// The pipeline stage (= worker) of `layer` among `layers` split over `stages`.
inline int pipeline_stage(int layer, int layers, int stages) { return static_cast<int>((static_cast<long>(layer) * stages) / layers); }

}  // namespace detail
}  // namespace deeprnn
