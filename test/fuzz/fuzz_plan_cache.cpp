// libFuzzer entry point; the body is fuzz_plan_cache in targets.cpp.
#include <cstddef>
#include <cstdint>

int fuzz_plan_cache(const uint8_t* data, size_t size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_plan_cache(data, size); }
