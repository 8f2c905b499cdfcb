// libFuzzer entry point; the body is fuzz_onnx in targets.cpp.
#include <cstddef>
#include <cstdint>

int fuzz_onnx(const uint8_t* data, size_t size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_onnx(data, size); }
