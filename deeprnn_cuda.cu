// deeprnn_cuda.cu — the optional persistent-kernel GPU backend.
//
// NOT BUILT YET (issue 11). This stub exists so the build options that select
// CUDA (CMake DEEPRNN_CUDA, make CUDA=1) are exercised by nvcc today. The
// library reports "cuda: not built" and refuses Config.backend = cuda.
extern "C" const char* deeprnn_cuda_status() { return "not built: the CUDA backend is not implemented yet"; }
