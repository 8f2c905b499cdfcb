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

std::vector<Slice> split_chunks(int units, int parts, int chunk, int width) {
    std::vector<Slice> out = split_units(units, parts, chunk);
    for (Slice& s : out) s.padded = (s.size + width - 1) / width * width;
    return out;
}

std::vector<PartitionPlan> plan_partitions(int layers, int directions, int hidden, int proj, int width, int workers,
                                           bool side_by_side, bool pipelined, int chunk) {
    side_by_side = side_by_side && directions == 2;
    pipelined = pipelined && directions == 1 && workers > 1;
    std::vector<PartitionPlan> plans(static_cast<size_t>(layers) * directions);
    for (int l = 0; l < layers; ++l)
        for (int d = 0; d < directions; ++d) {
            PartitionPlan& p = plans[static_cast<size_t>(l) * directions + d];
            p.first_worker = pipelined ? pipeline_stage(l, layers, workers) : side_by_side ? d * workers : 0;
            p.slices = chunk > 0 && !pipelined ? split_chunks(hidden, workers, chunk, width)
                                               : split_units(hidden, pipelined ? 1 : workers, width);
            if (proj > 0) p.proj_slices = split_units(proj, p.workers(), width);
            // Projection outputs may have fewer vectors than workers: pad with empty slices.
            while (proj > 0 && static_cast<int>(p.proj_slices.size()) < p.workers()) p.proj_slices.push_back(Slice{proj, 0, 0});
        }
    return plans;
}

}  // namespace detail
}  // namespace deeprnn
