// roofline — prints this machine's measured ceilings (see roofline.hpp).
//   roofline [--sample-seconds S] [--samples N]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "roofline.hpp"

int main(int argc, char** argv) {
    bench::prepare_openblas(argv, false);
    double sample_seconds = 0.002;  // short samples, many of them: the best one is
    int samples = 101;              // the ceiling even when the machine is shared
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--sample-seconds") && i + 1 < argc) {
            sample_seconds = std::atof(argv[++i]);
        } else if (!std::strcmp(argv[i], "--samples") && i + 1 < argc) {
            samples = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: %s [--sample-seconds S] [--samples N]\n", argv[0]);
            return 2;
        }
    }
    bench::Roofline roof = bench::measure_roofline(sample_seconds, samples > 0 ? samples : 1);
    const auto& c = roof.caches;
    std::printf("caches: L1d %zu KiB/core, L2 %zu KiB/core, L3 %zu KiB shared; %d samples of %.3f s per point\n\n",
                c.l1 >> 10, c.l2 >> 10, c.l3 >> 10, samples, sample_seconds);
    bench::print_roofline(roof, stdout);
    return 0;
}
