// libFuzzer entry point; the body is fuzz_torch in targets.cpp.
#include <cstddef>
#include <cstdint>

int fuzz_torch(const uint8_t* data, size_t size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_torch(data, size); }
