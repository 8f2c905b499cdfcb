// partition.cpp — slicing hidden units across workers.
#include "partition.hpp"

#include <algorithm>

namespace deeprnn {
namespace detail {

std::vector<Slice> split_units(int units, int parts, int width) {
    const int vectors = (units + width - 1) / width;
    parts = std::max(1, std::min(parts, vectors));
    std::vector<Slice> out;
    int begin = 0;
    for (int p = 0; p < parts; ++p) {
        // Vectors are dealt as evenly as possible; the last slice absorbs the ragged end.
        const int v = vectors / parts + (p < vectors % parts ? 1 : 0);
        Slice s;
        s.begin = begin;
        s.size = std::min(units - begin, v * width);
        s.padded = (s.size + width - 1) / width * width;
        begin += s.size;
        out.push_back(s);
    }
    return out;
}

// Below this many bytes of recurrent weights per direction, a step is too
// short (well under a microsecond from L2) to repay a barrier per step.
constexpr size_t kSplitThresholdBytes = 192 * 1024;

std::vector<PartitionPlan> plan_partitions(int pool_size, int directions, int hidden, int proj, int width,
                                           size_t recurrent_bytes) {
    // Directions get disjoint worker groups when there are enough workers
    // (parallel-GEMMs-in-parallel); otherwise they share all workers in turn.
    const bool side_by_side = directions == 2 && pool_size >= 2;
    const int group = side_by_side ? pool_size / 2 : pool_size;
    const int wanted = recurrent_bytes < kSplitThresholdBytes ? 1 : group;
    std::vector<PartitionPlan> plans(directions);
    for (int d = 0; d < directions; ++d) {
        PartitionPlan& p = plans[d];
        p.first_worker = side_by_side ? d * group : 0;
        p.slices = split_units(hidden, wanted, width);
        if (proj > 0) p.proj_slices = split_units(proj, p.workers(), width);
        // Projection outputs may have fewer vectors than workers: pad with empty slices.
        while (proj > 0 && static_cast<int>(p.proj_slices.size()) < p.workers()) p.proj_slices.push_back(Slice{proj, 0, 0});
    }
    return plans;
}

}  // namespace detail
}  // namespace deeprnn
